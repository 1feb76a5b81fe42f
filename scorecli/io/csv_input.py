"""CSV and TSV inputs (`.csv`, `.tsv`, `.csv.gz`, `.tsv.gz`), read with pyarrow's CSV reader.

A header line names the columns; every other record is one row (or, with `--group-by`, one
(query, item) pair of a row: `io.groups`). Cells are text, never guessed into numbers (an id
`007` stays `"007"`); a cell written as a JSON array (`["a", "b"]`, first and last characters
`[` and `]`) is marked (`core.cells.ArrayText`): a field that holds a list (`items`) reads the
array, a text field (a query `[citation needed]`) the text. A record with the wrong number of
cells and a cell that is not UTF-8 are bad rows at `path:LINE`, the record's first physical
line (quoted cells may hold newlines), as for JSON lines.
Registered in `io.readers.FORMATS`. Knows nothing about fields.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from typing import TYPE_CHECKING

from scorecli.core.cells import ArrayText
from scorecli.errors import InputError
from scorecli.io.formats import CR_ONLY, UTF16, RawRow, bare_cr, open_bytes, printable, utf16
from scorecli.io.sources import source_for

if TYPE_CHECKING:
    import pyarrow.csv as pacsv

_BLOCK = 1 << 20  # bytes parsed at a time (more where a record is longer: `_records`)
_MAX_BLOCK = 1 << 28  # a longer record is a quote left open rather than a row
_BOM = b"\xef\xbb\xbf"


class CsvInput:
    """`io.formats.InputFormat` for comma- (`.csv`) or tab-separated (`.tsv`) values, quoted as
    Excel and Python's `csv` module write them."""

    def __init__(self, delimiter: str):
        self.delimiter = delimiter
        kind = "csv" if delimiter == "," else "tsv"
        self.name = kind.upper()
        self.suffixes = (f".{kind}", f".{kind}.gz")

    needs_regular_file = False

    def rows(self, path: str, skip: int = 0) -> Iterator[RawRow]:
        for where, data, error in self._records(path):
            if skip:
                skip -= 1
                continue
            yield RawRow(data, where, error)

    def count(self, path: str) -> int:
        return sum(1 for _ in self._records(path, decode=False))

    def schema(self, path: str) -> None:
        return None  # every cell is text

    def text_bytes(self, path: str) -> int:
        return source_for(path).size(path) or 0

    def _records(self, path: str, decode: bool = True) -> Iterator[tuple[str, dict | None, str | None]]:
        """(`path:LINE`, record or None, error or None) of every non-blank record, in order.

        pyarrow parses a block at a time and stops at a record longer than a block (a cell of a
        few long documents): the file is read again from its start in blocks four times as large,
        the records given already passed over."""
        block, given = _BLOCK, 0
        while True:
            try:
                for n, record in enumerate(self._read(path, decode, block)):
                    if n >= given:
                        given += 1
                        yield record
                return
            except _LongRecord as e:
                if block >= _MAX_BLOCK:
                    raise InputError(
                        f"{path}: cannot read: a record longer than {_MAX_BLOCK:,} bytes (a quote left open?)"
                    ) from e
                block *= 4

    def _read(self, path: str, decode: bool, block: int) -> Iterator[tuple[str, dict | None, str | None]]:
        """`_records` parsed in blocks of `block` bytes (`_LongRecord`: a record is longer).

        pyarrow passes a record with the wrong number of cells to `invalid_row_handler` with its
        record number; the records it keeps come in order, so numbering them in
        turn puts the bad ones back in place, and counting the newlines inside their quoted cells
        gives each one's first line."""
        import pyarrow as pa  # pyarrow loads when a file is read: `scorecli --help` lists the formats without it

        invalid: dict[int, tuple[str, str]] = {}  # record number -> (text, error)

        def bad(row) -> str:
            got = f"expected {row.expected_columns} cells (the header's), got {row.actual_columns}"
            invalid[row.number] = (row.text, got)
            return "skip"

        stream = open_bytes(path)
        with stream:
            try:
                reader, header_line = self._open(path, stream, bad, block)
            except (pa.ArrowException, OSError, EOFError) as e:
                if isinstance(e, pa.ArrowInvalid) and str(e) == "Empty CSV file":
                    return  # a header and no records: no rows, as an empty JSON lines file or a 0-row export
                if _straddles(e):
                    raise _LongRecord from e
                raise InputError(f"{path}: cannot read: {printable(e)}") from e
            if reader is None:
                return
            record, line = 1, header_line + 1  # pyarrow numbers the records after the header from 1
            batches = iter(reader)
            while True:
                try:
                    batch = next(batches, None)
                except (pa.ArrowException, OSError, EOFError) as e:
                    if _straddles(e):
                        raise _LongRecord from e
                    raise InputError(f"{path}:{line}: cannot read: {printable(e)}") from e
                cells = [] if batch is None else batch.to_pylist()
                for values in cells:
                    while record in invalid:
                        text, error = invalid.pop(record)
                        yield f"{path}:{line}", None, error
                        record, line = record + 1, line + 1 + text.count("\n")
                    blank = not any(values.values())
                    if not blank:
                        yield f"{path}:{line}", *(_decode(values) if decode else (None, None))
                    record, line = record + 1, line + 1 + sum(v.count(b"\n") for v in values.values() if v)
                if batch is None:
                    break
            for number in sorted(invalid):  # bad records after the last good one
                text, error = invalid[number]
                yield f"{path}:{line}", None, error
                line += 1 + text.count("\n")

    def _open(self, path: str, stream, bad, block: int) -> tuple[pacsv.CSVStreamingReader | None, int]:
        """pyarrow's streaming reader over `stream` after its header line (None: no header), every
        column as bytes: nothing is guessed, and a cell that is not UTF-8 is one bad row (decoded
        here) rather than a failed block; and the header's line number. Blank lines before the
        header are passed over, as blank lines after it are (pandas' `read_csv` does the same)."""
        header, line = stream.readline().removeprefix(_BOM), 1
        while header and not header.strip():
            header, line = stream.readline(), line + 1
        try:
            names = next(csv.reader([header.decode("utf-8-sig")], delimiter=self.delimiter), [])
        except (UnicodeDecodeError, csv.Error) as e:
            if isinstance(e, csv.Error) and bare_cr(header):  # the header line is the whole file
                raise InputError(f"{path}:{line}: {CR_ONLY}") from e
            if line == 1 and utf16(header):
                raise InputError(f"{path}:{line}: {UTF16}") from e
            raise InputError(f"{path}:{line}: cannot read the header line: {printable(e)}") from e
        if not names:
            return None, line
        if twice := next((n for n in names if names.count(n) > 1), None):  # one would hide the other
            raise InputError(f"{path}:{line}: the header names the column {twice!r} twice")
        import pyarrow as pa
        import pyarrow.csv as pacsv

        reader = pacsv.open_csv(
            stream,
            read_options=pacsv.ReadOptions(column_names=names, use_threads=False, block_size=block),
            parse_options=pacsv.ParseOptions(
                delimiter=self.delimiter, newlines_in_values=True, ignore_empty_lines=False, invalid_row_handler=bad
            ),
            convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(names, pa.binary())),
        )
        return reader, line


class _LongRecord(Exception):
    """A record longer than the block pyarrow parses."""


def _straddles(e: BaseException) -> bool:
    """pyarrow's error for a record longer than its block (`straddling object straddles two block
    boundaries`)."""
    return "straddling object" in str(e)


def _decode(values: dict[str, bytes | None]) -> tuple[dict, str | None]:
    """A record's cells as text (one written as a JSON array marked `ArrayText`: only a field that
    holds a list decodes it), and the first cell's error, if any: a bad record keeps the cells that
    decode (its id among them, written with the bad row)."""
    data: dict = {}
    error = None
    for name, raw in values.items():
        try:
            text = (raw or b"").decode("utf-8")
        except UnicodeDecodeError as e:
            error = error or f"field '{name}': invalid UTF-8 (byte offset {e.start})"
            continue
        data[name] = ArrayText(text) if text.startswith("[") and text.endswith("]") else text
    return data, error
