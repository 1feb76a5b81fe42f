"""What identifies a scoring job, for `--resume` (SPEC §11): its fingerprint.

Two runs are the same job when they read the same input files (resolved paths, sizes,
modification times), load the same model (its resolved path and its weight files' names and
sizes), run the same scorecli version and set every flag that changes the output's content
the same way. Flags that only change how the work is done (`--window-rows`, `--quiet`, the
engine and its workers, the GGUF cache folder) are left out, so a resumed run may change them
(a resumed job still goes on in its own windows: `Checkpoint.part_rows`).

Knows flags and files; nothing about scoring or how parts are stored (`io.parts`).
"""

from __future__ import annotations

import json
import os
from dataclasses import fields
from typing import Any

from scorecli import __version__
from scorecli.config import ScoreConfig

# ScoreConfig fields that do not change the output's content
NOT_CONTENT = {"window_rows", "cache_dir", "job_tokens"}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".ckpt")


def fingerprint(cfg: ScoreConfig, paths: list[str], output: str) -> dict[str, Any]:
    """The job's identity as a flat JSON-able dict; each key names what differs on a mismatch.

    Args:
        cfg: the run's configuration.
        paths: the input files (as `resolve_inputs` gives them; no stdin).
        output: the output's format, e.g. `parquet`, `jsonl`, `jsonl.gz`, `dataset`.
    """
    out: dict[str, Any] = {
        "input files": [_file(p) for p in paths],
        "model": _model(cfg.model),
        "scorecli version": __version__,
        "output format": output,
    }
    for f in fields(cfg):
        if f.name not in NOT_CONTENT and f.name != "model":
            value = getattr(cfg, f.name)
            out["--" + f.name.replace("_", "-")] = value
    return json.loads(json.dumps(out))  # as it reads back from the job file (tuples as lists)


def _file(path: str) -> list:
    st = os.stat(path)
    return [os.path.realpath(path), st.st_size, st.st_mtime_ns]


def _model(name: str) -> dict[str, Any]:
    """A local model's resolved path and weight files (name, size); a Hub id as given."""
    if os.path.isfile(name):
        st = os.stat(name)
        return {"path": os.path.realpath(name), "weights": [[os.path.basename(name), st.st_size]]}
    if os.path.isdir(name):
        from scorecli.model.sentence import module_folders

        weights = sorted(  # a sentence-transformers folder's modules (Dense) keep weights in subfolders
            [os.path.join(sub, n), os.path.getsize(os.path.join(name, sub, n))]
            for sub in ["", *module_folders(name)] if os.path.isdir(os.path.join(name, sub))
            for n in os.listdir(os.path.join(name, sub))
            if n.endswith(WEIGHT_SUFFIXES) and os.path.isfile(os.path.join(name, sub, n))
        )
        return {"path": os.path.realpath(name), "weights": weights}
    return {"path": name}
