"""FlashInfer backend over the ragged layout: one row `[1, T]` of all the batch's tokens.

Four kernel plans, chosen per batch (the arguments of each: `flashinfer_args`, pure numpy):
- `causal`: every sequence holds one item, so plain causal attention per sequence is the
  MIS rule; `BatchPrefillWithRaggedKVCacheWrapper(causal=True)`.
- `paged`: `BatchPrefillWithPagedKVCacheWrapper` in its multi-item-scoring
  mask mode, over the batch's own K/V seen as pages of one token
  (`paged_kv_indices = arange(T)`, every last page holding 1 token). The ragged wrapper takes
  the same MIS arguments but its run() never selects the MIS mask mode (flashinfer 0.7.2), so
  items would silently see each other; hence the paged wrapper.
- `cascade`: the MIS rule as two ragged plans, every segment causal on itself and every item
  on its prefix (gathered), whose softmax states `merge_state_in_place` joins; only keys a query
  may see are visited, in bulk loads. The default for MIS: on an H200 its attention ran 1.64x
  (sglang shape) and 1.41x (passage shape) the paged plan's (benchmarks/RESULTS.md, 2026-11-26
  17:12); `SCORECLI_FLASHINFER_MIS=paged` picks the paged plan.
- `custom`: a dense boolean mask per sequence (`[L, L]` row-major, True = attend) on the
  ragged wrapper (fa2). Costs O(L^2) bits per sequence; a fallback and a cross-check.

flashinfer itself is imported only when the backend first plans on a CUDA device. This module
knows nothing about tokenization.
"""

from __future__ import annotations

import logging
import os
import warnings

import numpy as np
import torch

from scorecli.attention import ModelInputs, to_device
from scorecli.attention.backends import FLASHINFER_HEAD_DIMS
from scorecli.attention.flashinfer_args import (
    PagedKV,
    cascade_args,
    custom_mask,
    is_single_item,
    mis_args,
    paged_kv_args,
    prefix_first,
)
from scorecli.attention.shared import SharedKV
from scorecli.core.batching import Batch
from scorecli.errors import UsageError, notice

MIS_KERNELS = ("paged", "cascade", "custom")
MIS_KERNEL_ENV = "SCORECLI_FLASHINFER_MIS"  # which of MIS_KERNELS a backend built by name uses

# ---- runtime ------------------------------------------------------------------------------


def kernel_dtype(dtype: torch.dtype) -> torch.dtype:
    """flashinfer prefill kernels take float16/bfloat16 only; float32 runs in float16."""
    return dtype if dtype in (torch.float16, torch.bfloat16) else torch.float16


# the head sizes its kernels take, as declared in `backends` (checked at the first layer)
HEAD_DIMS: tuple[int, ...] = FLASHINFER_HEAD_DIMS


class FlashInferBackend:
    """flashinfer prefill kernels over the ragged `[1, T]` layout (CUDA only).

    Args:
        mis_kernel: for batches with several items per sequence, "paged" (the kernel's
            multi-item-scoring mask mode), "cascade" (two ragged plans merged) or "custom" (a
            dense per-sequence mask on the ragged wrapper); None: `SCORECLI_FLASHINFER_MIS`, else
            "cascade".
        workspace_bytes: size of the float workspace shared by the wrappers.
    """

    name = "flashinfer"
    is_padded = False
    shares_prefix = False  # every batch starts at its own first token
    shared: SharedKV | None = None  # never set: batches start at their own first token

    def __init__(self, mis_kernel: str | None = None, workspace_bytes: int = 128 << 20) -> None:
        if mis_kernel is None:
            mis_kernel = os.environ.get(MIS_KERNEL_ENV) or "cascade"
            if mis_kernel not in MIS_KERNELS:
                raise UsageError(f"{MIS_KERNEL_ENV}: expected one of {', '.join(MIS_KERNELS)}, got {mis_kernel!r}")
        if mis_kernel not in MIS_KERNELS:
            raise ValueError(f"mis_kernel must be one of {MIS_KERNELS}, got {mis_kernel!r}")
        self.mis_kernel = mis_kernel
        self.workspace_bytes = workspace_bytes
        self.mode: str | None = None  # "causal" | "paged" | "cascade" | "custom" for the current batch
        self._wrappers: dict | None = None
        self._merge = None  # flashinfer.merge_state_in_place
        self._plan_inputs: dict[str, tuple[tuple, dict]] = {}  # wrapper -> plan() arguments
        self._cascade: tuple[torch.Tensor, torch.Tensor] | None = None  # prefix rows, merged rows
        self._planned_for: tuple | None = None
        self._plan_copied: torch.cuda.Event | None = None  # after the last plan's copy to the device
        self._on_cuda = False
        self._warned_fp32 = False

    @property
    def plans(self) -> tuple[str, ...]:
        """The wrappers this batch runs, each planned once per batch."""
        return tuple(self._plan_inputs)

    def plan(self, batch: Batch, device: torch.device, dtype: torch.dtype) -> ModelInputs:
        """Build this batch's kernel arguments; the wrappers' own plan() runs at the first
        layer, when head counts, head size and scale are known, and serves every layer."""
        if self._wrappers is None:
            self._wrappers, self._merge = _make_wrappers(device, self.workspace_bytes)
        self._on_cuda = device.type == "cuda"
        self.mode = "causal" if is_single_item(batch) else self.mis_kernel
        if self.mode == "cascade" and not prefix_first(batch):
            self.mode = "paged"  # a layout the cascade does not assume: the kernel's own rule
        arrays = [batch.input_ids, batch.position_ids, batch.pool_index, batch.first_index]
        if self.mode == "paged":
            mis, pages = mis_args(batch), paged_kv_args(batch)
            arrays += [pages.paged_kv_indices, mis.prefix_len_ptr, mis.token_pos_in_items_ptr, mis.max_item_len_ptr]
        elif self.mode == "cascade":
            cas = cascade_args(batch)
            arrays += [cas.prefix_rows, cas.merge]
        elif self.mode == "custom":
            arrays.append(custom_mask(batch))  # [sum L^2] bool, packed by plan()
        ids, pos, pool, first, *plan_arrays = to_device(arrays, device)  # one host-to-device copy
        cu = _host(batch.cu_seqlens)  # [S+1], host: plan() reads it there
        self._cascade = None
        if self.mode == "paged":
            self._plan_inputs = {"paged": _paged_plan_inputs(pages, mis.token_pos_in_items_len, *plan_arrays)}
        elif self.mode == "custom":
            self._plan_inputs = {"custom": ((cu, cu), {"custom_mask": plan_arrays[0]})}
        elif self.mode == "cascade":
            runs = _host(cas.runs_indptr)
            self._plan_inputs = {"causal": ((runs, runs), {"causal": True})}
            if cas.prefix_indptr is not None:  # else no sequence has a prefix: the runs are the rule
                self._plan_inputs["prefix"] = ((_host(cas.request_indptr), _host(cas.prefix_indptr)), {"causal": False})
                self._cascade = (plan_arrays[0], plan_arrays[1])
        else:
            self._plan_inputs = {"causal": ((cu, cu), {"causal": True})}
        self._planned_for = None
        return ModelInputs(ids[None], pos[None], pool, first)

    def attend(self, module, query, key, value, scaling, softcap=None, sinks=None):
        """query [1, heads, T, d], key/value [1, kv_heads, T, d] -> [1, T, heads, d]."""
        if sinks is not None:
            raise UsageError("--attention flashinfer: this model's attention sinks (s_aux) are not supported; use sdpa")
        kdtype = kernel_dtype(query.dtype)
        if kdtype != query.dtype:
            self._warn_fp32(query.dtype)
        shape = (query.shape[1], key.shape[1], query.shape[3], value.shape[3])
        self._ensure_planned(shape, None if scaling is None else float(scaling), float(softcap or 0.0), kdtype)
        q = query[0].transpose(0, 1).to(kdtype).contiguous()  # [T, heads, d]
        k = key[0].transpose(0, 1).to(kdtype).contiguous()  # [T, kv_heads, d]
        v = value[0].transpose(0, 1).to(kdtype).contiguous()  # [T, kv_heads, dv]
        if self.mode == "paged":
            out = self._wrappers["paged"].run(q, (k.unsqueeze(1), v.unsqueeze(1)))  # pages [T, 1, kv_heads, d]
        elif self._cascade is not None:
            prefix_rows, merge = self._cascade
            out, lse = self._wrappers["causal"].run(q, k, v, return_lse=True)  # each run on itself
            on_prefix, lse_prefix = self._wrappers["prefix"].run(
                q, k.index_select(0, prefix_rows), v.index_select(0, prefix_rows), return_lse=True
            )
            self._merge(out, lse, on_prefix, lse_prefix, mask=merge)  # items' rows: both states in one
        else:
            out = self._wrappers[self.plans[0]].run(q, k, v)  # [T, heads, dv]
        return out.to(query.dtype).unsqueeze(0)  # [1, T, heads, dv]

    def _ensure_planned(
        self, shape: tuple[int, int, int, int], scaling: float | None, softcap: float, kdtype: torch.dtype
    ) -> None:
        key = (shape, scaling, softcap, kdtype)
        if key == self._planned_for:
            return
        heads, kv_heads, dqk, dvo = shape
        if not {dqk, dvo} <= set(HEAD_DIMS):  # checked once per plan, not per layer
            names = ", ".join(str(d) for d in HEAD_DIMS[:-1]) + f" and {HEAD_DIMS[-1]}"
            raise UsageError(
                f"--attention flashinfer: its kernels take head sizes {names}, this model's is "
                f"{dqk}; use --attention sdpa"
            )
        # plan() writes its schedule into a pinned host buffer and queues a copy of it to the
        # device without waiting: batches are launched without a synchronization each, so the
        # next plan must not overwrite that buffer before the GPU has taken the last copy (else a
        # batch runs with the next batch's schedule). The host stays about one batch ahead.
        if self._plan_copied is not None:
            self._plan_copied.synchronize()
        for wrapper, (args, kwargs) in self._plan_inputs.items():
            sizes = (heads, kv_heads, dqk, 1) if wrapper == "paged" else (heads, kv_heads, dqk)
            self._wrappers[wrapper].plan(
                *args,
                *sizes,
                head_dim_vo=dvo,
                sm_scale=scaling,
                logits_soft_cap=softcap or None,  # the kernel's cap * tanh(scaled score / cap), as Gemma 2
                q_data_type=kdtype,
                kv_data_type=kdtype,
                **kwargs,
            )
        if self._on_cuda:
            self._plan_copied = torch.cuda.Event()
            self._plan_copied.record()
        self._planned_for = key

    def _warn_fp32(self, dtype: torch.dtype) -> None:
        if not self._warned_fp32:
            warnings.warn(
                f"flashinfer kernels take float16/bfloat16: attention runs in float16 under a {dtype} model "
                "(use --attention sdpa for full float32 attention)",
                RuntimeWarning,
                stacklevel=3,
            )
            self._warned_fp32 = True


def _paged_plan_inputs(
    pages: PagedKV, token_pos_in_items_len: int, kv_indices, prefix_len, token_pos, max_item_len
) -> tuple[tuple, dict]:
    """Positional and keyword plan() arguments of the paged wrapper in MIS mode.

    The indptrs and last-page lengths stay on the host, where plan() reads them; the page
    indices and the three MIS arrays (`mis_args`) arrive on the device, where the kernel reads
    them, so plan() copies nothing more.
    """
    host = (torch.from_numpy(a) for a in (pages.qo_indptr, pages.paged_kv_indptr, pages.paged_kv_last_page_len))
    qo_indptr, kv_indptr, last_page_len = host
    kwargs = {
        "causal": True,
        "prefix_len_ptr": prefix_len,  # [S] uint32
        "token_pos_in_items_ptr": token_pos,  # [S * len] uint16
        "token_pos_in_items_len": token_pos_in_items_len,
        "max_item_len_ptr": max_item_len,  # [S] uint16
    }
    return (qo_indptr, kv_indptr, kv_indices, last_page_len), kwargs


def _host(indptr: np.ndarray) -> torch.Tensor:
    """An int32 host tensor: plan() reads indptrs on the host."""
    return torch.from_numpy(indptr.astype(np.int32))


def _make_wrappers(device: torch.device, workspace_bytes: int) -> tuple[dict, object]:
    """One shared workspace and a wrapper per plan, created once per backend; and flashinfer's
    `merge_state_in_place` (the cascade's join)."""
    import flashinfer

    _say_jit_builds()
    workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=device)
    return {
        "causal": flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD"),
        # the cascade's second plan (items on their prefix), planned in the same batch as "causal"
        "prefix": flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD"),
        # its own wrapper: the ragged wrapper's plan() keeps a previous custom mask when the
        # next plan has none, so causal plans must never share it
        "custom": flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD", backend="fa2"),
        "paged": flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD"),
    }, flashinfer.merge_state_in_place


JIT_NOTE = (
    "flashinfer is compiling its attention kernels for this GPU, dtype and head size: the first "
    "run on this machine waits a minute or two; later runs load them from ~/.cache/flashinfer"
)


class _JitNote(logging.Handler):
    """Turns flashinfer's "Building JIT module ..." log record into scorecli's one note."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Building JIT module"):
            notice(JIT_NOTE)


def _say_jit_builds() -> None:
    """flashinfer's JIT logger writes timestamped lines straight to stderr (also under --quiet);
    keep its log file, drop its stderr handler and say one note when a kernel is compiled."""
    try:
        from flashinfer.jit.core import logger
    except ImportError:  # another flashinfer layout, or the tests' stand-in
        return
    if any(isinstance(h, _JitNote) for h in logger.handlers):
        return
    for handler in list(logger.handlers):
        if type(handler) is logging.StreamHandler:
            logger.removeHandler(handler)
    logger.addHandler(_JitNote())
