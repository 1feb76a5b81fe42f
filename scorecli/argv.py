"""Command lines that the parser would read as something else than what was meant, refused before
it reads them (docs/cli.md: Exit codes). Knows nothing about what the options do.

A short option takes the rest of its word as its value, so `-out prev.parquet` is `-o ut` and a
second input `prev.parquet`: the run writes a file named `ut`, exit 0. A word of one dash that
spells a long option of the command (`-out`, `-model`, `-top-k`, `-out=x`) is such a typo.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scorecli.errors import UsageError


def check_glued(params: Sequence[Any], args: Sequence[str]) -> None:
    """UsageError for the first word of `args` that is a one-dash spelling of a long option of
    `params` (click's parameters), or a short option glued to `=` and a value (`-o=x` would write
    a file named `=x`); the values of options and the words after `--` are not looked at."""
    longs = {name for p in params for name in (*p.opts, *p.secondary_opts) if name.startswith("--")}
    takes_value = {name for p in params if _takes_value(p) for name in p.opts}
    value_next = False
    for word in args:
        if value_next:  # a value, whatever it looks like (`--instruction -out`)
            value_next = False
            continue
        if word == "--":
            return
        if word.startswith("-") and not word.startswith("--") and len(word) > 2:
            _check_word(word, longs, takes_value)
        value_next = word in takes_value  # `--out X`, `-o X`; not `--out=X` or `-oX`


def _check_word(word: str, longs: set[str], takes_value: set[str]) -> None:
    name, short = "-" + word.split("=", 1)[0], word[:2]
    glued = f" ({word} reads as {short} {word[2:]})" if short in takes_value else ""
    if name in longs:
        raise UsageError(f"{word}: did you mean -{word}? A long option takes two dashes{glued}")
    if short in takes_value and word[2] == "=":
        raise UsageError(f"{word}: give the value after a space ({short} {word[3:]}){glued}")


def _takes_value(param: Any) -> bool:
    return param.param_type_name == "option" and not param.is_flag and not getattr(param, "count", False)
