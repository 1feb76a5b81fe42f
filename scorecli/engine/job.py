"""What identifies a scoring job, for `--resume` (docs/long-jobs.md): its fingerprint.

Two runs are the same job when they read the same input files (resolved paths, sizes,
modification times; objects in a store by URL, size and ETag or generation), load the same model (its resolved path, and the names, sizes and
modification times of the files that make it: weights, configs, tokenizer), run the same
scorecli, torch, transformers, tokenizers and jinja2 versions and set every flag that changes the output's content the same way; a template
file counts by what it holds (an edited template is another job). Flags that
only change how the work is done (`--window-rows`, `--window-seconds`, `--quiet`, the engine and
its workers, the GGUF cache folder, the score cache and the audit) are left out, so a resumed run may change them (a resumed job
still goes on in its own windows: `Checkpoint.schedule`). `--device`, `--dtype` and `--attention`
count by what they resolve to, which only the loaded model tells (`auto` is bfloat16 and flashinfer
on a GPU, float32 and sdpa on a CPU): the kept rows' output metadata holds it, and the rest of the
job must resolve the same (`Checkpoint.same_choices`).

Knows flags and files; nothing about scoring or how parts are stored (`io.parts`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from dataclasses import fields, replace
from typing import Any

from scorecli.config import ScoreConfig
from scorecli.core.templates import PRESETS
from scorecli.io.readers import STDIN
from scorecli.io.sources import source_for
from scorecli.model.hub import PICKLED_SUFFIXES, READ_SUFFIXES, local_model_path
from scorecli.runtimes.route import Route
from scorecli.version import __version__

# the `self_check` of a window whose pairs all came from the score cache: no model of this job scored
# it (its metadata's device, dtype and attention are those of the run that filled the cache)
FROM_CACHE = "not run (every pair came from the score cache)"

# ScoreConfig fields that do not change the output's content
NOT_CONTENT = {
    "window_rows",
    "window_seconds",
    "cache_dir",
    "job_tokens",
    "score_cache",
    "audit",
    "audit_strict",
    "runtime_reason",
    "runtime_route",
}
# ScoreConfig fields whose resolved value the kept parts' metadata holds, compared once the model is loaded
RESOLVED = {"device", "dtype", "attention"}
# the file that marks a score cache's folder (`cache.store`)
SCORE_CACHE_MARKER = "scorecli-score-cache.json"
# libraries that may resolve the same flags and model otherwise (a chat template rendered, label
# tokens tokenized otherwise): a job resumed after an upgrade is another job, and the score cache
# resolves a request again (`cache.identity.request_digest`); a job counts torch's too (bit for bit)
LIBRARIES = ("transformers", "tokenizers", "jinja2")
# the files that make a model folder's output (`model.hub.READ_SUFFIXES`: weights, configs,
# tokenizer files, code), pickled weights, GGUF files and checkpoints
MODEL_SUFFIXES = READ_SUFFIXES + PICKLED_SUFFIXES + (".gguf", ".ckpt")


def fingerprint(cfg: ScoreConfig, paths: list[str], output: str) -> dict[str, Any]:
    """The job's identity as a flat JSON-able dict; each key names what differs on a mismatch.

    Args:
        cfg: the run's configuration.
        paths: the input files (as `resolve_inputs` gives them; `-`, stdin, only in a job never resumed).
        output: the output's format, e.g. `parquet`, `jsonl`, `jsonl.gz`, `dataset`.
    """
    out: dict[str, Any] = {
        "input files": [_file(p) for p in paths],
        "model": os.path.realpath(cfg.model) if os.path.exists(cfg.model) else cfg.model,
        "model file": model_stamps(cfg.model),
        "scorecli version": __version__,
        **{f"{name} version": v for name, v in library_versions(("torch", *LIBRARIES)).items()},
        "output format": output,
        "template file": _content(cfg.template),
    }
    for f in fields(cfg):
        if f.name not in NOT_CONTENT | RESOLVED and f.name != "model":
            value = getattr(cfg, f.name)
            out["--" + f.name.replace("_", "-")] = value
    return json.loads(json.dumps(out))  # as it reads back from the job file (tuples as lists)


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str | None]:
    """The installed versions of the libraries `names` (None: not installed), read without importing them."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _file(path: str) -> list:
    """An input's identity: its real path, size and modification time; an object's URL, size and
    ETag or generation (a store's modification time says when it was uploaded, not what it holds)."""
    return [path] if path == STDIN else source_for(path).stamp(path)  # stdin: never resumed


def _content(template: str) -> str | None:
    """A template file's digest (None for a preset): the file decides every prompt, and an edit
    keeps its path (and may keep its size)."""
    if template in PRESETS or not os.path.isfile(template):
        return None
    with open(template, "rb") as f:
        return "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()


def model_files(path: str) -> list[str]:
    """The files that make the model at `path` (a folder, or one GGUF file), sorted, relative: in
    every subfolder (a sentence-transformers Router keeps its routes' weights two levels down)."""
    if os.path.isfile(path):
        return [os.path.basename(path)]
    found = []
    for root, dirs, names in os.walk(path, followlinks=True):
        if SCORE_CACHE_MARKER in names:  # a score cache kept in the model's folder: not the model
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in names:  # an output's bookkeeping there (`<out>.partial/_scorecli_job.json`) neither
            if name.endswith(MODEL_SUFFIXES) and not name.startswith((".", "_scorecli_")):
                found.append(os.path.relpath(os.path.join(root, name), path))
    return sorted(found)


def model_stamps(name: str) -> dict[str, list]:
    """{file: [size, modification time]} of the files that make a local model (a model retrained
    or re-tokenized in place with the same shapes is another model); a Hub id's are those of its
    snapshot in the Hugging Face cache (another revision downloaded is another model), none before
    it is downloaded (`Checkpoint.begin` looks again once the model has loaded)."""
    if not os.path.exists(name):
        name = local_model_path(name) or name
    if os.path.isfile(name):
        return {os.path.basename(name): _stamp(name)}
    if not os.path.isdir(name):
        return {}
    return {n: _stamp(os.path.join(name, n)) for n in model_files(name) if os.path.isfile(os.path.join(name, n))}


def _stamp(path: str) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns]


def pinned_runtime(cfg: ScoreConfig, metadata: dict[str, str]) -> ScoreConfig:
    """`cfg` running what `--runtime auto` chose for output with `metadata` (`runtime`,
    `runtime_cut_tokens`, `runtime_reason`): the one runtime, or the route that sends short and
    long batches to two (`runtime_route`), with the reason it was chosen; `cfg` itself where the
    metadata names no route."""
    route = Route.from_metadata(metadata.get("runtime"), metadata.get("runtime_cut_tokens"))
    if route is None:
        return cfg
    reason = metadata.get("runtime_reason") or None
    if route.second is not None:  # one runtime for short batches, one for long
        return replace(cfg, runtime_route=route.text(), runtime_reason=reason)
    return replace(cfg, runtime=route.first, runtime_reason=reason)
