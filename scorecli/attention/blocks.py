"""MIS attention by blocks: exact, without the dense L x L mask (used by the sdpa backend).

A packed MIS row `P I_1 ... I_n` allows only the prefix's causal triangle and, for each
item, its tokens against [P ++ its own earlier tokens]. A dense mask computes all L^2
scores per head and layer; this plan computes exactly the allowed blocks with two SDPA
calls over the padded [S, L] layout:
  - prefix: the first max|P| positions of every row, causal, keys limited to the row's P
    (a slice, no copy); rows past a shorter prefix are overwritten by the item pass;
  - items: every item as its own query block [m] against its row's prefix keys followed
    by its own keys [max|P| + m], with a small causal mask (m = longest item in the batch).
Index math is numpy, once per batch; each layer does two gathers, two SDPA calls and two
scatters. This module knows nothing about tokenization or heads.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from scorecli.batching import Batch


def dense_cost(batch: Batch) -> int:
    """Attention scores a dense [S, L, L] mask computes (per head and layer)."""
    return batch.num_seqs * batch.max_len**2


def block_cost(batch: Batch) -> int:
    """Attention scores the block plan computes (per head and layer)."""
    p = int(batch.prefix_lens.max())
    m = int(batch.item_lens.max()) if len(batch.item_lens) else 0
    return batch.num_seqs * p * p + len(batch.item_lens) * m * (p + m)


def _rows(flat: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """flat [T, ...] gathered by a 2-D index [a, b] -> [a, b, ...] (index_select: faster than
    advanced indexing on CPU)."""
    return flat.index_select(0, index.reshape(-1)).view(*index.shape, *flat.shape[1:])


class BlockPlan:
    """Index tensors and masks for one padded MIS batch."""

    def __init__(self, batch: Batch, device: torch.device, dtype: torch.dtype):
        s, length = batch.num_seqs, batch.max_len
        p_lens, i_lens, counts = batch.prefix_lens, batch.item_lens, batch.item_counts
        n = len(i_lens)
        p = int(p_lens.max())
        m = max(int(i_lens.max()) if n else 0, 1)
        seq_of_item = np.repeat(np.arange(s), counts)  # [N]
        start = batch.item_start
        t = np.arange(m)
        q_valid = t[None, :] < i_lens[:, None]  # [N, m]
        q_flat = seq_of_item[:, None] * length + np.where(q_valid, start[:, None] + t[None, :], 0)
        pp = np.arange(p)
        p_valid = pp[None, :] < p_lens[:, None]  # [S, P]
        k_flat = np.concatenate([seq_of_item[:, None] * length + pp[None, :], q_flat], axis=1)  # [N, P + m]
        allowed = np.concatenate(
            [np.broadcast_to(p_valid[seq_of_item][:, None, :], (n, m, p)),
             (t[None, :] <= t[:, None])[None] & q_valid[:, None, :]], axis=2)  # fmt: skip
        allowed[~allowed.any(axis=2)] = True  # padded query rows: attend to anything, never NaN
        prefix_allowed = (pp[None, :] <= pp[:, None])[None] & p_valid[:, None, :]  # [S, P, P]
        prefix_allowed[~prefix_allowed.any(axis=2)] = True
        zero = torch.zeros((), dtype=dtype)
        low = torch.tensor(torch.finfo(dtype).min, dtype=dtype)
        ints = torch.from_numpy(np.concatenate([q_flat.ravel(), k_flat.ravel(), np.flatnonzero(q_valid), q_flat[q_valid]]))
        ints = ints.to(device)
        sizes = [q_flat.size, k_flat.size, int(q_valid.sum()), int(q_valid.sum())]
        self.q_index, self.k_index, self.src, self.dst = torch.split(ints, sizes)
        self.q_index, self.k_index = self.q_index.view(n, m), self.k_index.view(n, p + m)
        self.item_mask = torch.where(torch.from_numpy(allowed), zero, low)[:, None].to(device)  # [N, 1, m, P + m]
        self.prefix_mask = torch.where(torch.from_numpy(prefix_allowed), zero, low)[:, None].to(device)  # [S, 1, P, P]
        self.shape = (s, length, n, m, p)

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float) -> torch.Tensor:
        """query [S, H, L, d], key/value [S, KV, L, d] -> [S, L, H, d]."""
        s, length, n, m, p = self.shape
        heads, d = query.shape[1], query.shape[3]
        gqa = key.shape[1] != heads
        out = torch.zeros(s, length, heads, d, dtype=query.dtype, device=query.device)
        if p:
            q, k, v = (x[:, :, :p] for x in (query, key, value))
            op = F.scaled_dot_product_attention(q, k, v, attn_mask=self.prefix_mask, scale=scaling, enable_gqa=gqa)
            out[:, :p] = op.transpose(1, 2)
        if n:
            flat_q = query.transpose(1, 2).reshape(s * length, heads, d)
            flat_k, flat_v = (x.transpose(1, 2).reshape(s * length, x.shape[1], d) for x in (key, value))
            qi = _rows(flat_q, self.q_index).transpose(1, 2)  # [N, H, m, d]
            ki, vi = (_rows(x, self.k_index).transpose(1, 2) for x in (flat_k, flat_v))  # [N, KV, P + m, d]
            oi = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=self.item_mask, scale=scaling, enable_gqa=gqa)
            rows = oi.transpose(1, 2).reshape(n * m, heads, d).index_select(0, self.src)
            out.view(s * length, heads, d).index_copy_(0, self.dst, rows)
        return out

