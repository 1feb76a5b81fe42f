"""`hf://datasets/...` inputs (docs/object-stores.md) without a network: a local
fsspec filesystem shaped like huggingface_hub's `HfFileSystem` (protocol `hf`, paths
`datasets/ORG/NAME/...`, `info` with the file's git `blob_id`) stands in for the hub, registered
where the real one is (`scorecli.io.schemes.SCHEMES["hf"].filesystem`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem

from scorecli.errors import UsageError
from scorecli.io import schemes, stores
from scorecli.io.readers import count_rows, iter_rows, resolve_inputs
from tests.test_cli import SCORECLI, _env, jsonl, make_rows, write

REPO = Path(__file__).resolve().parent.parent
DATA = "hf://datasets/org/name/data"


class FakeHfFileSystem(DirFileSystem):
    """HfFileSystem's shape over a local folder: `hf://datasets/org/name/x` is `ROOT/datasets/org/name/x`."""

    protocol = "hf"

    def __init__(self, root: str):
        super().__init__(path=root, fs=LocalFileSystem())

    @classmethod
    def _strip_protocol(cls, path):
        return path[len("hf://") :] if isinstance(path, str) and path.startswith("hf://") else path

    def info(self, path, **kwargs):
        info = super().info(path, **kwargs)
        if info["type"] == "file":  # the hub's git blob id changes with the content
            info["blob_id"] = hashlib.sha1(self.cat_file(path)).hexdigest()
        return info


def install(root: str) -> None:
    """Register the stand-in for `hf://` (in this process)."""
    hf = schemes.SCHEMES["hf"]
    schemes.SCHEMES["hf"] = dataclasses.replace(hf, filesystem=lambda url: schemes._fsspec(FakeHfFileSystem(root), url))
    stores._STORES.clear()


@pytest.fixture()
def hub(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "hub"
    data = root / "datasets" / "org" / "name" / "data"
    data.mkdir(parents=True)
    rows = make_rows(30, first_id=0, seed=5)
    write(data / "a.jsonl", jsonl(rows[:10]))
    pq.write_table(pa.Table.from_pylist(rows[10:]), data / "b.parquet", row_group_size=7)
    write(data / "README.md", b"# not an input\n")
    monkeypatch.setitem(schemes.SCHEMES, "hf", schemes.SCHEMES["hf"])
    install(str(root))
    yield root
    stores._STORES.clear()


def test_folders_globs_and_files_resolve_as_local_paths_do(hub):
    assert resolve_inputs([f"{DATA}/"]) == [f"{DATA}/a.jsonl", f"{DATA}/b.parquet"]
    assert resolve_inputs([DATA]) == [f"{DATA}/a.jsonl", f"{DATA}/b.parquet"]  # a prefix that holds objects
    assert resolve_inputs([f"{DATA}/*.parquet"]) == [f"{DATA}/b.parquet"]
    assert resolve_inputs([f"{DATA}/a.jsonl"]) == [f"{DATA}/a.jsonl"]
    with pytest.raises(UsageError, match=r"input not found: hf://datasets/org/name/data/\*\.gz"):
        resolve_inputs([f"{DATA}/*.gz"])
    with pytest.raises(UsageError, match="unsupported input format"):
        resolve_inputs([f"{DATA}/README.md"])


def test_rows_and_locations_equal_the_local_files(hub):
    local = str(hub / "datasets" / "org" / "name" / "data")
    want = [(r.data, r.where.replace(local, DATA)) for r in iter_rows([local])]
    got = [(r.data, r.where) for r in iter_rows([f"{DATA}/"])]
    assert got == want and len(got) == 30
    assert got[0][1] == f"{DATA}/a.jsonl:1" and got[10][1] == f"{DATA}/b.parquet: row 1"
    assert count_rows([f"{DATA}/"]) == 30


def test_the_fingerprint_holds_the_blob_id_not_the_modification_time(hub):
    from scorecli.config import ScoreConfig
    from scorecli.engine.job import fingerprint

    cfg = ScoreConfig(model="m")
    before = fingerprint(cfg, [f"{DATA}/a.jsonl"], "parquet")["input files"]
    content = (hub / "datasets/org/name/data/a.jsonl").read_bytes()
    assert before == [[f"{DATA}/a.jsonl", len(content), hashlib.sha1(content).hexdigest()]]
    (hub / "datasets/org/name/data/a.jsonl").write_bytes(content.replace(b'"q', b'"Q', 1))  # same size
    assert fingerprint(cfg, [f"{DATA}/a.jsonl"], "parquet")["input files"] != before


def test_hf_outputs_are_refused(hub):
    from scorecli.io.output import resolve_output

    with pytest.raises(UsageError, match="hf:// is read-only"):
        resolve_output(f"{DATA}/out.parquet")


def test_a_hub_that_cannot_be_reached_is_one_line_naming_the_url(monkeypatch):
    """With no route to the Hub (an offline machine; here an endpoint that never resolves), an
    `hf://` input failed with exit code 1 and `error: ConnectError: [Errno -2] Name or service not
    known`, naming no URL: huggingface_hub's connection errors are no OSError. It is now the one
    line, exit code 2, of a store host that does not resolve, at once."""
    import time

    from huggingface_hub import HfFileSystem

    hf = dataclasses.replace(
        schemes.SCHEMES["hf"],
        filesystem=lambda url: schemes._fsspec(HfFileSystem(endpoint="http://scorecli-hub.invalid"), url),
    )
    monkeypatch.setitem(schemes.SCHEMES, "hf", hf)
    stores._STORES.clear()
    started = time.monotonic()
    try:
        with pytest.raises(UsageError) as raised:
            resolve_inputs([f"{DATA}/b.parquet"])
    finally:
        stores._STORES.clear()
    said = str(raised.value)
    assert said.startswith(f"cannot read {DATA}/b.parquet: ") and "does not resolve" in said, said
    assert "HF_ENDPOINT" in said and "\n" not in said and time.monotonic() - started < 10


RUN = """import sys
from tests.test_hf_source import install
install(sys.argv.pop(1))
from scorecli.cli import main
sys.argv[0] = "scorecli"
main()
"""


@pytest.mark.e2e
def test_scored_through_the_command_line_as_the_local_folder_is(hub, qwen3_seq_cls, tmp_path):
    local = str(hub / "datasets" / "org" / "name" / "data")
    outs = {}
    for name, inputs in {"local": [local], "hub": [f"{DATA}/"]}.items():
        outs[name] = tmp_path / f"{name}.jsonl"
        argv = ["score", *inputs, "--out", str(outs[name]), "--model", qwen3_seq_cls, "--quiet"]
        cmd = SCORECLI + argv if name == "local" else [sys.executable, "-c", RUN, str(hub), *argv]
        proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, timeout=300)
        assert proc.returncode == 0, proc.stderr.decode()
    got, want = ([json.loads(line) for line in outs[k].read_text().splitlines()] for k in ("hub", "local"))
    assert got == want and len(got) == 30
