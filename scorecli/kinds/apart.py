"""What the kinds that compare token states share (`multi-vector`, `sparse`): the query encoded
once per row and every item (or chunk) once, as their own sequences, and the comparison made on
the device as item batches run, so token states never leave it.

A row with items becomes entries: its query, then its items' chunks (one entry per item when not
chunked). `plan` runs a window's queries first, longest first under the token budget, then its
items; a query batch leaves what the kind keeps of each query (`query_reps`, on the device), and an
item batch compares each item with its row's query (`item_scores`). The kind's module supplies
those two, what its folder says and how its text is read. Knows nothing about windows' sources,
progress or output (`scorecli.scorer` holds those).
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass

import numpy as np
import torch

from scorecli.attention import pad_ragged, to_device
from scorecli.checks.selfcheck import PROBE_ITEMS, PROBE_QUERY, PROBE_TEXT
from scorecli.core.batching import Batch, plan_batches
from scorecli.core.pack import Seq
from scorecli.core.ranking import Chunking, chunk_items, last_chunks
from scorecli.core.rows import Row
from scorecli.errors import InputError, UsageError
from scorecli.io.readers import RawRow
from scorecli.kinds import FamilyDefaults, Setup
from scorecli.kinds.pairs import CPU_STREAMS
from scorecli.kinds.spec import label_tokens_refused, positive_index, refuse, sequence_limit
from scorecli.kinds.texts import EncodedTexts, TextEncoder, cut_limit
from scorecli.model.sentence import prompt_text
from scorecli.runtimes import fast_encoder, runtime_info
from scorecli.runtimes.forward import with_encoder


def refuse_flags(kind: str, cfg, template) -> None:
    """Flags of other kinds, refused in one line (docs/models.md: Which models)."""
    refuse(
        [
            (cfg.mode == "mis", f"--mode mis: a {kind} model encodes every item as its own sequence already"),
            (
                template.name != "plain" or cfg.instruction is not None,
                f"--template/--instruction: {kind} models take prompts (--query-prompt, --item-prompt)",
            ),
            label_tokens_refused(kind, cfg),
            (cfg.activation not in (None, "none"), f"--activation {cfg.activation}: a {kind} model's score has none"),
            (cfg.pooling is not None, f"--pooling: a {kind} model scores from every token"),
            (
                cfg.pooled_hidden_states,
                f"--pooled-hidden-states: a {kind} model keeps no one vector per item to write",
            ),
            (
                cfg.runtime != "auto" and runtime_info(cfg.runtime).encoders_only,
                f"--runtime {cfg.runtime}: scorecli runs {kind} models with torch; use --runtime auto or torch",
            ),
        ]
    )


def lengths(cfg, loaded, folder) -> tuple[int, int]:
    """(query, item) cuts: the folder's (capped at what the model embeds); `--max-seq-len` sets the
    items'. UsageError when a `--chunk-tokens` chunk cannot fit beside the special tokens and the
    prompt every chunk of an item keeps (the prompt the items are encoded with: `item_prompt`): the
    most any item's chunk keeps (`ChunkLayout.most`)."""
    chunk_lead = chunk_layout(loaded.tokenizer, item_prompt(cfg.item_prompt, folder)).most
    limit = sequence_limit(loaded.model, loaded.kind)
    query, item = (min(n, limit) for n in folder.lengths())
    if cfg.max_seq_len is not None:
        if cfg.max_seq_len > limit:
            raise UsageError(f"--max-seq-len {cfg.max_seq_len} exceeds the model's limit of {limit} tokens")
        item = cfg.max_seq_len
    if cfg.chunk_tokens is not None and chunk_lead + cfg.chunk_tokens > item:
        raise UsageError(
            f"--chunk-tokens {cfg.chunk_tokens} cannot fit within the items' {item} tokens: the tokenizer's "
            f"special tokens and the item prompt take {chunk_lead}, leaving {item - chunk_lead} for a chunk"
        )
    return query, item


@dataclass(frozen=True, slots=True)
class ChunkLayout:
    """Where an item's text lies in its ids (its prompt + text, with the tokenizer's special
    tokens): what every chunk of a long item keeps around its window."""

    specials: int  # the tokenizer's special tokens before a text
    prompt: np.ndarray  # [P] int64 the prompt's tokens, tokenized alone
    trail: int  # the tokenizer's special tokens after a text

    @property
    def most(self) -> int:
        """The most tokens a chunk keeps around its window: the prompt's tokens all its own."""
        return self.specials + len(self.prompt) + self.trail

    def lead(self, ids: np.ndarray) -> int:
        """Tokens of an item's `ids` before its text: the special tokens, then as many of the
        prompt's own tokens as `ids` starts with. Where the prompt's end and the text's start make
        one token (a byte-level BPE's "Ġthe" from "passage: " + "the", where the prompt alone ends
        in "Ġ"; a SentencePiece "▁the"), that token is the text's: each chunk's window starts there."""
        n = max(min(len(self.prompt), len(ids) - self.specials - self.trail), 0)
        same = ids[self.specials : self.specials + n] == self.prompt[:n]  # [n]
        return self.specials + (n if bool(same.all()) else int(np.argmin(same)))


def chunk_layout(tokenizer, prompt: str) -> ChunkLayout:
    """The `ChunkLayout` of items that are `prompt` + text with the tokenizer's special tokens."""
    bare = tokenizer("scorecli probe", add_special_tokens=False)["input_ids"]
    full = tokenizer("scorecli probe", add_special_tokens=True)["input_ids"]
    start = next((k for k in range(len(full) - len(bare) + 1) if full[k : k + len(bare)] == bare), 0)
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"] if prompt else []
    return ChunkLayout(start, np.array(ids, dtype=np.int64), len(full) - start - len(bare))


# sentence-transformers 6's `encode_document` prompt names, in the order it tries them (multi-vector
# and sparse folders)
ITEM_PROMPTS = ("document", "passage", "corpus")


def item_prompt(given: str | None, folder) -> str:
    """The prompt before every item: `given` (`--item-prompt`: a prompt name of the folder, else
    literal text), else the folder's first of `ITEM_PROMPTS`, as the items are encoded."""
    return prompt_text(given, folder, ITEM_PROMPTS)


def prompts_line(folder) -> str:
    """`inspect`'s line of a folder's query and item prompts (`folder.prompts`)."""
    return f"prompts:        query {folder.prompts.get('query', '')!r}, items {item_prompt(None, folder)!r}"


def text_encoder(setup: Setup, folder, query_cut: int, item_cut: int, query_owns: tuple = (), **options) -> TextEncoder:
    """The `TextEncoder` of a folder whose queries and items are encoded apart with their own
    prompts (`ITEM_PROMPTS`), cut at `query_cut` and `item_cut` tokens, with the layout every chunk
    of a long item keeps (`ChunkLayout`); `query_owns`: the kind's own settings that may set the
    query's cut besides the folder's lengths (`texts.cut_limit`); `options` are TextEncoder's
    (`query_specials`)."""
    cfg, loaded = setup.config, setup.loaded
    own = ("the model's max_seq_length", folder.max_seq_length)
    query = (*query_owns, ("the model's query length", folder.query_length), own)
    given = cfg.max_seq_len is not None
    limits = (
        cut_limit(query_cut, query) + (" (--max-seq-len cuts items, not queries)" if given else ""),
        cut_limit(item_cut, (("the model's document length", folder.document_length), own), given),
    )
    encoder = TextEncoder(
        loaded.tokenizer,
        folder,
        cfg.query_prompt,
        cfg.item_prompt,
        item_cut,
        cfg.truncate,
        loaded.model.get_input_embeddings().num_embeddings,
        lengths=(query_cut, item_cut),
        item_names=ITEM_PROMPTS,
        whole_items=setup.chunking is not None,
        limits=limits,
        **options,
    )
    encoder.layout = chunk_layout(loaded.tokenizer, encoder.prompts[1])
    return encoder


def one_label(cfg) -> dict:
    """The RunSpec fields every such kind shares: one label, `similarity`."""
    names = ("similarity",)
    return {
        "mis": False,
        "label_ids": None,
        "label_names": names,
        "activation": "none",
        "positive_index": positive_index(cfg.positive_label, names),
    }


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
            reps = self.query_reps(batch, forward)
            with self.lock:
                self.held.append((entry, reps))
                self.held_queries += len(entry)
                if self.held_queries == self.queries:  # (a query batch halved after running out of memory counts whole)
                    self.queries_held.set()
            return torch.zeros(len(entry), 1, device=self.loaded.device)
        self.queries_held.wait()
        with self.lock:
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


def check_encoder(kind: str, loaded) -> None:
    """These kinds run their transformer's own bidirectional forward: UsageError for a decoder."""
    if not loaded.is_encoder:
        raise UsageError(
            f"cannot score model {loaded.path} as {kind}: its transformer {loaded.config.model_type} is no encoder "
            "scorecli runs for this kind (BERT, RoBERTa, XLM-R, ModernBERT, ...)"
        )
