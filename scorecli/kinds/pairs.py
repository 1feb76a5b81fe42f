"""Pair scoring (`cross-encoder`): each (query, item) pair tokenized as the model was trained,
one padded sequence per pair, scored by the model's own classifier.

Its detection (an encoder architecture), spec rules and inspect lines live here too. Knows
nothing about windows, batching or output (`scorecli.scorer` holds those).
"""

from __future__ import annotations

import numpy as np
import torch

from scorecli.attention.backends import capabilities
from scorecli.core.batching import Batch
from scorecli.core.encode import EncodedPairs, PairEncoder
from scorecli.core.pack import Seq
from scorecli.core.ranking import Chunking
from scorecli.errors import UsageError
from scorecli.kinds import Checkpoint, FamilyDefaults, Setup
from scorecli.kinds.heads import activate
from scorecli.kinds.probes import pair_errors, pair_scores
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
    softmax_of_one,
)
from scorecli.model.cross_encoders import check_cross_encoder
from scorecli.model.sentence import sentence_folder_type
from scorecli.runtimes import auto
from scorecli.runtimes import onnx as runtime_onnx
from scorecli.runtimes.fast_encoder import supports
from scorecli.runtimes.forward import EncoderForward
from scorecli.runtimes.route import Pending, Routed

# Cross-encoders on a CPU run this many batches at once, each on its share of torch's threads:
# small models' matrix products use the cores better one thread each than split across all
# of them (MiniLM on 2 cores: 1.16x over one stream of 2 threads, benchmarks/bench_cpu_streams.py).
CPU_STREAMS = 2


class PairFamily(FamilyDefaults):
    """How a cross-encoder scores rows (see `scorecli.kinds.Family`)."""

    padded = True

    @classmethod
    def detects(cls, kind: str, checkpoint: Checkpoint) -> bool:
        return checkpoint.encoder

    @classmethod
    def read_folder(cls, kind: str, path: str) -> None:
        """None (the folder is the model): a sentence-transformers 6 CrossEncoder folder whose
        settings it would not reproduce is refused (`check_cross_encoder`)."""
        if sentence_folder_type(path) == "CrossEncoder":
            check_cross_encoder(path)

    @classmethod
    def resolve(cls, kind: str, cfg, loaded, template, support) -> RunSpec:
        if cfg.mode == "mis":
            raise UsageError(
                "--mode mis: a cross-encoder attends bidirectionally, so items would see each other; use --mode single"
            )
        if not template.is_plain:
            raise UsageError(
                f"--template {cfg.template}: templates apply to decoder models; cross-encoders score (query, item) pairs"
            )
        refuse_apart_flags(kind, cfg, template)
        check_texts(cfg)
        refuse([label_tokens_refused(kind, cfg)])
        names = class_names(loaded.config)
        refuse([softmax_of_one(cfg.activation or "none", names, "--activation softmax", tokens=False)])
        taken = loaded.tokenizer.num_special_tokens_to_add(pair=True)
        return RunSpec(
            kind=kind,
            mis=False,
            label_ids=None,
            label_names=names,
            activation=cfg.activation or "none",
            positive_index=positive_index(cfg.positive_label, names),
            pooling=cfg.pooling or "cls",
            max_seq_len=check_room(
                max_seq_len(cfg.max_seq_len, loaded),
                taken,
                "the (query, item) pair's special tokens",
                cfg.chunk_tokens,
                given=bool(cfg.max_seq_len),
            ),
        )

    @classmethod
    def inspect_lines(cls, kind: str, checkpoint: Checkpoint, skeleton, tokenizer) -> tuple[list[str], int | None, str]:
        names = class_names(checkpoint.config)
        lines = [f"labels:         {len(names)}", "label names:    " + ", ".join(names)]
        return lines, None, "no (bidirectional encoder: single-item)"

    def __init__(self, setup: Setup):
        cfg, loaded = setup.config, setup.loaded
        self.loaded, self.spec = loaded, setup.spec
        self.pooling = self.spec.pooling if cfg.pooled_hidden_states else None  # hidden states read
        self.encoder = PairEncoder(loaded.tokenizer, self.spec.max_seq_len, cfg.truncate)
        fast = capabilities(cfg.attention).fused_encoder and loaded.fact("fused_encoder", supports)
        why_not = (
            None if self.pooling in (None, "cls") else f"it reads the [CLS] row only, not --pooling {self.pooling}"
        )
        self.runtime, self.runtime_reason, self.forward = open_runtime(
            setup, fast, why_not, "pairs", lambda: EncoderForward(loaded.model, loaded.device, fast=fast)
        )
        self.streams: list = []
        if loaded.device.type == "cpu":  # used when torch has a thread for each (`Scorer.run`)
            self.streams = [self.forward] + [self.forward.twin() for _ in range(CPU_STREAMS - 1)]
        self.backend_name = backend_name(self.forward, self.runtime, "sdpa (fused encoder)" if fast else "model")
        if setup.chunking is not None:
            _ = self.encoder.layout  # a tokenizer whose pairs cannot be rebuilt from ids fails now

    @property
    def needs_check(self) -> bool:
        """Whether scorecli computes anything the model's own forward would not (its fused encoder)."""
        return self.backend_name != "model"

    @property
    def hidden_width(self) -> int:
        return self.loaded.config.hidden_size if self.pooling else 0

    def pack(
        self, enc: EncodedPairs, where: str, first: int, chunking: Chunking | None
    ) -> tuple[list[Seq], np.ndarray]:
        """One sequence per pair (per chunk when chunked), and [items] pairs of each item."""
        return enc.seqs(first), enc.chunk_counts()

    def score_batch(self, batch: Batch, forward=None) -> torch.Tensor:
        pooled = (forward or self.forward)(batch, self.pooling)
        scores = activate(pooled.logits, self.spec.activation)
        parts = [scores.float()] + ([pooled.hidden.float()] if pooled.hidden is not None else [])
        return torch.cat(parts, dim=1)

    def use_backend(self, name: str) -> None:
        raise RuntimeError("a cross-encoder runs its own attention: no backend to switch")

    def probe_errors(self, scorer) -> dict[str, float] | None:
        """None when the probe's pairs do not fit --max-seq-len."""
        return pair_errors(scorer)

    def probe_scores(self, scorer, items: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray] | None:
        """(the run's, the model's own) scores [items, labels] of the probe query with `items`."""
        return pair_scores(scorer, items)


def open_runtime(setup: Setup, fast: bool, why_not: str | None, what: str, make_torch) -> tuple[str, str, object]:
    """(runtime, why, forward) of an encoder family (`what`: pairs or texts): ONNX Runtime's or
    the torch forward `make_torch` builds, as `--runtime` asks; under `auto` the one measured
    faster here (`runtimes.auto`)."""

    cfg, loaded = setup.config, setup.loaded
    runtime, reason = runtime_onnx.choose(cfg, loaded, fast, why_not)
    streams = auto.run_streams(CPU_STREAMS)
    threads = auto.stream_threads(CPU_STREAMS)
    folder = loaded.folder

    def call(forward, batch):
        return forward(batch, None) if what == "pairs" else forward(batch)

    runtime, forward, reason = auto.settle(
        cfg,
        runtime,
        reason,
        lambda: runtime_onnx.open_forward(runtime, cfg, loaded, what, threads),
        make_torch,
        call,
        lambda: auto.record_path(runtime_onnx.cache_path(folder, cfg.cache_dir, what), threads, streams),
        lambda: auto.probe_batches(loaded.model, setup.spec.max_seq_len, what == "pairs"),
        threads,
        streams,
        lazy_torch=not loaded.built,  # a model not built yet is built when a batch first needs torch
    )
    longest = setup.spec.max_seq_len
    if isinstance(forward, Routed) and forward.route.second is not None and forward.route.cut >= longest:
        # no sequence of this run is longer than the cut: only the first runtime runs, and the
        # metadata (`runtime`, `attention`) names it alone
        first = forward.route.first
        reason = f"{reason}; no sequence here is over {longest} tokens (--max-seq-len): {first} alone"
        alone = forward.forwards[first]
        return first, cfg.runtime_reason or reason, alone.make() if isinstance(alone, Pending) else alone
    return runtime, cfg.runtime_reason or reason, forward


def backend_name(forward, runtime: str, torch_name: str) -> str:
    """What the metadata's `attention` says ran the forward of `runtime` (`open_runtime`), where
    torch's forward is `torch_name`: each runtime's, and where each ran when `auto` routed
    batches by length (`runtimes.route`)."""
    names = runtime_onnx.BACKEND_NAMES | {"torch": torch_name}
    if isinstance(forward, Routed) and forward.route.second is not None:
        route = forward.route
        return f"{names[route.first]} up to {route.cut} tokens, {names[route.second]} beyond"
    return names.get(runtime, torch_name)
