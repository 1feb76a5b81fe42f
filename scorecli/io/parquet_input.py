"""Parquet inputs (`.parquet`): one row per record, values typed by the file's schema.

Reads row groups in batches (ranged reads in a store); a resumed run passes over whole row groups
before its first row unread. Registered in `io.readers.FORMATS`. An Arrow table given whole becomes
rows the same way (`table_rows`). Knows nothing about fields but the id's, whose type a table fixes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from scorecli.errors import InputError
from scorecli.io.formats import RawRow, printable
from scorecli.io.sources import for_arrow, source_for
from scorecli.io.urls import is_url

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

_BATCH = 1024  # rows decoded at a time


def parquet_file(path: str) -> pq.ParquetFile:
    """A Parquet input opened for reading its footer and row groups (ranged reads in a store)."""
    import pyarrow as pa  # pyarrow loads when a file is read: `scorecli --help` lists the formats without it
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(source_for(path).open(path) if is_url(path) else for_arrow(path))
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"{path}: cannot read Parquet: {printable(e)}") from e
    _names_once(pf.schema_arrow, f"{path}: the file")
    return pf


def _names_once(schema: pa.Schema, what: str) -> None:
    """Refuse a schema that names a column twice (pyarrow writes one): a row holds one value per
    name, so one column would hide the other, as a CSV header's would."""
    names = schema.names
    if twice := next((n for n in names if names.count(n) > 1), None):
        raise InputError(f"{what} names the column {twice!r} twice; give each column its own name")


def arrow_records(batch: pa.RecordBatch | pa.Table) -> list[tuple[dict | None, str | None]]:
    """The rows of `batch` as Python values, each `(record, None)`, or `(the fields that decode,
    error)` for a row whose text is not UTF-8: pyarrow checks it when it writes a string column, not when it reads
    one, and another writer may have stored any bytes (`field 'items'[1]: invalid UTF-8 ...`).
    Nanoseconds that are not whole microseconds come as integers (`io.nanos`)."""
    from scorecli.io.nanos import exact_nanos  # pyarrow loads when a file is read

    batch = exact_nanos(batch)
    try:
        return [(record, None) for record in batch.to_pylist()]
    except UnicodeDecodeError:
        pass  # find the rows and fields, as a JSON line's undecodable bytes are named
    out: list[tuple[dict | None, str | None]] = []
    for k in range(batch.num_rows):
        record: dict = {}
        error = None
        for name, column in zip(batch.schema.names, batch.columns):
            try:
                record[name] = column[k].as_py()
            except UnicodeDecodeError as e:  # the other fields kept: the bad row's id is written
                error = error or f"field '{name}'{_undecodable_at(column[k])}: invalid UTF-8 (byte offset {e.start})"
        out.append((record, error))
    return out


def table_rows(
    table: pa.Table, id_field: str, numbers: Iterable[int] | None = None
) -> tuple[list[RawRow], pa.DataType | None]:
    """(the rows of an Arrow table of input rows, given whole (the library's `Scorer.score_table`, a
    Ray block), as `RawRow`s named `row N`, N one more than each row's entry in `numbers`, else
    its place; the type of its id column `id_field`, None where it has none)."""
    _names_once(table.schema, "the table")
    numbers = range(table.num_rows) if numbers is None else numbers
    rows = [RawRow(data, f"row {k + 1}", error, typed=True) for k, (data, error) in zip(numbers, arrow_records(table))]
    id_type = table.schema.field(id_field).type if id_field in table.column_names else None
    return rows, id_type


def _undecodable_at(value: pa.Scalar) -> str:
    """The index (`[2]`, '' for the value itself) of a list's first element that is not UTF-8."""
    values = getattr(value, "values", None)
    if values is None or callable(values):  # not a list (a struct's `values` is a method)
        return ""
    for k, element in enumerate(values):
        try:
            element.as_py()
        except UnicodeDecodeError:
            return f"[{k}]{_undecodable_at(element)}"
    return ""


class ParquetInput:
    """`io.formats.InputFormat` for Parquet files (`path: row N` locations)."""

    name = "Parquet"
    suffixes = (".parquet",)
    needs_regular_file = True  # the footer comes first

    def rows(self, path: str, skip: int = 0) -> Iterator[RawRow]:
        """Rows of a Parquet file; whole row groups within the first `skip` rows are not read."""
        import pyarrow as pa

        pf = parquet_file(path)
        with pf:
            groups, row = [], 0
            for g in range(pf.metadata.num_row_groups):
                n = pf.metadata.row_group(g).num_rows
                if not groups and row + n <= skip:
                    row += n
                else:
                    groups.append(g)
            skip -= row
            if not groups:  # no rows past `skip` (pyarrow 18 reads row group -1 for an empty list)
                return
            batches = pf.iter_batches(batch_size=_BATCH, row_groups=groups)
            total = pf.metadata.num_rows
            while True:
                try:
                    batch = next(batches, None)
                except (pa.ArrowException, OSError) as e:
                    rows = f"rows {row + 1}-{min(row + _BATCH, total)}"
                    raise InputError(f"{path}: {rows}: cannot read Parquet: {printable(e)}") from e
                if batch is None:
                    return
                if skip:
                    cut = min(skip, batch.num_rows)
                    batch, skip, row = batch.slice(cut), skip - cut, row + cut
                for record, error in arrow_records(batch):
                    row += 1
                    yield RawRow(record, f"{path}: row {row}", error, typed=True)

    def count(self, path: str) -> int:
        with parquet_file(path) as pf:
            return pf.metadata.num_rows

    def text_bytes(self, path: str) -> int:
        with parquet_file(path) as pf:
            meta = pf.metadata
            return sum(meta.row_group(k).total_byte_size for k in range(meta.num_row_groups))

    def schema(self, path: str) -> pa.Schema:
        with parquet_file(path) as pf:
            return pf.schema_arrow
