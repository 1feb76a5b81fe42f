"""Templates: how a row's query, instruction and items become prefix text P and item texts I_k.

A template is two strings: `prefix` (placeholders `{query}`, `{instruction}`) and `item`
(placeholder `{item}` exactly once; the text after it is a constant suffix). Placeholders are
substituted in one pass, so user text containing "{item}" is never substituted again; any
other brace is literal text.

Boundary rule (docs/models.md: How items are scored). P is tokenized with special tokens, I_k without, and that must give
the same ids as tokenizing P + I_k in one call. For byte-level BPE (GPT-2, Qwen2/3, Llama-3
pre-tokenizer regexes) this holds when P ends with a non-whitespace character and I_k starts
with a single space: a pre-token never runs from non-space into space, and the regexes start
a new pre-token at that space. The prompt presets therefore put the boundary at `<text> | {item}`
(`plain` has no prompt text: its P and I_k are joined as token ids by definition).
Special tokens (e.g. `<|im_end|>`) are split out before pre-tokenization, so text before one
never merges with text after it: the item suffixes of the chat presets start with one, which
also makes `tok(render_item(x))` end with `tok(item_suffix)`.
"""

from __future__ import annotations

import datetime
import difflib
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from scorecli.errors import UsageError

# what turns a head's logits into scores, as a template or `--activation` names it (applied by
# `kinds.heads.activate`)
ACTIVATIONS = ("none", "softmax", "sigmoid")

PRESETS = ("plain", "qwen3-reranker", "yes-no-chat")
NEEDS_TOKENIZER = ("yes-no-chat",)  # presets built from the model's own chat template

_PLACEHOLDER = re.compile(r"\{(query|item|instruction)\}")
# what a template file may mean as a placeholder but is literal text: another case, spaces, a
# plural, or Jinja's/Mustache's double braces (`{{query}}` would keep its outer braces)
_NEAR_PLACEHOLDER = re.compile(r"\{\{\s*\w+\s*\}\}|\{\s*\w+\s*\}")
_MEANT = {"query": "query", "queries": "query", "item": "item", "items": "item"}
_MEANT |= {"instruction": "instruction", "instructions": "instruction"}
_PLACEHOLDERS = ("query", "item", "instruction")  # a word this close to one is a typo of it (`{querry}`)
# a UTF-16 surrogate code point on its own: JSON can spell one ("\\ud800") and so can a command
# line of invalid UTF-8 (Python's surrogateescape), but no tokenizer can encode it
_SURROGATE = re.compile("[\ud800-\udfff]")
_FILE_KEYS = ("name", "prefix", "item", "label_tokens", "activation", "instruction")
# whitespace after a message's text, one kind at a time, to see whether a chat template keeps it
# (Llama 3's and Gemma's write `message['content'] | trim`: Python's str.strip)
_TRAILING = (" ", "\t", "\n", "\u3000", "\n\n")
# the day a chat template that asks for today's date (`strftime_now`: Llama 3.1 and later, Granite)
# is given: Llama 3.1's own default where no clock is offered, so that a pair's prompt, and score,
# do not change with the day it is scored (a job resumed after midnight, the score cache's nights)
FIXED_DAY = datetime.datetime(2024, 7, 26)


def _fixed_day_template(tokenizer) -> str | None:
    """The tokenizer's chat template with `strftime_now` shadowed by a macro that writes
    `FIXED_DAY` in any format (each directive replaced by its value, as `strftime` would), where
    the template asks for today's date; None where it does not. (transformers renders template
    variables as plain data: a function passed to `apply_chat_template` arrives as text.)"""
    try:
        source = tokenizer.get_chat_template()
    except (ValueError, TypeError):
        return None
    if "strftime_now" not in source:
        return None
    marker = "\x00"  # keeps a literal '%%' from being read as a directive's start
    steps = "".join(
        f" | replace('%{c}', {FIXED_DAY.strftime('%' + c)!r})"
        for c in "aAbBcdHIjmMpSUwWxXyYZzGuV"
        if FIXED_DAY.strftime("%" + c) != "%" + c
    ) + "".join(  # glibc's unpadded numbers: '%-d' is '26', '%-m' '7'
        f" | replace('%-{c}', {FIXED_DAY.strftime('%' + c).lstrip('0') or '0'!r})" for c in "dmHIMSjy"
    )
    body = f"fmt | replace('%%', '{marker}'){steps} | replace('{marker}', '%')"
    return "{%- macro strftime_now(fmt) -%}{{ " + body + " }}{%- endmacro -%}" + source


# texts rendered through a chat template in place of each placeholder, found again in its output
SENTINELS = {k: f"SCORECLI{k.upper()}SENTINEL" for k in ("query", "item", "instruction")}

DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"

QWEN3_PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    'and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n'
    "<|im_start|>user\n<Instruct>: {instruction}\n<Query>: {query}\n<Document>:"
)
QWEN3_ITEM = " {item}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"

YES_NO_MESSAGE = (
    'Judge whether the Document is relevant to the Query. Answer only "yes" or "no".\n'
    "Instruction: {instruction}\nQuery: {query}\nDocument: {item}"
)


@dataclass(frozen=True)
class Template:
    """Prefix and item texts with placeholders, plus optional scoring defaults."""

    name: str
    prefix: str  # text with placeholders {query}, {instruction}
    item: str  # text with placeholder {item}; everything after {item} is the constant suffix
    label_tokens: tuple[str, ...] | None = None
    activation: str | None = None  # 'none' | 'softmax' | 'sigmoid' or None
    instruction: str | None = None  # default instruction
    # the item's text ends without trailing whitespace, as a chat template that trims its messages
    # renders the message that ends with it (`yes-no-chat`)
    strips_item_end: bool = False

    def render_prefix(self, query: str, instruction: str | None) -> str:
        """P's text; `instruction` None means the template's default (or "")."""
        if instruction is None:
            instruction = self.instruction or ""
        values = {"query": query, "instruction": instruction}
        return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), self.prefix)

    def render_item(self, item: str) -> str:
        """I_k's text: the item template with `{item}` replaced."""
        if self.strips_item_end:
            before, after = self.item.split("{item}", 1)
            return (before + item).rstrip() + after
        return _PLACEHOLDER.sub(lambda m: item if m.group(1) == "item" else m.group(0), self.item)

    @property
    def is_plain(self) -> bool:
        """Whether this is the `plain` preset (a file's template named `plain`, by its `name` or its
        file's stem `plain.toml`, is not, unless it is the same template)."""
        return self == _plain()

    @property
    def takes_instruction(self) -> bool:
        """Whether the prefix has an `{instruction}` slot (`--instruction` fills it)."""
        return "{instruction}" in self.prefix

    @property
    def item_suffix(self) -> str:
        """The constant text after `{item}` ('' for `plain`)."""
        return self.item.split("{item}", 1)[1]


def has_placeholder(text: str) -> bool:
    """Whether `text` holds a placeholder a template would substitute."""
    return _PLACEHOLDER.search(text) is not None


def split_rendered(text: str, bos: str | None = None, keys: tuple[str, ...] = tuple(SENTINELS)) -> tuple[str, str]:
    """A chat template's render with `SENTINELS` in place of the placeholders `keys`, as a
    template's prefix and item texts (`yes-no-chat`; a decoder CrossEncoder folder's pairs,
    `model.messages`). The cut is before the item's sentinel, less the whitespace before it, which
    starts the item instead (a pre-token never runs from non-space into space: the boundary rule).

    Args:
        text: the render, which holds the item's sentinel once, after the others.
        bos: the tokenizer's textual BOS where the tokenizer adds that BOS itself: dropped from the
            start of `text`, so a prefix tokenized with special tokens holds it once.
        keys: the placeholders rendered as their sentinels; each is written back.
    Returns:
        (prefix, item), each sentinel back to its placeholder.
    """
    if bos and text.startswith(bos):
        text = text[len(bos) :]
    placeholders = {SENTINELS[k]: "{" + k + "}" for k in keys}
    pattern = re.compile("|".join(placeholders))

    def back(part: str) -> str:
        return pattern.sub(lambda m: placeholders[m.group(0)], part)

    prefix = text[: text.index(SENTINELS["item"])].rstrip()
    return back(prefix), back(text[len(prefix) :])


def check_template(name_or_path: str) -> None:
    """What can be told of a template before the model loads: an unknown name or a bad template
    file is a UsageError (a preset built from the model's tokenizer is checked with the model)."""
    if name_or_path not in NEEDS_TOKENIZER:
        load_template(name_or_path)


def load_template(name_or_path: str, tokenizer=None) -> Template:
    """A preset by name, or a `.toml`/`.json` template file; UsageError otherwise.

    `yes-no-chat` needs `tokenizer` (with a chat template); the other presets ignore it.
    """
    if name_or_path == "plain":
        return _checked(_plain(), "template plain")
    if name_or_path == "qwen3-reranker":
        return _checked(
            Template("qwen3-reranker", QWEN3_PREFIX, QWEN3_ITEM, ("yes", "no"), "softmax", DEFAULT_INSTRUCTION),
            "template qwen3-reranker",
        )
    if name_or_path == "yes-no-chat":
        return _checked(_yes_no_chat(tokenizer), "template yes-no-chat")
    path = Path(name_or_path)
    if path.is_file():
        return _load_file(path)
    raise UsageError(f"unknown template {name_or_path}: expected one of {', '.join(PRESETS)}, or a .toml/.json file")


def _plain() -> Template:
    """P = query, I_k = item (docs/models.md: How items are scored), tokenized separately and joined as token ids.

    `plain` has no prompt text between query and item, so the reference sequence is
    tok(query) + tok(item) by definition; the one-call boundary property does not apply.
    """
    return Template("plain", "{query}", "{item}")


def _yes_no_chat(tokenizer) -> Template:
    """A yes/no relevance question in the tokenizer's own chat template.

    The user message is YES_NO_MESSAGE; it is rendered with sentinel strings in place of
    the placeholders (add_generation_prompt=True) and split before ' ' + item sentinel, so
    the item text is ' {item}' + the template's tail (end of turn, assistant header). A chat
    template that trims its messages (`| trim`: Llama 3, Gemma) renders an item's trailing
    whitespace, and the space before an item of whitespace only, nowhere: the item is rendered so
    too (`strips_item_end`); one that rewrites the message's end otherwise is refused.
    BOS rule: if the rendered text starts with the tokenizer's `bos_token` string and the
    tokenizer itself adds that BOS id as a special token, the textual BOS is dropped from
    the prefix, so P (tokenized with special tokens) holds the BOS once. A template that asks for
    today's date gets `FIXED_DAY`.
    """
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise UsageError(
            "template yes-no-chat needs a tokenizer with a chat template; this tokenizer has "
            "none (use --template qwen3-reranker, plain, or a .toml/.json template file)"
        )
    content = _PLACEHOLDER.sub(lambda m: SENTINELS[m.group(1)], YES_NO_MESSAGE)
    dated = _fixed_day_template(tokenizer)
    try:
        text, *probed = (
            tokenizer.apply_chat_template(
                [{"role": "user", "content": message}],
                tokenize=False,
                add_generation_prompt=True,
                **({"chat_template": dated} if dated else {}),
            )
            for message in (content, *(content + space for space in _TRAILING))
        )
    except Exception as e:  # jinja errors, templates that reject the conversation
        raise UsageError(f"template yes-no-chat: the tokenizer's chat template failed: {e}") from e
    if not all(isinstance(x, str) for x in (text, *probed)):
        raise UsageError("template yes-no-chat: apply_chat_template did not return text")
    start = text.find(content)
    strips = all(x == text for x in probed)  # the trailing whitespace is gone: the template trims its messages
    if (
        _PLACEHOLDER.search(text)
        or start < 0
        or any(text.count(s) != 1 for s in SENTINELS.values())
        or not (strips or all(content + space in x for space, x in zip(_TRAILING, probed)))
    ):
        raise UsageError(
            "template yes-no-chat: the tokenizer's chat template does not keep the message "
            "text verbatim; write a .toml/.json template instead"
        )
    bos = getattr(tokenizer, "bos_token", None)
    prefix, item = split_rendered(text, bos if bos and text.startswith(bos) and _adds_bos(tokenizer) else None)
    return Template("yes-no-chat", prefix, item, ("yes", "no"), "softmax", DEFAULT_INSTRUCTION, strips)


def _adds_bos(tokenizer) -> bool:
    """Whether tokenizing with special tokens puts the BOS id first."""
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if bos_id is None:
        return False
    with_special = tokenizer("a", add_special_tokens=True)["input_ids"]
    without = tokenizer("a", add_special_tokens=False)["input_ids"]
    return with_special[:1] == [bos_id] and without[:1] != [bos_id]


def _load_file(path: Path) -> Template:
    """Read a TOML or JSON template file; UsageError naming the file (and key) on error."""
    where = f"template file {path}"
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise UsageError(f"{where}: expected a .toml or .json file")
    try:
        raw = path.read_text(encoding="utf-8-sig")  # a BOM (Windows editors) dropped, as input files' is
        data = tomllib.loads(raw) if suffix == ".toml" else json.loads(raw)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"{where}: cannot read it: {e}") from e
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a table/object with keys 'prefix' and 'item'")
    unknown = sorted(set(data) - set(_FILE_KEYS))
    if unknown:
        raise UsageError(f"{where}: unknown key '{unknown[0]}' (allowed: {', '.join(_FILE_KEYS)})")
    for key in ("prefix", "item"):
        if key not in data:
            raise UsageError(f"{where}: missing key '{key}'")
    for key in ("name", "prefix", "item", "activation", "instruction"):
        if key in data and not isinstance(data[key], str):
            raise UsageError(f"{where}: key '{key}' must be a string")
    for key in ("prefix", "item"):
        _check_spelling(data[key], key, where)
    if "instruction" in data and "{instruction}" not in data["prefix"]:
        raise UsageError(f"{where}: key 'instruction' is the default of '{{instruction}}', which 'prefix' does not use")
    return _checked(
        Template(
            name=data.get("name", path.stem),
            prefix=data["prefix"],
            item=data["item"],
            label_tokens=_label_tokens(data.get("label_tokens"), where),
            activation=data.get("activation"),
            instruction=data.get("instruction"),
        ),
        where,
    )


def _check_spelling(text: str, key: str, where: str) -> None:
    """UsageError for a brace group that reads as a misspelt placeholder (`{Query}`, `{ item }`,
    `{instructions}`, `{querry}`, `{{query}}`): it would stay literal text and its value would be left out."""
    for found in _NEAR_PLACEHOLDER.finditer(text):
        said = found.group().strip("{} \t\n").lower()
        word = _MEANT.get(said) or next(iter(difflib.get_close_matches(said, _PLACEHOLDERS, 1, 0.8)), None)
        if word is not None and found.group() != "{" + word + "}":
            raise UsageError(
                f"{where}: key '{key}': {found.group()!r} is not a placeholder (write {{{word}}}: lower case, "
                "one pair of braces, no spaces)"
            )


def _label_tokens(value, where: str) -> tuple[str, ...] | None:
    """A list of strings (kept verbatim) or a comma string (entries stripped)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",")]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value) or not value:
        raise UsageError(
            f"{where}: key 'label_tokens' must be a non-empty list of non-empty strings or a comma-separated string"
        )
    return tuple(value)


def text_problem(value: str) -> str | None:
    """What makes `value` unusable as text (a lone surrogate), or None."""
    if value.isascii():  # O(1) in CPython: the common case costs nothing
        return None
    found = _SURROGATE.search(value)
    if found is None:
        return None
    return f"lone surrogate {ascii(found.group())[1:-1]} at character {found.start()} is not valid Unicode text"


def _checked(t: Template, where: str) -> Template:
    """Validate placeholders, text and activation; return `t`."""
    for key in ("prefix", "item", "instruction"):
        problem = text_problem(getattr(t, key) or "")
        if problem is not None:
            raise UsageError(f"{where}: key '{key}': {problem}")
    for token in t.label_tokens or ():
        if text_problem(token) is not None:
            raise UsageError(f"{where}: key 'label_tokens': {text_problem(token)}")
    in_item = _PLACEHOLDER.findall(t.item)
    if in_item.count("item") != 1:
        raise UsageError(f"{where}: key 'item' must contain '{{item}}' exactly once")
    if len(in_item) != 1:
        raise UsageError(f"{where}: key 'item' may only use '{{item}}' (query/instruction go in 'prefix')")
    if "item" in _PLACEHOLDER.findall(t.prefix):
        raise UsageError(f"{where}: key 'prefix' must not contain '{{item}}'")
    if t.activation is not None and t.activation not in ACTIVATIONS:
        raise UsageError(f"{where}: key 'activation' must be one of {', '.join(ACTIVATIONS)}, got {t.activation!r}")
    return t
