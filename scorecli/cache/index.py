"""Looking keys up in sorted entries: the segments a run opened, and the entries it added since.

Each segment is searched in place (`np.searchsorted` on its high words, the low word compared;
keys whose high words collide are resolved on the low words). The queries of a window are
sorted first, so the search walks each segment's keys in order (an unsorted search of a million
keys in ten million runs ten times slower: benchmarks/RESULTS.md). A run's own new entries are
kept as small sorted runs, merged when they pile up, so that a pair met again later in the job
is found without writing the cache (and, with no cache at all, repeats within a job are still
scored once: `Index` alone). Knows nothing about files, rows or models.
"""

from __future__ import annotations

import numpy as np

from scorecli.cache.segments import Entries

MAX_RUNS = 8  # a run's own sorted runs before they are merged into one


def _find(hi: np.ndarray, lo: np.ndarray, q: np.ndarray) -> np.ndarray:
    """[m] position of each (sorted) query key [m, 2] in the sorted keys (hi, lo), -1 if absent."""
    n = len(hi)
    if n == 0 or len(q) == 0:
        return np.full(len(q), -1, dtype=np.int64)
    at = np.searchsorted(hi, q[:, 0], side="left")
    inside = at < n
    pos = np.minimum(at, n - 1)
    same_hi = inside & (hi[pos] == q[:, 0])
    found = np.where(same_hi & (lo[pos] == q[:, 1]), pos, -1)
    # a high word shared by several keys (about one in 2**64 / n): look among them by the low word
    for j in np.flatnonzero(same_hi & (found < 0)):
        start = int(pos[j])
        stop = int(np.searchsorted(hi, q[j, 0], side="right"))
        k = start + int(np.searchsorted(lo[start:stop], q[j, 1]))
        if k < stop and lo[k] == q[j, 1]:
            found[j] = k
    return found


def _buckets(hi: np.ndarray) -> tuple[np.ndarray, int]:
    """(table [2**bits + 1] uint32: where each bucket of high words starts, shift): keys are
    digests, uniform over 64 bits, so the top `bits` of a high word say where it lies within a
    few entries (about 4 a bucket: 1 byte of table per entry)."""
    bits = max(1, int(np.ceil(np.log2(max(len(hi) / 4, 2)))))
    shift = 64 - bits
    counts = np.bincount((hi >> np.uint64(shift)).astype(np.int64), minlength=2**bits)
    table = np.zeros(2**bits + 1, dtype=np.uint32 if len(hi) < 2**32 else np.uint64)
    np.cumsum(counts, out=table[1:])
    return table, shift


def _probe(hi: np.ndarray, lo: np.ndarray, table: np.ndarray, shift: int, q: np.ndarray) -> np.ndarray:
    """`_find` through the bucket table: each key is compared with its bucket's entries, in
    order, all keys at once (a bucket holds about 4)."""
    bucket = (q[:, 0] >> np.uint64(shift)).astype(np.int64)
    pos = table[bucket].astype(np.int64)
    end = table[bucket + 1].astype(np.int64)
    found = np.full(len(q), -1, dtype=np.int64)
    todo = np.flatnonzero(pos < end)
    while len(todo):
        at = pos[todo]
        h, qh = hi[at], q[todo, 0]
        hit = (h == qh) & (lo[at] == q[todo, 1])
        found[todo[hit]] = at[hit]
        # go on while the entry is below the key (sorted by (hi, lo)) and the bucket not done
        below = (h < qh) | ((h == qh) & (lo[at] < q[todo, 1]))
        pos[todo] = at + 1
        todo = todo[below & ~hit & (at + 1 < end[todo])]
    return found


class Sorted:
    """Entries sorted by key, searchable (a large one through a bucket table of its high words)."""

    def __init__(self, entries: Entries):
        self.entries = entries
        self.hi, self.lo = entries.hi, entries.lo
        self.table: np.ndarray | None = None
        self.shift = 0

    def __len__(self) -> int:
        return len(self.entries)

    def find(self, q: np.ndarray) -> np.ndarray:
        if len(self.hi) < 4096:
            return _find(self.hi, self.lo, q)
        if self.table is None:
            self.table, self.shift = _buckets(self.hi)
        return _probe(self.hi, self.lo, self.table, self.shift, q)


class Index:
    """Opened segments and this run's own entries. `labels`, `chunked`: the values' shape."""

    def __init__(self, labels: int, chunked: bool, limit: int | None = None):
        self.labels, self.chunked = labels, chunked
        self.segments: list[Sorted] = []
        self.runs: list[Sorted] = []
        self.limit = limit  # most entries of its own a run keeps (None: no limit)
        self.version = 0  # counts the `add`s: a lookup made at another version may find more now

    def open(self, entries: Entries) -> None:
        """Search `entries` (sorted and unique) too."""
        if len(entries):
            self.segments.append(Sorted(entries))

    def add(self, entries: Entries) -> None:
        """Entries this run computed (any order)."""
        if not len(entries):
            return
        self.runs.append(Sorted(entries.sorted_unique()))
        if len(self.runs) > MAX_RUNS:
            merged = Entries.concat([r.entries for r in self.runs]).sorted_unique()
            self.runs = [Sorted(merged)]
        while self.limit is not None and self.runs and sum(len(r) for r in self.runs) > self.limit:
            self.runs.pop(0)  # the oldest go first
        # counted once searchable: the next window, looked up in another thread meanwhile, took
        # the version before its lookup and so looks up again if it may have missed them
        self.version += 1

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(found [m] bool, scores [m, labels], chunks [m] or None) of keys [m, 2] (any order)."""
        m = len(keys)
        found = np.zeros(m, dtype=bool)
        scores = np.zeros((m, self.labels), dtype=np.float32)
        chunks = np.ones(m, dtype=np.int32) if self.chunked else None
        if m == 0:
            return found, scores, chunks
        # in the order of their high words: the searches walk each segment's keys in order
        order = np.argsort(keys[:, 0], kind="stable")
        q = keys[order]
        for part in self.runs[::-1] + self.segments:  # the newest first
            todo = np.flatnonzero(~found[order])
            if not len(todo):
                break
            at = part.find(q[todo])
            hit = at >= 0
            if not hit.any():
                continue
            dest = order[todo[hit]]
            found[dest] = True
            scores[dest] = part.entries.scores[at[hit]]
            if chunks is not None and part.entries.chunks is not None:
                chunks[dest] = part.entries.chunks[at[hit]]
        return found, scores, chunks

    @property
    def size(self) -> int:
        return sum(len(s) for s in self.segments) + sum(len(r) for r in self.runs)
