"""Python bytecode for what a run imports, where the environment keeps none.

A run imports thousands of modules (torch, sympy, transformers, flashinfer). Python compiles each
from source once and keeps the bytecode beside it (`__pycache__`), unless told not to
(PYTHONDONTWRITEBYTECODE, which container images often set) or unable to (read-only packages);
installers may leave it out too (uv does by default). Then every process compiles them all again:
on a GPU machine so set up, `import torch, transformers.modeling_utils` took 12.2 s, and 5.5-6.2 s
with the bytecode kept in a folder of its own (benchmarks/RESULTS.md, 2026-11-27 18:36).

When the command line asked for it (`keep_bytecode`, from its entry point: a library caller's process
is its own to configure), `cache_bytecode` looks at torch, the largest import: where its bytecode is
missing and Python will not write it beside the sources, this process's bytecode goes to the cache
folder instead (`sys.pycache_prefix`: a mirror of the sources' paths, written by Python atomically,
so concurrent runs share it; a write that fails, e.g. on a full disk, is skipped by Python and costs
nothing else), and the processes it starts look there too (PYTHONPYCACHEPREFIX). Nothing is written
where the packages are. A PYTHONPYCACHEPREFIX the user set is left as it is (and SCORECLI_BYTECODE_CACHE=0
keeps the command line from asking). Knows nothing about runs or models.
"""

from __future__ import annotations

import importlib.util
import os
import sys

FOLDER = "pycache"  # under the cache folder ($SCORECLI_CACHE_DIR, --cache-dir, ~/.cache/scorecli)
PROBE = "torch"  # the package whose bytecode says whether the environment has any
_WANTED: list[bool] = []


def keep_bytecode() -> None:
    """From now on `cache_bytecode` may act (the command line's processes)."""
    _WANTED.append(True)


def cache_bytecode(cache_dir: str, probe: str | None = None) -> str | None:
    """Send this process's bytecode to `cache_dir`/pycache when `probe` has none and Python would
    not write it; the note to say when that folder holds none of it yet (the run that fills it is
    slower), else None."""
    if not _WANTED or sys.pycache_prefix:
        return None
    probe = probe or PROBE
    source = _source(probe)
    if source is None or os.path.exists(importlib.util.cache_from_source(source)):
        return None  # not installed as source, or its bytecode is there
    beside = os.path.dirname(source)
    if not sys.dont_write_bytecode and os.access(beside, os.W_OK | os.X_OK):
        return None  # Python writes it there itself, this once
    prefix = os.path.join(os.path.abspath(cache_dir), FOLDER)
    try:
        os.makedirs(prefix, exist_ok=True)
    except OSError:
        return None  # no cache folder: every import would try to make one
    if not os.access(prefix, os.W_OK | os.X_OK):
        return None
    sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False
    os.environ["PYTHONPYCACHEPREFIX"] = prefix  # torch's compile workers import it too
    if os.path.exists(importlib.util.cache_from_source(source)):
        return None
    why = "PYTHONDONTWRITEBYTECODE is set" if sys.flags.dont_write_bytecode else "its folder is read-only"
    return (
        f"{probe} has no Python bytecode here and {why}: scorecli keeps it in {prefix} (compiled there "
        "once, by the first run that imports it; later runs start seconds faster; SCORECLI_BYTECODE_CACHE=0: not)"
    )


def _source(package: str) -> str | None:
    """The path of `package`'s `__init__.py`, without importing it; None when it is not a source file."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    return origin if origin and origin.endswith(".py") and os.path.isfile(origin) else None
