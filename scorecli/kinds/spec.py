"""Resolve the run's effective settings from flags, template defaults and the model.

Flags override template defaults, which override the model's own defaults. Everything
that needs both the config and the loaded model is decided once, and frozen: by the rules of
the model's kind (its family's `resolve`), from the shared pieces here (lengths, rooms, labels).
Knows no kind by name.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from scorecli.config import ScoreConfig
from scorecli.core.encode import leading_special_ids
from scorecli.core.templates import Template, text_problem
from scorecli.errors import UsageError, a_kind, notice
from scorecli.kinds import KINDS, family_class
from scorecli.model.compat import Support, decoder_layers, text_config
from scorecli.model.load import Loaded, scorecli_attends

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
    similarity: str = ""  # kinds that compare a query with items: how (cosine, dot, maxsim, ...)
    # causal-lm: the one score is the first label token's logit less the second's (or the first's
    # logit alone), sentence-transformers' LogitScore, before the activation
    logit_score: bool = False


def resolve_spec(cfg: ScoreConfig, loaded: Loaded, template: Template, support: Support | None = None) -> RunSpec:
    """The run's spec, by the rules of the model's kind (its family's `resolve`). `support`: what
    a decoder allows (`compat.support`; None: everything)."""
    return family_class(loaded.kind).resolve(loaded.kind, cfg, loaded, template, support or Support(True))


def refuse(refused: list[tuple[bool, str]]) -> None:
    """UsageError with the message of the first (condition, message) that holds: flags that belong
    to other kinds are refused rather than ignored."""
    for bad, message in refused:
        if bad:
            raise UsageError(message)


def refuse_apart_flags(kind: str, cfg: ScoreConfig, template: Template) -> None:
    """UsageError for the flags of the kinds that encode query and items apart (`--similarity`,
    the prompts) and for an instruction no slot of the template takes: they would change nothing
    but the score cache's key (kinds whose score is a head's or label tokens')."""
    where = (
        f"a {kind} model scores (query, item) pairs, with no instruction"
        if KINDS[kind].pairs
        else f"template {template.name} has no {{instruction}} in its prefix (qwen3-reranker and yes-no-chat have one)"
    )
    refuse(
        [
            (
                cfg.similarity is not None,
                f"--similarity applies to embedding models, not to a {kind} model",
            ),
            (
                cfg.query_prompt is not None or cfg.item_prompt is not None,
                f"--query-prompt/--item-prompt apply to embedding, multi-vector and sparse models, not to a {kind} model",
            ),
            (cfg.instruction is not None and not template.takes_instruction, f"--instruction: {where}"),
        ]
    )


def label_tokens_refused(kind: str, cfg: ScoreConfig) -> tuple[bool, str]:
    """(whether, why) for `refuse`: label tokens given to a `kind` whose scores are not theirs, the
    flag named as the user gave it."""
    flag = "--label-tokens" if cfg.label_tokens is not None else "--label-token-ids"
    given = cfg.label_tokens is not None or cfg.label_token_ids is not None
    return given, f"{flag} applies to causal-lm models, not to {a_kind(kind)} model"


def softmax_of_one(activation: str, names: tuple[str, ...], given: str, tokens: bool) -> tuple[bool, str]:
    """(whether, why) for `refuse`: a softmax over one label (a one-label classifier's logit, or
    one label token's) is 1.0 for every item whatever the model says; `given`: what asked for it
    (a flag, a template's default), `tokens`: the labels are label tokens."""
    what, more = ("label token", ", or give two label tokens (e.g. yes,no)") if tokens else ("label", "")
    return activation == "softmax" and len(names) == 1, (
        f"{given}: a softmax over the one {what} ({names[0] if names else ''}) is 1.0 for every item; "
        f"use --activation sigmoid or none{more}"
    )


def check_texts(cfg: ScoreConfig) -> None:
    """UsageError for an instruction or label token whose text a tokenizer cannot take."""
    for flag, text in [("--instruction", cfg.instruction or "")] + [
        ("--label-tokens", t) for t in cfg.label_tokens or ()
    ]:
        if text_problem(text) is not None:
            raise UsageError(f"{flag}: {text_problem(text)}")


def template_room(tokenizer, template: Template, instruction: str | None = None) -> tuple[int, str]:
    """(tokens, what they are) a decoder's sequence holds besides an item's text, with an empty
    query and the run's `instruction` (`--instruction`; None: the template's default), as every
    row without an instruction of its own is rendered: the tokenizer's leading special tokens and
    the template's prefix and item suffix. A row's own `instruction` is checked with its row."""
    prefix = template.render_prefix("", instruction)  # no such row has a shorter prefix
    taken = len(leading_special_ids(tokenizer)) + sum(
        len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in (prefix, template.item_suffix) if text
    )
    given = "--instruction" if instruction is not None else "its default instruction" if template.instruction else ""
    with_what = f"an empty query and {given}" if template.takes_instruction and given else "an empty query"
    return taken, f"the tokenizer's leading special tokens and template {template.name}'s text (with {with_what})"


def check_room(max_seq_len: int, taken: int, what: str, chunk_tokens: int | None = None, given: bool = True) -> int:
    """`max_seq_len`, unless it leaves no room for an item token (or a whole `--chunk-tokens`
    chunk) beside the `taken` tokens every sequence holds (`what` they are); `given`: the user
    gave it (`--max-seq-len`), else it is the model's limit (a message must not name a flag
    the user never gave)."""
    limit = f"--max-seq-len {max_seq_len}" if given else f"the model's limit of {max_seq_len} tokens"
    if taken + 1 > max_seq_len:
        raise UsageError(f"{limit} leaves no room for an item: {what} take {taken} tokens")
    if chunk_tokens is not None and taken + chunk_tokens > max_seq_len:
        raise UsageError(
            f"--chunk-tokens {chunk_tokens} cannot fit within {limit}: {what} take "
            f"{taken} tokens, leaving {max_seq_len - taken} for a chunk"
        )
    return max_seq_len


def class_names(config) -> tuple[str, ...]:
    """The names of a classifier's labels (`id2label`, else LABEL_i)."""
    n = int(getattr(config, "num_labels", 1))
    id2label = getattr(config, "id2label", None) or {}
    return tuple(str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(n))


def positive_index(positive: str | None, names: tuple[str, ...], classes: bool = True) -> int:
    """Which label feeds `score`: the only one, the first label token, or the 2nd of 2 classes
    (`classes`: the labels are a classifier's)."""
    if positive is None:
        if classes and len(names) > 2:  # no class is "the positive one": say which fills `score`
            notice(f"`score` holds the first of {len(names)} labels ({names[0]}); --positive-label picks another")
        return 1 if classes and len(names) == 2 else 0
    if positive in names:
        return names.index(positive)
    if positive.isdigit() and int(positive) < len(names):
        return int(positive)
    raise UsageError(f"--positive-label {positive!r}: expected one of {', '.join(names)} or an index")


def one_label(cfg: ScoreConfig) -> dict:
    """The RunSpec fields of a kind whose score is one similarity (embedding, multi-vector,
    sparse): one label, `similarity`, no activation, no label tokens, no MIS."""
    names = ("similarity",)
    return {
        "mis": False,
        "label_ids": None,
        "label_names": names,
        "activation": "none",
        "positive_index": positive_index(cfg.positive_label, names),
    }


def max_seq_len(requested: int | None, loaded: Loaded) -> int:
    """The longest sequence asked for (None: the model's limit); UsageError past the limit."""
    limit = model_limit(loaded)
    if requested is None:
        return limit
    if requested > limit:
        switch = _rope_switch(loaded.config)
        why = (
            f" (LongRoPE: past {switch} tokens transformers switches the rotary frequencies of a whole forward "
            "call by its longest sequence, so one long item would change the scores of the others)"
            if switch == limit
            else ""
        )
        raise UsageError(f"--max-seq-len {requested} exceeds the model's limit of {limit} tokens{why}")
    return requested


def model_limit(loaded: Loaded) -> int:
    """`sequence_limit` of a loaded model (remembered where the model may not be built)."""
    return loaded.fact("sequence_limit", lambda model: sequence_limit(model, loaded.kind))


def sequence_limit(model, kind: str) -> int:
    """The longest sequence scorecli runs through `model` (of `kind`): the positions it can embed,
    within its sliding window where scorecli's backends attend (`scorecli_attends`: they apply no
    window; a model's own attention applies its window itself, a ModernBERT cross-encoder's too)
    and below a LongRoPE switch, at most MAX_SEQ_LEN_CAP."""
    limit = min(_position_limit(model), MAX_SEQ_LEN_CAP)
    window = _sliding_window(text_config(model.config), model) if scorecli_attends(kind, model.config) else None
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


def _sliding_window(config, model=None) -> int | None:
    """The model's sliding window, where one applies (`config`: the text model's): the smallest
    its decoder layers hold as `sliding_window`; else the config's where a layer is typed sliding
    (`sliding_attention`, `hybrid_sliding` ...), where a Mistral-style config has no `layer_types`
    (unless `use_sliding_window` is off), or where every layer is typed full, none holds a window
    of its own and the model's code reads one (MiniMax's attention hands `config.sliding_window`
    to every layer). Layers that hold None (dots1's, Mellum's full layers) say there is none."""
    try:
        window = getattr(config, "sliding_window", None)
    except Exception:  # noqa: BLE001 - a per-layer config (transformers' heterogeneous ones) refuses a global read
        window = None
    held = _held_windows(model) if model is not None else None
    if held:
        return min(held)
    if not window or getattr(config, "use_sliding_window", True) is False:
        return None
    layer_types = getattr(config, "layer_types", None)
    if not layer_types or any("sliding" in str(kind) for kind in layer_types):
        return window
    return window if held is None and (model is None or _code_reads_window(model)) else None


def _held_windows(model) -> list[int] | None:
    """The windows the decoder layers' modules hold as `sliding_window` (None: none holds one)."""
    held = [
        vars(m)["sliding_window"]
        for layer in decoder_layers(model)
        for m in layer.modules()
        if "sliding_window" in vars(m)
    ]
    return [int(w) for w in held if w] if held else None


def _code_reads_window(model) -> bool:
    """Whether the model's own code (its modeling module's source) names `sliding_window` at all:
    a window left in a config whose code never reads it (Jamba's, Qwen3-Next's) applies nowhere."""
    module = sys.modules.get(type(model).__module__)
    path = getattr(module, "__file__", None)
    try:
        with open(path or "", encoding="utf-8") as f:
            return "sliding_window" in f.read()
    except OSError:
        return True  # no source to read: as if it did (the window caps sequences: the safe side)
