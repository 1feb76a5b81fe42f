"""The score cache through the console script (docs/long-jobs.md: Nightly jobs): a cached run's output equals
an uncached run's (MIS rows with partial hits, repeats, chunked items, top-k); a run whose pairs
all hit loads no model; every setting that decides a score is in the key (each changed alone
misses) and nothing else is (output flags, mode and attention hit); the model is keyed by the
content of its files (moved: hits; retrained in place: misses); repeated texts are run once."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scorecli.runtimes import cpu_only_torch
from tests.test_cli import TIMEOUT, Case, Result, _env, jsonl, run_cli, write

pytestmark = pytest.mark.e2e  # the console script (or Ray) end to end

ROOT = Path(__file__).resolve().parent.parent
LONG = "the quick brown fox jumps over a lazy dog while yes no maybe relevant passage answers query"

# the nightly job's first night, then its second: some rows the same, some with new items among
# old ones (partial hits), repeats within a row and across windows, a chunked long item, no items
FIRST = [
    {"id": 0, "query": "the quick brown fox", "items": ["jumps over a lazy dog", "yes no maybe", "relevant passage"]},
    {"id": 1, "query": "a lazy dog", "items": [LONG, "maybe"]},
    {"id": 2, "query": "query", "items": ["passage", "answers"]},
]
SECOND = [
    FIRST[0],
    {"id": 11, "query": "a lazy dog", "items": ["new words here", LONG, "maybe", "maybe", "fox jumps"]},
    {"id": 12, "query": "query", "items": ["answers", "a passage that is new", "passage"]},
    {"id": 13, "query": "the quick brown fox", "items": ["yes no maybe", "brand new item"]},
    {"id": 14, "query": "passage", "items": []},
    {"id": 15, "query": "a lazy dog", "items": ["fox jumps", LONG + " and more", "maybe"]},
]


def hooked(hook: str, args: list[str], env: dict[str, str] | None = None) -> Result:
    """`scorecli ARGS` with a test-only hook (tests/cache_cli.py)."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.cache_cli", hook, *args],
        capture_output=True,
        env=env or _env(),
        timeout=TIMEOUT,
        cwd=ROOT,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"), 0.0)


def meta(path: Path | str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in pq.read_table(path).schema.metadata.items()}


def counts(path: Path | str) -> tuple[int, int]:
    m = meta(path)
    return int(m["score_cache_hits"]), int(m["score_cache_misses"])


def items_of(rows: list[dict]) -> int:
    return sum(len(r["items"]) for r in rows)


def assert_same(ours: pa.Table, theirs: pa.Table, tol: float = 1e-5) -> None:
    """Same columns, rows, ids, order, top-k and chunks; scores within `tol`."""
    assert ours.column_names == theirs.column_names
    for name in ours.column_names:
        a, b = ours[name].to_pylist(), theirs[name].to_pylist()
        if name == "num_tokens":
            continue
        if name in ("score", "scores", "pooled_hidden_states"):
            assert [None if x is None else len(x) for x in a] == [None if x is None else len(x) for x in b], name
            flat_a = np.array(_flat(a), dtype=np.float64)
            flat_b = np.array(_flat(b), dtype=np.float64)
            assert flat_a.shape == flat_b.shape, name
            assert np.abs(flat_a - flat_b).max(initial=0.0) <= tol, name
        else:
            assert a == b, name


def _flat(x) -> list:
    if isinstance(x, list):
        return [v for e in x for v in _flat(e)]
    return [] if x is None else [x]


def score(inp: str, model: str, out: Path, *extra: str) -> list[str]:
    return ["score", inp, "--model", model, "--out", str(out), "--window-rows", "2", *extra]


@pytest.fixture(scope="module")
def nightly(tmp_path_factory, qwen3_seq_cls):
    """The second night scored three ways: uncached; cached after the first night; and again,
    every pair a hit, by a scorecli that cannot load a model."""
    root = tmp_path_factory.mktemp("nightly")
    first, second = write(root / "first.jsonl", jsonl(FIRST)), write(root / "second.jsonl", jsonl(SECOND))
    cache = root / "cache"
    flags = ["--chunk-tokens", "6", "--top-k", "2", "--max-batch-tokens", "64"]
    runs = {}
    for name, inp, extra in [
        ("uncached", second, []),
        ("first", first, ["--score-cache", str(cache)]),
        ("cached", second, ["--score-cache", str(cache)]),
    ]:
        result = run_cli(Case(score(inp, qwen3_seq_cls, root / f"{name}.parquet", *flags, *extra)))
        assert result.rc == 0, result.stderr
        runs[name] = result
    result = hooked(
        "no-model", score(second, qwen3_seq_cls, root / "again.parquet", *flags, "--score-cache", str(cache))
    )
    assert result.rc == 0, result.stderr
    runs["again"] = result
    return root, runs


def test_cached_run_equals_uncached(nightly):
    """Partial hits in MIS rows, repeats in a row and across windows, chunked items, top-k: the
    cached output is the uncached one (scores within float noise)."""
    root, runs = nightly
    uncached, cached = pq.read_table(root / "uncached.parquet"), pq.read_table(root / "cached.parquet")
    assert_same(cached, uncached)
    assert max(cached["num_chunks"].to_pylist()[1]) > 1  # the long item was chunked
    hits, misses = counts(root / "cached.parquet")
    assert hits + misses == items_of(SECOND)
    # the first night's pairs in rows 0, 11 ("maybe" twice), 12, 13 and 15, and row 11's "fox jumps"
    # found again in row 15, two windows later
    assert hits == 3 + 3 + 2 + 1 + 2 and misses == items_of(SECOND) - hits
    assert f"score cache: {hits:,} hits, {misses:,} misses" in runs["cached"].stderr
    assert "score_cache_hits" not in meta(root / "uncached.parquet")
    # rows whose pairs all hit cost no tokens; the others only their missing items'
    tokens = cached["num_tokens"].to_pylist()
    assert tokens[0] == 0 and 0 < tokens[1] < uncached["num_tokens"].to_pylist()[1]


def test_all_hits_load_no_model(nightly):
    """The same job again: every pair hits and the model never loads (loading it fails here)."""
    root, runs = nightly
    again = pq.read_table(root / "again.parquet")
    assert_same(again, pq.read_table(root / "uncached.parquet"))
    assert counts(root / "again.parquet") == (items_of(SECOND), 0)
    assert sum(again["num_tokens"].to_pylist()) == 0
    assert meta(root / "again.parquet")["self_check"].startswith("not run")
    assert meta(root / "again.parquet")["kind"] == "seq-cls"


def test_flags_that_change_no_score_still_load_no_model(nightly, qwen3_seq_cls):
    """The labels' field, grouping's field and the device named as `auto` resolves it change no
    pair's score: a run adding them hits every pair without a model (they were in the request)."""
    root, runs = nightly
    grouped = root / "grouped.jsonl"
    records = [{"qid": r["id"], "query": r["query"], "items": item} for r in SECOND for item in r["items"]]
    write(grouped, jsonl(records))
    flags = ["--chunk-tokens", "6", "--labels-field", "grades", "--device", "cpu"]  # the job's: --chunk-tokens
    for inp, extra in ((root / "second.jsonl", []), (grouped, ["--group-by", "qid"])):
        out = root / f"flags-{len(extra)}.parquet"
        result = hooked(
            "no-model", [*score(str(inp), qwen3_seq_cls, out, *flags, *extra), "--score-cache", str(root / "cache")]
        )
        assert result.rc == 0, result.stderr
        assert counts(out)[1] == 0, counts(out)


@pytest.mark.skipif(not cpu_only_torch(), reason="a torch built for a GPU is imported to ask whether one is there")
def test_all_hits_import_no_torch(nightly, qwen3_seq_cls, tmp_path):
    """The same job again on a CPU-only torch: neither torch nor transformers is imported, nor
    pandas (the hook makes the run exit 3 if one was), and the output is the same."""
    root, _ = nightly
    out = tmp_path / "light.parquet"
    flags = ["--chunk-tokens", "6", "--top-k", "2", "--max-batch-tokens", "64", "--score-cache", str(root / "cache")]
    result = hooked(
        "not-imported:torch,transformers,pandas", score(str(root / "second.jsonl"), qwen3_seq_cls, out, *flags)
    )
    assert result.rc == 0, result.stderr
    assert_same(pq.read_table(out), pq.read_table(root / "again.parquet"))


def test_hidden_states_right_with_a_cache(nightly, qwen3_seq_cls):
    """The cache keeps scores, not hidden states: a run that asks for them scores every pair
    (repeats in a window still once, their states copied) and writes what an uncached run does."""
    root, _ = nightly
    second = str(root / "second.jsonl")
    flags = ["--pooled-hidden-states", "--chunk-tokens", "6"]
    for name, extra in [("hidden_uncached", []), ("hidden_cached", ["--score-cache", str(root / "cache")])]:
        result = run_cli(Case(score(second, qwen3_seq_cls, root / f"{name}.parquet", *flags, *extra)))
        assert result.rc == 0, result.stderr
    cached = pq.read_table(root / "hidden_cached.parquet")
    assert_same(cached, pq.read_table(root / "hidden_uncached.parquet"))
    assert counts(root / "hidden_cached.parquet") == (0, items_of(SECOND))
    states = cached["pooled_hidden_states"].to_pylist()[1]
    assert states[2] == states[3] and any(states[2])  # "maybe" twice: one forward, copied


def test_dataset_output_records_the_counts(nightly, qwen3_seq_cls):
    """A dataset output: every part carries the run's counts (the same metadata in every part)."""
    root, _ = nightly
    out = root / "dataset"
    args = ["score", str(root / "second.jsonl"), "--model", qwen3_seq_cls, "--out", f"{out}/", "--window-rows", "2"]
    result = run_cli(Case([*args, "--chunk-tokens", "6", "--top-k", "2", "--score-cache", str(root / "cache")]))
    assert result.rc == 0, result.stderr
    parts = sorted(out.glob("part-*.parquet"))
    assert len(parts) == 3 and (out / "_SUCCESS").exists()
    metas = [pq.read_schema(p).metadata for p in parts]
    assert all(m == metas[0] for m in metas) and metas[0][b"score_cache_hits"] == str(items_of(SECOND)).encode()
    import pyarrow as pa

    assert_same(pa.concat_tables(pq.read_table(p) for p in parts), pq.read_table(root / "uncached.parquet"))


TEMPLATE = 'prefix = "Question: {query} ({instruction}) Passage:"\nitem = " {item} Relevant:"\n'


@pytest.fixture(scope="module")
def keyed(tmp_path_factory, qwen3_causal_lm):
    """A causal LM's job scored once into a cache, with a template that takes an instruction."""
    root = tmp_path_factory.mktemp("keyed")
    shutil.copytree(qwen3_causal_lm, root / "model")
    (root / "template.toml").write_text(TEMPLATE)
    inp = write(root / "rows.jsonl", jsonl(FIRST))
    cache = root / "cache"
    base = ["--template", str(root / "template.toml"), "--label-tokens", "yes,no", "--instruction", "find it"]
    result = run_cli(Case(score(inp, str(root / "model"), root / "base.parquet", *base, "--score-cache", str(cache))))
    assert result.rc == 0, result.stderr
    assert counts(root / "base.parquet") == (0, items_of(FIRST))

    def again(name: str, *flags: str, model: str | None = None) -> tuple[int, int]:
        out = root / f"{name}.parquet"
        args = score(inp, model or str(root / "model"), out, *base, *flags, "--score-cache", str(cache))
        result = run_cli(Case(args))
        assert result.rc == 0, result.stderr
        return counts(out)

    return root, again


@pytest.mark.parametrize(
    "flags",
    [
        ["--instruction", "find another"],
        ["--label-tokens", "no,yes"],
        ["--activation", "softmax"],
        ["--dtype", "bfloat16"],
        ["--max-seq-len", "40"],
        ["--chunk-tokens", "8"],
        ["--truncate", "error"],
    ],
    ids=lambda f: f[0],
)
def test_each_setting_that_decides_a_score_misses(keyed, flags):
    """Each setting that decides a score, changed alone, makes every pair miss (its flag given
    twice: the later wins)."""
    _, again = keyed
    assert again("variant", *flags) == (0, items_of(FIRST))


def test_what_decides_no_score_hits(keyed):
    """Output flags, the mode, the attention backend and batch sizes are not in the key."""
    _, again = keyed
    flags = ["--top-k", "1", "--compact", "--mode", "single", "--attention", "eager", "--max-batch-tokens", "32"]
    assert again("same", *flags) == (items_of(FIRST), 0)


def test_template_text_is_in_the_key(keyed):
    """The template file changed in place (same name, other text) misses."""
    root, again = keyed
    (root / "template.toml").write_text(TEMPLATE.replace("Passage:", "Document:"))
    try:
        assert again("template") == (0, items_of(FIRST))
    finally:
        (root / "template.toml").write_text(TEMPLATE)


def test_model_is_keyed_by_content(keyed):
    """The same files in another folder hit; weights retrained in place (same names, sizes and
    shapes) miss."""
    root, again = keyed
    moved = root / "moved"
    shutil.copytree(root / "model", moved)
    assert again("moved", model=str(moved)) == (items_of(FIRST), 0)
    from safetensors.torch import load_file, save_file

    weights = next(moved.glob("*.safetensors"))
    tensors = load_file(weights)
    name = next(k for k in tensors if k.endswith("norm.weight"))
    tensors[name] = tensors[name] * 1.5
    save_file(tensors, weights, metadata={"format": "pt"})
    assert again("retrained", model=str(moved)) == (0, items_of(FIRST))
    assert again("retrained_again", model=str(moved)) == (items_of(FIRST), 0)


def _retrained(src: str, dst: Path) -> Path:
    """A copy of the model at `src` with one norm's weights scaled: same names, sizes and shapes."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    weights = next(dst.glob("*.safetensors"))
    tensors = load_file(weights)
    name = next(k for k in tensors if k.endswith("norm.weight"))
    tensors[name] = tensors[name] * 1.5
    save_file(tensors, weights, metadata={"format": "pt"})
    return dst


def test_a_model_replaced_after_it_was_hashed_is_keyed_by_what_loaded(tmp_path, qwen3_seq_cls):
    """The model's files replaced after the run hashed them and before it loaded the model (a Hub
    id whose load fetches a newer commit; a folder a deploy replaces): the run's scores were filed
    under the files it hashed and its hits were the old model's, mixed with the new one's in one
    output. The model is identified again once loaded: the output is the new model's, as an
    uncached run's; where earlier windows were served from the cache first, one warning says so."""
    new = _retrained(qwen3_seq_cls, tmp_path / "new")
    rows = [{**FIRST[0], "items": [*FIRST[0]["items"], "brand new item"]}, *FIRST[1:]]  # the first window misses
    inp, want = write(tmp_path / "rows.jsonl", jsonl(rows)), tmp_path / "want.parquet"
    assert run_cli(Case(score(inp, str(new), want))).rc == 0
    for name, order in (("loads", rows), ("served", rows[::-1])):  # "served": the first window all hits
        model, cache, out = tmp_path / f"model-{name}", str(tmp_path / f"cache-{name}"), tmp_path / f"{name}.parquet"
        shutil.copytree(qwen3_seq_cls, model)
        filled = run_cli(
            Case(
                score(
                    write(tmp_path / "first.jsonl", jsonl(FIRST)),
                    str(model),
                    tmp_path / "f.parquet",
                    "--score-cache",
                    cache,
                )
            )
        )
        assert filled.rc == 0, filled.stderr
        result = hooked(
            f"replaced:{new}",
            score(write(tmp_path / f"{name}.jsonl", jsonl(order)), str(model), out, "--score-cache", cache),
        )
        assert result.rc == 0, result.stderr
        warned = [x for x in result.lines() if x.startswith("warning: the model's files changed")]
        if name == "loads":
            assert counts(out) == (0, items_of(rows)) and not warned, result.stderr
            assert_same(pq.read_table(out), pq.read_table(want))
        else:
            served = items_of(rows[1:])  # the first window's two rows (--window-rows 2)
            assert counts(out)[0] == served and len(warned) == 1, result.stderr
            assert f"{served} pairs of the windows before" in warned[0]


@pytest.fixture(scope="module")
def embedder(tmp_path_factory) -> str:
    from tests.builders.embedding import build_sentence_model

    return build_sentence_model(tmp_path_factory.mktemp("embedder"), prompts={"query": "query: ", "document": "doc: "})


def test_embedding_settings_in_the_key_and_texts_run_once(tmp_path, embedder):
    """An embedding model: similarity, prompts and an approximate runtime are in the key; a text
    listed by many rows is embedded once (`num_tokens` counts it once) with the same scores."""
    shared = ["a lazy dog", "relevant passage answers", "the quick brown fox"]
    rows = [{"id": i, "query": q, "items": shared} for i, q in enumerate(["fox", "dog", "passage", "fox"])]
    inp = write(tmp_path / "rows.jsonl", jsonl(rows))
    one = write(tmp_path / "one.jsonl", jsonl(rows[:1]))
    cache = tmp_path / "cache"
    result = run_cli(
        Case(score(inp, embedder, tmp_path / "base.parquet", "--window-rows", "4", "--score-cache", str(cache)))
    )
    assert result.rc == 0, result.stderr
    base = pq.read_table(tmp_path / "base.parquet")
    alone = run_cli(Case(score(one, embedder, tmp_path / "one.parquet")))
    assert alone.rc == 0, alone.stderr
    tokens = base["num_tokens"].to_pylist()
    first_row = pq.read_table(tmp_path / "one.parquet")["num_tokens"].to_pylist()[0]
    assert tokens[0] == first_row  # the first row pays for the shared texts
    # later rows pay for their query only (the shared texts are embedded once); row 3 repeats row 0
    assert 0 < tokens[1] <= first_row // 3 and 0 < tokens[2] <= first_row // 3 and tokens[3] == 0
    assert_same(base.slice(0, 1).drop_columns(["id"]), pq.read_table(tmp_path / "one.parquet").drop_columns(["id"]))
    for flags in (["--similarity", "dot"], ["--query-prompt", "find: "], ["--runtime", "onnx-int8"]):
        out = tmp_path / "variant.parquet"
        result = run_cli(Case(score(inp, embedder, out, "--window-rows", "4", "--score-cache", str(cache), *flags)))
        assert result.rc == 0, result.stderr
        assert counts(out) == (0, items_of(rows)), flags


def test_a_cache_of_another_format_is_one_line(tmp_path, qwen3_seq_cls):
    inp = write(tmp_path / "rows.jsonl", jsonl(FIRST))
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "scorecli-score-cache.json").write_text(json.dumps({"format": "scorecli score cache", "version": 99}))
    result = run_cli(Case(score(inp, qwen3_seq_cls, tmp_path / "out.parquet", "--score-cache", str(cache))))
    assert result.rc == 2 and len(result.lines()) == 1, result.stderr
    assert "version 99" in result.stderr and not (tmp_path / "out.parquet").exists()
    (cache / "scorecli-score-cache.json").unlink()
    (cache / "notes.txt").write_text("mine")
    result = run_cli(Case(score(inp, qwen3_seq_cls, tmp_path / "out.parquet", "--score-cache", str(cache))))
    assert result.rc == 2 and len(result.lines()) == 1 and "other files" in result.stderr, result.stderr
    assert sorted(p.name for p in cache.iterdir()) == ["notes.txt"]


def test_a_cache_an_input_glob_would_read_is_refused(tmp_path, qwen3_seq_cls):
    """A cache kept where the input glob reaches (`'data/**/*.json'` with `--score-cache data/cache`)
    ran once; its marker and records (`.json`) were the next night's input ("missing field 'query'",
    exit 2, every night). Refused before any work, in one line; a glob that does not reach it runs."""
    write(tmp_path / "data" / "q" / "rows.json", jsonl(FIRST))
    cache, out = tmp_path / "data" / "cache", tmp_path / "out.parquet"
    for pattern in ("data/**/*.json", "data/*/*.json"):
        result = run_cli(Case(score(str(tmp_path / pattern), qwen3_seq_cls, out, "--score-cache", str(cache))))
        assert result.rc == 2 and len(result.lines()) == 1, result.stderr
        assert "--score-cache" in result.stderr and "input pattern" in result.stderr, result.stderr
        assert not cache.exists() and not out.exists()
    result = run_cli(Case(score(str(tmp_path / "data/q/*.json"), qwen3_seq_cls, out, "--score-cache", str(cache))))
    assert result.rc == 0 and (cache / "scorecli-score-cache.json").is_file(), result.stderr


def test_a_cache_folder_an_input_glob_would_read_is_refused(tmp_path, qwen3_seq_cls):
    """The same for `--cache-dir`: `auto`'s verdicts (`runtime/*.json`) and a GGUF model's
    dequantized config and tokenizer (`gguf/*/config.json`) are JSON files the next run would read."""
    write(tmp_path / "data" / "q" / "rows.json", jsonl(FIRST))
    write(tmp_path / "data" / "q" / "more" / "rows.json", jsonl(FIRST))
    folder, out = tmp_path / "data" / "cache", tmp_path / "out.parquet"
    for pattern in ("data/**/*.json", "data/*/*/*.json"):
        result = run_cli(Case(score(str(tmp_path / pattern), qwen3_seq_cls, out, "--cache-dir", str(folder))))
        assert result.rc == 2 and len(result.lines()) == 1, result.stderr
        assert "--cache-dir" in result.stderr and "input pattern" in result.stderr, result.stderr
        assert not out.exists()
    result = run_cli(Case(score(str(tmp_path / "data/q/*.json"), qwen3_seq_cls, out, "--cache-dir", str(folder))))
    assert result.rc == 0, result.stderr


def test_a_pair_met_again_in_the_next_windows_is_scored_once(tmp_path, qwen3_seq_cls):
    """Rows that repeat the same pairs across windows of two rows (each window prepared while the
    one before runs, so its first rows' pairs are found only when it runs): only the first row
    pays for them, with or without a cache; the cache counts the first window's four pairs as
    misses (a repeat within the window where a pair is first met is one: docs/long-jobs.md), the
    later windows' as hits."""
    rows = [{"id": i, "query": "the quick brown fox", "items": ["a lazy dog", "yes no maybe"]} for i in range(6)]
    inp = write(tmp_path / "rows.jsonl", jsonl(rows))
    plain = tmp_path / "plain.parquet"
    result = run_cli(Case(score(inp, qwen3_seq_cls, plain)))
    assert result.rc == 0, result.stderr
    tokens = pq.read_table(plain)["num_tokens"].to_pylist()
    assert tokens[0] > 0 and tokens[1:] == [0] * 5, tokens
    cached = tmp_path / "cached.parquet"
    result = run_cli(Case(score(inp, qwen3_seq_cls, cached, "--score-cache", str(tmp_path / "cache"))))
    assert result.rc == 0, result.stderr
    assert counts(cached) == (items_of(rows) - 4, 4)
    assert pq.read_table(cached)["num_tokens"].to_pylist() == tokens
    assert_same(pq.read_table(cached), pq.read_table(plain))


def test_a_cache_named_by_a_file_url(tmp_path, qwen3_seq_cls):
    """`--score-cache file:///...` and `scorecli cache info file:///...` are the local folder (SPEC 15's
    schemes, as inputs and outputs take them)."""
    inp = write(tmp_path / "rows.jsonl", jsonl(FIRST))
    url = (tmp_path / "cache").as_uri()
    result = run_cli(Case(score(inp, qwen3_seq_cls, tmp_path / "one.parquet", "--score-cache", url)))
    assert result.rc == 0, result.stderr
    assert (tmp_path / "cache" / "scorecli-score-cache.json").is_file()
    again = run_cli(Case(score(inp, qwen3_seq_cls, tmp_path / "two.parquet", "--score-cache", str(tmp_path / "cache"))))
    assert again.rc == 0 and counts(tmp_path / "two.parquet") == (items_of(FIRST), 0), again.stderr
    info = run_cli(Case(["cache", "info", url]))
    assert info.rc == 0 and f"score cache {url}:" in info.stderr + info.stdout.decode(), info.stderr


def test_settings_resolved_otherwise_than_recorded_reuse_nothing(tmp_path, qwen3_causal_lm):
    """The cache maps a run's flags to the settings an earlier run resolved them to; where the
    model, once loaded, resolves them otherwise (here a chat template rendered otherwise), the
    window it was loaded for is keyed again under the new settings: none of its pairs is taken
    from the old ones (the first row's were), and the output is an uncached run's."""
    rows = [FIRST[0], {"id": 9, "query": "a new query", "items": ["new words here", "maybe"]}, *SECOND[1:3]]
    out, want = _filled_then_rendered(tmp_path, qwen3_causal_lm, FIRST[:1], rows, "rendered", None)
    assert counts(out)[0] == 0, counts(out)
    assert_same(pq.read_table(out), pq.read_table(want))


def _filled_then_rendered(tmp_path, model, filled, rows, hook, reference_cache):
    """A cache filled with `filled` under `yes-no-chat`; then `rows` scored with it under `hook`
    (`tests/cache_cli.py`: chat templates rendered otherwise), and as the reference under the
    `rendered` hook with the cache `reference_cache` (None: none). Both outputs' paths."""
    first = write(tmp_path / "first.jsonl", jsonl(filled))
    inp = write(tmp_path / "rows.jsonl", jsonl(rows))
    template = ["--template", "yes-no-chat"]
    flags = [*template, "--score-cache", str(tmp_path / "cache")]
    result = run_cli(Case(score(first, model, tmp_path / "first.parquet", *flags)))
    assert result.rc == 0, result.stderr
    out, want = tmp_path / "out.parquet", tmp_path / "want.parquet"
    result = hooked(hook, score(inp, model, out, *flags))
    assert result.rc == 0, result.stderr
    reference = template if reference_cache is None else [*template, "--score-cache", str(tmp_path / reference_cache)]
    result = hooked("rendered", score(inp, model, want, *reference))
    assert result.rc == 0, result.stderr
    return out, want


def test_a_library_upgrade_resolves_the_flags_again(tmp_path, qwen3_causal_lm):
    """After an upgrade of transformers (here one that renders chat templates otherwise), the
    flags are resolved again by the model before any pair is taken from the cache: a first window
    whose pairs all hit under the old rendering is not written with the old scores."""
    rows = [*FIRST[:2], *SECOND[1:3]]
    out, want = _filled_then_rendered(tmp_path, qwen3_causal_lm, FIRST[:2], rows, "rendered:upgraded", "fresh")
    assert counts(out) == counts(want)  # the repeats within the job, no more
    assert_same(pq.read_table(out), pq.read_table(want))
