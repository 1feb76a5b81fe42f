"""Where a batch's prefixes and items sit among the model's hidden states, for forked layers.

A forked layer (`scorecli.forks`) takes the hidden states of a whole batch, in the attention
backend's layout (padded `[S, L]` or one ragged row `[1, T]`), gathers every sequence's prefix
into a right-aligned `[S, P]` block (left padding, masked) and every non-empty item into a
left-aligned `[M, I]` block (right padding, which a causal layer never reads), runs them, and
scatters the results back. Layers that compute attention themselves also read each sequence's
segments and positions in the padded layout. `Swapped` is what both kinds of forked module
share: the model's own module inside, this batch's layout beside it. Knows nothing about
models or kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import torch

from scorecli.attention.device import to_device
from scorecli.core.batching import Batch

T = TypeVar("T")


@dataclass(frozen=True)
class ForkLayout:
    """Device index tensors of one batch (flat indices into its hidden states `[B * L, H]`)."""

    prefix_index: torch.Tensor  # [S, P] each prefix's tokens, right-aligned; padding -> 0
    prefix_mask: torch.Tensor  # [S, P] bool: a real prefix token
    item_index: torch.Tensor  # [M, I] each non-empty item's tokens, left-aligned; padding -> 0
    item_mask: torch.Tensor  # [M, I] bool: a real item token
    item_seq: torch.Tensor  # [M] the sequence (row of `prefix_index`) each item continues
    takes: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # (where, from) of prefixes, of items
    segment: torch.Tensor | None  # [S, L] padded layouts: 0 prefix, k item k, -1 padding
    positions: torch.Tensor | None  # [S, L] padded layouts: position ids (0 at padding)
    max_position: int  # the largest position id (a host value: no device read on the batch path)
    item_lens: np.ndarray  # [M] host: each item's length (`item_groups`)
    _made: dict = field(default_factory=dict, compare=False, repr=False)  # per-batch masks (`masks`)

    @classmethod
    def of(cls, batch: Batch, padded: bool, device: torch.device) -> ForkLayout:
        """The layout of `batch` in a padded `[S, max_len]` (`padded`) or ragged `[1, T]` layout."""
        flat = batch.padded_index() if padded else np.arange(batch.num_tokens, dtype=np.int64)
        prefix_index, prefix_mask = _prefixes(batch, flat)
        item_index, item_mask, item_seq = _items(batch, flat)
        segment = positions = None
        if padded:
            size = batch.num_seqs * batch.max_len
            segment, positions = np.full(size, -1, dtype=np.int64), np.zeros(size, dtype=np.int64)
            segment[flat], positions[flat] = batch.segment, batch.position_ids
            segment, positions = (a.reshape(batch.num_seqs, batch.max_len) for a in (segment, positions))
        top = int(batch.position_ids.max()) if batch.num_tokens else 0
        return cls.upload(prefix_index, prefix_mask, item_index, item_mask, item_seq, segment, positions, top, device)

    @classmethod
    def upload(cls, prefix_index, prefix_mask, item_index, item_mask, item_seq, segment, positions, top, device):
        """A layout from its numpy arrays (masks bool), in one host-to-device copy."""
        takes = [
            prefix_index[prefix_mask],
            np.flatnonzero(prefix_mask),
            item_index[item_mask],
            np.flatnonzero(item_mask),
        ]
        arrays = [prefix_index, prefix_mask, item_index, item_mask, item_seq, *takes]
        arrays += [a for a in (segment, positions) if a is not None]
        uploaded = to_device([a.reshape(-1).astype(np.int64) for a in arrays], device)
        pi, pm, ii, im, seq, *rest = (t.view(a.shape) for t, a in zip(uploaded, arrays))
        seg, pos = rest[4:] if segment is not None else (None, None)
        lens = item_mask.sum(axis=1).astype(np.int64)
        return cls(pi, pm.bool(), ii, im.bool(), seq, tuple(rest[:4]), seg, pos, top, lens)  # type: ignore[arg-type]

    def masks(self, name: str, make: Callable[[], T]) -> T:
        """`make()`, computed once per batch (every layer of the batch reads the same masks and item runs)."""
        if name not in self._made:
            self._made[name] = make()
        return self._made[name]

    def item_groups(self, block: int) -> list[tuple[torch.Tensor | None, int]]:
        """The items in runs of similar length, for a layer that pads every sequence it runs to a
        multiple of `block` tokens (a chunked scan): [(the runs' rows of `item_index`, None for
        all of them in order; its width)]. Each run's items take the same number of blocks, or
        neighbouring numbers where a run of its own would save less than one block of one item,
        the cost of a call; one run is every item at the layout's width."""
        return self.masks(f"groups{block}", lambda: _groups(self.item_lens, block, self.item_seq.device))

    def longest_first(self) -> tuple[torch.Tensor, np.ndarray]:
        """(rows of `item_index` longest first, on the device; their lengths, on the host)."""

        def make():
            order = np.argsort(-self.item_lens, kind="stable")
            return to_device([order], self.item_seq.device)[0], self.item_lens[order]

        return self.masks("longest", make)

    def gather_prefixes(self, x: torch.Tensor) -> torch.Tensor:
        """x [B * L, H] -> [S, P, H], zero at padding."""
        return x[self.prefix_index] * self.prefix_mask[..., None].to(x.dtype)

    def gather_items(self, x: torch.Tensor, rows: torch.Tensor | None = None, width: int | None = None) -> torch.Tensor:
        """x [B * L, H] -> [M, I, H] (the items `rows`, their first `width` columns), zero at padding."""
        index, mask = self.item_index, self.item_mask
        if rows is not None:
            index, mask = index[rows], mask[rows]
        if width is not None:
            index, mask = index[:, :width], mask[:, :width]
        return x[index] * mask[..., None].to(x.dtype)

    def scatter(self, like: torch.Tensor, prefixes: torch.Tensor | None, items: torch.Tensor | None) -> torch.Tensor:
        """[B * L, H'] holding `prefixes` [S, P, H'] and `items` [M, I, H'] at their tokens (zero at
        the layout's padding, which no real token reads)."""
        width = (prefixes if prefixes is not None else items).shape[-1]
        out = like.new_zeros(like.shape[0], width)
        prefix_to, prefix_from, item_to, item_from = self.takes
        for where, source, values in ((prefix_to, prefix_from, prefixes), (item_to, item_from, items)):
            if values is not None:
                out[where] = values.reshape(-1, width)[source].to(out.dtype)
        return out


class Swapped(torch.nn.Module):
    """A model's module stood in for during a forward call (`forks.run`): the module itself
    (`inner`, whose attributes the model's layer may still read) and this batch's layout."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner
        self.layout: ForkLayout | None = None  # this batch's (set by `forks.run` before the call)

    @staticmethod
    def supports(module: torch.nn.Module) -> bool:
        """Whether this adapter can stand in for `module` (as the installed transformers wrote it)."""
        return True

    def __getattr__(self, name: str):
        """The model's layer may read the module's own attributes (`layer_type`)."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["inner"], name)


def _prefixes(batch: Batch, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """([S, P] flat index, [S, P] mask) of every sequence's prefix, right-aligned."""
    lens = batch.prefix_lens
    width = int(lens.max()) if len(lens) else 0
    offset = np.arange(width, dtype=np.int64)[None] - (width - lens)[:, None]  # [S, P]: token within the prefix
    real = offset >= 0
    ragged = batch.cu_seqlens[:-1, None] + np.maximum(offset, 0)
    return np.where(real, flat[np.minimum(ragged, batch.num_tokens - 1)], 0), real


def _items(batch: Batch, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """([M, I] flat index, [M, I] mask, [M] sequence) of every non-empty item, left-aligned."""
    seq = np.repeat(np.arange(batch.num_seqs, dtype=np.int64), batch.item_counts)  # [N]
    keep = batch.item_lens > 0  # an empty item is read at its prefix's last token
    lens, seq, start = batch.item_lens[keep], seq[keep], batch.item_start[keep]
    width = int(lens.max()) if len(lens) else 0
    offset = np.arange(width, dtype=np.int64)[None]  # [1, I]
    real = offset < lens[:, None]
    ragged = batch.cu_seqlens[seq][:, None] + start[:, None] + np.minimum(offset, np.maximum(lens[:, None] - 1, 0))
    return np.where(real, flat[ragged], 0), real, seq


def _groups(lens: np.ndarray, block: int, device: torch.device) -> list[tuple[torch.Tensor | None, int]]:
    """`ForkLayout.item_groups` of items of `lens` tokens (each at least 1)."""
    blocks = -(-lens // block)
    sizes, counts = np.unique(blocks, return_counts=True)  # ascending
    # best[j]: the least cost of the sizes below j, cut into runs; a run costs its items times
    # its largest size, plus one block of one item for the call
    best, cut = [0] * (len(sizes) + 1), [0] * (len(sizes) + 1)
    for j in range(1, len(sizes) + 1):
        best[j], cut[j] = min((best[i] + int(counts[i:j].sum()) * int(sizes[j - 1]) + 1, i) for i in range(j))
    bounds, j = [], len(sizes)
    while j:
        bounds.append((cut[j], j))
        j = cut[j]
    if len(bounds) == 1:
        return [(None, int(lens.max()))]
    order = np.argsort(lens, kind="stable")
    runs = []
    for i, j in reversed(bounds):
        rows = order[(blocks[order] >= sizes[i]) & (blocks[order] <= sizes[j - 1])]
        runs.append((rows, int(lens[rows].max())))
    uploaded = to_device([rows for rows, _ in runs], device)
    return [(rows, width) for rows, (_, width) in zip(uploaded, runs)]
