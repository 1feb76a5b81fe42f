"""The timings line (`SCORECLI_TIMINGS=1`): the stages of a run in the order they ended, each named
once, counted from the start; benchmarks/gpu_compare.py reads it to say where a GPU run's
start-up went."""

from __future__ import annotations

import time

import pytest

from scorecli import Scorer, timings


@pytest.fixture
def recording():
    timings.enable(time.perf_counter())
    yield
    timings._MARKS.clear()
    timings._ON.clear()


def seconds(line: str) -> dict[str, float]:
    """{stage: seconds since the start} of a timings line, in its order."""
    parts = (p.rsplit(" ", 2) for p in line.removeprefix("timings (since start): ").split(", "))
    return {name: float(value) for name, value, _unit in parts}


def test_marks_are_named_once_in_order(recording):
    timings.mark("a")
    timings.mark("b")
    timings.mark("a")  # a stage ends once: the first time stands
    line = timings.line()
    assert line is not None and line.startswith("timings (since start): a ")
    assert list(seconds(line)) == ["a", "b"]


def test_no_line_unless_enabled():
    timings.mark("a")
    assert timings.line() is None


def test_a_model_load_is_split_into_its_stages(recording, qwen3_seq_cls):
    Scorer(qwen3_seq_cls, device="cpu", dtype="float32")
    stages = seconds(timings.line())
    names = list(stages)
    for before, after in [
        ("weights read", "on the device"),
        ("on the device", "model loaded"),
        ("model loaded", "self-checked"),
    ]:
        assert names.index(before) < names.index(after)
    assert list(stages.values()) == sorted(stages.values())
