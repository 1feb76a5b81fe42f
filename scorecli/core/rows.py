"""Validate a raw row's fields into a `Row`: the query and items as text or as token ids.

`parse_row` names the row and field a problem is in (`InputError`, one line); nothing here
tokenizes (`core.encode` does) or knows about models, files or output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from scorecli.core.cells import as_list
from scorecli.core.metrics import parse_labels
from scorecli.core.templates import text_problem
from scorecli.errors import ID_FIELDS, TEXT_FIELDS, InputError


@dataclass(frozen=True, slots=True)
class Row:
    """A validated input row: text or pre-tokenized query and items."""

    query: str | list[int]
    items: list[str] | list[list[int]]
    instruction: str | None
    id: Any
    labels: np.ndarray | None = None  # [items] float64 relevance grades (`core.metrics`), when given
    names: tuple[str, str] = TEXT_FIELDS  # the fields its query and items came from (messages: `errors.field`)

    @property
    def pretokenized(self) -> bool:
        return not isinstance(self.query, str)


@dataclass(frozen=True)
class Fields:
    query: str = "query"
    items: str = "items"
    id: str = "id"
    labels: str = "labels"

    @classmethod
    def of(cls, cfg: Any) -> Fields:
        """The input field names a run's config (`--query-field`, `--items-field`, `--id-field`,
        `--labels-field`) gives: every reader of rows takes them from here, all four."""
        return cls(cfg.query_field, cfg.items_field, cfg.id_field, cfg.labels_field)


def parse_row(data: dict, where: str, fields: Fields) -> Row:
    """Check one record's fields and types; raise InputError naming `where` and the field.

    Text fields must be valid Unicode (a lone surrogate such as JSON's "\\ud800" is not) and
    token ids ints in 0 .. 2^63 - 1 (the vocabulary bound is checked by the encoder).
    """
    text_fields, id_fields = (fields.query, fields.items), ID_FIELDS

    def given(names: tuple[str, ...]) -> bool:
        return any(data.get(n) is not None for n in names)

    mix = [n for n in (*text_fields, *id_fields) if data.get(n) is not None]
    if (
        given(text_fields)
        and given(id_fields)
        and not any(all(n in mix for n in pair) for pair in (text_fields, id_fields))
    ):
        said = ", ".join(f"'{n}'" for n in mix)
        raise InputError(
            f"{where}: fields {said}: a row is text ('{fields.query}', '{fields.items}') or token ids "
            "('query_ids', 'item_ids'), not a mix of both"
        )
    if given(text_fields) or (not given(id_fields) and any(n in data for n in text_fields)):
        query = _get(data, fields.query, where, "--query-field")
        items = as_list(_get(data, fields.items, where, "--items-field"), where, fields.items)
        if not isinstance(query, str):
            raise InputError(f"{where}: field '{fields.query}': expected a string, got {_type(query)}")
        _check_text(query, where, f"'{fields.query}'")
        _check_list(items, where, fields.items, _text_error)
    elif given(id_fields) or any(n in data for n in id_fields):
        query = as_list(_get(data, "query_ids", where), where, "query_ids")
        items = as_list(_get(data, "item_ids", where), where, "item_ids")
        if isinstance(items, list) and items and isinstance(items[0], str):  # grouped CSV records: a cell each
            items = [as_list(x, where, "item_ids", k) for k, x in enumerate(items)]
        _check_list(query, where, "query_ids", _token_error)
        _check_list(items, where, "item_ids", _ids_error)
    else:
        raise InputError(f"{where}: missing field '{fields.query}' (or 'query_ids'){_has(data, '--query-field')}")
    instruction = data.get("instruction")
    if instruction is not None:
        if not isinstance(instruction, str):
            raise InputError(f"{where}: field 'instruction': expected a string, got {_type(instruction)}")
        _check_text(instruction, where, "'instruction'")
    labels = data.get(fields.labels)
    grades = None if labels is None else parse_labels(labels, len(items), where, fields.labels)
    names = text_fields if isinstance(query, str) else id_fields
    return Row(query, items, instruction, data.get(fields.id), grades, names)


def _get(data: dict, name: str, where: str, flag: str | None = None) -> Any:
    if name not in data:
        raise InputError(f"{where}: missing field '{name}'{_has(data, flag)}")
    if data[name] is None:
        raise InputError(f"{where}: field '{name}' is null")
    return data[name]


def _has(data: dict, flag: str | None) -> str:
    """What a row without the field it needs has instead, and the flag that names another field."""
    names = ", ".join(f"'{name}'" for name in list(data)[:5]) + (", ..." if len(data) > 5 else "")
    has = f"the row's fields: {names}" if data else "the row has no fields"
    return f" ({has}; {flag} names another field)" if flag else f" ({has})"


def _check_list(value: Any, where: str, name: str, error_of) -> None:
    """`value` must be a list whose elements pass `error_of` (None: fine, else what is wrong)."""
    if not isinstance(value, list):
        raise InputError(f"{where}: field '{name}': expected a list, got {_type(value)}")
    for k, x in enumerate(value):
        problem = error_of(x)
        if problem is not None:
            raise InputError(f"{where}: field '{name}'[{k}]{problem}")


MAX_TOKEN_ID = 2**63 - 1  # int64, what token ids are stored as


def _check_text(value: str, where: str, field: str) -> None:
    problem = text_problem(value)
    if problem is not None:
        raise InputError(f"{where}: field {field}: {problem}")


def _text_error(x: Any) -> str | None:
    if not isinstance(x, str):
        return f": expected a string, got {_type(x)}"
    problem = text_problem(x)
    return None if problem is None else f": {problem}"


def _token_error(x: Any) -> str | None:
    """None for a valid token id, else what is wrong with `x` (starting with ': ')."""
    if type(x) is int and 0 <= x <= MAX_TOKEN_ID:  # not bool: True is no token id
        return None
    if type(x) is not int:
        return f": expected a token id (an int >= 0), got {_type(x)}"
    if x < 0:
        return f": token id {x} is negative"
    return f": token id {x} is outside the vocabulary"


def _ids_error(x: Any) -> str | None:
    if not isinstance(x, list):
        return f": expected a list of token ids, got {_type(x)}"
    if all(type(t) is int and 0 <= t <= MAX_TOKEN_ID for t in x):  # the fast path
        return None
    j, problem = next((j, p) for j, t in enumerate(x) if (p := _token_error(t)) is not None)
    return f"[{j}]{problem}"


def _type(x: Any) -> str:
    return "null" if x is None else type(x).__name__
