"""Write scored Arrow tables to Parquet or JSON lines, atomically.

Output goes to a hidden temporary file beside `out` and is renamed onto it only when the
run succeeds, so a failed or interrupted run leaves nothing at `out`. Tables arrive in
windows whose inferred types may differ (an `id` column that is all-null in one window and
int in the next); the sink reconciles them into one schema or fails with `InputError`.
This module knows nothing about models or scoring.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import shutil
import sys
import tempfile
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from scorecli.errors import InputError, UsageError

STDOUT = "-"
JSONL_SUFFIXES = (".jsonl", ".json")
# Tables with still-unknown (null) column types are held back until a concrete type shows
# up; past this many bytes we stop waiting so memory stays bounded.
MAX_PENDING_BYTES = 256 << 20


def output_format(out: str) -> str:
    """Return 'jsonl' for `-` or a .jsonl/.json path, else 'parquet'."""
    if out == STDOUT or out.lower().endswith(JSONL_SUFFIXES):
        return "jsonl"
    return "parquet"


def check_output(out: str) -> None:
    """Fail early, before any work, if `out` cannot be written.

    Raises:
        UsageError: `out` is a directory, or its parent is missing or not writable.
    """
    if out == STDOUT:
        return
    parent = os.path.dirname(os.path.abspath(out))
    reason = None
    if os.path.isdir(out):
        reason = "is a directory"
    elif not os.path.isdir(parent):
        reason = f"directory {parent} does not exist"
    elif not os.access(parent, os.W_OK | os.X_OK):
        reason = f"directory {parent} is not writable"
    if reason:
        raise UsageError(f"cannot write output {out}: {reason}")


def temp_path(out: str) -> str:
    """The temporary file beside `out` that is renamed onto it at commit."""
    head, base = os.path.split(os.path.abspath(out))
    return os.path.join(head, f".{base}.{os.getpid()}.tmp")


# ---- schema reconciliation -------------------------------------------------------------


def _has_null(t: pa.DataType) -> bool:
    if pa.types.is_null(t):
        return True
    return any(_has_null(t.field(i).type) for i in range(t.num_fields))


def _same_kind(a: pa.DataType, b: pa.DataType) -> str | None:
    """The family both types belong to, if a value of one may become the other."""
    for kind, test in (
        ("number", lambda t: pa.types.is_integer(t) or pa.types.is_floating(t)),
        ("string", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
        ("binary", lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t)),
        ("list", lambda t: pa.types.is_list(t) or pa.types.is_large_list(t)),
        ("struct", pa.types.is_struct),
    ):
        if test(a) and test(b):
            return kind
    return None


def _merge_type(a: pa.DataType, b: pa.DataType, name: str) -> pa.DataType:
    """One type that holds values of both `a` and `b` without changing them."""
    if a.equals(b) or pa.types.is_null(b):
        return a
    if pa.types.is_null(a):
        return b
    kind = _same_kind(a, b)
    if kind == "number":
        both_int = pa.types.is_integer(a) and pa.types.is_integer(b)
        return pa.int64() if both_int else pa.float64()
    if kind in ("string", "binary"):
        large = pa.types.is_large_string(a) or pa.types.is_large_binary(a)
        return a if large else b  # the large variant holds both
    if kind == "list":
        value = _merge_type(a.value_type, b.value_type, name)
        return pa.large_list(value) if pa.types.is_large_list(a) else pa.list_(value)
    if kind == "struct":
        return pa.struct(_merge_fields(list(a), list(b)))
    raise InputError(f"{name} column changes type between rows: {a} vs {b}")


def _merge_fields(a: list[pa.Field], b: list[pa.Field]) -> list[pa.Field]:
    merged = {f.name: f for f in a}
    for f in b:
        old = merged.get(f.name)
        if old is not None:
            f = pa.field(f.name, _merge_type(old.type, f.type, f.name))
        merged[f.name] = f
    return list(merged.values())


def _castable(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether a (safe) cast keeps values as they are: no string <-> number parsing."""
    if src.equals(dst) or pa.types.is_null(src):
        return True
    kind = _same_kind(src, dst)
    if kind == "list":
        return _castable(src.value_type, dst.value_type)
    if kind == "struct":
        names = {f.name: f.type for f in dst}
        return all(f.name in names and _castable(f.type, names[f.name]) for f in src)
    return kind is not None


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Reorder, null-fill and cast `table` to `schema` (metadata ignored).

    Raises:
        InputError: a column has an extra name or a type that cannot hold its values.
    """
    extra = [n for n in table.column_names if n not in schema.names]
    if extra:
        raise InputError(
            f"column {extra[0]} first appears after the first window was written; "
            f"give it to every row or none (or raise --window-rows)"
        )
    columns = []
    for field in schema:
        if field.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        col = table.column(field.name)
        if not col.type.equals(field.type):
            col = _cast(col, field)
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=schema.remove_metadata())


def _cast(col: pa.ChunkedArray, field: pa.Field) -> pa.ChunkedArray:
    msg = f"{field.name} column changes type between rows: {col.type} vs {field.type}"
    if not _castable(col.type, field.type):
        raise InputError(msg)
    try:
        return col.cast(field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise InputError(f"{msg} ({e})") from e


# ---- JSON lines ------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    """JSON for the scalar types Arrow can hand back that `json` cannot write."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def to_jsonl(table: pa.Table) -> str:
    """One JSON object per row, each followed by a newline."""
    dumps = json.JSONEncoder(ensure_ascii=False, default=_json_default).encode
    return "".join(dumps(row) + "\n" for row in table.to_pylist())


# ---- the sink --------------------------------------------------------------------------


class Sink:
    """Atomic output: `with Sink(out, metadata) as sink: sink.write(table)`.

    Commits (fsync, rename onto `out`) when the block succeeds; on any exception,
    including KeyboardInterrupt, removes the temporary file and re-raises. `-` writes
    JSON lines to stdout, spooled in an anonymous temporary file and copied out only at
    commit, so a failed run prints nothing (SPEC §8: errors come before any output).
    """

    def __init__(self, out: str, metadata: dict[str, str]):
        self.out = out
        self.format = output_format(out)
        self._metadata = {k.encode(): v.encode() for k, v in metadata.items()}
        self._tmp = None if out == STDOUT else temp_path(out)
        self._file: IO[Any] | None
        self._writer: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None
        self._pending: list[pa.Table] = []
        self._done = False
        if self._tmp is None:
            self._file = tempfile.TemporaryFile("w+", encoding="utf-8", newline="\n")
        elif self.format == "parquet":
            self._file = open(self._tmp, "wb")
        else:
            self._file = open(self._tmp, "w", encoding="utf-8", newline="\n")

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
        if self.format == "jsonl":
            self._file.write(to_jsonl(table))
        elif self._writer is not None:
            self._writer.write_table(conform(table, self._schema))
        else:
            self._hold(table)

    def _hold(self, table: pa.Table) -> None:
        """Buffer tables until every column has a concrete type, then open the writer."""
        self._pending.append(table)
        schema = _merged_schema(self._pending)
        waiting = any(_has_null(f.type) for f in schema)
        if not waiting or sum(t.nbytes for t in self._pending) > MAX_PENDING_BYTES:
            self._open(schema)

    def _open(self, schema: pa.Schema) -> None:
        self._schema = schema.with_metadata(self._metadata)
        self._writer = pq.ParquetWriter(self._file, self._schema, compression="zstd")
        pending, self._pending = self._pending, []
        for t in pending:
            self._writer.write_table(conform(t, self._schema))

    def close(self) -> None:
        """Commit: finish the file, fsync it and rename it onto `out`.

        Raises:
            RuntimeError: Parquet output with no table ever written.
        """
        if self._done:
            return
        try:
            self._commit()
        except BaseException:
            self.abort()
            raise
        self._done = True

    def _commit(self) -> None:
        if self._tmp is None:  # stdout: copy the spooled lines out, then drop the spool
            self._file.seek(0)
            shutil.copyfileobj(self._file, sys.stdout)
            sys.stdout.flush()
            self._file.close()
            return
        if self.format == "parquet":
            if self._writer is None and not self._pending:
                raise RuntimeError("Sink closed before any table was written")
            if self._writer is None:
                self._open(_merged_schema(self._pending))
            self._writer.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._tmp, self.out)
        _fsync_dir(os.path.dirname(self._tmp))

    def abort(self) -> None:
        """Discard the output: close and remove the temporary file. Idempotent."""
        if self._done:
            return
        self._done = True
        self._pending = []
        for closer in (self._writer, self._file):
            try:
                if closer is not None:
                    closer.close()
            except Exception:  # already failing; the file is about to go anyway
                pass
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except FileNotFoundError:
                pass


def _merged_schema(tables: list[pa.Table]) -> pa.Schema:
    fields: list[pa.Field] = []
    for t in tables:
        fields = _merge_fields(fields, list(t.schema))
    return pa.schema(fields)


def _fsync_dir(path: str) -> None:
    """Make the rename durable; not every platform lets a directory be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
