"""Where the environment keeps no Python bytecode for torch (PYTHONDONTWRITEBYTECODE, read-only or
uncompiled packages), the command line keeps it in its cache folder (`scorecli.bytecode`): the
GPU machines' imports took 12.2 s so, 5.5-6.2 s with it (benchmarks/RESULTS.md, 2026-11-27 18:36).
A stand-in package without bytecode plays torch's part."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.test_cli import _env, jsonl, write
from tests.test_score_cache import hooked

CHECK = """
import sys
from scorecli import bytecode
if sys.argv[1] == "asked":
    bytecode.keep_bytecode()
if sys.argv[3] == "read-only":  # as a user other than root finds a read-only folder (root writes anyway)
    import os
    access = os.access
    os.access = lambda path, mode: "standin" not in str(path) and access(path, mode)
note = bytecode.cache_bytecode(sys.argv[2], probe="standin")
import standin
print(note)
print(standin.__cached__)
"""


@pytest.fixture
def standin(tmp_path) -> Path:
    """A package whose bytecode is nowhere yet."""
    root = tmp_path / "packages"
    (root / "standin").mkdir(parents=True)
    (root / "standin" / "__init__.py").write_text("VALUE = 1\n")
    return root


def check(
    standin: Path, cache: Path, asked: bool = True, dont_write: bool = True, read_only: bool = False
) -> tuple[str, str]:
    env = {**os.environ, "PYTHONPATH": f"{standin}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("PYTHONPYCACHEPREFIX", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if dont_write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    args = [sys.executable, "-c", CHECK, "asked" if asked else "not", str(cache), "read-only" if read_only else "-"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    note, cached = proc.stdout.strip().splitlines()
    return note, cached


def test_bytecode_goes_to_the_cache_folder_once_and_is_used_after(standin, tmp_path):
    cache = tmp_path / "cache"
    note, cached = check(standin, cache)
    assert "standin has no Python bytecode here and PYTHONDONTWRITEBYTECODE is set" in note
    assert str(cache / "pycache") in note
    assert cached.startswith(str(cache / "pycache")) and os.path.isfile(cached), "not written to the cache"
    assert not (standin / "standin" / "__pycache__").exists(), "written beside the package"
    note, again = check(standin, cache)
    assert note == "None" and again == cached  # warm: said nothing, read it from there


def test_nothing_changes_where_python_writes_bytecode_itself_or_nobody_asked(standin, tmp_path):
    cache = tmp_path / "cache"
    note, cached = check(standin, cache, asked=False)  # a library caller's process
    assert note == "None" and not cache.exists()
    note, cached = check(standin, cache, dont_write=False)  # Python writes it beside, as usual
    assert note == "None" and not cache.exists()
    assert cached.startswith(str(standin)) and os.path.isfile(cached)
    note, _ = check(standin, cache)  # bytecode there now: nothing to do even with the variable set
    assert note == "None" and not cache.exists()


def test_a_read_only_package_folder_counts_as_no_bytecode(standin, tmp_path):
    note, cached = check(standin, tmp_path / "cache", dont_write=False, read_only=True)
    assert "its folder is read-only" in note and cached.startswith(str(tmp_path / "cache"))


def test_an_unwritable_cache_folder_changes_nothing(standin, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    note, cached = check(standin, blocker / "cache")  # cannot be made: under a file
    assert note == "None" and not cached.startswith(str(blocker))


@pytest.mark.e2e
def test_a_run_keeps_its_bytecode_in_the_cache_folder(bert_cross_encoder, standin, tmp_path):
    """A whole run with PYTHONDONTWRITEBYTECODE set, the stand-in in torch's place: the note once,
    torch's bytecode in --cache-dir after it, the scores as usual; SCORECLI_BYTECODE_CACHE=0 and
    --quiet say nothing."""
    inp = write(tmp_path / "in.jsonl", jsonl([{"query": "a question", "items": ["an answer", "another"]}]))
    cache = tmp_path / "cache"
    env = {**_env(), "PYTHONDONTWRITEBYTECODE": "1"}
    env["PYTHONPATH"] = f"{standin}{os.pathsep}{env.get('PYTHONPATH', '')}"

    def score(out: str, *flags: str, **more: str):
        args = ["score", str(inp), "--model", bert_cross_encoder, "--out", str(tmp_path / out)]
        result = hooked(
            "probe:standin", [*args, "--runtime", "torch", "--cache-dir", str(cache), *flags], {**env, **more}
        )
        assert result.rc == 0, result.stderr
        assert len(pq.read_table(tmp_path / out)["scores"][0].as_py()) == 2
        return result.stderr

    assert "note: standin has no Python bytecode here" not in score("off.parquet", SCORECLI_BYTECODE_CACHE="0")
    assert not (cache / "pycache").exists()
    assert "note: standin has no Python bytecode here" in score("first.parquet")
    import torch

    mirrored = cache / "pycache" / Path(torch.__file__).parent.relative_to("/")
    assert any(mirrored.glob("__init__.cpython-*.pyc")), "torch's bytecode is not in the cache folder"
    assert "bytecode" not in score("quiet.parquet", "--quiet")
