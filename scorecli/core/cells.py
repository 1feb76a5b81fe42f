"""A text cell written as a JSON array (a CSV cell `["a", "b"]`): the text it is, until a field
that holds a list reads it.

A CSV column holds text; a row's `items` (and `item_ids`, `query_ids`, `labels`) is one cell
holding a JSON array. The reader cannot tell one column from the other (it knows nothing about
fields), so a cell that looks like an array stays text, marked (`ArrayText`): a query
`[citation needed]` or an id `[3]` is that text, and only a list field decodes it (`as_list`),
where a malformed array is a bad row. Knows nothing about files or formats.
"""

from __future__ import annotations

import json
from typing import Any

from scorecli.errors import InputError


class ArrayText(str):
    """A text cell whose first and last characters are `[` and `]`: a `str` for every field that
    holds text, the JSON array it writes for a field that holds a list (`as_list`)."""

    __slots__ = ()


def as_list(value: Any, where: str, name: str, index: int | None = None) -> Any:
    """`value` as a list field reads it: an `ArrayText` is the JSON array it holds; any other value
    is returned as it is (the field's own check says what is wrong with it).

    Args:
        index: the value's place in the field (a grouped record's `item_ids`), for the message.

    Raises:
        InputError: an `ArrayText` that is no JSON array (`{where}: field '{name}': malformed JSON array: ...`).
    """
    if not isinstance(value, ArrayText):
        return value
    field = f"'{name}'" if index is None else f"'{name}'[{index}]"
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        at = "" if e.msg.endswith(" at") else " at"  # "Unterminated string starting at"
        raise InputError(f"{where}: field {field}: malformed JSON array: {e.msg}{at} column {e.colno}") from e
    except RecursionError as e:
        raise InputError(f"{where}: field {field}: malformed JSON array: nesting too deep") from e
