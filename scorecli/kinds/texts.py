"""Texts a family encodes apart (the query and each item, as sentence-transformers models read
them): a prompt before each, tokenized with the tokenizer's special tokens, cut at a maximum
length (or chat messages rendered through the chat template); pre-tokenized ids as they are.

Knows nothing about models, batches or scores.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from scorecli.core.encode import tokenize
from scorecli.core.ranking import Chunking
from scorecli.core.rows import Row
from scorecli.errors import field
from scorecli.model.messages import ChatTexts
from scorecli.model.sentence import SentenceModules, prompt_length, prompt_text


def cut_limit(cut: int, owns: tuple[tuple[str, int | None], ...], flag: bool = False) -> str:
    """A text's cut of `cut` tokens, named with where it comes from: `--max-seq-len` when it set
    it (`flag`), else the first of the model's own settings `owns` ((what, its value)) that is
    `cut`, else the model's limit (the positions it embeds)."""
    if flag:
        return f"--max-seq-len {cut} tokens"
    what = next((what for what, value in owns if value == cut), "the model's limit")
    return f"{what} of {cut} tokens"


@dataclass(frozen=True, slots=True)
class EncodedTexts:
    """One row's query and items as token ids (prompts and special tokens included), or an error."""

    query: np.ndarray  # [L_q] int64
    items: list[np.ndarray]  # each [L_k] int64
    skips: tuple[int, int] = (0, 0)  # leading tokens pooling skips: (query, items)
    bare: bool = False  # token ids as given (no prompt, no special tokens around an item)
    error: str | None = None


class TextEncoder:
    """Tokenizes a window's queries and items with their prompts, cut at `max_len` tokens as
    sentence-transformers cuts them (`--truncate error`: a longer text fails its row): prompt and
    text as one string, or, for a folder that reads chat messages, rendered through the chat
    template (`messages.ChatTexts`; `model_type` may decide their format).

    Kinds that read the query and the items differently give `lengths` (the query's cut, the
    items'), `query_specials` (False: the query without the tokenizer's special tokens) and
    `item_names` (the prompt names items take); `whole_items`: items are never cut (they are
    scored in chunks). `limits`: each side's cut as `--truncate error`'s line names it, where it
    comes from (`cut_limit`; None: `--max-seq-len`)."""

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
        *,
        lengths: tuple[int, int] | None = None,
        query_specials: bool = True,
        item_names: tuple[str, ...] = ("document", "passage"),
        whole_items: bool = False,
        limits: tuple[str, str] | None = None,
    ):
        self.tokenizer, self.max_len, self.truncate, self.vocab_size = tokenizer, max_len, truncate, vocab_size
        self.lengths = lengths or (max_len, max_len)
        self.limits = limits or tuple(cut_limit(n, (), flag=True) for n in self.lengths)
        self.query_specials, self.whole_items = query_specials, whole_items
        self.prompts = (
            prompt_text(query_prompt, modules, ("query",)),
            prompt_text(item_prompt, modules, item_names),
        )
        self.chat = None if modules.message is None else ChatTexts(tokenizer, modules.message, model_type)
        # pooling skips a prompt's tokens only in plain text (a chat message's prompt is pooled)
        skips = [
            0 if self.chat is not None else prompt_length(tokenizer, p, modules, cut)
            for p, cut in zip(self.prompts, self.lengths)
        ]
        self.skips = tuple(skips)

    def encode(self, rows: list[Row], wheres: list[str], chunking: Chunking | None = None) -> list[EncodedTexts]:
        texts, prompts, names = [], [], []
        for row, where in zip(rows, wheres):
            if not row.pretokenized:
                texts += [row.query, *row.items]
                prompts += [self.prompts[0]] + [self.prompts[1]] * len(row.items)
                names += [f"{where}: {field(row.names, k)}" for k in (None, *range(len(row.items)))]
        cut = self.max_len + (self.truncate == "error")  # one token more shows a text that is too long
        if self.chat is not None:
            ids, failed = self.chat.encode(prompts, texts, names, cut, self.max_len)
        else:
            ids, failed = self._tokenize(rows, [p + t for p, t in zip(prompts, texts)], names)
        out, at = [], 0
        for row, where in zip(rows, wheres):
            if row.pretokenized:
                out.append(self._pretokenized(row, where))
                continue
            n = 1 + len(row.items)
            out.append(self._checked(ids[at : at + n], names[at : at + n], [failed.get(t) for t in range(at, at + n)]))
            at += n
        return out

    def _tokenize(self, rows: list[Row], texts: list[str], names: list[str]) -> tuple[list, dict[int, str]]:
        """The texts' ids, each side (queries, items) cut at its length, in one call a side."""
        extra = self.truncate == "error"  # one token more shows a text that is too long
        query = np.zeros(len(texts), dtype=bool)
        query[np.cumsum([0] + [1 + len(r.items) for r in rows if not r.pretokenized])[:-1]] = True
        ids: list = [None] * len(texts)
        failed: dict[int, str] = {}
        for side, (cut, specials) in enumerate([(self.lengths[0], self.query_specials), (self.lengths[1], True)]):
            where = np.flatnonzero(query if side == 0 else ~query)
            whole = side == 1 and self.whole_items
            got, bad = tokenize(
                self.tokenizer,
                [texts[t] for t in where],
                [names[t] for t in where],
                add_special_tokens=specials,
                **({} if whole else {"truncation": True, "max_length": cut + extra}),
            )
            for k, t in enumerate(where):
                ids[t] = got[k]
            failed.update({int(where[k]): why for k, why in bad.items()})
        return ids, failed

    def _checked(self, ids: list[np.ndarray], names: list[str], failed: list[str | None]) -> EncodedTexts:
        if len(ids) == 1:  # no items: the query is not embedded
            return EncodedTexts(ids[0], [])
        error = next((f for f in failed if f), None)
        for k, (name, x) in enumerate(zip(names, ids)):
            cut = self.lengths[min(k, 1)]
            if error is None and len(x) > cut and not (k and self.whole_items):
                error = f"{name}: over {self.limits[min(k, 1)]} (--truncate error)"
            if error is None and len(x) == 0 and (k or self.query_specials):
                error = f"{name}: an empty text leaves nothing to embed (this tokenizer adds no special tokens)"
        return EncodedTexts(ids[0], ids[1:], self.skips, error=error)

    def _pretokenized(self, row: Row, where: str) -> EncodedTexts:
        """`query_ids` / `item_ids` used as they are (no prompt, no special tokens added)."""
        texts = [np.array(row.query, dtype=np.int64)] + [np.array(i, dtype=np.int64) for i in row.items]
        names = [f"{where}: {field(row.names, k)}" for k in (None, *range(len(row.items)))]
        for name, x in zip(names, texts):
            if len(x) and int(x.max()) >= self.vocab_size:
                return EncodedTexts(
                    texts[0],
                    [],
                    error=f"{name}: token id {int(x.max())} is outside the vocabulary (size {self.vocab_size})",
                )
        if self.truncate == "item":
            cuts = [self.lengths[0]] + [None if self.whole_items else self.lengths[1]] * (len(texts) - 1)
            texts = [x[:cut] for x, cut in zip(texts, cuts)]
        return dataclasses.replace(self._checked(texts, names, [None] * len(texts)), bare=True)
