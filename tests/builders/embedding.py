"""Tiny sentence-transformers model folders for the embedding kind, built and saved with
sentence-transformers itself (a test dependency: scorecli never imports it)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tests.builders import models


def _base(out_dir: Path, base: str) -> str:
    """A tiny base model (no head) with the suite's local tokenizers: BERT or Qwen3."""
    import transformers

    torch.manual_seed(0)
    if base == "bert":
        tok = models.build_wordpiece_tokenizer()
        model = transformers.BertModel(models.tiny_bert_config(tok), add_pooling_layer=False)
    else:
        tok = models.build_bpe_tokenizer(add_bos=False)
        config = models._decoder_config(transformers.Qwen3Config, tok, models._TINY_DECODER, {})
        torch.manual_seed(0)
        model = transformers.Qwen3Model(config)
    return models._save(model, tok, out_dir)


def build_sentence_model(
    out_dir,
    base: str = "bert",
    pooling: str | tuple = "mean",
    include_prompt: bool = True,
    dense: bool = False,
    normalize: bool = False,
    prompts: dict | None = None,
    similarity: str | None = None,
    max_seq_length: int | None = None,
    chat: dict | None = None,
    truncate_dim: int | None = None,
) -> str:
    """A sentence-transformers folder: Transformer (`base`), Pooling, optionally Dense (tanh, to
    24 dimensions) and Normalize; `prompts` and `similarity` go to its config. `chat` (a Qwen3
    base, whose tokenizer has a chat template): the folder as sentence-transformers 6.2 saves it,
    reading text as chat messages, with what `chat` gives written over what it saved: "template"
    (the chat template), "format" (None: none, which sentence-transformers infers) and
    "processing_kwargs". `truncate_dim`: saved in its config, as sentence-transformers saves it."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

    out = Path(out_dir)
    transformer = Transformer(_base(out / "base", base), max_seq_length=max_seq_length)
    dim = transformer.get_embedding_dimension()
    modules = [transformer, Pooling(dim, pooling_mode=pooling, include_prompt=include_prompt)]
    torch.manual_seed(1)
    if dense:
        modules.append(Dense(modules[1].get_embedding_dimension(), 24))
    if normalize:
        modules.append(Normalize())
    model = SentenceTransformer(
        modules=modules, prompts=prompts, similarity_fn_name=similarity, device="cpu", truncate_dim=truncate_dim
    )
    model.save(str(out / "st"))
    # the prompts the model defines, as a folder says them (sentence-transformers 6 adds an empty
    # `query` and `document` prompt of its own when it saves, and again when it loads)
    config = json.loads((out / "st" / "config_sentence_transformers.json").read_text())
    config["prompts"] = prompts or {}
    (out / "st" / "config_sentence_transformers.json").write_text(json.dumps(config))
    bert = out / "st" / "sentence_bert_config.json"
    if chat is not None:
        saved = json.loads(bert.read_text())
        message = saved["modality_config"]["message"]  # what 6.2 writes for a tokenizer with a chat template
        if "format" in chat:
            message.pop("format")
            message.update({"format": chat["format"]} if chat["format"] else {})
        saved.update({k: v for k, v in chat.items() if k == "processing_kwargs"})
        bert.write_text(json.dumps(saved))
        if "template" in chat:
            (out / "st" / "chat_template.jinja").write_text(chat["template"])
    elif base != "bert":  # as older folders (Qwen3-Embedding's) say it: plain text, not chat messages
        bert.write_text(json.dumps({"max_seq_length": max_seq_length or 512}))
    return str(out / "st")
