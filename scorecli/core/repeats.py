"""Sequences of a window that repeat: each distinct one is run once (docs/long-jobs.md: Nightly jobs).

A sequence that holds one entry (an embedding model's query or item text, a cross-encoder's
pair, a decoder's single-item sequence) gives that entry's result from its tokens alone, so a
window that lists the same text many times (a reranking job whose rows share passages) runs it
once and copies the result to the others. Sequences of several items (MIS) are left as they are:
their repeats are pairs, removed before packing (`scorecli.cache`). A text that stands for
several pairs (an embedding model's passage, listed by rows in many windows) is remembered past
its window by a `Memo`, which the job's later windows recall it from. Numpy only: knows nothing
about models, kinds or files.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from scorecli.core.pack import Seq


def unique_seqs(seqs: list[Seq]) -> tuple[list[int], np.ndarray | None]:
    """(indices of the sequences to run, in order; copies [2, k]: each entry that takes the result
    of an earlier identical sequence, and that sequence's entry), copies None when nothing repeats."""
    seen: dict[tuple, int] = {}
    keep: list[int] = []
    dst: list[int] = []
    src: list[int] = []
    for i, s in enumerate(seqs):
        if len(s.item_index) != 1:
            keep.append(i)
            continue
        key = _key(s)
        first = seen.get(key)
        if first is None:
            seen[key] = int(s.item_index[0])
            keep.append(i)
        else:
            dst.append(int(s.item_index[0]))
            src.append(first)
    if not dst:
        return keep, None
    return keep, np.array([dst, src], dtype=np.int64)


def _key(s: Seq) -> tuple:
    """What decides a one-entry sequence's result: its tokens, token types, where its positions
    start and how many of its tokens are its prefix."""
    types = b"" if s.token_type_ids is None else s.token_type_ids.tobytes()
    start = int(s.position_ids[0]) if len(s.position_ids) else 0
    return (s.prefix_len, start, s.input_ids.tobytes(), types)


def _digest(key: tuple) -> bytes:
    """A 128-bit digest of `_key`'s tuple (what a `Memo` holds instead of the tokens)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(np.array([key[0], key[1], len(key[2])], dtype=np.int64).tobytes())
    h.update(key[2])
    h.update(key[3])
    return h.digest()


# what a job's Memo holds at most (results and keys): some 87,000 embeddings of 384 floats
MEMO_BYTES = 128 << 20


@dataclass(frozen=True)
class Recall:
    """A window's sequences split by a `Memo`: `run` (indices of the sequences still to run),
    `entries` [k] and `values` [k, width] (the entries recalled, and their results), `keep`
    [m] and `keys` (the entries to run whose results the memo keeps, and their keys)."""

    run: list[int]
    entries: np.ndarray
    values: np.ndarray | None
    keep: np.ndarray
    keys: list[bytes]


class Memo:
    """Results of one-entry sequences (a text's embedding), kept across a job's windows, most
    recently used first, within `budget` bytes: a window about to run recalls what earlier ones
    computed (`split`: as it runs, not as it is prepared, which overlaps the window before) and
    gives back what it computed (`add`). Used by the thread that runs the windows."""

    def __init__(self, budget: int = MEMO_BYTES):
        self.budget, self.size, self.recalled = budget, 0, 0
        self._held: OrderedDict[bytes, np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def split(self, seqs: list[Seq]) -> Recall:
        """Which of a window's sequences (repeats removed: `unique_seqs`) run, and which entries
        take a result the memo holds."""
        run: list[int] = []
        entries: list[int] = []
        values: list[np.ndarray] = []
        keep: list[int] = []
        keys: list[bytes] = []
        for i, s in enumerate(seqs):
            if len(s.item_index) != 1:
                run.append(i)
                continue
            key = _digest(_key(s))
            held = self._held.get(key)
            if held is None:
                run.append(i)
                keep.append(int(s.item_index[0]))
                keys.append(key)
            else:
                self._held.move_to_end(key)
                entries.append(int(s.item_index[0]))
                values.append(held)
        self.recalled += len(entries)
        stacked = np.stack(values) if values else None
        return Recall(run, np.array(entries, dtype=np.int64), stacked, np.array(keep, dtype=np.int64), keys)

    def add(self, keys: list[bytes], values: np.ndarray) -> None:
        """Keep `values` [m, width] under `keys` (m), forgetting the least recently used results
        past the budget."""
        for key, value in zip(keys, values):
            if key in self._held:
                continue
            value = np.array(value, dtype=np.float32)  # a copy: not a view of the window's results
            self._held[key] = value
            self.size += value.nbytes + len(key) + 100  # the dict's own share, roughly
        while self.size > self.budget and self._held:
            key, value = self._held.popitem(last=False)
            self.size -= value.nbytes + len(key) + 100
