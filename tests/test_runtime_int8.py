"""`--runtime onnx-int8` (`scorecli.runtimes.int8`, `scorecli.checks.drift`): opt-in only, its drift from
the torch forward measured by the self-check and recorded in the metadata and on stderr, never
silent; the int8 model cached next to the float32 export, and never left half written."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from scorecli.checks.drift import DRIFT_ITEMS, pairs_ordered_alike
from scorecli.checks.selfcheck import PROBE_QUERY, SelfCheckError
from scorecli.errors import UsageError
from scorecli.scorer import Scorer
from tests.builders.models import build_bert_cross_encoder

pytest.importorskip("onnxruntime")

PROBE = [item.strip() for item in DRIFT_ITEMS]
# the drift probe itself, alone in its batch as in the self-check: int8 scores shift a little with
# what shares their batch (activations are quantized with one scale per batch)
ROWS = [{"id": 1, "query": PROBE_QUERY, "items": PROBE}]
DRIFT_KEYS = ("self_check_max_score_change", "self_check_pair_order_agreement", "self_check_probe_items")


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory) -> str:
    return build_bert_cross_encoder(tmp_path_factory.mktemp("int8") / "m")


def _reference(path: str, rows: list[dict]) -> list[np.ndarray]:
    """The model's own forward (transformers, eager), one pair at a time: [items] per row."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, attn_implementation="eager").eval()
    with torch.inference_mode():
        return [
            np.array([model(**tok(r["query"], item, return_tensors="pt")).logits[0, 0].item() for item in r["items"]])
            for r in rows
        ]


def _cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scorecli", "score", *args], check=False, capture_output=True, text=True, cwd=cwd
    )


def _int8_files(cache) -> list[str]:
    return sorted(glob.glob(os.path.join(str(cache), "onnx", "*", "model_quint8-*.onnx")))


@pytest.mark.e2e
def test_cli_int8_end_to_end_records_the_drift(cross_encoder, tmp_path):
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    cache, out = tmp_path / "cache", tmp_path / "out.parquet"
    run = _cli(
        "in.jsonl",
        "--out",
        str(out),
        "--model",
        cross_encoder,
        "--runtime",
        "onnx-int8",
        "--cache-dir",
        str(cache),
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    notes = [line for line in run.stderr.splitlines() if "int8-approximate" in line]
    assert len(notes) == 1 and notes[0].startswith("note: --runtime onnx-int8 scores are int8-approximate")
    table = pq.read_table(out)
    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    assert meta["runtime"] == "onnx-int8" and "int8" in meta["attention"]
    assert meta["self_check"].startswith("measured (int8-approximate)")
    change, agreement = float(meta["self_check_max_score_change"]), float(meta["self_check_pair_order_agreement"])
    assert meta["self_check_probe_items"] == str(len(PROBE)) == "8"
    assert np.isfinite(change) and 0.0 < change < 0.1  # really quantized, and close
    assert 0.0 <= agreement <= 1.0
    # the figures are the run's scores of the probe against the model's own forward
    ours = [np.array(s, dtype=np.float64) for s in table["score"].to_pylist()]
    theirs = _reference(cross_encoder, ROWS)
    assert change == pytest.approx(np.abs(ours[0] - theirs[0]).max(), abs=1e-5)
    same = sum((a - b) * (c - d) > 0 for (a, c), (b, d) in _pairs(ours[0], theirs[0]))
    assert agreement == pytest.approx(same / 28)
    # close, not identical: the tiny random model's logits (~0.1) are small next to its hidden states,
    # so int8's error is ~10% of them here (MiniLM with a random head: 0.035 absolute)
    assert np.abs(ours[0] - theirs[0]).max() <= 0.25 * np.abs(theirs[0]).max() and agreement >= 0.75
    # a second run reads the cached int8 model; --quiet: no note
    (made,) = _int8_files(cache)
    stamp = os.stat(made).st_mtime_ns
    again = _cli(
        "in.jsonl",
        "--out",
        str(tmp_path / "again.parquet"),
        "--model",
        cross_encoder,
        "--runtime",
        "onnx-int8",
        "--cache-dir",
        str(cache),
        "--quiet",
        cwd=tmp_path,
    )
    assert again.returncode == 0 and again.stderr == ""
    assert _int8_files(cache) == [made] and os.stat(made).st_mtime_ns == stamp
    assert pq.read_table(tmp_path / "again.parquet")["score"].to_pylist() == table["score"].to_pylist()


def _pairs(ours: np.ndarray, theirs: np.ndarray):
    """((ours_i, theirs_i), (ours_j, theirs_j)) for i < j."""
    n = len(ours)
    return [((ours[i], theirs[i]), (ours[j], theirs[j])) for i in range(n) for j in range(i + 1, n)]


@pytest.mark.e2e
def test_no_self_check_refused(cross_encoder, tmp_path):
    (tmp_path / "in.jsonl").write_text(json.dumps(ROWS[0]) + "\n")
    run = _cli(
        "in.jsonl",
        "--out",
        "o.parquet",
        "--model",
        cross_encoder,
        "--runtime",
        "onnx-int8",
        "--no-self-check",
        "--cache-dir",
        str(tmp_path / "cache"),
        cwd=tmp_path,
    )
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("error: --runtime onnx-int8 needs the self-check")
    assert not (tmp_path / "o.parquet").exists() and not (tmp_path / "cache").exists()
    with pytest.raises(UsageError, match="--no-self-check"):
        Scorer(cross_encoder, device="cpu", runtime="onnx-int8", self_check=False)


def test_auto_and_onnx_never_pick_int8(cross_encoder, tmp_path):
    from tests.auto_runtime import keep_verdict

    keep_verdict(cross_encoder, tmp_path / "cache", "onnx")  # auto's choice between fp32 runtimes: onnx here
    for runtime in ("auto", "onnx"):
        scorer = Scorer(cross_encoder, device="cpu", runtime=runtime, cache_dir=str(tmp_path / "cache"))
        assert scorer.runtime == "onnx" and scorer.drift is None
        assert scorer.metadata["self_check"].startswith("passed")
        assert not any(k in scorer.metadata for k in DRIFT_KEYS)
    assert _int8_files(tmp_path / "cache") == []


def test_int8_cache_keyed_by_the_fp32_export(cross_encoder, tmp_path, monkeypatch):
    import onnx
    from onnxruntime import quantization

    calls = []
    real = quantization.quantize_dynamic
    monkeypatch.setattr(quantization, "quantize_dynamic", lambda *a, **kw: (calls.append(a), real(*a, **kw))[1])
    cache = tmp_path / "cache"
    first = Scorer(cross_encoder, device="cpu", runtime="onnx-int8", cache_dir=str(cache))
    second = Scorer(cross_encoder, device="cpu", runtime="onnx-int8", cache_dir=str(cache))
    assert len(calls) == 1 and first.metadata == second.metadata
    (made,) = _int8_files(cache)
    ops = {node.op_type for node in onnx.load(made).graph.node}
    assert "MatMulInteger" in ops and "DynamicQuantizeLinear" in ops  # weights QUInt8, activations at run time
    fp32 = os.path.join(os.path.dirname(made), "model.onnx")
    assert os.path.getsize(made) < os.path.getsize(fp32)
    os.utime(fp32, ns=(os.stat(fp32).st_atime_ns, os.stat(fp32).st_mtime_ns + 10**9))  # another fp32 file
    Scorer(cross_encoder, device="cpu", runtime="onnx-int8", cache_dir=str(cache))
    assert len(calls) == 2 and len(_int8_files(cache)) == 2


def test_failed_quantization_leaves_no_file(cross_encoder, tmp_path, monkeypatch):
    from onnxruntime import quantization

    def half_then_killed(model, out, **kw):
        with open(out, "wb") as f:
            f.write(b"half a model")
        raise KeyboardInterrupt

    monkeypatch.setattr(quantization, "quantize_dynamic", half_then_killed)
    cache = tmp_path / "cache"
    with pytest.raises(KeyboardInterrupt):
        Scorer(cross_encoder, device="cpu", runtime="onnx-int8", cache_dir=str(cache))
    (folder,) = glob.glob(os.path.join(str(cache), "onnx", "*"))
    assert os.listdir(folder) == ["model.onnx"]  # the checked fp32 export only


def test_non_finite_int8_scores_still_fail(cross_encoder, tmp_path, monkeypatch):
    from scorecli.runtimes import onnx as runtime_onnx

    real = runtime_onnx.OnnxForward.__call__

    def nan(self, batch, pooling):
        pooled = real(self, batch, pooling)
        return replace(pooled, logits=pooled.logits * float("nan")) if "quint8" in self.path else pooled

    monkeypatch.setattr(runtime_onnx.OnnxForward, "__call__", nan)
    with pytest.raises(SelfCheckError, match="NaN or infinite"):
        Scorer(cross_encoder, device="cpu", runtime="onnx-int8", cache_dir=str(tmp_path / "cache"))


def test_drift_probe_must_fit(cross_encoder, tmp_path):
    with pytest.raises(UsageError, match="drift cannot be measured"):
        Scorer(cross_encoder, device="cpu", runtime="onnx-int8", cache_dir=str(tmp_path / "cache"), max_seq_len=12)


def test_int8_refused_where_it_cannot_run(cross_encoder, qwen3_seq_cls, tmp_path):
    with pytest.raises(UsageError, match="--runtime onnx-int8"):
        Scorer(cross_encoder, device="cpu", runtime="onnx-int8", dtype="bfloat16", cache_dir=str(tmp_path))
    for runtime in ("onnx-int8", "onnx"):  # a decoder never runs torch in their place silently
        with pytest.raises(UsageError, match=f"--runtime {runtime}: .* not a seq-cls model"):
            Scorer(qwen3_seq_cls, device="cpu", runtime=runtime)


def test_int8_embedding_model(tmp_path):
    from tests.builders.embedding import build_sentence_model

    path = build_sentence_model(tmp_path / "e", pooling="mean", normalize=True)
    rows = pa.Table.from_pylist([{"query": "which planet is red", "items": ["mars is the red planet", "bananas"]}])
    scores = {}
    for runtime in ("torch", "onnx-int8"):
        scorer = Scorer(path, device="cpu", runtime=runtime, cache_dir=str(tmp_path / "cache"))
        scores[runtime] = np.array(scorer.score_table(rows)["score"].to_pylist()[0])
    meta = scorer.metadata
    assert meta["runtime"] == "onnx-int8" and meta["self_check_probe_items"] == str(len(DRIFT_ITEMS) + 1)
    assert 0.0 < float(meta["self_check_max_score_change"]) < 0.1
    assert 0.0 <= float(meta["self_check_pair_order_agreement"]) <= 1.0
    assert np.abs(scores["onnx-int8"] - scores["torch"]).max() <= 0.1


def test_pairs_ordered_alike():
    theirs = np.array([3.0, 2.0, 1.0, 1.0])  # 5 pairs scored apart (the tie is no pair)
    assert pairs_ordered_alike(theirs * 2, theirs) == (5, 5)
    assert pairs_ordered_alike(-theirs, theirs) == (0, 5)
    assert pairs_ordered_alike(np.array([3.0, 2.0, 2.0, 0.0]), theirs) == (4, 5)  # a tie of ours: disagreement
    assert pairs_ordered_alike(np.zeros(3), np.ones(3)) == (0, 0)
