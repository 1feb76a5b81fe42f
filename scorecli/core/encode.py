"""Tokenize rows (validated by `core.rows`) into prefix and item token ids.

Knows nothing about models' forward passes or attention: it produces `EncodedRow`s for
decoders (template prefix P with the tokenizer's leading special tokens once, items
without) and pair encodings for cross-encoders; an embedding model's texts are encoded by
its kind (`kinds.embedding`, `model.messages`). Tokenizer calls are batched per window.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from scorecli.core.longtext import Bounder
from scorecli.core.pack import EncodedRow, Seq
from scorecli.core.ranking import Chunking, chunk_items
from scorecli.core.rows import Row
from scorecli.core.templates import Template
from scorecli.errors import UsageError, field, first_line


class DecoderEncoder:
    """Tokenizes rows for decoder models through a template.

    Items far longer than `max_tokens` are cut before tokenizing where that provably keeps
    every token a run can use (`longtext`), so one huge item costs no more than a long one;
    a prefix far over `max_tokens` fails its row after tokenizing only a cut of it.
    """

    def __init__(self, tokenizer, template: Template, instruction: str | None, vocab_size: int, max_tokens: int):
        self.tokenizer = tokenizer
        self.template = template
        self.instruction = instruction
        self.vocab_size = vocab_size
        self.max_tokens = max_tokens
        self.bounder = Bounder(tokenizer)
        self.lead = np.array(leading_special_ids(tokenizer), dtype=np.int64)
        suffix = template.item_suffix
        self.suffix_len = len(tokenizer(suffix, add_special_tokens=False)["input_ids"]) if suffix else 0
        self.item_before, self.item_after = template.item.split("{item}", 1)

    def encode(self, rows: list[Row], wheres: list[str], chunking: Chunking | None = None) -> list[EncodedRow]:
        """Encode a window of rows; pre-tokenized rows are used as-is (no template).
        With `chunking` items are tokenized whole (their chunks are cut when packing)."""
        text = [k for k, r in enumerate(rows) if not r.pretokenized]
        prefixes = [  # a row's own instruction wins, an empty one too (as an empty --instruction does)
            self.template.render_prefix(
                rows[k].query, self.instruction if rows[k].instruction is None else rows[k].instruction
            )
            for k in text
        ]
        cut = [self.bounder.cut(p, self.max_tokens) for p in prefixes]  # non-None: P alone is over the limit
        prefixes = [c or p for c, p in zip(cut, prefixes)]
        bound = self._bounded if chunking is None else str
        items = [self.template.render_item(bound(item)) for k in text for item in rows[k].items]
        fields = [(k, field(rows[k].names)) for k in text] + [
            (k, field(rows[k].names, j)) for k in text for j in range(len(rows[k].items))
        ]
        ids, failed = tokenize(self.tokenizer, prefixes + items, [f"{wheres[k]}: {f}" for k, f in fields])
        prefix_ids, item_ids = ids[: len(prefixes)], ids[len(prefixes) :]
        out: list[EncodedRow | None] = [None] * len(rows)
        start = 0
        for k, p in zip(text, prefix_ids):
            n = len(rows[k].items)
            prefix = np.concatenate([self.lead, p])
            out[k] = EncodedRow(prefix, item_ids[start : start + n], self.suffix_len, names=rows[k].names)
            start += n
        for k, c in zip(text, cut):
            if c is not None:
                error = f"{wheres[k]}: {field(rows[k].names)}: the prefix is over {self.max_tokens} tokens, no room for an item"
                out[k] = replace(out[k], items=[], suffix_len=0, error=error)
        for t, error in failed.items():  # the row's first failing text names it
            k = fields[t][0]
            if out[k].error is None:
                out[k] = replace(out[k], items=[], suffix_len=0, error=error)
        for k, r in enumerate(rows):
            if r.pretokenized:
                out[k] = self._pretokenized(r, wheres[k])
        return out  # type: ignore[return-value]

    def _bounded(self, item: str) -> str:
        """`item`, or a cut of it that tokenizes (in the template) to the same first
        `max_tokens` tokens: the only ones truncation can keep."""
        return self.bounder.cut(item, self.max_tokens, self.item_before, self.item_after) or item

    def _pretokenized(self, row: Row, where: str) -> EncodedRow:
        query = np.array(row.query, dtype=np.int64)
        items = [np.array(i, dtype=np.int64) for i in row.items]
        for name, ids in [(field(row.names), query)] + [(field(row.names, k), i) for k, i in enumerate(items)]:
            over = np.flatnonzero(ids >= self.vocab_size)
            if len(over):
                at = int(over[0])
                error = (
                    f"{where}: {name}[{at}]: token id {int(ids[at])} is outside the vocabulary (size {self.vocab_size})"
                )
                return EncodedRow(query, [], 0, error, row.names)
        return EncodedRow(query, items, 0, names=row.names)


def tokenize(tokenizer, texts: list[str], names: list[str], **kwargs) -> tuple[list[np.ndarray], dict[int, str]]:
    """Token ids of every text (one batched call), and {index: error} for texts the tokenizer
    rejects (found one by one when the batch fails; their ids are empty)."""
    if not texts:
        return [], {}
    try:
        ids = tokenizer(texts, **{"add_special_tokens": False, **kwargs})["input_ids"]
    except Exception:  # noqa: BLE001 - a tokenizer raises what it likes; each text is retried below
        ids = None
    if ids is not None:
        return [np.array(x, dtype=np.int64) for x in ids], {}
    out, failed = [], {}
    for t, text in enumerate(texts):
        try:
            out.append(
                np.array(tokenizer(text, **{"add_special_tokens": False, **kwargs})["input_ids"], dtype=np.int64)
            )
        except Exception as exc:  # noqa: BLE001
            out.append(np.zeros(0, dtype=np.int64))
            failed[t] = f"{names[t]}: the tokenizer failed: {first_line(exc)}"
    return out, failed


def leading_special_ids(tokenizer) -> list[int]:
    """The special tokens the tokenizer puts before a text (a BOS, or nothing)."""
    probe = "scorecli probe"
    full = tokenizer(probe, add_special_tokens=True)["input_ids"]
    bare = tokenizer(probe, add_special_tokens=False)["input_ids"]
    for start in range(len(full) - len(bare) + 1):
        if full[start : start + len(bare)] == bare:
            return list(full[:start])
    return []


@dataclass(frozen=True, slots=True)
class EncodedPairs:
    """One row's (query, item) pair encodings for a cross-encoder."""

    items: list[np.ndarray]  # [L_k] input ids of each pair
    types: list[np.ndarray]  # [L_k] token type ids of each pair
    error: str | None = None
    chunks: np.ndarray | None = None  # [items] pairs (chunks) of each item, when chunked

    def chunk_counts(self) -> np.ndarray:
        """[items] how many of the pairs each item is (1 each unless chunked)."""
        return self.chunks if self.chunks is not None else np.ones(len(self.items), dtype=np.int64)

    def seqs(self, first: int) -> list[Seq]:
        """One sequence per pair, read at its last token / first token."""
        return [
            Seq(
                ids,
                np.arange(len(ids), dtype=np.int64),
                len(ids),
                np.zeros(1, dtype=np.int64),
                np.array([first + k], dtype=np.int64),
                types,
            )
            for k, (ids, types) in enumerate(zip(self.items, self.types))
        ]


class PairEncoder:
    """Tokenizes (query, item) pairs the way cross-encoders were trained.

    A query that leaves no room for an item token in `max_seq_len` fails its row (the
    tokenizer's own truncation would raise); huge items are cut first as in `DecoderEncoder`.
    """

    def __init__(self, tokenizer, max_seq_len: int, truncate: str):
        self.tokenizer = tokenizer
        self.max_seq_len = max_seq_len
        self.truncate = truncate
        self.bounder = Bounder(tokenizer)
        self.specials = tokenizer.num_special_tokens_to_add(pair=True)

    def encode(self, rows: list[Row], wheres: list[str], chunking: Chunking | None = None) -> list[EncodedPairs]:
        """Encode a window of rows; with `chunking`, items are cut into chunks of token ids."""
        out = []
        for row, where in zip(rows, wheres):
            if row.pretokenized:
                out.append(
                    EncodedPairs([], [], f"{where}: {field(row.names)}: cross-encoders need text query and items")
                )
                continue
            out.append(self._encode_row(row, where) if chunking is None else self._encode_chunks(row, where, chunking))
        return out

    @cached_property
    def layout(self) -> PairLayout:
        """Where the tokenizer puts its special tokens and token types around a pair."""
        return PairLayout.of(self.tokenizer)

    def _encode_chunks(self, row: Row, where: str, chunking: Chunking) -> EncodedPairs:
        """The pairs (query, chunk) of every chunk of every item, built from token ids (docs/ranking.md)."""
        if not row.items:
            return EncodedPairs([], [], chunks=np.zeros(0, dtype=np.int64))
        room = self.max_seq_len - self.specials
        query = self.bounder.cut(row.query, room) or row.query
        names = [f"{where}: {field(row.names, k)}" for k in (None, *range(len(row.items)))]
        ids, failed = tokenize(self.tokenizer, [query, *row.items], names)
        if failed:
            return EncodedPairs([], [], failed[min(failed)])
        if len(ids[0]) >= room:
            return EncodedPairs(
                [],
                [],
                f"{where}: {field(row.names)}: {len(ids[0])} tokens leave no room for an item "
                f"within --max-seq-len {self.max_seq_len}",
            )
        chunks, counts = chunk_items(ids[1:], 0, chunking)
        over = [k for k, c in enumerate(chunks) if len(c) > room - len(ids[0])]
        if over:
            k = int(np.searchsorted(np.cumsum(counts), over[0], side="right"))
            error = (
                f"{where}: {field(row.names, k)}: a chunk of {len(chunks[over[0]])} tokens does not fit beside the "
                f"query of {len(ids[0])} tokens within --max-seq-len {self.max_seq_len}"
            )
            return EncodedPairs([], [], error)
        pairs = [self.layout.pair(ids[0], c) for c in chunks]
        return EncodedPairs([p for p, _ in pairs], [t for _, t in pairs], chunks=counts)

    def _encode_row(self, row: Row, where: str) -> EncodedPairs:
        if not row.items:
            return EncodedPairs([], [])
        room = self.max_seq_len - self.specials
        query = self.bounder.cut(row.query, room) or row.query
        (query_ids,), failed = tokenize(self.tokenizer, [query], [f"{where}: {field(row.names)}"])
        if failed:
            return EncodedPairs([], [], failed[0])
        if len(query_ids) >= room:
            return EncodedPairs(
                [],
                [],
                f"{where}: {field(row.names)}: {'at least ' if query is not row.query else ''}{len(query_ids)} "
                f"tokens leave no room for an item within --max-seq-len {self.max_seq_len}",
            )
        cut = self.truncate == "item"
        bounded = [self.bounder.cut(item, room) for item in row.items]
        if not cut and any(b is not None for b in bounded):  # over the limit: no need to tokenize it all
            k = next(k for k, b in enumerate(bounded) if b is not None)
            return EncodedPairs(
                [], [], f"{where}: {field(row.names, k)}: the pair is over --max-seq-len {self.max_seq_len} tokens"
            )
        items = [b or item for b, item in zip(bounded, row.items)]
        try:
            enc = self.tokenizer(
                [row.query] * len(items),
                items,
                truncation="only_second" if cut else False,
                max_length=self.max_seq_len if cut else None,
            )
        except Exception:  # noqa: BLE001 - name the item the tokenizer rejects
            _, failed = tokenize(self.tokenizer, items, [f"{where}: {field(row.names, k)}" for k in range(len(items))])
            error = next(iter(failed.values()), f"{where}: field '{row.names[1]}': the tokenizer failed on the pairs")
            return EncodedPairs([], [], error)
        ids = [np.array(x, dtype=np.int64) for x in enc["input_ids"]]
        too_long = [k for k, x in enumerate(ids) if len(x) > self.max_seq_len]
        if too_long:
            k = too_long[0]
            return EncodedPairs(
                [],
                [],
                f"{where}: {field(row.names, k)}: the pair is {len(ids[k])} tokens, over --max-seq-len {self.max_seq_len}",
            )
        types = enc.get("token_type_ids") or [[0] * len(x) for x in ids]
        return EncodedPairs(ids, [np.array(t, dtype=np.int64) for t in types])


@dataclass(frozen=True)
class PairLayout:
    """How a tokenizer lays out a pair: `head A mid B tail`, each piece with its token types,
    learnt from the tokenizer's own encoding of a probe pair (transformers 5's fast tokenizers
    build pairs in their Rust post-processor only, from text)."""

    pieces: tuple[np.ndarray, ...]  # head, mid, tail ids
    piece_types: tuple[np.ndarray, ...]  # their token types
    type_a: int
    type_b: int

    @classmethod
    def of(cls, tokenizer) -> PairLayout:
        a_text, b_text = "scorecli probe query", "an item text"
        a, b = (tokenizer(t, add_special_tokens=False)["input_ids"] for t in (a_text, b_text))
        enc = tokenizer(a_text, b_text)
        full = list(enc["input_ids"])
        types = list(enc.get("token_type_ids") or [0] * len(full))
        i = _find(full, a, 0)
        j = -1 if i < 0 else _find(full, b, i + len(a))
        if j < 0 or len(set(types[i : i + len(a)])) > 1 or len(set(types[j : j + len(b)])) > 1:
            raise UsageError("--chunk-tokens: this tokenizer's pairs cannot be rebuilt from token ids")
        cuts = [(0, i), (i + len(a), j), (j + len(b), len(full))]
        ids, kinds = np.array(full, dtype=np.int64), np.array(types, dtype=np.int64)
        return cls(tuple(ids[s:e] for s, e in cuts), tuple(kinds[s:e] for s, e in cuts), types[i], types[j])

    def pair(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(input ids, token type ids) of the pair (a, b)."""
        (head, mid, tail), (th, tm, tt) = self.pieces, self.piece_types
        ids = np.concatenate([head, a, mid, b, tail])
        types = np.concatenate(
            [th, np.full(len(a), self.type_a, dtype=np.int64), tm, np.full(len(b), self.type_b, dtype=np.int64), tt]
        )
        return ids, types


def _find(seq: list[int], sub: list[int], start: int) -> int:
    """First index >= start where `sub` occurs in `seq`, else -1."""
    for i in range(start, len(seq) - len(sub) + 1):
        if seq[i : i + len(sub)] == sub:
            return i
    return -1
