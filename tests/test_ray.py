"""`--engine ray`: the Ray Data runner gives the local engine's output, order and errors.

One local CPU-only Ray instance (2 workers) serves the module; the first test checks that
`run_score_ray` starts and stops its own instance when none is running.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray")

from scorecli.config import ScoreConfig  # noqa: E402
from scorecli.engine.ray import ROW_INDEX, ScorecliPredictor, import_ray, run_score_ray  # noqa: E402
from scorecli.engine.ray_cluster import connected  # noqa: E402
from scorecli.engine.run import run_score  # noqa: E402
from scorecli.errors import InputError, ScorecliError, UsageError  # noqa: E402
from scorecli.io.readers import resolve_inputs  # noqa: E402
from tests.test_invariance import make_rows  # noqa: E402

pytestmark = pytest.mark.e2e  # the console script (or Ray) end to end

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def local_ray():
    if not ray.is_initialized():
        ray.init(
            address="local", num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False, logging_level="ERROR"
        )
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> list[str]:
    """300 rows over a JSONL, a Parquet and a gzip JSONL file (read in that sorted order)."""
    folder = tmp_path_factory.mktemp("inputs")
    rows = make_rows(300, seed=7, max_items=4, max_len=12)
    _write_jsonl(folder / "a.jsonl", rows[:100])
    pq.write_table(pa.Table.from_pylist(rows[100:220]), folder / "b.parquet", row_group_size=50)
    with gzip.open(folder / "c.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows[220:])
    return resolve_inputs([str(folder)])


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory) -> list[str]:
    """Good rows with bad ones among them: reader errors, field errors, and an error that
    only the worker's encoder sees (a token id outside the vocabulary)."""
    folder = tmp_path_factory.mktemp("bad_inputs")
    rows = [json.dumps(r) for r in make_rows(60, seed=3, max_items=4, max_len=12)]
    rows[5] = '{"id": "bad-json", "query": '
    rows[17] = json.dumps({"id": "no-items", "query": "q"})
    rows[30] = json.dumps({"id": "int-items", "query": "q", "items": [1, 2]})
    rows[44] = json.dumps({"id": "vocab", "query_ids": [1, 2], "item_ids": [[10**9]]})
    (folder / "a.jsonl").write_text("\n".join(rows[:40]) + "\n")
    (folder / "b.jsonl").write_text("\n".join(rows[40:]) + "\n")
    return resolve_inputs([str(folder)])


def _write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _both(cfg: ScoreConfig, paths: list[str], tmp_path, suffix: str = ".parquet", **ray_kw) -> tuple[str, str]:
    local, remote = str(tmp_path / f"local{suffix}"), str(tmp_path / f"ray{suffix}")
    run_score(cfg, paths, local, total_rows=None, console=None, stdin=None)
    run_score_ray(cfg, paths, remote, address=None, num_workers=ray_kw.get("num_workers", 2), console=None)
    return local, remote


def assert_same_output(local: pa.Table, remote: pa.Table) -> None:
    assert remote.column_names == local.column_names

    # --runtime auto's reason holds the times it measured, and its cut between two runtimes the
    # length where they crossed, which differ between two measurements (each worker measures)
    def said(table: pa.Table) -> dict:
        meta = {k: v for k, v in table.schema.metadata.items() if k not in (b"runtime_reason", b"runtime_cut_tokens")}
        return meta | {b"attention": re.sub(rb"up to \d+ tokens", b"up to N tokens", meta.get(b"attention", b""))}

    assert said(remote) == said(local)
    assert (b"runtime_reason" in remote.schema.metadata) == (b"runtime_reason" in local.schema.metadata)
    for name in local.column_names:
        if name not in ("scores", "score", "pooled_hidden_states"):
            assert remote[name].to_pylist() == local[name].to_pylist(), name
    for name in {"scores", "score", "pooled_hidden_states"} & set(local.column_names):
        for a, b in zip(local[name].to_pylist(), remote[name].to_pylist()):
            assert (a is None) == (b is None)
            if a is not None:
                np.testing.assert_allclose(np.array(b, np.float32), np.array(a, np.float32), atol=1e-4)


def test_starts_and_stops_its_own_instance(qwen3_seq_cls, inputs, tmp_path):
    if ray.is_initialized():
        pytest.skip("a Ray instance is already running in this process")
    out = tmp_path / "out.jsonl"
    cfg = ScoreConfig(model=qwen3_seq_cls, window_rows=16)
    run_score_ray(cfg, inputs[:1], str(out), address=None, num_workers=1, console=None)
    assert not ray.is_initialized()
    got = [json.loads(line) for line in open(out)]
    assert [r["id"] for r in got] == [f"r{k}" for k in range(100)]
    assert set(got[0]) == {"id", "scores", "score", "num_tokens"}


def test_joining_keeps_the_process_sigterm_handler():
    """ray.init puts sys.exit(15) on SIGTERM: a driver stopped by SIGTERM exited 15 (not 143),
    with a stack dump and no word of the rows kept for --resume. The CLI's handler stays."""
    if ray.is_initialized():
        pytest.skip("a Ray instance is already running in this process")

    def handler(signum, frame):
        return None

    before = signal.signal(signal.SIGTERM, handler)
    try:
        with connected(ray, None, 1):
            assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, before)
    assert not ray.is_initialized()


def test_same_rows_order_and_scores_as_local(local_ray, qwen3_seq_cls, inputs, tmp_path):
    cfg = ScoreConfig(model=qwen3_seq_cls, window_rows=32, pooled_hidden_states=True)
    local, remote = _both(cfg, inputs, tmp_path)
    got, want = pq.read_table(remote), pq.read_table(local)
    assert got.num_rows == 300 and got["id"].to_pylist() == [f"r{k}" for k in range(300)]
    assert_same_output(want, got)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no temp file left


def test_skip_bad_rows_same_as_local(local_ray, qwen3_seq_cls, bad_inputs, tmp_path):
    cfg = ScoreConfig(model=qwen3_seq_cls, window_rows=8, skip_bad_rows=True)
    local, remote = _both(cfg, bad_inputs, tmp_path)
    got, want = pq.read_table(remote), pq.read_table(local)
    assert_same_output(want, got)
    errors = got["error"].to_pylist()
    bad = [k for k, e in enumerate(errors) if e is not None]
    assert bad == [5, 17, 30, 44]
    assert errors[5].startswith(f"{bad_inputs[0]}:6: malformed JSON")
    assert errors[44].startswith(f"{bad_inputs[1]}:5: field 'item_ids'")  # found by a worker's encoder


@pytest.mark.parametrize("cut", [None, 40], ids=["first-bad-row-on-the-driver", "bad-row-in-a-worker"])
def test_bad_row_is_the_local_input_error_and_leaves_no_output(local_ray, qwen3_seq_cls, bad_inputs, tmp_path, cut):
    # cut=40 reads only b.jsonl, whose only bad row (the vocabulary error) only the worker sees
    paths = bad_inputs if cut is None else bad_inputs[1:]
    cfg = ScoreConfig(model=qwen3_seq_cls, window_rows=8)
    with pytest.raises(InputError) as local_err:
        run_score(cfg, paths, str(tmp_path / "local.parquet"), total_rows=None, console=None, stdin=None)
    out = tmp_path / "ray.parquet"
    with pytest.raises(InputError) as ray_err:
        run_score_ray(cfg, paths, str(out), address=None, num_workers=2, console=None)
    assert str(ray_err.value) == str(local_err.value)
    assert ray_err.value.exit_code == 2
    assert os.listdir(tmp_path) == []


def test_model_that_fails_to_load_is_a_usage_error(local_ray, inputs, tmp_path):
    cfg = ScoreConfig(model=str(tmp_path / "no-such-model"))
    with pytest.raises(UsageError, match="cannot load model"):
        run_score_ray(cfg, inputs[:1], str(tmp_path / "out.parquet"), address=None, num_workers=1, console=None)
    assert not (tmp_path / "out.parquet").exists()


def test_empty_input_gives_the_local_empty_output(local_ray, qwen3_seq_cls, tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    cfg = ScoreConfig(model=qwen3_seq_cls)
    local, remote = _both(cfg, [str(tmp_path / "empty.jsonl")], tmp_path)
    got, want = pq.read_table(remote), pq.read_table(local)
    assert got.num_rows == 0 and got.schema == want.schema and got.schema.metadata == want.schema.metadata


def test_usage_errors(local_ray, qwen3_seq_cls, inputs, tmp_path):
    cfg = ScoreConfig(model=qwen3_seq_cls)
    out = str(tmp_path / "out.parquet")
    with pytest.raises(UsageError, match="stdin"):
        run_score_ray(cfg, ["-"], out, address=None, num_workers=1, console=None)
    with pytest.raises(UsageError, match="has 2"):
        run_score_ray(cfg, inputs, out, address=None, num_workers=3, console=None)
    with pytest.raises(UsageError, match="no GPUs"):
        cuda = ScoreConfig(model=qwen3_seq_cls, device="cuda")
        run_score_ray(cuda, inputs, out, address=None, num_workers=1, console=None)
    assert issubclass(UsageError, ScorecliError) and not os.path.exists(out)


def test_imports_without_ray_and_says_how_to_install(monkeypatch):
    code = "import sys, scorecli.engine.ray; assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    monkeypatch.setitem(sys.modules, "ray", None)  # what an environment without Ray sees
    with pytest.raises(UsageError, match=r"pip install 'scorecli\[ray\]'"):
        import_ray()


def test_map_batches_api(local_ray, qwen3_seq_cls):
    from scorecli import Scorer

    rows = make_rows(50, seed=11)
    ds = ray.data.from_items([{ROW_INDEX: k, **r} for k, r in enumerate(rows)])
    scored = ds.map_batches(
        ScorecliPredictor,
        fn_constructor_kwargs={"model": qwen3_seq_cls, "activation": "sigmoid"},
        batch_size=8,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=2),
        num_cpus=1,
    )
    got = pa.concat_tables(scored.iter_batches(batch_size=None, batch_format="pyarrow")).sort_by(ROW_INDEX)
    want = Scorer(qwen3_seq_cls, activation="sigmoid").score_table(pa.Table.from_pylist(rows))
    assert got[ROW_INDEX].to_pylist() == list(range(50))
    assert_same_output(want, got.drop_columns([ROW_INDEX]))


def test_cli_engine_ray_joins_a_running_cluster(local_ray, qwen3_seq_cls, inputs, tmp_path):
    address = ray.get_runtime_context().gcs_address
    out = tmp_path / "joined.parquet"
    # through the real command line: --engine ray joining this cluster by its address
    argv = [
        sys.executable,
        "-m",
        "scorecli",
        "score",
        *inputs[:2],
        "--out",
        str(out),
        "--model",
        qwen3_seq_cls,
        "--window-rows",
        "25",
        "--engine",
        "ray",
        "--ray-address",
        address,
        "--num-workers",
        "2",
        "--quiet",
    ]
    proc = subprocess.run(argv, cwd=REPO, timeout=300, capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stderr == b""  # --quiet: no Ray logs or warnings either
    assert pq.read_table(out)["id"].to_pylist() == [f"r{k}" for k in range(220)]
    assert ray.cluster_resources().get("CPU") == 2  # the joined instance is still up


def test_ranked_chunked_rows_same_as_local(local_ray, qwen3_seq_cls, bad_inputs, tmp_path):
    """--top-k and --chunk-tokens (with --skip-bad-rows) on Ray workers: the local output."""
    cfg = ScoreConfig(
        model=qwen3_seq_cls,
        window_rows=8,
        skip_bad_rows=True,
        top_k=2,
        chunk_tokens=4,
        chunk_overlap=1,
        chunk_aggregate="mean",
    )
    local, remote = _both(cfg, bad_inputs, tmp_path)
    got, want = pq.read_table(remote), pq.read_table(local)
    assert {"top_k", "num_chunks"} <= set(got.column_names)
    assert max(c for row in got["num_chunks"].to_pylist() if row for c in row) > 1
    assert_same_output(want, got)


def test_embedding_model_same_as_local(local_ray, inputs, tmp_path):
    """An embedding model (docs/models.md: Which models, embedding models) on Ray workers: the local engine's rows, order and scores."""
    from tests.builders.embedding import build_sentence_model

    model = build_sentence_model(
        tmp_path / "st", pooling="cls", include_prompt=False, normalize=True, prompts={"query": "query: "}
    )
    # torch: `--runtime auto` measures again on each worker (one thread each), where this tiny
    # model's runtimes are close enough at 32 tokens for the two measurements to choose otherwise
    cfg = ScoreConfig(model=model, window_rows=32, pooled_hidden_states=True, top_k=2, runtime="torch")
    local, remote = _both(cfg, inputs, tmp_path)
    got, want = pq.read_table(remote), pq.read_table(local)
    assert got.num_rows == 300 and got.schema.metadata[b"kind"] == b"embedding"
    assert_same_output(want, got)


def test_a_score_cache_run_loads_no_model_on_cpu_workers_as_local(local_ray, qwen3_seq_cls, inputs, tmp_path):
    """Every pair in a --score-cache a local run filled: 2 CPU workers under --runtime auto loaded
    the model anyway (one chose the runtime, and its pinned choice missed the cache's record), so
    the output said self_check 'passed (...)' where the local engine's says it loaded none."""
    from scorecli.engine.job import FROM_CACHE

    cfg = ScoreConfig(model=qwen3_seq_cls, window_rows=16, score_cache=str(tmp_path / "cache"))
    first, local, remote = (str(tmp_path / f"{n}.parquet") for n in ("first", "local", "ray"))
    run_score(cfg, inputs[:1], first, total_rows=None, console=None, stdin=None)
    run_score(cfg, inputs[:1], local, total_rows=None, console=None, stdin=None)
    run_score_ray(cfg, inputs[:1], remote, address=None, num_workers=2, console=None)
    want, got = pq.read_table(local), pq.read_table(remote)
    assert want.schema.metadata[b"self_check"] == FROM_CACHE.encode()
    assert got.schema.metadata[b"score_cache_misses"] == b"0"
    assert_same_output(want, got)


def test_int8_runtime_says_its_drift_once_as_local(local_ray, inputs, tmp_path):
    """--runtime onnx-int8 on Ray workers: the same one-line drift note on stderr as the local
    engine (and with no rows too), and the same drift in the metadata."""
    import io

    from rich.console import Console

    from tests.builders.models import build_bert_cross_encoder

    pytest.importorskip("onnxruntime")
    model = build_bert_cross_encoder(tmp_path / "ce")
    cfg = ScoreConfig(model=model, runtime="onnx-int8", window_rows=64, cache_dir=str(tmp_path / "cache"))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")

    def notes(engine, paths: list[str], out: str) -> list[str]:
        err = io.StringIO()
        console = Console(file=err, width=400, force_terminal=False)
        if engine is run_score:
            run_score(cfg, paths, out, total_rows=None, console=console, stdin=None)
        else:
            run_score_ray(cfg, paths, out, address=None, num_workers=2, console=console)
        return [line for line in err.getvalue().splitlines() if line.startswith("note:")]

    local, remote = str(tmp_path / "local.parquet"), str(tmp_path / "ray.parquet")
    want, got = notes(run_score, inputs[:1], local), notes(run_score_ray, inputs[:1], remote)
    assert len(want) == 1 and "int8-approximate" in want[0] and "max score change" in want[0]
    assert got == want
    meta = [pq.read_table(p).schema.metadata for p in (local, remote)]
    assert meta[0][b"self_check_max_score_change"] == meta[1][b"self_check_max_score_change"]
    assert notes(run_score_ray, [str(empty)], str(tmp_path / "none.parquet")) == want


def test_cpu_workers_run_one_runtime_choice(local_ray, tmp_path):
    """`--runtime auto` on CPU workers: each measured torch against ONNX Runtime on a cold cache, at
    once, and could choose another cut (onnx:86:torch beside onnx:96:torch) while the output named
    the first block's. One worker chooses first and every worker runs its choice (the unit part;
    two real workers rarely disagree on a tiny model): every part of a dataset says the same."""
    from scorecli.engine.ray import _RayScoring

    class Task:
        def __init__(self, fn):
            self.fn = fn

        def remote(self, cfg):
            return ("ok", {"runtime": "onnx+torch", "runtime_cut_tokens": "86", "runtime_reason": "auto: timed"}, cfg)

    class FakeRay:
        def remote(self, **resources):
            return Task

        def get(self, ref):
            return ref

    scoring = object.__new__(_RayScoring)
    scoring.ray, scoring.resources = FakeRay(), {"num_cpus": 1}
    scoring.worker_cfg = ScoreConfig(model="m", runtime="auto", device="cpu")
    scoring._one_runtime()
    assert scoring.worker_cfg.runtime_route == "onnx:86:torch" and scoring.worker_cfg.runtime_reason == "auto: timed"
    for pinned in (ScoreConfig(model="m", runtime="torch", device="cpu"), ScoreConfig(model="m", device="cuda")):
        scoring.worker_cfg = pinned
        scoring._one_runtime()
        assert scoring.worker_cfg is pinned

    pytest.importorskip("onnxruntime")
    from tests.builders.models import build_bert_cross_encoder

    model = build_bert_cross_encoder(tmp_path / "ce")
    rows = tmp_path / "rows.jsonl"
    _write_jsonl(rows, make_rows(200, seed=3, max_items=4, max_len=40))
    cfg = ScoreConfig(model=model, window_rows=25, cache_dir=str(tmp_path / "cache"), runtime="auto")
    from scorecli.engine.checkpoint import Checkpoint
    from scorecli.io.output import resolve_output

    out = tmp_path / "parts"
    target = resolve_output(str(out) + "/", [str(rows)])
    checkpoint = Checkpoint.open(target, cfg, [str(rows)], False)
    run_score_ray(cfg, [str(rows)], target, address=None, num_workers=2, console=None, checkpoint=checkpoint)
    said = {
        tuple(pq.read_schema(p).metadata.get(k.encode()) for k in ("runtime", "runtime_cut_tokens", "runtime_reason"))
        for p in sorted(out.glob("*.parquet"))
    }
    assert len(said) == 1, said
