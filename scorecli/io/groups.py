"""Records of one (query, item) pair each, grouped into rows of one query and many items
(`--group-by COLUMN`; docs/inputs-and-metrics.md): consecutive records with the same value in COLUMN are one
row, its query (and id, instruction) the first record's, its items (and labels) the records' own,
in order. A database export or spreadsheet holds candidates this way.

A group is a bad row, at its first record's place, when a later record of it has another query
or instruction, or when its value appeared before in a group that ended (the records of a group
must follow each other: sort the file by COLUMN). A record without the column is a bad row of
its own. Works on any format's `RawRow`s; knows nothing about models or how rows are validated.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import BinaryIO

from scorecli.io.formats import RawRow
from scorecli.io.readers import iter_rows


@dataclass(frozen=True)
class Grouping:
    """How records become rows: `by` the column; `per_item`: the fields that hold one value per
    record (items, item_ids, labels), gathered into lists; `same`: fields every record of a
    group must agree on."""

    by: str
    per_item: tuple[str, ...]
    same: tuple[str, ...]


def grouping(by: str | None, query: str, items: str, labels: str) -> Grouping | None:
    """How `--group-by BY` groups records with these field names (None: it does not)."""
    if by is None:
        return None
    return Grouping(by, (items, "item_ids", labels), (query, "query_ids", "instruction"))


def grouped_rows(
    specs: list[str], grouping: Grouping | None, stdin: BinaryIO | None = None, skip: int = 0
) -> Iterator[RawRow]:
    """The rows of the inputs after the first `skip` (`readers.iter_rows`), records grouped by
    `grouping` when given (then the rows to skip are groups, and every record is read)."""
    if grouping is None:
        return iter_rows(specs, stdin=stdin, skip=skip)
    return islice(group_rows(iter_rows(specs, stdin=stdin), grouping), skip, None)


class _Group:
    def __init__(self, first: RawRow, key: str, per_item: tuple[str, ...], error: str | None = None):
        assert first.data is not None
        self.first, self.key, self.error = first, key, error
        self.data = dict(first.data)
        self.lists = {name: [first.data.get(name)] for name in per_item}

    def row(self) -> RawRow:
        """The group as one row; a per-item field that some record holds is a list with every
        record's value (None where a record lacks it: a bad row when labels or items need it)."""
        if self.error is not None:  # keeps the first record's fields: its id is the bad row's
            return RawRow(self.first.data, self.first.where, self.error, typed=self.first.typed)
        lists = {name: values for name, values in self.lists.items() if any(v is not None for v in values)}
        return RawRow(self.data | lists, self.first.where, typed=self.first.typed)


def group_rows(records: Iterable[RawRow], grouping: Grouping) -> Iterator[RawRow]:
    """The rows the `records` form, in order (see the module's docstring)."""
    by = grouping.by
    group: _Group | None = None
    ended: dict[str, str] = {}  # a finished group's value -> where it began
    for raw in records:
        value = None if raw.data is None else raw.data.get(by)
        if raw.error is not None or value is None or value == "":
            if group is not None:
                yield group.row()
                ended[group.key], group = group.first.where, None
            yield raw if raw.error is not None else RawRow(raw.data, raw.where, _missing(by), typed=raw.typed)
            continue
        assert raw.data is not None
        key = _key(value)
        if group is not None and key == group.key:
            _add(group, raw, grouping)
            continue
        if group is not None:
            yield group.row()
            ended[group.key] = group.first.where
        error = None
        if key in ended:
            error = (
                f"field '{by}': {_shown(value)} began a group at {ended[key]} already; the rows of one "
                f"group must follow each other (sort the input by {by})"
            )
        group = _Group(raw, key, grouping.per_item, error)
    if group is not None:
        yield group.row()


def _add(group: _Group, raw: RawRow, grouping: Grouping) -> None:
    """One more record of `group`: its per-item values, or the group's error."""
    assert raw.data is not None
    for name in grouping.same:
        if group.error is None and raw.data.get(name) != group.data.get(name):
            group.error = (
                f"field '{name}': {raw.where} has another {name} than the first row of its group "
                f"({grouping.by} {_shown(group.data[grouping.by])})"
            )
    for name, values in group.lists.items():
        values.append(raw.data.get(name))


def _key(value) -> str:
    """A group value as a key: equal JSON values (1 and "1" differ), any type."""
    return json.dumps(value, sort_keys=True, default=str)


def _shown(value) -> str:
    return json.dumps(value, default=str)[:80]


def _missing(by: str) -> str:
    return f"missing field '{by}': --group-by {by} needs it in every row"
