"""The flashinfer backend's plan arguments for a batch, pure numpy (tested on the CPU).

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

Cascade (`cascade_args`): the same rule as two attentions whose softmax states merge exactly
(flashinfer's `merge_state`): every run of one segment (a prefix, an item) attends causally to
itself (the ragged wrapper over all the batch's runs, keys contiguous), and every item's tokens
attend to their sequence's prefix, gathered into one contiguous block per sequence (a second
ragged plan, not causal). The kernels then only visit keys a query may see, loaded in bulk,
with no per-element MIS mask.

Knows nothing about torch, kernels or tokenization.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scorecli.core.batching import Batch

UINT16_MAX = np.iinfo(np.uint16).max


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
    run_start = np.maximum.accumulate(np.where(_run_starts(batch), t, 0))  # [T]
    return np.where(batch.segment > 0, t - run_start + 1, 0)


def _run_starts(batch: Batch) -> np.ndarray:
    """[T] bool: the first token of every run of one segment (a prefix, an item) in one sequence."""
    start = np.zeros(batch.num_tokens, dtype=bool)
    start[batch.cu_seqlens[:-1][batch.seq_lens > 0]] = True
    start[1:] |= batch.segment[1:] != batch.segment[:-1]
    return start


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


@dataclass(frozen=True, slots=True)
class CascadeArgs:
    """The two ragged plans of the cascade and what joins them (module docstring).

    `runs_indptr` bounds every run of one segment (a prefix, an item): queries and keys of the
    first plan, causal. The second plan's requests cover the batch's rows in order, one per
    sequence that has a prefix (a sequence without one rides along with its neighbour's request),
    each attending to its prefix's rows, gathered (`prefix_rows`) and bounded by `prefix_indptr`;
    `merge` marks the rows whose two states are merged (item tokens of sequences with a prefix);
    every other row keeps the first plan's result. `prefix_indptr` is None when no sequence has a
    prefix: the first plan alone is then the MIS rule.
    """

    runs_indptr: np.ndarray  # [R+1] int32
    request_indptr: np.ndarray  # [Q+1] int32: query rows of the second plan's requests
    prefix_indptr: np.ndarray | None  # [Q+1] int32: their keys in the gathered prefix rows
    prefix_rows: np.ndarray  # [sum P] int64: the batch's prefix rows, sequence by sequence
    merge: np.ndarray  # [T] bool


def segment_runs(batch: Batch) -> np.ndarray:
    """[R+1] int32 bounds of every run of one segment within one sequence."""
    return np.concatenate([np.flatnonzero(_run_starts(batch)), [batch.num_tokens]]).astype(np.int32)


def prefix_first(batch: Batch) -> bool:
    """Whether every sequence is its prefix (segment 0) followed by items only: the layout the
    cascade assumes (`pack` makes no other; checked, not trusted)."""
    seq = np.repeat(np.arange(batch.num_seqs), batch.seq_lens)  # [T]
    local = np.arange(batch.num_tokens) - batch.cu_seqlens[seq]
    return bool(np.array_equal(batch.segment == 0, local < batch.prefix_lens[seq]))


def cascade_args(batch: Batch) -> CascadeArgs:
    """The cascade's plan arguments for a batch laid out as `prefix_first` says."""
    t, prefix = batch.num_tokens, batch.prefix_lens
    starts = batch.cu_seqlens[:-1]
    has = np.flatnonzero((prefix > 0) & (batch.seq_lens > 0))  # [Q] sequences with a prefix
    seq = np.repeat(np.arange(batch.num_seqs), batch.seq_lens)  # [T]
    merge = (batch.segment > 0) & (prefix[seq] > 0)
    prefix_rows = np.flatnonzero(batch.segment == 0).astype(np.int64)  # prefix-first: the prefixes, in order
    if len(has) == 0:
        return CascadeArgs(segment_runs(batch), np.zeros(1, np.int32), None, prefix_rows, merge)
    bounds = starts[has].astype(np.int64)
    bounds[0] = 0  # rows before the first sequence with a prefix ride with its request
    return CascadeArgs(
        runs_indptr=segment_runs(batch),
        request_indptr=np.concatenate([bounds, [t]]).astype(np.int32),
        prefix_indptr=np.concatenate([[0], np.cumsum(prefix[has])]).astype(np.int32),
        prefix_rows=prefix_rows,
        merge=merge,
    )


def cascade_mask(args: CascadeArgs, num_tokens: int) -> np.ndarray:
    """[T, T] allowed-mask the cascade computes for these arguments: a row sees its run causally,
    and a merged row also sees its request's prefix rows (the rule `dense_mask_from_plan` states
    for the MIS kernel; the tests compare the two)."""
    out = np.zeros((num_tokens, num_tokens), dtype=bool)
    for a, b in zip(args.runs_indptr[:-1], args.runs_indptr[1:]):
        out[a:b, a:b] = np.tri(b - a, dtype=bool)
    if args.prefix_indptr is not None:
        for r in range(len(args.request_indptr) - 1):
            rows = np.arange(args.request_indptr[r], args.request_indptr[r + 1])
            rows = rows[args.merge[rows]]
            keys = args.prefix_rows[args.prefix_indptr[r] : args.prefix_indptr[r + 1]]
            out[np.ix_(rows, keys)] = True
    return out
