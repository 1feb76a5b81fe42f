"""Read sentence-transformers 6 folders whose models keep token states: a `MultiVectorEncoder`
(token vectors: Transformer, token-level Dense, MultiVectorMask, Normalize; also a Stanford
`HF_ColBERT` checkpoint as sentence-transformers reads it) and a `SparseEncoder` (an MLM
Transformer and SpladePooling, or a `Router` whose query side is a `SparseStaticEmbedding`).

Everything comes from the folder's own files, as sentence-transformers 6.2 reads them; it is never
imported. A module or setting scorecli does not reproduce is refused with one line naming it.
This module knows nothing about rows, batches or scores.
"""

from __future__ import annotations

import dataclasses
import os
import string
from dataclasses import dataclass, field

import torch

from scorecli.errors import UsageError
from scorecli.model.sentence import (
    Dense,
    SentenceModules,
    apply_lower_case,
    read_dense,
    router_routes,
)
from scorecli.model.st_files import MODULES_FILE, SAME_IDS, check_load_kwargs, json_file, transformer_config


@dataclass(frozen=True)
class Expansion:
    """ColBERT query expansion: queries padded with `token` (None: the mask token) up to `length`
    tokens (`fixed`: also cut to it), the padding scored but, unless `attend`, not attended to."""

    fixed: bool
    attend: bool
    token: str | None
    length: int


@dataclass(frozen=True)
class TokenFolder:
    """What both folder types share: the transformer, how text is read, and the similarity."""

    transformer_dir: str
    prompts: dict[str, str] = field(default_factory=dict)
    query_length: int | None = None  # the Transformer's per-task cuts (None: max_seq_length)
    document_length: int | None = None
    max_seq_length: int | None = None
    do_lower_case: bool = False
    similarity: str | None = None  # the folder's `similarity_fn_name`
    default_prompt: str | None = None  # never used by encode_query / encode_document (kept for prompt_text)
    message = None  # no chat messages (refused when read)
    include_prompt = True  # a prompt's tokens are scored like the text's

    def lengths(self) -> tuple[int, int]:
        """(query, document) cuts in tokens."""
        limit = self.max_seq_length or 512
        return self.query_length or limit, self.document_length or limit

    def resolved(self, folder: str, hf_config) -> TokenFolder:
        """With `max_seq_length` as sentence-transformers settles it (`SentenceModules.resolved`)."""
        own = SentenceModules(folder, ("mean",), True, (), max_seq_length=self.max_seq_length)
        return dataclasses.replace(self, max_seq_length=own.resolved(folder, hf_config).max_seq_length)

    def to(self, device: torch.device) -> TokenFolder:
        return self

    def adapt_tokenizer(self, tokenizer) -> None:
        if self.do_lower_case:
            apply_lower_case(tokenizer)


@dataclass(frozen=True)
class MultiVectorFolder(TokenFolder):
    """A MultiVectorEncoder: token vectors through `dense` (then L2-normalized when `normalize`),
    scored where the mask says (skip-list words dropped for `skiplist_tasks`, `keep_only` ids kept
    on the document side), compared by MaxSim (or MeanMaxSim)."""

    expansion: Expansion | None = None
    dense: tuple[Dense, ...] = ()
    normalize: bool = False
    skiplist: tuple[str, ...] = ()
    skiplist_tasks: tuple[str, ...] = ("document",)
    keep_only: tuple[int, ...] | None = None
    register: tuple[str, ...] = ()  # a legacy checkpoint's prefix markers, made special tokens

    def dimension(self, hidden_size: int) -> int:
        return self.dense[-1].weight.shape[0] if self.dense else hidden_size

    def to(self, device: torch.device) -> MultiVectorFolder:
        return dataclasses.replace(self, dense=tuple(d.to(device) for d in self.dense))

    def adapt_tokenizer(self, tokenizer) -> None:
        """Lower case as the folder says; a legacy prefix marker the tokenizer would split (e.g.
        `[unused0]`) becomes one special token, as sentence-transformers registers it."""
        super().adapt_tokenizer(tokenizer)
        from transformers import AddedToken

        added = set(getattr(tokenizer, "added_tokens_encoder", None) or {})
        vocab = tokenizer.get_vocab()
        register = []
        for value in self.register:
            if not value or not value.split():
                continue
            for prefix in (value, value.split(None, 1)[0]):
                if prefix not in added and prefix not in vocab:
                    continue
                if tokenizer.tokenize(prefix) != [prefix]:
                    register.append(AddedToken(prefix, normalized=False, special=True))
                break
        if register:
            tokenizer.add_special_tokens({"additional_special_tokens": register})

    def skip_ids(self, tokenizer) -> list[int]:
        """The skip-list's token ids (words that are no single token are left out, as
        sentence-transformers leaves them out)."""
        unk, ids = getattr(tokenizer, "unk_token_id", None), []
        for word in self.skiplist:
            token = tokenizer.convert_tokens_to_ids(word)
            if unk is None or token != unk or word == tokenizer.unk_token:
                ids.append(int(token))
        return ids


@dataclass(frozen=True)
class SparseFolder(TokenFolder):
    """A SparseEncoder: SPLADE pooling (`pooling` max or sum of `activation`) of the MLM logits,
    and for queries, when `static_query` names a folder, a `SparseStaticEmbedding` instead."""

    pooling: str = "max"
    activation: str = "relu"
    static_query: str | None = None
    max_active_dims: int | None = None


def _entries(path: str) -> tuple[list[dict], list[str]]:
    entries = sorted(json_file(os.path.join(path, MODULES_FILE), path), key=lambda e: e.get("idx", 0))
    return entries, [str(e.get("type", "")).rsplit(".", 1)[-1] for e in entries]


def _transformer(path: str, where: str, task: str, output: str) -> dict:
    """The Transformer module's `sentence_bert_config.json`, refused unless it reads plain text
    as `task` into `output` with the tokenizer's own settings."""
    bert = transformer_config(where, path)
    assert isinstance(bert, dict)
    modalities = bert.get("modality_config") or {"text": {"method_output_name": output}}
    reads = (modalities.get("text") or {}).get("method_output_name")
    if bert.get("transformer_task", task) != task or set(modalities) != {"text"} or reads != output:
        raise UsageError(
            f"cannot load model {path}: its Transformer reads {', '.join(modalities)} as "
            f"{bert.get('transformer_task')!r}; scorecli reads text as {task!r} ({output})"
        )
    check_load_kwargs(bert, path)
    for bucket, kwargs in (bert.get("processing_kwargs") or {}).items():
        changed = sorted(k for k in (kwargs or {}) if k not in SAME_IDS)
        if changed:
            raise UsageError(f"cannot load model {path}: its processing_kwargs set {bucket}.{changed[0]}")
    return bert


def _common(path: str, transformer_dir: str, bert: dict) -> dict:
    st = json_file(os.path.join(path, "config_sentence_transformers.json"), path, missing_ok=True)
    assert isinstance(st, dict)
    return {
        "transformer_dir": transformer_dir,
        "prompts": {str(k): str(v) for k, v in (st.get("prompts") or {}).items() if v is not None},
        "query_length": bert.get("query_length"),
        "document_length": bert.get("document_length"),
        "max_seq_length": bert.get("max_seq_length"),
        "do_lower_case": bool(bert.get("do_lower_case", False)),
        "similarity": st.get("similarity_fn_name"),
    }


def _expansion(config: dict | None) -> Expansion | None:
    if not config:
        return None
    return Expansion(
        config.get("strategy") == "fixed", bool(config.get("attend", False)), config.get("token"), config["length"]
    )


# the top-level settings of a PyLate save that mark it as one (sentence-transformers' `_LegacyStash`)
_PYLATE_MARKERS = (
    "query_length",
    "document_length",
    "query_expansion",
    "do_query_expansion",
    "attend_to_expansion_tokens",
    "attend_to_mask_tokens",
    "query_prefix",
    "document_prefix",
    "skiplist_words",
)


def _pylate(st: dict, bert: dict) -> dict:
    """What a PyLate save's top-level config says, as sentence-transformers 6 reads it: its query and
    document prefixes composed onto the prompts (and registered as special tokens), and its lengths
    and query expansion, unless the Transformer's own saved config names them."""
    prompts, register = {str(k): str(v) for k, v in (st.get("prompts") or {}).items() if v is not None}, []
    for key, role in (("query_prefix", "query"), ("document_prefix", "document")):
        if key in st:
            prefix = st[key] or ""
            register.append(prefix)
            prompts[role] = prefix + (prompts.get(role) or "").removeprefix(prefix)
    knobs = {k: st[k] for k in ("query_length", "document_length", "query_expansion") if k in st}
    knobs = {k: v for k, v in knobs.items() if v is not None or k == "query_expansion"}
    if "query_expansion" not in knobs and any(k in st for k in _PYLATE_MARKERS):
        if st.get("do_query_expansion") is False:
            knobs["query_expansion"] = None
        else:
            attend = st.get("attend_to_expansion_tokens", st.get("attend_to_mask_tokens"))
            length = knobs.pop("query_length", None) or st.get("query_length") or 32
            knobs["query_expansion"] = {"strategy": "fixed", "attend": bool(attend), "length": length}
    out = {k: bert[k] if k in bert else knobs.get(k) for k in ("query_length", "document_length")}
    out["expansion"] = _expansion(
        bert["query_expansion"] if "query_expansion" in bert else knobs.get("query_expansion")
    )
    return {**out, "prompts": prompts, "register": tuple(register)}


def read_multi_vector(path: str, stanford: bool) -> MultiVectorFolder:
    """A MultiVectorEncoder folder (`stanford`: a Stanford `HF_ColBERT` checkpoint instead); a PyLate
    save (`model_type` ColBERT, modules Transformer and Dense) as sentence-transformers 6 completes it."""
    if stanford:
        return _read_stanford(path)
    entries, kinds = _entries(path)
    if not kinds or kinds[0] != "Transformer":
        raise UsageError(f"cannot load model {path}: its first module is {kinds[:1] or 'none'}, not a Transformer")
    transformer_dir = os.path.join(path, entries[0].get("path") or "")
    bert = _transformer(path, transformer_dir, "feature-extraction", "last_hidden_state")
    dense, normalize, mask = [], False, None
    for entry, kind in zip(entries[1:], kinds[1:]):
        where = os.path.join(path, entry.get("path") or "")
        if kind == "Dense":
            dense.append(read_dense(where, on="token_embeddings"))
        elif kind == "Normalize" and not normalize:
            normalize = True
        elif kind == "MultiVectorMask" and mask is None:
            mask = json_file(os.path.join(where, "config.json"), path)
        else:
            raise UsageError(
                f"cannot load model {path}: its module {entry.get('type')} is not one scorecli reproduces "
                "(it applies token-level Dense, MultiVectorMask and Normalize)"
            )
    st = json_file(os.path.join(path, "config_sentence_transformers.json"), path, missing_ok=True)
    assert isinstance(st, dict)
    if st.get("model_type") == "ColBERT":  # PyLate 3: the mask and the token-level Normalize were inline
        words = st.get("skiplist_words")
        mask, normalize = {"skiplist_words": list(string.punctuation) if words is None else words}, True
    mask = mask if isinstance(mask, dict) else {}
    tasks = mask.get("skiplist_tasks") or ["document"]
    keep = mask.get("keep_only_token_ids")
    return MultiVectorFolder(
        **{**_common(path, transformer_dir, bert), **_pylate(st, bert)},
        dense=tuple(dense),
        normalize=normalize,
        skiplist=tuple(mask.get("skiplist_words") or ()),
        skiplist_tasks=tuple([tasks] if isinstance(tasks, str) else tasks),
        keep_only=tuple(int(k) for k in keep) if keep else None,  # an empty allow-list keeps every token
    )


def _read_stanford(path: str) -> MultiVectorFolder:
    """A Stanford ColBERT checkpoint: its projection `linear.weight` beside the encoder's weights,
    its settings in `artifact.metadata` (markers, lengths, punctuation), as sentence-transformers
    6 builds a MultiVectorEncoder of it."""
    meta = json_file(os.path.join(path, "artifact.metadata"), path, missing_ok=True)
    assert isinstance(meta, dict)
    weights = os.path.join(path, "model.safetensors")
    if not os.path.isfile(weights):
        raise UsageError(f"cannot load model {path}: no model.safetensors holding the ColBERT projection")
    markers = {
        "query": (meta.get("query_token_id") or "[unused0]") + " ",
        "document": (meta.get("doc_token_id") or "[unused1]") + " ",
    }
    expansion = Expansion(True, bool(meta.get("attend_to_mask_tokens")), None, meta.get("query_maxlen") or 32)
    return MultiVectorFolder(
        path,
        prompts=markers,
        document_length=meta.get("doc_maxlen"),
        expansion=expansion,
        dense=(read_dense(path, on="token_embeddings", weights=weights),),
        normalize=True,
        skiplist=tuple(string.punctuation) if meta.get("mask_punctuation", True) else (),
        register=tuple(markers.values()),
    )


def read_sparse(path: str) -> SparseFolder:
    """A SparseEncoder folder: [Transformer (fill-mask), SpladePooling], or a Router whose document
    route is those and whose query route is a SparseStaticEmbedding (or the same)."""
    entries, kinds = _entries(path)
    static = None
    if kinds == ["Router"]:
        where = os.path.join(path, entries[0].get("path") or "")
        routes, config = router_routes(where), json_file(os.path.join(where, "router_config.json"), path)
        types = {str(k): str(v).rsplit(".", 1)[-1] for k, v in (config.get("types") or {}).items()}  # type: ignore[union-attr]
        document, query = routes.get("document", []), routes.get("query", [])
        static = os.path.join(where, query[0]) if query != document else None
        entries = [{"path": os.path.relpath(os.path.join(where, p), path)} for p in document]
        kinds = [types.get(p, "") for p in document]
        if static is not None and [types.get(p) for p in query] != ["SparseStaticEmbedding"]:
            raise UsageError(
                f"cannot load model {path}: its query route {', '.join(query)} is not one scorecli reproduces "
                "(a SparseStaticEmbedding, or the document route)"
            )
    if kinds[:1] not in (["Transformer"], ["MLMTransformer"]) or kinds[1:] != ["SpladePooling"]:
        raise UsageError(
            f"cannot load model {path}: scorecli reads SparseEncoder folders of an MLM Transformer and "
            f"SpladePooling; this one has {', '.join(kinds) or 'none'}"
        )
    transformer_dir = os.path.join(path, entries[0].get("path") or "")
    bert = _transformer(path, transformer_dir, "fill-mask", "logits")
    splade = json_file(os.path.join(path, entries[1].get("path") or "", "config.json"), path)
    assert isinstance(splade, dict)
    st = json_file(os.path.join(path, "config_sentence_transformers.json"), path, missing_ok=True)
    assert isinstance(st, dict)
    return SparseFolder(
        **_common(path, transformer_dir, bert),
        pooling=splade.get("pooling_strategy", "max"),
        activation=splade.get("activation_function", "relu"),
        static_query=static,
        max_active_dims=st.get("max_active_dims"),
    )


def static_weights(folder: str) -> torch.Tensor:
    """[vocab] float32: a SparseStaticEmbedding's weight per token id."""
    from safetensors.torch import load_file

    files = [f for f in ("model.safetensors",) if os.path.isfile(os.path.join(folder, f))]
    if not files:
        raise UsageError(f"cannot load model {folder}: its SparseStaticEmbedding has no model.safetensors weights")
    return load_file(os.path.join(folder, files[0]))["weight"].float()
