"""Attention backends behind one small protocol, plugged into transformers' model code.

- `backends`: every backend, what it declares it can do, and `choose` (the one place
  `--attention` is decided; imports no torch);
- `protocol`: what a backend is (`plan` once per batch, `attend` per layer) and `ModelInputs`;
- `registry`: the attention function transformers calls, `bound` backends and `make_backend`;
- `device`: one-copy uploads of index arrays and ragged-to-padded scatter;
- one module per backend: `dense` (sdpa, eager), `flex`, `flashinfer`; `blocks`, `kernel`,
  `shared` are their parts.
Tests and callers pick any backend without touching globals. The names below load their
modules on first use, so `scorecli.attention.backends` stays free of torch. This package knows
nothing about tokenization, heads or output.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "pad_ragged": "device",
    "to_device": "device",
    "AttentionBackend": "protocol",
    "ModelInputs": "protocol",
    "ATTN_NAME": "registry",
    "UNSUPPORTED": "registry",
    "bound": "registry",
    "make_backend": "registry",
    "register": "registry",
    "set_implementation": "registry",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"scorecli.attention.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'scorecli.attention' has no attribute {name!r}")
