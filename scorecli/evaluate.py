"""`scorecli eval SCORES [--labels INPUT]`: the ranking metrics of an output scorecli wrote
(docs/inputs-and-metrics.md), from the relevance labels it kept, or from the input's labels, row by
row (an output holds one row per input row, in input order; ids, where both have them, must
agree). The metrics are `core.metrics`'; knows nothing about models.
"""

from __future__ import annotations

import json
import math
from itertools import zip_longest

import numpy as np

from scorecli.core.cells import as_list
from scorecli.core.metrics import DEFAULT_K, Ranking, parse_labels
from scorecli.errors import InputError, UsageError
from scorecli.io.formats import RawRow
from scorecli.io.groups import Grouping, grouped_rows
from scorecli.io.json_values import json_default
from scorecli.io.readers import iter_rows, resolve_inputs, schema_of


def evaluate(
    scores: list[str],
    labels: list[str] | None,
    labels_field: str,
    id_field: str,
    grouping: Grouping | None,
    k: int | None,
    items_field: str = "items",
) -> Ranking:
    """The metrics of the `scores` output's rows against `labels` (input specs; None: the labels
    column the output kept).

    Raises:
        UsageError: no labelled row, or outputs and inputs that do not hold the same rows.
        InputError: a bad row of either (one line naming it).
    """
    ranking = Ranking(k or DEFAULT_K)
    outputs = iter_rows(resolve_inputs(scores))
    if labels is None:
        for out in outputs:
            _check(out)
            if out.data is not None and out.data.get(labels_field) is not None:
                _add(ranking, out, out.data[labels_field], out.where, labels_field)
    else:
        label_paths, score_paths = resolve_inputs(labels), resolve_inputs(scores)
        given = grouped_rows(label_paths, grouping)
        nanos = (_nanos_type(score_paths, id_field), _nanos_type(label_paths, id_field))
        for n, (out, row) in enumerate(zip_longest(outputs, given), start=1):
            if out is None or row is None:
                longer, shorter = ("the scores", "the labels' input") if row is None else ("--labels", "the scores")
                raise UsageError(
                    f"{longer} hold more rows (from row {n}) than {shorter}: give the output scored from that input"
                )
            _check(out)
            if _skipped(out):  # its input row, held in place, may be the malformed line it was
                continue
            _check(row)
            _same_id(out, row, id_field, nanos)
            _same_items(out, row, items_field)
            if row.data.get(labels_field) is not None:
                _add(ranking, out, row.data[labels_field], row.where, labels_field)
    if not ranking.rows:
        where = "SCORES" if labels is None else "--labels"
        raise UsageError(f"no row of {where} has relevance labels in field '{labels_field}' (and scored items)")
    return ranking


_ROW_FOR_ROW = "SCORES must be the output of the --labels input, row for row"


def _check(raw: RawRow) -> None:
    if raw.error is not None:
        raise InputError(f"{raw.where}: {raw.error}")


def _skipped(out: RawRow) -> bool:
    """Whether an output row is a bad row a run wrote with null scores and its `error`
    (--skip-bad-rows): it does not count, whatever its input row holds."""
    return out.data is not None and out.data.get("error") is not None


def _nanos_type(paths: list[str], id_field: str):
    """The id column's type where a Parquet input holds it in nanoseconds (a timestamp, time or
    duration, whose values that are not whole microseconds are read as their integers:
    `io.nanos`), else None."""
    for path in paths:
        schema = schema_of(path)  # None for a format that fixes no types (JSON lines): no pyarrow
        if schema is not None and id_field in schema.names:
            from scorecli.io.nanos import of_nanos  # pyarrow, loaded by schema_of already

            if of_nanos(schema.field(id_field).type):
                return schema.field(id_field).type
    return None


def _id_of(value, nanos):
    """An id as its value: integer nanoseconds (`nanos`: their type) as the JSON lines output of
    the same column writes them (ISO text with nine digits), so that a Parquet file's id and a
    JSON lines file's of the same row are one."""
    if nanos is None or not isinstance(value, int) or isinstance(value, bool):
        return value
    from scorecli.io.nanos import nanos_json  # pyarrow, loaded by schema_of already

    return nanos_json(value, nanos)


def _same_id(out: RawRow, row: RawRow, id_field: str, nanos: tuple = (None, None)) -> None:
    """The output row's id and its input row's are one (`nanos`: each side's id type, where it is
    of nanoseconds)."""
    assert out.data is not None and row.data is not None
    if id_field not in out.data or id_field not in row.data:
        return
    ours, theirs = _id_of(out.data[id_field], nanos[0]), _id_of(row.data[id_field], nanos[1])
    if not _same_value(ours, theirs):
        raise UsageError(f"{out.where}: id {ours!r:.40} but {row.where}: id {theirs!r:.40}; " + _ROW_FOR_ROW)


def _same_value(a, b) -> bool:
    """Whether two ids are one: equal as text, or as JSON lines output writes them (a SCORES `.jsonl`
    holds a Parquet input's timestamp id as its ISO text, bytes as text, NaN as null)."""
    return str(a) == str(b) or _as_written(a) == _as_written(b)


def _as_written(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        value = None
    return json.dumps(value, default=json_default, ensure_ascii=False, sort_keys=True)


def _same_items(out: RawRow, row: RawRow, items_field: str) -> None:
    """The input row holds as many items as the output row scored: labels read against another
    count of items (an input edited since scoring) would mean other items, or grades for indices."""
    assert out.data is not None and row.data is not None
    given = (as_list(row.data.get(n), row.where, n) for n in (items_field, "item_ids"))  # a CSV cell: its array
    items = next((value for value in given if isinstance(value, list)), None)
    scores = _scores(out)
    if items is not None and isinstance(scores, list) and len(items) != len(scores):
        raise UsageError(f"{row.where}: {len(items)} items but {out.where}: {len(scores)} scores; " + _ROW_FOR_ROW)


def _add(ranking: Ranking, out: RawRow, labels, where: str, labels_field: str) -> None:
    """One output row's scores against `labels` (bad rows, with null scores, do not count)."""
    assert out.data is not None
    scores = _scores(out)
    if scores is None:
        if "score" not in out.data:
            raise UsageError(f"{out.where}: no 'score' column: SCORES must be an output of scorecli score")
        return
    grades = parse_labels(labels, len(scores), where, labels_field)
    values = np.array([np.nan if s is None else s for s in scores], dtype=np.float64)
    ranking.add(values, grades)


def _scores(out: RawRow) -> list | None:
    """The output row's `score` list (a CSV cell: the JSON array it holds), or None (a bad row's).

    Raises:
        InputError: a `score` that is not a list of numbers (one line naming the row).
    """
    assert out.data is not None
    scores = as_list(out.data.get("score"), out.where, "score")
    if scores is None:
        return None
    if not isinstance(scores, list) or not all(
        s is None or (isinstance(s, (int, float)) and not isinstance(s, bool)) for s in scores
    ):
        raise InputError(f"{out.where}: field 'score': expected a list of numbers (one per item), got {scores!r:.40}")
    return scores
