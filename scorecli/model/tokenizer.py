"""A checkpoint's tokenizer, loaded and checked before a run relies on it: one that cannot encode
text (no tokenizer files, an empty or broken vocabulary) is refused in one line that says what is
wrong with its files. Knows nothing about weights, kinds or rows.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import warnings
from contextlib import nullcontext

from scorecli.config import ScoreConfig
from scorecli.errors import UsageError, first_line
from scorecli.model.quiet import quiet_transformers

# probe text for a tokenizer: any real vocabulary encodes some of it as known tokens
_TOKENIZER_PROBE = "The quick brown fox jumps over the lazy dog. 0123456789"


def load_tokenizer(path: str, cfg: ScoreConfig):
    """The checkpoint's tokenizer (UsageError: none that encodes text); scorecli checks sequence
    lengths itself, so its `model_max_length` is lifted."""
    from transformers import AutoTokenizer

    name = cfg.model
    if not cfg.trust_remote_code and (own := _own_tokenizer_code(path)):
        warnings.warn(
            f"model {name}: its tokenizer is its own code ({own}, auto_map in tokenizer_config.json), which runs "
            "only with --trust-remote-code: tokenizing with transformers' built-in tokenizer from its files, "
            "which may split text otherwise",
            UserWarning,
            stacklevel=2,
        )
    spm = _unreadable_sentencepiece(path)
    try:
        # without the package, transformers says so in a paragraph, then fails on tiktoken: one line below
        with quiet_transformers(bar=False) if spm else nullcontext():
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=cfg.trust_remote_code)
    except Exception as exc:  # the folder's files: `tokenizers` raises a bare Exception for a bad vocabulary
        problem = _tokenizer_files(path) or (
            f"it has no tokenizer.json, and its {spm} is a SentencePiece model, which needs the sentencepiece "
            "package (pip install sentencepiece)"
            if spm
            else first_line(exc)
        )
        raise UsageError(f"cannot load the tokenizer of {path}: {problem}") from exc
    # scorecli checks sequence lengths itself: no "longer than the maximum" warning from transformers
    # (not even for the probe below, which a tokenizer with a small maximum would warn about)
    tokenizer.model_max_length = int(1e30)
    try:
        ids = tokenizer(_TOKENIZER_PROBE, add_special_tokens=False)["input_ids"]
    except Exception as exc:  # e.g. a WordPiece vocabulary without its unknown token
        problem = _tokenizer_files(path) or f"it cannot encode text ({first_line(exc)})"
        raise UsageError(f"cannot load the tokenizer of {path}: {problem}") from exc
    if not ids or all(i == tokenizer.unk_token_id for i in ids):
        raise UsageError(
            f"cannot load model {name}: its tokenizer encodes text as {'nothing' if not ids else 'unknown tokens only'} "
            "(are its tokenizer files, e.g. tokenizer.json, missing?)"
        )
    return tokenizer


def _own_tokenizer_code(path: str) -> str | None:
    """The class a local folder's tokenizer_config.json names as its own code (`auto_map`'s
    AutoTokenizer entry), which transformers passes over without a word unless remote code is
    trusted, if any."""
    try:
        with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
            auto_map = json.load(f).get("auto_map") or {}
    except (OSError, ValueError, AttributeError):
        return None
    entry = auto_map.get("AutoTokenizer") if isinstance(auto_map, dict) else None
    classes = [c for c in (entry if isinstance(entry, list) else [entry]) if isinstance(c, str)]
    return classes[0].rsplit(".", 1)[-1] if classes else None


# the files a tokenizer is built from when there is no tokenizer.json
_VOCABULARIES = ("vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model")


def _tokenizer_files(path: str) -> str | None:
    """What is wrong with a folder's tokenizer files, when it is plain: no tokenizer.json and an
    empty vocabulary file (None: something else)."""
    if not os.path.isdir(path) or os.path.exists(os.path.join(path, "tokenizer.json")):
        return None
    empty = [
        n for n in _VOCABULARIES if os.path.isfile(os.path.join(path, n)) and not os.path.getsize(os.path.join(path, n))
    ]
    return f"it has no tokenizer.json and its {empty[0]} is empty" if empty else None


_SENTENCEPIECE_FILES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
# a tiktoken file (Llama 3's original tokenizer.model) is text: a base64 token and its rank per line
_TIKTOKEN_LINE = re.compile(rb"[A-Za-z0-9+/=]+ [0-9]+\r?\n")


def _unreadable_sentencepiece(path: str) -> str | None:
    """The name of the SentencePiece model file that is a folder's only tokenizer when the
    sentencepiece package, which transformers needs to read it, is not installed (else None)."""
    if not os.path.isdir(path) or os.path.exists(os.path.join(path, "tokenizer.json")):
        return None
    for name in _SENTENCEPIECE_FILES:
        file = os.path.join(path, name)
        if os.path.isfile(file) and os.path.getsize(file):
            with open(file, "rb") as f:
                if _TIKTOKEN_LINE.match(f.readline(256)):
                    return None
            return name if importlib.util.find_spec("sentencepiece") is None else None
    return None
