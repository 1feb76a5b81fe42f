"""A pure-torch stand-in for the flashinfer prefill wrappers and the state merge scorecli uses, for CPU tests.

flashinfer's kernels need CUDA, so on a CPU machine `FlashInferBackend` would otherwise never
run end to end. This module mimics flashinfer 0.7.2's Python API as scorecli calls it (the
constructor, plan() and run() signatures are copied from `flashinfer/prefill.py`;
`test_fake_signatures_match_flashinfer` compares them wherever flashinfer is installed) and
the kernels' semantics as read from their sources:

- plan() keeps what the next run() reads; run() checks q/k dtypes against plan's
  (`_check_cached_qkv_data_type`) and shapes against the plan.
- Causal masks align to the bottom right (query i of a sequence with `qo_len` queries and
  `kv_len` keys sees keys `j <= i + kv_len - qo_len`); GQA maps query head h to KV head
  `h // (heads // kv_heads)`; `sm_scale` defaults to `1 / sqrt(head_dim_qk)`.
- The paged wrapper selects the multi-item-scoring mask mode whenever `prefix_len_ptr` was
  planned (`logits_mask_multi_item_scoring`); its pointers are read on the device, as uint32 /
  uint16, so the fake refuses other dtypes or devices (the kernel would read garbage), and it
  refuses a query whose item position exceeds `max_item_len_ptr` (the kernel would skip keys).
- run(return_lse=True) also returns each row's log-sum-exp in base 2 (flashinfer's `lse_base`
  default), which `merge_state_in_place` reads in the same base; its `mask` picks the rows merged.
- The ragged wrapper accepts the MIS arguments but its run() never selects that mask mode, and
  a custom mask it was planned with stays in force until another custom mask replaces it: both
  are flashinfer 0.7.2's behaviour, kept so that tests catch a backend that relies on them.

Every wrapper counts its plan() and run() calls; `_Wrapper.fail_with` makes plan() fail. Attention runs in float32 and is cast to the
output dtype. Install with `install(monkeypatch)`.
"""

from __future__ import annotations

import math
import types
from typing import Any, Literal

import torch


def install(monkeypatch) -> types.ModuleType:
    """Make `import flashinfer` return this fake for the rest of the test."""
    import sys

    module = types.ModuleType("flashinfer")
    module.BatchPrefillWithRaggedKVCacheWrapper = BatchPrefillWithRaggedKVCacheWrapper
    module.BatchPrefillWithPagedKVCacheWrapper = BatchPrefillWithPagedKVCacheWrapper
    module.merge_state_in_place = merge_state_in_place
    module.__fake__ = True
    monkeypatch.setitem(sys.modules, "flashinfer", module)
    return module


def _dtype(d: str | torch.dtype | None) -> torch.dtype | None:
    return getattr(torch, d) if isinstance(d, str) else d


def _host_ints(t: torch.Tensor, name: str) -> list[int]:
    if t.dtype != torch.int32:
        raise ValueError(f"{name} must be int32, got {t.dtype}")
    return [int(x) for x in t.to("cpu")]


def _attend(q, k, v, allowed, scale, cap, out_dtype, lse: list | None = None) -> torch.Tensor:
    """q [Lq, H, d], k/v [Lk, Hkv, d], allowed [Lq, Lk] bool -> [Lq, H, dv] in out_dtype;
    `cap` > 0: logits soft cap, `cap * tanh(scale * q.k / cap)` (the kernels' variant).
    `lse`: a list that gets the rows' log-sum-exp of the logits [Lq, H], float32, in base 2
    (flashinfer's default `lse_base`; -inf for a row with no key)."""
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads % kv_heads:
        raise ValueError(f"num_qo_heads {heads} is not a multiple of num_kv_heads {kv_heads}")
    rep = heads // kv_heads
    qf = q.float().transpose(0, 1)  # [H, Lq, d]
    kf = k.float().repeat_interleave(rep, dim=1).transpose(0, 1)  # [H, Lk, d]
    vf = v.float().repeat_interleave(rep, dim=1).transpose(0, 1)  # [H, Lk, dv]
    logits = (qf @ kf.transpose(1, 2)) * scale  # [H, Lq, Lk]
    if cap:
        logits = torch.tanh(logits / cap) * cap
    logits = logits.masked_fill(~allowed.to(logits.device)[None], float("-inf"))
    probs = torch.softmax(logits, dim=-1).nan_to_num(0.0)  # a row with no key gives zeros, like the kernel
    if lse is not None:
        lse.append((torch.logsumexp(logits, dim=-1) / math.log(2)).transpose(0, 1).float())  # [Lq, H]
    return (probs @ vf).transpose(0, 1).to(out_dtype)  # [Lq, H, dv]


def _causal(qo_len: int, kv_len: int) -> torch.Tensor:
    i = torch.arange(qo_len)[:, None] + (kv_len - qo_len)
    return torch.arange(kv_len)[None, :] <= i  # [Lq, Lk]


class _Wrapper:
    fail_with: str | None = None  # tests set it: every plan() then raises RuntimeError (a failed JIT build)

    def __init__(self, float_workspace_buffer: torch.Tensor, kv_layout: str, backend: str) -> None:
        if kv_layout != "NHD":
            raise NotImplementedError("the fake implements the NHD layout only")
        self.device = float_workspace_buffer.device
        self._backend = backend
        self.plan_calls = 0
        self.run_calls = 0
        self._custom_mask_buf: torch.Tensor | None = None
        self._mask_indptr: list[int] | None = None
        self._planned = False

    def _plan_common(
        self,
        qo_indptr,
        kv_lens,
        heads,
        kv_heads,
        dqk,
        dvo,
        custom_mask,
        packed_custom_mask,
        causal,
        sm_scale,
        q_data_type,
        kv_data_type,
        o_data_type,
        logits_soft_cap,
        window_left,
    ) -> None:
        if self.fail_with is not None:
            raise RuntimeError(self.fail_with)
        if packed_custom_mask is not None:
            raise NotImplementedError("the fake takes custom_mask, not packed_custom_mask")
        if window_left != -1:
            raise NotImplementedError("the fake has no sliding window")
        self._cap = float(logits_soft_cap or 0.0)
        self.plan_calls += 1
        self._qo = _host_ints(qo_indptr, "qo_indptr")
        self._kv_lens = kv_lens
        if len(self._kv_lens) != len(self._qo) - 1:
            raise ValueError("qo_indptr and the KV layout disagree on the batch size")
        self._heads, self._kv_heads, self._dqk = heads, kv_heads, dqk
        self._dvo = dqk if dvo is None else dvo
        self._causal = causal
        self._scale = 1.0 / math.sqrt(dqk) if sm_scale is None else float(sm_scale)
        self._q_dtype = _dtype(q_data_type)
        self._kv_dtype = _dtype(kv_data_type) or self._q_dtype
        self._o_dtype = _dtype(o_data_type) or self._q_dtype
        if custom_mask is not None:  # kept until another custom mask replaces it (flashinfer 0.7.2)
            sizes = [(b - a) * kv for a, b, kv in zip(self._qo[:-1], self._qo[1:], self._kv_lens)]
            if custom_mask.numel() != sum(sizes):
                raise ValueError(f"custom_mask holds {custom_mask.numel()} entries, the batch needs {sum(sizes)}")
            self._custom_mask_buf = custom_mask.to(self.device).reshape(-1).bool()
            self._mask_indptr = [0]
            for n in sizes:
                self._mask_indptr.append(self._mask_indptr[-1] + n)
        self._planned = True

    def _check_run(self, q: torch.Tensor, k: torch.Tensor) -> None:
        if not self._planned:
            raise RuntimeError("run() before plan()")
        if q.dtype != self._q_dtype:
            raise ValueError(
                f"The dtype of q {q.dtype} does not match the q_data_type {self._q_dtype} specified in plan function."
            )
        if k.dtype != self._kv_dtype:
            raise ValueError(
                f"The dtype of k {k.dtype} does not match the kv_data_type {self._kv_dtype} specified in plan function."
            )
        if q.device != self.device or k.device != self.device:
            raise ValueError("q and k must live on the workspace's device")
        if tuple(q.shape) != (self._qo[-1], self._heads, self._dqk):
            raise ValueError(f"q has shape {tuple(q.shape)}, the plan expects {(self._qo[-1], self._heads, self._dqk)}")
        self.run_calls += 1

    def _mask(self, s: int, qo_len: int, kv_len: int, mis: torch.Tensor | None) -> torch.Tensor:
        if mis is not None:
            return mis
        if self._custom_mask_buf is not None:
            a, b = self._mask_indptr[s], self._mask_indptr[s + 1]
            return self._custom_mask_buf[a:b].view(qo_len, kv_len).cpu()
        if self._causal:
            return _causal(qo_len, kv_len)
        return torch.ones(qo_len, kv_len, dtype=torch.bool)


class BatchPrefillWithRaggedKVCacheWrapper(_Wrapper):
    def __init__(
        self,
        float_workspace_buffer: torch.Tensor,
        kv_layout: str = "NHD",
        use_cuda_graph: bool = False,
        qo_indptr_buf: torch.Tensor | None = None,
        kv_indptr_buf: torch.Tensor | None = None,
        custom_mask_buf: torch.Tensor | None = None,
        mask_indptr_buf: torch.Tensor | None = None,
        backend: str = "auto",
        jit_args: list[Any] | None = None,
        jit_kwargs: dict[str, Any] | None = None,
        variant_owns_mask: bool = False,
    ) -> None:
        super().__init__(float_workspace_buffer, kv_layout, backend)

    def plan(
        self,
        qo_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        num_qo_heads: int,
        num_kv_heads: int,
        head_dim_qk: int,
        head_dim_vo: int | None = None,
        custom_mask: torch.Tensor | None = None,
        packed_custom_mask: torch.Tensor | None = None,
        causal: bool = False,
        pos_encoding_mode: str = "NONE",
        use_fp16_qk_reduction: bool = False,
        window_left: int = -1,
        logits_soft_cap: float | None = None,
        sm_scale: float | None = None,
        rope_scale: float | None = None,
        rope_theta: float | None = None,
        q_data_type: str | torch.dtype = "float16",
        kv_data_type: str | torch.dtype | None = None,
        o_data_type: str | torch.dtype | None = None,
        non_blocking: bool = True,
        prefix_len_ptr: torch.Tensor | None = None,
        token_pos_in_items_ptr: torch.Tensor | None = None,
        token_pos_in_items_len: int = 0,
        max_item_len_ptr: torch.Tensor | None = None,
        fixed_split_size: int | None = None,
        disable_split_kv: bool = False,
        seq_lens: torch.Tensor | None = None,
        seq_lens_q: torch.Tensor | None = None,
        max_token_per_sequence: int | None = None,
        max_sequence_kv: int | None = None,
        v_indptr: torch.Tensor | None = None,
        o_indptr: torch.Tensor | None = None,
        uniform_q_len: int | None = None,
    ) -> None:
        kv = _host_ints(kv_indptr, "kv_indptr")
        self._kv = kv
        # the MIS arguments are stored and never read by run(): flashinfer 0.7.2's ragged path
        self._prefix_len_ptr = prefix_len_ptr
        self._plan_common(
            qo_indptr,
            [b - a for a, b in zip(kv[:-1], kv[1:])],
            num_qo_heads,
            num_kv_heads,
            head_dim_qk,
            head_dim_vo,
            custom_mask,
            packed_custom_mask,
            causal,
            sm_scale,
            q_data_type,
            kv_data_type,
            o_data_type,
            logits_soft_cap,
            window_left,
        )

    def run(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *args,
        q_scale: float | None = None,
        k_scale: float | None = None,
        v_scale: float | None = None,
        o_scale: float | None = None,
        out: torch.Tensor | None = None,
        lse: torch.Tensor | None = None,
        return_lse: bool = False,
        lse_base: str = "log2",
        lse_layout: str = "NH",
        enable_pdl: bool | None = None,
        kv_cache_sf: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        self._check_run(q, k)
        if tuple(k.shape) != (self._kv[-1], self._kv_heads, self._dqk) or v.shape[:2] != k.shape[:2]:
            raise ValueError(
                f"k/v have shapes {tuple(k.shape)}/{tuple(v.shape)}, the plan expects {self._kv[-1]} tokens"
            )
        if out is not None or lse is not None or lse_layout != "NH" or lse_base != "log2":
            raise NotImplementedError("the fake returns new tensors, lse in base 2, [T, H]")
        if self._qo[0] != 0:
            raise ValueError("qo_indptr must start at row 0")
        parts: list[torch.Tensor] = []
        lses: list[torch.Tensor] | None = [] if return_lse else None
        for s in range(len(self._qo) - 1):
            qa, qb, ka, kb = self._qo[s], self._qo[s + 1], self._kv[s], self._kv[s + 1]
            allowed = self._mask(s, qb - qa, kb - ka, None)
            parts.append(_attend(q[qa:qb], k[ka:kb], v[ka:kb], allowed, self._scale, self._cap, self._o_dtype, lses))
        return (torch.cat(parts), torch.cat(lses)) if lses is not None else torch.cat(parts)  # [T, H, dv], [T, H]


class BatchPrefillWithPagedKVCacheWrapper(_Wrapper):
    def __init__(
        self,
        float_workspace_buffer: torch.Tensor,
        kv_layout: str = "NHD",
        use_cuda_graph: bool = False,
        qo_indptr_buf: torch.Tensor | None = None,
        paged_kv_indptr_buf: torch.Tensor | None = None,
        paged_kv_indices_buf: torch.Tensor | None = None,
        paged_kv_last_page_len_buf: torch.Tensor | None = None,
        custom_mask_buf: torch.Tensor | None = None,
        mask_indptr_buf: torch.Tensor | None = None,
        backend: str = "auto",
        jit_args: list[Any] | None = None,
        jit_kwargs: dict[str, Any] | None = None,
        variant_owns_mask: bool = False,
    ) -> None:
        super().__init__(float_workspace_buffer, kv_layout, backend)

    def plan(
        self,
        qo_indptr: torch.Tensor,
        paged_kv_indptr: torch.Tensor,
        paged_kv_indices: torch.Tensor,
        paged_kv_last_page_len: torch.Tensor,
        num_qo_heads: int,
        num_kv_heads: int,
        head_dim_qk: int,
        page_size: int,
        head_dim_vo: int | None = None,
        custom_mask: torch.Tensor | None = None,
        packed_custom_mask: torch.Tensor | None = None,
        causal: bool = False,
        pos_encoding_mode: str = "NONE",
        use_fp16_qk_reduction: bool = False,
        sm_scale: float | None = None,
        window_left: int = -1,
        logits_soft_cap: float | None = None,
        rope_scale: float | None = None,
        rope_theta: float | None = None,
        q_data_type: str | torch.dtype = "float16",
        kv_data_type: str | torch.dtype | None = None,
        o_data_type: str | torch.dtype | None = None,
        non_blocking: bool = True,
        prefix_len_ptr: torch.Tensor | None = None,
        token_pos_in_items_ptr: torch.Tensor | None = None,
        token_pos_in_items_len: int = 0,
        max_item_len_ptr: torch.Tensor | None = None,
        seq_lens: torch.Tensor | None = None,
        seq_lens_q: torch.Tensor | None = None,
        block_tables: torch.Tensor | None = None,
        max_token_per_sequence: int | None = None,
        max_sequence_kv: int | None = None,
        fixed_split_size: int | None = None,
        disable_split_kv: bool = False,
        uniform_q_len: int | None = None,
    ) -> None:
        indptr = _host_ints(paged_kv_indptr, "paged_kv_indptr")
        last = _host_ints(paged_kv_last_page_len, "paged_kv_last_page_len")
        self._pages = [int(x) for x in paged_kv_indices.to("cpu")]
        if paged_kv_indices.dtype != torch.int32 or len(self._pages) != indptr[-1]:
            raise ValueError("paged_kv_indices must be int32 with paged_kv_indptr[-1] entries")
        self._page_indptr, self._page_size = indptr, page_size
        kv_lens = [(b - a - 1) * page_size + n if b > a else 0 for a, b, n in zip(indptr[:-1], indptr[1:], last)]
        self._mis = None
        if prefix_len_ptr is not None:
            self._mis = self._mis_args(prefix_len_ptr, token_pos_in_items_ptr, token_pos_in_items_len, max_item_len_ptr)
        self._plan_common(
            qo_indptr,
            kv_lens,
            num_qo_heads,
            num_kv_heads,
            head_dim_qk,
            head_dim_vo,
            custom_mask,
            packed_custom_mask,
            causal,
            sm_scale,
            q_data_type,
            kv_data_type,
            o_data_type,
            logits_soft_cap,
            window_left,
        )
        if custom_mask is None:  # the paged plan drops an earlier custom mask
            self._custom_mask_buf = None

    def _mis_args(self, prefix, tpi, tpi_len, max_item) -> tuple[list[int], torch.Tensor, int, list[int]]:
        for name, t, dtype in (
            ("prefix_len_ptr", prefix, torch.uint32),
            ("token_pos_in_items_ptr", tpi, torch.uint16),
            ("max_item_len_ptr", max_item, torch.uint16),
        ):
            if t is None or t.dtype != dtype or t.device != self.device:
                got = None if t is None else (t.dtype, str(t.device))
                raise ValueError(f"{name}: the kernel reads {dtype} on {self.device}, got {got}")
        as_int = lambda t: t.cpu().to(torch.int64)
        return as_int(prefix).tolist(), as_int(tpi), int(tpi_len), as_int(max_item).tolist()

    def _mis_mask(self, s: int, qo_len: int, kv_len: int) -> torch.Tensor:
        """`logits_mask_multi_item_scoring`: causal, plus for query i past the prefix with
        entry p = token_pos_in_items[s][i - prefix]: keys j < prefix or i < j + p."""
        prefix_lens, tpi, stride, max_item = self._mis
        prefix = prefix_lens[s]
        i = torch.arange(qo_len)[:, None] + (kv_len - qo_len)  # [Lq, 1] query position among the keys
        j = torch.arange(kv_len)[None, :]
        n_items = max(kv_len - prefix, 0)
        if n_items > stride:
            raise ValueError(f"sequence {s}: {n_items} tokens past the prefix, token_pos_in_items_len is {stride}")
        pos = torch.zeros(kv_len, dtype=torch.int64)
        pos[prefix:] = tpi[s * stride : s * stride + n_items]
        p = pos[i[:, 0]][:, None]  # [Lq, 1]
        if bool(((i >= prefix) & (p > max_item[s])).any()):
            raise ValueError(f"sequence {s}: an item position exceeds max_item_len_ptr ({max_item[s]})")
        return (j <= i) & ((i < prefix) | (j < prefix) | (i < j + p))

    def run(
        self,
        q: torch.Tensor,
        paged_kv_cache: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        *args,
        q_scale: float | torch.Tensor | None = None,
        k_scale: float | torch.Tensor | None = None,
        v_scale: float | torch.Tensor | None = None,
        out: torch.Tensor | None = None,
        lse: torch.Tensor | None = None,
        return_lse: Literal[False] = False,
        lse_base: str = "log2",
        lse_layout: str = "NH",
        enable_pdl: bool | None = None,
        window_left: int | None = None,
        sinks: torch.Tensor | None = None,
        kv_cache_sf: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
        skip_softmax_threshold_scale_factor: float | None = None,
        use_fp16_softmax: bool | None = None,
        uses_spcompress: bool | None = None,
    ) -> torch.Tensor:
        if not isinstance(paged_kv_cache, tuple):
            raise NotImplementedError("the fake takes a (k_cache, v_cache) tuple")
        k_cache, v_cache = paged_kv_cache  # [pages, page_size, kv_heads, d]
        self._check_run(q, k_cache)
        if k_cache.shape[1:] != (self._page_size, self._kv_heads, self._dqk) or v_cache.shape[:3] != k_cache.shape[:3]:
            raise ValueError(f"k/v caches have shapes {tuple(k_cache.shape)}/{tuple(v_cache.shape)}")
        parts = []
        for s in range(len(self._qo) - 1):
            qa, qb = self._qo[s], self._qo[s + 1]
            pages = torch.tensor(self._pages[self._page_indptr[s] : self._page_indptr[s + 1]], dtype=torch.int64)
            kv_len = self._kv_lens[s]
            k = k_cache[pages.to(k_cache.device)].flatten(0, 1)[:kv_len]  # [Lk, kv_heads, d]
            v = v_cache[pages.to(v_cache.device)].flatten(0, 1)[:kv_len]
            mis = self._mis_mask(s, qb - qa, kv_len) if self._mis is not None else None
            parts.append(
                _attend(q[qa:qb], k, v, self._mask(s, qb - qa, kv_len, mis), self._scale, self._cap, self._o_dtype)
            )
        return torch.cat(parts)  # [T, H, dv]


def merge_state_in_place(
    v: torch.Tensor,
    s: torch.Tensor,
    v_other: torch.Tensor,
    s_other: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> None:
    """flashinfer.merge_state_in_place: (v, s) becomes the softmax state over both key sets, for
    the rows `mask` marks (all rows without one); `s` in base 2, as the wrappers return it."""
    if s.dtype != torch.float32 or s_other.dtype != torch.float32:
        raise ValueError("s and s_other must be float32")
    if v.shape != v_other.shape or s.shape != s_other.shape or v.shape[:2] != s.shape:
        raise ValueError("v [T, H, d] and s [T, H] shapes disagree")
    if mask is not None and (mask.dtype != torch.bool or mask.shape != v.shape[:1] or mask.device != v.device):
        raise ValueError("mask must be a bool [seq_len] tensor on v's device")
    m = torch.maximum(s, s_other)
    a, b = torch.exp2(s - m), torch.exp2(s_other - m)  # [T, H]
    merged = (v.float() * a[..., None] + v_other.float() * b[..., None]) / (a + b)[..., None]
    rows = torch.ones(v.shape[0], dtype=torch.bool, device=v.device) if mask is None else mask
    v[rows] = merged[rows].to(v.dtype)
    s[rows] = (m + torch.log2(a + b))[rows]
