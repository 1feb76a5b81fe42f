"""How transformers' model code reaches scorecli's backends, and which backend `--attention` names.

transformers calls our registered attention function ("scorecli") in every layer; it forwards
to the backend bound to the current forward call (`bound`, a context variable: decoder layers
that do not hand `**kwargs` down to attention, StableLM's and Nemotron's, still reach it), or
to one passed as the `scorecli_backend` forward kwarg. Knows nothing about masks or kernels.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar

import torch

from scorecli.attention.backends import build, choose
from scorecli.attention.protocol import AttentionBackend
from scorecli.errors import UsageError

ATTN_NAME = "scorecli"


# attention arguments some models pass that change the result and that no backend implements
UNSUPPORTED = {"sinks": "attention sinks given as `sinks`", "position_bias": "a position bias (ALiBi, T5)"}


# the backend of the forward call running in this thread (`bound`)
_BACKEND: ContextVar[AttentionBackend | None] = ContextVar("scorecli_backend", default=None)


@contextlib.contextmanager
def bound(backend: AttentionBackend):
    """Run the enclosed model call with every attention layer dispatching to `backend`."""
    token = _BACKEND.set(backend)
    try:
        yield backend
    finally:
        _BACKEND.reset(token)


def _dispatch(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    backend = kwargs.get("scorecli_backend") or _BACKEND.get()
    if backend is None:
        raise RuntimeError("scorecli attention called without a backend (bind one with attention.bound)")
    for name, what in UNSUPPORTED.items():
        if kwargs.get(name) is not None:
            raise UsageError(
                f"{type(module).__name__}: this model's attention uses {what}, which scorecli does not implement"
            )
    if attention_mask is not None:  # we register no mask function: a mask here is one the layer made itself
        raise UsageError(
            f"{type(module).__name__}: this model's attention builds its own mask or bias (e.g. a dynamic "
            "or sparse-attention mask), which scorecli's backends do not apply"
        )
    return backend.attend(module, query, key, value, scaling, kwargs.get("softcap"), kwargs.get("s_aux")), None


_DISPATCH = torch.compiler.disable(_dispatch)


def set_implementation(model: torch.nn.Module, name: str) -> None:
    """`model.set_attn_implementation(name)` without transformers' note that a model whose
    attention ignores the interface cannot switch (`scorecli.model.compat` finds such layers itself,
    and a refusal stays one line)."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model.set_attn_implementation(name)
    finally:
        hf_logging.set_verbosity(verbosity)


def register() -> None:
    """Make the "scorecli" attention name known to transformers (idempotent).

    The function is `torch.compiler.disable`d: a layer under `torch.compile`
    (`runtimes.compiled`) compiles around attention, and the backend runs as it does eagerly."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_NAME, _DISPATCH)


def make_backend(name: str, device: torch.device, dtype: torch.dtype = torch.float32) -> AttentionBackend:
    """Build the backend for `--attention name` on `device` (`backends.choose` decides `auto`:
    flashinfer on CUDA when it is installed and the dtype is 16-bit, else sdpa; an explicit
    backend that cannot run here is a UsageError naming why)."""
    return build(choose(name, device.type, dtype in (torch.bfloat16, torch.float16), packed=True).name)
