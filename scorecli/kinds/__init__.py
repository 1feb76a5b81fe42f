"""Model kinds: each kind decided once, at load, into one object (its "family").

A family owns what differs between kinds: how rows become sequences (`encode`, `pack`), how a
batch runs (`forward`, `score_batch`), how a batch's states become scores, and what the start-up
self-check compares against (`probe_errors`). The `Scorer` holds only what every kind shares
(windows, the batch loop, OOM halving, the `auto` fallback, the output table) and never asks
which kind it runs. Families:
  - `decoder.DecoderFamily`: `seq-cls` and `causal-lm` (MIS or single-item sequences, a head at
    item ends, scorecli's attention backends);
  - `pairs.PairFamily`: `cross-encoder` ((query, item) pairs, the model's own classifier);
  - `embedding.EmbeddingFamily`: `embedding` (query and items embedded apart, then compared).
This package knows nothing about files, progress or the command line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from scorecli.core.batching import Batch, plan_batches
from scorecli.core.pack import Seq
from scorecli.core.ranking import Chunking, last_chunks
from scorecli.core.templates import NEEDS_TOKENIZER, Template, load_template

if TYPE_CHECKING:
    import torch

    from scorecli.runtimes import Speedup


class Family(Protocol):
    """What a kind provides to the `Scorer`.

    Attributes:
        encoder: tokenizes a window of rows (`encode(rows, wheres, chunking)`).
        forward: runs batches (CPU streams run `twin()`s of it, when `streams` is set).
        streams: forwards that may run batches concurrently on CPU (empty: one at a time).
        backend_name: what runs attention, for the metadata.
        padded: whether batches pay for their padding in the token budget.
        shares_prefix: whether a prefix every row of a window starts with may be run once.
        fallback: the backend `--attention auto` switches to if its choice fails (or None).
        hidden_width: columns of `pooled_hidden_states` (0: none asked).
        entry_width: columns of a batch's result per entry (`score_batch`).
        needs_check: whether the start-up self-check applies (scorecli computes something the
            model's own forward would not).
    """

    encoder: Any  # each family's own encoder and forward classes (attributes: any type held here)
    forward: Any
    backend_name: str
    padded: bool
    shares_prefix: bool
    fallback: str | None

    @property
    def streams(self) -> Sequence: ...

    @property
    def hidden_width(self) -> int: ...

    @property
    def entry_width(self) -> int: ...

    @property
    def needs_check(self) -> bool: ...

    def prefix(self, enc) -> np.ndarray:
        """The row's prefix tokens, for a prefix shared by a window's rows (`shares_prefix`)."""
        ...

    def pack(self, enc, where: str, first: int, chunking: Chunking | None) -> tuple[list[Seq], np.ndarray]:
        """A row's sequences (entries numbered from `first`) and [items] chunks of each item."""
        ...

    def plan(
        self, seqs: list[Seq], lengths: np.ndarray, max_batch_tokens: int, item_offsets: np.ndarray, chunks
    ) -> tuple[list[np.ndarray], Any]:
        """A window's batches in the order they run (index arrays into `seqs`, whose `lengths` the
        budget counts), and what the family needs back when the window runs (`begin`; None)."""
        ...

    def begin(self, planned: Any) -> None:
        """The window `plan` gave `planned` for starts running; its batches follow in plan order."""
        ...

    def score_batch(self, batch: Batch, forward=None) -> torch.Tensor:
        """[entries of the batch, labels + hidden] float32 where it was computed (a GPU's results
        are read back once per window), in `batch.item_index` order."""
        ...

    def finish(self, out: np.ndarray, item_offsets: np.ndarray, chunks: np.ndarray | None) -> np.ndarray:
        """The window's entries' results -> [items (chunks of items, when chunked), labels + hidden]
        (identity unless a kind scores items from several entries, as `embedding` does)."""
        ...

    def done_entries(self, item_offsets: np.ndarray, chunks: np.ndarray | None) -> np.ndarray | None:
        """[entries] bool: the entries whose batch completes an item, for progress (None: all)."""
        ...

    def use_backend(self, name: str) -> None:
        """Run later batches with attention backend `name` (the `auto` fallback)."""
        ...

    def probe_errors(self, scorer) -> dict[str, float] | None:
        """The self-check: relative differences from the model's own forward (None: no probe fits)."""
        ...

    def probe_scores(self, scorer, items: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray] | None:
        """(the run's, the model's own) scores of a probe row with `items`, for the drift of an
        approximate runtime (`drift`; kinds that run `--runtime onnx-int8` only)."""
        ...

    @property
    def speedups(self) -> tuple[Speedup, ...]:
        """Speed-ups wrapped around the model's modules (compiled layers, fused norms): the
        self-check's reference pauses them, and one that fails the check is put back."""
        ...


class FamilyDefaults:
    """What most families share: one entry per scored item (or chunk), no shared prefix; and the
    hooks a kind's family answers for its kinds before a model loads (class methods, `kind` one of
    the kinds naming the family in `KINDS`): `detects` (detection), `read_folder` (modules after
    the transformer), `template` (how rows become text), `resolve` (spec rules), `inspect_lines` and `scores_line` (`scorecli
    inspect`)."""

    @classmethod
    def detects(cls, kind: str, checkpoint: Checkpoint) -> bool:
        """Whether `checkpoint` is a model of `kind` (kinds are asked in `KINDS` order)."""
        return False

    @classmethod
    def read_folder(cls, kind: str, path: str) -> Any | None:
        """What the folder `path` applies after its transformer, with `transformer_dir`, `resolved`,
        `to` and `adapt_tokenizer` (`model.sentence.SentenceModules`); None: the folder is the model."""
        return None

    @classmethod
    def template(cls, kind: str, cfg, loaded) -> Any:
        """The run's `core.templates.Template`: `--template`'s (a folder may say how it renders
        its pairs itself). A kind that takes no template refuses any but `plain` by name; a preset
        built from the model's chat template is not built for it, so that a tokenizer without one
        does not answer first (pointing at other templates, refused in turn)."""
        if cfg.template in NEEDS_TOKENIZER:
            return Template(cfg.template, "{query}", "{item}")
        return load_template(cfg.template, loaded.tokenizer)

    @classmethod
    def resolve(cls, kind: str, cfg, loaded, template, support) -> Any:
        """The run's `kinds.spec.RunSpec` from the flags, the loaded model and the template:
        flags of other kinds refused in one line (UsageError)."""
        raise NotImplementedError

    @classmethod
    def inspect_lines(cls, kind: str, checkpoint: Checkpoint, skeleton, tokenizer) -> tuple[list[str], int | None, str]:
        """(`inspect` lines after the architecture: labels and what else the kind reads from the
        folder, with its `tokenizer`; the longest sequence the kind's own config allows (None: the
        model's); whether MIS applies, for the "multi-item" line)."""
        raise NotImplementedError

    @classmethod
    def scores_line(cls, kind: str, checkpoint: Checkpoint) -> str:
        """`inspect`'s "scores:" line: the kind's pooling, then its head (`POOLINGS`, `HEADS`);
        a family whose folder settles either says how."""
        info = KINDS[kind]
        return f"{POOLINGS[info.pooling]}, then {HEADS[info.head]}"

    streams: Sequence = ()  # one forward at a time
    spec: Any  # the run's `kinds.spec.RunSpec`, set by each family
    padded: bool  # set by each family

    @property
    def hidden_width(self) -> int:
        raise NotImplementedError

    fallback: str | None = None
    shares_prefix = False
    needs_check = True
    # an entry's result is its sequence's alone, so a window's repeated sequences run once and are
    # copied (`core.repeats`); False where items meet their row's query on the device (`apart`)
    entries_alone = True

    def prefix(self, enc) -> np.ndarray:
        return np.zeros(0, dtype=np.int64)

    def probe_scores(self, scorer, items: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray] | None:
        return None  # only a kind that runs an approximate runtime measures its drift

    # a kind whose entries hold scores of texts compared apart (`kinds.apart`): `reference_entries(seqs)`
    # gives (entries, [entries, 1] float64) of one row's sequences through the model's own forward,
    # each item's (chunk's) score against its query, the query's entry 0 (`--audit`); None: the
    # audit runs the kind's references itself (decoders, pairs, embeddings)
    reference_entries: Any = None

    speedups: tuple[Speedup, ...] = ()

    def plan(
        self, seqs: list[Seq], lengths: np.ndarray, max_batch_tokens: int, item_offsets: np.ndarray, chunks
    ) -> tuple[list[np.ndarray], Any]:
        # longest first, under the budget; even in a window of few batches where CPU streams run them
        return plan_batches(lengths, max_batch_tokens, self.padded, len(self.streams)), None

    def begin(self, planned: Any) -> None:
        return None

    def finish(self, out: np.ndarray, item_offsets: np.ndarray, chunks: np.ndarray | None) -> np.ndarray:
        return out

    def done_entries(self, item_offsets: np.ndarray, chunks: np.ndarray | None) -> np.ndarray | None:
        return None if chunks is None else last_chunks(chunks)  # an item is done with its last chunk

    @property
    def entry_width(self) -> int:
        return len(self.spec.label_names) + self.hidden_width


@dataclass(frozen=True)
class KindInfo:
    """What a kind declares: its family, its two parts, and what the code that loads its models
    (`model.load`), `bench` and `inspect` ask of it. Everything else about a kind (its spec rules,
    detection, modules after the transformer, inspect lines, self-check probe) is its family's
    (`FamilyDefaults` lists the hooks).

    Attributes:
        family: "module:Class" of the family that scores it (imported when a run needs it).
        auto_class: the transformers Auto class its checkpoints load with.
        pooling: which token states a score reads (`POOLINGS`).
        head: what turns them into a score (`HEADS`).
        help: what the kind is, in a few words (`--kind`'s help, `inspect`).
        scorecli_attention: a decoder's attention runs under scorecli's backends; False: the
            model runs its own forward (a cross-encoder's full forward, heads included).
        sentence_modules: its model may be a sentence-transformers folder whose modules scorecli
            applies after the transformer; the transformer's unused pooler weights are no missing
            weights then.
        float32_head: a 16-bit model's own head runs in float32 (heads and activations stay float32).
        encoder: its models attend both ways (an encoder architecture is refused for any other kind).
        pairs: query and item go through the model together, as a text pair, one item a sequence
            (never packed: the kind is single-item by its nature).
        similarity: scores compare a separately encoded query and items (`--similarity` style).
        label_tokens: scores are the logits of label tokens (`--label-tokens`), not a head's labels.
        classifier_head: scores are a classifier head's labels, on the decoder's last token.
        relative_scores: scores are sums that grow with the texts (MaxSim, sparse dot products):
            they agree with the reference relatively above 1 (SPEC 17), as the audit judges them.
    """

    family: str
    auto_class: str
    pooling: str = "last"
    head: str = "classifier"
    help: str = ""
    scorecli_attention: bool = True
    sentence_modules: bool = False
    float32_head: bool = False
    encoder: bool = False
    pairs: bool = False
    similarity: bool = False
    label_tokens: bool = False
    classifier_head: bool = False
    relative_scores: bool = False


# The two parts a kind combines (STYLE habit 20, vLLM's pooler: a pooling method and a head).
POOLINGS = {
    "last": "the item's last token",
    "cls": "the sequence's first token",
    "sentence": "the folder's Pooling module (mean, CLS, max, last token), Dense and Normalize",
    "tokens": "every token, projected and normalized, masked as the folder says",
    "splade": "max or sum over tokens of log(1 + relu(MLM logits)), as the folder's SpladePooling says",
}
HEADS = {
    "classifier": "a classifier's labels",
    "label-tokens": "label-token probabilities from the LM head",
    "similarity": "cosine or dot of query and item embeddings",
    "maxsim": "MaxSim: per query token the best item token, summed",
    "sparse-dot": "dot product (or cosine) of sparse vocabulary vectors",
}

# every kind, in the order they are detected (the first whose family claims a checkpoint, `detect`):
# adding one is its module here and one entry (docs/ARCHITECTURE.md)
KINDS: dict[str, KindInfo] = {
    "multi-vector": KindInfo(
        "scorecli.kinds.multi_vector:MultiVectorFamily",
        "AutoModel",
        "tokens",
        "maxsim",
        "late interaction: ColBERT-style MultiVectorEncoder",
        scorecli_attention=False,
        sentence_modules=True,
        encoder=True,
        similarity=True,
        relative_scores=True,
    ),
    "sparse": KindInfo(
        "scorecli.kinds.sparse:SparseFamily",
        "AutoModelForMaskedLM",
        "splade",
        "sparse-dot",
        "SPLADE-style SparseEncoder",
        scorecli_attention=False,
        sentence_modules=True,
        encoder=True,
        similarity=True,
        relative_scores=True,
    ),
    "embedding": KindInfo(
        "scorecli.kinds.embedding:EmbeddingFamily",
        "AutoModel",
        "sentence",
        "similarity",
        "sentence-transformers bi-encoders",
        sentence_modules=True,
        encoder=True,
        similarity=True,
    ),
    "cross-encoder": KindInfo(
        "scorecli.kinds.pairs:PairFamily",
        "AutoModelForSequenceClassification",
        "cls",
        "classifier",
        "BERT-family (query, item) classifiers",
        scorecli_attention=False,
        float32_head=True,
        encoder=True,
        pairs=True,
    ),
    "seq-cls": KindInfo(
        "scorecli.kinds.decoder:DecoderFamily",
        "AutoModelForSequenceClassification",
        "last",
        "classifier",
        "decoder classifiers and reward models",
        classifier_head=True,
    ),
    "causal-lm": KindInfo(
        "scorecli.kinds.decoder:DecoderFamily",
        "AutoModelForCausalLM",
        "last",
        "label-tokens",
        "LLM judges (--label-tokens)",
        label_tokens=True,
    ),
}
FAMILIES = {name: info.family for name, info in KINDS.items()}


@dataclass(frozen=True)
class Checkpoint:
    """What a model folder says about itself, read before its weights load (`model.load`).

    Attributes:
        path: the folder.
        config: the transformer's Hugging Face config.
        folder_type: the sentence-transformers `model_type` of a folder with `modules.json`
            ("SentenceTransformer" when its config does not say); None: no such folder.
        encoder: its transformer attends both ways (an encoder architecture).
    """

    path: str
    config: Any
    folder_type: str | None
    encoder: bool

    @property
    def architectures(self) -> list[str]:
        return list(getattr(self.config, "architectures", None) or [])


def family_class(kind: str) -> type[FamilyDefaults]:
    """The family class of `kind` (its module imported on first use)."""
    import importlib

    module, cls = KINDS[kind].family.split(":")
    return getattr(importlib.import_module(module), cls)


def detect(checkpoint: Checkpoint) -> str | None:
    """The first kind in `KINDS` whose family claims `checkpoint`; None: no kind does."""
    return next((kind for kind in KINDS if family_class(kind).detects(kind, checkpoint)), None)


@dataclass(frozen=True)
class Setup:
    """What a family is built from (the `Scorer` resolves it once; families share no other state
    with it): the run's config, the loaded model, the resolved spec, what the model supports,
    the template and the chunking of long items (None: items are cut)."""

    config: Any  # ScoreConfig
    loaded: Any  # model.load.Loaded
    spec: Any  # kinds.spec.RunSpec
    support: Any  # model.compat.Support
    template: Any  # core.templates.Template
    chunking: Chunking | None


def make_family(setup: Setup) -> Family:
    """The family of `setup.spec.kind`."""
    family: Any = family_class(setup.spec.kind)  # a family class takes its Setup
    return family(setup)
