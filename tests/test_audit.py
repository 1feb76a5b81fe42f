"""`--audit N` through the console script (docs/long-jobs.md: Nightly jobs): a sound run passes; a deliberately
broken path (a test-only hook that perturbs the run's scores, tests/cache_cli.py) is found, said,
recorded, and with --audit-strict exits 1 after the output is written; wrong scores kept in a
cache are found on a run whose pairs all hit; every kind's reference is the model's own forward."""

from __future__ import annotations

import re

import pyarrow.parquet as pq
import pytest

from tests.test_cli import Case, jsonl, run_cli, write
from tests.test_score_cache import FIRST, SECOND, embedder, hooked, items_of, meta, score  # noqa: F401


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> str:
    return write(tmp_path_factory.mktemp("audit") / "rows.jsonl", jsonl(SECOND))


def audited(path) -> dict[str, float]:
    m = meta(path)
    return {k: float(v) for k, v in m.items() if k.startswith("audit_")}


@pytest.mark.e2e
def test_sound_run_passes(rows, qwen3_seq_cls, tmp_path):
    """MIS, chunked items, top-k: the audit re-scores 8 pairs and finds float noise only."""
    out = tmp_path / "out.parquet"
    args = score(rows, qwen3_seq_cls, out, "--chunk-tokens", "6", "--top-k", "2", "--audit", "8", "--audit-strict")
    result = run_cli(Case(args))
    assert result.rc == 0, result.stderr
    figures = audited(out)
    assert figures["audit_pairs"] == 8 and figures["audit_max_score_diff"] <= 1e-5
    assert figures["audit_rows_reordered"] == 0 and figures["audit_tolerance"] == 1e-4
    assert (
        "--audit 8: after the last window, 8 of the run's pairs (all of them, should it hold fewer) are re-scored"
        in (result.stderr)
    )  # its cost, said first
    assert result.stderr.index("--audit 8") < result.stderr.index("scored ")
    (line,) = [x for x in result.lines() if x.startswith("audit: ")]
    assert line.endswith("passed") and "warning" not in result.stderr
    plain = run_cli(Case(score(rows, qwen3_seq_cls, tmp_path / "plain.parquet")))
    assert plain.rc == 0 and not audited(tmp_path / "plain.parquet") and "audit" not in plain.stderr


@pytest.mark.e2e
def test_the_lines_count_the_pairs_re_scored(rows, qwen3_seq_cls, tmp_path):
    """`--audit 1000` on a run of fewer pairs: the note before says so, the line after says how many
    were re-scored (it said "1000 pairs are re-scored" and nothing more); one is "1 pair", not "1 pairs"."""
    many = run_cli(Case(score(rows, qwen3_seq_cls, tmp_path / "many.parquet", "--audit", "1000")))
    assert many.rc == 0, many.stderr
    assert "--audit 1000: after the last window, 1000 of the run's pairs (all of them, should it hold fewer)" in (
        many.stderr
    )
    (line,) = [x for x in many.lines() if x.startswith("audit: ")]
    assert line.startswith(f"audit: {items_of(SECOND)} pairs (all the run's, fewer than --audit 1000; "), line
    one = run_cli(Case(score(rows, qwen3_seq_cls, tmp_path / "one.parquet", "--audit", "1")))
    assert one.rc == 0 and "--audit 1: after the last window, 1 of the run's pairs is re-scored" in one.stderr
    (line,) = [x for x in one.lines() if x.startswith("audit: ")]
    assert re.match(r"audit: 1 pair \((not )?reused\) re-scored", line) and " of 1 audited row would" in line, line


@pytest.mark.e2e
def test_windows_with_a_bad_row_are_audited_too(qwen3_seq_cls, tmp_path):
    """A row that fails at tokenization (--skip-bad-rows) made its window's good pairs invisible
    to the audit: with one in every window, `audit: 0 pairs ... passed`."""
    bad = {"id": 99, "query_ids": [5], "item_ids": [[10**9]]}  # outside the vocabulary: found when encoding
    inp = write(tmp_path / "rows.jsonl", jsonl([r for row in SECOND for r in (row, bad)]))
    out = tmp_path / "out.parquet"
    args = score(inp, qwen3_seq_cls, out, "--skip-bad-rows", "--audit", str(items_of(SECOND)), "--audit-strict")
    result = run_cli(Case(args))
    assert result.rc == 0, result.stderr
    figures = audited(out)
    assert figures["audit_pairs"] == items_of(SECOND) and figures["audit_max_score_diff"] <= 1e-5, figures
    errors = pq.read_table(out)["error"].to_pylist()
    assert all("outside the vocabulary" in e for e in errors[1::2]) and errors[::2] == [None] * len(SECOND)


@pytest.mark.e2e
def test_broken_path_is_found(rows, qwen3_seq_cls, tmp_path):
    """Every other item's scores off by 0.5: the audit says so, records it, and --audit-strict
    exits 1 with the output written."""
    out = tmp_path / "out.parquet"
    result = hooked("perturb:0.5", score(rows, qwen3_seq_cls, out, "--audit", str(items_of(SECOND)), "--audit-strict"))
    assert result.rc == 1, result.stderr
    assert out.exists() and pq.read_table(out).num_rows == len(SECOND)
    figures = audited(out)
    assert figures["audit_pairs"] == items_of(SECOND)  # every pair: the perturbed ones among them
    assert abs(figures["audit_max_score_diff"] - 0.5) < 1e-4 and figures["audit_rows_reordered"] > 0
    assert [x for x in result.lines() if x.startswith("warning: audit:")], result.stderr
    assert result.lines()[-1].startswith("error: audit:") and "--audit-strict" in result.lines()[-1]
    relaxed = hooked("perturb:0.01", score(rows, qwen3_seq_cls, tmp_path / "relaxed.parquet", "--audit", "4"))
    assert relaxed.rc == 0 and "warning: audit:" in relaxed.stderr, relaxed.stderr


@pytest.mark.e2e
def test_wrong_scores_in_a_cache_are_found(qwen3_seq_cls, tmp_path):
    """A cache filled by a broken run: the next run's pairs all hit (no model for scoring), and its
    audit loads the model and finds them wrong."""
    inp = write(tmp_path / "rows.jsonl", jsonl(FIRST))
    cache = tmp_path / "cache"
    broken = hooked("perturb:0.01", score(inp, qwen3_seq_cls, tmp_path / "a.parquet", "--score-cache", str(cache)))
    assert broken.rc == 0, broken.stderr
    result = run_cli(
        Case(score(inp, qwen3_seq_cls, tmp_path / "b.parquet", "--score-cache", str(cache), "--audit", "7"))
    )
    assert result.rc == 0, result.stderr
    assert meta(tmp_path / "b.parquet")["score_cache_hits"] == str(items_of(FIRST))
    assert abs(audited(tmp_path / "b.parquet")["audit_max_score_diff"] - 0.01) < 1e-4
    assert "(7 of them reused)" in result.stderr and "warning: audit:" in result.stderr
    assert "Loading weights" not in result.stderr  # the reference's load: no progress bar of transformers'
    quiet = run_cli(
        Case(score(inp, qwen3_seq_cls, tmp_path / "c.parquet", "--score-cache", str(cache), "--audit", "7", "-q"))
    )
    assert quiet.rc == 0 and [x for x in quiet.lines() if not x.startswith("warning: audit:")] == [], quiet.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["cross-encoder", "embedding", "causal-lm"])
def test_every_kind_passes(kind, rows, tmp_path, bert_cross_encoder, embedder, qwen3_causal_lm):  # noqa: F811
    model = {"cross-encoder": bert_cross_encoder, "embedding": embedder, "causal-lm": qwen3_causal_lm}[kind]
    extra = ["--label-tokens", "yes,no", "--activation", "softmax"] if kind == "causal-lm" else []
    out = tmp_path / "out.parquet"
    result = run_cli(Case(score(rows, model, out, "--audit", "5", "--audit-strict", *extra)))
    assert result.rc == 0, result.stderr
    figures = audited(out)
    assert figures["audit_pairs"] == 5 and figures["audit_max_score_diff"] <= 1e-5, figures


@pytest.mark.e2e
def test_sixteen_bit_runs_get_their_dtypes_noise(rows, qwen3_seq_cls, tmp_path):
    out = tmp_path / "out.parquet"
    result = run_cli(Case(score(rows, qwen3_seq_cls, out, "--dtype", "bfloat16", "--audit", "5")))
    assert result.rc == 0, result.stderr
    figures = audited(out)
    assert figures["audit_tolerance"] > 1e-4 and figures["audit_max_score_diff"] > 0


@pytest.mark.e2e
def test_an_int8_run_is_measured_not_judged(rows, bert_cross_encoder, tmp_path):
    """`--runtime onnx-int8` drifts from float32 by design (its self-check measures, not judges): the
    audit said BEYOND TOLERANCE and warned on every night however sound the cache, and
    `--audit-strict` exited 1 every night. It measures and records; --audit-strict is refused."""
    pytest.importorskip("onnxruntime")
    out = tmp_path / "out.parquet"
    result = run_cli(Case(score(rows, bert_cross_encoder, out, "--runtime", "onnx-int8", "--audit", "5")))
    assert result.rc == 0, result.stderr
    figures = audited(out)
    assert figures["audit_pairs"] == 5 and figures["audit_max_score_diff"] > 0, figures  # int8: some drift
    (line,) = [x for x in result.lines() if x.startswith("audit: ")]
    assert line.endswith("measured, not judged (int8 scores drift from float32's by design)"), line
    assert "BEYOND" not in result.stderr and "audit: the run's scores differ" not in result.stderr
    strict = run_cli(
        Case(
            score(
                rows,
                bert_cross_encoder,
                tmp_path / "s.parquet",
                "--runtime",
                "onnx-int8",
                "--audit",
                "5",
                "--audit-strict",
            )
        )
    )
    assert strict.rc == 2 and strict.lines() == [
        "error: --audit-strict: --runtime onnx-int8's scores drift from the float32 forward by design, so the "
        "audit measures them and cannot pass them (use --audit alone, or --runtime onnx)"
    ], strict.stderr


@pytest.mark.e2e
def test_audit_with_ray_is_refused(rows, qwen3_seq_cls, tmp_path):
    result = run_cli(Case([*score(rows, qwen3_seq_cls, tmp_path / "o.parquet", "--audit", "3"), "--engine", "ray"]))
    assert result.rc == 2 and len(result.lines()) == 1 and "--audit" in result.stderr


def test_reference_of_a_text_that_repeats(tmp_path):
    """The reference runs each distinct sequence once and copies repeats, as a run does: an item
    that is its query's text (an embedding model without prompts) is its own cosine, 1."""
    import numpy as np

    from scorecli.checks.audit import Pair, reference_scores
    from scorecli.core.rows import Row
    from scorecli.io.readers import RawRow
    from scorecli.scorer import Scorer
    from tests.builders.embedding import build_sentence_model

    scorer = Scorer(build_sentence_model(tmp_path / "plain"), self_check=False)
    rows = [Row("a lazy dog", ["a lazy dog"], None, None), Row("a lazy dog", ["the quick brown fox"], None, None)]
    pairs = [Pair(r, f"row {k}", 0, np.zeros(1), np.zeros(1), (0, k), False) for k, r in enumerate(rows)]
    theirs = reference_scores(scorer, pairs)
    ours = scorer.score_rows([RawRow({"query": r.query, "items": r.items}, "row") for r in rows])["score"].to_pylist()
    assert abs(theirs[0, 0] - 1.0) < 1e-5
    assert np.abs(theirs[:, 0] - np.array([s[0] for s in ours])).max() < 1e-5
