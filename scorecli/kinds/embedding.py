"""Embedding scoring (`embedding`, docs/models.md: Which models, embedding models): a row's query and each item are embedded as their own
sequences (prompted, tokenized and pooled as sentence-transformers does), and an item's score is
the similarity of its embedding with its query's. Its detection (a sentence-transformers folder),
the folder's modules, spec rules and inspect lines live here too.

A row of n items becomes n + 1 entries, the query first; `finish` turns a window's entry
embeddings into item scores. Encoder models (BERT and kin) run their own forward on padded
batches; decoder models run under scorecli's attention backends (ragged where the backend is).
Knows nothing about windows, batching or output (`scorecli.scorer` holds those).
"""

from __future__ import annotations

import numpy as np
import torch

from scorecli.attention import backends as attention_backends
from scorecli.attention import bound, make_backend, pad_ragged, to_device
from scorecli.core.batching import Batch
from scorecli.core.pack import Seq
from scorecli.core.ranking import Chunking
from scorecli.errors import UsageError
from scorecli.kinds import Checkpoint, FamilyDefaults, Setup
from scorecli.kinds.pairs import CPU_STREAMS, backend_name, open_runtime
from scorecli.kinds.probes import embedding_errors, embedding_probe
from scorecli.kinds.spec import (
    RunSpec,
    label_tokens_refused,
    max_seq_len,
    model_limit,
    one_label,
    refuse,
)
from scorecli.kinds.texts import EncodedTexts, TextEncoder, cut_limit
from scorecli.model.compat import backend_for
from scorecli.model.sentence import (
    SIMILARITIES,
    SentenceModules,
    plain_modules,
    pool,
    prompt_text,
    read_modules,
    similarity,
)
from scorecli.model.st_files import is_sentence_folder
from scorecli.runtimes import fast_encoder
from scorecli.runtimes.forward import with_encoder
from scorecli.runtimes.fused_norms import fuse_norms


class EmbeddingForward:
    """The transformer's last hidden states of a batch's texts, ragged [T, H]: an encoder's own
    forward over the padded batch (BERT-family encoders through a view with the fused encoder
    stack, `fast_encoder`, every row computed), or a decoder's base model under a scorecli
    backend. Calls on one instance run one at a time; `twin()` gives another for a CPU stream."""

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        dtype: torch.dtype,
        backend=None,
        fast: bool = False,
        fused: list | None = None,
    ):
        self.source, self.model, self.device, self.dtype, self.backend = model, model, device, dtype, backend
        self.fast = None
        if fast:
            self.fast = fast_encoder.FastEncoder(model, fused)
            self.fast.cls_only = False  # pooling may read every token
            self.model = with_encoder(model, self.fast)

    def twin(self) -> EmbeddingForward:
        """Another forward over the same weights (fused ones included) with its own state."""
        fast = self.fast is not None
        return EmbeddingForward(
            self.source, self.device, self.dtype, self.backend, fast, self.fast.fused if fast else None
        )

    @torch.inference_mode()
    def __call__(self, batch: Batch) -> torch.Tensor:
        if self.backend is None:
            s, length = batch.num_seqs, batch.max_len
            ids, where = to_device([batch.input_ids, batch.padded_index()], self.device)
            mask = pad_ragged(torch.ones_like(ids), where, s, length, 0)  # [S, L]
            hidden = self.model(input_ids=pad_ragged(ids, where, s, length, 0), attention_mask=mask).last_hidden_state
            return hidden.flatten(0, 1)[where]  # [T, H]
        inputs = self.backend.plan(batch, self.device, self.dtype)
        with bound(self.backend):
            hidden = self.model(input_ids=inputs.input_ids, position_ids=inputs.position_ids, use_cache=False)
        lens = torch.as_tensor(batch.seq_lens, device=self.device)
        # a text's tokens are contiguous in every backend's layout, from its first token on
        offsets = torch.arange(batch.num_tokens, device=self.device) - torch.repeat_interleave(
            torch.as_tensor(batch.cu_seqlens[:-1], device=self.device), lens
        )
        return hidden.last_hidden_state.flatten(0, 1)[torch.repeat_interleave(inputs.first_index, lens) + offsets]


class EmbeddingFamily(FamilyDefaults):
    """How an embedding model scores rows (see `scorecli.kinds.Family`)."""

    @classmethod
    def detects(cls, kind: str, checkpoint: Checkpoint) -> bool:
        # any sentence-transformers folder no other kind claimed, but a CrossEncoder's (a classifier)
        return checkpoint.folder_type not in (None, "CrossEncoder")

    @classmethod
    def read_folder(cls, kind: str, path: str) -> SentenceModules:
        """A sentence-transformers folder's modules; a plain base model (`--kind embedding`): mean pooling."""
        return read_modules(path) if is_sentence_folder(path) else plain_modules(path)

    @classmethod
    def resolve(cls, kind: str, cfg, loaded, template, support) -> RunSpec:
        """One label, `similarity` (docs/models.md: Which models, embedding models)."""
        refuse(
            [
                (
                    cfg.mode == "mis",
                    "--mode mis: an embedding model embeds every item as its own sequence already; "
                    "use --mode single or auto",
                ),
                (
                    not template.is_plain or cfg.instruction is not None,
                    "--template/--instruction: embedding models take prompts (--query-prompt, --item-prompt)",
                ),
                label_tokens_refused(kind, cfg),
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
        )
        similarity = cfg.similarity or loaded.sentence.similarity or "cosine"
        if similarity not in SIMILARITIES:
            raise UsageError(
                f"the model's similarity is {similarity!r}; scorecli computes cosine or dot: pass --similarity"
            )
        own = loaded.sentence.max_seq_length
        limit = (
            max_seq_len(cfg.max_seq_len, loaded) if cfg.max_seq_len or own is None else min(own, model_limit(loaded))
        )
        return RunSpec(kind=kind, pooling="embedding", max_seq_len=limit, similarity=similarity, **one_label(cfg))

    @classmethod
    def inspect_lines(cls, kind: str, checkpoint: Checkpoint, skeleton, tokenizer) -> tuple[list[str], int | None, str]:
        """Its text (plain, or chat messages), pooling, modules after it, prompts and similarity
        (docs/models.md: Which models, embedding models), and its max_seq_length."""
        modules = cls.read_folder(kind, checkpoint.path)
        modules = modules.resolved(modules.transformer_dir, checkpoint.config)
        after = [f"Dense -> {s.weight.shape[0]}" if not isinstance(s, str) else "Normalize" for s in modules.steps]
        prompts = ", ".join(f"{name}: {text!r}" for name, text in modules.prompts.items()) or "none"
        excluded = not modules.include_prompt and modules.message is None  # a chat message's prompt is pooled
        text = (
            "plain text, after its prompt"
            if modules.message is None
            else f"chat messages ({modules.message.format} format) through the chat template, the prompt as a "
            "system message"
        )
        lines = [
            "labels:         1 (similarity)",
            f"text:           {text}",
            f"pooling:        {' + '.join(modules.pooling)}{' (prompt excluded)' if excluded else ''}"
            + (f", then {', '.join(after)}" if after else ""),
            f"embedding size: {modules.dimension(getattr(checkpoint.config, 'hidden_size', 0))}",
            f"prompts:        {prompts}; query uses {prompt_text(None, modules, ('query',))!r}, items "
            f"{prompt_text(None, modules, ('document', 'passage'))!r}",
            f"similarity:     {modules.similarity or 'cosine'}",
        ]
        return lines, modules.max_seq_length, "no (query and items are embedded as their own sequences)"

    def __init__(self, setup: Setup):
        cfg, loaded, spec = setup.config, setup.loaded, setup.spec
        self.loaded, self.spec, self.modules = loaded, spec, loaded.sentence
        self.pooling = spec.pooling if cfg.pooled_hidden_states else None  # "embedding": the item embeddings
        vocab = loaded.fact("vocab", lambda model: model.get_input_embeddings().num_embeddings)
        own = (("the model's max_seq_length", self.modules.max_seq_length),)
        limit = cut_limit(spec.max_seq_len, own, flag=cfg.max_seq_len is not None)
        self.encoder = TextEncoder(
            loaded.tokenizer,
            self.modules,
            cfg.query_prompt,
            cfg.item_prompt,
            spec.max_seq_len,
            cfg.truncate,
            vocab,
            loaded.config.model_type,
            limits=(limit, limit),
        )
        backend = None
        if not loaded.is_encoder:
            backend = make_backend(backend_for(setup.support, cfg.attention, False), loaded.device, loaded.dtype)
        fast = (
            backend is None
            and attention_backends.capabilities(cfg.attention).fused_encoder
            and loaded.fact("fused_encoder", fast_encoder.supports)
        )
        self.runtime, self.runtime_reason, self.forward = open_runtime(
            setup,
            fast,
            None,
            "texts",
            lambda: EmbeddingForward(loaded.model, loaded.device, loaded.dtype, backend, fast),
        )
        if backend is None and loaded.device.type == "cpu":  # as for cross-encoders (`pairs.CPU_STREAMS`)
            self.streams = [self.forward] + [self.forward.twin() for _ in range(CPU_STREAMS - 1)]
        self.backend_name = backend_name(
            self.forward, self.runtime, backend.name if backend else ("sdpa (fused encoder)" if fast else "model")
        )
        self.fallback = attention_backends.fallback(cfg.attention, self.backend_name)
        self.padded = backend.is_padded if backend else True
        self.dimension = self.modules.dimension(loaded.config.hidden_size)
        # a decoder embedder's norms as one kernel each (`runtimes.fused_norms`; on CUDA)
        self.fused_norms = fuse_norms(loaded.model, loaded.device) if backend is not None else None

    @property
    def hidden_width(self) -> int:
        return self.dimension if self.pooling else 0

    @property
    def speedups(self) -> tuple:
        return () if self.fused_norms is None else (self.fused_norms,)

    @property
    def entry_width(self) -> int:
        return self.dimension  # a batch gives embeddings; `finish` makes scores of them

    def pack(
        self, enc: EncodedTexts, where: str, first: int, chunking: Chunking | None
    ) -> tuple[list[Seq], np.ndarray]:
        """The query's sequence and one per item (entries `first`, `first + 1`, ...); none for a
        row without items. The skipped prompt is a sequence's prefix, the rest its one item."""
        if not enc.items:
            return [], np.zeros(0, dtype=np.int64)
        texts = [(enc.query, enc.skips[0])] + [(x, enc.skips[1]) for x in enc.items]
        seqs = []
        for k, (ids, skip) in enumerate(texts):
            skip = min(skip, len(ids))
            seqs.append(
                Seq(
                    ids,
                    np.arange(len(ids), dtype=np.int64),
                    skip,
                    np.array([len(ids) - skip], dtype=np.int64),
                    np.array([first + k], dtype=np.int64),
                )
            )
        return seqs, np.ones(len(enc.items), dtype=np.int64)

    def score_batch(self, batch: Batch, forward=None) -> torch.Tensor:
        """[texts, embedding dim] float32: what `SentenceTransformer.encode` returns for them."""
        hidden = (forward or self.forward)(batch).float()  # [T, H]
        lens, skip = (torch.as_tensor(a, device=hidden.device) for a in (batch.seq_lens, batch.prefix_lens))
        pooled = pool(hidden, lens, skip, self.modules.pooling)  # [S, H * modes]
        return self.modules.after_pooling(pooled)

    def finish(self, out: np.ndarray, item_offsets: np.ndarray, chunks: np.ndarray | None) -> np.ndarray:
        """Entry embeddings [entries, D] -> [items, 1 + hidden]: each item's similarity with its
        row's query (and its embedding, when asked)."""
        query, item = _entries(item_offsets)
        scores = similarity(torch.from_numpy(out[query]), torch.from_numpy(out[item]), self.spec.similarity)
        parts = [scores.numpy()[:, None]] + ([out[item]] if self.pooling else [])
        return np.concatenate(parts, axis=1).astype(np.float32)

    def done_entries(self, item_offsets: np.ndarray, chunks: np.ndarray | None) -> np.ndarray:
        query, item = _entries(item_offsets)
        done = np.zeros(len(query) + len(np.unique(query)), dtype=bool)
        done[item] = True  # a query is no item of its own
        return done

    def use_backend(self, name: str) -> None:
        backend = make_backend(name, self.loaded.device, self.loaded.dtype)
        self.forward.backend, self.backend_name = backend, backend.name

    def probe_errors(self, scorer) -> dict[str, float]:
        return embedding_errors(scorer)

    def probe_scores(self, scorer, items: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(the run's, the model's own) similarities [items + 1] of the probe query with `items`
        and a long text."""
        return embedding_probe(scorer, items)["scores"]


def _entries(item_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """([items] entry of each item's query, [items] entry of each item): a row with items holds
    its query's entry and then its items'; a row without holds none."""
    counts = np.diff(item_offsets)
    has = (counts > 0).astype(np.int64)
    first = item_offsets[:-1] + np.cumsum(has) - has  # [rows] entry of the row's query
    row = np.repeat(np.arange(len(counts)), counts)  # [items]
    return first[row], first[row] + 1 + np.arange(len(row)) - item_offsets[row]
