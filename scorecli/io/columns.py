"""A window's output table: per-item results as Arrow list columns, one row per input row.

The columns are the output schema of docs/input-output.md ("Output"): the id (when the input has one),
`scores` (every label), `score` (the positive label), `top_k`, `num_chunks`,
`pooled_hidden_states`, `num_tokens` and `error`, as the run asked for them; a row that failed
validation is null in every list column. Knows nothing about models, batches or files: the
window's results arrive as arrays in input order (`Scorer.run`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from scorecli.core.metrics import Ranking
from scorecli.core.ranking import top_k
from scorecli.io.ids import id_array

LABELS = pa.list_(pa.float64())  # each item's relevance grade (`core.metrics`)


@dataclass(frozen=True, slots=True)
class Columns:
    """Which columns a run writes beyond scores and token counts."""

    id_field: str
    labels_field: str  # relevance labels, kept as each item's grade when the input has them
    positive_index: int  # the label `score` holds
    top_k: int | None
    chunked: bool  # `num_chunks`
    hidden_dtype: str | None  # `pooled_hidden_states` as "float16" or "float32"; None: not written
    errors: bool  # `error` (--skip-bad-rows)


def window_table(window: Any, scores: np.ndarray, hidden: np.ndarray, cols: Columns, metadata: dict) -> pa.Table:
    """The output table of a window (`scorer.Prepared`: errors, item offsets, ids, chunks, token
    counts per row) from its items' `scores` [items, labels] and `hidden` [items, width]."""
    null = pa.array([e is not None for e in window.errors], type=pa.bool_())
    offsets = pa.array(window.item_offsets.astype(np.int32))
    columns: dict[str, pa.Array] = {}
    if window.has_id:
        columns[cols.id_field] = id_array(window.ids, cols.id_field, window.id_type)
    columns["scores"] = pa.ListArray.from_arrays(offsets, rows_of(scores, scores.shape[1]), mask=null)
    score = scores[:, cols.positive_index]
    columns["score"] = pa.ListArray.from_arrays(offsets, pa.array(score, type=pa.float32()), mask=null)
    if cols.top_k is not None:
        top_offsets, top = top_k(score, window.item_offsets, cols.top_k)
        columns["top_k"] = pa.ListArray.from_arrays(pa.array(top_offsets), pa.array(top), mask=null)
    if cols.chunked:
        chunks = np.ones(window.num_items, dtype=np.int32) if window.chunks is None else window.chunks
        columns["num_chunks"] = pa.ListArray.from_arrays(offsets, pa.array(chunks.astype(np.int32)), mask=null)
    if cols.hidden_dtype is not None:
        values = hidden.astype(np.float16 if cols.hidden_dtype == "float16" else np.float32)
        columns["pooled_hidden_states"] = pa.ListArray.from_arrays(offsets, rows_of(values, values.shape[1]), mask=null)
    if window.labels is not None:
        columns[cols.labels_field] = pa.array([None if g is None else g.tolist() for g in window.labels], LABELS)
    columns["num_tokens"] = pa.array(window.num_tokens, type=pa.int64())
    if cols.errors:
        columns["error"] = pa.array(window.errors, type=pa.string())
    return pa.table(columns).replace_schema_metadata(metadata)


def rows_of(values: np.ndarray, width: int) -> pa.Array:
    """[n, width] -> an Arrow list array of n lists of `width` values."""
    flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    offsets = pa.array(
        np.arange(0, values.shape[0] * width + 1, width, dtype=np.int32)
        if width
        else np.zeros(values.shape[0] + 1, dtype=np.int32)
    )
    return pa.ListArray.from_arrays(offsets, flat)


def add_ranking(ranking: Ranking, table: pa.Table, labels_field: str) -> None:
    """Count an output table's labelled rows into `ranking` (its `score` and labels columns;
    rows whose scores are null, bad rows, do not count)."""
    if labels_field not in table.column_names or "score" not in table.column_names:
        return
    for scores, grades in zip(table["score"].to_pylist(), table[labels_field].to_pylist()):
        if scores is not None and grades is not None and len(scores) == len(grades):
            values = np.array([np.nan if s is None else s for s in scores], dtype=np.float64)
            ranking.add(values, np.array(grades, dtype=np.float64))
