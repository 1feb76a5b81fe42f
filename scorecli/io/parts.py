"""Durable part files of a long run and the journal that says which input rows they hold.

A `PartStore` is a folder (docs/long-jobs.md; `<out>.partial/`, or the output directory itself for a
Parquet dataset) holding:
- `_scorecli_job.json`: the job's fingerprint and settings (what the job keeps but does not
  compare, e.g. its rows per part), written once (atomically) when the folder is made;
- `part-00000.<ext>`, `part-00001.<ext>`, ...: one part per written table (a window of rows),
  each written under a temporary name, fsync'ed, renamed, and the folder fsync'ed;
- `_scorecli_journal.jsonl`: one line per durable part (its file, first input row, row count,
  byte size), appended and fsync'ed only after the part is in place, and one more, with the new
  size, before a Parquet part is replaced by the same rows under the final schema.

One run at a time: a run holds the folder (`Folder.hold`: a lock on a local disk, a lease in a
store) from the moment it uses it until it ends, and another run on the same folder is refused,
so two runs never interleave their parts. The folder is a local directory or a prefix in a
store (`io.folders`); the same files and rules hold in both.

A kill at any instant leaves a folder that `open_store(..., resume=True)` accepts: parts the
journal does not list (half-written, or written but not yet journaled) are removed and their
rows scored again; a torn last journal line is dropped. Names start with `_` so that
`pyarrow.dataset` and DuckDB globs over `*.parquet` never read the bookkeeping.

This module knows nothing about models, flags or what the fingerprint means: it compares
dicts and moves tables and bytes.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from scorecli.errors import ResumeRefused, ScorecliError, UsageError, first_line
from scorecli.io.folders import LEASE, Folder, folder_at, read_schema, read_table
from scorecli.io.writers import to_jsonl

JOB = "_scorecli_job.json"
JOURNAL = "_scorecli_journal.jsonl"
SUCCESS = "_SUCCESS"
_PART = re.compile(r"part-(\d{5,})\.(parquet|jsonl)$")
WRITTEN_BY = b"scorecli_version"  # a key of the metadata every Parquet output and part of scorecli holds
COMPRESSION = "zstd"


@dataclass(frozen=True)
class Part:
    """One durable part: its file name, the input rows it holds, and its size on disk."""

    file: str
    first_row: int
    rows: int
    bytes: int


class FingerprintMismatch(ResumeRefused):
    """`--resume` that cannot go on with the folder: another job's, or one whose kept part was
    damaged after it was written (its own line says how to go on)."""


def ours(name: str) -> bool:
    """Whether a file name in a store's folder is one the store writes (temporary ones too)."""
    if name == SUCCESS or name.startswith(("_scorecli_", "._scorecli_", f".{SUCCESS}.")):
        return True
    return bool(_PART.fullmatch(name)) or (name.startswith(".part-") and name.endswith(".tmp"))


def not_ours(folder: Folder, fmt: str) -> list[str]:
    """The files in `folder` that no scorecli run wrote (sorted): names a store does not use, and
    parts that are not a store's own (`part-00000.parquet` is what many writers name their files):
    a regular file of the store's format whose Parquet metadata records the scorecli version, or
    one the folder's journal lists (a part damaged since is recovered, `_recover`)."""
    listed = {p.file for p in map(_parse_part, _journal_lines(folder)) if p is not None}
    return sorted(
        n
        for n in folder.names()
        if not ours(n)
        or (_PART.fullmatch(n) and n not in listed and not _our_part(folder, n, fmt))
        or (n == SUCCESS and (folder.size(n) or 0) != 0)  # scorecli's marker is empty: one with content is someone's
    )


def _our_part(folder: Folder, name: str, fmt: str) -> bool:
    if not folder.plain(name) or not name.endswith("." + fmt):
        return False
    try:  # JSON lines parts (library use) carry no metadata
        return fmt != "parquet" or WRITTEN_BY in (read_schema(folder, name).metadata or {})
    except Exception:  # noqa: BLE001 - not Parquet, or torn: pyarrow raises several kinds
        return False


class PartStore:
    """The parts of one job in `folder` (a `Folder`, or a local path or store URL for one);
    `fmt` is the part files' format (parquet or jsonl)."""

    def __init__(
        self,
        folder: Folder | str,
        fmt: str,
        parts: list[Part],
        dataset: bool = False,
        job: dict | None = None,
        saved: dict | None = None,
    ):
        self.dir = folder_at(folder) if isinstance(folder, str) else folder
        self.folder = self.dir.where
        self.fmt = fmt
        self.parts = parts
        self._counted = (0, 0)  # (parts summed, their rows): `rows_done` adds only the parts since
        self.dataset = dataset  # the folder is the output directory (only our files are ours)
        self._job = job  # a new job's record, written (and an earlier run's files cleared) at the first part
        self._record: dict = job if job is not None else (saved or {})  # the job file's content
        self._made = False  # this run made the folder
        # a resumed job's settings as saved; a new job's, written with its first part (may change until then)
        self.settings: dict = self._record.setdefault("settings", {})
        self.resumed = job is None

    @property
    def rows_done(self) -> int:
        """Input rows the durable parts hold (the input's first rows), summed as parts are added (a
        long job asks at each of its tens of thousands of parts)."""
        counted, rows = self._counted
        self._counted = (len(self.parts), rows + sum(p.rows for p in self.parts[counted:]))
        return self._counted[1]

    def durable_rows(self) -> int:
        """Input rows the journal holds: what a resumed run continues after, even when an
        interrupt came between a journal line and `add` returning. 0 before a new job's first
        part: the folder still holds an earlier run's journal, not this job's."""
        if self._job is not None:
            return 0
        try:
            lines = _journal_lines(self.dir)
        except ScorecliError:  # the store stopped answering: this run knows what it journaled
            return self.rows_done
        rows = 0
        for line in lines:
            part = _parse_part(line)
            if part is None or part.first_row != rows:
                break
            rows += part.rows
        return rows

    # ---- writing ----------------------------------------------------------------------

    def begin(self) -> None:
        """A new job takes its folder (made, held, an earlier run's files cleared, the job file
        written) before its first part; nothing for a resumed job."""
        if self._job is not None:
            self._made = self.dir.make()
            self.dir.hold()
            _start(self.dir, self._job, self.dataset)
            self._job = None

    def add(self, table: pa.Table) -> Part:
        """Write `table` (the next rows of the output, one per input row) as a durable part."""
        self.begin()
        name = f"part-{len(self.parts):05d}.{self.fmt}"
        size = self._write(name, table)
        return self.record(Part(name, self.rows_done, table.num_rows, size))

    def record(self, part: Part) -> Part:
        """Journal `part`, the next in input order, once its file is in place (written by `add`,
        or by a Ray worker straight into the store); the run's hold is checked first."""
        self.begin()
        self.dir.check()
        self.dir.append(JOURNAL, (json.dumps(part.__dict__) + "\n").encode())
        self.parts.append(part)
        return part

    def save_settings(self) -> None:
        """Record `settings` as they are now in the job file (a new job's go with its first part)."""
        if self._job is None and self.dir.exists():
            _write_job(self.dir, self._record)

    def next_name(self, k: int = 0) -> str:
        """The file name of the part `k` places after the last one kept."""
        return f"part-{len(self.parts) + k:05d}.{self.fmt}"

    def rewrite(self, name: str, table: pa.Table) -> None:
        """Replace the part `name` with `table` (the same rows, e.g. under a final schema), as
        durably as `add` writes. Its new size is journaled first: a kill on either side of the
        replacement leaves a size the journal lists (`_recover`), and no other file passes."""
        self.dir.check()
        buffer = io.BytesIO()
        write_part(buffer, table, self.fmt)
        data = buffer.getvalue()
        kept = next(p for p in self.parts if p.file == name)
        self.dir.append(
            JOURNAL, (json.dumps(Part(name, kept.first_row, kept.rows, len(data)).__dict__) + "\n").encode()
        )
        self.dir.write(name, lambda f: f.write(data))

    def _write(self, name: str, table: pa.Table) -> int:
        """`table` as the file `name`, whole or not at all (`Folder.write`); returns its size."""
        return self.dir.write(name, lambda f: write_part(f, table, self.fmt))

    # ---- reading back -----------------------------------------------------------------

    def tables(self) -> Iterator[pa.Table]:
        """The Parquet parts' tables, in input order, one part in memory at a time."""
        for part in self.parts:
            yield self.table(part.file)

    def files(self) -> list[str]:
        """The parts' paths or URLs, in input order."""
        return [f"{self.folder.rstrip('/')}/{p.file}" for p in self.parts]

    def names(self) -> list[str]:
        """The parts' file names, in input order."""
        return [p.file for p in self.parts]

    def schema(self, name: str) -> pa.Schema:
        return self._kept(read_schema, name)

    def table(self, name: str) -> pa.Table:
        return self._kept(read_table, name)

    def _kept(self, read, name: str) -> Any:
        """`read(folder, name)` of a kept part; UsageError when its bytes were damaged after it was
        written (a same-size change the journal cannot see): going on would keep failing on it."""
        try:
            return read(self.dir, name)
        except (OSError, pa.ArrowException) as exc:
            if not self.resumed:
                raise
            raise FingerprintMismatch(
                f"--resume: the kept part {self.folder.rstrip('/')}/{name} cannot be read ({first_line(exc, 120)}): "
                "run without --resume to start over"
            ) from exc

    def mark_finished(self) -> None:
        """The folder is the output: `_SUCCESS` written while the journal still lists every part,
        so a failure or a kill before the marker is durable leaves a job that `--resume` keeps
        whole. Then `drop_bookkeeping`."""
        self.dir.check()
        self.dir.write(SUCCESS, lambda f: None)

    def drop_bookkeeping(self) -> None:
        """A finished dataset's journal and job file removed. Left over (a store that stopped
        answering), readers skip them (`_` names) and the next run replaces them."""
        for name in (JOURNAL, JOB):
            self.dir.delete(name)
        self.dir.sync()

    def remove(self) -> None:
        """Delete the folder and everything in it (the output is in place)."""
        self.dir.remove()

    def release(self) -> None:
        """The run is over: let another run use the folder."""
        self.dir.release()

    def discard(self) -> None:
        """Undo a store that holds no part: its bookkeeping goes, and the folder if then empty."""
        if self._job is not None or not self.dir.exists():
            if self._made:  # made, but its job file could not be written (a full disk)
                self.dir.remove_if_empty()
            return  # never started: an earlier run's files stay as they were
        if not self.dataset:
            self.dir.remove()
            return
        for name in self.dir.names():
            if ours(name) and name not in (SUCCESS, LEASE):
                self.dir.delete(name)
        self.dir.remove_if_empty()


def write_part(f: BinaryIO, table: pa.Table, fmt: str) -> None:
    """`table` as a part file's bytes."""
    if fmt == "parquet":
        pq.write_table(table, f, compression=COMPRESSION)
    else:
        f.write(to_jsonl(table).encode("utf-8"))


def open_store(
    folder: str,
    fingerprint: dict[str, Any],
    fmt: str,
    resume: bool,
    dataset: bool = False,
    settings: dict[str, Any] | None = None,
) -> tuple[PartStore, str | None]:
    """The store for a job: continued (`resume` and a folder of the same job) or new.

    Nothing in the folder changes here: a new job's folder is made (and an earlier run's files in
    it removed) when its first part is written, so a run that fails before that leaves it as it
    was.

    Args:
        folder: the store's folder: a local path, or a prefix URL in a store.
        fingerprint: what identifies the job (JSON-able); `resume` needs an equal one on disk.
        fmt: part format, `parquet` or `jsonl`.
        resume: continue the job the folder holds, if any.
        dataset: the folder is a Parquet dataset output that may already hold a finished or
            unfinished output of ours; files that are not ours are never touched.
        settings: a new job's settings (JSON-able), kept with it but never compared; a resumed
            store has the job's own (`PartStore.settings`).

    Returns:
        (store, note): note is a one-line warning when an earlier run's parts will be replaced.

    Raises:
        FingerprintMismatch: `resume` and the folder holds a different job (nothing changed).
        UsageError: the folder holds files that no scorecli run wrote (`not_ours`).
    """
    job = {"format": fmt, "fingerprint": fingerprint, "settings": dict(settings or {})}
    place = folder_at(folder)
    if not place.exists():
        return PartStore(place, fmt, [], dataset, job), None
    place.hold()  # before reading it: another run may be writing it
    try:
        return _existing(place, job, resume, dataset)
    except BaseException:
        place.release()
        raise


def _existing(folder: Folder, job: dict, resume: bool, dataset: bool) -> tuple[PartStore, str | None]:
    """`open_store` on a folder that exists (held by this process)."""
    fmt, names = job["format"], folder.names()
    foreign = not_ours(folder, fmt)
    if foreign:  # scorecli never deletes or overwrites a file it did not write (docs/input-output.md: Output)
        more = ", ..." if len(foreign) > 1 else ""
        raise UsageError(
            f"cannot {'write a dataset into' if dataset else 'keep parts in'} {folder.where}: it holds "
            f"files scorecli did not write ({foreign[0]}{more}): move them away, or give another --out"
        )
    if resume and JOB in names:
        saved = _read_job(folder)
        if saved.get("format") == fmt and saved.get("fingerprint") is not None:
            _compare(saved["fingerprint"], job["fingerprint"], folder.where)
            return PartStore(folder, fmt, _recover(folder, fmt), dataset, saved=saved), None
    unfinished = JOB in names or JOURNAL in names  # a finished dataset has neither: replaced silently
    note = None
    if any(ours(n) and n != LEASE for n in names) if not dataset else unfinished:
        note = f"replacing {folder.where} left by an earlier run (pass --resume to continue such a run)"
    return PartStore(folder, fmt, [], dataset, job), note


def _start(folder: Folder, job: dict, dataset: bool) -> None:
    """A new job's folder (made and held): an earlier run's files removed (in a dataset, only
    ours), the job file written. The folder itself stays: it is what the run holds."""
    for name in folder.names():
        if (dataset and not ours(name)) or name == LEASE:
            continue
        folder.delete(name)
    folder.delete(JOURNAL)
    _write_job(folder, job)


def _write_job(folder: Folder, job: dict) -> None:
    """The job file, written whole (a temporary name, fsync'ed and renamed; one object in a store)."""
    folder.write(JOB, lambda f: f.write(json.dumps(job, indent=1, sort_keys=True).encode()))


def _read_job(folder: Folder) -> dict:
    try:
        return json.loads(folder.read(JOB) or b"{}")
    except (OSError, ValueError):
        return {}  # torn or unreadable: the job never got a part (it is written before any)


def _compare(saved: dict, now: dict, folder: str) -> None:
    for key in sorted(set(saved) | set(now)):
        old, new = saved.get(key), now.get(key)
        if old != new:
            if isinstance(old, dict) and isinstance(new, dict):  # name the entry that differs: "model file x"
                entry = next(k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k))
                key, old, new = f"{key} {entry}", old.get(entry), new.get(entry)
            raise FingerprintMismatch(
                f"--resume: {folder} holds a job with {'' if key.endswith('files') else 'a '}different {key} "
                f"({_short(old)} then, {_short(new)} now); run without --resume to start over"
            )


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def _recover(folder: Folder, fmt: str) -> list[Part]:
    """The journaled parts that are intact and contiguous; everything else is removed. A part is
    intact when its size is one the journal lists for it: as written, or as rewritten (`rewrite`);
    another file under its name (damaged, or another part's) is not."""
    listed: dict[str, Part] = {}  # each part's first line, in journal order
    sizes: dict[str, set[int]] = {}
    for line in _journal_lines(folder):
        part = _parse_part(line)
        if part is None:
            break
        first = listed.setdefault(part.file, part)
        if (first.first_row, first.rows) == (part.first_row, part.rows):
            sizes.setdefault(part.file, set()).add(part.bytes)
    parts: list[Part] = []
    rows = 0  # of `parts`, summed as they come (a long job keeps tens of thousands)
    for part in listed.values():
        expected = f"part-{len(parts):05d}.{fmt}"
        if part.file != expected or part.first_row != rows:
            break
        size = folder.size(part.file)
        if size not in sizes[part.file]:
            break
        parts.append(Part(part.file, part.first_row, part.rows, size))
        rows += part.rows
    keep = {p.file for p in parts} | {JOB, JOURNAL, LEASE}
    for name in folder.names():
        if ours(name) and name not in keep:
            folder.delete(name)
    # drop a torn or stale tail so that later lines follow the intact ones
    folder.write(JOURNAL, lambda f: f.writelines((json.dumps(p.__dict__) + "\n").encode() for p in parts))
    return parts


def _journal_lines(folder: Folder) -> list[bytes]:
    return (folder.read(JOURNAL) or b"").split(b"\n")


def _parse_part(line: bytes) -> Part | None:
    try:
        data = json.loads(line)
        return Part(str(data["file"]), int(data["first_row"]), int(data["rows"]), int(data["bytes"]))
    except (ValueError, KeyError, TypeError):
        return None
