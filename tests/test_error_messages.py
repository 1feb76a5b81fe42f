"""What a run says when something goes wrong is one line that names the thing (docs/cli.md: Exit codes),
through the real console script: a full output device or --json file named with its path, a
newline in --out kept inside the summary's one line, $SCORECLI_CACHE_DIR named as such, a missing
query or items field pointing at --query-field / --items-field, an interrupt of a streamed output
saying what the reader already has; and a float16 id written to JSON lines as the value the input
held. The runs start together (two at a time) in one fixture."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_cli import GOOD_LINE, SCORECLI, Case, Result, _env, run_cli, write

pytestmark = pytest.mark.e2e  # the console script (or Ray) end to end

FULL = "/dev/full"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, qwen3_seq_cls) -> dict[str, tuple[Result, Path]]:
    tmp = tmp_path_factory.mktemp("messages")
    good = write(tmp / "good.jsonl", b"".join(GOOD_LINE % i for i in (1, 2, 3)))
    ids = tmp / "ids.parquet"
    pq.write_table(
        pa.table(
            {"id": pa.array(np.array([65504, 0.0999755859375], np.float16)), "query": ["q", "r"], "items": [["a"]] * 2}
        ),
        ids,
    )
    m = ["--model", qwen3_seq_cls]
    cases = {
        "dev_full": Case(["score", good, *m, "--out", FULL]),
        "bench_json_full": Case(["bench", *m, "--rows", "1", "--items", "2", "--repeats", "1", "--json", FULL]),
        "newline_out": Case(["score", good, *m, "--out", str(tmp / "a\nb.jsonl")]),
        "cache_env": Case(["score", good, *m, "--out", str(tmp / "c.jsonl")], env=_env(SCORECLI_CACHE_DIR=os.devnull)),
        "cache_flag": Case(["score", good, *m, "--out", str(tmp / "c.jsonl"), "--cache-dir", os.devnull]),
        "no_query": Case(["score", write(tmp / "nq.jsonl", b'{"id": 1, "q": "a", "items": ["b"]}\n'), *m, "-o", "-"]),
        "no_items": Case(
            ["score", write(tmp / "ni.jsonl", b'{"id": 1, "query": "a", "docs": ["b"]}\n'), *m, "-o", "-"]
        ),
        "float16_ids": Case(["score", str(ids), *m, "--out", "-"]),
        "model_env": Case(["score", good, "--out", "-"], env=_env(SCORECLI_MODEL=str(tmp / "no-model"))),
        "model_flag": Case(["score", good, "--model", str(tmp / "no-model"), "--out", "-"]),
    }
    if not os.path.exists(FULL):
        cases = {k: v for k, v in cases.items() if FULL not in v.args}
    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(cases, pool.map(run_cli, cases.values())))
    return {name: (results[name], tmp) for name in cases}


def one_error(result: Result, code: int) -> str:
    assert result.rc == code, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.lines() if line.startswith("error: ")]
    assert len(errors) == 1 and result.lines()[-1] == errors[0], result.stderr
    return errors[0]


@pytest.mark.skipif(not os.path.exists(FULL), reason="no /dev/full")
def test_a_full_output_device_is_named(runs):
    assert one_error(runs["dev_full"][0], 1) == f"error: cannot write output {FULL}: No space left on device"
    line = one_error(runs["bench_json_full"][0], 1)  # after the table: the results were measured
    assert line == f"error: --json: cannot write {FULL}: No space left on device"


def test_a_newline_in_out_stays_inside_the_summary_line(runs):
    result, tmp = runs["newline_out"]
    assert result.rc == 0, result.stderr
    assert len(result.lines()) == 1 and result.lines()[0].endswith("-> " + str(tmp / "a\\nb.jsonl"))
    assert len((tmp / "a\nb.jsonl").read_text().splitlines()) == 3


def test_the_cache_folder_is_named_as_it_was_given(runs):
    env = one_error(runs["cache_env"][0], 2)
    assert (
        env.startswith(f"error: $SCORECLI_CACHE_DIR={os.devnull}: cannot write the cache there")
        and "--cache" not in env
    )
    assert one_error(runs["cache_flag"][0], 2).startswith(f"error: --cache-dir {os.devnull}: cannot write the cache")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_a_cache_folder_that_cannot_be_made_is_refused_though_access_allows_it(tmp_path, monkeypatch):
    """root's access() allows /proc, where no folder can be made: the run failed later instead."""
    from scorecli.errors import UsageError
    from scorecli.model import cache

    monkeypatch.setattr(cache.os, "access", lambda *a, **k: True)  # as root sees it, for any user
    with pytest.raises(UsageError, match="--cache-dir /proc/x: cannot write the cache there: /proc cannot hold"):
        cache.check_writable("/proc/x")
    cache.check_writable(str(tmp_path / "new" / "cache"))  # a folder that can be made: fine, and
    assert list(tmp_path.iterdir()) == []  # nothing left behind by the probe


def test_a_model_from_the_environment_is_named_as_such(runs):
    """A bad $SCORECLI_MODEL failed as if --model had been typed: a user who typed no model
    could not tell where the path came from."""
    result, tmp = runs["model_env"]
    assert one_error(result, 2) == f"error: cannot load model {tmp / 'no-model'}: no such model folder " + (
        "(the model $SCORECLI_MODEL names)"
    )
    assert one_error(runs["model_flag"][0], 2) == f"error: cannot load model {tmp / 'no-model'}: no such model folder"


def test_a_missing_field_points_at_the_flag_that_names_it(runs):
    line = one_error(runs["no_query"][0], 2)
    assert "nq.jsonl:1: missing field 'query'" in line and "'q'" in line and "--query-field" in line
    line = one_error(runs["no_items"][0], 2)
    assert "ni.jsonl:1: missing field 'items'" in line and "'docs'" in line and "--items-field" in line


def test_a_float16_id_is_written_as_the_value_the_input_held(runs):
    result, _ = runs["float16_ids"]
    assert result.rc == 0, result.stderr
    assert b'"id": 65504.0,' in result.stdout  # not 65500.0, its shortest float16 text
    ids = [json.loads(line)["id"] for line in result.stdout.splitlines()]
    assert ids == [65504.0, 0.0999755859375] and np.array(ids, np.float16).tolist() == ids


def test_an_interrupt_of_a_streamed_output_says_what_the_reader_has(tmp_path, qwen3_seq_cls):
    rows = b"".join(GOOD_LINE % i for i in range(400))
    args = ["score", write(tmp_path / "many.jsonl", rows), "-m", qwen3_seq_cls, "-o", "-", "--window-rows", "1"]
    proc = subprocess.Popen(
        SCORECLI + args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    first = proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=120)
    lines = err.decode().splitlines()
    assert proc.returncode == 130 and json.loads(first)["id"] == 0
    got = len((first + rest).splitlines())
    assert lines[-1].startswith("interrupted: standard output got the first ") and lines[-1].endswith(" rows at most")
    assert got <= int(lines[-1].split("first ")[1].split(" ")[0].replace(",", "")) < 400
