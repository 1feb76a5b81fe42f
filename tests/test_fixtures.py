"""The offline test checkpoints reload with the Auto classes and behave as documented."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)

TEXTS = [
    "Query: What is the capital of France? Document: Paris is the capital. Answer: yes",
    "Query: Why is the sky blue? Document: the cat reads books.",
    "yes",
]


def _load_cls(path):
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(path, local_files_only=True)
    return tok, model.eval()


def _files(path):
    return {p.name for p in Path(path).iterdir()}


@pytest.mark.parametrize(
    "fixture,num_labels",
    [("qwen3_seq_cls", 1), ("qwen3_seq_cls_3labels", 3), ("llama_reward", 1)],
)
def test_decoder_classifiers_reload(request, fixture, num_labels):
    path = request.getfixturevalue(fixture)
    assert "model.safetensors" in _files(path)
    tok, model = _load_cls(path)
    assert model.config.num_labels == num_labels
    assert model.config.pad_token_id == tok.pad_token_id == tok.convert_tokens_to_ids("<|endoftext|>")
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    assert logits.shape == (len(TEXTS), num_labels)
    assert torch.isfinite(logits).all()
    # Scores differ between inputs (the model is not degenerate).
    assert logits[:, 0].unique().numel() == len(TEXTS)
    # Padding does not change a row's score (last non-pad token is used).
    with torch.no_grad():
        single = model(**tok(TEXTS[2:], return_tensors="pt")).logits
    torch.testing.assert_close(single[0], logits[2], rtol=1e-4, atol=1e-5)


def test_three_label_names(qwen3_seq_cls_3labels):
    cfg = AutoConfig.from_pretrained(qwen3_seq_cls_3labels, local_files_only=True)
    assert cfg.id2label == {0: "negative", 1: "neutral", 2: "positive"}


def test_causal_lm_reload(qwen3_causal_lm):
    tok = AutoTokenizer.from_pretrained(qwen3_causal_lm, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(qwen3_causal_lm, local_files_only=True).eval()
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    assert logits.shape == (len(TEXTS), enc["input_ids"].shape[1], len(tok))
    assert torch.isfinite(logits).all()
    assert not model.config.tie_word_embeddings


def test_qwen_tokenizer_no_bos_and_single_label_tokens(qwen3_seq_cls, bpe_tokenizer):
    for path in (qwen3_seq_cls, bpe_tokenizer):
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        assert tok.bos_token_id is None
        assert tok("hi")["input_ids"] == tok("hi", add_special_tokens=False)["input_ids"]
        for word in ("yes", "no", " yes", " no", "Yes", "No"):
            assert len(tok.encode(word, add_special_tokens=False)) == 1, word
        assert tok.pad_token == tok.eos_token == "<|endoftext|>"
        assert tok.model_max_length == 2048
        assert tok.decode(tok.encode("Answer: yes", add_special_tokens=False)) == "Answer: yes"
        assert {"<|im_start|>", "<|im_end|>"} <= set(tok.all_special_tokens)
        chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
        assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        ids = tok.encode(chat, add_special_tokens=False)
        assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")


def test_llama_tokenizer_adds_bos(llama_reward):
    tok = AutoTokenizer.from_pretrained(llama_reward, local_files_only=True)
    assert tok.bos_token == "<s>"
    with_bos = tok("hi")["input_ids"]
    without = tok("hi", add_special_tokens=False)["input_ids"]
    assert with_bos[0] == tok.bos_token_id
    assert with_bos[1:] == without and without[0] != tok.bos_token_id
    for word in ("yes", "no"):
        assert len(tok.encode(word, add_special_tokens=False)) == 1


@pytest.mark.parametrize("fixture", ["bert_cross_encoder", "minilm_cross_encoder"])
def test_bert_cross_encoders(request, fixture):
    path = request.getfixturevalue(fixture)
    tok, model = _load_cls(path)
    assert model.config.model_type == "bert" and model.config.num_labels == 1
    enc = tok("what is the capital of france?", "paris is the capital", return_tensors="pt")
    assert set(enc) == {"input_ids", "token_type_ids", "attention_mask"}
    ids, tt = enc["input_ids"][0].tolist(), enc["token_type_ids"][0].tolist()
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    first_sep = ids.index(tok.sep_token_id)
    assert tt[: first_sep + 1] == [0] * (first_sep + 1)
    assert tt[first_sep + 1 :] == [1] * (len(ids) - first_sep - 1)
    queries = ["what is the capital of france?"] * 3
    items = ["paris is the capital", "the cat reads a book", "a banana is yellow"]
    batch = tok(queries, items, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (3, 1) and torch.isfinite(logits).all()
    assert logits[:, 0].unique().numel() == 3


def test_minilm_head_is_spread_and_deterministic(minilm_cross_encoder):
    cfg = json.loads((Path(minilm_cross_encoder) / "config.json").read_text())
    assert cfg["architectures"] == ["BertForSequenceClassification"]
    assert cfg["hidden_size"] == 384 and cfg["num_hidden_layers"] == 6
    _, model = _load_cls(minilm_cross_encoder)
    w = model.classifier.weight
    assert 0.3 < w.std().item() < 0.7
    torch.manual_seed(0)
    expected = torch.empty_like(w).normal_(0.0, 0.5)
    torch.testing.assert_close(w, expected)


def test_builders_are_deterministic(tmp_path, qwen3_seq_cls):
    from safetensors.torch import load_file

    from tests.builders.models import build_qwen3_seq_cls

    again = build_qwen3_seq_cls(tmp_path / "again")
    a = load_file(Path(qwen3_seq_cls) / "model.safetensors")
    b = load_file(Path(again) / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert (Path(again) / "tokenizer.json").read_text() == (Path(qwen3_seq_cls) / "tokenizer.json").read_text()
