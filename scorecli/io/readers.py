"""Read input rows from files of every input format, directories, globs and stdin (JSON lines).

A format is one class registered once in `FORMATS` (`io.formats.InputFormat`): JSON lines here
(`JsonLines`, also stdin's), Parquet (`io.parquet_input`), CSV and TSV (`io.csv_input`); this
module picks one by the file name's suffix and reads files in order. Readers stream (never a
whole file in memory) and never raise for a bad row: they yield a `RawRow` whose `error` says
what is wrong and whose `where` says where (`path:LINE` or `path: row N`, both 1-based); the
consumer decides whether to stop or skip. Only problems with a whole input (missing,
unreadable, corrupt) raise. This module knows nothing about fields, tokenizers or models.
"""

from __future__ import annotations

import json
import re
import sys
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from scorecli.errors import InputError, UsageError
from scorecli.io.csv_input import CsvInput
from scorecli.io.formats import (
    CR_ONLY,
    GZIP_MAGIC,
    GZIPPED,
    PARQUET,
    PARQUET_MAGIC,
    UTF16,
    InputFormat,
    RawRow,
    bare_cr,
    is_gzip,
    open_bytes,
    utf16,
)
from scorecli.io.parquet_input import ParquetInput
from scorecli.io.sources import GLOB_CHARS, localize, source_for

__all__ = ["RawRow"]  # where the rest of scorecli imports it from

STDIN = "-"
STDIN_PATHS = (STDIN, "/dev/stdin")
_BOM = b"\xef\xbb\xbf"
_CHUNK = 1 << 20
# what `surrogateescape` decodes undecodable bytes to
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def resolve_inputs(specs: list[str]) -> list[str]:
    """Expand input specs into the ordered list of files to read.

    Args:
        specs: paths, directories (non-recursive), glob patterns, URLs of objects, prefixes or
            globs in a store (`io.sources`), or `-` for stdin.

    Returns:
        Paths (and URLs) in reading order; `-` and `/dev/stdin` become `-`, a `file://` URL its
        path. Directory and glob matches are sorted and keep only supported formats. A pipe
        (`<(zcat x.gz)`, a FIFO) without a known suffix is read as JSON lines.

    Raises:
        UsageError: a spec matches nothing, a file has an unsupported extension, or a
            Parquet input is not a regular file.
    """
    out: list[str] = []
    for spec in specs:
        if spec in STDIN_PATHS:
            out.append(STDIN)
            continue
        given, spec = spec, localize(spec)
        source = source_for(spec)
        try:
            found = source.expand(spec, _is_supported, SUPPORTED)
        except UsageError as e:  # a `file://` URL: the line names the URL as typed, not its path
            if given == spec:
                raise
            raise UsageError(str(e).replace(spec, given, 1)) from None
        if found == [spec] and not source.is_folder(spec):
            regular = source.size(spec) is not None
            if regular and not _is_supported(spec):
                raise UsageError(f"unsupported input format: {spec} ({SUPPORTED})")
            if not regular and _reader(spec).needs_regular_file:
                raise UsageError(f"{spec}: {_reader(spec).name} input must be a regular file, not a pipe or device")
        out.extend(found)
    return out


def input_folders(specs: list[str]) -> list[str]:
    """The input specs that name many files: folders (read for their files) and globs, local or
    in a store. No output may lie inside such a folder or match such a glob: a later run would
    read it as input."""
    specs = [localize(spec) for spec in specs if spec not in STDIN_PATHS]
    globs = [spec for spec in specs if GLOB_CHARS & set(spec)]
    return [spec for spec in specs if not GLOB_CHARS & set(spec) and source_for(spec).is_folder(spec)] + globs


def _parse_line(line: bytes, where: str) -> RawRow:
    try:
        text = line.rstrip().decode("utf-8")
    except UnicodeDecodeError as e:
        data, error = _utf8_error(line, e)
        return RawRow(data, where, error)
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        at = "" if e.msg.endswith(" at") else " at"  # "Unterminated string starting at"
        return RawRow(None, where, f"malformed JSON: {e.msg}{at} column {e.colno}")
    except ValueError as e:  # NaN, Infinity: Python extensions, not JSON
        return RawRow(None, where, f"malformed JSON: {e}")
    except RecursionError:
        return RawRow(None, where, "malformed JSON: nesting too deep")
    if not isinstance(data, dict):
        return RawRow(None, where, f"expected a JSON object, got {_json_kind(data)}")
    return RawRow(data, where)


def _no_constant(name: str):
    raise ValueError(f"{name} is not valid JSON (write null or a string)")


def _json_kind(value) -> str:
    """What a JSON value is, in JSON's words (`null`, not Python's `NoneType`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return {str: "a string", list: "an array"}.get(type(value), "a number")


def _utf8_error(line: bytes, e: UnicodeDecodeError) -> tuple[dict | None, str]:
    """(the fields that decode, the error naming the field holding the undecodable bytes) when the
    rest of the line is JSON: the bad row keeps its id, as a bad row of any other kind does."""
    msg = f"invalid UTF-8 (byte offset {e.start})"
    try:
        data = json.loads(line.rstrip().decode("utf-8", "surrogateescape"))
    except (json.JSONDecodeError, RecursionError):
        return None, msg
    if not isinstance(data, dict):
        return None, msg
    clean = {k: v for k, v in data.items() if _escaped_at(v) is None and not _ESCAPED_BYTE.search(k)}
    for name, value in data.items():
        at = _escaped_at(value)
        if at is not None and not _ESCAPED_BYTE.search(name):
            return clean, f"field '{name}'{at}: {msg}"
    return clean, msg


def _escaped_at(value) -> str | None:
    """Index suffix ('' for `value` itself, '[2]', ...) of the first string with undecodable bytes."""
    if isinstance(value, str):
        return "" if _ESCAPED_BYTE.search(value) else None
    if isinstance(value, (list, dict)):
        for key, v in value.items() if isinstance(value, dict) else enumerate(value):
            at = _escaped_at(v)
            if at is not None:
                return f"[{key!r}]{at}"
    return None


def _iter_lines(stream: BinaryIO, label: str, skip: int = 0, start: int = 1) -> Iterator[RawRow]:
    """Rows of a JSON-lines stream; the first `skip` rows (non-blank lines) are passed over
    without being parsed. `start`: the line number of the stream's first line (> 1: a stream
    that starts inside a file, `iter_range`)."""
    first = start == 1
    for lineno, line in enumerate(_lines(stream) if first else stream, start=start):
        if lineno == 1 and line.startswith(_BOM):
            line = line[len(_BOM) :]
        if not line.strip():
            continue
        if lineno == 1 and utf16(line):  # else every line is one bad row of invalid UTF-8
            raise InputError(f"{label}:{lineno}: {UTF16}")
        if lineno == 1 and line.startswith(GZIP_MAGIC):
            raise InputError(f"{label}:{lineno}: {GZIPPED}")
        if lineno == 1 and line.startswith(PARQUET_MAGIC):  # else: malformed JSON at column 1
            raise InputError(f"{label}:{lineno}: {PARQUET}")
        if first and line.lstrip().startswith(b"["):
            raise InputError(
                f"{label}:{lineno}: a JSON array; expected JSON lines, one object per line (convert with: jq -c '.[]')"
            )
        if first and line.strip() == b"{":  # pretty-printed (jq without -c): else every line a bad row
            raise InputError(
                f"{label}:{lineno}: a JSON object over several lines; expected JSON lines, one object per line "
                "(convert with: jq -c .)"
            )
        if first and bare_cr(line) and _parse_line(line, label).error is not None:
            raise InputError(f"{label}:{lineno}: {CR_ONLY}")  # else the whole file is one bad row
        first = False
        if skip:
            skip -= 1
            continue
        yield _parse_line(line, f"{label}:{lineno}")


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    """The lines of a stream read from its start; a first line longer than `_CHUNK` that starts
    as a JSON array (what `json.dump` writes: the whole file on one line) comes cut at `_CHUNK`
    bytes, for `_iter_lines` to refuse without holding the whole file in memory."""
    head = stream.readline(_CHUNK)
    if len(head) == _CHUNK and not head.endswith(b"\n") and not head.removeprefix(_BOM).lstrip().startswith(b"["):
        head += stream.readline()
    if head:
        yield head
    yield from stream


class JsonLines:
    """`io.formats.InputFormat` for JSON lines (`.jsonl`, `.json`, `.jsonl.gz`; stdin too): one
    object per line, `path:LINE` locations; a resumed run passes over lines unparsed."""

    name = "JSONL"
    suffixes = (".jsonl", ".json", ".jsonl.gz")
    needs_regular_file = False

    def rows(self, path: str, skip: int = 0) -> Iterator[RawRow]:
        stream = open_bytes(path)
        with stream:
            try:
                yield from _iter_lines(stream, path, skip)
            except (OSError, EOFError, zlib.error) as e:
                # gzip.BadGzipFile is an OSError; a truncated gzip stream raises EOFError.
                raise InputError(f"{path}: cannot read: {e}") from e

    def count(self, path: str) -> int:
        return _count_lines(path)

    def text_bytes(self, path: str) -> int:
        return (source_for(path).size(path) or 0) * (3 if is_gzip(path) else 1)

    def schema(self, path: str) -> None:
        return None  # parsed JSON: types row by row


# every input format, one entry each (docs/ARCHITECTURE.md: Add an input format or source)
FORMATS: tuple[InputFormat, ...] = (JsonLines(), ParquetInput(), CsvInput(","), CsvInput("\t"))
_JSONL = FORMATS[0]  # stdin's, and a pipe's without a known suffix
SUPPORTED = f"supported: {', '.join(x for f in FORMATS for x in f.suffixes)}, or - for {_JSONL.name} on stdin"


def format_of(path: str) -> InputFormat | None:
    """The format that reads `path`, by its name's suffix (None: no format does)."""
    name = path.lower()
    return next((f for f in FORMATS if name.endswith(f.suffixes)), None)


def _is_supported(path: str) -> bool:
    return format_of(path) is not None


def schema_of(path: str):
    """The column types the input `path` fixes, if its format fixes them (`InputFormat.schema`)."""
    found = format_of(path)
    return None if found is None else found.schema(path)


def _is_regular(path: str) -> bool:
    return path != STDIN and source_for(path).size(path) is not None


def _reader(path: str) -> InputFormat:
    """A file's format; a pipe without a known suffix is read as JSON lines."""
    return format_of(path) or _JSONL


def iter_rows(specs: list[str], stdin: BinaryIO | None = None, skip: int = 0) -> Iterator[RawRow]:
    """Yield every input record, in input order, streaming.

    Args:
        specs: input specs as accepted by `resolve_inputs`.
        stdin: binary stream read for `-`; `sys.stdin.buffer` when None.
        skip: pass over the first `skip` rows as cheaply as the format allows (whole files
            by their row count, Parquet row groups, JSON lines unparsed): a resumed run.

    Returns:
        An iterator of `RawRow`; per-row problems come back as rows with `error` set.

    Raises:
        UsageError: from `resolve_inputs`.
        InputError: an input file cannot be opened or is corrupt.
    """
    for path in resolve_inputs(specs):
        if skip and path != STDIN:
            n = _count_file(path)
            if n <= skip:
                skip -= n
                continue
        if path == STDIN:
            yield from _iter_lines(stdin if stdin is not None else _stdin(), "<stdin>", skip)
        else:
            yield from _reader(path).rows(path, skip)
        skip = 0


# rows between two marks of `index_file` (a reader seeks to the mark before its first row)
MARK_ROWS = 4096


def index_file(path: str) -> tuple[int, list[tuple[int, int, int]]]:
    """An input file's row count and, for plain JSON lines, marks `(row, byte offset, line)` of
    every `MARK_ROWS`-th row, so that a reader of a later range seeks instead of reading from the
    start (`iter_range`; Ray workers read their own blocks this way)."""
    if _reader(path) is not _JSONL or is_gzip(path):
        return _count_file(path), []
    count, offset, marks = 0, 0, []
    with open_bytes(path) as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip() and not (lineno == 1 and line.strip() == _BOM):
                if count % MARK_ROWS == 0 and lineno > 1:
                    marks.append((count, offset, lineno))
                count += 1
            offset += len(line)
    return count, marks


def iter_range(path: str, skip: int, count: int, marks: list[tuple[int, int, int]] = ()) -> Iterator[RawRow]:
    """`count` rows of one input file after its first `skip` (the last mark at or before `skip`
    saves reading what comes before it), as `iter_rows` reads them: the same rows and locations."""
    mark = max((m for m in marks if m[0] <= skip), default=None)
    if mark is None or _reader(path) is not _JSONL:
        rows = _reader(path).rows(path, skip)
    else:
        stream = open_bytes(path)
        stream.seek(mark[1])
        rows = _iter_lines(stream, path, skip - mark[0], start=mark[2])
    for n, row in enumerate(rows):
        if n == count:
            break
        yield row


def _count_file(path: str) -> int:
    return _reader(path).count(path)


def _stdin() -> BinaryIO:
    if sys.stdin is None:  # started with stdin closed (`<&-`)
        raise UsageError("cannot read - (stdin): it is closed")
    return sys.stdin.buffer


def _count_lines(path: str) -> int:
    """Non-blank lines of a (possibly gzipped) file, read in 1 MiB chunks."""
    count, carry = 0, b""
    try:
        with open_bytes(path) as f:
            carry = f.read(len(_BOM)).removeprefix(_BOM)  # as `_iter_lines` drops it
            while chunk := f.read(_CHUNK):
                lines = (carry + chunk).split(b"\n")
                carry = lines.pop()
                count += sum(map(bool, map(bytes.strip, lines)))
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from e
    return count + bool(carry.strip())


# bytes of input text per token, roughly, for English text in JSON (gzip: about 3x smaller on disk)
BYTES_PER_TOKEN = 4


def estimate_tokens(specs: list[str]) -> int | None:
    """About how many tokens the inputs hold (their text bytes over `BYTES_PER_TOKEN`), from
    file sizes and Parquet metadata alone; None when an input is a stream (stdin, a FIFO)."""
    paths = resolve_inputs(specs)
    if any(not _is_regular(p) for p in paths):
        return None
    return sum(_reader(p).text_bytes(p) for p in paths) // BYTES_PER_TOKEN


def count_rows(specs: list[str]) -> int | None:
    """Total number of input rows when it is cheap to know, for progress and ETA.

    Args:
        specs: input specs as accepted by `resolve_inputs`.

    Returns:
        The rows every file's format counts (Parquet's metadata, non-blank JSONL lines, CSV
        records); None if any input is stdin, gzip, or not a regular file (a FIFO can be read
        only once).
    """
    paths = resolve_inputs(specs)
    if any(not _is_regular(p) or is_gzip(p) for p in paths):
        return None
    return sum(_count_file(p) for p in paths)
