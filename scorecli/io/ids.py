"""The id column: copied unchanged (docs/input-output.md: Input), with one type whatever the windows.

The rule, decided in input order and never by where windows happen to start:
- Parquet inputs: the id column has the type of the files' own schema (all Parquet inputs
  must agree); values are copied as they are.
- JSON inputs: an id is a string, an integer (64-bit signed), a number with a fraction or
  exponent, a boolean, or null. The first non-null id fixes the kind (string, int64,
  float64, bool); every later id must be of the same kind, or the row is bad (named by its
  line, like any bad row). An id is never converted: `1` never becomes `1.0`.
  Objects, arrays, lone surrogates and integers beyond 64 bits are bad rows too.
- JSON rows mixed with Parquet inputs: each JSON id must fit the Parquet type as it is.
JSON lines output writes ids back as the same JSON values. Knows nothing about models.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from scorecli.errors import InputError, UsageError
from scorecli.io.readers import RawRow, schema_of

INT64 = (-(2**63), 2**63)
_SURROGATE = re.compile("[\ud800-\udfff]")
# (Python class, Arrow type, one id of the kind, ids of the kind); bool before int (a subclass)
_KINDS = (
    (bool, pa.bool_(), "a boolean", "booleans"),
    (int, pa.int64(), "an integer", "integers"),
    (float, pa.float64(), "a number with a fraction or exponent", "numbers with a fraction or exponent"),
    (str, pa.string(), "a string", "strings"),
)
_PLURAL = {str(t): plural for _, t, _, plural in _KINDS}


def schema_id_type(paths: list[str], field: str) -> pa.DataType | None:
    """The id column's type in the schemas of the inputs whose format fixes one (Parquet); None
    when none has the field. A column of type null (what pandas writes for ids that are all None)
    fixes no type: its nulls fit any other input's.

    Raises:
        UsageError: two inputs give the id column different types.
        InputError: an input's schema cannot be read.
    """
    found: tuple[str, pa.DataType] | None = None
    for path in paths:
        schema = schema_of(path)
        if schema is None or field not in schema.names or pa.types.is_null(schema.field(field).type):
            continue
        t = schema.field(field).type
        if found is not None and not found[1].equals(t):
            raise UsageError(
                f"field '{field}' has type {found[1]} in {found[0]} but {t} in {path}: give the inputs one id type"
            )
        found = found or (path, t)
    return None if found is None else found[1]


class IdCheck:
    """Checks ids in input order; a bad id turns its row into a bad row (`RawRow.error`).

    Args:
        field: the id field's name.
        schema_type: the Parquet inputs' id type (`schema_id_type`), or None.
    """

    def __init__(self, field: str, schema_type: pa.DataType | None = None):
        self.field = field
        self.type = schema_type
        self.from_schema = schema_type is not None
        self.first: str | None = None  # where the first JSON id fixed `type`
        self._earlier: Iterable[RawRow] | None = None  # a resumed job's kept rows, read again on demand

    def __call__(self, rows: Iterable[RawRow]) -> Iterator[RawRow]:
        for raw in rows:
            if not raw.typed and raw.data is not None:  # a bad row's id too (a bad group keeps its first record's)
                error = self.check(raw.data.get(self.field), raw.where)
                if error:
                    raw = RawRow(None, raw.where, raw.error or f"field '{self.field}': {error}")
            yield raw

    def fixed(self, t: pa.DataType, where: str | None) -> None:
        """The job's first id, at `where`, fixed the kind `t` (a Ray worker checks a block of a
        later part of the input as if it had read the rows before it)."""
        if self.type is None:
            self.type, self.first = t, where

    def seen(self, t: pa.DataType | None, earlier: Iterable[RawRow]) -> None:
        """Ids of type `t` came before: the rows a resumed run's earlier runs kept, `earlier`
        (read again only if a message must say where the first of them is, as the
        uninterrupted run's message does)."""
        if self.type is None and t is not None:
            self.type, self.first = t, None
            self._earlier = earlier

    def _first_where(self) -> str | None:
        if self.first is None and self._earlier is not None:
            again = IdCheck(self.field)
            for _ in again(self._earlier):
                if again.first is not None:
                    break
            self.first, self._earlier = again.first, None
        return self.first

    def check(self, value: Any, where: str) -> str | None:
        """Why `value` cannot be this run's id (None if it can); fixes the kind at the first id."""
        if value is None:
            return None
        kind = next(((t, one) for cls, t, one, _ in _KINDS if isinstance(value, cls)), None)
        if kind is None:
            what = (
                "an object"
                if isinstance(value, dict)
                else "an array"
                if isinstance(value, list)
                else type(value).__name__
            )
            return f"expected a string, number or boolean, got {what}"
        if isinstance(value, str) and _SURROGATE.search(value):
            return f"{_show(value)} holds a lone surrogate (not valid Unicode)"
        if kind[0] == pa.int64() and not INT64[0] <= value < INT64[1]:
            return f"{_show(value)} does not fit a 64-bit integer (write it as a string)"
        if isinstance(value, float) and not math.isfinite(value):  # JSON's 1e400: ids that all read as inf
            return f"{_show(value)} is not a finite number (write it as a string)"
        if self.type is None:
            self.type, self.first = kind[0], where
            return None
        if self.from_schema:
            return (
                None
                if _fits(value, self.type)
                else f"{_show(value)} does not fit the Parquet inputs' id type {self.type}"
            )
        if not kind[0].equals(self.type):
            return (
                f"{_show(value)} is {kind[1]}, but the ids before it are {_PLURAL[str(self.type)]} "
                f"(first at {self._first_where()}); give every row the same kind of id"
            )
        return None


def _fits(value: Any, t: pa.DataType) -> bool:
    """Whether `value` is stored in type `t` as it is (Arrow would truncate 2.5 to 2)."""
    try:
        back = pa.array([value], type=t)[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        return False
    return type(back) is type(value) and back == value


def _show(value: Any) -> str:
    text = repr(value).encode("ascii", "backslashreplace").decode("ascii")
    return text if len(text) <= 40 else text[:37] + "..."


def id_array(ids: list[Any], name: str, t: pa.DataType | None = None) -> pa.Array:
    """The id column of a window: `t` when given (Parquet), else inferred (one kind: `IdCheck`).

    Raises:
        InputError: the ids do not make one column (ids that skipped `IdCheck`).
    """
    try:
        return pa.array(ids, type=t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        kinds = sorted({type(i).__name__ for i in ids if i is not None})
        raise InputError(f"{name} field mixes types ({', '.join(kinds)}): give every row the same kind of id") from e


def with_id_column(table: pa.Table, name: str, t: pa.DataType | None) -> pa.Table:
    """`table`, the output of no rows, with the id column the inputs' schema declares (type `t`;
    None: no schema names one), first as in a scored window's output: a zero-row Parquet input
    keeps its id column, so that outputs of a job's runs union (docs/input-output.md: Output)."""
    if t is None or name in table.column_names:
        return table
    return table.add_column(0, name, id_array([], name, t)).replace_schema_metadata(table.schema.metadata)
