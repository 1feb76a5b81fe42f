"""Ranking (docs/ranking.md): `--top-k`, and long items scored in chunks (`--chunk-tokens`).

The windows, the aggregates and the ranking are checked on their own (numpy), then end to end:
every kind (seq-cls, reward, causal-lm with label tokens, cross-encoder), every aggregate, MIS
and single mode, text and pre-tokenized rows: scores and pooled states equal the model's own
Hugging Face forward over each chunk alone (P + chunk + suffix, or the pair (query, chunk)),
aggregated as docs/ranking.md says (float32: <= 1e-4 on scores, <= 1e-3 on pooled states). The
reference cuts its windows with its own loop, not with scorecli's index math.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from scorecli import Scorer
from scorecli.config import ScoreConfig
from scorecli.core.ranking import Chunking, aggregate, chunk_items, chunk_windows, top_k
from scorecli.core.templates import load_template
from scorecli.errors import InputError, UsageError
from scorecli.io.readers import RawRow
from tests.reference import load_reference, reference_item
from tests.test_invariance import WORDS

# ---- the reference -----------------------------------------------------------------------


def windows(n: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """docs/ranking.md read literally: windows of `size` starting at j * (size - overlap), until the
    first that reaches the end; one window when the item fits."""
    if n <= size:
        return [(0, n)]
    out, j = [], 0
    while True:
        start = j * (size - overlap)
        out.append((start, min(start + size, n)))
        if start + size >= n:
            return out
        j += 1


def pick(scores: np.ndarray, hidden: np.ndarray, positive: int, how: str) -> tuple[np.ndarray, np.ndarray]:
    """An item's aggregate of its chunks' (scores [C, labels], hidden [C, H])."""
    if how == "mean":
        return scores.mean(axis=0), hidden.mean(axis=0)
    k = 0 if how == "first" else max(range(len(scores)), key=lambda c: (scores[c, positive], -c))
    return scores[k], hidden[k]


def decoder_chunks(tok, row: dict, template, size: int, overlap: int) -> tuple[list[int], list[list[list[int]]]]:
    """(P, per item: its chunks' token ids, each window + the template suffix)."""
    if "query_ids" in row:
        prefix, items, suffix = row["query_ids"], row["item_ids"], 0
    else:
        prefix = tok(template.render_prefix(row["query"], None)).input_ids
        items = [tok(template.render_item(it), add_special_tokens=False).input_ids for it in row["items"]]
        suffix = len(tok(template.item_suffix, add_special_tokens=False).input_ids) if template.item_suffix else 0
    chunks = []
    for ids in items:
        text, tail = ids[: len(ids) - suffix], ids[len(ids) - suffix :]
        chunks.append([text[a:b] + tail for a, b in windows(len(text), size, overlap)])
    return prefix, chunks


def decoder_reference(
    path, kind, rows, size, overlap, how, template="plain", label_tokens=None, activation="none", positive=0
):
    """Per row: (scores [items, labels], hidden [items, H], chunks per item)."""
    model, tok = load_reference(path, kind)
    label_ids = [tok.encode(t, add_special_tokens=False)[0] for t in label_tokens] if label_tokens else None
    tmpl = load_template(template, tok)
    out = []
    for row in rows:
        prefix, items = decoder_chunks(tok, row, tmpl, size, overlap)
        scores, hidden, counts = [], [], []
        for chunks in items:
            refs = [reference_item(model, kind, prefix + c, label_ids, activation) for c in chunks]
            s, h = pick(np.stack([r[0] for r in refs]), np.stack([r[1] for r in refs]), positive, how)
            scores.append(s), hidden.append(h), counts.append(len(chunks))
        out.append((np.array(scores).reshape(len(items), -1 if items else 0), np.array(hidden), counts))
    return out


def long_rows(n_rows: int, seed: int, max_words: int = 40) -> list[dict]:
    """Rows of items from short (one chunk) to several chunks long, and a row with no items."""
    rng = np.random.default_rng(seed)

    def words(n: int) -> str:
        return " ".join(rng.choice(WORDS, size=n))

    rows = []
    for r in range(n_rows):
        n_items = 0 if r == 1 else int(rng.integers(1, 5))
        rows.append(
            {
                "id": r,
                "query": words(int(rng.integers(1, 8))),
                "items": [words(int(rng.integers(1, max_words))) for _ in range(n_items)],
            }
        )
    return rows


def raw(rows: list[dict]) -> list[RawRow]:
    return [RawRow(r, f"test:{k + 1}") for k, r in enumerate(rows)]


def outputs(table, n_labels: int):
    scores = [np.array(s, dtype=np.float32).reshape(-1, n_labels) for s in table["scores"].to_pylist()]
    hidden = [np.array(h, dtype=np.float32) for h in table["pooled_hidden_states"].to_pylist()]
    return scores, hidden


def assert_chunked_matches(table, ref, positive: int) -> None:
    n_labels = ref[0][0].shape[1] if ref[0][0].size else len(table.schema.metadata[b"labels"].split(b","))
    scores, hidden = outputs(table, n_labels)
    for row_scores, row_hidden, chunks, row_score, (ref_s, ref_h, ref_counts) in zip(
        scores, hidden, table["num_chunks"].to_pylist(), table["score"].to_pylist(), ref
    ):
        assert chunks == ref_counts
        assert row_scores.shape[0] == len(ref_counts)
        if ref_counts:
            np.testing.assert_allclose(row_scores, ref_s, atol=1e-4, rtol=0)
            np.testing.assert_allclose(np.array(row_score, dtype=np.float32), ref_s[:, positive], atol=1e-4, rtol=0)
            np.testing.assert_allclose(row_hidden.reshape(ref_h.shape), ref_h, atol=1e-3, rtol=0)


# ---- windows, aggregates and ranking (numpy) ----------------------------------------------


@pytest.mark.parametrize("size,overlap", [(4, 0), (4, 1), (4, 3), (1, 0), (5, 2)])
def test_windows_follow_the_spec(size, overlap):
    c = Chunking(size, overlap)
    lengths = np.array([0, 1, size - 1, size, size + 1, 2 * size, 3 * size + 2, 17], dtype=np.int64)
    counts, starts, lens = chunk_windows(lengths, c)
    got = np.split(np.stack([starts, starts + lens], axis=1), np.cumsum(counts)[:-1])
    for n, w in zip(lengths, got):
        assert [tuple(x) for x in w.tolist()] == windows(int(n), size, overlap), n


def test_window_edges():
    """Exactly N tokens: one chunk; N + 1: a second chunk of one token; overlap N - 1: stride 1."""
    counts, starts, lens = chunk_windows(np.array([8, 9]), Chunking(8, 0))
    assert counts.tolist() == [1, 2] and starts.tolist() == [0, 0, 8] and lens.tolist() == [8, 8, 1]
    counts, starts, lens = chunk_windows(np.array([8, 9, 11]), Chunking(8, 7))
    assert counts.tolist() == [1, 2, 4] and starts.tolist() == [0, 0, 1, 0, 1, 2, 3] and set(lens.tolist()) == {8}


def test_chunks_keep_the_suffix_whole():
    items = [np.arange(100, 110), np.arange(200, 203), np.arange(300, 302)]  # suffix 2: text 8, 1, 0
    chunks, counts = chunk_items(items, 2, Chunking(3, 1))
    assert counts.tolist() == [4, 1, 1]
    assert [c.tolist() for c in chunks] == [
        [100, 101, 102, 108, 109],
        [102, 103, 104, 108, 109],
        [104, 105, 106, 108, 109],
        [106, 107, 108, 109],
        [200, 201, 202],
        [300, 301],
    ]
    assert chunk_items(items[1:], 2, Chunking(3))[0][0] is items[1]  # nothing to cut: the items as they are


def test_aggregates():
    values = np.array([[1, 10], [3, 30], [3, 31], [2, 20], [5, 50], [np.nan, 0], [7, 70]], dtype=np.float32)
    counts = np.array([4, 1, 2])
    score = values[:, 0]
    assert aggregate(values, score, counts, "max").tolist()[:2] == [[3, 30], [5, 50]]  # the first of equal chunks
    assert np.isnan(aggregate(values, score, counts, "max")[2, 0])  # a NaN chunk is not hidden by a max
    assert aggregate(values, score, counts, "first")[:, 1].tolist() == [10, 50, 0]
    mean = aggregate(values, score, counts, "mean")
    np.testing.assert_allclose(mean[:2], [[2.25, 22.75], [5, 50]])
    two = values[:2]
    assert aggregate(two, score[:2], np.array([1, 1]), "mean") is two  # one chunk each: nothing to do


def test_top_k_order_ties_and_short_rows():
    score = np.array([0.5, 0.9, 0.5, np.nan, 0.9, 1.0, 0.2, -0.0, 0.0], dtype=np.float32)
    offsets = np.array([0, 5, 5, 7, 9])  # rows of 5, 0, 2, 2 items
    off, idx = top_k(score, offsets, 3)
    rows = np.split(idx, off[1:-1])
    assert [r.tolist() for r in rows] == [[1, 4, 0], [], [0, 1], [0, 1]]  # ties to the lower index, NaN last
    off, idx = top_k(score, offsets, 10)
    assert np.split(idx, off[1:-1])[0].tolist() == [1, 4, 0, 2, 3]
    assert idx.dtype == np.int32


# ---- end to end: decoders -------------------------------------------------------------------


DECODER_CASES = [
    ("qwen3_seq_cls_3labels", "seq-cls", {"activation": "softmax", "positive_label": "2"}, 2),
    ("llama_reward", "seq-cls", {}, 0),  # a reward model (one label), BOS-prefixed tokenizer
    ("qwen3_causal_lm", "causal-lm", {"template": "qwen3-reranker"}, 0),  # label tokens yes,no; a template suffix
]


@pytest.mark.parametrize("fixture,kind,extra,positive", DECODER_CASES, ids=["seq-cls", "reward", "causal-lm"])
@pytest.mark.parametrize("how", ["max", "mean", "first"])
@pytest.mark.parametrize("mode", ["mis", "single"])
def test_decoder_chunks_match_hf_reference(request, fixture, kind, extra, positive, how, mode):
    path = request.getfixturevalue(fixture)
    rows = long_rows(4, seed=len(fixture))
    size, overlap = 8, 3
    scorer = Scorer(
        path,
        mode=mode,
        pooled_hidden_states=True,
        chunk_tokens=size,
        chunk_overlap=overlap,
        chunk_aggregate=how,
        top_k=2,
        **extra,
    )
    table = scorer.score_rows(raw(rows))
    assert max(c for row in table["num_chunks"].to_pylist() for c in row) >= 3  # items of several chunks
    ref = decoder_reference(
        path,
        kind,
        rows,
        size,
        overlap,
        how,
        extra.get("template", "plain"),
        scorer.spec.label_names if kind == "causal-lm" else None,
        scorer.spec.activation,
        positive,
    )
    assert_chunked_matches(table, ref, positive)
    for got, (ref_s, _, _) in zip(table["top_k"].to_pylist(), ref):  # top-k ranks the aggregated scores
        want = sorted(range(len(ref_s)), key=lambda k: (-ref_s[k, positive], k))[:2]
        assert got == want


def test_pretokenized_rows_and_window_edges(qwen3_seq_cls):
    """item_ids of exactly N, N + 1 and many tokens, with overlap N - 1 (stride 1) and 0."""
    rng = np.random.default_rng(3)
    size = 6
    rows = [
        {
            "id": k,
            "query_ids": rng.integers(5, 900, size=4 + k).tolist(),
            "item_ids": [rng.integers(5, 900, size=n).tolist() for n in (size, size + 1, 3 * size + 1, 1)],
        }
        for k in range(2)
    ]
    for overlap, counts in ((size - 1, [1, 2, 14, 1]), (0, [1, 2, 4, 1])):
        for mode in ("mis", "single"):
            table = Scorer(
                qwen3_seq_cls, mode=mode, pooled_hidden_states=True, chunk_tokens=size, chunk_overlap=overlap
            ).score_rows(raw(rows))
            assert table["num_chunks"].to_pylist() == [counts, counts]
            assert_chunked_matches(table, decoder_reference(qwen3_seq_cls, "seq-cls", rows, size, overlap, "max"), 0)


def test_batched_equals_unbatched_and_split_rows(qwen3_causal_lm):
    """Chunks in one batch or one per batch, and a row whose chunks do not fit one sequence
    (split, each sequence repeating P): the same scores; MIS costs fewer tokens than single."""
    rows = long_rows(5, seed=9, max_words=60)
    kw = {
        "label_tokens": ("yes", "no"),
        "pooled_hidden_states": True,
        "chunk_tokens": 10,
        "chunk_overlap": 2,
        "chunk_aggregate": "mean",
    }
    big = Scorer(qwen3_causal_lm, max_batch_tokens=100000, **kw).score_rows(raw(rows))
    scorer = Scorer(qwen3_causal_lm, max_batch_tokens=1, **kw)
    prepared, items = scorer.prepare(raw(rows)), []
    one = scorer.run(prepared, on_batch=lambda n, tokens: items.append(n))
    assert sum(items) == prepared.num_items < int(prepared.chunks.sum())  # progress counts items, not chunks
    split = Scorer(qwen3_causal_lm, max_seq_len=40, **kw).score_rows(raw(rows))
    single = Scorer(qwen3_causal_lm, mode="single", **kw).score_rows(raw(rows))
    for other in (one, split, single):
        for col, tol in (("scores", 1e-5), ("pooled_hidden_states", 1e-4)):
            for a, b in zip(big[col].to_pylist(), other[col].to_pylist()):
                np.testing.assert_allclose(np.array(a, np.float32), np.array(b, np.float32), atol=tol, rtol=0)
        assert other["num_chunks"].to_pylist() == big["num_chunks"].to_pylist()
    assert big["num_tokens"].to_pylist() == one["num_tokens"].to_pylist()
    assert sum(split["num_tokens"].to_pylist()) > sum(big["num_tokens"].to_pylist())
    assert sum(single["num_tokens"].to_pylist()) > sum(split["num_tokens"].to_pylist())


def test_short_items_score_as_without_chunks(qwen3_seq_cls):
    """Items that fit one chunk: the same scores and tokens as an unchunked run; num_chunks 1."""
    rows = long_rows(4, seed=5, max_words=6)
    plain = Scorer(qwen3_seq_cls, pooled_hidden_states=True).score_rows(raw(rows))
    chunked = Scorer(qwen3_seq_cls, pooled_hidden_states=True, chunk_tokens=64).score_rows(raw(rows))
    assert "num_chunks" not in plain.column_names and "top_k" not in plain.column_names
    assert chunked["num_chunks"].to_pylist() == [[1] * len(r["items"]) for r in rows]
    assert chunked["num_tokens"].to_pylist() == plain["num_tokens"].to_pylist()
    for col in ("scores", "pooled_hidden_states"):
        for a, b in zip(plain[col].to_pylist(), chunked[col].to_pylist()):
            np.testing.assert_allclose(np.array(a, np.float32), np.array(b, np.float32), atol=1e-5, rtol=0)


def test_items_far_over_max_seq_len_are_chunked_whole(qwen3_seq_cls):
    """No cut before tokenizing (`longtext`) when chunking: every token of a huge item is scored."""
    item = " ".join(WORDS * 40)  # ~4,000 characters, far over 16 characters per token of --max-seq-len 48
    tok = AutoTokenizer.from_pretrained(qwen3_seq_cls)
    n = len(tok(item, add_special_tokens=False).input_ids)
    table = Scorer(qwen3_seq_cls, chunk_tokens=16, max_seq_len=48).score_rows(raw([{"query": "q", "items": [item]}]))
    assert table["num_chunks"].to_pylist() == [[-(-n // 16)]]
    assert table["num_tokens"].to_pylist()[0] > n


def test_top_k_ties_go_to_the_lower_index(qwen3_seq_cls):
    rows = [{"query": "a query", "items": ["b", "a dog", "b", "the fox", "a dog"]}, {"query": "q", "items": ["x"]}]
    table = Scorer(qwen3_seq_cls, top_k=3).score_rows(raw(rows))
    score = table["score"].to_pylist()[0]
    # equal items, equal scores up to rounding: the same item at another place of the packed
    # row may differ in the last bit (BLAS reduction order); exact ties: test_top_k_order_ties_and_short_rows
    assert abs(score[0] - score[2]) < 1e-6 and abs(score[1] - score[4]) < 1e-6
    want = sorted(range(5), key=lambda k: (-score[k], k))[:3]
    assert table["top_k"].to_pylist() == [want, [0]]
    assert table.schema.field("top_k").type == pa.list_(pa.int32())


def test_bad_rows_have_null_top_k_and_chunks(qwen3_seq_cls):
    """A bad row, and a row whose prefix leaves no room for a whole chunk: null (skipped), or
    the row's error."""
    long_query = " ".join(WORDS)  # 38 tokens: room for 10 item tokens within 48
    rows = [
        RawRow({"id": 0, "query": "q", "items": ["a dog"] * 3}, "t:1"),
        RawRow({"id": 1, "query": 5}, "t:2"),
        RawRow({"id": 2, "query": long_query, "items": ["the quick brown fox " * 8]}, "t:3"),
        RawRow({"id": 3, "query": long_query, "items": ["a"]}, "t:4"),
    ]
    kw = {"top_k": 2, "chunk_tokens": 16, "max_seq_len": 48}
    table = Scorer(qwen3_seq_cls, skip_bad_rows=True, **kw).score_rows(rows)
    assert table["top_k"].to_pylist() == [[0, 1], None, None, [0]]
    assert table["num_chunks"].to_pylist() == [[1, 1, 1], None, None, [1]]
    assert "does not fit beside the prefix" in table["error"].to_pylist()[2]
    with pytest.raises(InputError, match=r"t:3: field 'items'\[0\]: a chunk of 16 tokens"):
        Scorer(qwen3_seq_cls, **kw).score_rows(rows[2:])
    empty = Scorer(qwen3_seq_cls, **kw).empty_table()
    assert empty.schema.field("num_chunks").type == empty.schema.field("top_k").type == pa.list_(pa.int32())


def test_bad_values_are_usage_errors(llama_reward):
    for kw, match in [
        ({"top_k": 0}, "--top-k"),
        ({"chunk_tokens": 4, "chunk_overlap": 4}, "--chunk-overlap"),
        ({"chunk_tokens": 4, "chunk_overlap": -1}, "--chunk-overlap"),
        ({"chunk_tokens": 4, "chunk_aggregate": "median"}, "--chunk-aggregate"),
        ({"chunk_overlap": 2}, "need --chunk-tokens"),
        ({"chunk_tokens": 0}, "--chunk-tokens"),
    ]:
        with pytest.raises(UsageError, match=match):
            ScoreConfig(model="m", **kw)
    # the tokenizer's BOS takes one token of every sequence
    with pytest.raises(UsageError, match="--chunk-tokens 64 cannot fit within --max-seq-len 64: .* take 1 tokens"):
        Scorer(llama_reward, chunk_tokens=64, max_seq_len=64)
    Scorer(llama_reward, chunk_tokens=63, max_seq_len=64)


def test_room_is_counted_with_the_runs_instruction(qwen3_causal_lm):
    """--max-seq-len and --chunk-tokens are checked up front against the template as rows are
    rendered (an empty query, --instruction or else the template's default), not with an empty
    instruction: a value no such row can fit is refused before scoring. A row's own longer
    instruction fails its row, the line naming the template's item suffix beside the prefix."""
    tok = AutoTokenizer.from_pretrained(qwen3_causal_lm)
    template = load_template("qwen3-reranker")

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=False).input_ids)

    specials = len(tok("x").input_ids) - count("x")
    suffix = count(template.item_suffix)
    taken = specials + count(template.render_prefix("", None)) + suffix  # the default instruction
    bare = specials + count(template.render_prefix("", "")) + suffix
    assert taken > bare + 8
    kw = {"model": qwen3_causal_lm, "template": "qwen3-reranker"}
    with pytest.raises(
        UsageError, match=rf"--max-seq-len {taken} leaves no room .*default instruction\) take {taken} "
    ):
        Scorer(max_seq_len=taken, **kw)
    with pytest.raises(UsageError, match=rf"--chunk-tokens 8 cannot fit .* take {taken} tokens, leaving 7 for a chunk"):
        Scorer(max_seq_len=taken + 7, chunk_tokens=8, **kw)
    scorer = Scorer(max_seq_len=bare + 8, chunk_tokens=8, instruction="", **kw)
    assert scorer.score_rows(raw([{"query": "", "items": ["a dog"]}]))["score"].to_pylist()[0][0] is not None
    row = {"query": "", "items": ["a dog"], "instruction": " ".join(WORDS)}
    with pytest.raises(
        InputError,
        match=rf"field 'query': prefix of \d+ tokens and the template's item suffix of {suffix} tokens leave no room "
        rf"for an item within --max-seq-len {bare + 8}$",
    ):
        scorer.score_rows(raw([row]))


def test_resume_fingerprint_covers_the_new_flags():
    from scorecli.engine.job import fingerprint

    base = fingerprint(ScoreConfig(model="m"), [], "parquet")
    for kw in (
        {"top_k": 3},
        {"chunk_tokens": 8},
        {"chunk_tokens": 8, "chunk_overlap": 2},
        {"chunk_tokens": 8, "chunk_aggregate": "mean"},
    ):
        changed = {k for k, v in fingerprint(ScoreConfig(model="m", **kw), [], "parquet").items() if base[k] != v}
        assert changed == {"--" + k.replace("_", "-") for k in kw if kw[k] != getattr(ScoreConfig, k)}


# ---- end to end: cross-encoders -------------------------------------------------------------


def test_cross_encoder_chunks_match_hf_reference(bert_cross_encoder):
    """The pair (query, chunk) from token ids == the model's forward on tokenizer(query, chunk
    text): items are made of words that are one token each, so each chunk is a run of words."""
    tok = AutoTokenizer.from_pretrained(bert_cross_encoder)
    words = [w for w in WORDS if len(tok(w, add_special_tokens=False).input_ids) == 1]
    assert len(words) >= 6
    rng = np.random.default_rng(1)
    rows = [
        {"query": " ".join(rng.choice(words, size=3)), "items": [" ".join(rng.choice(words, size=n)) for n in ns]}
        for ns in ((5, 6, 7, 23), (1,), ())
    ]
    model = AutoModelForSequenceClassification.from_pretrained(bert_cross_encoder, dtype=torch.float32).eval()
    size, overlap = 6, 2
    for how in ("max", "mean", "first"):
        table = Scorer(
            bert_cross_encoder,
            pooled_hidden_states=True,
            chunk_tokens=size,
            chunk_overlap=overlap,
            chunk_aggregate=how,
            top_k=2,
        ).score_rows(raw(rows))
        ref = []
        for row in rows:
            scores, hidden, counts = [], [], []
            for item in row["items"]:
                ws = item.split()
                with torch.inference_mode():
                    runs = [
                        model(**tok(row["query"], " ".join(ws[a:b]), return_tensors="pt"), output_hidden_states=True)
                        for a, b in windows(len(ws), size, overlap)
                    ]
                s = np.stack([r.logits[0].numpy() for r in runs])
                h = np.stack([r.hidden_states[-1][0, 0].numpy() for r in runs])
                s, h = pick(s, h, 0, how)
                scores.append(s), hidden.append(h), counts.append(len(runs))
            ref.append((np.array(scores).reshape(len(counts), -1 if counts else 0), np.array(hidden), counts))
        assert table["num_chunks"].to_pylist() == [[1, 1, 2, 6], [1], []]
        assert_chunked_matches(table, ref, 0)
        assert table["top_k"].to_pylist()[1:] == [[0], []]


# ---- through the command line, --resume and --skip-bad-rows ---------------------------------


def test_resume_continues_a_chunked_ranked_job_and_refuses_other_flags(tmp_path, qwen3_seq_cls):
    """A job whose first rows are kept continues with --resume to the uninterrupted output; a
    --resume with another --top-k / --chunk-* value is refused (nothing changed)."""
    from dataclasses import replace

    from scorecli.engine.checkpoint import Checkpoint
    from scorecli.engine.run import run_score
    from scorecli.io.output import resolve_output
    from tests.test_cli import jsonl, write

    rows = long_rows(6, seed=21)
    paths = [write(tmp_path / "rows.jsonl", jsonl(rows))]
    cfg = ScoreConfig(
        model=qwen3_seq_cls,
        window_rows=2,
        top_k=2,
        chunk_tokens=8,
        chunk_overlap=1,
        chunk_aggregate="mean",
        pooled_hidden_states=True,
    )
    whole = tmp_path / "whole.parquet"
    run_score(cfg, paths, str(whole), total_rows=None, console=None, stdin=None)
    target = resolve_output(str(tmp_path / "resumed.parquet"), paths)
    first = Checkpoint.open(target, cfg, paths, resume=False)
    first.write(Scorer(qwen3_seq_cls, cfg).score_rows(raw(rows[:2])))  # an earlier run kept rows 1-2
    for changed in ({"top_k": 3}, {"chunk_tokens": 9}, {"chunk_overlap": 0}, {"chunk_aggregate": "max"}):
        flag = "--" + next(iter(changed)).replace("_", "-")
        with pytest.raises(UsageError, match=flag):
            Checkpoint.open(target, replace(cfg, **changed), paths, resume=True)
    resumed = Checkpoint.open(target, cfg, paths, resume=True)
    assert resumed.rows_done == 2
    run_score(cfg, paths, target, total_rows=None, console=None, stdin=None, checkpoint=resumed)
    import pyarrow.parquet as pq

    got, want = pq.read_table(target.path), pq.read_table(whole)
    assert got.column_names == want.column_names
    for name in got.column_names:
        assert got[name].to_pylist() == want[name].to_pylist(), name


@pytest.mark.e2e
def test_console_script(tmp_path, qwen3_seq_cls, llama_reward):
    """The flags through the real `scorecli` (the same output as the library), and bad values:
    exit 2, one line, nothing written."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq

    from tests.test_cli import Case, jsonl, run_cli, write

    rows = long_rows(5, seed=31)
    inp = write(tmp_path / "rows.jsonl", jsonl(rows) + b'{"id": 99, "query": 5, "items": []}\n')
    flags = ["--top-k", "2", "--chunk-tokens", "8", "--chunk-overlap", "2", "--chunk-aggregate", "first"]
    out = tmp_path / "ok.parquet"
    cases = {
        "ok": Case(
            [
                "score",
                inp,
                "--model",
                qwen3_seq_cls,
                "--out",
                str(out),
                "--window-rows",
                "2",
                "--skip-bad-rows",
                "--pooled-hidden-states",
                "-q",
                *flags,
            ]
        )
    }
    bad = {
        "overlap": (["--chunk-tokens", "8", "--chunk-overlap", "8"], "--chunk-overlap"),
        "top_k": (["--top-k", "0"], "--top-k"),
        "aggregate": (["--chunk-tokens", "8", "--chunk-aggregate", "median"], "--chunk-aggregate"),
        "too_big": (["--chunk-tokens", "64", "--max-seq-len", "64"], "--chunk-tokens 64 cannot fit"),  # BOS
    }
    for name, (extra, _) in bad.items():
        cases[name] = Case(["score", inp, "--model", llama_reward, "--out", str(tmp_path / f"{name}.parquet"), *extra])
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(cases, pool.map(run_cli, cases.values())))
    assert results["ok"].rc == 0, results["ok"].stderr
    got = pq.read_table(out)
    cfg = {
        "top_k": 2,
        "chunk_tokens": 8,
        "chunk_overlap": 2,
        "chunk_aggregate": "first",
        "skip_bad_rows": True,
        "pooled_hidden_states": True,
    }
    want = Scorer(qwen3_seq_cls, **cfg).score_rows(
        [RawRow(r, "x") for r in rows] + [RawRow({"id": 99, "query": 5}, "x")]
    )
    for name in ("id", "top_k", "num_chunks", "num_tokens"):
        assert got[name].to_pylist() == want[name].to_pylist(), name
    np.testing.assert_allclose(
        np.concatenate([np.array(s, np.float32) for s in got["score"].to_pylist()[:-1]]),
        np.concatenate([np.array(s, np.float32) for s in want["score"].to_pylist()[:-1]]),
        atol=1e-5,
    )
    assert got["top_k"].to_pylist()[-1] is None and got["error"].to_pylist()[-1] is not None
    for name, (_, expect) in bad.items():
        result = results[name]
        assert result.rc == 2, (name, result.stderr)
        assert len(result.lines()) == 1 and expect in result.stderr, (name, result.stderr)
        assert not (tmp_path / f"{name}.parquet").exists()
