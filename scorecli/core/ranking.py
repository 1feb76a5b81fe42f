"""Ranking (docs/ranking.md): long items scored in chunks, chunk scores aggregated per item, top-k.

Numpy only, index math on whole rows and windows: it knows nothing about tokenizers, torch or
attention. `chunk_windows` says where each item's chunks start and end (before packing; each
chunk then becomes an item of its own), `aggregate` turns the chunks' scores back into one
row per item (after scoring), and `top_k` ranks a window's items row by row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Chunking:
    """`--chunk-tokens N`, `--chunk-overlap M`, `--chunk-aggregate`."""

    size: int  # N
    overlap: int = 0  # M, 0 <= M < N
    aggregate: str = "max"

    @property
    def stride(self) -> int:
        return self.size - self.overlap


def chunk_counts(lengths: np.ndarray, c: Chunking) -> np.ndarray:
    """[n] chunks of items with `lengths` chunkable tokens: 1 up to N tokens, else windows
    j * (N - M) until the first that reaches the end."""
    over = np.maximum(lengths - c.size, 0)
    return 1 + (over + c.stride - 1) // c.stride  # ceil(over / stride) more windows


def chunk_windows(lengths: np.ndarray, c: Chunking) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where every item's chunks lie in its chunkable tokens.

    Args:
        lengths: [n] chunkable tokens of each item (its tokens without the template suffix).
    Returns:
        counts [n] (chunks per item), starts [C] and lens [C] (each chunk's first token and
        length within its item; C = counts.sum(), item-major).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    counts = chunk_counts(lengths, c)
    j = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)  # [C]
    starts = j * c.stride
    lens = np.minimum(c.size, np.repeat(lengths, counts) - starts)
    return counts, starts, lens


def ragged_arange(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """concatenate([arange(s, s + n) for s, n in zip(starts, lens)]) without the loop."""
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    return np.arange(total, dtype=np.int64) + np.repeat(starts - (np.cumsum(lens) - lens), lens)


def chunk_items(items: list[np.ndarray], suffix_len: int, c: Chunking) -> tuple[list[np.ndarray], np.ndarray]:
    """Cut items into chunks: each chunk is a window of the item's chunkable tokens followed by
    the item's last `suffix_len` tokens (the template suffix, kept whole in every chunk).

    Returns:
        the chunks (item-major) and [n] chunks per item.
    """
    n = len(items)
    if n == 0:
        return [], np.zeros(0, dtype=np.int64)
    total = np.fromiter((len(i) for i in items), dtype=np.int64, count=n)
    text = np.maximum(total - suffix_len, 0)
    counts, starts, lens = chunk_windows(text, c)
    if counts.sum() == n:  # every item fits in one chunk: nothing to cut
        return list(items), counts
    flat = np.concatenate(items)
    base = np.repeat(np.cumsum(total) - total, counts)  # [C] each chunk's item's first token in `flat`
    suffix = np.repeat(total - text, counts)  # [C] 0 for items shorter than the suffix
    # two segments per chunk: its window, then its item's suffix
    seg_starts = np.stack([base + starts, base + np.repeat(text, counts)], axis=1).reshape(-1)
    seg_lens = np.stack([lens, suffix], axis=1).reshape(-1)
    chunk_lens = lens + suffix
    chunks = np.split(flat[ragged_arange(seg_starts, seg_lens)], np.cumsum(chunk_lens)[:-1])
    return chunks, counts


def aggregate(values: np.ndarray, score: np.ndarray, counts: np.ndarray, how: str) -> np.ndarray:
    """One row per item from its chunks' rows.

    Args:
        values: [C, D] float32 rows of every chunk (label scores, then pooled states), item-major.
        score: [C] each chunk's `score`.
        counts: [n] chunks per item (each >= 1).
        how: `max` (the row of the first chunk with the highest score; a NaN score counts as
            the highest), `first` (chunk 0's), `mean` (the mean over the chunks).
    Returns:
        [n, D] float32.
    """
    if len(counts) == len(values):  # one chunk each
        return values
    starts = np.cumsum(counts) - counts  # [n]
    if how == "mean":
        sums = np.add.reduceat(values.astype(np.float64), starts, axis=0)
        return (sums / counts[:, None]).astype(np.float32)
    if how == "first":
        return values[starts]
    best = np.maximum.reduceat(score, starts)  # [n], NaN when a chunk is NaN
    hit = (score == np.repeat(best, counts)) | np.isnan(score)
    index = np.arange(len(score), dtype=np.int64)
    chosen = np.minimum.reduceat(np.where(hit, index, len(score)), starts)
    return values[chosen]


def last_chunks(counts: np.ndarray) -> np.ndarray:
    """[C] bool: True at each item's last chunk (an item is done when it is)."""
    last = np.zeros(int(counts.sum()), dtype=bool)
    last[np.cumsum(counts) - 1] = True
    return last


def top_k(score: np.ndarray, item_offsets: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's best `k` items: highest score first, ties to the lower index, NaN last.

    Args:
        score: [N] the window's item scores, row-major.
        item_offsets: [rows + 1] where each row's items start in `score`.
    Returns:
        offsets [rows + 1] and values (int32 item indices within their row) of the
        `top_k` list column.
    """
    counts = np.diff(item_offsets)
    row = np.repeat(np.arange(len(counts), dtype=np.int64), counts)  # [N]
    index = np.arange(len(score), dtype=np.int64) - np.repeat(item_offsets[:-1], counts)  # [N] within its row
    order = np.lexsort((index, -score.astype(np.float64), row))  # by row, best first (NaN last), lower index
    rank = np.arange(len(score), dtype=np.int64) - np.repeat(item_offsets[:-1], counts)  # position in the order
    keep = order[rank < k]
    kept = np.minimum(counts, k)
    return np.concatenate([[0], np.cumsum(kept)]).astype(np.int32), index[keep].astype(np.int32)
