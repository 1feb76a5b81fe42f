"""Huge texts are cut before tokenizing (`scorecli.core.longtext`), and the cut never changes the
tokens a run uses: every long item below encodes, after truncation, to exactly the tokens of
the whole item, for byte-level BPE, WordPiece (tiny and the real MiniLM) and Metaspace
tokenizers, under every preset template and for cross-encoder pairs."""

from __future__ import annotations

import random

import numpy as np
import pytest

from scorecli.core.encode import DecoderEncoder, PairEncoder
from scorecli.core.longtext import Bounder
from scorecli.core.pack import truncate_items
from scorecli.core.rows import Row
from scorecli.core.templates import load_template
from tests.builders import models

MAX = 48  # tokens a sequence holds: small, so that modest texts are "huge"


def long_items(seed: int = 0) -> list[str]:
    """Long texts of many shapes: prose, long words, whitespace runs, newlines and
    punctuation, digits, accents and CJK, words WordPiece cannot split (one [UNK] each,
    so far more characters per token than usual), and text without any space."""
    rng = random.Random(seed)
    words = [w for line in models.corpus(200, seed) for w in line.split()]
    prose = " ".join(rng.choice(words) for _ in range(3000))
    long_words = " ".join("".join(rng.choice("abcdefghij") for _ in range(rng.randint(20, 300))) for _ in range(400))
    spaced = "".join(
        rng.choice(words) + rng.choice([" ", "  ", "\n", " \n ", ".\n", ", ", "   \t "]) for _ in range(3000)
    )
    numbers = " ".join(str(rng.randint(0, 10**12)) + rng.choice(["", ".", "%", "ab"]) for _ in range(2000))
    unicode = " ".join(
        rng.choice(["café", "naïve", "東京都", "北京", "Ελληνικά", "😀ok", "ß"]) + rng.choice(words)
        for _ in range(2000)
    )
    unknown = " ".join("⟁" * rng.randint(1, 30) + "x" * rng.randint(90, 130) for _ in range(600))
    return [prose, long_words, spaced, numbers, unicode, unknown, "x" * 5000, " " + prose, prose + " " * 3000]


def metaspace_tokenizer():
    """A Unigram tokenizer behind a Metaspace pre-tokenizer (SentencePiece style)."""
    from tokenizers import Tokenizer, pre_tokenizers, trainers
    from tokenizers import models as tmodels
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(tmodels.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=["<unk>"], unk_token="<unk>", show_progress=False)
    tok.train_from_iterator(models.corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


@pytest.fixture(scope="module")
def tokenizers(bert_cross_encoder, minilm_cross_encoder):
    from transformers import AutoTokenizer

    return {
        "bpe": models.build_bpe_tokenizer(add_bos=False),
        "bpe-bos": models.build_bpe_tokenizer(add_bos=True),
        "wordpiece": AutoTokenizer.from_pretrained(bert_cross_encoder),
        "minilm": AutoTokenizer.from_pretrained(minilm_cross_encoder),
        "metaspace": metaspace_tokenizer(),
    }


def _whole(encoder):
    """`encoder` with cutting switched off: it tokenizes every text whole."""
    encoder.bounder.pre = None
    return encoder


@pytest.mark.parametrize("name", ["bpe", "bpe-bos", "wordpiece", "minilm", "metaspace"])
@pytest.mark.parametrize("template", ["plain", "qwen3-reranker", "yes-no-chat"])
def test_cut_items_keep_the_tokens_truncation_keeps(tokenizers, name, template):
    tok = tokenizers[name]
    if template == "yes-no-chat" and not getattr(tok, "chat_template", None):
        pytest.skip("no chat template")
    tpl = load_template(template, tok)
    suffix = tok(tpl.item_suffix, add_special_tokens=False)["input_ids"] if tpl.item_suffix else []
    if suffix and tok(tpl.render_item("a word"), add_special_tokens=False)["input_ids"][-len(suffix) :] != suffix:
        # truncation keeps an item's last len(suffix) tokens as the suffix: for a tokenizer that
        # merges item text into the suffix (no special tokens) even the whole item is cut wrongly
        pytest.skip("the template's suffix is not split from the item by this tokenizer")
    items = long_items()
    rows = [Row("which result is best?", items, None, None)]
    cut = DecoderEncoder(tok, tpl, None, len(tok), MAX)
    assert sum(cut._bounded(item) is not item for item in items) >= 6  # most of them are cut
    ours = cut.encode(rows, ["row 1"])[0]
    whole = _whole(DecoderEncoder(tok, tpl, None, len(tok), MAX)).encode(rows, ["row 1"])[0]
    np.testing.assert_array_equal(ours.prefix, whole.prefix)
    for max_seq_len in (MAX, MAX - 7):
        got = truncate_items(ours, max_seq_len + len(ours.prefix), "item", "row 1")
        want = truncate_items(whole, max_seq_len + len(whole.prefix), "item", "row 1")
        for k, (a, b) in enumerate(zip(got.items, want.items)):
            np.testing.assert_array_equal(a, b, err_msg=f"item {k}")


@pytest.mark.parametrize("name", ["wordpiece", "minilm"])
def test_cut_pair_items_keep_the_tokens_truncation_keeps(tokenizers, name):
    tok = tokenizers[name]
    rows = [Row("which result is best?", long_items(1), None, None)]
    ours = PairEncoder(tok, MAX, "item").encode(rows, ["row 1"])[0]
    whole = _whole(PairEncoder(tok, MAX, "item")).encode(rows, ["row 1"])[0]
    assert ours.error is None and len(ours.items) == len(rows[0].items)
    for a, b, ta, tb in zip(ours.items, whole.items, ours.types, whole.types):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(ta, tb)


def test_a_huge_query_fails_its_row_without_tokenizing_it_all(tokenizers):
    tok = tokenizers["wordpiece"]
    huge = " ".join(["word"] * 200_000)
    pairs = PairEncoder(tok, MAX, "item").encode([Row(huge, ["an item"], None, None)], ["f.jsonl:3"])[0]
    assert pairs.error.startswith("f.jsonl:3: field 'query': at least ") and "--max-seq-len 48" in pairs.error
    row = DecoderEncoder(tokenizers["bpe"], load_template("plain"), None, 1500, MAX).encode(
        [Row(huge, ["x"], None, None)], ["r"]
    )[0]
    assert row.error == "r: field 'query': the prefix is over 48 tokens, no room for an item"
    assert len(row.prefix) < 1000  # only a cut of it was tokenized


def test_no_cut_without_a_boundary_or_a_pre_tokenizer(tokenizers):
    bounder = Bounder(tokenizers["bpe"])
    assert bounder.cut("short text", MAX) is None
    assert bounder.cut("x" * 100_000, MAX) is None  # one pre-token: cutting it could change its tokens
    text = "word " * 100_000
    assert bounder.cut(text, MAX) is not None
    bounder.pre = None
    assert bounder.cut(text, MAX) is None
