"""Resolve the run's effective settings from flags, template defaults and the model.

Flags override template defaults, which override the model's own defaults. Everything
that needs both the config and the loaded model is decided here, once, and frozen.
"""

from __future__ import annotations

from dataclasses import dataclass

from scorecli.config import SIMILARITIES, ScoreConfig
from scorecli.core.encode import leading_special_ids
from scorecli.core.templates import Template, text_problem
from scorecli.errors import UsageError
from scorecli.model.compat import Support, check_backend, text_config
from scorecli.model.load import Loaded

MAX_SEQ_LEN_CAP = 8192


def any_label_ids(loaded: Loaded) -> tuple[int, int]:
    """Two label token ids of a causal LM, for runs whose point is not which tokens are read
    (throughput, the self-check): their cost and the forward do not depend on them."""
    vocab = loaded.model.get_input_embeddings().num_embeddings
    return vocab // 2, vocab // 2 + 1


@dataclass(frozen=True)
class RunSpec:
    kind: str
    mis: bool
    label_ids: tuple[int, ...] | None  # causal-lm only
    label_names: tuple[str, ...]  # one per score column
    activation: str
    positive_index: int
    pooling: str
    max_seq_len: int
    single_reason: str = ""  # why a decoder runs single-item only (`compat.Support`); "" otherwise
    similarity: str = ""  # embedding only: cosine or dot


def resolve_spec(cfg: ScoreConfig, loaded: Loaded, template: Template, support: Support | None = None) -> RunSpec:
    """`support`: what the decoder allows (`compat.support`; None: everything)."""
    kind = loaded.kind
    support = support or Support(True)
    if kind == "embedding":
        return _embedding_spec(cfg, loaded, template)
    mis = _resolve_mode(cfg.mode, kind) and support.packed
    if cfg.mode == "mis" and not support.packed:
        check_backend(support, cfg.attention, mis=True)
    if kind == "cross-encoder" and template.name != "plain":
        raise UsageError(
            f"--template {template.name}: templates apply to decoder models; cross-encoders score (query, item) pairs"
        )
    for flag, text in [("--instruction", cfg.instruction or "")] + [
        ("--label-tokens", t) for t in cfg.label_tokens or ()
    ]:
        if text_problem(text) is not None:
            raise UsageError(f"{flag}: {text_problem(text)}")
    if kind == "causal-lm":
        label_ids, names = _label_tokens(cfg, loaded.tokenizer, template)
        activation = cfg.activation or template.activation or "none"
    else:
        if cfg.label_tokens is not None or cfg.label_token_ids is not None:
            raise UsageError(f"--label-tokens applies to causal-lm models, not to a {kind} model")
        label_ids, names = None, class_names(loaded.config)
        activation = cfg.activation or "none"
    return RunSpec(
        kind=kind,
        mis=mis,
        label_ids=label_ids,
        label_names=names,
        activation=activation,
        positive_index=_positive_index(cfg.positive_label, names, kind),
        pooling=cfg.pooling or ("cls" if kind == "cross-encoder" else "last"),
        max_seq_len=_check_room(
            _max_seq_len(cfg.max_seq_len, loaded), kind, loaded.tokenizer, template, cfg.chunk_tokens
        ),
        single_reason=support.reason,
    )


def _embedding_spec(cfg: ScoreConfig, loaded: Loaded, template: Template) -> RunSpec:
    """An embedding model's spec (docs/models.md: Which models, embedding models): one label, `similarity`; flags that belong to other
    kinds are refused rather than ignored."""
    refused = [
        (
            cfg.mode == "mis",
            "--mode mis: an embedding model embeds every item as its own sequence already; use --mode single or auto",
        ),
        (
            template.name != "plain" or cfg.instruction is not None,
            "--template/--instruction: embedding models take prompts (--query-prompt, --item-prompt)",
        ),
        (
            cfg.label_tokens is not None or cfg.label_token_ids is not None,
            "--label-tokens applies to causal-lm models, not to an embedding model",
        ),
        (
            cfg.activation not in (None, "none"),
            f"--activation {cfg.activation}: an embedding model's score is a similarity, with no activation",
        ),
        (cfg.pooling is not None, "--pooling: an embedding model pools as its own Pooling module says"),
        (
            cfg.chunk_tokens is not None,
            "--chunk-tokens: embedding models embed items whole (up to their maximum length)",
        ),
    ]
    for bad, message in refused:
        if bad:
            raise UsageError(message)
    similarity = cfg.similarity or loaded.sentence.similarity or "cosine"
    if similarity not in SIMILARITIES:
        raise UsageError(
            f"the model's similarity is {similarity!r}; scorecli computes cosine or dot: pass --similarity"
        )
    own = loaded.sentence.max_seq_length
    limit = (
        _max_seq_len(cfg.max_seq_len, loaded)
        if cfg.max_seq_len or own is None
        else min(own, sequence_limit(loaded.model))
    )
    names = ("similarity",)
    return RunSpec(
        kind="embedding",
        mis=False,
        label_ids=None,
        label_names=names,
        activation="none",
        positive_index=_positive_index(cfg.positive_label, names, "embedding"),
        pooling="embedding",
        max_seq_len=limit,
        similarity=similarity,
    )


def _check_room(max_seq_len: int, kind: str, tokenizer, template: Template, chunk_tokens: int | None = None) -> int:
    """`max_seq_len`, unless it leaves no room for an item token (or a whole `--chunk-tokens`
    chunk) even beside an empty query (a cross-encoder's special tokens; a decoder's template
    prefix and item suffix)."""
    if kind == "cross-encoder":
        taken, what = tokenizer.num_special_tokens_to_add(pair=True), "the (query, item) pair's special tokens"
    else:
        prefix = template.render_prefix("", "")  # no row has a shorter prefix
        taken = len(leading_special_ids(tokenizer)) + sum(
            len(tokenizer(text, add_special_tokens=False)["input_ids"])
            for text in (prefix, template.item_suffix)
            if text
        )
        what = f"the tokenizer's leading special tokens and template {template.name}'s text (with an empty query)"
    if taken + 1 > max_seq_len:
        raise UsageError(f"--max-seq-len {max_seq_len} leaves no room for an item: {what} take {taken} tokens")
    if chunk_tokens is not None and taken + chunk_tokens > max_seq_len:
        raise UsageError(
            f"--chunk-tokens {chunk_tokens} cannot fit within --max-seq-len {max_seq_len}: {what} take "
            f"{taken} tokens, leaving {max_seq_len - taken} for a chunk"
        )
    return max_seq_len


def _resolve_mode(mode: str, kind: str) -> bool:
    if kind == "cross-encoder":
        if mode == "mis":
            raise UsageError(
                "--mode mis: a cross-encoder attends bidirectionally, so items would see each other; use --mode single"
            )
        return False
    return mode != "single"


def _label_tokens(cfg: ScoreConfig, tokenizer, template: Template) -> tuple[tuple[int, ...], tuple[str, ...]]:
    if cfg.label_token_ids is not None:
        vocab = len(tokenizer)
        bad = [i for i in cfg.label_token_ids if not 0 <= i < vocab]
        if bad:
            raise UsageError(f"--label-token-ids: {bad[0]} is outside the vocabulary (size {vocab})")
        return tuple(cfg.label_token_ids), tuple(tokenizer.convert_ids_to_tokens(list(cfg.label_token_ids)))
    tokens = cfg.label_tokens or template.label_tokens
    if not tokens:
        raise UsageError("a causal-lm model needs label tokens: pass --label-tokens yes,no (or --label-token-ids)")
    ids = []
    for token in tokens:
        encoded = tokenizer.encode(token, add_special_tokens=False)
        if len(encoded) != 1:
            raise UsageError(f"--label-tokens: {token!r} is {len(encoded)} tokens {encoded}, not exactly one")
        ids.append(encoded[0])
    return tuple(ids), tuple(tokens)


def class_names(config) -> tuple[str, ...]:
    """The names of a classifier's labels (`id2label`, else LABEL_i)."""
    n = int(getattr(config, "num_labels", 1))
    id2label = getattr(config, "id2label", None) or {}
    return tuple(str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(n))


def _positive_index(positive: str | None, names: tuple[str, ...], kind: str) -> int:
    """Which label feeds `score`: the only one, the first label token, or the 2nd of 2 classes."""
    if positive is None:
        return 1 if kind != "causal-lm" and len(names) == 2 else 0
    if positive in names:
        return names.index(positive)
    if positive.isdigit() and int(positive) < len(names):
        return int(positive)
    raise UsageError(f"--positive-label {positive!r}: expected one of {', '.join(names)} or an index")


def _max_seq_len(requested: int | None, loaded: Loaded) -> int:
    limit = sequence_limit(loaded.model)
    if requested is None:
        return limit
    if requested > limit:
        switch = _rope_switch(loaded.model.config)
        why = (
            f" (LongRoPE: past {switch} tokens transformers switches the rotary frequencies of a whole forward "
            "call by its longest sequence, so one long item would change the scores of the others)"
            if switch == limit
            else ""
        )
        raise UsageError(f"--max-seq-len {requested} exceeds the model's limit of {limit} tokens{why}")
    return requested


def sequence_limit(model) -> int:
    """The longest sequence scorecli runs through `model`: the positions it can embed,
    within its sliding window and below a LongRoPE switch, at most MAX_SEQ_LEN_CAP."""
    limit = min(_position_limit(model), MAX_SEQ_LEN_CAP)
    window = _sliding_window(model.config)
    if window:
        # beyond the window, packed and single sequences would see different keys
        limit = min(limit, window)
    switch = _rope_switch(model.config)
    if switch:
        limit = min(limit, switch)
    return limit


def _rope_switch(config) -> int | None:
    """The length past which a LongRoPE model (Phi-3.5, Phi-4-mini) changes its rotary
    frequencies: transformers picks the short or long factors from the largest position in a
    forward call, so a batch or packed sequence with one item past it would move every item's
    scores. Up to it, every sequence uses the short factors, as it would alone."""
    text = text_config(config)
    params = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None) or {}
    sets = (
        [params] if "rope_type" in params or "type" in params else [v for v in params.values() if isinstance(v, dict)]
    )
    found = [
        int(p.get("original_max_position_embeddings") or getattr(text, "original_max_position_embeddings", 0) or 0)
        for p in sets
        if p.get("rope_type", p.get("type")) in ("longrope", "su")
    ]
    found = [n for n in found if n > 0]
    return min(found) if found else None


def _position_limit(model) -> int:
    """How many positions the model can embed: RoBERTa-style embeddings (RoBERTa, XLM-R,
    CamemBERT, MPNet) number positions from `padding_idx + 1`, so that many fewer fit."""
    limit = int(getattr(model.config, "max_position_embeddings", None) or MAX_SEQ_LEN_CAP)
    embeddings = getattr(model.base_model, "embeddings", None)
    padding_idx = getattr(embeddings, "padding_idx", None)
    if isinstance(padding_idx, int) and hasattr(embeddings, "position_embeddings"):
        limit -= padding_idx + 1
    return limit


def _sliding_window(config) -> int | None:
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        uses = "sliding_attention" in layer_types
    else:  # Mistral-style configs: a window set means it is used, unless switched off
        uses = getattr(config, "use_sliding_window", window is not None)
    return window if uses else None
