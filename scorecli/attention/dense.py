"""Dense-mask backends (torch SDPA and an eager reference) over a padded layout.

The mask is additive float (0 / dtype min), never boolean: transformers' eager path adds
masks to scores, where a boolean mask would be silently wrong. Padding costs tokens in
the batch budget (`is_padded`). This module knows nothing about tokenization or heads.
"""

from __future__ import annotations

import numpy as np
import torch

from scorecli.attention import ModelInputs, pad_ragged, to_device
from scorecli.attention.blocks import BlockPlan, batch_groups, block_cost, dense_cost
from scorecli.attention.kernel import attention
from scorecli.attention.shared import SharedKV
from scorecli.core.batching import Batch


def mis_allowed(segment: torch.Tensor, shared_len: int = 0) -> torch.Tensor:
    """Boolean MIS rule from padded segment ids.

    Args:
        segment: [S, L] int64; 0 prefix, k item k, -1 padding.
        shared_len: keys of a shared prefix (`attention.shared`) in front of every sequence.
    Returns:
        [S, L, C + L] bool: query t may attend key u (causal; prefix keys, or keys of its own
        item; every shared key). Padding queries attend only themselves so no row is fully masked.
    """
    length = segment.shape[1]
    pos = torch.arange(length, device=segment.device)
    causal = pos[None, :] <= pos[:, None]  # [L, L]
    seg_q, seg_k = segment[:, :, None], segment[:, None, :]
    allowed = causal & (seg_k >= 0) & ((seg_k == 0) | (seg_k == seg_q))
    allowed |= torch.eye(length, dtype=torch.bool, device=segment.device)
    if shared_len:
        shared = (segment >= 0)[:, :, None].expand(-1, -1, shared_len)  # [S, L, C]
        allowed = torch.cat([shared, allowed], dim=2)
    return allowed


class DenseMaskBackend:
    """Plans a padded batch and an additive float mask [S, 1, L, C + L] (C: `shared`'s length)."""

    name = "dense"
    is_padded = True
    shares_prefix = True

    def __init__(self) -> None:
        self.mask: torch.Tensor | None = None
        self.shared: SharedKV | None = None  # set by the caller when batches continue a shared prefix

    def plan(self, batch: Batch, device: torch.device, dtype: torch.dtype) -> ModelInputs:
        return self._padded(batch, device, dtype, with_mask=True)[0]

    def _padded(
        self, batch: Batch, device: torch.device, dtype: torch.dtype, with_mask: bool, extra: list[np.ndarray] = ()
    ) -> tuple[ModelInputs, list[torch.Tensor]]:
        """Padded inputs (and the dense mask); `extra` arrays travel in the same one copy and
        come back as the second value."""
        s, length = batch.num_seqs, batch.max_len
        where = batch.padded_index()  # [T]
        ids, pos, seg, pool, first, where_t, *extra_t = to_device(
            [
                batch.input_ids,
                batch.position_ids,
                batch.segment,
                where[batch.pool_index],
                where[batch.first_index],
                where,
                *extra,
            ],
            device,
        )
        self.mask = None
        if batch.shared_len != (self.shared.length if self.shared is not None else 0):
            raise RuntimeError(f"batch continues a {batch.shared_len}-token shared prefix the backend does not hold")
        if with_mask:
            allowed = mis_allowed(pad_ragged(seg, where_t, s, length, -1), batch.shared_len)  # [S, L, C + L]
            zero = torch.zeros((), dtype=dtype, device=device)
            self.mask = torch.where(allowed, zero, torch.finfo(dtype).min)[:, None]  # [S, 1, L, C + L]
        inputs = ModelInputs(
            pad_ragged(ids, where_t, s, length, 0), pad_ragged(pos, where_t, s, length, 0), pool, first
        )
        return inputs, extra_t


class SdpaBackend(DenseMaskBackend):
    """torch SDPA. MIS batches whose blocks cost less than half the dense mask run by blocks
    (`scorecli.attention.blocks`); `blocks="always"|"never"` forces a path (tests, benchmarks)."""

    name = "sdpa"

    def __init__(self, blocks: str = "auto") -> None:
        super().__init__()
        self.blocks = blocks
        self.block_plan: BlockPlan | None = None

    def plan(self, batch: Batch, device: torch.device, dtype: torch.dtype) -> ModelInputs:
        groups = None if self.blocks == "never" else batch_groups(batch, device)
        use_blocks = self.blocks == "always" or (
            self.blocks == "auto" and 2 * block_cost(batch, groups) < dense_cost(batch)
        )
        block_plan = BlockPlan(batch, device, dtype, groups) if use_blocks else None
        inputs, uploaded = self._padded(batch, device, dtype, not use_blocks, block_plan.arrays if use_blocks else [])
        self.block_plan = block_plan.upload(uploaded) if use_blocks else None
        return inputs

    def attend(self, module, query, key, value, scaling, softcap=None, sinks=None):
        if self.block_plan is not None:
            shared = self.shared and self.shared.of(module)
            return self.block_plan.attend(query, key, value, scaling, shared, softcap, sinks)
        if self.shared is not None:
            key, value = self.shared.prepend(module, key, value)
        out = attention(query, key, value, self.mask, scaling, softcap, sinks=sinks)  # [b, heads, q, d]
        return out.transpose(1, 2).contiguous()


class EagerBackend(DenseMaskBackend):
    """Plain matmul-softmax attention, the reference every other backend is checked against."""

    name = "eager"

    def attend(self, module, query, key, value, scaling, softcap=None, sinks=None):
        if self.shared is not None:
            key, value = self.shared.prepend(module, key, value)
        out = attention(query, key, value, self.mask, scaling, softcap, sinks=sinks, explicit=True)
        return out.transpose(1, 2).contiguous()
