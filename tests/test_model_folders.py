"""Model folders whose config or files lie about their weights, through the real console script:
fewer layers than the weights hold, weights of another shape, a `layer_types` list of another
length, a pad token outside the vocabulary, an empty vocabulary without tokenizer.json, weights
that overflow float16 under `--dtype float16`. Each is exit 2 with one line naming what is wrong,
and nothing at --out. Weights a kind does not read by design (a head beside the one scored) are
no such lie: those runs score. The runs start together (two at a time) in one fixture."""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from tests.test_cli import GOOD_LINE, Case, Result, run_cli, write

pytestmark = pytest.mark.e2e  # the console script (or Ray) end to end


def _copy(src: str, dst: Path, config: dict | None = None, drop: tuple[str, ...] = ()) -> str:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*drop))
    if config:
        data = json.loads((dst / "config.json").read_text())
        data.update(config)
        (dst / "config.json").write_text(json.dumps(data))
    return str(dst)


def _weights(folder: str, change) -> str:
    from safetensors.torch import load_file, save_file

    path = os.path.join(folder, "model.safetensors")
    weights = load_file(path)
    change(weights)
    save_file(weights, path, metadata={"format": "pt"})
    return folder


def _empty_vocab(src: str, dst: Path, tokenizer_class: str | None) -> str:
    folder = _copy(src, dst, drop=("tokenizer.json",))
    Path(folder, "vocab.txt").write_bytes(b"")
    if tokenizer_class:
        config = json.loads(Path(folder, "tokenizer_config.json").read_text())
        config.update(tokenizer_class=tokenizer_class)
        config.pop("backend", None)
        Path(folder, "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def _models(tmp: Path, seq_cls: str, cross: str) -> dict[str, str]:
    big = lambda w: w["model.layers.1.mlp.down_proj.weight"].__setitem__((0, 0), 1e6)
    extra_head = lambda w: w.__setitem__("lm_head.weight", w["model.embed_tokens.weight"].clone())

    def saved_buffers(w):  # what older saves (all-MiniLM-L6-v2's) hold beside the weights: the buffers
        w["bert.embeddings.position_ids"] = torch.arange(512)[None]
        w["bert.embeddings.token_type_ids"] = torch.zeros(1, 512, dtype=torch.long)

    return {
        "fewer_layers": _copy(
            seq_cls, tmp / "fewer_layers", {"num_hidden_layers": 1, "layer_types": ["full_attention"]}
        ),
        "layer_types": _copy(seq_cls, tmp / "layer_types", {"layer_types": ["full_attention"] * 3}),
        "pad_token": _copy(seq_cls, tmp / "pad_token", {"pad_token_id": 99999}),
        "hidden_size": _copy(seq_cls, tmp / "hidden_size", {"hidden_size": 32}),
        "hidden_size_ce": _copy(cross, tmp / "hidden_size_ce", {"hidden_size": 32}),
        "empty_vocab": _empty_vocab(cross, tmp / "empty_vocab", None),
        "empty_wordpiece": _empty_vocab(cross, tmp / "empty_wordpiece", "BertTokenizer"),
        "float16_overflow": _weights(_copy(seq_cls, tmp / "float16_overflow"), big),
        "extra_head": _weights(_copy(seq_cls, tmp / "extra_head"), extra_head),
        "saved_buffers": _weights(_copy(cross, tmp / "saved_buffers"), saved_buffers),
    }


# name: (extra flags, what the one line says)
REFUSED = {
    "fewer_layers": ([], ["holds weights its config leaves unused", "model.layers.1.", "num_hidden_layers 1"]),
    "layer_types": ([], ["config is invalid", "`num_hidden_layers` (2)", "`layer_types` (3)"]),
    "pad_token": ([], ["pad_token_id 99999", "vocabulary (0 to"]),
    "hidden_size": (
        [],
        ["config does not fit its weights", "model.embed_tokens.weight is 1296x64", "x32 by the config"],
    ),
    "hidden_size_ce": ([], ["config does not fit its weights", "is 64 in the checkpoint, 32 by the config"]),
    "empty_vocab": ([], ["tokenizer", "no tokenizer.json and its vocab.txt is empty"]),
    "empty_wordpiece": ([], ["tokenizer", "no tokenizer.json and its vocab.txt is empty"]),
    "float16_overflow": (
        ["--dtype", "float16"],
        ["model.layers.1.mlp.down_proj.weight overflows float16", "--dtype bfloat16 or float32"],
    ),
}
# name: (extra flags, the warning expected, or None for none)
SCORED = {
    "extra_head": ([], None),  # an LM head beside the score head: not read by seq-cls
    "saved_buffers": ([], None),  # buffers the model builds itself: no weights (refused under transformers 5.2)
    "embedding_of_seq_cls": (
        ["--kind", "embedding"],
        "--kind embedding leaves checkpoint weights unused (score.weight)",
    ),
    "float32_of_large_weights": (["--dtype", "float32"], None),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, qwen3_seq_cls, bert_cross_encoder) -> dict[str, tuple[Result, Path]]:
    tmp = tmp_path_factory.mktemp("model_folders")
    models = _models(tmp, qwen3_seq_cls, bert_cross_encoder)
    models["embedding_of_seq_cls"] = qwen3_seq_cls
    models["float32_of_large_weights"] = models["float16_overflow"]
    inp = write(tmp / "in.jsonl", b"".join(GOOD_LINE % i for i in (1, 2)))
    cases, outs = {}, {}
    for name, (extra, _) in {**REFUSED, **SCORED}.items():
        outs[name] = tmp / name / "out" / "scores.jsonl"
        outs[name].parent.mkdir(parents=True)
        cases[name] = Case(["score", inp, "--model", models[name], "--out", str(outs[name]), *extra])
    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(cases, pool.map(run_cli, cases.values())))
    return {name: (results[name], outs[name]) for name in cases}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_folder_that_lies_is_exit_2_with_one_line(runs, name):
    result, out = runs[name]
    assert result.rc == 2, result.stderr
    assert len(result.lines()) == 1 and result.lines()[0].startswith("error: cannot load "), result.stderr
    for part in REFUSED[name][1]:
        assert part in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "look at the above" not in result.stderr
    assert os.listdir(out.parent) == []


@pytest.mark.parametrize("name", sorted(SCORED))
def test_weights_a_kind_does_not_read_by_design_are_scored(runs, name):
    result, out = runs[name]
    assert result.rc == 0, result.stderr
    warning = SCORED[name][1]
    warnings = [line for line in result.lines() if line.startswith("warning:")]
    assert len(warnings) == (1 if warning else 0), result.stderr
    assert warning is None or warning in warnings[0]
    assert len(out.read_text().splitlines()) == 2


def test_a_folder_named_in_another_encoding_is_scored(tmp_path, qwen3_seq_cls):
    """A model folder whose name is not valid UTF-8 (a Latin-1 `modèle`, bytes as Python holds
    them: surrogates) is read as any folder: safetensors and tokenizers, which take only UTF-8
    paths, called its weights "corrupt". The scores are the same folder's under a UTF-8 name, and
    the metadata names it with the odd bytes escaped."""
    import pyarrow.parquet as pq

    inp = write(tmp_path / "rows.jsonl", GOOD_LINE % 0 + GOOD_LINE % 1)
    odd = os.fsdecode(os.path.join(os.fsencode(str(tmp_path)), b"mod\xe8le"))
    shutil.copytree(qwen3_seq_cls, odd)
    runs = {}
    for name, model in (("odd", odd), ("plain", qwen3_seq_cls)):
        result = run_cli(Case(["score", inp, "--model", model, "--out", str(tmp_path / f"{name}.parquet"), "--quiet"]))
        assert result.rc == 0, result.stderr
        runs[name] = pq.read_table(tmp_path / f"{name}.parquet")
    assert runs["odd"]["score"].equals(runs["plain"]["score"])
    assert runs["odd"].schema.metadata[b"model"] == os.fsencode(str(tmp_path)) + b"/mod\\xe8le"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="a folder read as /proc/self/fd/N needs /proc")
def test_a_folder_named_in_another_encoding_is_held_open_once(tmp_path):
    """A program that makes a Scorer of such a folder again and again (a service, a notebook)
    held one more descriptor of it open each time, until the process ran out of them; the
    folder is held once, and a folder made anew under the same name is held anew."""
    from scorecli.model.hub import utf8_folder

    odd = os.fsdecode(os.path.join(os.fsencode(str(tmp_path)), b"mod\xe8le"))
    os.mkdir(odd)
    before = len(os.listdir("/proc/self/fd"))
    aliases = {utf8_folder(odd) for _ in range(20)}
    assert len(aliases) == 1 and len(os.listdir("/proc/self/fd")) == before + 1
    os.rmdir(odd)
    os.mkdir(odd)  # another folder of the same name: its own descriptor
    again = utf8_folder(odd)
    assert again not in aliases and os.path.samestat(os.stat(again), os.stat(odd))
