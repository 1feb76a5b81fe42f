"""What the kinds that compare token states share (`multi-vector`, `sparse`): the query encoded
once per row and every item (or chunk) once, as their own sequences, and the comparison made on
the device as item batches run, so token states never leave it.

A row with items becomes entries: its query, then its items' chunks (one entry per item when not
chunked). `plan` runs a window's queries first, longest first under the token budget, then its
items; a query batch leaves what the kind keeps of each query (`query_reps`, on the device), and an
item batch compares each item with its row's query (`item_scores`). The kind's module supplies
those two, what its folder says and how its text is read; the spec rules, prompts and text
encoding these kinds share are `kinds.apart_spec`'s. Knows nothing about windows' sources,
progress or output (`scorecli.scorer` holds those).
"""

from __future__ import annotations

import copy
import threading

import numpy as np
import torch

from scorecli.attention import pad_ragged, to_device
from scorecli.checks.selfcheck import PROBE_ITEMS, PROBE_QUERY, PROBE_TEXT
from scorecli.core.batching import Batch, plan_batches
from scorecli.core.pack import Seq
from scorecli.core.ranking import Chunking, chunk_items, last_chunks
from scorecli.core.rows import Row
from scorecli.errors import InputError
from scorecli.io.readers import RawRow
from scorecli.kinds import FamilyDefaults, Setup
from scorecli.kinds.pairs import CPU_STREAMS
from scorecli.kinds.texts import EncodedTexts
from scorecli.runtimes import fast_encoder
from scorecli.runtimes.forward import with_encoder


def entries(item_offsets: np.ndarray, chunks: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """([entries] bool: a query's entry, [entries] int: the entry of each entry's query): a row
    with items holds its query's entry, then one per chunk of its items; a row without, none."""
    counts = np.diff(item_offsets)
    per_item = np.ones(int(item_offsets[-1]), dtype=np.int64) if chunks is None else chunks
    total = np.concatenate([[0], np.cumsum(per_item)])
    scored = total[item_offsets[1:]] - total[item_offsets[:-1]]  # [rows] chunks of the row's items
    sizes = np.where(counts > 0, 1 + scored, 0)
    first = np.cumsum(sizes) - sizes  # [rows] each row's query entry
    is_query = np.zeros(int(sizes.sum()), dtype=bool)
    is_query[first[counts > 0]] = True
    return is_query, np.repeat(first, sizes)


class PaddedForward:
    """An encoder's own forward over a padded batch, keys masked to each text's attended tokens
    (a `Seq`'s prefix; its one "item" is the rest, a query's expansion tokens): [S, L, H] of
    `output` (the last hidden states, or an MLM head's states before its vocabulary projection),
    the ids [S, L] and which positions hold a token [S, L]. BERT-family encoders run the fused
    encoder stack (`fast_encoder`), every row computed."""

    def __init__(self, model: torch.nn.Module, device: torch.device, output: str, fast: bool, fused=None):
        self.source, self.model, self.device, self.output = model, model, device, output
        self.fast = None
        if fast:
            self.fast = fast_encoder.FastEncoder(model.base_model, fused)
            self.fast.cls_only = False  # every token is read
            self.model = with_encoder(model, self.fast)

    def twin(self) -> PaddedForward:
        """Another forward over the same weights (fused ones included) with its own state."""
        fused = None if self.fast is None else self.fast.fused
        return PaddedForward(self.source, self.device, self.output, self.fast is not None, fused)

    def inputs(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """([S, L] ids, [S, L] bool: which positions hold a token, [S, L] key mask) on the device,
        in one copy."""
        s, length, lens = batch.num_seqs, batch.max_len, batch.seq_lens
        position = np.arange(batch.num_tokens) - np.repeat(batch.cu_seqlens[:-1], lens)
        attended = (position < np.repeat(batch.prefix_lens, lens)).astype(np.int64)
        ids, where, keys = to_device([batch.input_ids, batch.padded_index(), attended], self.device)
        present = pad_ragged(torch.ones_like(ids), where, s, length, 0).bool()
        return pad_ragged(ids, where, s, length, 0), present, pad_ragged(keys, where, s, length, 0)

    @torch.inference_mode()
    def __call__(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids, present, mask = self.inputs(batch)
        states = getattr(self.model(input_ids=ids, attention_mask=mask), self.output)
        return states, ids, present


class ApartFamily(FamilyDefaults):
    """A kind that encodes a row's query once and its items apart and compares them on the device
    (see `scorecli.kinds.Family`). Subclasses set `self.forward`, `self.encoder`,
    `self.backend_name` and implement `query_reps` and `item_scores`."""

    padded = True
    entries_alone = False  # an item's entry is its score against its own row's query
    pooling: str | None = None  # no pooled hidden states (refused in the spec)

    def __init__(self, setup: Setup):
        self.loaded, self.spec, self.chunking = setup.loaded, setup.spec, setup.chunking
        self.is_query, self.query_of = np.zeros(0, dtype=bool), np.zeros(0, dtype=np.int64)
        self.held: list[tuple[np.ndarray, tuple[torch.Tensor, ...]]] = []  # query batches of the window
        self.reps: tuple[torch.Tensor, ...] | None = None
        self.slot = np.zeros(0, dtype=np.int64)
        # CPU streams (`Scorer._run_streams`, `engine.batches.run_streams`) run a window's batches two at a time, in plan order:
        # an item batch waits until every query batch of its window is held
        self.lock, self.queries_held, self.queries = threading.Lock(), threading.Event(), 0
        self.held_queries = 0

    def use_streams(self) -> None:
        """Run batches two at a time on a CPU, as cross-encoders do (`pairs.CPU_STREAMS`)."""
        if self.loaded.device.type == "cpu":
            self.streams = [self.forward] + [self.forward.twin() for _ in range(CPU_STREAMS - 1)]

    @property
    def hidden_width(self) -> int:
        return 0

    @property
    def entry_width(self) -> int:
        return 1

    def query_seq(self, ids: np.ndarray) -> Seq:
        """A query's sequence: all of it attended (kinds with expansion tokens override)."""
        return _seq(ids, len(ids), 0)

    def pack(
        self, enc: EncodedTexts, where: str, first: int, chunking: Chunking | None
    ) -> tuple[list[Seq], np.ndarray]:
        """The query's sequence, then one per item, or per chunk of an item (entries `first`,
        `first + 1`, ...); none for a row without items."""
        if not enc.items:
            return [], np.zeros(0, dtype=np.int64)
        items, counts = enc.items, np.ones(len(enc.items), dtype=np.int64)
        if chunking is not None:
            # a chunk keeps the item's special tokens and prompt around its window (given ids: none)
            layout = self.encoder.layout
            leads = [0] * len(items) if enc.bare else [layout.lead(x) for x in items]
            body, counts = chunk_items([x[k:] for x, k in zip(items, leads)], 0 if enc.bare else layout.trail, chunking)
            prefix = [x[:k] for x, k in zip(items, leads)]
            items = [np.concatenate([prefix[k], b]) for k, b in zip(np.repeat(np.arange(len(items)), counts), body)]
            too_long = [k for k, x in enumerate(items) if len(x) > self.encoder.lengths[1]]
            if too_long:
                raise InputError(f"{where}: a chunk of {len(items[too_long[0]])} tokens is over the items' cut")
        query = self.query_seq(enc.query)
        query = Seq(query.input_ids, query.position_ids, query.prefix_len, query.item_lens, np.array([first]))
        return [query] + [_seq(x, len(x), first + 1 + k) for k, x in enumerate(items)], counts

    def plan(self, seqs, lengths, max_batch_tokens, item_offsets, chunks):
        """The window's queries first, then its items, each longest first under the budget."""
        is_query, query_of = entries(item_offsets, chunks)
        which = np.array([is_query[s.item_index[0]] for s in seqs], dtype=bool)
        streams = len(self.streams)
        queries = [
            np.flatnonzero(which)[b] for b in plan_batches(lengths[which], max_batch_tokens, self.padded, streams)
        ]
        items = [
            np.flatnonzero(~which)[b] for b in plan_batches(lengths[~which], max_batch_tokens, self.padded, streams)
        ]
        return queries + items, (is_query, query_of, int(is_query.sum()))

    def begin(self, planned) -> None:
        self.is_query, self.query_of, self.queries = planned
        self.held, self.reps, self.held_queries = [], None, 0
        self.queries_held.clear()
        if not self.queries:
            self.queries_held.set()

    def score_batch(self, batch: Batch, forward=None) -> torch.Tensor:
        forward, entry = forward or self.forward, batch.item_index
        if self.is_query[entry[0]]:
            try:
                reps = self.query_reps(batch, forward)
            except BaseException:
                # an item batch another stream runs waits for every query: it stops too (a halved
                # batch retried after running out of memory sets the queries held again)
                self.queries_held.set()
                raise
            with self.lock:
                self.held.append((entry, reps))
                self.held_queries += len(entry)
                if self.held_queries == self.queries:  # (a query batch halved after running out of memory counts whole)
                    self.queries_held.set()
            return torch.zeros(len(entry), 1, device=self.loaded.device)
        self.queries_held.wait()
        with self.lock:
            if self.held_queries < self.queries:
                raise RuntimeError("a query batch of this window failed")
            if self.reps is None:
                self._gather_queries()
        (at,) = to_device([self.slot[self.query_of[entry]]], self.loaded.device)
        return self.item_scores(batch, tuple(r[at] for r in self.reps), forward)[:, None]  # type: ignore[union-attr]

    def _gather_queries(self) -> None:
        """The window's query batches as one tensor each (padded along their second axis), and
        each query entry's row in them."""
        self.slot = np.full(len(self.is_query), -1, dtype=np.int64)
        parts, at = [], 0
        for entry, reps in self.held:
            self.slot[entry] = at + np.arange(len(entry))
            at += len(entry)
            parts.append(reps)
        widths = [max(p[k].shape[1] for p in parts) for k in range(len(parts[0]))] if parts else []
        self.reps = tuple(torch.cat([_pad(p[k], widths[k]) for p in parts]) for k in range(len(widths)))
        self.held = []

    def finish(self, out: np.ndarray, item_offsets: np.ndarray, chunks: np.ndarray | None) -> np.ndarray:
        """[entries, 1] -> [chunks of items, 1]: a query's entry is no item's."""
        is_query, _ = entries(item_offsets, chunks)
        return out[~is_query]

    def done_entries(self, item_offsets: np.ndarray, chunks: np.ndarray | None) -> np.ndarray:
        is_query, _ = entries(item_offsets, chunks)
        done = np.zeros(len(is_query), dtype=bool)
        done[np.flatnonzero(~is_query)] = True if chunks is None else last_chunks(chunks)
        return done

    def use_backend(self, name: str) -> None:
        raise RuntimeError("this kind runs its encoder's own attention: no backend to switch")

    def probe_row(self, scorer) -> tuple[np.ndarray, EncodedTexts]:
        """(the run's scores [items], the encoded texts) of the self-check's probe row: the probe
        query and items of very different lengths, scored whole (cut to fit) in one window."""
        items, encoder = [*PROBE_ITEMS, PROBE_TEXT], self.encoder
        row = {scorer.fields.query: PROBE_QUERY, scorer.fields.items: items}
        kept = scorer.chunking, encoder.truncate, encoder.whole_items
        scorer.chunking, encoder.truncate, encoder.whole_items = None, "item", False
        try:
            table = scorer.score_rows([RawRow(row, "self-check probe")])
            enc = encoder.encode([Row(PROBE_QUERY, items, None, None)], ["self-check probe"])[0]
        finally:
            scorer.chunking, encoder.truncate, encoder.whole_items = kept
        return np.array(table["score"].to_pylist()[0], dtype=np.float64), enc

    def reference_entries(self, seqs: list[Seq]) -> tuple[np.ndarray, np.ndarray]:
        """(entries, [entries, 1] float64) of one row's sequences (`pack`: its query's entry first):
        each item's (chunk's) score against the query, every text alone through the model's own
        forward (`reference_score`); the query's entry 0."""
        index = np.array([int(s.item_index[0]) for s in seqs])
        query = seqs[int(np.argmin(index))]
        values = [0.0 if s is query else self.reference_score(query, s) for s in seqs]
        return index, np.array(values, dtype=np.float64)[:, None]

    def reference_score(self, query: Seq, item: Seq) -> float:
        """One item's (chunk's) score against its query, each through the model's own forward."""
        raise NotImplementedError

    def query_reps(self, batch: Batch, forward: PaddedForward) -> tuple[torch.Tensor, ...]:
        """What the kind keeps of each query of a query batch (run by `forward`): tensors
        [S, width, ...] on the device, zero-padded along `width`."""
        raise NotImplementedError

    def item_scores(self, batch: Batch, reps: tuple[torch.Tensor, ...], forward: PaddedForward) -> torch.Tensor:
        """[S] float32: each item of an item batch (run by `forward`) against its query's `reps`
        (row-aligned)."""
        raise NotImplementedError


def with_module(model: torch.nn.Module, name: str, module: torch.nn.Module) -> torch.nn.Module:
    """A shallow copy of `model` whose submodule `name` (dotted) is `module`; the copies along the
    path share every other module and weight, and `model` itself is left as it is."""
    head, _, rest = name.partition(".")
    view = copy.copy(model)
    view._modules = {**model._modules, head: module if not rest else with_module(model._modules[head], rest, module)}
    return view


def _seq(ids: np.ndarray, attended: int, entry: int) -> Seq:
    n = len(ids)
    return Seq(
        ids.astype(np.int64),
        np.arange(n, dtype=np.int64),
        attended,
        np.array([n - attended], dtype=np.int64),
        np.array([entry], dtype=np.int64),
    )


def _pad(t: torch.Tensor, width: int) -> torch.Tensor:
    """`t` zero-padded along its second axis to `width`."""
    if t.shape[1] == width:
        return t
    shape = list(t.shape)
    shape[1] = width - t.shape[1]
    return torch.cat([t, t.new_zeros(shape)], dim=1)
