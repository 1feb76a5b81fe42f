"""MIS attention by blocks: exact, without the dense L x L mask (used by the sdpa backend).

A packed MIS row `P I_1 ... I_n` allows only the prefix's causal triangle and, for each
item, its tokens against [P ++ its own earlier tokens]. A dense mask computes all L^2
scores per head and layer; this plan computes exactly the allowed blocks with SDPA calls
over the padded [S, L] layout:
  - prefix: the first max|P| positions of every row, causal, keys limited to the row's P
    (a slice, no copy); rows past a shorter prefix are overwritten by the item pass;
  - items, in groups of similar length (`item_groups`): every item of a group as its own
    query block [m] against its row's prefix keys followed by its own keys [max|P| + m],
    with a small causal mask (m = the group's longest item).
Index math is numpy, once per batch; each layer does one gather per group and input, one
SDPA call per group plus one for the prefixes, and the scatters. This module knows nothing
about tokenization or heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from scorecli.batching import Batch

# What one more item group costs (its gathers, SDPA call and scatter per layer), in attention
# scores per head: a group is split off only when the padding it saves outweighs this.
# CPU: measured (benchmarks/bench_block_groups.py). CUDA: a launch costs microseconds while a
# score costs picoseconds, so items stay in one group unless a split saves millions of
# scores (not measured yet: no GPU was lent to this work).
GROUP_OVERHEAD = 4096
GROUP_OVERHEAD_CUDA = 1 << 24


def group_overhead(device: torch.device | None = None) -> int:
    return GROUP_OVERHEAD_CUDA if device is not None and device.type == "cuda" else GROUP_OVERHEAD


def dense_cost(batch: Batch) -> int:
    """Attention scores a dense [S, L, L] mask computes (per head and layer)."""
    return batch.num_seqs * batch.max_len**2


def batch_groups(batch: Batch, device: torch.device | None = None) -> list[tuple[np.ndarray, int]]:
    """The item groups a BlockPlan of `batch` on `device` runs (`item_groups`)."""
    return item_groups(batch.item_lens, int(batch.prefix_lens.max()), group_overhead(device))


def block_cost(batch: Batch, groups: list[tuple[np.ndarray, int]]) -> int:
    """Attention scores the block plan computes with these item groups (per head and layer)."""
    p = int(batch.prefix_lens.max())
    return batch.num_seqs * p * p + sum(len(g) * m * (p + m) for g, m in groups)


def item_groups(item_lens: np.ndarray, p: int, overhead: int | None = None) -> list[tuple[np.ndarray, int]]:
    """Items grouped by length: [(item indices, padded length m)], ascending m.

    The partition of the length-sorted items into runs that minimises the scores computed,
    sum over groups of n * m * (p + m), plus `overhead` per group (dynamic programming over
    the distinct lengths). Items of one length always share a group. `overhead` defaults to
    the CPU's (`group_overhead`).
    """
    if len(item_lens) == 0:
        return []
    overhead = group_overhead() if overhead is None else overhead
    order = np.argsort(item_lens, kind="stable")
    lengths, counts = np.unique(item_lens, return_counts=True)
    m = np.maximum(lengths, 1).astype(np.float64)
    below = np.concatenate([[0], np.cumsum(counts)])  # below[j]: items shorter than lengths[j]
    best = np.zeros(len(lengths) + 1)
    start = np.zeros(len(lengths) + 1, dtype=np.int64)
    for j in range(1, len(lengths) + 1):  # best partition of the j shortest lengths
        cost = best[:j] + (below[j] - below[:j]) * m[j - 1] * (p + m[j - 1]) + overhead
        start[j] = int(np.argmin(cost))
        best[j] = cost[start[j]]
    groups, j = [], len(lengths)
    while j > 0:
        groups.append((order[below[start[j]] : below[j]], int(m[j - 1])))
        j = int(start[j])
    return groups[::-1]


def _rows(flat: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """flat [T, ...] gathered by a 2-D index [a, b] -> [a, b, ...] (index_select: faster than
    advanced indexing on CPU)."""
    return flat.index_select(0, index.reshape(-1)).view(*index.shape, *flat.shape[1:])


@dataclass(frozen=True, slots=True)
class _Group:
    """One SDPA call over items padded to the same length m."""

    q_index: torch.Tensor  # [n, m] flat [S * L] positions of each item's queries
    k_index: torch.Tensor  # [n, P + m] its row's prefix, then its own positions
    mask: torch.Tensor  # [n, 1, m, P + m] additive
    src: torch.Tensor  # [R] real query rows in the [n * m] output
    dst: torch.Tensor  # [R] their flat [S * L] positions


class BlockPlan:
    """Index tensors and masks for one padded MIS batch (`groups`: `batch_groups`, when the
    caller has them already)."""

    def __init__(self, batch: Batch, device: torch.device, dtype: torch.dtype,
                 groups: list[tuple[np.ndarray, int]] | None = None):  # fmt: skip
        s, length = batch.num_seqs, batch.max_len
        p_lens, i_lens = batch.prefix_lens, batch.item_lens
        p = int(p_lens.max())
        seq_of_item = np.repeat(np.arange(s), batch.item_counts)  # [N]
        pp = np.arange(p)
        p_valid = pp[None, :] < p_lens[:, None]  # [S, P]
        zero = torch.zeros((), dtype=dtype)
        low = torch.tensor(torch.finfo(dtype).min, dtype=dtype)

        ints, masks, shapes = [], [], []
        for items, m in batch_groups(batch, device) if groups is None else groups:
            seq, lens, start = seq_of_item[items], i_lens[items], batch.item_start[items]
            n, t = len(items), np.arange(m)
            q_valid = t[None, :] < lens[:, None]  # [n, m]
            q_flat = seq[:, None] * length + np.where(q_valid, start[:, None] + t[None, :], 0)
            k_flat = np.concatenate([seq[:, None] * length + pp[None, :], q_flat], axis=1)  # [n, P + m]
            allowed = np.concatenate(
                [np.broadcast_to(p_valid[seq][:, None, :], (n, m, p)),
                 (t[None, :] <= t[:, None])[None] & q_valid[:, None, :]], axis=2)  # fmt: skip
            allowed[~allowed.any(axis=2)] = True  # padded query rows: attend to anything, never NaN
            ints += [q_flat.ravel(), k_flat.ravel(), np.flatnonzero(q_valid), q_flat[q_valid]]
            masks.append(torch.where(torch.from_numpy(allowed), zero, low)[:, None].to(device))
            shapes.append((n, m))
        prefix_allowed = (pp[None, :] <= pp[:, None])[None] & p_valid[:, None, :]  # [S, P, P]
        prefix_allowed[~prefix_allowed.any(axis=2)] = True
        self.prefix_mask = torch.where(torch.from_numpy(prefix_allowed), zero, low)[:, None].to(device)  # [S, 1, P, P]

        flat = torch.from_numpy(np.concatenate(ints)).to(device) if ints else None  # one host-to-device copy
        parts = torch.split(flat, [a.size for a in ints]) if ints else ()
        self.groups = [
            _Group(parts[4 * g].view(n, m), parts[4 * g + 1].view(n, p + m), mask, parts[4 * g + 2], parts[4 * g + 3])
            for g, ((n, m), mask) in enumerate(zip(shapes, masks))
        ]
        self.shape = (s, length, p)

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float) -> torch.Tensor:
        """query [S, H, L, d], key/value [S, KV, L, d] -> [S, L, H, d]."""
        s, length, p = self.shape
        heads, d = query.shape[1], query.shape[3]
        gqa = key.shape[1] != heads
        out = torch.zeros(s, length, heads, d, dtype=query.dtype, device=query.device)
        if p:
            q, k, v = (x[:, :, :p] for x in (query, key, value))
            op = F.scaled_dot_product_attention(q, k, v, attn_mask=self.prefix_mask, scale=scaling, enable_gqa=gqa)
            out[:, :p] = op.transpose(1, 2)
        if self.groups:
            flat_q = query.transpose(1, 2).reshape(s * length, heads, d)
            flat_k, flat_v = (x.transpose(1, 2).reshape(s * length, x.shape[1], d) for x in (key, value))
            flat_out = out.view(s * length, heads, d)
        for g in self.groups:
            qi = _rows(flat_q, g.q_index).transpose(1, 2)  # [n, H, m, d]
            ki, vi = (_rows(x, g.k_index).transpose(1, 2) for x in (flat_k, flat_v))  # [n, KV, P + m, d]
            oi = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=g.mask, scale=scaling, enable_gqa=gqa)
            rows = oi.transpose(1, 2).reshape(-1, heads, d).index_select(0, g.src)
            flat_out.index_copy_(0, g.dst, rows)
        return out
