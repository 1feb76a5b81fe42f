"""Where a batch's prefixes and items sit among the model's hidden states, for forked layers.

A forked layer (`scorecli.forks`) takes the hidden states of a whole batch, in the attention
backend's layout (padded `[S, L]` or one ragged row `[1, T]`), gathers every sequence's prefix
into a right-aligned `[S, P]` block (left padding, masked) and every non-empty item into a
left-aligned `[M, I]` block (right padding, which a causal layer never reads), runs them, and
scatters the results back. Layers that compute attention themselves also read each sequence's
segments and positions in the padded layout. Knows nothing about models or kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from scorecli.attention.device import to_device
from scorecli.core.batching import Batch


@dataclass(frozen=True)
class ForkLayout:
    """Device index tensors of one batch (flat indices into its hidden states `[B * L, H]`)."""

    prefix_index: torch.Tensor  # [S, P] each prefix's tokens, right-aligned; padding -> 0
    prefix_mask: torch.Tensor  # [S, P] bool: a real prefix token
    item_index: torch.Tensor  # [M, I] each non-empty item's tokens, left-aligned; padding -> 0
    item_mask: torch.Tensor  # [M, I] bool: a real item token
    item_seq: torch.Tensor  # [M] the sequence (row of `prefix_index`) each item continues
    segment: torch.Tensor | None  # [S, L] padded layouts: 0 prefix, k item k, -1 padding
    positions: torch.Tensor | None  # [S, L] padded layouts: position ids (0 at padding)
    _made: dict = field(default_factory=dict, compare=False, repr=False)  # per-batch masks (`masks`)

    @classmethod
    def of(cls, batch: Batch, padded: bool, device: torch.device) -> ForkLayout:
        """The layout of `batch` in a padded `[S, max_len]` (`padded`) or ragged `[1, T]` layout."""
        flat = batch.padded_index() if padded else np.arange(batch.num_tokens, dtype=np.int64)
        prefix_index, prefix_mask = _prefixes(batch, flat)
        item_index, item_mask, item_seq = _items(batch, flat)
        arrays = [prefix_index, prefix_mask, item_index, item_mask, item_seq]
        if padded:
            size = batch.num_seqs * batch.max_len
            segment, positions = np.full(size, -1, dtype=np.int64), np.zeros(size, dtype=np.int64)
            segment[flat], positions[flat] = batch.segment, batch.position_ids
            arrays += [segment, positions]
        uploaded = to_device([a.reshape(-1) for a in arrays], device)  # one copy
        shaped = [t.view(a.shape) for t, a in zip(uploaded, arrays)]
        pi, pm, ii, im, seq = shaped[:5]
        seg, pos = (t.view(batch.num_seqs, batch.max_len) for t in shaped[5:]) if padded else (None, None)
        return cls(pi, pm.bool(), ii, im.bool(), seq, seg, pos)

    def masks(self, name: str, make: Callable[[], torch.Tensor]) -> torch.Tensor:
        """`make()`, computed once per batch (every layer of the batch reads the same mask)."""
        if name not in self._made:
            self._made[name] = make()
        return self._made[name]

    def gather_prefixes(self, x: torch.Tensor) -> torch.Tensor:
        """x [B * L, H] -> [S, P, H], zero at padding."""
        return x[self.prefix_index] * self.prefix_mask[..., None].to(x.dtype)

    def gather_items(self, x: torch.Tensor) -> torch.Tensor:
        """x [B * L, H] -> [M, I, H], zero at padding."""
        return x[self.item_index] * self.item_mask[..., None].to(x.dtype)

    def scatter(self, like: torch.Tensor, prefixes: torch.Tensor | None, items: torch.Tensor | None) -> torch.Tensor:
        """[B * L, H'] holding `prefixes` [S, P, H'] and `items` [M, I, H'] at their tokens (zero at
        the layout's padding, which no real token reads)."""
        width = (prefixes if prefixes is not None else items).shape[-1]
        out = like.new_zeros(like.shape[0], width)
        for index, mask, values in (
            (self.prefix_index, self.prefix_mask, prefixes),
            (self.item_index, self.item_mask, items),
        ):
            if values is not None:
                out[index[mask]] = values[mask].to(out.dtype)
        return out


def _prefixes(batch: Batch, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """([S, P] flat index, [S, P] mask) of every sequence's prefix, right-aligned."""
    lens = batch.prefix_lens
    width = int(lens.max()) if len(lens) else 0
    offset = np.arange(width, dtype=np.int64)[None] - (width - lens)[:, None]  # [S, P]: token within the prefix
    real = offset >= 0
    ragged = batch.cu_seqlens[:-1, None] + np.maximum(offset, 0)
    return np.where(real, flat[np.minimum(ragged, batch.num_tokens - 1)], 0), real.astype(np.int64)


def _items(batch: Batch, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """([M, I] flat index, [M, I] mask, [M] sequence) of every non-empty item, left-aligned."""
    seq = np.repeat(np.arange(batch.num_seqs, dtype=np.int64), batch.item_counts)  # [N]
    keep = batch.item_lens > 0  # an empty item is read at its prefix's last token
    lens, seq, start = batch.item_lens[keep], seq[keep], batch.item_start[keep]
    width = int(lens.max()) if len(lens) else 0
    offset = np.arange(width, dtype=np.int64)[None]  # [1, I]
    real = offset < lens[:, None]
    ragged = batch.cu_seqlens[seq][:, None] + start[:, None] + np.minimum(offset, np.maximum(lens[:, None] - 1, 0))
    return np.where(real, flat[ragged], 0), real.astype(np.int64), seq
