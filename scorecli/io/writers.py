"""Write scored Arrow tables to Parquet or JSON lines, window by window.

Where the bytes go is `scorecli.io.output`'s decision (a `Target`):
- a regular file: a hidden temporary file beside it (locked, so a later run can tell a
  killed run's leftover from a live one), renamed onto it when the run succeeds; a failed
  or interrupted run leaves nothing at `out`;
- an object in a store (`s3://...`): assembled in an anonymous temporary file and uploaded at
  the end, whole or not at all (`io.stores.Store.upload`);
- stdout, a device or a FIFO: JSON lines are streamed into it window by window (a window
  is written only once all of it is scored); Parquet, unreadable before its footer anyway,
  is spooled in an anonymous temporary file and copied in at the end.
A reader that goes away (a closed pipe) raises `OutputClosed`. Tables whose schema widens
later (a column all-null or absent at first) are handled by rewriting the Parquet written
so far once, under the wider schema (`scorecli.io.schema`). Knows nothing about models.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from scorecli.errors import OutputClosed, ScorecliError, UsageError
from scorecli.io.floats import shortest_floats
from scorecli.io.json_values import json_default
from scorecli.io.nanos import nanos_as_json
from scorecli.io.output import Target, output_format, resolve_output
from scorecli.io.schema import conform, merge_schema, null_nonfinite, with_metadata
from scorecli.io.stores import locate
from scorecli.io.temp_files import clean_stale_temps, create, fsync_dir, lock, temp_path
from scorecli.io.urls import is_url

__all__ = ["FileSink", "OutputClosed", "Sink", "output_format", "temp_path", "to_jsonl"]


# ---- JSON lines ------------------------------------------------------------------------


_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=json_default).encode


def to_jsonl(table: pa.Table) -> str:
    """One JSON object per row, each followed by a newline (NaN/inf must be null already);
    float32 values with float32 digits (`floats`), nanoseconds with nine digits (`nanos`)."""
    return "".join(_ENCODE(row) + "\n" for row in shortest_floats(nanos_as_json(table)).to_pylist())


# ---- the sink --------------------------------------------------------------------------


class Sink:
    """Output for one run: `with Sink(target, metadata) as sink: sink.write(table)`.

    Args:
        target: a `Target` from `resolve_output`, or an `--out` string resolved here.
        metadata: Parquet key-value metadata (provenance).

    Commits when the block succeeds; on any exception, including KeyboardInterrupt,
    discards what it can (the temporary file) and re-raises. `nulled` counts, per column,
    the NaN/infinite values written as null.
    """

    def __init__(self, target: Target | str, metadata: dict[str, str]):
        self.target = target if isinstance(target, Target) else resolve_output(target)
        self.out = self.target.out
        self.format = self.target.format
        self.nulled: dict[str, int] = {}
        self._metadata = metadata
        self._tmp: str | None = None
        self._dest: IO[bytes] | None = None  # stdout or the special file, written through
        self._file: IO[bytes]  # where this format's bytes go first
        self._text: IO[bytes] | None = None  # the gzip layer, for .jsonl.gz
        self._writer: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None
        self._done = False
        self.committed = False  # the output is in place, whole (an interrupt after this point finds it there)
        self._object = False  # an object in a store (`io.stores.Store.upload`)
        self.streamed = 0  # rows the reader of a stream has (`io.sinks.Sink`)
        self._open()

    def _open(self) -> None:
        t = self.target
        if t.kind == "dataset":  # a folder of parts: `checkpoint.Checkpoint` writes it, never one file
            raise UsageError(f"cannot write output {t.out}: a folder (a Parquet dataset) is not written through a Sink")
        if t.kind == "file" and is_url(t.path):  # an object: assembled here, uploaded whole at the end
            self._file = tempfile.TemporaryFile()
            self._object = True
        elif t.kind == "file":
            clean_stale_temps(t.path)
            self._tmp = temp_path(t.path)
            self._file = create(self._tmp)
            lock(self._file.fileno())
        else:
            self._dest = sys.stdout.buffer if t.kind == "stdout" else _open_special(t)
            # Parquet cannot be read before its footer: spool it, copy it in at the end
            self._file = tempfile.TemporaryFile() if self.format == "parquet" else self._dest
        if self.format == "jsonl.gz":
            self._text = gzip.GzipFile(filename="", mode="wb", fileobj=self._file, mtime=0)

    def __enter__(self) -> Sink:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def write(self, table: pa.Table) -> None:
        """Append one window's rows."""
        if self._done:
            raise RuntimeError("write to a closed Sink")
        table, nulled = null_nonfinite(table, scalars=self.format != "parquet")
        for name, n in nulled.items():
            self.nulled[name] = self.nulled.get(name, 0) + n
        if self.format == "parquet":
            self._write_parquet(table)
            return
        # a column that appears in a later window (the first id after rows without one) is in every
        # line from there on, null where a row has none: a stream cannot go back to the earlier lines
        self._schema = table.schema if self._schema is None else merge_schema(self._schema, table.schema)
        data = to_jsonl(conform(table, self._schema)).encode("utf-8")
        with _closed_pipe(self):
            if self._dest is not None:  # counted first: a signal may stop the write halfway
                self.streamed += table.num_rows
            (self._text or self._file).write(data)
            if self._dest is not None:  # streamed: the reader sees whole windows as they finish
                if self._text is not None:
                    self._text.flush()
                self._file.flush()

    def _write_parquet(self, table: pa.Table) -> None:
        if self._writer is None:
            self._start(with_metadata(table.schema.remove_metadata(), self._metadata))
        schema = merge_schema(self._schema, table.schema)
        if not schema.equals(self._schema):
            self._rewrite(schema)
        self._writer.write_table(conform(table, self._schema))

    def _start(self, schema: pa.Schema) -> None:
        self._schema = schema
        self._writer = pq.ParquetWriter(self._file, schema, compression="zstd")

    def _rewrite(self, schema: pa.Schema) -> None:
        """Start the file again under a wider schema, copying what was written (once per widening)."""
        self._writer.close()
        with tempfile.TemporaryFile(dir=os.path.dirname(self._tmp) if self._tmp else None) as copy:
            self._file.seek(0)
            shutil.copyfileobj(self._file, copy)
            copy.seek(0)
            self._file.seek(0)
            self._file.truncate()
            self._start(schema)
            old = pq.ParquetFile(copy)
            for i in range(old.num_row_groups):
                self._writer.write_table(conform(old.read_row_group(i), schema))

    def close(self, metadata: dict[str, str] | None = None) -> None:
        """Commit: finish the output; a regular file is fsync'ed and renamed onto its path.
        `metadata`: keys known only at the end, added to a Parquet output's (what was written
        is copied once under the new schema).

        Raises:
            RuntimeError: Parquet output with no table ever written.
        """
        if self._done:
            return
        try:
            if metadata and self.format == "parquet" and self._writer is not None:
                self._rewrite(with_metadata(self._schema, metadata))
            self._commit()
        except BaseException:
            self.abort()
            raise
        self._done = True

    def _commit(self) -> None:
        if self.format == "parquet":
            if self._writer is None:
                raise RuntimeError("Sink closed before any table was written")
            self._writer.close()
        if self._text is not None:
            self._text.close()
        if self._object:
            store, key = locate(self.target.path)
            self._file.flush()
            self._file.seek(0)
            store.upload(key, self._file, locate(temp_path(self.target.path))[1])
            self.committed = True
            self._file.close()
            return
        if self._tmp is None:
            with _closed_pipe(self):
                if self.format == "parquet":  # the spool, copied into the special file
                    self._file.seek(0)
                    shutil.copyfileobj(self._file, self._dest)
                    self._file.close()
                self._dest.flush()
            if self._dest is not sys.stdout.buffer:
                self._dest.close()
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        if os.path.exists(self.target.path):  # a replaced file keeps its permissions and group
            _keep_group(self.target.path, self._file.fileno())  # first: a chown may clear set-id bits
            shutil.copymode(self.target.path, self._tmp)
        self._file.close()
        os.replace(self._tmp, self.target.path)
        self.committed = True
        fsync_dir(os.path.dirname(self._tmp))

    def abort(self) -> None:
        """Discard the output: close and remove the temporary file. Idempotent."""
        if self._done:
            return
        self._done = True
        closers = {id(c): c for c in (self._writer, self._text, self._file, self._dest) if c is not None}
        if self.target.kind == "stdout":
            closers.pop(id(self._dest))
        for closer in closers.values():
            try:
                closer.close()
            except Exception:  # noqa: BLE001 - already failing; the file is about to go anyway
                pass
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except FileNotFoundError:
                pass


def _keep_group(path: str, fd: int) -> None:
    """Give the new file the group of the file it replaces (a file `chgrp`ed to a group that reads
    it, in a folder that sets no group), where this user may: its mode was copied, and 0640 under
    another group would shut the first one out. Elsewhere it keeps the group it was made with."""
    gid = os.stat(path).st_gid
    if os.fstat(fd).st_gid != gid:
        try:
            os.fchown(fd, -1, gid)
        except OSError:  # not a member of that group
            pass


FileSink = Sink  # the `io.sinks.Sink` that writes a file, an object or a stream straight through


def _open_special(target: Target) -> IO[bytes]:
    """A device or FIFO opened for writing as it is (a FIFO waits here for its reader)."""
    try:
        return open(target.path, "wb")
    except OSError as e:
        raise UsageError(f"cannot write output {target.out}: {e.strerror or e}") from e


@contextmanager
def _closed_pipe(sink: Sink) -> Iterator[None]:
    """Turn a vanished reader (EPIPE) into `OutputClosed`, and any other failure to write a
    stream (a full device: /dev/full) into an error that names the output."""
    try:
        yield
    except OSError as e:
        if e.errno == errno.EPIPE:
            raise OutputClosed(f"{sink.out}: the reader closed the output") from e
        where = "to standard output" if sink.target.kind == "stdout" else f"output {sink.out}"
        raise ScorecliError(f"cannot write {where}: {e.strerror or e}") from e
