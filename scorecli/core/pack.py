"""Pack encoded rows into forward sequences: multi-item (MIS) or one item per sequence.

Numpy only: this module knows nothing about torch, tokenizers or attention kernels.
A MIS sequence is `P I_1 I_2 ... I_n`; positions restart at |P| for every item, and the
attention rule (prefix causal; an item sees P and its own earlier tokens) is described
by `prefix_len` and `item_lens`, which each backend turns into its own mask.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from scorecli.errors import ID_FIELDS, TEXT_FIELDS, InputError, field


@dataclass(frozen=True, slots=True)
class EncodedRow:
    """One row after tokenization (decoder kinds), or an error to report."""

    prefix: np.ndarray  # [|P|] int64
    items: list[np.ndarray]  # each [|I_k|] int64
    suffix_len: int = 0  # template tokens at the end of every item, never truncated
    error: str | None = None
    names: tuple[str, str] = TEXT_FIELDS  # the row's query and items fields (`Row.names`), for messages


@dataclass(frozen=True, slots=True)
class Seq:
    """One forward sequence: a prefix and one or more items, in ragged numpy form."""

    input_ids: np.ndarray  # [L] int64
    position_ids: np.ndarray  # [L] int64
    prefix_len: int
    item_lens: np.ndarray  # [k] int64
    item_index: np.ndarray  # [k] int64: index of each item in the window's flat item list
    token_type_ids: np.ndarray | None = None  # [L], cross-encoders only

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[0])


def truncate_items(row: EncodedRow, max_seq_len: int, truncate: str, where: str) -> EncodedRow:
    """Cut items that cannot fit next to the prefix, from the end of their text tokens.

    The template suffix (`row.suffix_len` trailing tokens) is always kept.
    Raises InputError when `truncate == "error"` or when even an empty item cannot fit.
    """
    room = max_seq_len - len(row.prefix)
    if room < row.suffix_len + 1:
        taken = f"prefix of {len(row.prefix)} tokens"
        if row.suffix_len:  # every item ends in it
            taken += f" and the template's item suffix of {row.suffix_len} tokens leave"
        else:
            taken += " leaves"
        raise InputError(f"{where}: {field(row.names)}: {taken} no room for an item within --max-seq-len {max_seq_len}")
    if len(row.prefix) == 0:
        empty = [k for k, item in enumerate(row.items) if len(item) == 0]
        if empty:
            what = "no query ids" if row.names == ID_FIELDS else "the query as the template renders it, no BOS"
            raise InputError(
                f"{where}: {field(row.names, empty[0])}: an empty item after an empty prefix ({what}) leaves nothing "
                "to score"
            )
    too_long = [k for k, item in enumerate(row.items) if len(item) > room]
    if not too_long:
        return row
    if truncate == "error":
        k = too_long[0]
        raise InputError(
            f"{where}: {field(row.names, k)}: {len(row.prefix) + len(row.items[k])} tokens with the prefix "
            f"exceed --max-seq-len {max_seq_len} (use --truncate item to cut it)"
        )
    items = list(row.items)
    for k in too_long:
        item, s = items[k], row.suffix_len
        text_keep = room - s
        items[k] = np.concatenate([item[:text_keep], item[len(item) - s :]]) if s else item[:room]
    return replace(row, items=items)


def check_chunks_fit(row: EncodedRow, counts: np.ndarray, max_seq_len: int, where: str) -> None:
    """Raise InputError when a chunk (`row.items` are chunks, `counts` per item) cannot fit
    beside the row's prefix: chunks are never cut (docs/ranking.md)."""
    room = max_seq_len - len(row.prefix)
    if room < row.suffix_len + 1 or not row.items:
        return  # `truncate_items` names the prefix
    lens = np.fromiter((len(i) for i in row.items), dtype=np.int64, count=len(row.items))
    over = np.flatnonzero(lens > room)
    if len(over):
        k = int(np.searchsorted(np.cumsum(counts), over[0], side="right"))  # the item it is a chunk of
        raise InputError(
            f"{where}: {field(row.names, k)}: a chunk of {int(lens[over[0]])} tokens (template suffix included) does "
            f"not fit beside the prefix of {len(row.prefix)} tokens within --max-seq-len {max_seq_len}"
        )


def pack_row(row: EncodedRow, first_item: int, mis: bool, max_seq_len: int) -> list[Seq]:
    """Pack one row into sequences.

    Args:
        row: the encoded row; every item must already fit next to the prefix.
        first_item: window-global index of the row's first item.
        mis: many items per sequence (split when longer than max_seq_len) or one each.
    Returns:
        Sequences covering every item of the row exactly once, in item order.
    """
    n = len(row.items)
    if n == 0:
        return []
    lens = np.fromiter((len(i) for i in row.items), dtype=np.int64, count=n)
    groups = _mis_groups(lens, max_seq_len - len(row.prefix)) if mis else [(k, k + 1) for k in range(n)]
    return [_make_seq(row, lens, a, b, first_item) for a, b in groups]


def _mis_groups(lens: np.ndarray, room: int) -> list[tuple[int, int]]:
    """Greedy consecutive groups of items whose total length fits in `room`."""
    ends = np.cumsum(lens)
    groups, start, base = [], 0, 0
    while start < len(lens):
        stop = int(np.searchsorted(ends, base + room, side="right"))
        stop = max(stop, start + 1)  # an item always fits alone (truncated beforehand)
        groups.append((start, stop))
        base = int(ends[stop - 1])
        start = stop
    return groups


def _make_seq(row: EncodedRow, lens: np.ndarray, a: int, b: int, first_item: int) -> Seq:
    p = len(row.prefix)
    item_lens = lens[a:b]
    ids = np.concatenate([row.prefix, *row.items[a:b]])
    # item token j sits at position |P| + j, whichever item it belongs to
    starts = np.repeat(np.cumsum(item_lens) - item_lens, item_lens)  # [sum(item_lens)]
    item_pos = p + np.arange(int(item_lens.sum()), dtype=np.int64) - starts
    positions = np.concatenate([np.arange(p, dtype=np.int64), item_pos])
    index = np.arange(first_item + a, first_item + b, dtype=np.int64)
    return Seq(ids, positions, p, item_lens, index)


def shared_prefix_len(prefixes: list[np.ndarray]) -> int:
    """Length of the longest token prefix common to every row's prefix, leaving each row at
    least one token of its own (0 for fewer than two rows)."""
    if len(prefixes) < 2:
        return 0
    first = prefixes[0]
    limit = min(len(p) for p in prefixes) - 1
    if limit <= 0:
        return 0
    same = np.ones(limit, dtype=bool)
    for p in prefixes[1:]:
        same &= p[:limit] == first[:limit]
    return limit if same.all() else int(np.argmin(same))


def drop_shared(seq: Seq, shared: int) -> Seq:
    """`seq` without its first `shared` prefix tokens (their keys and values come from a shared
    prefix computed once); positions keep counting from the start of the full sequence."""
    if shared == 0:
        return seq
    if shared >= seq.prefix_len:
        raise ValueError(f"shared prefix of {shared} tokens leaves nothing of a {seq.prefix_len}-token prefix")
    types = None if seq.token_type_ids is None else seq.token_type_ids[shared:]
    return Seq(
        seq.input_ids[shared:], seq.position_ids[shared:], seq.prefix_len - shared, seq.item_lens, seq.item_index, types
    )


def segment_ids(prefix_len: int, item_lens: np.ndarray) -> np.ndarray:
    """Per-token segment of one sequence: 0 for the prefix, k for item k (1-based)."""
    seg_items = np.repeat(np.arange(1, len(item_lens) + 1, dtype=np.int64), item_lens)
    return np.concatenate([np.zeros(prefix_len, dtype=np.int64), seg_items])
