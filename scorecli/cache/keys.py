"""Pair keys: a 128-bit digest of what decides one item's score, as two uint64 words.

A key is blake2b-128 of the run's settings digest (`identity.settings_digest`), the row's query
part (text and instruction, or query token ids, each length-prefixed so no two rows' parts run
together) and the item (its text, or its token ids). The words are (high, low) of the digest read
big-endian, so sorting by (high, low) sorts keys as bytes. hashlib has no batch call: this is a
loop over items, about a microsecond each (benchmarks/RESULTS.md), run while the window before
is scored. Knows nothing about models, segments or files.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np

from scorecli.core.rows import Row

EMPTY = np.zeros((0, 2), dtype=np.uint64)


def _part(tag: bytes, data: bytes) -> bytes:
    return tag + struct.pack("<Q", len(data)) + data


def _ids(ids) -> bytes:
    return np.asarray(ids, dtype=np.int64).tobytes()


def query_part(row: Row) -> bytes:
    """The part of every key of `row` that its items share."""
    if row.pretokenized:
        return _part(b"q", _ids(row.query))
    instruction = b"\x00" if row.instruction is None else _part(b"\x01", row.instruction.encode("utf-8"))
    return _part(b"t", row.query.encode("utf-8")) + instruction  # type: ignore[union-attr]


def _digests(salt: bytes, row: Row, out: bytearray) -> None:
    """Append the 16-byte keys of the row's items to `out`."""
    base = hashlib.blake2b(salt + query_part(row), digest_size=16)
    copy, add = base.copy, out.extend
    if row.pretokenized:
        for item in row.items:
            h = copy()
            h.update(_ids(item))
            add(h.digest())
    else:
        for item in row.items:
            h = copy()
            h.update(item.encode("utf-8"))  # type: ignore[union-attr]
            add(h.digest())


def row_keys(salt: bytes, row: Row) -> np.ndarray:
    """[items, 2] uint64 keys of the row's items under settings digest `salt` (16 bytes)."""
    out = bytearray()
    if row.items:
        _digests(salt, row, out)
    return words(bytes(out))


def words(digests: bytes) -> np.ndarray:
    """Concatenated 16-byte digests -> [n, 2] uint64 (high, low), native byte order."""
    return np.frombuffer(digests, dtype=">u8").astype(np.uint64).reshape(-1, 2)


def keys_of(salt: bytes, rows: list[Row | None]) -> tuple[np.ndarray, np.ndarray]:
    """([items, 2] keys, [rows + 1] offsets) of the items of `rows` (None: a row that failed
    validation, no items)."""
    out = bytearray()
    counts = np.zeros(len(rows), dtype=np.int64)
    for k, row in enumerate(rows):
        if row is not None and row.items:
            _digests(salt, row, out)
            counts[k] = len(row.items)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return words(bytes(out)), offsets
