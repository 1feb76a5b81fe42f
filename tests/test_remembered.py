"""A run on ONNX Runtime whose model's answers are remembered (`scorecli.model.remembered`) builds
no torch model: the same scores and metadata as the run that built it, the self-check still
compared (against the remembered reference), and new weights or a damaged record build it again."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
import torch

from scorecli.checks.selfcheck import SelfCheckError
from scorecli.scorer import Scorer
from tests.auto_runtime import keep_verdict
from tests.builders.models import build_bert_cross_encoder

pytest.importorskip("onnxruntime")

ROWS = [
    {"query": "which planet is red", "items": ["mars is the red planet", "bananas", "iron oxide " * 20]},
    {"query": "a", "items": ["b c", "d"]},
]


def _run(path, cache, **kw) -> tuple[Scorer, np.ndarray, dict]:
    scorer = Scorer(str(path), device="cpu", runtime="onnx", cache_dir=str(cache), **kw)
    table = scorer.score_table(pa.Table.from_pylist(ROWS))
    name = "scores" if "scores" in table.column_names else "score"
    scores = np.array([s for row in table[name].to_pylist() for s in row], dtype=np.float64)
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    return scorer, scores, meta


def _records(cache) -> list[str]:
    folder = os.path.join(cache, "remembered")
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def _embedding_model(tmp_path):
    from tests.builders.embedding import build_sentence_model

    return build_sentence_model(tmp_path / "e", pooling="mean", normalize=True)


@pytest.fixture(params=["cross-encoder", "embedding"])
def model(request, tmp_path):
    if request.param == "cross-encoder":
        return build_bert_cross_encoder(tmp_path / "m", num_labels=2)
    return _embedding_model(tmp_path)


def test_a_second_run_builds_no_model_and_scores_the_same(model, tmp_path):
    cache = tmp_path / "cache"
    first, scores, meta = _run(model, cache)
    assert first.loaded.built and len(_records(cache)) == 1
    second, again, meta_again = _run(model, cache)
    assert not second.loaded.built  # scored, self-checked and written without the torch model
    assert np.array_equal(scores, again)
    assert meta_again["self_check"].startswith("passed") and meta_again == meta
    assert len(_records(cache)) == 1


def test_the_self_check_still_compares_a_remembered_model(model, tmp_path, monkeypatch):
    """A wrong ONNX forward fails the check of a run that builds no model, as it fails one that does."""
    import scorecli.runtimes.onnx as ro

    cache = tmp_path / "cache"
    _run(model, cache)
    real_pairs, real_texts = ro.OnnxForward.__call__, ro.OnnxTextForward.__call__

    def off_pairs(self, batch, pooling):
        pooled = real_pairs(self, batch, pooling)
        return type(pooled)(pooled.score_states, pooled.logits + 0.5, pooled.hidden)

    monkeypatch.setattr(ro.OnnxForward, "__call__", off_pairs)
    monkeypatch.setattr(ro.OnnxTextForward, "__call__", lambda self, batch: real_texts(self, batch) * 1.5 + 0.1)
    built = []
    monkeypatch.setattr("scorecli.model.load.Deferred.get", lambda self: built.append(1) or pytest.fail("built"))
    with pytest.raises(SelfCheckError):
        _run(model, cache)
    assert not built


def test_new_weights_build_the_model_again(tmp_path):
    from transformers import AutoModelForSequenceClassification

    path, cache = build_bert_cross_encoder(tmp_path / "m", num_labels=2), tmp_path / "cache"
    _, before, _ = _run(path, cache)
    model = AutoModelForSequenceClassification.from_pretrained(path)
    with torch.no_grad():
        model.classifier.weight.mul_(3.0)
    model.save_pretrained(path)
    scorer, after, meta = _run(path, cache)
    assert scorer.loaded.built and meta["self_check"].startswith("passed")
    assert not np.allclose(before, after)
    assert len(_records(cache)) == 2  # one record per weights
    light, again, _ = _run(path, cache)
    assert not light.loaded.built and np.array_equal(after, again)


def test_a_record_that_cannot_be_read_builds_the_model(tmp_path):
    path, cache = build_bert_cross_encoder(tmp_path / "m", num_labels=2), tmp_path / "cache"
    _, scores, _ = _run(path, cache)
    (record,) = _records(cache)
    with open(os.path.join(cache, "remembered", record), "r+b") as f:
        f.truncate(100)
    scorer, again, meta = _run(path, cache)
    assert scorer.loaded.built and np.array_equal(scores, again) and meta["self_check"].startswith("passed")
    light, _, _ = _run(path, cache)  # written whole again
    assert not light.loaded.built


def test_what_needs_the_model_builds_it(tmp_path):
    """A torch run, a run that names its kind, and the audit's reference build the model; a
    remembered run's model is built on first use and equals the one a run loads."""
    path, cache = build_bert_cross_encoder(tmp_path / "m", num_labels=2), tmp_path / "cache"
    _run(path, cache)
    torch_run = Scorer(str(path), device="cpu", runtime="torch", cache_dir=str(cache))
    assert torch_run.loaded.built and torch_run.loaded.memory is None
    named = Scorer(str(path), device="cpu", runtime="onnx", cache_dir=str(cache), kind="cross-encoder")
    assert named.loaded.built
    light, _, _ = _run(path, cache)
    assert not light.loaded.built
    built = light.loaded.model  # what `--audit` and a torch batch ask for
    assert light.loaded.built and built is light.loaded.model
    for a, b in zip(built.state_dict().values(), named.loaded.model.state_dict().values()):
        assert torch.equal(a, b)


SCRIPT = """
import sys, pyarrow as pa
from scorecli.scorer import Scorer
scorer = Scorer(sys.argv[1], device="cpu", runtime="onnx", cache_dir=sys.argv[2])
scorer.score_table(pa.Table.from_pylist([{"query": "q", "items": ["a", "b"]}]))
print(sorted(m for m in ("torch._dynamo", "transformers.modeling_utils") if m in sys.modules))
"""


def test_a_remembered_run_imports_neither_model_code_nor_the_compiler(tmp_path):
    """What the second run saves: transformers' model code (and with it torch's compiler, ~2 s of a
    one-row run on a 2-core CPU) is never imported."""
    path, cache = build_bert_cross_encoder(tmp_path / "m", num_labels=2), tmp_path / "cache"
    runs = [
        subprocess.run([sys.executable, "-c", SCRIPT, str(path), str(cache)], capture_output=True, text=True)
        for _ in range(2)
    ]
    assert all(run.returncode == 0 for run in runs), [run.stderr[-2000:] for run in runs]
    assert "transformers.modeling_utils" in runs[0].stdout  # the first run builds the model
    assert runs[1].stdout.strip().splitlines()[-1] == "[]"


SHORT = [{"query": "which planet", "items": ["mars", "bananas are yellow"]}, {"query": "a", "items": ["b c"]}]
LONG = SHORT + [{"query": "red", "items": ["iron oxide on the surface " * 12, "mars"]}]


def _auto(path, cache, rows) -> tuple[Scorer, np.ndarray]:
    scorer = Scorer(str(path), device="cpu", runtime="auto", cache_dir=str(cache))
    table = scorer.score_table(pa.Table.from_pylist(rows))
    return scorer, np.array([s for row in table["scores"].to_pylist() for s in row], dtype=np.float64)


def test_a_route_to_torch_builds_the_model_when_a_batch_first_goes_there(tmp_path):
    """`auto`'s verdict `onnx:40:torch` (ONNX Runtime up to 40 tokens, torch beyond): a job of short
    pairs never builds the model; one with a long pair builds it before that batch, with the same
    scores as the run that built it at the start."""
    path, cache = build_bert_cross_encoder(tmp_path / "m", num_labels=2), tmp_path / "cache"
    keep_verdict(str(path), str(cache), "onnx:40:torch")
    first, long_scores = _auto(path, cache, LONG)  # builds the model at the start, and remembers
    assert first.loaded.built and first.runtime == "onnx+torch" and _records(cache)
    short, short_scores = _auto(path, cache, SHORT)
    assert not short.loaded.built and short.metadata["runtime"] == "onnx+torch"
    assert np.abs(short_scores - long_scores[: len(short_scores)]).max() <= 1e-5  # batched otherwise
    late, again = _auto(path, cache, LONG)
    assert late.loaded.built and np.array_equal(again, long_scores)


def test_a_torch_forward_made_late_is_checked_before_it_scores(tmp_path, monkeypatch):
    """The forward made for the first long batch is compared with ONNX Runtime's on that batch: a
    wrong one stops the run there (as the start-up self-check would have)."""
    import scorecli.runtimes.forward as rf

    path, cache = build_bert_cross_encoder(tmp_path / "m", num_labels=2), tmp_path / "cache"
    keep_verdict(str(path), str(cache), "onnx:40:torch")
    _auto(path, cache, SHORT)
    real = rf.EncoderForward.__call__

    def off(self, batch, pooling):
        pooled = real(self, batch, pooling)
        return type(pooled)(pooled.score_states, pooled.logits + 0.5, pooled.hidden)

    monkeypatch.setattr(rf.EncoderForward, "__call__", off)
    short, _ = _auto(path, cache, SHORT)  # no batch goes to torch: nothing to check, nothing built
    assert not short.loaded.built
    with pytest.raises(SelfCheckError, match="torch forward"):
        _auto(path, cache, LONG)


@pytest.mark.parametrize("progress", [False, True])
def test_a_model_built_late_is_loaded_as_quietly_as_one_built_at_the_start(tmp_path, capfd, progress):
    """A remembered run that builds its model after the load (here: its self-check's probe was not
    remembered, a run with --no-self-check before it) prints what a load that built it prints: a
    command or a quiet library caller no "Loading weights" bar, a library caller that asked for
    progress transformers' bar, as at the start."""
    from transformers.utils import logging as hf_logging

    path, cache = build_bert_cross_encoder(tmp_path / "m", num_labels=2), tmp_path / "cache"
    _run(path, cache, self_check=False)  # remembers the facts, not the probe's answers
    capfd.readouterr()
    hf_logging.enable_progress_bar()  # transformers' default, as in a fresh process
    try:
        built = Scorer(str(path), device="cpu", runtime="onnx", cache_dir=str(tmp_path / "new"), progress=progress)
        assert built.loaded.built
        at_start = capfd.readouterr().err
        light = Scorer(str(path), device="cpu", runtime="onnx", cache_dir=str(cache), progress=progress)
        assert light.loaded.built and light.self_check_note.startswith("passed")  # built by the self-check
        late = capfd.readouterr().err
    finally:
        hf_logging.disable_progress_bar()
    assert ("Loading weights" in late) == ("Loading weights" in at_start) == progress


def test_a_record_gets_the_modes_the_umask_gives(tmp_path):
    """As every file of the cache (`model.cache`): with umask 002 a group sharing the cache folder
    reads, and renews, what one of them remembered (mkstemp's 0600 kept it from all but its writer)."""
    path, cache = build_bert_cross_encoder(tmp_path / "m", num_labels=2), tmp_path / "cache"
    old = os.umask(0o002)
    try:
        _run(path, cache)
    finally:
        os.umask(old)
    (record,) = _records(cache)
    assert os.stat(os.path.join(cache, "remembered", record)).st_mode & 0o777 == 0o664
    assert not os.listdir(os.path.join(cache, "remembered"))[1:]  # no temporary file left beside it


def test_weights_replaced_under_their_old_modification_time_are_not_remembered(tmp_path):
    """Other weights of the same size written over the old file with its modification time kept
    (`cp -p`, `rsync -a`, `tar x` of a fine-tune): the record is not that model's answers (they
    agreed with the old weights' export, and would have scored them in silence). The run builds the
    model, which shows the ONNX export (keyed by size and mtime) out of date: it is made again
    (`runtimes.onnx_export.materialize`), and the run scores the new weights."""
    import shutil

    from transformers import AutoModelForSequenceClassification

    path, cache = build_bert_cross_encoder(tmp_path / "m", num_labels=2), tmp_path / "cache"
    _, old, _ = _run(path, cache)
    other = AutoModelForSequenceClassification.from_pretrained(path)
    with torch.no_grad():
        other.classifier.weight.mul_(-3.0)
    other.save_pretrained(tmp_path / "other")
    weights = os.path.join(path, "model.safetensors")
    before = os.stat(weights)
    shutil.copyfile(tmp_path / "other" / "model.safetensors", weights)  # in place: the same file, other bytes
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.path.getsize(weights) == before.st_size
    scorer, after, meta = _run(path, cache)
    assert scorer.loaded.built and meta["self_check"].startswith("passed") and not np.allclose(old, after)


def test_pickled_weights_remembered_under_allow_pickle_are_refused_without_it(tmp_path):
    """A model whose weights are pickled (`pytorch_model.bin`) is refused without --allow-pickle
    (exit 2), as it was before a run with the flag remembered it: the record of that run is not the
    answer of one without it (which scored with no refusal, and where a route sent a long batch to
    torch, was refused there, after the windows before it were written)."""
    from safetensors.torch import load_file

    from scorecli.errors import UsageError

    path, cache = build_bert_cross_encoder(tmp_path / "m", num_labels=2), tmp_path / "cache"
    weights = load_file(os.path.join(path, "model.safetensors"))
    os.unlink(os.path.join(path, "model.safetensors"))
    torch.save(weights, os.path.join(path, "pytorch_model.bin"))
    _run(path, cache, allow_pickle=True)
    with pytest.raises(UsageError, match="--allow-pickle"):
        _run(path, cache)
