"""A resumed job is the job it continues (docs/long-jobs.md), through the real console script:
an edited template file is another job (its content counts, not its path or time); `--device`,
`--dtype` and `--attention` count by what they resolve to, so a job begun where `auto` chose
bfloat16 is not finished in float32; `--engine ray` goes on in a growing job's own windows. Runs
are killed at a chosen part by a wrapper (deterministic, unlike a timed signal)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_cli import TIMEOUT, Case, _env, run_cli
from tests.test_resume import job_input  # noqa: F401 - the module fixture: rows that grow longer

pytestmark = pytest.mark.e2e  # the console script (or Ray) end to end

# the console script, SIGKILLed once TEST_KILL_AFTER_PARTS parts are kept; with TEST_AUTO_DTYPE,
# on a machine where `--dtype auto` resolves to that dtype (as a GPU's bfloat16); with
# TEST_TRANSFORMERS_VERSION, where that transformers is installed
WRAPPER = """import importlib.metadata, os, signal, sys
import scorecli.engine.checkpoint as checkpoint
import scorecli.model.load as load
kill_after = int(os.environ.get("TEST_KILL_AFTER_PARTS", "0"))
if kill_after:
    write = checkpoint.Checkpoint.write
    def write_then_die(self, table):
        write(self, table)
        if len(self.store.parts) >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
    checkpoint.Checkpoint.write = write_then_die
if os.environ.get("TEST_AUTO_DTYPE"):
    resolve = load.resolve_dtype
    def resolve_dtype(name, device):
        import torch
        return getattr(torch, os.environ["TEST_AUTO_DTYPE"]) if name == "auto" else resolve(name, device)
    load.resolve_dtype = resolve_dtype
if os.environ.get("TEST_TRANSFORMERS_VERSION"):
    installed = importlib.metadata.version
    def version(name):
        return os.environ["TEST_TRANSFORMERS_VERSION"] if name == "transformers" else installed(name)
    importlib.metadata.version = version
from scorecli.cli import main
sys.argv[0] = "scorecli"
main()
"""


def killed(args: list[str], parts: int, **env: str) -> Path:
    """Run `args` until `parts` parts are kept; the folder that keeps them."""
    run = subprocess.run(
        [sys.executable, "-c", WRAPPER, *args],
        capture_output=True,
        env=_env(TEST_KILL_AFTER_PARTS=str(parts), **env),
        timeout=TIMEOUT,
    )
    assert run.returncode == -9, run.stderr.decode()
    out = Path(args[args.index("--out") + 1])
    assert not out.exists()
    return Path(str(out) + ".partial")


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def args_for(inp: str, model: str, out: Path, *extra: str) -> list[str]:
    return ["score", inp, "--model", model, "--out", str(out), "--window-rows", "2", "--max-batch-tokens", "96", *extra]


def whole(args: list[str]) -> pa.Table:
    result = run_cli(Case(args))
    assert result.rc == 0, result.stderr
    return pq.read_table(args[args.index("--out") + 1])


def refused(args: list[str], folder: Path, *what: str) -> None:
    before = files(folder)
    result = run_cli(Case(args + ["--resume"]))
    assert result.rc == 2, result.stderr
    assert len(result.lines()) == 1 and result.lines()[0].startswith("error: --resume: "), result.stderr
    for part in what:
        assert part in result.stderr, result.stderr
    assert files(folder) == before


def test_an_edited_template_file_is_another_job(tmp_path, job_input, qwen3_seq_cls):  # noqa: F811
    template = tmp_path / "judge.toml"
    text = 'prefix = "Query: {query} Passage:"\nitem = " {item}"\n'
    template.write_text(text)
    out = tmp_path / "scores.parquet"
    args = args_for(job_input, qwen3_seq_cls, out, "--template", str(template))
    want = whole(args_for(job_input, qwen3_seq_cls, tmp_path / "whole.parquet", "--template", str(template)))
    folder = killed(args, 2)
    stat = template.stat()
    template.write_text(text.replace("Passage", "Document"[:7]))  # same size, same time: only the words differ
    os.utime(template, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    refused(args, folder, "template file")
    template.write_text(text)  # the same words again, a new time: the same job
    result = run_cli(Case(args + ["--resume"]))
    assert result.rc == 0, result.stderr
    assert "resumed after 4 rows" in result.stderr
    assert pq.read_table(out).equals(want)


def test_what_auto_resolved_to_is_part_of_the_job(tmp_path, job_input, qwen3_seq_cls):  # noqa: F811
    """Begun where `--dtype auto` is bfloat16 (a GPU), resumed where it is float32 (a CPU): the
    rows would mix two dtypes' scores. Refused, naming the flag that goes on as the job began."""
    out = tmp_path / "scores.parquet"
    args = args_for(job_input, qwen3_seq_cls, out)
    folder = killed(args, 2, TEST_AUTO_DTYPE="bfloat16")
    refused(args, folder, "scored on cpu in bfloat16 with sdpa attention", "in float32", "pass --dtype bfloat16")
    want = whole(args_for(job_input, qwen3_seq_cls, tmp_path / "whole.parquet", "--dtype", "bfloat16"))
    result = run_cli(Case(args + ["--dtype", "bfloat16", "--resume"]))  # the flag as the message says
    assert result.rc == 0, result.stderr
    got = pq.read_table(out)
    assert got.equals(want) and got.schema.metadata[b"dtype"] == b"bfloat16"


def test_ray_resume_of_a_growing_job_goes_on_in_its_windows(tmp_path, job_input, qwen3_seq_cls):  # noqa: F811
    """A local job whose windows grow (1, 2, 4, 8, ... rows), resumed on Ray: the rest is cut as
    the job would have cut it, not in Ray's own blocks, so the output is the uninterrupted run's."""
    pytest.importorskip("ray")

    def growing(out: Path, *extra: str) -> list[str]:
        return ["score", job_input, "--model", qwen3_seq_cls, "--out", str(out), "--pooled-hidden-states", *extra]

    want = whole(growing(tmp_path / "whole.parquet"))
    other = whole(growing(tmp_path / "other.parquet", "--window-rows", "6", "--window-seconds", "1000"))
    assert not other.equals(want)  # other windows, other last bits: else this test could not fail
    out = tmp_path / "scores.parquet"
    killed(growing(out), 2)  # windows of 1 and 2 rows kept
    result = run_cli(Case(growing(out) + ["--resume", "--engine", "ray", "--num-workers", "1"]))
    assert result.rc == 0, result.stderr
    assert "resumed after 3 rows" in result.stderr
    assert pq.read_table(out).equals(want)


def test_a_router_models_routes_are_part_of_the_job(tmp_path):
    """A sentence-transformers Router (a sparse model's query and document routes) keeps each
    route's weights and tokenizer in a subfolder of its own, which modules.json does not name: a
    route retrained in place is another job, as any other model's weights are."""
    from scorecli.config import ScoreConfig
    from scorecli.engine.job import fingerprint

    model = tmp_path / "sparse"
    route = model / "document_0_Transformer"
    route.mkdir(parents=True)
    (model / "modules.json").write_text('[{"idx": 0, "name": "0", "path": "", "type": "router.Router"}]')
    (model / "router_config.json").write_text('{"types": {}}')
    (route / "model.safetensors").write_bytes(b"weights")
    (route / "tokenizer.json").write_text("{}")
    cfg = ScoreConfig(model=str(model))
    job = fingerprint(cfg, [], "parquet")["model file"]
    assert "document_0_Transformer/model.safetensors" in job
    (route / "model.safetensors").write_bytes(b"retrained weights")
    assert fingerprint(cfg, [], "parquet")["model file"] != job


def test_a_job_resumed_after_a_library_upgrade_is_another_job(tmp_path, job_input, qwen3_seq_cls):  # noqa: F811
    """transformers renders chat templates and tokenizes label tokens: a job killed before an
    upgrade and resumed after it would mix rows scored by two, so it is refused, parts kept."""
    out = tmp_path / "scores.parquet"
    args = args_for(job_input, qwen3_seq_cls, out)
    folder = killed(args, 2)
    before = files(folder)
    run = subprocess.run(
        [sys.executable, "-c", WRAPPER, *args, "--resume"],
        capture_output=True,
        env=_env(TEST_TRANSFORMERS_VERSION="99.0"),
        timeout=TIMEOUT,
    )
    stderr = run.stderr.decode()
    assert run.returncode == 2 and "different transformers version" in stderr and "99.0" in stderr, stderr
    assert files(folder) == before and not out.exists()


def test_what_scorecli_writes_in_a_models_folder_is_not_the_model(tmp_path):
    """An output (its `<out>.partial/` bookkeeping) or a score cache kept inside the model's
    folder is not one of the model's files: the job and the cache's identity stay the same as they
    grow."""
    from scorecli.cache.identity import model_identity
    from scorecli.config import ScoreConfig
    from scorecli.engine.job import fingerprint

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"weights")
    cfg = ScoreConfig(model=str(model))
    job, identity = fingerprint(cfg, [], "parquet")["model file"], model_identity(str(model))
    (model / "eval" / "scores.parquet.partial").mkdir(parents=True)
    (model / "eval" / "scores.parquet.partial" / "_scorecli_job.json").write_text("{}")
    (model / "cache" / "requests").mkdir(parents=True)
    (model / "cache" / "scorecli-score-cache.json").write_text("{}")
    (model / "cache" / "requests" / "0123.json").write_text("{}")
    assert fingerprint(cfg, [], "parquet")["model file"] == job
    assert model_identity(str(model)) == identity


def hub_snapshot(cache: Path, repo: str, revision: str, model: str) -> Path:
    """`model`'s files as the Hugging Face cache holds `repo` at `revision` (now its `main`):
    symlinks in snapshots/ to blobs of their own, as huggingface_hub downloads them."""
    root = cache / ("models--" + repo.replace("/", "--"))
    snapshot = root / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (root / "blobs").mkdir(exist_ok=True)
    for f in Path(model).iterdir():
        blob = root / "blobs" / f"{revision}-{f.name}"
        blob.write_bytes(f.read_bytes())
        (snapshot / f.name).symlink_to(blob)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(revision)
    return snapshot


def test_another_revision_of_a_hub_model_is_another_job(tmp_path, job_input, qwen3_seq_cls):  # noqa: F811
    """A Hub id's files are its snapshot in the Hugging Face cache: a job killed, then resumed
    after another revision was downloaded (new weights under the same id), would mix rows of two
    models. Refused, naming a model file, parts kept; the same revision resumes."""
    from safetensors.numpy import load_file, save_file

    cache = tmp_path / "hub"
    hub_snapshot(cache, "org/reranker", "a" * 40, qwen3_seq_cls)
    env = {"HF_HUB_CACHE": str(cache)}
    out = tmp_path / "scores.parquet"
    args = args_for(job_input, "org/reranker", out)
    folder = killed(args, 2, **env)
    newer = hub_snapshot(cache, "org/reranker", "b" * 40, qwen3_seq_cls)
    weights = {k: v * 2 for k, v in load_file(newer / "model.safetensors").items()}
    (newer / "model.safetensors").unlink()
    save_file(weights, newer / "model.safetensors", metadata={"format": "pt"})
    before = files(folder)
    result = run_cli(Case(args + ["--resume"], env=_env(**env)))
    assert result.rc == 2 and "different model file" in result.stderr, result.stderr
    assert files(folder) == before and not out.exists()
    (cache / "models--org--reranker" / "refs" / "main").write_text("a" * 40)  # the job's revision again
    result = run_cli(Case(args + ["--resume"], env=_env(**env)))
    assert result.rc == 0 and "resumed after 4 rows" in result.stderr, result.stderr


def test_a_hub_model_downloaded_by_the_job_is_part_of_it(tmp_path, monkeypatch, qwen3_seq_cls):
    """A Hub model not in the cache when a job opens its folder is downloaded as the model loads,
    before the first part: the job file records the downloaded files."""
    import json

    from scorecli.config import ScoreConfig
    from scorecli.engine.checkpoint import Checkpoint
    from scorecli.io.output import Target

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    out = tmp_path / "scores.parquet"
    cfg = ScoreConfig(model="org/reranker")
    checkpoint = Checkpoint.open(Target(str(out), "parquet", "file", str(out)), cfg, [], resume=False)
    hub_snapshot(cache, "org/reranker", "a" * 40, qwen3_seq_cls)  # what loading the model downloads
    checkpoint.write(pa.table({"num_tokens": pa.array([1], pa.int64())}))
    job = json.loads((tmp_path / "scores.parquet.partial" / "_scorecli_job.json").read_text())
    assert "model.safetensors" in job["fingerprint"]["model file"]
    checkpoint.store.release()
