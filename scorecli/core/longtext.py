"""Bound the tokenizer's work on very long texts without changing the tokens that are used.

Only the first few thousand tokens of an item are ever scored (`--max-seq-len`), yet a fast
tokenizer given a 49 MB item builds every token of it, with offsets, first: gigabytes. So a
text far longer than it can matter is cut before it is tokenized, where cutting provably
keeps the tokens that are used:

- A fast tokenizer normalizes the text (character by character), splits it into pre-tokens
  (by a regex, at whitespace, ...) and runs its model (BPE, WordPiece, Unigram) on each
  pre-token alone. So if the whole text has a pre-token boundary at character b, every token
  that ends at or before b is the same in the whole text and in any cut of it that goes past
  b, and these tokens come first in both.
- A boundary here is a space that follows a non-space, where the tokenizer's own pre-tokenizer
  ends a piece (checked on the text around it: pre-tokenizers split by local rules).
- The cut is made at such a boundary j after a first boundary b (the text after b may tokenize
  differently once cut: a template's text can follow the cut directly). It is kept only when
  at least `need` tokens end at or before b; otherwise the cut is tried twice as long, and in
  the end the whole text is used. Tokenizers without a pre-tokenizer (one BPE "word" over
  the whole text) and slow tokenizers are never cut.

Knows nothing about rows, templates or models: callers say what comes before and after the text.
"""

from __future__ import annotations

import re

# a text is cut only when longer than this many characters per token that can be used
CHARS_PER_TOKEN = 16
_BOUNDARY = re.compile(r"(?<=\S) ")
_CONTEXT = 64  # characters on each side of a boundary given to the pre-tokenizer to check it
_TRIES = 16  # candidate boundaries checked before a cut is given up


class Bounder:
    """Cuts long texts for one tokenizer (see the module docstring)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self.pre = getattr(backend, "pre_tokenizer", None)

    def cut(self, text: str, need: int, before: str = "", after: str = "") -> str | None:
        """A prefix of `text` such that tokenizing `before + prefix + after` starts with the same
        `need` tokens as `before + text + after` does, and has more than `need` tokens.

        Returns None when `text` is short enough to tokenize whole, or no such cut exists.
        """
        if self.pre is None or len(text) <= CHARS_PER_TOKEN * need:
            return None
        start = CHARS_PER_TOKEN * need
        while start < len(text):
            stable = self._boundary(text, start)
            cut = None if stable is None else self._boundary(text, stable + 1)
            if cut is None:
                return None
            if self._stable_tokens(before + text[:cut] + after, len(before) + stable) >= need:
                return text[:cut]
            start = 2 * cut
        return None

    def _stable_tokens(self, text: str, end: int) -> int:
        """How many tokens of `text` end at or before character `end`."""
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return sum(1 for _, stop in enc["offset_mapping"] if stop <= end)

    def _boundary(self, text: str, start: int) -> int | None:
        """The first pre-token boundary at or after `start` (a space following a non-space)."""
        for _ in range(_TRIES):
            found = _BOUNDARY.search(text, start)
            if found is None:
                return None
            at = found.start()
            lo = max(0, at - _CONTEXT)
            pieces = self.pre.pre_tokenize_str(text[lo : at + _CONTEXT])
            edge = at - lo
            if any(e == edge for _, (_, e) in pieces) and not any(s < edge < e for _, (s, e) in pieces):
                return at
            start = at + 1
        return None
