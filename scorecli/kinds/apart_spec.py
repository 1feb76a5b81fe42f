"""What the kinds that compare token states (`multi-vector`, `sparse`) share before a batch runs:
their spec rules (flags of other kinds refused, the query's and items' cuts, an encoder only;
their one label is `kinds.spec.one_label`), their prompts, and how their texts are encoded apart (`text_encoder`,
with the `ChunkLayout` every chunk of a long item keeps). How their batches run and compare on the
device is `kinds.apart`'s. Knows nothing about tensors, batches or windows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scorecli.errors import UsageError
from scorecli.kinds import Setup
from scorecli.kinds.spec import label_tokens_refused, refuse, sequence_limit
from scorecli.kinds.texts import TextEncoder, cut_limit
from scorecli.model.sentence import prompt_text
from scorecli.runtimes import runtime_info


def refuse_flags(kind: str, cfg, template) -> None:
    """Flags of other kinds, refused in one line (docs/models.md: Which models)."""
    refuse(
        [
            (cfg.mode == "mis", f"--mode mis: a {kind} model encodes every item as its own sequence already"),
            (
                not template.is_plain or cfg.instruction is not None,
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


# the prompt name sentence-transformers 6's `encode_document` takes for a multi-vector or sparse
# folder: it tries "document", "passage", "corpus" in turn, but every model it loads has a "document"
# prompt (an empty one when the folder names none), so a folder's "passage" or "corpus" prompt is
# never the items'
ITEM_PROMPTS = ("document",)


def item_prompt(given: str | None, folder) -> str:
    """The prompt before every item: `given` (`--item-prompt`: a prompt name of the folder, else
    literal text), else the folder's `ITEM_PROMPTS` one, as the items are encoded."""
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


def check_encoder(kind: str, loaded) -> None:
    """These kinds run their transformer's own bidirectional forward: UsageError for a decoder."""
    if not loaded.is_encoder:
        raise UsageError(
            f"cannot score model {loaded.path} as {kind}: its transformer {loaded.config.model_type} is no encoder "
            "scorecli runs for this kind (BERT, RoBERTa, XLM-R, ModernBERT, ...)"
        )
