"""Attention backends behind one small protocol, plugged into transformers' model code.

- `protocol`: what a backend is (`plan` once per batch, `attend` per layer) and `ModelInputs`;
- `registry`: the attention function transformers calls, `bound` backends and `make_backend`;
- `device`: one-copy uploads of index arrays and ragged-to-padded scatter;
- one module per backend: `dense` (sdpa, eager), `flex`, `flashinfer`; `blocks`, `kernel`,
  `shared` are their parts.
Tests and callers pick any backend without touching globals. This package knows nothing about
tokenization, heads or output.
"""

from scorecli.attention.device import pad_ragged, to_device
from scorecli.attention.protocol import AttentionBackend, ModelInputs
from scorecli.attention.registry import ATTN_NAME, UNSUPPORTED, bound, make_backend, register, set_implementation

__all__ = ["ATTN_NAME", "UNSUPPORTED", "AttentionBackend", "ModelInputs", "bound", "make_backend", "pad_ragged",
           "register", "set_implementation", "to_device"]  # fmt: skip
