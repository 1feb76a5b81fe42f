"""Scorer-level behaviour: windows, streaming order, OOM halving, library API."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from scorecli import Scorer
from scorecli.engine.local import score_stream
from scorecli.io.readers import RawRow
from tests.test_invariance import make_rows


def test_stream_windows_keep_input_order(qwen3_seq_cls):
    rows = make_rows(23, seed=2)
    raws = [RawRow(r, f"t:{k + 1}") for k, r in enumerate(rows)]
    whole = Scorer(qwen3_seq_cls).score_rows(raws)
    scorer = Scorer(qwen3_seq_cls, window_rows=4)
    tables = [t for _, t in score_stream(scorer, iter(raws))]
    assert len(tables) == 6
    streamed = pa.concat_tables(tables)
    assert streamed["id"].to_pylist() == [r["id"] for r in rows]
    for a, b in zip(streamed["scores"].to_pylist(), whole["scores"].to_pylist()):
        np.testing.assert_allclose(np.array(a).reshape(-1), np.array(b).reshape(-1), atol=1e-5)


def test_score_table_library_api(qwen3_causal_lm):
    table = pa.table({"id": [7, 8], "query": ["a fox", "a dog"], "items": [["runs", "sleeps"], []]})
    out = Scorer(qwen3_causal_lm, label_tokens=("yes", "no"), activation="softmax").score_table(table)
    assert out["id"].to_pylist() == [7, 8]
    assert [len(s) for s in out["score"].to_pylist()] == [2, 0]
    assert out.schema.metadata[b"kind"] == b"causal-lm"


def test_oom_halves_the_batch(qwen3_seq_cls, monkeypatch):
    rows = [RawRow(r, f"t:{k + 1}") for k, r in enumerate(make_rows(6, seed=4))]
    expected = Scorer(qwen3_seq_cls, mode="single").score_rows(rows)
    scorer = Scorer(qwen3_seq_cls, mode="single")
    real = scorer._score_batch
    sizes = []

    def flaky(batch):
        sizes.append(batch.num_seqs)
        if batch.num_seqs > 2:
            raise torch.OutOfMemoryError("simulated")
        return real(batch)

    monkeypatch.setattr(scorer, "_score_batch", flaky)
    with pytest.warns(UserWarning, match="out of memory"):
        got = scorer.score_rows(rows)
    assert max(sizes) > 2 and sizes.count(1) + sizes.count(2) >= 3  # halved until batches fit
    for a, b in zip(got["scores"].to_pylist(), expected["scores"].to_pylist()):
        np.testing.assert_allclose(np.array(a).reshape(-1), np.array(b).reshape(-1), atol=1e-5)


def test_skip_bad_rows_in_the_core(qwen3_seq_cls):
    raws = [
        RawRow({"id": 1, "query": "ok", "items": ["fine"]}, "f:1"),
        RawRow(None, "f:2", "malformed JSON: Expecting value at column 3"),
        RawRow({"id": 3, "query": "ok", "items": "not a list"}, "f:3"),
        RawRow({"id": 4, "query_ids": [1, 2], "item_ids": [[10**9]]}, "f:4"),
    ]
    out = Scorer(qwen3_seq_cls, skip_bad_rows=True).score_rows(raws)
    errors = out["error"].to_pylist()
    assert errors[0] is None and out["score"].to_pylist()[0] is not None
    assert errors[1].startswith("f:2: malformed JSON")
    assert errors[2].startswith("f:3: field 'items'") and out["scores"].to_pylist()[2] is None
    assert errors[3].startswith("f:4: field 'item_ids'") and "vocabulary" in errors[3]
    assert out["num_tokens"].to_pylist()[1:] == [0, 0, 0]


def test_score_table_without_rows_keeps_the_id_column(qwen3_seq_cls):
    """The output's schema follows the input's, rows or none: a daily job's outputs union."""
    empty = pa.table(
        {
            "id": pa.array([], pa.int32()),
            "query": pa.array([], pa.string()),
            "items": pa.array([], pa.list_(pa.string())),
        }
    )
    out = Scorer(qwen3_seq_cls).score_table(empty)
    full = Scorer(qwen3_seq_cls).score_table(
        pa.table({"id": pa.array([3], pa.int32()), "query": ["a"], "items": [["b"]]})
    )
    assert out.num_rows == 0 and out.schema.field("id").type == pa.int32()
    assert out.schema.names == full.schema.names
