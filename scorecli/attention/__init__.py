"""Attention backends behind one small protocol, plugged into transformers' model code.

A backend turns a ragged `Batch` into model inputs once per batch (`plan`) and computes
attention per layer (`attend`). transformers calls our registered attention function
("scorecli") in every layer; it forwards to the backend bound to the current forward call
(`bound`, a context variable: decoder layers that do not hand `**kwargs` down to attention,
StableLM's and Nemotron's, still reach it), or to one passed as the `scorecli_backend`
forward kwarg. Tests and callers pick any backend without touching globals.
This package knows nothing about tokenization, heads or output.
"""

from __future__ import annotations

import contextlib
import functools
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from scorecli.attention.shared import SharedKV
from scorecli.batching import Batch
from scorecli.errors import UsageError

ATTN_NAME = "scorecli"


@dataclass(frozen=True, slots=True)
class ModelInputs:
    """Device tensors for one forward pass, in the backend's layout."""

    input_ids: torch.Tensor  # [B, L]
    position_ids: torch.Tensor  # [B, L]
    pool_index: torch.Tensor  # [N] flat index into [B * L] hidden states
    first_index: torch.Tensor  # [N] flat index of each item's sequence start


class AttentionBackend(Protocol):
    name: str
    is_padded: bool
    shares_prefix: bool  # whether batches may continue a shared prefix held in `shared`
    shared: "SharedKV | None"

    def plan(self, batch: Batch, device: torch.device, dtype: torch.dtype) -> ModelInputs:
        """Prepare masks or kernel plans for this batch; return the model inputs."""
        ...

    def attend(
        self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float,
        softcap: float | None = None, sinks: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """query [b, heads, q, d], key/value [b, kv_heads, k, d] -> [b, q, heads, d]. `softcap`:
        the model's attention-logit soft cap (Gemma 2); `sinks` [heads]: its attention-sink
        logits (GPT-OSS `s_aux`); see `kernel.attention`."""
        ...


# attention arguments some models pass that change the result and that no backend implements
UNSUPPORTED = {"sinks": "attention sinks given as `sinks`", "position_bias": "a position bias (ALiBi, T5)"}


# the backend of the forward call running in this thread (`bound`)
_BACKEND: ContextVar["AttentionBackend | None"] = ContextVar("scorecli_backend", default=None)


@contextlib.contextmanager
def bound(backend: "AttentionBackend"):
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
            raise UsageError(f"{type(module).__name__}: this model's attention uses {what}, which scorecli does not implement")
    if attention_mask is not None:  # we register no mask function: a mask here is one the layer made itself
        raise UsageError(f"{type(module).__name__}: this model's attention builds its own mask or bias (e.g. a dynamic "
                         "or sparse-attention mask), which scorecli's backends do not apply")  # fmt: skip
    return backend.attend(module, query, key, value, scaling, kwargs.get("softcap"), kwargs.get("s_aux")), None


def set_implementation(model: torch.nn.Module, name: str) -> None:
    """`model.set_attn_implementation(name)` without transformers' note that a model whose
    attention ignores the interface cannot switch (`scorecli.compat` finds such layers itself,
    and a refusal stays one line)."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model.set_attn_implementation(name)
    finally:
        hf_logging.set_verbosity(verbosity)


def register() -> None:
    """Make the "scorecli" attention name known to transformers (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_NAME, _dispatch)


def make_backend(name: str, device: torch.device, dtype: torch.dtype = torch.float32) -> AttentionBackend:
    """Build the backend for `--attention`.

    `auto` is flashinfer on CUDA when it is installed and the dtype is 16-bit (flashinfer
    has no float32 prefill kernels), else sdpa.
    """
    if name == "auto":
        name = "sdpa"
        if device.type == "cuda" and dtype in (torch.bfloat16, torch.float16):
            try:
                import flashinfer  # noqa: F401

                name = "flashinfer"
            except ImportError:
                pass
    if name == "sdpa":
        from scorecli.attention.dense import SdpaBackend

        return SdpaBackend()
    if name == "eager":
        from scorecli.attention.dense import EagerBackend

        return EagerBackend()
    if name == "flex":
        from scorecli.attention.flex import FlexBackend

        return FlexBackend()
    if name == "flashinfer":
        if device.type != "cuda":
            raise UsageError("--attention flashinfer needs a CUDA device")
        from scorecli.attention.flashinfer import FlashInferBackend

        return FlashInferBackend()
    raise UsageError(f"--attention: unknown backend {name!r}")


def to_device(arrays: list[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    """Copy several 1-D arrays to the device in one transfer; return a view of each.

    Arrays of one dtype travel concatenated; mixed dtypes (flashinfer's uint16/uint32 plan
    arrays beside int64 ids) travel as the bytes of one buffer, each array at an 8-byte
    aligned offset, and come back as views of their own dtype.
    """
    if len({a.dtype for a in arrays}) <= 1:
        flat = torch.from_numpy(np.concatenate(arrays))
        return list(torch.split(_upload(flat, device), [len(a) for a in arrays]))
    offsets, end = [], 0
    for a in arrays:
        offsets.append(end)
        end += -(-a.nbytes // 8) * 8
    buf = np.zeros(end, dtype=np.uint8)
    for a, at in zip(arrays, offsets):
        buf[at : at + a.nbytes] = np.ascontiguousarray(a).view(np.uint8)
    flat = _upload(torch.from_numpy(buf), device)
    return [flat[at : at + a.nbytes].view(_torch_dtype(a.dtype)) for a, at in zip(arrays, offsets)]


@functools.cache
def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype)).dtype


def _upload(flat: torch.Tensor, device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        return flat.pin_memory().to(device, non_blocking=True)
    return flat


def pad_ragged(values: torch.Tensor, where: torch.Tensor, s: int, length: int, fill: int) -> torch.Tensor:
    """Scatter ragged [T] values to the flat positions `where` of a [S, L] tensor of `fill`."""
    out = torch.full((s * length,), fill, dtype=values.dtype, device=values.device)
    return out.index_copy_(0, where, values).view(s, length)
