"""The `multi-vector` and `sparse` kinds (docs/models.md: Which models) against sentence-transformers 6
itself, through the console script: MultiVectorEncoder folders with and without skip-lists and
query expansion, a Stanford ColBERT checkpoint, SparseEncoder folders with and without the
inference-free query side; every attention choice that applies to their encoders; the query
encoded once per row; empty items and queries; long items in chunks; --top-k, --resume, Ray,
inspect and bench; flags that do not apply refused in one line; the self-check catching a
broken MaxSim."""

from __future__ import annotations

import json
import re
import string
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.builders.vectors import (
    build_multi_vector,
    build_pylate,
    build_sparse,
    build_stanford_colbert,
    reference,
    reference_ids,
)
from tests.test_cli import WORDS, Case, jsonl, run_cli, write

BPE_PROMPTS = {"query": "query: ", "document": "passage: "}
FOLDERS = {
    # skip-list, fixed query expansion (not attended), prompts, per-task lengths
    "mv-skiplist": (
        "multi-vector",
        lambda d: build_multi_vector(
            d,
            expansion={"strategy": "fixed", "length": 12},
            prompts={"query": "[Q] ", "document": "[D] "},
            document_length=24,
        ),
    ),
    # no skip-list, no expansion, MeanMaxSim, the model's own lengths
    "mv-plain": (
        "multi-vector",
        lambda d: build_multi_vector(
            d, skiplist=False, similarity="meanmaxsim", query_length=None, document_length=None
        ),
    ),
    "stanford": ("multi-vector", lambda d: build_stanford_colbert(d)),
    "pylate": ("multi-vector", lambda d: build_pylate(d)),
    "sparse": ("sparse", lambda d: build_sparse(d)),
    # Router: a SparseStaticEmbedding for queries; sum pooling, cosine, max_active_dims
    "sparse-router": ("sparse", lambda d: build_sparse(d, router=True, pooling="sum")),
    "sparse-cosine": ("sparse", lambda d: build_sparse(d, similarity="cosine", max_active_dims=30)),
    # byte-level BPE under a prompt that ends in a space: "passage: " + "the" is "... : Ġthe"
    "mv-bpe": ("multi-vector", lambda d: build_multi_vector(d, prompts=BPE_PROMPTS, bpe=True)),
    "sparse-bpe": ("sparse", lambda d: build_sparse(d, prompts=BPE_PROMPTS, bpe=True)),
}

LONG = " ".join(WORDS[k % len(WORDS)] for k in range(70)) + "."
ROWS = [
    {"id": 0, "query": "which fox jumps, quickly?", "items": ["the quick brown fox.", "a lazy dog!!", "", "? , ."]},
    {"id": 1, "query": "", "items": ["yes no maybe", LONG]},
    {"id": 2, "query": "no items here", "items": []},
    {"id": 3, "query": "relevant passage answers query", "items": [LONG, "passage", "the dog while yes"]},
    {"id": 4, "query": LONG, "items": ["over a lazy dog"]},
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, str]:
    return {name: build(tmp_path_factory.mktemp(name)) for name, (_, build) in FOLDERS.items()}


@pytest.fixture(scope="module")
def rows_file(tmp_path_factory) -> str:
    return write(tmp_path_factory.mktemp("rows") / "rows.jsonl", jsonl(ROWS))


def score(inp: str, model: str, out: Path, *extra: str) -> pa.Table:
    result = run_cli(Case(["score", inp, "--model", model, "--out", str(out), "--quiet", *extra]))
    assert result.rc == 0, result.stderr
    return pq.read_table(out)


def assert_close(got: list, want: list) -> None:
    """Within 1e-4, relative for values over 1 (SPEC 17)."""
    assert [len(g) for g in got] == [len(w) for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.array(g, dtype=np.float64), w, rtol=1e-4, atol=1e-4)


@pytest.mark.e2e
@pytest.mark.parametrize("name", list(FOLDERS))
def test_scores_equal_sentence_transformers(folders, rows_file, tmp_path, name):
    """Several windows and batches; empty items, an empty query, a row without items, texts cut at
    the folder's lengths: `similarity(encode_query([q]), encode_document(items))` per row."""
    kind = FOLDERS[name][0]
    table = score(rows_file, folders[name], tmp_path / "out.parquet", "--window-rows", "2", "--max-batch-tokens", "64")
    assert table.schema.metadata[b"kind"] == kind.encode()
    assert table["id"].to_pylist() == [r["id"] for r in ROWS]
    assert_close(table["score"].to_pylist(), reference(folders[name], ROWS, kind))


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["mv-skiplist", "sparse-router"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_every_attention_choice_that_applies(folders, rows_file, tmp_path, name, attention):
    """Their encoders run their own attention: sdpa (the fused encoder stack) and eager (the model's
    own implementation) give sentence-transformers' scores (flex and flashinfer are refused below)."""
    table = score(rows_file, folders[name], tmp_path / "out.parquet", "--attention", attention)
    assert_close(table["score"].to_pylist(), reference(folders[name], ROWS, FOLDERS[name][0]))


@pytest.mark.parametrize("name", ["mv-skiplist", "sparse"])
def test_the_query_is_encoded_once_per_row_and_every_item_once(folders, name):
    """The MIS saving of these kinds: a window's queries run first, each once, then every item once,
    in length-sorted batches; the scores stay sentence-transformers'."""
    from scorecli import Scorer
    from scorecli.core.batching import Batch

    scorer = Scorer(folders[name], device="cpu", max_batch_tokens=40)
    family, seen = scorer.family, []
    forward = family.forward.__call__

    def counting(batch: Batch):
        seen.append((family.is_query[batch.item_index].tolist(), batch.seq_lens.tolist()))
        return forward(batch)

    family.forward = _Calls(family.forward, counting)
    scorer.streams = [family.forward]  # one at a time here (two CPU streams: their own test)
    out = scorer.score_table(pa.Table.from_pylist(ROWS))
    assert_close(out["score"].to_pylist(), reference(folders[name], ROWS, FOLDERS[name][0]))
    kinds = [q for flags, _ in seen for q in flags]
    with_items = sum(1 for r in ROWS if r["items"])
    assert kinds.count(True) <= with_items and kinds.count(False) == sum(len(r["items"]) for r in ROWS)
    queries_done = [all(flags) for flags, _ in seen]
    assert queries_done == sorted(queries_done, reverse=True)  # every query batch before any item batch
    items = sorted((lens for flags, lens in seen if not flags[0]), key=lambda b: -b[0])  # (run costliest first)
    assert all(a == sorted(a, reverse=True) for a in items)
    assert all(a[-1] >= b[0] for a, b in zip(items, items[1:]))  # each batch a run of the items longest first
    if name == "mv-skiplist":  # the static query side of a router needs no forward; here every query runs once
        assert kinds.count(True) == with_items


@pytest.mark.parametrize("name", ["mv-skiplist", "sparse-router"])
def test_two_cpu_streams_equal_sentence_transformers(folders, name):
    """On a CPU, batches run two at a time (item batches wait for their window's queries): the
    same scores, over many small batches and several windows' worth of rows."""
    import torch

    from scorecli import Scorer

    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # streams need a thread each (also on a 1-core machine)
    try:
        scorer = Scorer(folders[name], device="cpu", max_batch_tokens=40)
        used, run_streams = [], scorer._run_streams
        scorer._run_streams = lambda prepared: used.append(prepared) or run_streams(prepared)
        out = scorer.score_table(pa.Table.from_pylist(ROWS * 3))
    finally:
        torch.set_num_threads(threads)
    assert len(scorer.streams) == 2 and used
    assert_close(out["score"].to_pylist(), reference(folders[name], ROWS * 3, FOLDERS[name][0]))


def test_a_failed_query_batch_stops_the_item_batches_waiting_for_it(folders):
    """On a CPU the item batches of a window wait for its query batches: a query batch that failed
    (a CPU allocation that failed) left the other stream's item batch waiting for ever, and the run
    hung. The error stands and the run ends with it."""
    import threading
    import time

    import torch

    from scorecli import Scorer

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        scorer = Scorer(folders["sparse"], device="cpu", max_batch_tokens=40)
        family, query_reps, failed = scorer.family, scorer.family.query_reps, []

        def failing(batch, forward):
            if not failed:
                failed.append(batch)
                time.sleep(1.0)  # the other stream takes the next batches meanwhile: the items' too
                raise RuntimeError("DefaultCPUAllocator: can't allocate memory")
            return query_reps(batch, forward)

        family.query_reps = failing
        raised: list[BaseException] = []

        def score() -> None:
            try:
                scorer.score_table(pa.Table.from_pylist(ROWS * 3))
            except BaseException as e:  # noqa: BLE001 (what the run ended with)
                raised.append(e)

        runner = threading.Thread(target=score, daemon=True)
        runner.start()
        runner.join(60)
        hung = runner.is_alive()
        if hung:  # let the waiting stream go, so that the test ends
            family.queries_held.set()
            runner.join(60)
    finally:
        torch.set_num_threads(threads)
    assert len(scorer.streams) == 2 and failed
    assert not hung, "the run hung on an item batch waiting for a query batch that failed"
    assert [str(e) for e in raised] == ["DefaultCPUAllocator: can't allocate memory"]


class _Calls:
    """A forward whose calls go through `call` (its other attributes are the forward's)."""

    def __init__(self, forward, call):
        self._forward, self._call = forward, call

    def __call__(self, batch):
        return self._call(batch)

    def __getattr__(self, name):
        return getattr(self._forward, name)


def _chunks(tokenizer, prompt: str, text: str, n: int, m: int) -> list[list[int]]:
    """An item's chunks as SPEC 12 cuts them: windows of n of its own tokens, starting every n - m,
    each between the tokens before the text (special tokens, the prompt) and after it. A token
    that runs past the prompt into the text (a byte-level BPE's "Ġthe" from "passage: the") is
    the text's."""
    got = tokenizer(prompt + text, return_offsets_mapping=True)
    full, ends = got["input_ids"], [end for _, end in got["offset_mapping"]]
    lead = next(k for k, end in enumerate(ends) if end > len(prompt))
    tail = len(full) - 1 - max(k for k, end in enumerate(ends) if end > len(prompt))
    body = full[lead : len(full) - tail]
    starts = [0]
    while starts[-1] + n < len(body):
        starts.append(starts[-1] + n - m)
    return [full[:lead] + body[s : s + n] + full[len(full) - tail :] for s in starts]


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["mv-skiplist", "sparse", "mv-bpe", "sparse-bpe"])
def test_long_items_in_chunks(folders, tmp_path, name):
    """--chunk-tokens: each chunk scored as its own document (the item's special tokens and prompt
    around it) against the row's query, the item's score their max; `num_chunks` says how many.
    Under a byte-level BPE the prompt's last token, "Ġ", merges with the text's first: each chunk
    keeps the prompt's tokens before that one ("passage:"), not the text's first token."""
    from transformers import AutoTokenizer

    path, kind = folders[name], FOLDERS[name][0]
    rows = [{"id": 0, "query": "which fox jumps?", "items": [LONG, "a lazy dog", LONG[:90], " " + LONG[:90]]}]
    inp = write(tmp_path / "rows.jsonl", jsonl(rows))
    table = score(inp, path, tmp_path / "out.parquet", "--chunk-tokens", "9", "--chunk-overlap", "3", "--top-k", "2")
    tok = AutoTokenizer.from_pretrained(path)
    prompt = {"mv-skiplist": "[D] ", "mv-bpe": "passage: ", "sparse-bpe": "passage: "}.get(name, "")
    want, counts = [], []
    for item in rows[0]["items"]:
        chunks = _chunks(tok, prompt, item, 9, 3)
        counts.append(len(chunks))
        want.append(reference_ids(path, rows[0]["query"], chunks, kind).max())
    assert table["num_chunks"].to_pylist() == [counts] and max(counts) > 3
    assert_close(table["score"].to_pylist(), [np.array(want)])
    assert table["top_k"].to_pylist() == [list(np.argsort(-np.array(want), kind="stable")[:2])]


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["mv-skiplist", "sparse"])
def test_a_chunk_that_cannot_fit_beside_the_item_prompt_is_refused_up_front(folders, tmp_path, name):
    """--chunk-tokens is checked against the prompt the items are encoded with (`--item-prompt`
    here), not the folder's "document" prompt: a chunk that fits beside the latter but not the
    former is one usage error before any row, not every long item failing as a bad row."""
    rows = [{"id": 0, "query": "which fox jumps?", "items": [LONG, "a lazy dog"]}]
    inp = write(tmp_path / "rows.jsonl", jsonl(rows))
    flags = ["--chunk-tokens", "16", "--max-seq-len", "24"]
    score(inp, folders[name], tmp_path / "fits.parquet", *flags)  # the folder's own prompt leaves room
    out = tmp_path / "out.parquet"
    prompt = " ".join(WORDS[:12])
    result = run_cli(Case(["score", inp, "--model", folders[name], "--out", str(out), *flags, "--item-prompt", prompt]))
    assert result.rc == 2 and "--chunk-tokens 16 cannot fit within the items' 24 tokens" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists(), result.stderr


@pytest.mark.e2e
def test_resume_equals_the_uninterrupted_run(folders, tmp_path):
    """A job killed after its first part continues with --resume to what an uninterrupted run writes."""
    from tests.test_resume import start, stop_after

    rows = [
        {
            "id": i,
            "query": " ".join(WORDS[i % 7 : i % 7 + 3]),
            "items": [" ".join(WORDS[: 3 + (i + j) % 12]) for j in range(3)],
        }
        for i in range(16)
    ]
    inp, path = write(tmp_path / "rows.jsonl", jsonl(rows)), folders["mv-skiplist"]
    args = ["--window-rows", "2", "--top-k", "2", "--max-batch-tokens", "48"]
    whole = score(inp, path, tmp_path / "whole.parquet", *args)
    out = tmp_path / "scores.parquet"
    stop_after(start(["score", inp, "--model", path, "--out", str(out), *args]), Path(f"{out}.partial"), 1)
    assert not out.exists()
    resumed = score(inp, path, out, *args, "--resume")
    assert resumed.select(["id", "score", "top_k"]).equals(whole.select(["id", "score", "top_k"]))


def test_ray_engine_gives_the_local_output(folders, rows_file, tmp_path):
    ray = pytest.importorskip("ray")
    from scorecli.config import ScoreConfig
    from scorecli.engine.ray import run_score_ray
    from scorecli.engine.run import run_score
    from tests.test_ray import assert_same_output

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        for name in ("mv-skiplist", "sparse-router"):
            cfg = ScoreConfig(model=folders[name], window_rows=2, top_k=2)
            local, remote = str(tmp_path / f"{name}-local.parquet"), str(tmp_path / f"{name}-ray.parquet")
            run_score(cfg, [rows_file], local, total_rows=None, console=None, stdin=None)
            run_score_ray(cfg, [rows_file], remote, address=None, num_workers=2, console=None)
            assert_same_output(pq.read_table(local), pq.read_table(remote))
    finally:
        ray.shutdown()


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("name", "flag", "said"),
    [
        ("mv-skiplist", ["--mode", "mis"], "--mode mis"),
        ("mv-skiplist", ["--pooled-hidden-states"], "--pooled-hidden-states"),
        ("mv-skiplist", ["--similarity", "dot"], "--similarity"),
        ("mv-skiplist", ["--template", "yes-no-chat"], "--template"),
        ("sparse", ["--label-tokens", "yes,no"], "--label-tokens"),
        ("sparse", ["--activation", "sigmoid"], "--activation"),
        ("sparse", ["--runtime", "onnx"], "--runtime onnx"),
        ("sparse", ["--pooling", "cls"], "--pooling"),
        ("sparse", ["--attention", "flex"], "--attention flex"),
        ("mv-skiplist", ["--attention", "flashinfer"], "--attention flashinfer"),
    ],
)
def test_flags_that_do_not_apply_are_refused_in_one_line(folders, rows_file, tmp_path, name, flag, said):
    out = tmp_path / "out.parquet"
    result = run_cli(Case(["score", rows_file, "--model", folders[name], "--out", str(out), *flag]))
    assert result.rc == 2 and said in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not out.exists()


@pytest.mark.e2e
def test_inspect_and_bench(folders, tmp_path):
    """inspect's lines say what scoring does: the folder's SpladePooling and similarity, MaxSim or
    MeanMaxSim, and the skip-list words that are one token each (the others drop nothing)."""
    from transformers import AutoTokenizer

    said = run_cli(Case(["inspect", folders["mv-skiplist"]]))
    assert said.rc == 0, said.stderr
    tok = AutoTokenizer.from_pretrained(folders["mv-skiplist"])
    single = [w for w in string.punctuation if tok.tokenize(w) == [w]]
    assert 0 < len(single) < len(string.punctuation)
    for line in (
        "kind:           multi-vector",
        "scores:         every token, projected and normalized, masked as the folder says, then MaxSim: per query "
        "token the best item token, summed",
        "query:          cut at 12 tokens; expansion exactly 12 tokens, padded with the mask token (not attended)",
        "items:          cut at 24 tokens",
        "token vectors:  projection 24, L2-normalized",
        f"mask:           {len(single)} skip-list tokens on document ({len(string.punctuation) - len(single)} more "
        "listed words are no single token: they drop nothing)",
    ):
        assert line in said.stdout.decode(), said.stdout.decode()
    plain = run_cli(Case(["inspect", folders["mv-plain"]])).stdout.decode()
    assert "then MeanMaxSim: per query token the best item token, averaged" in plain, plain
    router = run_cli(Case(["inspect", folders["sparse-router"], "--check"]))
    text = router.stdout.decode()
    assert router.rc == 0 and "kind:           sparse" in text and "inference-free" in text, router.stderr
    assert "self-check:     passed" in text
    sparse = "over tokens of log(1 + relu(MLM logits)), then {} of sparse vocabulary vectors"
    assert "scores:         sum " + sparse.format("dot product") in text, text
    cosine = run_cli(Case(["inspect", folders["sparse-cosine"]])).stdout.decode()
    assert "scores:         max " + sparse.format("cosine") in cosine, cosine
    colbert = run_cli(Case(["inspect", folders["stanford"]]))
    assert "kind:           multi-vector" in colbert.stdout.decode() and "HF_ColBERT" in colbert.stdout.decode()
    bench = run_cli(
        Case(
            [
                "bench",
                "--model",
                folders["sparse"],
                "--rows",
                "2",
                "--items",
                "3",
                "--query-tokens",
                "6",
                "--item-tokens",
                "8",
                "--repeats",
                "1",
                "--json",
                str(tmp_path / "b.json"),
            ]
        )
    )
    assert bench.rc == 0, bench.stderr
    assert json.loads((tmp_path / "b.json").read_text())


def test_the_self_check_catches_a_broken_maxsim(folders, monkeypatch):
    """A MaxSim that lets masked item tokens win (padding, skip-list words) or averages instead of
    taking the best token fails the start-up self-check; the right one passes."""
    import torch

    from scorecli import Scorer
    from scorecli.checks.selfcheck import SelfCheckError
    from scorecli.kinds import multi_vector

    assert Scorer(folders["mv-skiplist"], device="cpu").metadata["self_check"].startswith("passed")

    def mean_not_max(query, query_mask, item, item_mask, mean=False):
        sims = torch.bmm(query, item.transpose(1, 2)) * item_mask[:, None, :]
        best = sims.sum(-1) / item_mask.sum(-1, keepdim=True).clamp(min=1)
        return (best * query_mask).sum(-1)

    monkeypatch.setattr(multi_vector, "maxsim", mean_not_max)
    with pytest.raises(SelfCheckError, match="self-check"):
        Scorer(folders["mv-skiplist"], device="cpu")


@pytest.mark.e2e
def test_console_stdin_and_detection_without_flags(folders):
    """Rows on stdin, JSON lines out; the kind detected from the folder alone."""
    result = run_cli(Case(["score", "-", "--model", folders["stanford"], "--out", "-"], stdin=jsonl(ROWS[:2])))
    assert result.rc == 0, result.stderr
    got = [json.loads(line)["score"] for line in result.stdout.decode().splitlines()]
    assert_close(got, reference(folders["stanford"], ROWS[:2], "multi-vector"))


def test_given_token_ids_are_chunked_as_they_are(folders):
    """`item_ids` under --chunk-tokens: windows of the ids themselves (nothing around them), each
    scored as the item of its own row would be, the item's score their max."""
    from scorecli import Scorer

    path = folders["sparse"]
    query, item = [2, 40, 41, 42, 3], list(range(50, 80))
    windows = [item[s : s + 8] for s in range(0, 24, 6)] + [item[24:]]
    chunked = Scorer(path, device="cpu", chunk_tokens=8, chunk_overlap=2)
    got = chunked.score_table(pa.Table.from_pylist([{"query_ids": query, "item_ids": [item]}]))
    whole = Scorer(path, device="cpu").score_table(pa.Table.from_pylist([{"query_ids": query, "item_ids": windows}]))
    assert got["num_chunks"].to_pylist() == [[len(windows)]]
    np.testing.assert_allclose(got["score"].to_pylist()[0][0], max(whole["score"].to_pylist()[0]), rtol=1e-6)


@pytest.mark.parametrize(
    ("name", "flags", "field", "limit"),
    [
        ("mv-bpe", {"max_seq_len": 100}, "query", "the model's query length of 16 tokens (--max-seq-len cuts items"),
        ("mv-skiplist", {}, "query", "the model's query expansion length of 12 tokens"),
        ("mv-skiplist", {}, "items", "the model's document length of 24 tokens"),
        ("sparse", {"max_seq_len": 20}, "items", "--max-seq-len 20 tokens"),
    ],
)
def test_a_text_over_its_cut_names_the_cut_and_where_it_comes_from(folders, name, flags, field, limit):
    """--truncate error: a query or item over its cut fails its row in a line that says which cut
    and where it comes from: queries are cut at the model's query length, not --max-seq-len."""
    from scorecli import Scorer
    from scorecli.errors import InputError
    from scorecli.io.readers import RawRow

    row = {"query": "which fox?", "items": ["a dog"]}
    row[field] = LONG if field == "query" else [LONG]
    where = "field 'query'" if field == "query" else "field 'items'[0]"
    scorer = Scorer(folders[name], device="cpu", truncate="error", **flags)
    with pytest.raises(InputError, match=re.escape(f"test: {where}: over {limit}")):
        scorer.score_rows([RawRow(row, "test")])


# one window in which items recur under other queries and a query recurs in another row
REPEATS = [
    {"id": 0, "query": "lazy dog", "items": ["the quick brown fox", "yes no maybe", "passage"]},
    {"id": 1, "query": "relevant answers", "items": ["passage", "the quick brown fox"]},
    {"id": 2, "query": "lazy dog", "items": ["passage", "over a lazy dog"]},
]


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["mv-skiplist", "sparse-router"])
def test_repeated_texts_and_the_score_cache_keep_each_row_its_own_query(folders, tmp_path, name):
    """An item listed under two queries is scored against each (a window's repeated sequences are
    run once only where an entry's result is its sequence's alone); with `--score-cache`, a second
    night of the same rows takes every pair from the cache and writes the same scores."""
    kind = FOLDERS[name][0]
    rows = write(tmp_path / "rows.jsonl", jsonl(REPEATS))
    want = reference(folders[name], REPEATS, kind)
    one = ["--window-rows", "3"]
    plain = score(rows, folders[name], tmp_path / "plain.parquet", *one)
    assert_close(plain["score"].to_pylist(), want)
    cache = ["--score-cache", str(tmp_path / "cache"), *one]
    first = score(rows, folders[name], tmp_path / "first.parquet", *cache)
    second = score(rows, folders[name], tmp_path / "second.parquet", *cache)
    assert_close(first["score"].to_pylist(), want)
    assert_close(second["score"].to_pylist(), want)
    assert int(second.schema.metadata[b"score_cache_misses"]) == 0


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("name", "flags"),
    [
        ("mv-skiplist", ()),
        ("pylate", ("--chunk-tokens", "8")),
        ("sparse-router", ()),
        ("sparse", ("--chunk-tokens", "8")),
    ],
)
def test_the_audit_re_scores_their_pairs(folders, rows_file, tmp_path, name, flags):
    """`--audit` re-scores a multi-vector or sparse run's pairs through the model's own forward, each
    text alone (the query's expansion and skip-list, a static query side, chunks aggregated as the
    run does): it crashed after the last window, the audit asking for an embedding folder's
    pooling. A broken path is found."""
    from tests.test_score_cache import hooked, meta

    out = tmp_path / "out.parquet"
    args = ["score", rows_file, "--model", folders[name], "--out", str(out), "--audit", "6", "--audit-strict", *flags]
    result = run_cli(Case(args))
    assert result.rc == 0, result.stderr
    figures = {k: float(v) for k, v in meta(out).items() if k.startswith("audit_")}
    assert figures["audit_pairs"] == 6 and figures["audit_max_score_diff"] <= 1e-4, figures
    broken = hooked("perturb:0.5", [*args[:5], str(tmp_path / "b.parquet"), *args[6:]])
    assert broken.rc == 1 and "error: audit:" in broken.stderr, broken.stderr
    if name == "sparse":  # scores of 400-650: 0.01 off is 2e-5 of them, within float32's 1e-4 relative (SPEC 17)
        nudged = hooked("perturb:0.01", [*args[:5], str(tmp_path / "n.parquet"), *args[6:]])
        assert nudged.rc == 0 and "relative above 1" in nudged.stderr, nudged.stderr


MARKUP_ROWS = [
    {
        "query": "which [SEP] fox [PAD]",
        "items": ["[SEP] [CLS] the fox", "a [PAD] dog [MASK]", "[unused0] [Q] {{ item }}"],
    },
    {"query": "[MASK] [PAD]", "items": ["<|im_end|> <|endoftext|> yes", "the quick brown fox [SEP]"]},
]


@pytest.mark.parametrize("name", ["mv-skiplist", "stanford", "sparse", "mv-bpe"])
def test_texts_that_look_like_markup_equal_sentence_transformers(folders, name):
    """Special tokens written in a query or an item ([SEP], [PAD], the query expansion's [MASK]) are
    parsed as sentence-transformers parses them and count as tokens of the text: the expansion and
    the masks follow the layout, never a token's id."""
    from scorecli import Scorer
    from scorecli.io.readers import RawRow

    table = Scorer(folders[name]).score_rows([RawRow(r, f"t:{k + 1}") for k, r in enumerate(MARKUP_ROWS)])
    assert_close(table["score"].to_pylist(), reference(folders[name], MARKUP_ROWS, FOLDERS[name][0]))


@pytest.mark.parametrize("kind", ["sparse", "multi-vector"])
def test_items_take_the_document_prompt_never_passage_or_corpus(tmp_path, kind):
    """A folder whose prompts name `passage` or `corpus` but no `document` (an older or hand-written
    config): sentence-transformers 6's `encode_document` encodes the items with no prompt (every
    model it loads has a `document` prompt, empty when the folder names none), and so does
    scorecli; it put the `passage` prompt before every item. `--item-prompt passage` still names it."""
    from scorecli import Scorer

    path = Path(build_sparse(tmp_path) if kind == "sparse" else build_multi_vector(tmp_path))
    config = json.loads((path / "config_sentence_transformers.json").read_text())
    config["prompts"] = {"query": "query: ", "passage": "passage: ", "corpus": "corpus: "}
    (path / "config_sentence_transformers.json").write_text(json.dumps(config))
    rows = ROWS[:1] + ROWS[3:4]
    got = Scorer(str(path)).score_table(pa.Table.from_pylist(rows))["score"].to_pylist()
    assert_close(got, reference(str(path), rows, kind))
    named = Scorer(str(path), item_prompt="passage").score_table(pa.Table.from_pylist(rows))["score"].to_pylist()
    assert not np.allclose(named[0], got[0], atol=1e-3)  # the passage prompt was there to be taken


def test_an_empty_allow_list_keeps_every_document_token(tmp_path):
    """A MultiVectorMask saved with `keep_only_token_ids: []` (no allow-list, as sentence-transformers
    reads it): every item scored -1e9, as if it kept no token."""
    from scorecli import Scorer

    path = Path(build_multi_vector(tmp_path))
    entry = next(e for e in json.loads((path / "modules.json").read_text()) if e["type"].endswith("MultiVectorMask"))
    config = json.loads((path / entry["path"] / "config.json").read_text())
    (path / entry["path"] / "config.json").write_text(json.dumps({**config, "keep_only_token_ids": []}))
    got = Scorer(str(path)).score_table(pa.Table.from_pylist(ROWS[:2]))["score"].to_pylist()
    assert_close(got, reference(str(path), ROWS[:2], "multi-vector"))
