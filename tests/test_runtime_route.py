"""`--runtime auto` by sequence length (`scorecli.runtimes.auto`, `scorecli.runtimes.route`):
timed as the run runs (every stream at once), at several lengths; each batch runs on the
runtime faster at its length; the self-check probes both; a resumed job cuts where it began."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time

import numpy as np
import pytest

from scorecli.runtimes import auto
from scorecli.runtimes.route import Route, Routed, each_runtime
from tests.auto_runtime import keep_verdict, run_job
from tests.builders.models import build_bert_cross_encoder

WORDS = "mars red planet iron oxide sun moon rice water library nine weekday".split()


def _spin(seconds: float) -> None:
    """Take `seconds` of this thread's CPU (what `auto.measure` clocks on one thread a stream)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_route_reads_back_what_it_writes():
    for route in (Route("onnx"), Route("torch"), Route("onnx", "torch", 230), Route("torch", "onnx", 90)):
        assert Route.parse(route.text()) == route
        cut = str(route.cut) if route.second else ""
        assert Route.from_metadata(route.name, cut) == route
    assert Route.parse("onnx:x:torch") is None and Route.parse("") is None
    assert Route.from_metadata("onnx+torch", "") is None and Route.from_metadata(None, None) is None
    route = Route("onnx", "torch", 100)
    assert [route.runtime_for(n) for n in (1, 100, 101, 5000)] == ["onnx", "onnx", "torch", "torch"]
    assert Route("torch").runtime_for(10**6) == "torch"


class _Batch:
    def __init__(self, max_len: int):
        self.max_len = max_len


class _Forward:
    def __init__(self, name: str, calls: list):
        self.name, self.calls = name, calls

    def twin(self):
        return _Forward(self.name + "'", self.calls)

    def __call__(self, batch, *args):
        self.calls.append((self.name, batch.max_len, args))
        return self.name


def test_routed_runs_each_batch_where_its_length_says():
    calls: list = []
    routed = Routed(Route("onnx", "torch", 64), {"onnx": _Forward("onnx", calls), "torch": _Forward("torch", calls)})
    twin = routed.twin()
    assert [routed(_Batch(n), None) for n in (10, 64, 65)] == ["onnx", "onnx", "torch"]
    assert [twin(_Batch(n)) for n in (10, 300)] == ["onnx'", "torch'"]  # a twin's own forwards
    assert calls[0] == ("onnx", 10, (None,))
    seen = []
    for name in each_runtime(twin):  # forced in the forward and in every twin of it
        seen.append((name, routed(_Batch(10)), twin(_Batch(1000))))
    assert seen == [("onnx", "onnx", "onnx'"), ("torch", "torch", "torch'")]
    assert routed(_Batch(1000)) == "torch" and twin(_Batch(1)) == "onnx'"  # unforced after
    assert list(each_runtime(_Forward("torch", calls))) == [None]


def _times(lengths, ratios):
    """Probe times whose torch/onnx ratio is `ratios` at `lengths` (about 0.3 s a probe)."""
    return {"torch": [0.3 * r for r in ratios], "onnx": [0.3] * len(lengths)}


def test_verdict_cuts_where_the_runtimes_cross():
    lengths = [32, 128, 512]
    # the AMD EPYC's figures (benchmarks/RESULTS.md 2026-11-27): onnx wins short, torch long
    route, reason = auto.verdict(lengths, _times(lengths, [1.167, 1.079, 0.896]))
    assert route.first == "onnx" and route.second == "torch" and 128 < route.cut < 512
    assert f"up to {route.cut} tokens" in reason and "\n" not in reason and reason.startswith("auto: onnx for ")
    # torch wins short, onnx long: the other way round
    route, _ = auto.verdict(lengths, _times(lengths, [0.8, 0.9, 1.2]))
    assert route.first == "torch" and route.second == "onnx" and 128 < route.cut < 512
    # one runtime faster everywhere: it alone, as the single-runtime reason says
    route, reason = auto.verdict(lengths, _times(lengths, [0.95, 0.9, 0.93]))
    assert route == Route("torch") and reason.startswith("auto: torch ran 1.08x as fast as onnx on this machine")
    assert auto.verdict(lengths, _times(lengths, [1.1, 1.2, 1.05]))[0] == Route("onnx")
    # a crossing worth less than SPLIT_GAIN of the time: the better one alone
    assert auto.verdict(lengths, _times(lengths, [1.004, 1.002, 0.998]))[0] == Route("onnx")
    assert auto.verdict(lengths, _times(lengths, [1.0, 1.0, 1.0]))[0] == Route("torch")  # a tie: torch


def test_measure_times_every_stream_at_once():
    """A runtime that wins alone but slows down when the run's streams share the machine (ONNX
    Runtime's lead fell from 14-19% alone to 1-10% with both streams on the AMD EPYC) loses."""
    active, lock, peak = [0], threading.Lock(), [0]

    def crowded(batch):  # 0.01 s alone, 0.06 s while another stream runs it too
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            time.sleep(0.01)  # let a concurrent call arrive
            with lock:
                together = active[0] > 1
            _spin(0.06 if together else 0.01)
        finally:
            with lock:
                active[0] -= 1

    def steady(batch):
        time.sleep(0.01)
        _spin(0.03)

    probes = [_Batch(32)]
    alone = auto.measure({"torch": [steady], "onnx": [crowded]}, probes, 1)
    assert alone["onnx"][0] < alone["torch"][0]
    both = auto.measure({"torch": [steady, steady], "onnx": [crowded, crowded]}, probes, 1)
    assert peak[0] == 2 and both["onnx"][0] > both["torch"][0]
    assert auto.verdict([32], both)[0] == Route("torch")


def _slowed_by_length(cls, when, seconds: float):
    """`cls.__call__` taking `seconds` more of this thread's CPU on batches whose longest
    sequence `when(max_len)` holds."""
    call = cls.__call__

    def slow(self, batch, *args, **kwargs):
        if when(batch.max_len):
            _spin(seconds)
        return call(self, batch, *args, **kwargs)

    return slow


def _rows(n: int = 12) -> list[dict]:
    """Rows whose items run from a few tokens to ~200 (pairs shorter and longer than ~80)."""
    return [
        {
            "id": i,
            "query": " ".join(WORDS[i % 4 : i % 4 + 3]),
            "items": [" ".join((WORDS[(i + j) % 12 :] + WORDS) * (1 + 2 * ((i + j) % 3))) for j in range(3)],
        }
        for i in range(n)
    ]


def _reference(path, rows) -> np.ndarray:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, attn_implementation="eager").eval()
    with torch.inference_mode():
        return np.stack(
            [model(**tok(r["query"], item, return_tensors="pt")).logits[0].numpy() for r in rows for item in r["items"]]
        )


@pytest.mark.skipif(auto.run_streams(2) < 2, reason="needs a torch thread for each of two CPU streams")
def test_auto_routes_short_batches_to_one_runtime_and_long_to_the_other(tmp_path, monkeypatch):
    """Torch made slower on short batches and ONNX Runtime on long ones: auto measures both at
    several lengths, cuts between them, and every batch runs where its length says; the scores
    are the model's own, the metadata names both runtimes and the cut, and a later run reads the
    verdict."""
    pytest.importorskip("onnxruntime")
    from scorecli.runtimes.forward import EncoderForward
    from scorecli.runtimes.onnx import OnnxForward
    from scorecli.scorer import Scorer

    path = build_bert_cross_encoder(tmp_path / "m", num_labels=2)
    monkeypatch.setattr(EncoderForward, "__call__", _slowed_by_length(EncoderForward, lambda n: n <= 80, 0.1))
    monkeypatch.setattr(OnnxForward, "__call__", _slowed_by_length(OnnxForward, lambda n: n > 80, 0.1))
    scorer = Scorer(str(path), device="cpu", runtime="auto", cache_dir=str(tmp_path / "cache"), max_batch_tokens=400)
    route = scorer.family.forward.route
    assert route.first == "onnx" and route.second == "torch" and 32 < route.cut < 128
    meta = scorer.metadata
    assert meta["runtime"] == "onnx+torch" and meta["runtime_cut_tokens"] == str(route.cut)
    assert meta["runtime_reason"].startswith(f"auto: onnx for batches of sequences up to {route.cut} tokens")
    assert (
        meta["attention"] == f"onnxruntime (fused encoder export) up to {route.cut} tokens, sdpa (fused encoder) beyond"
    )
    assert meta["self_check"].startswith("passed")
    (record,) = (tmp_path / "cache" / "runtime").iterdir()
    assert json.loads(record.read_text())["route"] == route.text()

    calls: list = []
    for cls in (EncoderForward, OnnxForward):
        slowed = cls.__call__
        monkeypatch.setattr(
            cls, "__call__", lambda self, b, *a, s=slowed, c=cls: calls.append((c, b.max_len)) or s(self, b, *a)
        )
    import pyarrow as pa

    rows = _rows()
    table = scorer.score_table(pa.Table.from_pylist(rows))
    ran = {cls: [n for c, n in calls if c is cls] for cls in (EncoderForward, OnnxForward)}
    assert ran[OnnxForward] and ran[EncoderForward]  # both ran, each on its own lengths
    assert max(ran[OnnxForward]) <= route.cut < min(ran[EncoderForward])
    ours = np.array([s for row in table["scores"].to_pylist() for s in row]).reshape(-1, 2)
    assert np.abs(ours - _reference(path, rows)).max() <= 1e-4

    monkeypatch.setattr(auto, "measure", lambda *a: pytest.fail("measured again"))
    again = Scorer(str(path), device="cpu", runtime="auto", cache_dir=str(tmp_path / "cache"))
    assert again.family.forward.route == route and again.metadata["runtime_reason"] == meta["runtime_reason"]


def test_self_check_probes_both_runtimes_of_a_route(tmp_path, monkeypatch):
    """The probe's pairs are short, so a routed run would send them all to the short batches'
    runtime: the self-check runs them through each runtime, and a wrong long-batch runtime fails."""
    pytest.importorskip("onnxruntime")
    import dataclasses

    from scorecli.checks.selfcheck import SelfCheckError
    from scorecli.runtimes.forward import EncoderForward
    from scorecli.scorer import Scorer

    path = build_bert_cross_encoder(tmp_path / "m")
    keep_verdict(path, tmp_path / "cache", "onnx:500:torch")  # the probe's pairs are far shorter
    scorer = Scorer(str(path), device="cpu", runtime="auto", cache_dir=str(tmp_path / "cache"))
    assert scorer.runtime == "onnx+torch" and scorer.metadata["self_check"].startswith("passed")
    call = EncoderForward.__call__

    def wrong(self, batch, pooling):
        out = call(self, batch, pooling)
        return dataclasses.replace(out, logits=out.logits + 1.0)

    monkeypatch.setattr(EncoderForward, "__call__", wrong)
    # a run that builds the model checks both at start-up; one whose model's answers are remembered
    # builds it, and checks torch, when a batch first goes there (tests/test_remembered.py)
    shutil.rmtree(tmp_path / "cache" / "remembered")
    with pytest.raises(SelfCheckError):
        Scorer(str(path), device="cpu", runtime="auto", cache_dir=str(tmp_path / "cache"))


def test_a_resumed_routed_job_cuts_where_it_began(tmp_path, monkeypatch):
    """`--resume` of a job `auto` ran on two runtimes by length goes on with the same route and
    cut though the verdict changed since (resumed == uninterrupted, the same bits); without
    onnxruntime it is refused, one line, the parts kept."""
    pytest.importorskip("onnxruntime")

    from scorecli.config import ScoreConfig
    from scorecli.errors import UsageError

    model = build_bert_cross_encoder(tmp_path / "m", num_labels=2)
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    cache = tmp_path / "cache"
    cfg = ScoreConfig(model=model, window_rows=2, cache_dir=str(cache), max_batch_tokens=400)
    paths = [str(inp)]
    keep_verdict(model, cache, "onnx:60:torch")

    def run(out: str, resume: bool = False, stop: int | None = None):
        return run_job(cfg, paths, str(tmp_path / out), resume, stop)

    whole = run("whole.parquet")
    meta = whole.schema.metadata
    assert meta[b"runtime"] == b"onnx+torch" and meta[b"runtime_cut_tokens"] == b"60"
    with pytest.raises(KeyboardInterrupt, match="rows kept"):
        run("job.parquet", stop=7)
    shutil.rmtree(cache / "runtime")
    keep_verdict(model, cache, "torch")  # measured again since: torch alone
    alone = run("torch.parquet")
    assert alone.schema.metadata[b"runtime"] == b"torch"
    assert alone["scores"] != whole["scores"]  # the runtimes' scores differ in their last bits
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime -> ImportError
    with pytest.raises(UsageError, match="no longer installed") as err:
        run("job.parquet", resume=True)
    assert "\n" not in str(err.value) and os.path.isdir(tmp_path / "job.parquet.partial")
    monkeypatch.delitem(sys.modules, "onnxruntime")
    got = run("job.parquet", resume=True)
    assert got.select(["id", "scores"]).equals(whole.select(["id", "scores"]))
    for key in (b"runtime", b"runtime_cut_tokens", b"runtime_reason", b"attention"):
        assert got.schema.metadata[key] == meta[key]


def test_a_route_cut_beyond_max_seq_len_names_its_first_runtime_alone(tmp_path):
    """A verdict cutting at 300 tokens, a run whose sequences are at most 64 (--max-seq-len):
    only ONNX Runtime can run, so the metadata names it alone (not `onnx+torch` and a cut that
    no batch reaches), and the scores are the model's own."""
    pytest.importorskip("onnxruntime")
    import pyarrow as pa

    from scorecli.scorer import Scorer

    path = build_bert_cross_encoder(tmp_path / "m", num_labels=2)
    keep_verdict(path, tmp_path / "cache", "onnx:300:torch")
    scorer = Scorer(str(path), device="cpu", runtime="auto", cache_dir=str(tmp_path / "cache"), max_seq_len=64)
    meta = scorer.metadata
    assert meta["runtime"] == "onnx" and meta["runtime_cut_tokens"] == ""
    assert meta["attention"] == "onnxruntime (fused encoder export)"
    assert "onnx alone" in meta["runtime_reason"]
    rows = [{"query": "mars", "items": ["red planet", "rice water"]}]
    table = scorer.score_table(pa.Table.from_pylist(rows))
    ours = np.array(table["scores"].to_pylist()[0])
    assert np.abs(ours - _reference(path, rows)).max() <= 1e-4


@pytest.mark.parametrize("chosen", ["onnx", "onnx:60:torch"])
def test_a_resumed_onnx_job_on_another_dtype_says_how_to_go_on(tmp_path, chosen):
    """A job `auto` ran on ONNX Runtime (alone, or for short batches), resumed with `--dtype bfloat16` (which ONNX Runtime
    cannot run): refused in one line that says to go on as it began or start over (exit 2), not
    to "run the same command with --resume", which meets the same refusal; the parts kept."""
    pytest.importorskip("onnxruntime")

    from scorecli.config import ScoreConfig
    from scorecli.errors import UsageError

    model = build_bert_cross_encoder(tmp_path / "m")
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    cache = tmp_path / "cache"
    cfg = ScoreConfig(model=model, window_rows=2, cache_dir=str(cache))
    keep_verdict(model, cache, chosen)
    out = str(tmp_path / "job.parquet")
    with pytest.raises(KeyboardInterrupt, match="rows kept"):
        run_job(cfg, [str(inp)], out, stop=3)
    other = ScoreConfig(model=model, window_rows=2, cache_dir=str(cache), dtype="bfloat16")
    with pytest.raises(UsageError) as err:
        run_job(other, [str(inp)], out, resume=True)
    said = str(err.value)
    assert "\n" not in said and said.startswith("--resume: the kept rows were scored by onnx"), said
    # one phrasing, whether `onnx.choose` (onnx alone) or `auto.settle` (the route) finds it out
    name = "onnx" if chosen == "onnx" else "onnx+torch"
    assert said.startswith(
        f"--resume: the kept rows were scored by {name} (--runtime auto chose it), which cannot run here now: "
        "ONNX Runtime cannot run this model (it runs float32 models on the CPU only); "
    ), said
    assert said.endswith("or without --resume to start over") and "run the same command" not in said, said
    assert err.value.exit_code == 2 and os.path.isdir(out + ".partial")


def test_a_resumed_route_whose_onnx_cannot_open_is_refused_in_the_same_phrasing():
    """A resumed route whose ONNX forward cannot open here now (`auto.settle`: no exporter, an
    unwritable cache) is refused in the words `onnx.choose` uses for a model ONNX Runtime cannot
    run (`errors.runtime_gone`), not in a phrasing of its own; no forward is built."""
    from scorecli.config import ScoreConfig
    from scorecli.errors import ResumeRefused

    cfg = ScoreConfig(model="m", runtime="auto", runtime_route="onnx:60:torch")

    def unused(*args):
        raise AssertionError("a refused job builds and runs no forward")

    why_not = "auto: ONNX Runtime cannot run here (no exporter)"  # as `onnx.open_forward` says it
    with pytest.raises(ResumeRefused) as err:
        auto.settle(cfg, "onnx", "auto", lambda: (None, why_not), unused, unused, unused, unused, 1, 1)
    assert str(err.value) == (
        "--resume: the kept rows were scored by onnx+torch (--runtime auto chose it), which cannot run here now: "
        "ONNX Runtime cannot run here (no exporter); "
        "run with the --device and --dtype the job began with, or without --resume to start over"
    )
