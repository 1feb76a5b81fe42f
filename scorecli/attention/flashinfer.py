"""FlashInfer backend over the ragged layout: one row `[1, T]` of all the batch's tokens.

Three kernel plans, chosen per batch:
- `causal`: every sequence holds one item, so plain causal attention per sequence is the
  MIS rule; `BatchPrefillWithRaggedKVCacheWrapper(causal=True)`.
- `paged` (default for MIS): `BatchPrefillWithPagedKVCacheWrapper` in its multi-item-scoring
  mask mode, over the batch's own K/V seen as pages of one token
  (`paged_kv_indices = arange(T)`, every last page holding 1 token). The ragged wrapper takes
  the same MIS arguments but its run() never selects the MIS mask mode (flashinfer 0.7.2), so
  items would silently see each other; hence the paged wrapper.
- `custom`: a dense boolean mask per sequence (`[L, L]` row-major, True = attend) on the
  ragged wrapper (fa2). Costs O(L^2) bits per sequence; a fallback and a cross-check.

Our MIS layout has no delimiter tokens, and needs none. The kernel rule, read from
`logits_mask_multi_item_scoring` (fa2, include/flashinfer/attention/prefill.cuh; fa3 in
hopper/mainloop_mma.cuh is the same), for query i and key j of one sequence:

    masked if j > i
    else allowed if i < prefix_len                     (prefix rows: plain causal)
    else allowed if j < prefix_len  or  i < j + token_pos_in_items[i - prefix_len]

So a query whose entry is p sees the prefix and the p keys i-p+1 .. i, that is its own item
up to itself when p is its 1-based position in its item. Only the query's own entry is read;
a delimiter (entry 0) exists in sglang's `P D I1 D I2 D` layout only to be seen by no item.
For our `P I1 I2 ...` we write, for the token at `prefix_len + j`, its 1-based position in its
item: items of lengths 3, 2, 4 give `[1, 2, 3, 1, 2, 1, 2, 3, 4]` (sglang's layout would give
`[0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4, 0]`), zero-padded to `token_pos_in_items_len` per
sequence. `max_item_len_ptr` bounds the key tiles the kernel visits between the prefix and
the diagonal, so it must be at least the longest item of the sequence.

The numpy builders below are pure and tested on CPU; flashinfer itself is imported only when
the backend first plans on a CUDA device. This module knows nothing about tokenization.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from scorecli.attention import ModelInputs, to_device
from scorecli.attention.backends import FLASHINFER_HEAD_DIMS
from scorecli.attention.shared import SharedKV
from scorecli.core.batching import Batch
from scorecli.errors import UsageError, notice

UINT16_MAX = np.iinfo(np.uint16).max
MIS_KERNELS = ("paged", "custom")

# ---- plan arguments, pure numpy ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PagedKV:
    """Page table of the batch's own K/V as pages of one token (page_size 1)."""

    qo_indptr: np.ndarray  # [S+1] int32
    paged_kv_indptr: np.ndarray  # [S+1] int32
    paged_kv_indices: np.ndarray  # [T] int32
    paged_kv_last_page_len: np.ndarray  # [S] int32


@dataclass(frozen=True, slots=True)
class MisArgs:
    """flashinfer's multi-item-scoring plan arguments for a batch."""

    prefix_len_ptr: np.ndarray  # [S] uint32
    token_pos_in_items_ptr: np.ndarray  # [S * token_pos_in_items_len] uint16
    token_pos_in_items_len: int
    max_item_len_ptr: np.ndarray  # [S] uint16


def is_single_item(batch: Batch) -> bool:
    """True when every sequence holds exactly one item: causal attention is then exact."""
    return bool(np.all(batch.item_counts == 1))


def paged_kv_args(batch: Batch) -> PagedKV:
    """qo/kv indptrs and a one-token-per-page table over the batch's own K/V."""
    cu = batch.cu_seqlens.astype(np.int32)  # [S+1]
    return PagedKV(
        qo_indptr=cu,
        paged_kv_indptr=cu.copy(),
        paged_kv_indices=np.arange(batch.num_tokens, dtype=np.int32),
        paged_kv_last_page_len=np.ones(batch.num_seqs, dtype=np.int32),
    )


def position_in_item(batch: Batch) -> np.ndarray:
    """[T] int64: 1-based position of each token within its item, 0 for prefix tokens.

    Derived from segment runs (not from position ids), so it holds for any position scheme.
    """
    t = np.arange(batch.num_tokens, dtype=np.int64)
    seq_start = np.zeros(batch.num_tokens, dtype=bool)
    seq_start[batch.cu_seqlens[:-1][batch.seq_lens > 0]] = True
    new_run = seq_start | np.concatenate([[True], batch.segment[1:] != batch.segment[:-1]])  # [T]
    run_start = np.maximum.accumulate(np.where(new_run, t, 0))  # [T]
    return np.where(batch.segment > 0, t - run_start + 1, 0)


def mis_args(batch: Batch) -> MisArgs:
    """Multi-item-scoring arguments for our delimiter-free layout (see the module docstring).

    Raises:
        ValueError: an item longer than 65535 tokens (the kernel stores positions as uint16).
    """
    s, lens, prefix = batch.num_seqs, batch.seq_lens, batch.prefix_lens
    longest = _max_item_len(batch)  # [S]
    if longest.max(initial=0) > UINT16_MAX:
        raise ValueError(f"flashinfer multi-item scoring: an item of {int(longest.max())} tokens exceeds {UINT16_MAX}")
    stride = max(int((lens - prefix).max(initial=0)), 1)
    seq = np.repeat(np.arange(s, dtype=np.int64), lens)  # [T]
    local = np.arange(batch.num_tokens, dtype=np.int64) - batch.cu_seqlens[seq]  # [T] index in its sequence
    item = batch.segment > 0  # [T]
    flat = np.zeros(s * stride, dtype=np.uint16)
    flat[(seq * stride + local - prefix[seq])[item]] = position_in_item(batch)[item]
    return MisArgs(
        prefix_len_ptr=prefix.astype(np.uint32),
        token_pos_in_items_ptr=flat,
        token_pos_in_items_len=stride,
        max_item_len_ptr=np.maximum(longest, 1).astype(np.uint16),
    )


def _max_item_len(batch: Batch) -> np.ndarray:
    """[S] int64 longest item of each sequence (0 when it has none)."""
    out = np.zeros(batch.num_seqs, dtype=np.int64)
    np.maximum.at(out, np.repeat(np.arange(batch.num_seqs), batch.item_counts), batch.item_lens)
    return out


def dense_mask_from_plan(mis: MisArgs, cu_seqlens: np.ndarray) -> np.ndarray:
    """The [T, T] allowed-mask the MIS kernel applies for these arguments (its exact rule).

    Keys of other sequences are never visible (each request has its own KV pages).
    """
    total = int(cu_seqlens[-1])
    out = np.zeros((total, total), dtype=bool)
    for s in range(len(cu_seqlens) - 1):
        a, b = int(cu_seqlens[s]), int(cu_seqlens[s + 1])
        prefix, length = int(mis.prefix_len_ptr[s]), b - a
        row = mis.token_pos_in_items_ptr[s * mis.token_pos_in_items_len :][: max(length - prefix, 0)]
        tpi = np.concatenate([np.zeros(prefix, dtype=np.int64), row.astype(np.int64)])  # [L] by query
        i, j = np.arange(length)[:, None], np.arange(length)[None, :]
        allowed = (i < prefix) | (j < prefix) | (i < j + tpi[:, None])
        out[a:b, a:b] = (j <= i) & allowed
    return out


def custom_mask(batch: Batch) -> np.ndarray:
    """Flattened boolean MIS mask for the ragged wrapper: per sequence `[L, L]` row-major
    (query rows, key columns; True = attend), sequences concatenated.

    Returns:
        [sum(L_s ** 2)] bool.
    """
    parts = []
    for a, b in zip(batch.cu_seqlens[:-1], batch.cu_seqlens[1:]):
        seg = batch.segment[a:b]  # [L]
        length = int(b - a)
        causal = np.tri(length, dtype=bool)  # [L, L]
        parts.append((causal & ((seg[None, :] == 0) | (seg[None, :] == seg[:, None]))).ravel())
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def custom_mask_indptr(batch: Batch) -> np.ndarray:
    """[S+1] int64 offsets of each sequence's block in `custom_mask(batch)`."""
    return np.concatenate([[0], np.cumsum(batch.seq_lens.astype(np.int64) ** 2)])


# ---- runtime ------------------------------------------------------------------------------


def kernel_dtype(dtype: torch.dtype) -> torch.dtype:
    """flashinfer prefill kernels take float16/bfloat16 only; float32 runs in float16."""
    return dtype if dtype in (torch.float16, torch.bfloat16) else torch.float16


# the head sizes its kernels take, as declared in `backends` (checked at the first layer)
HEAD_DIMS: tuple[int, ...] = FLASHINFER_HEAD_DIMS


class FlashInferBackend:
    """flashinfer prefill kernels over the ragged `[1, T]` layout (CUDA only).

    Args:
        mis_kernel: "paged" (the kernel's multi-item-scoring mask mode) or "custom" (a dense
            per-sequence mask on the ragged wrapper) for batches with several items per sequence.
        workspace_bytes: size of the float workspace shared by the wrappers.
    """

    name = "flashinfer"
    is_padded = False
    shares_prefix = False  # every batch starts at its own first token
    shared: SharedKV | None = None  # never set: batches start at their own first token

    def __init__(self, mis_kernel: str = "paged", workspace_bytes: int = 128 << 20) -> None:
        if mis_kernel not in MIS_KERNELS:
            raise ValueError(f"mis_kernel must be one of {MIS_KERNELS}, got {mis_kernel!r}")
        self.mis_kernel = mis_kernel
        self.workspace_bytes = workspace_bytes
        self.mode: str | None = None  # "causal" | "paged" | "custom" for the current batch
        self._wrappers: dict | None = None
        self._plan_args: tuple = ()
        self._plan_kwargs: dict = {}
        self._planned_for: tuple | None = None
        self._plan_copied: torch.cuda.Event | None = None  # after the last plan's copy to the device
        self._on_cuda = False
        self._warned_fp32 = False

    def plan(self, batch: Batch, device: torch.device, dtype: torch.dtype) -> ModelInputs:
        """Build this batch's kernel arguments; the wrapper's own plan() runs at the first
        layer, when head counts, head size and scale are known, and serves every layer."""
        if self._wrappers is None:
            self._wrappers = _make_wrappers(device, self.workspace_bytes)
        self._on_cuda = device.type == "cuda"
        self.mode = "causal" if is_single_item(batch) else self.mis_kernel
        arrays = [batch.input_ids, batch.position_ids, batch.pool_index, batch.first_index]
        if self.mode == "paged":
            mis, pages = mis_args(batch), paged_kv_args(batch)
            arrays += [pages.paged_kv_indices, mis.prefix_len_ptr, mis.token_pos_in_items_ptr, mis.max_item_len_ptr]
        elif self.mode == "custom":
            arrays.append(custom_mask(batch))  # [sum L^2] bool, packed by plan()
        ids, pos, pool, first, *plan_arrays = to_device(arrays, device)  # one host-to-device copy
        cu = torch.from_numpy(batch.cu_seqlens.astype(np.int32))  # [S+1], host: plan() reads it there
        if self.mode == "paged":
            self._plan_args, self._plan_kwargs = _paged_plan_inputs(pages, mis.token_pos_in_items_len, *plan_arrays)
        elif self.mode == "custom":
            self._plan_args, self._plan_kwargs = (cu, cu), {"custom_mask": plan_arrays[0]}
        else:
            self._plan_args, self._plan_kwargs = (cu, cu), {"causal": True}
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
        wrapper = self._wrappers[self.mode]
        if self.mode == "paged":
            out = wrapper.run(q, (k.unsqueeze(1), v.unsqueeze(1)))  # pages [T, 1, kv_heads, d] -> [T, heads, dv]
        else:
            out = wrapper.run(q, k, v)  # [T, heads, dv]
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
        sizes = (heads, kv_heads, dqk, 1) if self.mode == "paged" else (heads, kv_heads, dqk)
        # plan() writes its schedule into a pinned host buffer and queues a copy of it to the
        # device without waiting: batches are launched without a synchronization each, so the
        # next plan must not overwrite that buffer before the GPU has taken the last copy (else a
        # batch runs with the next batch's schedule). The host stays about one batch ahead.
        if self._plan_copied is not None:
            self._plan_copied.synchronize()
        self._wrappers[self.mode].plan(
            *self._plan_args,
            *sizes,
            head_dim_vo=dvo,
            sm_scale=scaling,
            logits_soft_cap=softcap or None,  # the kernel's cap * tanh(scaled score / cap), as Gemma 2
            q_data_type=kdtype,
            kv_data_type=kdtype,
            **self._plan_kwargs,
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


def _make_wrappers(device: torch.device, workspace_bytes: int) -> dict:
    """One shared workspace and a wrapper per mode, created once per backend."""
    import flashinfer

    _say_jit_builds()
    workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=device)
    return {
        "causal": flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD"),
        # its own wrapper: the ragged wrapper's plan() keeps a previous custom mask when the
        # next plan has none, so causal plans must never share it
        "custom": flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD", backend="fa2"),
        "paged": flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD"),
    }


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
