"""Embedding scoring (`embedding`, README: Which models, embedding models): a row's query and each item are embedded as their own
sequences (prompted, tokenized and pooled as sentence-transformers does), and an item's score is
the similarity of its embedding with its query's.

A row of n items becomes n + 1 entries, the query first; `finish` turns a window's entry
embeddings into item scores. Encoder models (BERT and kin) run their own forward on padded
batches; decoder models run under scorecli's attention backends (ragged where the backend is).
Knows nothing about windows, batching or output (`scorecli.scorer` holds those).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from scorecli.attention import bound, pad_ragged, to_device
from scorecli.core.batching import Batch
from scorecli.core.encode import tokenize
from scorecli.core.pack import Seq
from scorecli.core.ranking import Chunking
from scorecli.core.rows import Row
from scorecli.kinds import FamilyDefaults, Setup
from scorecli.kinds.forward import with_encoder
from scorecli.kinds.pairs import CPU_STREAMS, open_runtime
from scorecli.model.messages import ChatTexts
from scorecli.model.sentence import SentenceModules, pool, prompt_length, prompt_text, similarity
from scorecli.runtimes import fast_encoder
from scorecli.runtimes.fused_norms import fuse_norms


@dataclass(frozen=True, slots=True)
class EncodedTexts:
    """One row's query and items as token ids (prompts and special tokens included), or an error."""

    query: np.ndarray  # [L_q] int64
    items: list[np.ndarray]  # each [L_k] int64
    skips: tuple[int, int] = (0, 0)  # leading tokens pooling skips: (query, items)
    error: str | None = None


class TextEncoder:
    """Tokenizes a window's queries and items with their prompts, cut at `max_len` tokens as
    sentence-transformers cuts them (`--truncate error`: a longer text fails its row): prompt and
    text as one string, or, for a folder that reads chat messages, rendered through the chat
    template (`messages.ChatTexts`; `model_type` may decide their format)."""

    def __init__(
        self,
        tokenizer,
        modules: SentenceModules,
        query_prompt: str | None,
        item_prompt: str | None,
        max_len: int,
        truncate: str,
        vocab_size: int,
        model_type: str = "",
    ):
        self.tokenizer, self.max_len, self.truncate, self.vocab_size = tokenizer, max_len, truncate, vocab_size
        self.prompts = (
            prompt_text(query_prompt, modules, ("query",)),
            prompt_text(item_prompt, modules, ("document", "passage")),
        )
        self.chat = None if modules.message is None else ChatTexts(tokenizer, modules.message, model_type)
        # pooling skips a prompt's tokens only in plain text (a chat message's prompt is pooled)
        skips = [0 if self.chat is not None else prompt_length(tokenizer, p, modules) for p in self.prompts]
        self.skips = tuple(skips)

    def encode(self, rows: list[Row], wheres: list[str], chunking: Chunking | None = None) -> list[EncodedTexts]:
        texts, prompts, names = [], [], []
        for row, where in zip(rows, wheres):
            if not row.pretokenized:
                texts += [row.query, *row.items]
                prompts += [self.prompts[0]] + [self.prompts[1]] * len(row.items)
                names += [f"{where}: field 'query'"] + [f"{where}: field 'items'[{k}]" for k in range(len(row.items))]
        cut = self.max_len + (self.truncate == "error")  # one token more shows a text that is too long
        if self.chat is not None:
            ids, failed = self.chat.encode(prompts, texts, names, cut, self.max_len)
        else:
            ids, failed = tokenize(
                self.tokenizer,
                [p + t for p, t in zip(prompts, texts)],
                names,
                add_special_tokens=True,
                truncation=True,
                max_length=cut,
            )
        out, at = [], 0
        for row, where in zip(rows, wheres):
            if row.pretokenized:
                out.append(self._pretokenized(row, where))
                continue
            n = 1 + len(row.items)
            out.append(self._checked(ids[at : at + n], names[at : at + n], [failed.get(t) for t in range(at, at + n)]))
            at += n
        return out

    def _checked(self, ids: list[np.ndarray], names: list[str], failed: list[str | None]) -> EncodedTexts:
        if len(ids) == 1:  # no items: the query is not embedded
            return EncodedTexts(ids[0], [])
        error = next((f for f in failed if f), None)
        for name, x in zip(names, ids):
            if error is None and len(x) > self.max_len:
                error = f"{name}: over --max-seq-len {self.max_len} tokens (--truncate error)"
            if error is None and len(x) == 0:
                error = f"{name}: an empty text leaves nothing to embed (this tokenizer adds no special tokens)"
        return EncodedTexts(ids[0], ids[1:], self.skips, error)

    def _pretokenized(self, row: Row, where: str) -> EncodedTexts:
        """`query_ids` / `item_ids` used as they are (no prompt, no special tokens added)."""
        texts = [np.array(row.query, dtype=np.int64)] + [np.array(i, dtype=np.int64) for i in row.items]
        names = [f"{where}: field 'query_ids'"] + [f"{where}: field 'item_ids'[{k}]" for k in range(len(row.items))]
        for name, x in zip(names, texts):
            if len(x) and int(x.max()) >= self.vocab_size:
                return EncodedTexts(
                    texts[0],
                    [],
                    error=f"{name}: token id {int(x.max())} is outside the vocabulary (size {self.vocab_size})",
                )
        if self.truncate == "item":
            texts = [x[: self.max_len] for x in texts]
        return self._checked(texts, names, [None] * len(texts))


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

    def __init__(self, setup: Setup):
        from scorecli.attention import backends as attention_backends
        from scorecli.attention import make_backend
        from scorecli.model.compat import backend_for

        cfg, loaded, spec = setup.config, setup.loaded, setup.spec
        self.loaded, self.spec, self.modules = loaded, spec, loaded.sentence
        self.pooling = spec.pooling if cfg.pooled_hidden_states else None  # "embedding": the item embeddings
        vocab = loaded.model.get_input_embeddings().num_embeddings
        self.encoder = TextEncoder(
            loaded.tokenizer,
            self.modules,
            cfg.query_prompt,
            cfg.item_prompt,
            spec.max_seq_len,
            cfg.truncate,
            vocab,
            loaded.config.model_type,
        )
        backend = None
        if not loaded.is_encoder:
            backend = make_backend(backend_for(setup.support, cfg.attention, False), loaded.device, loaded.dtype)
        fast = (
            backend is None
            and attention_backends.capabilities(cfg.attention).fused_encoder
            and fast_encoder.supports(loaded.model)
        )
        from scorecli.runtimes import onnx as runtime_onnx

        self.runtime, self.runtime_reason, self.forward = open_runtime(
            setup,
            fast,
            None,
            "texts",
            lambda: EmbeddingForward(loaded.model, loaded.device, loaded.dtype, backend, fast),
        )
        if backend is None and loaded.device.type == "cpu":  # as for cross-encoders (`pairs.CPU_STREAMS`)
            self.streams = [self.forward] + [self.forward.twin() for _ in range(CPU_STREAMS - 1)]
        self.backend_name = runtime_onnx.BACKEND_NAMES.get(self.runtime) or (
            backend.name if backend else ("sdpa (fused encoder)" if fast else "model")
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

    def finish(self, out: np.ndarray, item_offsets: np.ndarray) -> np.ndarray:
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
        from scorecli.attention import make_backend

        backend = make_backend(name, self.loaded.device, self.loaded.dtype)
        self.forward.backend, self.backend_name = backend, backend.name

    def probe_errors(self, scorer) -> dict[str, float]:
        from scorecli.kinds.probes import embedding_errors

        return embedding_errors(scorer)

    def probe_scores(self, scorer, items: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(the run's, the model's own) similarities [items + 1] of the probe query with `items`
        and a long text."""
        from scorecli.kinds.probes import embedding_probe

        return embedding_probe(scorer, items)["scores"]


def _entries(item_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """([items] entry of each item's query, [items] entry of each item): a row with items holds
    its query's entry and then its items'; a row without holds none."""
    counts = np.diff(item_offsets)
    has = (counts > 0).astype(np.int64)
    first = item_offsets[:-1] + np.cumsum(has) - has  # [rows] entry of the row's query
    row = np.repeat(np.arange(len(counts)), counts)  # [items]
    return first[row], first[row] + 1 + np.arange(len(row)) - item_offsets[row]
