"""What every input format shares: the `RawRow` a reader yields, the `InputFormat` protocol a
format implements (one class per format, registered once in `io.readers.FORMATS`), and opening
an input's bytes (gzip undone) from its source.

A format streams rows (never a whole file in memory) and never raises for a bad row: it yields a
`RawRow` whose `error` says what is wrong and whose `where` says where (`path:LINE` or
`path: row N`, 1-based). Only problems with a whole input (missing, unreadable, corrupt) raise.
Knows nothing about fields, tokenizers or models.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from scorecli.errors import InputError
from scorecli.io.sources import source_for

if TYPE_CHECKING:
    import pyarrow as pa

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_BARE_CR = re.compile(rb"\r(?!\n)")
# a file saved with classic Mac OS line endings: its lines are one line to a reader of LF or CR LF
CR_ONLY = (
    "lines end in a carriage return alone (classic Mac OS line endings); scorecli reads lines "
    "ending in LF or CR LF: convert the file first, e.g. tr '\\r' '\\n' < IN > OUT"
)


UTF16 = (
    'the file is UTF-16 text (it starts with a UTF-16 byte-order mark, as Excel\'s "Unicode Text" saves); '
    "scorecli reads UTF-8: convert the file first, e.g. iconv -f UTF-16 -t UTF-8 < IN > OUT"
)


GZIPPED = (
    "the input is gzip-compressed (it starts with gzip's magic bytes) but not named .gz: name the file "
    "*.jsonl.gz, or on stdin pipe it through zcat"
)
GZIP_MAGIC = b"\x1f\x8b"
PARQUET = (
    "the input is a Parquet file (it starts with Parquet's magic bytes PAR1) but is read as JSON lines: "
    "name the file *.parquet; Parquet is read from a regular file, not stdin or a pipe"
)
PARQUET_MAGIC = b"PAR1"


def utf16(line: bytes) -> bool:
    """Whether `line`, a file's first, starts with a UTF-16 byte-order mark (`UTF16`)."""
    return line.startswith((b"\xff\xfe", b"\xfe\xff"))


def bare_cr(line: bytes) -> bool:
    """Whether `line` holds a carriage return that no line feed follows (`CR_ONLY`)."""
    return _BARE_CR.search(line) is not None


@dataclass(frozen=True, slots=True)
class RawRow:
    """One input record, or the reason it could not be parsed.

    Attributes:
        data: the parsed record; None when it could not be parsed or its id is bad. A row with an
            `error` may keep it (a bad group keeps its first record's): its id is written.
        where: `path:LINE` (JSONL, CSV), `<stdin>:LINE`, or `path: row N` (Parquet), 1-based.
        error: what is wrong with the record, or None.
        typed: True for Parquet rows, whose values have the types of the file's schema.
    """

    data: dict | None
    where: str
    error: str | None = None
    typed: bool = False  # values typed by the file's schema (Parquet), not parsed JSON


def given_rows(rows: Iterable[RawRow | Mapping[str, Any]]) -> list[RawRow]:
    """The rows a library caller gives `Scorer.score_rows`: `RawRow`s as they are, records (dicts, a
    JSON line's fields) named `row N`, from a list or any iterable.

    Raises:
        TypeError: `rows` is a table or a DataFrame (`score_table` takes one), a single record or
            text, or holds something else than records.
    """
    if isinstance(rows, (str, bytes, Mapping)) or hasattr(rows, "num_rows") or hasattr(rows, "iloc"):
        hint = "" if isinstance(rows, (str, bytes, Mapping)) else " (score_table takes a table)"
        raise TypeError(f"score_rows takes a list of rows (dicts), got {type(rows).__name__}{hint}")
    out = []
    for k, row in enumerate(rows):
        if not isinstance(row, (RawRow, Mapping)):
            raise TypeError(f"score_rows takes rows as dicts, got {type(row).__name__} at row {k + 1}")
        out.append(row if isinstance(row, RawRow) else RawRow(dict(row), f"row {k + 1}"))
    return out


class InputFormat(Protocol):
    """One input format, chosen by the file name's suffix.

    Attributes:
        name: how help and messages name it (`Parquet`).
        suffixes: lower-case name endings it reads (`.csv.gz` before `.gz` matters not: the
            formats' suffixes do not overlap).
        needs_regular_file: it seeks (Parquet's footer): a pipe or device is refused.
    """

    name: str
    suffixes: tuple[str, ...]
    needs_regular_file: bool

    def rows(self, path: str, skip: int = 0) -> Iterator[RawRow]:
        """The file's rows in order, after its first `skip` rows (passed over as cheaply as it can)."""
        ...

    def count(self, path: str) -> int:
        """How many rows `rows` yields."""
        ...

    def text_bytes(self, path: str) -> int:
        """About how many bytes of text the file holds (`readers.estimate_tokens`)."""
        ...

    def schema(self, path: str) -> pa.Schema | None:
        """The column types the file fixes (Parquet's; an id column keeps its type: `io.ids`);
        None: values are parsed, their types found row by row."""
        ...


def is_gzip(path: str) -> bool:
    return path.lower().endswith(".gz")


def open_bytes(path: str) -> BinaryIO:
    """The bytes of an input file (gzip undone), from its source."""
    try:
        raw = source_for(path).open(path)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from e
    if not is_gzip(path):
        return raw
    unzipped = gzip.GzipFile(fileobj=raw, mode="rb")
    unzipped.myfileobj = raw  # closed with it, as gzip.open(path) closes its own file
    return unzipped


def printable(e: BaseException) -> str:
    """An exception's text on one line, control bytes escaped (a corrupt page's bytes)."""
    text = " ".join(str(e).split())
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)
