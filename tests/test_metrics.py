"""Ranking metrics (issue 41): MRR@k, nDCG@k and accuracy@1 equal to the reference implementation
(ir_measures: trec_eval's code through pytrec_eval for nDCG@k and P@1, its MS MARCO evaluator for
RR@k) on random rows with ties and rows without a relevant item; kept labels, the summary line,
the metadata and `scorecli eval` through the console script."""

from __future__ import annotations

import datetime as dt
import json
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scorecli.core.metrics import Ranking, parse_labels, rank_order, row_metrics
from scorecli.errors import InputError, UsageError
from scorecli.evaluate import evaluate
from scorecli.io.schema import null_nonfinite
from scorecli.io.writers import to_jsonl
from tests.test_cli import WORDS, Case, jsonl, run_cli, write


def random_rows(seed: int, n: int = 60) -> list[tuple[np.ndarray, np.ndarray]]:
    """(scores, integer grades) of rows of 0 to 15 items: scores from a few values (ties in every
    row of more than a few items), grades 0 to 3, a third of the rows with no relevant item."""
    rng = random.Random(seed)
    rows = []
    for r in range(n):
        items = rng.choice([0, 1, 2, 5, 9, 15])
        scores = np.array([rng.choice([0.1, 0.25, 0.5, 0.75, 0.9]) for _ in range(items)], dtype=np.float32)
        grades = np.array([0 if r % 3 == 0 else rng.choice([0, 0, 1, 2, 3]) for _ in range(items)], dtype=np.float64)
        rows.append((scores, grades))
    return rows


def reference(rows: list[tuple[np.ndarray, np.ndarray]], k: int) -> dict[str, float]:
    """ir_measures' means over the rows. trec_eval (pytrec_eval) breaks ties by document name,
    descending, and the MS MARCO evaluator ascending; items are named for each so that both put
    the lower index first, as scorecli does (and its `top_k` column)."""
    ir = pytest.importorskip("ir_measures")
    from ir_measures import RR, P, Qrel, ScoredDoc, nDCG

    def named(descending: bool):
        qrels, run = [], []
        for q, (scores, grades) in enumerate(rows):
            for i, (s, g) in enumerate(zip(scores, grades)):
                doc = f"{(9999 - i) if descending else i:04d}"
                qrels.append(Qrel(f"q{q}", doc, int(g)))
                run.append(ScoredDoc(f"q{q}", doc, float(s)))
        return qrels, run

    trec = ir.calc_aggregate([nDCG @ k, P @ 1], *named(descending=True))
    msmarco = ir.calc_aggregate([RR @ k], *named(descending=False))
    return {f"MRR@{k}": msmarco[RR @ k], f"nDCG@{k}": trec[nDCG @ k], "accuracy@1": trec[P @ 1]}


@pytest.mark.parametrize("k", [1, 3, 10])
def test_metrics_equal_the_reference_on_random_rows_with_ties(k):
    rows = random_rows(seed=k)
    ranking = Ranking(k)
    for scores, grades in rows:
        ranking.add(scores, grades)
    ours, theirs = ranking.means(), reference(rows, k)
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert ours[name] == pytest.approx(theirs[name], abs=1e-12), (name, ours, theirs)
    assert ranking.rows == sum(1 for s, _ in rows if len(s)) and ranking.without_relevant > 0


def test_ties_and_rows_without_relevant_items_as_trec_eval_counts_them():
    """Equal scores: the lower index ranks first; a row with no relevant item counts as 0."""
    assert row_metrics(np.array([0.5, 0.5, 0.5]), np.array([0.0, 1.0, 0.0]), 10)[0] == 0.5
    assert row_metrics(np.array([0.5, 0.5]), np.array([1.0, 0.0]), 10) == (1.0, 1.0, 1.0)
    assert row_metrics(np.array([0.9, 0.1]), np.array([0.0, 0.0]), 10) == (0.0, 0.0, 0.0)
    assert row_metrics(np.array([np.nan, 0.1]), np.array([1.0, 0.0]), 10)[0] == 0.5  # NaN ranks last


def test_labels_are_grades_or_indices():
    assert parse_labels([0, 2, 1], 3, "f:1", "labels").tolist() == [0, 2, 1]
    assert parse_labels([2], 3, "f:1", "labels").tolist() == [0, 0, 1]
    assert parse_labels([], 3, "f:1", "labels").tolist() == [0, 0, 0]
    assert parse_labels(["1", "0"], 2, "f:1", "labels").tolist() == [1, 0]  # CSV cells
    infinite = [([float("inf")], "inf is not a finite number"), ([float("nan"), 0], "nan is not a finite number")]
    infinite += [(["nan", "0"], "'nan' is not a finite number"), ([10**400], "1000.* is not a finite number")]
    for bad, match in [(3, "expected a list"), ([5], "not an item index"), ([-1, 0], "grade -1"), (["x"], "numbers")]:
        with pytest.raises(InputError, match=f"f:1: field 'labels': .*{match}"):
            parse_labels(bad, 2, "f:1", "labels")
    for bad, match in infinite:  # JSON's 1e999, pandas' missing value, a CSV cell: a bad row, not a crash
        with pytest.raises(InputError, match=f"f:1: field 'labels': .*{match}"):
            parse_labels(bad, 2, "f:1", "labels")


# ---- through the console script ------------------------------------------------------------------


def labelled_rows(n: int = 9) -> list[dict]:
    rng = random.Random(7)
    rows = []
    for r in range(n):
        items = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(rng.randint(1, 5))]
        labels = [rng.randrange(len(items))] if r % 3 == 1 else [rng.choice([0, 1, 2]) for _ in items]
        if r == 4:
            labels = [0] * len(items)  # no relevant item
        rows.append({"id": r, "query": " ".join(rng.choice(WORDS) for _ in range(3)), "items": items, "labels": labels})
    rows.append({"id": n, "query": "unlabelled", "items": ["a"]})
    return rows


@pytest.mark.e2e
def test_a_run_keeps_labels_and_reports_metrics_and_eval_agrees(tmp_path, qwen3_seq_cls):
    rows = labelled_rows()
    inp = write(tmp_path / "in.jsonl", jsonl(rows))
    out = tmp_path / "o.parquet"
    result = run_cli(Case(["score", inp, "--out", str(out), "--model", qwen3_seq_cls, "--window-rows", "4"]))
    assert result.rc == 0, result.stderr
    table = pq.read_table(out)
    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    kept = table["labels"].to_pylist()
    assert kept[-1] is None and kept[1] == parse_labels(rows[1]["labels"], len(rows[1]["items"]), "", "").tolist()
    scored = [(np.array(s, dtype=np.float32), np.array(g)) for s, g in zip(table["score"].to_pylist(), kept) if g]
    expected = reference(scored, 10)
    for name, value in expected.items():
        assert float(meta[name]) == pytest.approx(value, abs=1e-12), (name, meta)
    none = sum(1 for _, g in scored if not (g >= 1).any())
    assert meta["labelled_rows"] == "9" and meta["labelled_rows_without_relevant"] == str(none) and none >= 1
    line = (
        f"MRR@10 {expected['MRR@10']:.4f}, nDCG@10 {expected['nDCG@10']:.4f}, accuracy@1 {expected['accuracy@1']:.4f}"
    )
    assert f"{line} over 9 labelled rows, {none} without a relevant item" in result.lines()[-1], result.stderr
    kept_eval = run_cli(Case(["eval", str(out)]))
    from_input = run_cli(Case(["eval", str(out), "--labels", inp]))
    assert kept_eval.rc == 0 and from_input.rc == 0, (kept_eval.stderr, from_input.stderr)
    assert kept_eval.stdout.decode().startswith(line) and kept_eval.stdout == from_input.stdout
    other = write(tmp_path / "other.jsonl", jsonl(rows[:3]))
    assert run_cli(Case(["eval", str(out), "--labels", other])).rc == 2
    # an input edited since scoring (an item removed): its grades would be read as indices, or
    # against other items; refused in one line, as other rows are
    edited = [dict(r) for r in rows]
    edited[1]["items"] = edited[1]["items"][:-1]
    edited[1]["labels"] = edited[1]["labels"][: len(edited[1]["items"])]
    changed = run_cli(Case(["eval", str(out), "--labels", write(tmp_path / "edited.jsonl", jsonl(edited))]))
    assert changed.rc == 2 and len(changed.lines()) == 1, changed.stderr
    assert f"edited.jsonl:2: {len(edited[1]['items'])} items but " in changed.stderr, changed.stderr


@pytest.mark.e2e
def test_bad_labels_are_a_bad_row(tmp_path, qwen3_seq_cls):
    rows = [{"id": 1, "query": "q", "items": ["a", "b"], "labels": [0, 1]}, {"id": 2, "query": "q", "items": ["a"]}]
    rows.append({"id": 3, "query": "q", "items": ["a", "b"], "labels": [7]})
    inp = write(tmp_path / "in.jsonl", jsonl(rows))
    out = tmp_path / "o.parquet"
    result = run_cli(Case(["score", inp, "--out", str(out), "--model", qwen3_seq_cls]))
    assert result.rc == 2 and len(result.lines()) == 1 and not out.exists(), result.stderr
    assert "in.jsonl:3: field 'labels': 7 is not an item index (the row has 2 items" in result.stderr
    skipped = run_cli(Case(["score", inp, "--out", str(out), "--model", qwen3_seq_cls, "--skip-bad-rows"]))
    assert skipped.rc == 0, skipped.stderr
    assert "over 1 labelled rows" in skipped.lines()[-1] and json.loads(json.dumps(pq.read_table(out).num_rows)) == 3


@pytest.mark.e2e
def test_eval_labels_passes_over_the_rows_a_run_skipped(tmp_path, qwen3_seq_cls):
    """A bad row written with null scores and its error (--skip-bad-rows) does not count, whatever
    its input row holds: `eval --labels` over an input with a malformed line measures what `eval`
    of the kept labels does (it stopped at that line, exit 2), the rows after it still in line (an
    id or item count out of line is refused)."""
    first = {"id": 1, "query": "a", "items": ["b", "c"], "labels": [1]}
    last = {"id": 3, "query": "x", "items": ["b", "c", "d"], "labels": [0, 2, 1]}
    inp = write(tmp_path / "in.jsonl", jsonl([first]) + b'{"id": 2, "query":\n' + jsonl([last]))
    out = tmp_path / "o.parquet"
    result = run_cli(Case(["score", inp, "--out", str(out), "--model", qwen3_seq_cls, "--skip-bad-rows", "-q"]))
    assert result.rc == 0 and pq.read_table(out).num_rows == 3, result.stderr
    kept_eval = run_cli(Case(["eval", str(out)]))
    from_input = run_cli(Case(["eval", str(out), "--labels", inp]))
    assert kept_eval.rc == 0 and from_input.rc == 0, (kept_eval.stderr, from_input.stderr)
    assert b"over 2 labelled rows" in kept_eval.stdout and kept_eval.stdout == from_input.stdout


def test_eval_labels_takes_a_json_lines_output_of_a_parquet_inputs_ids(tmp_path):
    """A `.jsonl` output writes a Parquet input's timestamp id as its ISO text, bytes as text and a
    NaN as null; `eval --labels` compared ids as Python's `str` prints them and refused such an
    output of its own input (exit 2, "SCORES must be the output of the --labels input"). Ids that
    differ are still refused."""
    when = pa.array([dt.datetime(2020, 1, 1, 1, 2, 3), dt.datetime(2021, 1, 1)], pa.timestamp("us"))
    labels = str(tmp_path / "in.parquet")
    scores = tmp_path / "scores.jsonl"
    for ids in (when, pa.array([b"k1", b"k2"]), pa.array([float("nan"), 1.5])):
        pq.write_table(
            pa.table({"id": ids, "query": ["a", "b"], "items": [["x", "y"]] * 2, "labels": [[1, 0], [0, 1]]}), labels
        )
        write(scores, to_jsonl(null_nonfinite(pa.table({"id": ids, "score": [[0.9, 0.1], [0.2, 0.8]]}))[0]).encode())
        assert evaluate([str(scores)], [labels], "labels", "id", None, None).rows == 2
    write(scores, jsonl([{"id": "k9", "score": [0.9, 0.1]}, {"id": "k2", "score": [0.2, 0.8]}]))
    with pytest.raises(UsageError, match=r"scores.jsonl:1: id 'k9' but .*in.parquet: row 1: id nan"):
        evaluate([str(scores)], [labels], "labels", "id", None, None)


@pytest.mark.parametrize("unit", [pa.timestamp("ns"), pa.timestamp("ns", "Europe/Paris"), pa.time64("ns")])
def test_eval_ids_of_nanoseconds_agree_whichever_format_holds_them(tmp_path, unit):
    """Ids of nanoseconds that are not whole microseconds (pandas' `timestamp[ns]`) are read from
    Parquet as their integers and written to JSON lines as ISO text with nine digits: `eval
    --labels` refused a JSON lines file against a Parquet file of the same ids, either way round
    (exit 2, "SCORES must be the output of the --labels input"). The same rows agree in every pair
    of formats; an id a nanosecond off is still refused."""
    ns = [1_700_000_000_123_456_789, 1_700_000_001_000_000_001]
    ids = pa.array([n % 86_400_000_000_000 for n in ns] if pa.types.is_time(unit) else ns, pa.int64()).cast(unit)
    rows = {"query": ["a", "b"], "items": [["x", "y"]] * 2, "labels": [[1, 0], [0, 1]]}
    table = pa.table({"id": ids, **rows})
    scored = pa.table({"id": ids, "score": [[0.9, 0.1], [0.2, 0.8]]})
    files = {"in.parquet": table, "in.jsonl": table, "out.parquet": scored, "out.jsonl": scored}
    for name, t in files.items():
        if name.endswith(".parquet"):
            pq.write_table(t, tmp_path / name)
        else:
            write(tmp_path / name, to_jsonl(t).encode())
    assert json.loads((tmp_path / "out.jsonl").read_text().splitlines()[0])["id"].count(".") == 1  # ISO text
    for out in ("out.parquet", "out.jsonl"):
        for given in ("in.parquet", "in.jsonl"):
            ranking = evaluate([str(tmp_path / out)], [str(tmp_path / given)], "labels", "id", None, None)
            assert ranking.rows == 2, (out, given)
    off = pa.table({"id": pa.array([ns[0] + 1, ns[1]], pa.int64()).cast(unit), **rows})
    if pa.types.is_time(unit):
        off = off.set_column(
            0, "id", pa.array([ns[0] % 86_400_000_000_000 + 1, ns[1] % 86_400_000_000_000], pa.int64()).cast(unit)
        )
    pq.write_table(off, tmp_path / "off.parquet")
    with pytest.raises(UsageError, match=r"out.jsonl:1: id '.*789.*' but .*off.parquet: row 1: id '.*790.*'"):
        evaluate([str(tmp_path / "out.jsonl")], [str(tmp_path / "off.parquet")], "labels", "id", None, None)


@pytest.mark.e2e
def test_eval_refuses_the_inputs_field_flags_without_labels(tmp_path):
    """--group-by, --query-field, --items-field and --id-field name fields of the input SCORES was
    scored from, which eval reads only with --labels: without it they are refused in one line
    (they were accepted and ignored), before SCORES is read."""
    missing = str(tmp_path / "scores.parquet")
    for flags, said in (
        (["--group-by", "qid"], "error: --group-by needs --labels: it names"),
        (["--query-field", "q", "--items-field", "d"], "error: --query-field, --items-field need --labels: they name"),
        (["--id-field", "qid"], "error: --id-field needs --labels"),
    ):
        result = run_cli(Case(["eval", missing, *flags]))
        assert result.rc == 2 and len(result.lines()) == 1 and result.stderr.startswith(said), result.stderr


@pytest.mark.e2e
def test_a_resumed_dataset_reports_the_metrics_of_all_its_rows(tmp_path, qwen3_seq_cls):
    """Killed after two parts and resumed, a dataset output's every part holds the metrics of all
    rows, kept ones included, as the uninterrupted file's metadata does; the summaries agree."""
    from tests.test_new_user import slow_run
    from tests.test_resume import stop_after

    inp = write(tmp_path / "in.jsonl", jsonl(labelled_rows(12)))
    model = ["--model", qwen3_seq_cls, "--window-rows", "2"]
    whole = tmp_path / "whole.parquet"
    uninterrupted = run_cli(Case(["score", inp, "--out", str(whole), *model]))
    assert uninterrupted.rc == 0, uninterrupted.stderr
    out = tmp_path / "ds"
    args = ["score", inp, "--out", f"{out}/", *model]
    stop_after(slow_run(tmp_path / "events.jsonl", "0.3", args), out, 2)
    resumed = run_cli(Case([*args, "--resume"]))
    assert resumed.rc == 0, resumed.stderr
    names = ("MRR@10", "nDCG@10", "accuracy@1", "labelled_rows", "labelled_rows_without_relevant")
    expected = {k: v for k, v in pq.read_schema(whole).metadata.items() if k.decode() in names}
    assert len(expected) == len(names)
    parts = sorted(out.glob("part-*.parquet"))
    assert len(parts) == 7 and all({k: pq.read_schema(p).metadata[k] for k in expected} == expected for p in parts)
    line = uninterrupted.lines()[-1].split("; ", 1)[1]
    assert line.startswith("MRR@10") and resumed.lines()[-1].endswith(line), (line, resumed.lines()[-1])


@pytest.mark.e2e
def test_labels_under_another_field_name(tmp_path, qwen3_seq_cls):
    """`--labels-field rel`: the labels are read from `rel`, kept under that name and measured, as
    `labels` is by default (every run reads its rows through the reuse of repeated pairs)."""
    rows = [
        {"id": 1, "query": "q", "items": ["a", "b"], "rel": [1]},
        {"id": 2, "query": "p", "items": ["c"], "rel": [3]},
    ]
    inp = write(tmp_path / "in.jsonl", jsonl(rows))
    out = tmp_path / "o.parquet"
    result = run_cli(Case(["score", inp, "--out", str(out), "--model", qwen3_seq_cls, "--labels-field", "rel"]))
    assert result.rc == 0, result.stderr
    table = pq.read_table(out)
    assert table["rel"].to_pylist() == [[0.0, 1.0], [3.0]] and "labels" not in table.column_names
    assert "over 2 labelled rows" in result.lines()[-1], result.stderr


def test_eval_reads_a_csv_score_cell_and_refuses_a_score_that_is_no_list_of_numbers(tmp_path):
    """A SCORES CSV holds `score` as a JSON array in its cell, as it holds `labels`: eval read the
    labels but took the score's text for a list of characters (exit 1, "ValueError: could not
    convert string to float: '['"); a `score` that is a number, text or a list holding text was exit
    1 too (TypeError, ValueError) and now is a bad row of SCORES (exit 2, one line naming it)."""
    csv = write(tmp_path / "s.csv", b'score,labels\n"[0.1, 0.2]","[1]"\n"[0.7, 0.3]","[1]"\n')
    assert evaluate([csv], None, "labels", "id", None, None).means()["MRR@10"] == 0.75
    for score in (0.5, "abc", [1, "a"], [True, 0.2]):
        path = write(
            tmp_path / "bad.jsonl", jsonl([{"score": [0.1, 0.2], "labels": [1]}, {"score": score, "labels": [1]}])
        )
        with pytest.raises(InputError, match=r"bad.jsonl:2: field 'score': expected a list of numbers"):
            evaluate([path], None, "labels", "id", None, None)


def test_a_nan_score_ranks_after_minus_infinity_as_in_top_k():
    """A NaN score ranks last (docs/ranking.md, docs/inputs-and-metrics.md), as the `top_k` column
    ranks it: the metrics took NaN for -inf, so a NaN item of a lower index ranked before a -inf
    one (RR 1/3 where the -inf item, second, is relevant) and disagreed with `top_k`."""
    from scorecli.core.ranking import top_k

    scores = np.array([np.nan, -np.inf, 1.0, np.nan], dtype=np.float32)
    _, order = top_k(scores, np.array([0, 4]), 4)
    assert order.tolist() == [2, 1, 0, 3]
    assert rank_order(scores).tolist() == order.tolist()
    assert row_metrics(scores, np.array([0.0, 1.0, 0.0, 0.0]), 10)[0] == 0.5
