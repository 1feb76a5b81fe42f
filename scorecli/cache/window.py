"""One window's pairs split into hits and pairs to score, and merged back after scoring.

`plan` takes a window's validated rows and their pair keys, and what the lookups found: each
pair is a hit (its values come from the cache, or from earlier in the job), the first pair of its
key still missing (scored), or a repeat of such a pair within the window (copied from it). Each
row keeps only its items to score, in their order, after its query (`Plan.rows`): a row with
some hits packs only its missing items. `Plan.merge` puts the window's values back in item order,
before top-k, chunk aggregation has been done per item already, and the output table is built.
Numpy and `core.rows` only: knows nothing about models, files or the cache's storage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scorecli.core.rows import Row


@dataclass
class Plan:
    """Where every pair of a window comes from.

    Attributes:
        offsets: [rows + 1] items of each row (rows that failed validation have none).
        found: [items] bool, a hit.
        scored: [m] sorted item indices scored by the model (the first of each missing key).
        source: [items] int64, for a repeat the item it copies, else -1.
        rows: the rows to score: each with its items in `scored` only; None for a row with
            nothing to score (or that failed validation).
    """

    offsets: np.ndarray
    found: np.ndarray
    scored: np.ndarray
    source: np.ndarray
    rows: list[Row | None]

    @property
    def hits(self) -> int:
        return int(self.found.sum())

    @property
    def misses(self) -> int:
        return len(self.found) - self.hits

    @property
    def repeats(self) -> np.ndarray:
        return np.flatnonzero(self.source >= 0)

    def merge(self, hit_values: np.ndarray, scored_values: np.ndarray, width: int) -> np.ndarray:
        """[items, width] float32: hits' values [items, <= width] where found, the scored items'
        [m, width], and repeats' copied from the items they repeat (hidden states of hits, which
        the cache does not keep, are zero: a run that asks for them looks nothing up)."""
        out = np.zeros((len(self.found), width), dtype=np.float32)
        out[self.found, : hit_values.shape[1]] = hit_values[self.found]
        out[self.scored] = scored_values
        rep = self.repeats
        out[rep] = out[self.source[rep]]
        return out

    def merge_chunks(self, hit_chunks: np.ndarray | None, scored_chunks: np.ndarray | None) -> np.ndarray | None:
        """[items] int32 chunks of each item (None: not chunked)."""
        if hit_chunks is None and scored_chunks is None:
            return None
        out = np.ones(len(self.found), dtype=np.int64)
        if hit_chunks is not None:
            out[self.found] = hit_chunks[self.found]
        if scored_chunks is not None:
            out[self.scored] = scored_chunks
        rep = self.repeats
        out[rep] = out[self.source[rep]]
        return out


def _void(keys: np.ndarray) -> np.ndarray:
    """[n, 2] uint64 -> [n] 16-byte values, comparable as wholes."""
    return np.ascontiguousarray(keys).view(np.dtype((np.void, 16))).ravel()


def plan(parsed: list[Row | None], keys: np.ndarray, offsets: np.ndarray, found: np.ndarray) -> Plan:
    """The window's plan: `keys` [items, 2] of the items of `parsed` (`offsets` [rows + 1]) and
    `found` [items] the hits."""
    missing = np.flatnonzero(~found)
    source = np.full(len(found), -1, dtype=np.int64)
    if len(missing):
        _, first, inverse = np.unique(_void(keys[missing]), return_index=True, return_inverse=True)
        origin = missing[first[inverse.ravel()]]  # [missing] the first item of each one's key
        repeat = origin != missing
        source[missing[repeat]] = origin[repeat]
        scored = missing[~repeat]
    else:
        scored = missing
    take = np.zeros(len(found), dtype=bool)
    take[scored] = True
    rows: list[Row | None] = []
    for k, row in enumerate(parsed):
        a, b = int(offsets[k]), int(offsets[k + 1])
        if row is None or not take[a:b].any():
            rows.append(None)
            continue
        keep = np.flatnonzero(take[a:b])
        items = row.items if len(keep) == b - a else [row.items[j] for j in keep]
        rows.append(Row(row.query, items, row.instruction, row.id))  # type: ignore[arg-type]
    return Plan(offsets, found, scored, source, rows)
