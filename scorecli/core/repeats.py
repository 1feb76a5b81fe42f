"""Sequences of a window that repeat: each distinct one is run once (docs/long-jobs.md: Nightly jobs).

A sequence that holds one entry (an embedding model's query or item text, a cross-encoder's
pair, a decoder's single-item sequence) gives that entry's result from its tokens alone, so a
window that lists the same text many times (a reranking job whose rows share passages) runs it
once and copies the result to the others. Sequences of several items (MIS) are left as they are:
their repeats are pairs, removed before packing (`scorecli.cache`). Numpy only: knows nothing
about models, kinds or files.
"""

from __future__ import annotations

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
        types = b"" if s.token_type_ids is None else s.token_type_ids.tobytes()
        start = int(s.position_ids[0]) if len(s.position_ids) else 0
        key = (s.prefix_len, start, s.input_ids.tobytes(), types)
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
