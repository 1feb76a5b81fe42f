"""A segment: one immutable file of cache entries sorted by key, checked by a checksum.

An Arrow IPC file (uncompressed, so a local segment is memory-mapped and searched in place, not
copied: its checksum reads every page once as it opens, ~0.7 s and its size in the OS's file cache
for a 20M-entry segment of 458 MB, pages the OS takes back under pressure) with columns
`key_hi`, `key_lo` (uint64, sorted by (hi, lo), unique), `scores` (fixed-size list of float32,
one per label), `num_chunks` (int32, only when the settings chunk items) and `added` (uint32
unix seconds, for pruning by age). Its schema metadata says the format, the settings digest
(`profile`), the model, the row count and a CRC-32 over the key and value buffers: a truncated
file fails to open, a changed byte fails the checksum, and either is passed over with one warning
(`Damaged`), never read as a score. Knows nothing about where segments live or about models.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

SEGMENT_FORMAT = "scorecli score cache segment"
SEGMENT_VERSION = 1
SUFFIX = ".arrow"


class Damaged(Exception):
    """A segment that cannot be trusted: truncated, corrupt, or of another format."""


@dataclass
class Entries:
    """Cache entries as arrays: keys as high and low words hi, lo [n] uint64, scores [n, labels]
    float32, chunks [n] int32 (None: one chunk each), added [n] uint32 (unix seconds; None: not
    read). The words are kept apart so that a memory-mapped segment's columns are used in place."""

    hi: np.ndarray
    lo: np.ndarray
    scores: np.ndarray
    chunks: np.ndarray | None = None
    added: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.hi)

    @classmethod
    def of(cls, keys: np.ndarray, scores: np.ndarray, chunks: np.ndarray | None, added=None) -> Entries:
        """From keys [n, 2] (high, low)."""
        return cls(np.ascontiguousarray(keys[:, 0]), np.ascontiguousarray(keys[:, 1]), scores, chunks, added)

    def sorted_unique(self) -> Entries:
        """The entries sorted by key, each key once (the last given wins: the newest value)."""
        if not len(self):
            return self
        order = np.lexsort((self.lo, self.hi))
        hi, lo = self.hi[order], self.lo[order]
        # the last of each run of equal keys: a stable sort keeps their order of arrival
        last = np.ones(len(hi), dtype=bool)
        last[:-1] = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])
        return self.take(order[last])

    def take(self, index: np.ndarray) -> Entries:
        return Entries(
            self.hi[index],
            self.lo[index],
            self.scores[index],
            None if self.chunks is None else self.chunks[index],
            None if self.added is None else self.added[index],
        )

    @staticmethod
    def concat(parts: list[Entries]) -> Entries:
        added = [p.added if p.added is not None else np.zeros(len(p), np.uint32) for p in parts]
        chunks = None if parts[0].chunks is None else np.concatenate([p.chunks for p in parts])
        return Entries(
            np.concatenate([p.hi for p in parts]),
            np.concatenate([p.lo for p in parts]),
            np.concatenate([p.scores for p in parts]),
            chunks,
            np.concatenate(added),
        )


def _checksum(arrays: list[np.ndarray]) -> str:
    crc = 0
    for a in arrays:
        crc = zlib.crc32(memoryview(np.ascontiguousarray(a)).cast("B"), crc)
    return f"{crc:08x}"


def _checked_arrays(e: Entries) -> list[np.ndarray]:
    return [e.hi, e.lo, e.scores] + ([e.chunks] if e.chunks is not None else [])


def to_ipc(entries: Entries, profile: str, model: dict[str, str]) -> bytes:
    """The segment file of `entries` (sorted and unique already) under settings digest `profile`."""
    e = entries
    labels = e.scores.shape[1]
    added = e.added if e.added is not None else np.full(len(e), int(time.time()), np.uint32)
    columns = {
        "key_hi": pa.array(e.hi),
        "key_lo": pa.array(e.lo),
        "scores": pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(e.scores).reshape(-1)), labels),
    }
    if e.chunks is not None:
        columns["num_chunks"] = pa.array(e.chunks.astype(np.int32))
    columns["added"] = pa.array(added.astype(np.uint32))
    metadata = {
        "format": SEGMENT_FORMAT,
        "version": str(SEGMENT_VERSION),
        "profile": profile,
        "rows": str(len(e)),
        "labels": str(labels),
        "checksum": _checksum(_checked_arrays(e)),
        "created": str(int(time.time())),
        "oldest": str(int(added.min())) if len(e) else "",
        "newest": str(int(added.max())) if len(e) else "",
        **{f"model_{k}": v for k, v in model.items()},
    }
    table = pa.table(columns).replace_schema_metadata(metadata)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=max(len(e), 1))
    return sink.getvalue().to_pybytes()


def _column(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    if col.num_chunks != 1:
        col = pa.chunked_array([pa.concat_arrays(col.chunks)]) if col.num_chunks else col
    return col.chunk(0).to_numpy(zero_copy_only=False) if col.num_chunks else np.zeros(0)


@contextmanager
def _unreadable_is_damaged() -> Iterator[None]:
    """A segment Arrow cannot open or read raises Damaged; one that is gone (FileNotFoundError: merged
    away by another run) raises as it is."""
    try:
        yield
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise Damaged(f"cannot be read ({str(exc).splitlines()[0][:120]})") from exc


def _metadata(schema: pa.Schema) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}


def read_entries(source, profile: str, with_added: bool = False) -> tuple[Entries, dict[str, str]]:
    """The entries of the segment at `source` (a path, memory-mapped, or bytes) and its metadata.

    Raises:
        Damaged: it cannot be opened, is of another format or profile, or fails its checksum.
    """
    with _unreadable_is_damaged():
        if isinstance(source, bytes | bytearray | memoryview):
            reader = pa.ipc.open_file(pa.BufferReader(pa.py_buffer(source)))
        else:
            reader = pa.ipc.open_file(pa.memory_map(source, "r"))
        table = reader.read_all()
    meta = _metadata(table.schema)
    if meta.get("format") != SEGMENT_FORMAT or meta.get("version") != str(SEGMENT_VERSION):
        raise Damaged("not a segment of this format")
    if meta.get("profile") != profile:
        raise Damaged("holds entries of other settings")
    try:
        labels = int(meta["labels"])
        entries = Entries(
            _column(table, "key_hi").astype(np.uint64, copy=False),
            _column(table, "key_lo").astype(np.uint64, copy=False),
            _scores(table, labels),
            _column(table, "num_chunks").astype(np.int32) if "num_chunks" in table.column_names else None,
            _column(table, "added").astype(np.uint32) if with_added else None,
        )
        rows = int(meta["rows"])
    except (KeyError, ValueError, pa.ArrowException) as exc:
        raise Damaged(f"is malformed ({exc})") from exc
    if rows != len(entries) or _checksum(_checked_arrays(entries)) != meta.get("checksum"):
        raise Damaged("fails its checksum")
    return entries, meta


def _scores(table: pa.Table, labels: int) -> np.ndarray:
    col = table.column("scores")
    if not table.num_rows:
        return np.zeros((0, labels), np.float32)
    arr = col.chunk(0) if col.num_chunks == 1 else pa.concat_arrays(col.chunks)
    return arr.flatten().to_numpy(zero_copy_only=False).reshape(-1, labels)


def read_metadata(source) -> dict[str, str]:
    """A segment's metadata only (its footer; nothing else is read). Raises Damaged."""
    with _unreadable_is_damaged():
        schema = pa.ipc.open_file(source if not isinstance(source, str) else pa.memory_map(source, "r")).schema
    meta = _metadata(schema)
    if meta.get("format") != SEGMENT_FORMAT:
        raise Damaged("not a segment of this format")
    return meta
