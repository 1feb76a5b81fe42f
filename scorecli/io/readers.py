"""Read input rows from JSONL, gzip JSONL, Parquet files, directories, globs and stdin.

Readers stream (never a whole file in memory) and never raise for a bad row: they yield a
`RawRow` whose `error` says what is wrong and whose `where` says where (`path:LINE` or
`path: row N`, both 1-based); the consumer decides whether to stop or skip. Only problems
with a whole input (missing, unreadable, corrupt) raise. This module knows nothing about
fields, tokenizers or models.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from scorecli.errors import InputError, UsageError

STDIN = "-"
STDIN_PATHS = (STDIN, "/dev/stdin")
JSONL_SUFFIXES = (".jsonl", ".json", ".jsonl.gz")
PARQUET_SUFFIXES = (".parquet",)
SUPPORTED = "supported: .jsonl, .json, .jsonl.gz, .parquet, or - for JSONL on stdin"
_GLOB_CHARS = frozenset("*?[")
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
    return path != STDIN and os.path.isfile(path)


def _is_gzip(path: str) -> bool:
    return path.lower().endswith(".gz")


def _expand_dir(path: str) -> list[str]:
    names = sorted(n for n in os.listdir(path) if not n.startswith("."))
    files = [os.path.join(path, n) for n in names]
    found = [f for f in files if os.path.isfile(f) and _is_supported(f)]
    if not found:
        raise UsageError(f"input not found: {path} (no input files in directory; {SUPPORTED})")
    return found


def _expand_glob(pattern: str) -> list[str]:
    matches = sorted(glob.glob(pattern))
    if not matches:
        raise UsageError(f"input not found: {pattern}")
    found = [m for m in matches if os.path.isfile(m) and _is_supported(m)]
    if not found:
        raise UsageError(f"input not found: {pattern} (no input files match; {SUPPORTED})")
    return found


def resolve_inputs(specs: list[str]) -> list[str]:
    """Expand input specs into the ordered list of files to read.

    Args:
        specs: paths, directories (non-recursive), glob patterns, or `-` for stdin.

    Returns:
        Paths in reading order; `-` and `/dev/stdin` become `-`. Directory and glob matches
        are sorted and keep only supported formats. A pipe (`<(zcat x.gz)`, a FIFO) without
        a known suffix is read as JSON lines.

    Raises:
        UsageError: a spec matches nothing, a file has an unsupported extension, or a
            Parquet input is not a regular file.
    """
    out: list[str] = []
    for spec in specs:
        if spec in STDIN_PATHS:
            out.append(STDIN)
        elif os.path.isdir(spec):
            out.extend(_expand_dir(spec))
        elif os.path.exists(spec):
            regular = os.path.isfile(spec)
            if regular and not _is_supported(spec):
                raise UsageError(f"unsupported input format: {spec} ({SUPPORTED})")
            if not regular and is_parquet(spec):
                raise UsageError(f"{spec}: Parquet input must be a regular file, not a pipe or device")
            out.append(spec)
        elif _GLOB_CHARS & set(spec):
            out.extend(_expand_glob(spec))
        else:
            raise UsageError(f"input not found: {spec}")
    return out


def input_folders(specs: list[str]) -> list[str]:
    """The input specs that are folders (read for their files): no output may lie inside one."""
    return [spec for spec in specs if spec not in STDIN_PATHS and os.path.isdir(spec)]


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


def _iter_lines(stream: BinaryIO, label: str, skip: int = 0) -> Iterator[RawRow]:
    """Rows of a JSON-lines stream; the first `skip` rows (non-blank lines) are passed over
    without being parsed."""
    first = True
    for lineno, line in enumerate(stream, start=1):
        if lineno == 1 and line.startswith(_BOM):
            line = line[len(_BOM):]
        if not line.strip():
            continue
        if first and line.lstrip().startswith(b"["):
            raise InputError(f"{label}:{lineno}: a JSON array; expected JSON lines, one object per line "
                             "(convert with: jq -c '.[]')")  # fmt: skip
        first = False
        if skip:
            skip -= 1
            continue
        yield _parse_line(line, f"{label}:{lineno}")


def _iter_jsonl(path: str, skip: int = 0) -> Iterator[RawRow]:
    try:
        stream = gzip.open(path, "rb") if _is_gzip(path) else open(path, "rb")
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from e
    with stream:
        try:
            yield from _iter_lines(stream, path, skip)
        except (OSError, EOFError, zlib.error) as e:
            # gzip.BadGzipFile is an OSError; a truncated gzip stream raises EOFError.
            raise InputError(f"{path}: cannot read: {e}") from e


def _iter_parquet(path: str, skip: int = 0) -> Iterator[RawRow]:
    """Rows of a Parquet file; whole row groups within the first `skip` rows are not read."""
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"{path}: cannot read Parquet: {_printable(e)}") from e
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
        with gzip.open(path, "rb") if _is_gzip(path) else open(path, "rb") as f:
            carry = f.read(len(_BOM)).removeprefix(_BOM)  # as `_iter_lines` drops it
            while chunk := f.read(_CHUNK):
                lines = (carry + chunk).split(b"\n")
                carry = lines.pop()
                count += sum(map(bool, map(bytes.strip, lines)))
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from e
    return count + bool(carry.strip())


def _count_parquet(path: str) -> int:
    try:
        return pq.read_metadata(path).num_rows
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"{path}: cannot read Parquet: {e}") from e


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
            meta = pq.read_metadata(p)
            total += sum(meta.row_group(k).total_byte_size for k in range(meta.num_row_groups))
        else:
            total += os.path.getsize(p) * (3 if _is_gzip(p) else 1)
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
