"""Validate raw rows and tokenize them into prefix and item token ids.

Knows nothing about models' forward passes or attention: it produces `EncodedRow`s for
decoders (template prefix P with the tokenizer's leading special tokens once, items
without) and pair encodings for cross-encoders. Tokenizer calls are batched per window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from scorecli.errors import InputError
from scorecli.pack import EncodedRow, Seq
from scorecli.templates import Template


@dataclass(frozen=True, slots=True)
class Row:
    """A validated input row: text or pre-tokenized query and items."""

    query: str | list[int]
    items: list[str] | list[list[int]]
    instruction: str | None
    id: Any

    @property
    def pretokenized(self) -> bool:
        return not isinstance(self.query, str)


@dataclass(frozen=True)
class Fields:
    query: str = "query"
    items: str = "items"
    id: str = "id"


def parse_row(data: dict, where: str, fields: Fields) -> Row:
    """Check one record's fields and types; raise InputError naming `where` and the field."""
    if fields.query in data or fields.items in data:
        query = _get(data, fields.query, where)
        items = _get(data, fields.items, where)
        if not isinstance(query, str):
            raise InputError(f"{where}: field '{fields.query}': expected a string, got {_type(query)}")
        _check_list(items, where, fields.items, lambda x: isinstance(x, str), "a string")
    elif "query_ids" in data or "item_ids" in data:
        query = _get(data, "query_ids", where)
        items = _get(data, "item_ids", where)
        _check_list(query, where, "query_ids", _is_token, "an int token id")
        _check_list(items, where, "item_ids", lambda x: isinstance(x, list) and all(map(_is_token, x)), "a list of token ids")
    else:
        raise InputError(f"{where}: missing field '{fields.query}' (or 'query_ids')")
    instruction = data.get("instruction")
    if instruction is not None and not isinstance(instruction, str):
        raise InputError(f"{where}: field 'instruction': expected a string, got {_type(instruction)}")
    return Row(query, items, instruction, data.get(fields.id))


def _get(data: dict, name: str, where: str) -> Any:
    if name not in data or data[name] is None:
        raise InputError(f"{where}: missing field '{name}'")
    return data[name]


def _check_list(value: Any, where: str, name: str, ok, what: str) -> None:
    if not isinstance(value, list):
        raise InputError(f"{where}: field '{name}': expected a list, got {_type(value)}")
    for k, x in enumerate(value):
        if not ok(x):
            raise InputError(f"{where}: field '{name}'[{k}]: expected {what}, got {_type(x)}")


def _is_token(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _type(x: Any) -> str:
    return "null" if x is None else type(x).__name__


class DecoderEncoder:
    """Tokenizes rows for decoder models through a template."""

    def __init__(self, tokenizer, template: Template, instruction: str | None, vocab_size: int):
        self.tokenizer = tokenizer
        self.template = template
        self.instruction = instruction
        self.vocab_size = vocab_size
        self.lead = np.array(leading_special_ids(tokenizer), dtype=np.int64)
        suffix = template.item_suffix
        self.suffix_len = len(tokenizer(suffix, add_special_tokens=False)["input_ids"]) if suffix else 0

    def encode(self, rows: list[Row], wheres: list[str]) -> list[EncodedRow]:
        """Encode a window of rows; pre-tokenized rows are used as-is (no template)."""
        text = [k for k, r in enumerate(rows) if not r.pretokenized]
        prefixes = [self.template.render_prefix(rows[k].query, rows[k].instruction or self.instruction) for k in text]
        items = [self.template.render_item(item) for k in text for item in rows[k].items]
        prefix_ids = _tokenize(self.tokenizer, prefixes)
        item_ids = _tokenize(self.tokenizer, items)
        out: list[EncodedRow | None] = [None] * len(rows)
        start = 0
        for k, p in zip(text, prefix_ids):
            n = len(rows[k].items)
            out[k] = EncodedRow(np.concatenate([self.lead, p]), item_ids[start : start + n], self.suffix_len)
            start += n
        for k, r in enumerate(rows):
            if r.pretokenized:
                out[k] = self._pretokenized(r, wheres[k])
        return out  # type: ignore[return-value]

    def _pretokenized(self, row: Row, where: str) -> EncodedRow:
        query = np.array(row.query, dtype=np.int64)
        items = [np.array(i, dtype=np.int64) for i in row.items]
        top = max([int(query.max(initial=0)), *(int(i.max(initial=0)) for i in items)])
        if top >= self.vocab_size:
            field = "query_ids" if int(query.max(initial=0)) == top else "item_ids"
            error = f"{where}: field '{field}': token id {top} is outside the vocabulary (size {self.vocab_size})"
            return EncodedRow(query, [], 0, error)
        return EncodedRow(query, items, 0)


def _tokenize(tokenizer, texts: list[str]) -> list[np.ndarray]:
    if not texts:
        return []
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return [np.array(x, dtype=np.int64) for x in ids]


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

    def seqs(self, first: int) -> list[Seq]:
        """One sequence per pair, read at its last token / first token."""
        return [
            Seq(ids, np.arange(len(ids), dtype=np.int64), len(ids), np.zeros(1, dtype=np.int64),
                np.array([first + k], dtype=np.int64), types)
            for k, (ids, types) in enumerate(zip(self.items, self.types))
        ]  # fmt: skip


class PairEncoder:
    """Tokenizes (query, item) pairs the way cross-encoders were trained."""

    def __init__(self, tokenizer, max_seq_len: int, truncate: str):
        self.tokenizer = tokenizer
        self.max_seq_len = max_seq_len
        self.truncate = truncate

    def encode(self, rows: list[Row], wheres: list[str]) -> list[EncodedPairs]:
        out = []
        for row, where in zip(rows, wheres):
            if row.pretokenized:
                out.append(EncodedPairs([], [], f"{where}: field 'query_ids': cross-encoders need text query and items"))
                continue
            out.append(self._encode_row(row, where))
        return out

    def _encode_row(self, row: Row, where: str) -> EncodedPairs:
        if not row.items:
            return EncodedPairs([], [])
        cut = self.truncate == "item"
        enc = self.tokenizer(
            [row.query] * len(row.items), row.items, truncation="only_second" if cut else False,
            max_length=self.max_seq_len if cut else None,
        )  # fmt: skip
        ids = [np.array(x, dtype=np.int64) for x in enc["input_ids"]]
        too_long = [k for k, x in enumerate(ids) if len(x) > self.max_seq_len]
        if too_long:
            k = too_long[0]
            return EncodedPairs([], [], f"{where}: field 'items'[{k}]: the pair is {len(ids[k])} tokens, over --max-seq-len {self.max_seq_len}")
        types = enc.get("token_type_ids") or [[0] * len(x) for x in ids]
        return EncodedPairs(ids, [np.array(t, dtype=np.int64) for t in types])
