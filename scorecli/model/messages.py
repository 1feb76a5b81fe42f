"""Plain text as chat messages: how sentence-transformers 6.2 embeds text with a folder whose
transformer declares a "message" input mode (docs/models.md: Which models, embedding models).

Its `encode` turns each text into a conversation: a system message holding the prompt (when there
is one), then a user message holding the text, their content plain strings ("flat") or typed parts
("structured"). The conversation is rendered with the tokenizer's chat template (and the keyword
arguments the folder's `processing_kwargs["chat_template"]` gives it), tokenized without special
tokens and cut at the maximum length; a text that reached the maximum gets the template's fixed
tail (e.g. `<|im_end|>`) written back over its last tokens. The prompt is part of the conversation,
so pooling never leaves it out. Knows nothing about models, batches or pooling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from scorecli.core.encode import leading_special_ids, tokenize
from scorecli.core.templates import SENTINELS, Template, has_placeholder, split_rendered
from scorecli.errors import UsageError, first_line

FORMATS = ("flat", "structured")
# the keyword arguments of apply_chat_template that size the output: never template variables
_SIZES = frozenset({"padding", "truncation", "max_length", "return_tensors"})
# sentence-transformers' `InputFormatter` fixes the format of these model types instead of
# inferring it from the template's text (for a folder whose message mode says "auto")
_KNOWN_FORMATS = {"apertus": "flat", "deepseek_v3": "flat", "gpt_oss": "flat", "seed_oss": "flat"}
_STRUCTURED = ("content[0]", ".type", "'type'", '"type"', "item.type", "message.content[")
_FILLERS = ("0", "1 2 3 4")  # two contents that tokenize differently: what follows both is the tail
# (query, document) pairs a folder's pair template is checked on against the one-call tokenization:
# documents that start with a letter, a space, a line break, punctuation, a digit; an empty query
PAIR_PROBES = (
    ("what is a cat", "the cat sat on the mat"),
    ("Who?", " a leading space"),
    ("q", "\n\na line break"),
    ("x y", ".,; punctuation!"),
    ("", "42 is a number"),
)


@dataclass(frozen=True)
class MessageMode:
    """A folder's message input mode: the message format ("auto": inferred from the model type
    and the template, as sentence-transformers does), the chat template's extra variables, and
    whether a cut text gets the template's tail back."""

    format: str
    template_kwargs: tuple[tuple[str, Any], ...] = ()
    restore_suffix: bool = True


def read_mode(entry: dict, chat_kwargs: dict, where: str, output: str = "last_hidden_state") -> MessageMode:
    """The message mode a folder's `modality_config["message"]` entry and its
    `processing_kwargs["chat_template"]` declare (`output`: what its forward must give, the last
    hidden states of an embedding model or a cross-encoder's logits).

    Raises:
        UsageError: what scorecli does not reproduce, named: another output than `output`, an
            unknown format, chat template arguments that size the tokenization.
    """
    if entry.get("method", "forward") != "forward" or entry.get("method_output_name") != output:
        raise UsageError(
            f"cannot load model {where}: its message input runs {entry.get('method')} -> "
            f"{entry.get('method_output_name')}; scorecli reads the {output.replace('_', ' ')} of forward"
        )
    fmt = entry.get("format", "auto")
    if fmt not in (*FORMATS, "auto"):
        raise UsageError(f"cannot load model {where}: unknown message format {fmt!r} (expected flat or structured)")
    kwargs = dict(chat_kwargs)
    restore = bool(kwargs.pop("restore_suffix", True))
    sizes = sorted(_SIZES & kwargs.keys())
    if sizes:
        raise UsageError(
            f"cannot load model {where}: its processing_kwargs chat_template sets {sizes[0]}, which "
            "scorecli does not reproduce"
        )
    return MessageMode(fmt, tuple(sorted(kwargs.items())), restore)


class ChatTexts:
    """Texts rendered through the chat template and tokenized as `encode` does for `mode`.

    Args:
        tokenizer: the model's tokenizer (its chat template renders the messages).
        mode: the folder's `MessageMode`.
        model_type: the model config's `model_type` (an "auto" format may depend on it).
    Raises:
        UsageError: the tokenizer has no chat template.
    """

    def __init__(self, tokenizer, mode: MessageMode, model_type: str):
        template = getattr(tokenizer, "chat_template", None)
        if not template:
            raise UsageError(
                "the model folder declares a 'message' input mode (text rendered through the chat "
                "template), but its tokenizer has no chat template"
            )
        self.tokenizer, self.mode, self.kwargs = tokenizer, mode, dict(mode.template_kwargs)
        self.format = mode.format if mode.format != "auto" else _infer_format(template, model_type)
        self._tails: dict[str, list[int]] = {}

    def encode(
        self, prompts: list[str], texts: list[str], names: list[str], cut: int, limit: int
    ) -> tuple[list[np.ndarray], dict[int, str]]:
        """Token ids of each text with its prompt, cut at `cut` tokens (a text of `limit` tokens
        or more ends in the template's tail), and {index: error} for texts that cannot be rendered
        or tokenized (their ids are empty)."""
        rendered, failed = [], {}
        for t, (prompt, text) in enumerate(zip(prompts, texts)):
            try:
                rendered.append(self.render(prompt, ("user", text)))
            except Exception as exc:  # noqa: BLE001 - a template raises what it likes (raise_exception)
                rendered.append("")
                failed[t] = f"{names[t]}: the chat template failed: {first_line(exc)}"
        ids, tokenize_failed = tokenize(
            self.tokenizer, rendered, names, add_special_tokens=False, truncation=True, max_length=cut
        )
        for t, x in enumerate(ids):
            tail = self.tail(prompts[t]) if self.mode.restore_suffix and len(x) >= limit else []
            keep = min(len(tail), len(x))
            if keep:
                x[-keep:] = tail[-keep:]
        return ids, {**tokenize_failed, **failed}

    def tail(self, prompt: str) -> list[int]:
        """The template's fixed tokens after the text of a conversation with `prompt`: the longest
        common token tail of two renders with different contents (the system message kept), none
        when the renders never differ or cannot be made (sentence-transformers' derivation)."""
        if prompt not in self._tails:
            tail: list[int] = []
            try:
                first, second = (
                    self.tokenizer(self.render(prompt, ("user", f)), add_special_tokens=False)["input_ids"]
                    for f in _FILLERS
                )
                count = next(
                    (k for k, (a, b) in enumerate(zip(reversed(first), reversed(second))) if a != b),
                    min(len(first), len(second)),
                )
                if 0 < count < min(len(first), len(second)):
                    tail = first[len(first) - count :]
            except Exception:  # noqa: BLE001 - as sentence-transformers: no tail rather than no run
                pass
            self._tails[prompt] = tail
        return self._tails[prompt]

    def render(self, prompt: str, *messages: tuple[str, str]) -> str:
        """The chat template's text of a conversation: a system message holding `prompt` (when
        there is one), then one message per (role, text) of `messages`, in the folder's format."""
        conversation = ([self._message("system", prompt)] if prompt else []) + [self._message(*m) for m in messages]
        return self.tokenizer.apply_chat_template(conversation, tokenize=False, **self.kwargs)

    def _message(self, role: str, text: str) -> dict:
        return {"role": role, "content": text if self.format == "flat" else [{"type": "text", "text": text}]}


def _infer_format(template, model_type: str) -> str:
    """The format sentence-transformers' `InputFormatter` infers: fixed for a few model types,
    else structured when the template reads typed content parts, else flat."""
    if model_type in _KNOWN_FORMATS:
        return _KNOWN_FORMATS[model_type]
    if not isinstance(template, str):
        return "structured"
    return "structured" if any(pattern in template for pattern in _STRUCTURED) else "flat"


def pair_template(tokenizer, mode: MessageMode | None, model_type: str, prompt: str, where: str) -> Template:
    """The template a decoder CrossEncoder folder's (query, document) pairs are rendered with, as
    sentence-transformers 6's `CrossEncoder.predict` renders them: with a message mode, a query
    message and a document message (roles "query" and "document", after a system message holding
    the prompt, when there is one) through the chat template, tokenized without special tokens;
    else the text pair (prompt + query, document) as the tokenizer encodes it.

    The prefix is the rendered text before the document, less the whitespace it ends with (which
    starts the item instead: a pre-token never runs from non-space into space), and a textual BOS
    the tokenizer adds itself. The split is checked on `PAIR_PROBES`: the prefix's ids, then the
    item's, must be the pair's own.

    Raises:
        UsageError: the chat template fails, drops or rewrites the query or the document, or
            renders them in another order; the split gives other ids than the pair's.
    """
    lead = leading_special_ids(tokenizer)
    if mode is None:
        if has_placeholder(prompt):
            raise UsageError(f"cannot load model {where}: its prompt {prompt!r} holds a template placeholder")
        template = Template("folder", prompt + "{query}", "{item}")

        def reference(query: str, document: str) -> list[int]:
            return list(tokenizer(prompt + query, document)["input_ids"])

    else:
        chat = ChatTexts(tokenizer, mode, model_type)

        def render(query: str, document: str) -> str:
            return chat.render(prompt, ("query", query), ("document", document))

        def reference(query: str, document: str) -> list[int]:
            return list(tokenizer(render(query, document), add_special_tokens=False)["input_ids"])

        template = _split(render, tokenizer, lead, where)
    for query, document in PAIR_PROBES:
        ours = lead + [
            i
            for text in (template.render_prefix(query, None), template.render_item(document))
            for i in tokenizer(text, add_special_tokens=False)["input_ids"]
        ]
        if ours != reference(query, document):
            raise UsageError(
                f"cannot load model {where}: its (query, document) pair does not tokenize as the text before "
                f"the document, then the document's (probe document {document!r}); scorecli cannot split it"
            )
    return template


def _split(render, tokenizer, lead: list[int], where: str) -> Template:
    """The chat template's render of a pair as a `Template` (`pair_template`)."""
    query, item = SENTINELS["query"], SENTINELS["item"]
    try:
        text, *padded = (render(q, d) for q, d in ((query, item), (query, f" {item} "), (f" {query} ", item)))
    except Exception as exc:
        raise UsageError(
            f"cannot load model {where}: its chat template failed on a (query, document) pair: {first_line(exc)}"
        ) from exc
    kept = isinstance(text, str) and all(isinstance(x, str) for x in padded)
    if not kept or text.count(query) != 1 or text.count(item) != 1 or text.find(query) > text.find(item):
        raise UsageError(
            f"cannot load model {where}: its chat template does not render a pair's query, then its document, once each"
        )
    if f" {item} " not in padded[0] or f" {query} " not in padded[1] or has_placeholder(text):
        raise UsageError(
            f"cannot load model {where}: its chat template does not keep a pair's query and document verbatim "
            "(it trims or rewrites them)"
        )
    adds_bos = lead == [getattr(tokenizer, "bos_token_id", None)]  # the tokenizer puts it there itself
    prefix, rest = split_rendered(text, getattr(tokenizer, "bos_token", None) if adds_bos else None, ("query", "item"))
    return Template("folder", prefix, rest)
