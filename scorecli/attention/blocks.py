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
When the batch continues a shared prefix (`attention.shared`, C tokens computed once per
window), its keys come first in every block and every query sees them.
Index math is numpy, once per batch; each layer does one gather per group and input, one
SDPA call per group plus one for the prefixes, and the scatters. This module knows nothing
about tokenization or heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from scorecli.attention import to_device
from scorecli.attention.kernel import attention
from scorecli.core.batching import Batch

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
    """Attention scores a dense [S, L, C + L] mask computes (per head and layer)."""
    return batch.num_seqs * batch.max_len * (batch.shared_len + batch.max_len)


def batch_groups(batch: Batch, device: torch.device | None = None) -> list[tuple[np.ndarray, int]]:
    """The item groups a BlockPlan of `batch` on `device` runs (`item_groups`)."""
    return item_groups(batch.item_lens, batch.shared_len + int(batch.prefix_lens.max()), group_overhead(device))


def block_cost(batch: Batch, groups: list[tuple[np.ndarray, int]]) -> int:
    """Attention scores the block plan computes with these item groups (per head and layer)."""
    p, c = int(batch.prefix_lens.max()), batch.shared_len
    return batch.num_seqs * p * (c + p) + sum(len(g) * m * (c + p + m) for g, m in groups)


def item_groups(item_lens: np.ndarray, p: int, overhead: int | None = None) -> list[tuple[np.ndarray, int]]:
    """Items grouped by length: [(item indices, padded length m)], ascending m.

    The partition of the length-sorted items into runs that minimises the scores computed,
    sum over groups of n * m * (p + m), plus `overhead` per group (dynamic programming over
    the distinct lengths). Items of one length always share a group. `overhead` defaults to
    the CPU's (`group_overhead`). `p`: the keys every item sees before its own.
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
    k_index: torch.Tensor  # [n, C + P + m] into [C shared keys ++ S * L]: shared, its row's prefix, its own
    mask: torch.Tensor  # [n, 1, m, C + P + m] additive
    src: torch.Tensor  # [R] real query rows in the [n * m] output
    dst: torch.Tensor  # [R] their flat [S * L] positions


class BlockPlan:
    """Index tensors and masks for one padded MIS batch (`groups`: `batch_groups`, when the
    caller has them already). With `batch.shared_len` C > 0, the C keys of a shared prefix
    (`attention.shared`) come before every sequence's own and every query sees them.

    Built in two steps, so that its arrays travel with the caller's own in one host-to-device
    copy: the constructor computes them on the host (`arrays`: int64 indices and boolean
    masks), `upload` takes their device copies and makes the additive masks there.
    `BlockPlan.build` does both.
    """

    def __init__(
        self, batch: Batch, device: torch.device, dtype: torch.dtype, groups: list[tuple[np.ndarray, int]] | None = None
    ):
        s, length = batch.num_seqs, batch.max_len
        p_lens, i_lens = batch.prefix_lens, batch.item_lens
        p, c = int(p_lens.max()), batch.shared_len
        shared = np.arange(c)
        seq_of_item = np.repeat(np.arange(s), batch.item_counts)  # [N]
        pp = np.arange(p)
        p_valid = pp[None, :] < p_lens[:, None]  # [S, P]

        ints, masks, shapes = [], [], []
        for items, m in batch_groups(batch, device) if groups is None else groups:
            seq, lens, start = seq_of_item[items], i_lens[items], batch.item_start[items]
            n, t = len(items), np.arange(m)
            q_valid = t[None, :] < lens[:, None]  # [n, m]
            q_flat = seq[:, None] * length + np.where(q_valid, start[:, None] + t[None, :], 0)
            k_flat = np.concatenate(
                [np.broadcast_to(shared, (n, c)), c + seq[:, None] * length + pp[None, :], c + q_flat], axis=1
            )  # [n, C + P + m]
            allowed = np.concatenate(
                [
                    np.ones((n, m, c), dtype=bool),
                    np.broadcast_to(p_valid[seq][:, None, :], (n, m, p)),
                    (t[None, :] <= t[:, None])[None] & q_valid[:, None, :],
                ],
                axis=2,
            )
            allowed[~allowed.any(axis=2)] = True  # padded query rows: attend to anything, never NaN
            ints += [q_flat.ravel(), k_flat.ravel(), np.flatnonzero(q_valid), q_flat[q_valid]]
            masks.append(allowed.ravel())  # [n * m * (C + P + m)]
            shapes.append((n, m))
        prefix_allowed = (pp[None, :] <= pp[:, None])[None] & p_valid[:, None, :]  # [S, P, P]
        prefix_allowed[~prefix_allowed.any(axis=2)] = True
        prefix_allowed = np.concatenate([np.ones((s, p, c), dtype=bool), prefix_allowed], axis=2)  # [S, P, C + P]

        self.arrays: list[np.ndarray] = (
            [a.astype(np.int64, copy=False) for a in ints] + masks + [prefix_allowed.ravel()]
        )
        self.shape = (s, length, p, c)
        self.dtype = dtype
        self._shapes = shapes
        self.groups: list[_Group] = []
        self.prefix_mask: torch.Tensor | None = None  # [S, 1, P, C + P] additive, after `upload`

    @classmethod
    def build(
        cls, batch: Batch, device: torch.device, dtype: torch.dtype, groups: list[tuple[np.ndarray, int]] | None = None
    ) -> BlockPlan:
        """Plan and upload in one go (one host-to-device copy)."""
        plan = cls(batch, device, dtype, groups)
        return plan.upload(to_device(plan.arrays, device))

    def upload(self, tensors: list[torch.Tensor]) -> BlockPlan:
        """Take the device copies of `arrays` (in order); returns self."""
        s, _, p, c = self.shape
        k = len(self._shapes)
        ints, masks, prefix = tensors[: 4 * k], tensors[4 * k : 5 * k], tensors[5 * k]
        zero = torch.zeros((), dtype=self.dtype, device=prefix.device)
        low = torch.tensor(torch.finfo(self.dtype).min, dtype=self.dtype, device=prefix.device)
        self.prefix_mask = torch.where(prefix.view(s, p, c + p), zero, low)[:, None]  # [S, 1, P, C + P]
        self.groups = [
            _Group(
                ints[4 * g].view(n, m),
                ints[4 * g + 1].view(n, c + p + m),
                torch.where(mask.view(n, m, c + p + m), zero, low)[:, None],
                ints[4 * g + 2],
                ints[4 * g + 3],
            )
            for g, ((n, m), mask) in enumerate(zip(self._shapes, masks))
        ]
        return self

    def attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        scaling: float,
        shared: tuple[torch.Tensor, torch.Tensor] | None = None,
        softcap: float | None = None,
        sinks: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """query [S, H, L, d], key/value [S, KV, L, d], shared keys/values [1, KV, C, d]
        (when the batch has a shared prefix) -> [S, L, H, d]; `softcap`, `sinks`: see
        `kernel.attention`."""
        s, length, p, c = self.shape
        if (shared[0].shape[2] if shared is not None else 0) != c:
            raise RuntimeError(
                f"block plan for a {c}-token shared prefix got {0 if shared is None else shared[0].shape[2]}"
            )
        heads, d = query.shape[1], query.shape[3]
        out = torch.zeros(s, length, heads, d, dtype=query.dtype, device=query.device)
        if p:
            q, k, v = (x[:, :, :p] for x in (query, key, value))
            if c:
                k, v = (torch.cat([x0.expand(s, -1, -1, -1), x], dim=2) for x0, x in zip(shared, (k, v)))
            op = attention(q, k, v, self.prefix_mask, scaling, softcap, sinks=sinks)
            out[:, :p] = op.transpose(1, 2)
        if self.groups:
            flat_q = query.transpose(1, 2).reshape(s * length, heads, d)
            flat_k, flat_v = (x.transpose(1, 2).reshape(s * length, x.shape[1], d) for x in (key, value))
            if c:  # [C + S * L, KV, d]: the shared keys first
                flat_k, flat_v = (torch.cat([x0[0].transpose(0, 1), x]) for x0, x in zip(shared, (flat_k, flat_v)))
            flat_out = out.view(s * length, heads, d)
        for g in self.groups:
            qi = _rows(flat_q, g.q_index).transpose(1, 2)  # [n, H, m, d]
            ki, vi = (_rows(x, g.k_index).transpose(1, 2) for x in (flat_k, flat_v))  # [n, KV, C + P + m, d]
            oi = attention(qi, ki, vi, g.mask, scaling, softcap, sinks=sinks)
            rows = oi.transpose(1, 2).reshape(-1, heads, d).index_select(0, g.src)
            flat_out.index_copy_(0, g.dst, rows)
        return out
