"""What a cached score was computed with, as digests (docs/long-jobs.md: Nightly jobs; docs/ARCHITECTURE.md: Score cache).

- `model_identity`: the model by content: a digest of its files (weights, configs, tokenizer
  files, a sentence-transformers folder's modules), whatever folder they sit in. The same files
  moved or downloaded again give the same identity; a file changed in place gives another. Files
  are hashed once per (path, size, modification and change time, inode): the digests of a model
  folder are remembered in the cache (`Memo`), so a nightly run on an unchanged model reads them
  instead of reading gigabytes of weights.
- `request_digest`: the flags as given (with the model's identity, where `auto` resolves and the
  versions of the libraries that resolve them),
  which the cache maps to the settings an earlier run resolved them to, so that a run whose
  pairs all hit needs no model;
- `settings_digest`: the resolved settings that decide a pair's score, and nothing else:
  attention backend, mode, batch and window sizes are not in it (they are exact within noise).
Knows nothing about rows, segments or where the cache lives.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import fields
from typing import Any

from scorecli.engine.job import library_versions, model_files
from scorecli.model.hub import local_model_path
from scorecli.runtimes import runtime_info

# flags that change no score (output layout, engine, where things are kept): a run that differs
# only in these asks the same request
_NOT_SCORE = {
    "model",
    "window_rows",
    "window_seconds",
    "cache_dir",
    "job_tokens",
    "top_k",
    "compact",
    "skip_bad_rows",
    "query_field",
    "items_field",
    "id_field",
    "labels_field",  # relevance labels ride along to the output and metrics
    "group_by",  # records grouped into rows: a pair's key is its query and item, however they came
    "device",  # the device it resolves to is part of the request (`request_digest`)
    "pooled_hidden_states",
    "hidden_dtype",
    "extra_metadata",
    "score_cache",
    "audit",
    "audit_strict",
    "self_check",
    "mode",
    "attention",
    "compile",
    "max_batch_tokens",
    "share_prefix",
}
_BLOCK = 8 << 20
FORMAT = 1  # bump when a key's meaning changes: older entries then simply miss


def digest(value: Any) -> str:
    """128-bit hex digest of a JSON-able value (canonical: sorted keys)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _stat_key(path: str, names: list[str]) -> str:
    """What says the files have not changed since they were hashed: paths, sizes, times, inodes."""
    base = path if os.path.isdir(path) else os.path.dirname(path)
    stats = []
    for name in names:
        st = os.stat(os.path.join(base, name))
        stats.append([name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev])
    return digest([os.path.realpath(path), stats])


def _hash_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


class Memo:
    """Where identities already computed are remembered: `get(key)` / `put(key, value)` (the
    cache's `models/` folder, or nothing)."""

    def get(self, key: str) -> str | None:
        return None

    def put(self, key: str, value: str) -> None:
        """Nothing kept."""


def model_identity(model: str, memo: Memo | None = None) -> str | None:
    """The content digest of the model `model` names (None: no local copy to hash yet)."""
    path = local_model_path(model)
    if path is None:
        return None
    names = model_files(path)
    key = _stat_key(path, names)
    memo = memo or Memo()
    known = memo.get(key)
    if known:
        return known
    base = path if os.path.isdir(path) else os.path.dirname(path)
    value = digest([[name, _hash_file(os.path.join(base, name))] for name in names])
    memo.put(key, value)
    return value


def request_digest(cfg, identity: str, resolved_device: str, version: str) -> str:
    """The flags of `cfg` that may change a score, as given, with the model's `identity`, the
    device `auto` resolves to here, the scorecli `version` and the libraries' (which may resolve
    them otherwise)."""
    flags = {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name not in _NOT_SCORE}
    if flags.get("template") and os.path.isfile(str(flags["template"])):  # a template file: its text
        with open(str(flags["template"]), "rb") as f:
            flags["template"] = ["file", hashlib.sha256(f.read()).hexdigest()]
    return digest(["request", FORMAT, identity, resolved_device, version, library_versions(), flags])


def settings_digest(settings: dict[str, Any]) -> str:
    """The digest every pair key of a run starts from (`settings_of`)."""
    return digest(["settings", FORMAT, settings])


def settings_of(scorer, identity: str) -> dict[str, Any]:
    """Everything that decides a pair's score in a loaded `scorer` (`scorecli.scorer.Scorer`),
    besides the pair itself: the model's identity, its kind, the template's texts and the default
    instruction, prompts, label tokens, activation, similarity, dtype, an approximate runtime,
    lengths and chunking. Not the attention backend, mode, batches or windows."""

    cfg, spec, template = scorer.config, scorer.spec, scorer.template
    chunking = scorer.chunking
    return {
        "model": identity,
        "trust_remote_code": cfg.trust_remote_code,
        "kind": spec.kind,
        # (an item's end stripped, as a chat template that trims its messages renders it)
        "template": [template.prefix, template.item, template.instruction]
        + (["strips item end"] if template.strips_item_end else []),
        "instruction": cfg.instruction,
        "prompts": [cfg.query_prompt, cfg.item_prompt],
        "label_ids": list(spec.label_ids) if spec.label_ids is not None else None,
        "labels": len(spec.label_names),
        "activation": spec.activation,
        "similarity": spec.similarity,
        "dtype": str(scorer.loaded.dtype).removeprefix("torch."),
        # exact runtimes agree within noise; an approximate one (int8) gives other scores
        "runtime": scorer.runtime if runtime_info(scorer.runtime).approximate else "exact",
        "max_seq_len": spec.max_seq_len,
        "truncate": cfg.truncate,
        # with chunks, which chunk an item takes follows the positive label
        "chunking": None
        if chunking is None
        else [chunking.size, chunking.overlap, chunking.aggregate, spec.positive_index],
    } | (
        # a CrossEncoder folder's LogitScore: one logit difference, not the label tokens' probabilities
        # (only where it is one: the settings of every other run are what they were)
        {"logit_score": True} if spec.logit_score else {}
    )
