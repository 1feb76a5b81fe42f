"""Read input rows from JSONL, gzip JSONL, Parquet files, directories, globs and stdin.

Readers stream (never a whole file in memory) and never raise for a bad row: they yield a
`RawRow` whose `error` says what is wrong and whose `where` says where (`path:LINE` or
`path: row N`, both 1-based); the consumer decides whether to stop or skip. Only problems
with a whole input (missing, unreadable, corrupt) raise. This module knows nothing about
fields, tokenizers or models.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from scorecli.errors import InputError, UsageError
from scorecli.io.sources import GLOB_CHARS, localize, source_for
from scorecli.io.urls import is_url

STDIN = "-"
STDIN_PATHS = (STDIN, "/dev/stdin")
JSONL_SUFFIXES = (".jsonl", ".json", ".jsonl.gz")
PARQUET_SUFFIXES = (".parquet",)
SUPPORTED = "supported: .jsonl, .json, .jsonl.gz, .parquet, or - for JSONL on stdin"
_BOM = b"\xef\xbb\xbf"
_CHUNK = 1 << 20
_BATCH = 1024  # Parquet rows decoded at a time
# what `surrogateescape` decodes undecodable bytes to
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True, slots=True)
class RawRow:
    """One input record, or the reason it could not be parsed.

    Attributes:
        data: the parsed record; None when `error` is set.
        where: `path:LINE` (JSONL), `<stdin>:LINE`, or `path: row N` (Parquet), 1-based.
        error: what is wrong with the record, or None.
        typed: True for Parquet rows, whose values have the types of the file's schema.
    """

    data: dict | None
    where: str
    error: str | None = None
    typed: bool = False  # values typed by the file's schema (Parquet), not parsed JSON


def _is_supported(path: str) -> bool:
    return path.lower().endswith(JSONL_SUFFIXES + PARQUET_SUFFIXES)


def is_parquet(path: str) -> bool:
    """Whether `path` is read as Parquet (by its suffix)."""
    return path.lower().endswith(PARQUET_SUFFIXES)


def _is_regular(path: str) -> bool:
    return path != STDIN and source_for(path).size(path) is not None


def _is_gzip(path: str) -> bool:
    return path.lower().endswith(".gz")


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
        spec = localize(spec)
        source = source_for(spec)
        found = source.expand(spec, _is_supported, SUPPORTED)
        if found == [spec] and not source.is_folder(spec):
            regular = source.size(spec) is not None
            if regular and not _is_supported(spec):
                raise UsageError(f"unsupported input format: {spec} ({SUPPORTED})")
            if not regular and is_parquet(spec):
                raise UsageError(f"{spec}: Parquet input must be a regular file, not a pipe or device")
        out.extend(found)
    return out


def input_folders(specs: list[str]) -> list[str]:
    """The input specs that are folders (read for their files): no output may lie inside one."""
    specs = [localize(spec) for spec in specs if spec not in STDIN_PATHS]
    return [spec for spec in specs if not GLOB_CHARS & set(spec) and source_for(spec).is_folder(spec)]


def _parse_line(line: bytes, where: str) -> RawRow:
    try:
        text = line.rstrip().decode("utf-8")
    except UnicodeDecodeError as e:
        return RawRow(None, where, _utf8_error(line, e))
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


def _utf8_error(line: bytes, e: UnicodeDecodeError) -> str:
    """Name the field holding the undecodable bytes when the rest of the line is JSON."""
    msg = f"invalid UTF-8 (byte offset {e.start})"
    try:
        data = json.loads(line.rstrip().decode("utf-8", "surrogateescape"))
    except (json.JSONDecodeError, RecursionError):
        return msg
    if isinstance(data, dict):
        for name, value in data.items():
            at = _escaped_at(value)
            if at is not None and not _ESCAPED_BYTE.search(name):
                return f"field '{name}'{at}: {msg}"
    return msg


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
    for lineno, line in enumerate(stream, start=start):
        if lineno == 1 and line.startswith(_BOM):
            line = line[len(_BOM) :]
        if not line.strip():
            continue
        if first and line.lstrip().startswith(b"["):
            raise InputError(
                f"{label}:{lineno}: a JSON array; expected JSON lines, one object per line (convert with: jq -c '.[]')"
            )
        first = False
        if skip:
            skip -= 1
            continue
        yield _parse_line(line, f"{label}:{lineno}")


def _iter_jsonl(path: str, skip: int = 0) -> Iterator[RawRow]:
    stream = _open(path)
    with stream:
        try:
            yield from _iter_lines(stream, path, skip)
        except (OSError, EOFError, zlib.error) as e:
            # gzip.BadGzipFile is an OSError; a truncated gzip stream raises EOFError.
            raise InputError(f"{path}: cannot read: {e}") from e


def _open(path: str) -> BinaryIO:
    """The bytes of an input file (gzip undone), from its source."""
    try:
        raw = source_for(path).open(path)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from e
    if not _is_gzip(path):
        return raw
    unzipped = gzip.GzipFile(fileobj=raw, mode="rb")
    unzipped.myfileobj = raw  # closed with it, as gzip.open(path) closes its own file
    return unzipped


def parquet_file(path: str) -> pq.ParquetFile:
    """A Parquet input opened for reading its footer and row groups (ranged reads in a store)."""
    try:
        return pq.ParquetFile(source_for(path).open(path) if is_url(path) else path)
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"{path}: cannot read Parquet: {_printable(e)}") from e


def _iter_parquet(path: str, skip: int = 0) -> Iterator[RawRow]:
    """Rows of a Parquet file; whole row groups within the first `skip` rows are not read."""
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
        batches = pf.iter_batches(batch_size=_BATCH, row_groups=groups)
        total = pf.metadata.num_rows
        while True:
            try:
                batch = next(batches, None)
            except (pa.ArrowException, OSError) as e:
                rows = f"rows {row + 1}-{min(row + _BATCH, total)}"
                raise InputError(f"{path}: {rows}: cannot read Parquet: {_printable(e)}") from e
            if batch is None:
                return
            if skip:
                cut = min(skip, batch.num_rows)
                batch, skip, row = batch.slice(cut), skip - cut, row + cut
            for record in batch.to_pylist():
                row += 1
                yield RawRow(record, f"{path}: row {row}", typed=True)


def _printable(e: BaseException) -> str:
    """An exception's text on one line, control bytes escaped (a corrupt page's bytes)."""
    text = " ".join(str(e).split())
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


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
        elif is_parquet(path):
            yield from _iter_parquet(path, skip)
        else:
            yield from _iter_jsonl(path, skip)
        skip = 0


# rows between two marks of `index_file` (a reader seeks to the mark before its first row)
MARK_ROWS = 4096


def index_file(path: str) -> tuple[int, list[tuple[int, int, int]]]:
    """An input file's row count and, for plain JSON lines, marks `(row, byte offset, line)` of
    every `MARK_ROWS`-th row, so that a reader of a later range seeks instead of reading from the
    start (`iter_range`; Ray workers read their own blocks this way)."""
    if is_parquet(path) or _is_gzip(path):
        return _count_file(path), []
    count, offset, marks = 0, 0, []
    with _open(path) as f:
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
    if mark is None or is_parquet(path):
        rows = _iter_parquet(path, skip) if is_parquet(path) else _iter_jsonl(path, skip)
    else:
        stream = _open(path)
        stream.seek(mark[1])
        rows = _iter_lines(stream, path, skip - mark[0], start=mark[2])
    for n, row in enumerate(rows):
        if n == count:
            break
        yield row


def _count_file(path: str) -> int:
    return _count_parquet(path) if is_parquet(path) else _count_lines(path)


def _stdin() -> BinaryIO:
    if sys.stdin is None:  # started with stdin closed (`<&-`)
        raise UsageError("cannot read - (stdin): it is closed")
    return sys.stdin.buffer


def _count_lines(path: str) -> int:
    """Non-blank lines of a (possibly gzipped) file, read in 1 MiB chunks."""
    count, carry = 0, b""
    try:
        with _open(path) as f:
            carry = f.read(len(_BOM)).removeprefix(_BOM)  # as `_iter_lines` drops it
            while chunk := f.read(_CHUNK):
                lines = (carry + chunk).split(b"\n")
                carry = lines.pop()
                count += sum(map(bool, map(bytes.strip, lines)))
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from e
    return count + bool(carry.strip())


def _count_parquet(path: str) -> int:
    with parquet_file(path) as pf:
        return pf.metadata.num_rows


# bytes of input text per token, roughly, for English text in JSON (gzip: about 3x smaller on disk)
BYTES_PER_TOKEN = 4


def estimate_tokens(specs: list[str]) -> int | None:
    """About how many tokens the inputs hold (their text bytes over `BYTES_PER_TOKEN`), from
    file sizes and Parquet metadata alone; None when an input is a stream (stdin, a FIFO)."""
    paths = resolve_inputs(specs)
    if any(not _is_regular(p) for p in paths):
        return None
    total = 0
    for p in paths:
        if is_parquet(p):
            with parquet_file(p) as pf:
                meta = pf.metadata
                total += sum(meta.row_group(k).total_byte_size for k in range(meta.num_row_groups))
        else:
            total += (source_for(p).size(p) or 0) * (3 if _is_gzip(p) else 1)
    return total // BYTES_PER_TOKEN


def count_rows(specs: list[str]) -> int | None:
    """Total number of input rows when it is cheap to know, for progress and ETA.

    Args:
        specs: input specs as accepted by `resolve_inputs`.

    Returns:
        Parquet row counts plus non-blank JSONL lines; None if any input is stdin, gzip,
        or not a regular file (a FIFO can be read only once).
    """
    paths = resolve_inputs(specs)
    if any(not _is_regular(p) or _is_gzip(p) for p in paths):
        return None
    return sum(_count_parquet(p) if is_parquet(p) else _count_lines(p) for p in paths)
