"""Decoder scoring (`seq-cls`, `causal-lm`): a prefix and items through a template, packed into
MIS or single-item sequences, run under scorecli's attention backends, a head at item ends (the
kind's declared head: a classifier's labels, or label tokens of the LM head).

The two kinds' detection (the architecture's name), spec rules (label tokens, MIS) and inspect
lines live here too. Knows nothing about windows, batching or output (`scorecli.scorer` holds those).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from scorecli.attention import backends as attention_backends
from scorecli.attention import make_backend
from scorecli.core.batching import Batch
from scorecli.core.encode import DecoderEncoder
from scorecli.core.pack import EncodedRow, Seq, check_chunks_fit, pack_row, truncate_items
from scorecli.core.ranking import Chunking, chunk_items
from scorecli.core.templates import Template, load_template
from scorecli.errors import InputError, UsageError, field
from scorecli.kinds import KINDS, Checkpoint, FamilyDefaults, Setup
from scorecli.kinds.heads import ClassifierHead, LabelTokenHead, lm_logit_transform
from scorecli.kinds.probes import decoder_errors, probe_rows
from scorecli.kinds.spec import (
    RunSpec,
    check_room,
    check_texts,
    class_names,
    label_tokens_refused,
    max_seq_len,
    positive_index,
    refuse,
    refuse_apart_flags,
    sequence_limit,
    softmax_of_one,
    template_room,
)
from scorecli.model.compat import backend_for, check_backend, state_forked, stateful_reason, text_config
from scorecli.model.cross_encoders import DecoderCrossEncoder, read_decoder_cross_encoder
from scorecli.model.messages import pair_template
from scorecli.model.sentence import sentence_folder_type
from scorecli.runtimes import runtime_info
from scorecli.runtimes.compiled import compile_layers
from scorecli.runtimes.forward import DecoderForward
from scorecli.runtimes.fused_norms import fuse_norms

# the architecture names each decoder kind is detected by
_ARCHITECTURES = {
    "seq-cls": ("ForSequenceClassification", "ForRewardModel"),
    "causal-lm": ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration"),
}


class DecoderFamily(FamilyDefaults):
    """How a decoder kind scores rows (see `scorecli.kinds.Family`)."""

    @classmethod
    def detects(cls, kind: str, checkpoint: Checkpoint) -> bool:
        archs = checkpoint.architectures
        return not checkpoint.encoder and bool(archs) and archs[0].endswith(_ARCHITECTURES[kind])

    @classmethod
    def read_folder(cls, kind: str, path: str) -> DecoderCrossEncoder | None:
        """None (the folder is the model), or a sentence-transformers 6 CrossEncoder folder around
        the decoder (a causal LM and its LogitScore, or a sequence classifier): how its pairs are
        rendered and scored (`read_decoder_cross_encoder`)."""
        if sentence_folder_type(path) != "CrossEncoder":
            return None
        return read_decoder_cross_encoder(path, causal=KINDS[kind].label_tokens)

    @classmethod
    def template(cls, kind: str, cfg, loaded) -> Template:
        """`--template`'s; a CrossEncoder folder's pairs as `CrossEncoder.predict` renders them
        (`pair_template`: its chat template or text pairs, its default prompt)."""
        folder = loaded.sentence
        if folder is None:
            return load_template(cfg.template, loaded.tokenizer)
        if cfg.template != "plain":
            raise UsageError(
                f"--template {cfg.template}: this sentence-transformers CrossEncoder folder renders its (query, "
                "document) pairs itself, as CrossEncoder.predict does; leave --template out"
            )
        return pair_template(loaded.tokenizer, folder.message, loaded.config.model_type, folder.prompt, loaded.path)

    @classmethod
    def resolve(cls, kind: str, cfg, loaded, template, support) -> RunSpec:
        mis = cfg.mode != "single" and support.packed
        if cfg.mode == "mis" and not support.packed:
            check_backend(support, cfg.attention, mis=True)
        refuse_apart_flags(kind, cfg, template)
        check_texts(cfg)
        folder = loaded.sentence  # a CrossEncoder folder (`read_folder`), or None
        logit_score = folder is not None and KINDS[kind].label_tokens
        if logit_score:
            label_ids, names = folder.label_ids, ("score",)
            refuse(
                [
                    (
                        cfg.label_tokens is not None or cfg.label_token_ids is not None,
                        "--label-tokens/--label-token-ids: this CrossEncoder folder's LogitScore module names "
                        "the tokens it scores",
                    ),
                    (
                        cfg.activation == "softmax",
                        "--activation softmax: this CrossEncoder folder gives one score (LogitScore's logit "
                        "difference); --activation sigmoid is CrossEncoder.predict's default",
                    ),
                ]
            )
            activation = cfg.activation or "none"
        elif KINDS[kind].label_tokens:
            label_ids, names = label_tokens(cfg, loaded.tokenizer, template)
            activation = cfg.activation or template.activation or "none"
            given = "--activation softmax" if cfg.activation else f"template {template.name}'s activation softmax"
            refuse([softmax_of_one(activation, names, given, tokens=True)])
        else:
            refuse([label_tokens_refused(kind, cfg)])
            label_ids, names = None, class_names(loaded.config)
            activation = cfg.activation or "none"
            refuse([softmax_of_one(activation, names, "--activation softmax", tokens=False)])
        own = folder.max_seq_length if folder is not None else None
        limit = (
            max_seq_len(cfg.max_seq_len, loaded)
            if cfg.max_seq_len or own is None
            else min(own, sequence_limit(loaded.model, loaded.kind))
        )
        return RunSpec(
            kind=kind,
            mis=mis,
            label_ids=label_ids,
            label_names=names,
            activation=activation,
            positive_index=positive_index(cfg.positive_label, names, classes=label_ids is None),
            pooling=cfg.pooling or "last",
            max_seq_len=check_room(
                limit,
                *template_room(loaded.tokenizer, template, cfg.instruction),
                cfg.chunk_tokens,
                given=bool(cfg.max_seq_len),
            ),
            single_reason=support.reason,
            logit_score=logit_score,
        )

    @classmethod
    def scores_line(cls, kind: str, checkpoint: Checkpoint) -> str:
        if checkpoint.folder_type == "CrossEncoder" and KINDS[kind].label_tokens:
            return "the item's last token, then the folder's LogitScore (true token's logit less the false token's)"
        return super().scores_line(kind, checkpoint)

    @classmethod
    def inspect_lines(cls, kind: str, checkpoint: Checkpoint, skeleton, tokenizer) -> tuple[list[str], int | None, str]:
        folder = cls.read_folder(kind, checkpoint.path)
        if folder is not None:
            lines, own = cls._folder_lines(folder, checkpoint, tokenizer)
        elif KINDS[kind].label_tokens:
            lines, own = (
                [
                    "labels:         label tokens: --label-tokens, or a template's own (yes-no-chat, qwen3-reranker: yes,no)"
                ],
                None,
            )
        else:
            names = class_names(checkpoint.config)
            lines, own = [f"labels:         {len(names)}", "label names:    " + ", ".join(names)], None
        reason = stateful_reason(skeleton)
        # whether its attention goes through scorecli's backend takes a forward: `inspect --check` runs it
        if not reason:
            multi = (
                "yes (MIS by default), if its attention goes through transformers' attention interface (--check tells)"
            )
        elif state_forked(skeleton):
            multi = (
                "yes (MIS by default: the prefix runs once and each item from its recurrent state), if its "
                "attention goes through transformers' attention interface (--check tells)"
            )
        else:
            multi = f"no: single-item only ({reason})"
        return lines, own, multi

    @staticmethod
    def _folder_lines(folder: DecoderCrossEncoder, checkpoint: Checkpoint, tokenizer) -> tuple[list[str], int | None]:
        """`inspect`'s lines of a CrossEncoder folder: its labels, how a pair becomes text, the
        split into prefix and item, and its max_seq_length."""
        folder = folder.resolved(folder.transformer_dir, checkpoint.config)
        if folder.label_ids is not None:
            tokens = tokenizer.convert_ids_to_tokens(list(folder.label_ids))
            said = " - ".join(f"logit[{t!r} ({i})]" for t, i in zip(tokens, folder.label_ids))
            lines = [f"labels:         1 (score = {said}; --activation sigmoid is CrossEncoder.predict's default)"]
        else:
            names = class_names(checkpoint.config)
            lines = [f"labels:         {len(names)}", "label names:    " + ", ".join(names)]
        prompt = f"the prompt {folder.prompt!r}" if folder.prompt else "no prompt"
        text = (
            f"the text pair (prompt + query, document); {prompt}"
            if folder.message is None
            else f"a 'query' and a 'document' message through the chat template ({folder.message.format} "
            f"format); {prompt}{' as a system message' if folder.prompt else ''}"
        )
        template = pair_template(
            tokenizer, folder.message, checkpoint.config.model_type, folder.prompt, checkpoint.path
        )
        lines += [
            f"text:           {text} (a sentence-transformers CrossEncoder folder)",
            f"prefix:         {template.prefix!r}",
            f"item:           {template.item!r}",
        ]
        return lines, folder.max_seq_length

    def __init__(self, setup: Setup):
        cfg, loaded, spec, support = setup.config, setup.loaded, setup.spec, setup.support
        if runtime_info(cfg.runtime).encoders_only:
            raise UsageError(
                f"--runtime {cfg.runtime}: it runs BERT-family cross-encoders and embedding models, "
                f"not a {spec.kind} model; use --runtime auto or torch"
            )
        self.loaded, self.spec, self.truncate = loaded, spec, cfg.truncate
        self.pooling = spec.pooling if cfg.pooled_hidden_states else None  # hidden states read
        vocab = loaded.model.get_input_embeddings().num_embeddings
        self.encoder = DecoderEncoder(loaded.tokenizer, setup.template, cfg.instruction, vocab, spec.max_seq_len)
        backend = make_backend(backend_for(support, cfg.attention, spec.mis), loaded.device, loaded.dtype)
        self.backend_name = backend.name
        # a kernel compiled on first use (flashinfer's JIT) fails late: `auto` then switches
        self.fallback = attention_backends.fallback(cfg.attention, backend.name)
        self.forward = DecoderForward(loaded.model, backend, loaded.device, loaded.dtype, support.fork)
        in_graph = attention_backends.capabilities(backend.name).in_graph
        self.compiled = compile_layers(cfg.compile, self.forward.base, loaded.device, cfg.job_tokens, in_graph)
        # compiled layers fuse the norms themselves
        self.fused_norms = fuse_norms(loaded.model, loaded.device) if self.compiled is None else None
        self.padded = backend.is_padded
        # a decoder's first token ("cls" pooling) would sit in the shared part, not in a batch; a
        # fork's prefix states are its batch's own
        self.shares_prefix = (
            cfg.share_prefix
            and self.forward.shares_prefix
            and self.pooling != "cls"
            and support.packed
            and support.fork is None
        )
        self.head = self._make_head()
        # a sequence classifier's own head reads the last token that is not its pad token
        # (transformers' `*ForSequenceClassification`): items are read there too (`_read_where_hf_does`)
        pad = getattr(text_config(loaded.config), "pad_token_id", None) if KINDS[spec.kind].classifier_head else None
        self.pad_id = pad if isinstance(pad, int) else None

    @property
    def speedups(self) -> tuple:
        return tuple(x for x in (self.compiled, self.fused_norms) if x is not None)

    def _make_head(self):
        model, spec = self.loaded.model, self.spec
        if KINDS[spec.kind].head == "label-tokens":
            return LabelTokenHead(
                model.get_output_embeddings(),
                list(spec.label_ids),
                spec.activation,
                *lm_logit_transform(model),
                difference=spec.logit_score,
            )
        score = getattr(model, "score", None) or getattr(model, "classifier", None)
        if not isinstance(score, torch.nn.Linear):
            raise InputError(f"{type(model).__name__}: no linear classifier head (score) found to apply at item ends")
        return ClassifierHead(score, spec.activation)

    @property
    def hidden_width(self) -> int:
        return self.loaded.config.hidden_size if self.pooling else 0

    def prefix(self, enc: EncodedRow) -> np.ndarray:
        """The row's prefix tokens (for a prefix shared by a window's rows)."""
        return enc.prefix

    def pack(self, enc: EncodedRow, where: str, first: int, chunking: Chunking | None) -> tuple[list[Seq], np.ndarray]:
        """The row's sequences, and [items] how many chunks (items of the sequences) each item is."""
        spec = self.spec
        if chunking is None:
            counts = np.ones(len(enc.items), dtype=np.int64)
            enc = truncate_items(enc, spec.max_seq_len, self.truncate, where)
        else:  # every chunk is an item of its own; chunks are never cut
            items, counts = chunk_items(enc.items, enc.suffix_len, chunking)
            enc = replace(enc, items=items)
            check_chunks_fit(enc, counts, spec.max_seq_len, where)
            enc = truncate_items(enc, spec.max_seq_len, "error", where)  # the prefix's and empty items' checks
        if self.pad_id is not None:
            enc = self._read_where_hf_does(enc, where)
        return pack_row(enc, first, spec.mis, spec.max_seq_len), counts

    def _read_where_hf_does(self, enc: EncodedRow, where: str) -> EncodedRow:
        """Items without their trailing pad tokens: the model's own head reads P + I_k at its
        last token that is not the pad token, and under causal attention the tokens after that
        one change nothing before it, so the shorter item is read exactly there. An item of pad
        tokens only, or none, is read at the prefix's last token, unless that is a pad token too (an
        error: the head would read inside the prefix, as no other item is)."""
        pad, items = self.pad_id, []
        for k, item in enumerate(enc.items):
            keep = len(item)
            while keep and item[keep - 1] == pad:
                keep -= 1
            if keep == 0 and (not len(enc.prefix) or enc.prefix[-1] == pad):
                what = (
                    "the item and the end of its prefix are"
                    if len(item)
                    else "the item is empty and the end of its prefix is"
                )
                raise InputError(
                    f"{where}: {field(enc.names, k)}: {what} the model's pad token ({pad}) only: its head would "
                    "read inside the prefix"
                )
            items.append(item[:keep] if keep < len(item) else item)
        return replace(enc, items=items)

    def score_batch(self, batch: Batch, forward=None) -> torch.Tensor:
        pooled = (forward or self.forward)(batch, self.pooling)
        parts = [self.head(pooled.score_states).float()] + (
            [pooled.hidden.float()] if pooled.hidden is not None else []
        )
        return torch.cat(parts, dim=1)

    def use_backend(self, name: str) -> None:
        backend = make_backend(name, self.loaded.device, self.loaded.dtype)
        self.forward.backend, self.backend_name = backend, backend.name

    def probe_errors(self, scorer) -> dict[str, float]:
        return decoder_errors(scorer, probe_rows(self.loaded.tokenizer, self.spec.max_seq_len))


def label_tokens(cfg, tokenizer, template) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """(ids, names) of a causal LM's label tokens: `--label-token-ids`, else `--label-tokens` or the
    template's, each of which must encode to exactly one token."""
    if cfg.label_token_ids is not None:
        vocab = len(tokenizer)
        bad = [i for i in cfg.label_token_ids if not 0 <= i < vocab]
        if bad:
            raise UsageError(f"--label-token-ids: {bad[0]} is outside the vocabulary (size {vocab})")
        names = tuple(tokenizer.convert_ids_to_tokens(list(cfg.label_token_ids)))
        return _distinct(tuple(cfg.label_token_ids), names, "--label-token-ids"), names
    tokens = cfg.label_tokens or template.label_tokens
    if not tokens:
        raise UsageError("a causal-lm model needs label tokens: pass --label-tokens yes,no (or --label-token-ids)")
    # where they come from, as the refusals name it: the flag, or the template the user did not override
    given = "--label-tokens" if cfg.label_tokens else f"template {template.name}'s label_tokens"
    ids = []
    for token in tokens:
        encoded = tokenizer.encode(token, add_special_tokens=False)
        if len(encoded) != 1:
            more = "" if cfg.label_tokens else " (give --label-tokens or --label-token-ids)"
            raise UsageError(f"{given}: {token!r} is {len(encoded)} tokens {encoded}, not exactly one{more}")
        ids.append(encoded[0])
    return _distinct(tuple(ids), tuple(tokens), given), tuple(tokens)


def _distinct(ids: tuple[int, ...], names: tuple[str, ...], flag: str) -> tuple[int, ...]:
    """`ids`, unless two labels are one token: their logits are the same, a softmax over them a
    constant (0.5 for two) and `--positive-label` ambiguous."""
    for i, token in enumerate(ids):
        if token in ids[:i]:
            j = ids.index(token)
            raise UsageError(
                f"{flag}: {names[j]!r} and {names[i]!r} are the same token ({token}): every label must be its own token"
            )
    return ids
