"""Tiny multi-vector and sparse model folders, built and saved with sentence-transformers 6 itself
(a test dependency: scorecli never imports it), and the scores sentence-transformers gives for
them: `encode_query` + `encode_document` + `similarity`, row by row."""

from __future__ import annotations

import json
import string
from pathlib import Path

import numpy as np
import torch

from tests.builders import models


def _bert_config(tok, **extra):
    return models.tiny_bert_config(tok, max_position_embeddings=128, **extra)


def _with_markers(tok):
    """The suite's WordPiece tokenizer with Stanford ColBERT's `[unused0]` / `[unused1]` markers in its
    vocabulary (plain entries, which its pre-tokenizer would split: sentence-transformers registers
    them as special tokens)."""
    from tokenizers import Tokenizer
    from tokenizers import models as tm
    from transformers import PreTrainedTokenizerFast

    state = json.loads(tok.backend_tokenizer.to_str())
    vocab = dict(state["model"]["vocab"])
    for marker in ("[unused0]", "[unused1]"):
        vocab[marker] = len(vocab)
    state["model"]["vocab"] = vocab
    backend = Tokenizer.from_str(json.dumps(state))
    backend.model = tm.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##")
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
        model_max_length=512,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


def _tokenizer(bpe: bool):
    """The suite's WordPiece tokenizer, or its byte-level BPE one (a BOS before every text, where
    "passage: " + "the" is one token fewer than "passage: " and "the" apart: "Ġthe"), without a
    chat template (a folder of plain texts)."""
    if not bpe:
        return models.build_wordpiece_tokenizer()
    tok = models.build_bpe_tokenizer(add_bos=True)
    tok.chat_template = None
    return tok


def build_multi_vector(
    out_dir,
    skiplist: bool = True,
    expansion: dict | None = None,
    prompts: dict | None = None,
    similarity: str | None = None,
    query_length: int | None = 16,
    document_length: int | None = 40,
    dim: int = 24,
    bpe: bool = False,
) -> str:
    """A MultiVectorEncoder folder: a 2-layer BERT, a token-level Dense to `dim`, a MultiVectorMask
    (punctuation skip-list when `skiplist`), Normalize; `bpe`: over a byte-level BPE tokenizer
    (`_tokenizer`)."""
    import transformers
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    out = Path(out_dir)
    tok = _tokenizer(bpe)
    torch.manual_seed(0)
    base = models._save(transformers.BertModel(_bert_config(tok), add_pooling_layer=False), tok, out / "base")
    transformer = Transformer(
        base, query_length=query_length, document_length=document_length, query_expansion=expansion
    )
    torch.manual_seed(1)
    dense = Dense(64, dim, bias=False, activation_function=torch.nn.Identity(), module_input_name="token_embeddings")
    mask = MultiVectorMask(skiplist_words=list(string.punctuation) if skiplist else None)
    model = MultiVectorEncoder(
        modules=[transformer, dense, mask, Normalize(module_input_name="token_embeddings")],
        prompts=prompts,
        similarity_fn_name=similarity,
        device="cpu",
    )
    model.save(str(out / "mv"))
    return str(out / "mv")


def build_pylate(out_dir) -> str:
    """A PyLate 3 save (`model_type` ColBERT): modules Transformer and a PyLate Dense (no module IO
    names), the prefixes, lengths and query expansion in the top-level config, no mask module."""
    path = Path(build_multi_vector(out_dir, query_length=None, document_length=None))
    entries = json.loads((path / "modules.json").read_text())
    dense = next(e for e in entries if e["type"].endswith("Dense"))
    dense["type"] = "pylate.models.Dense.Dense"
    (path / "modules.json").write_text(json.dumps([entries[0], dense]))
    config = json.loads((path / dense["path"] / "config.json").read_text())
    for key in ("module_input_name", "module_output_name"):
        config.pop(key)
    (path / dense["path"] / "config.json").write_text(json.dumps(config))
    bert = json.loads((path / "sentence_bert_config.json").read_text())
    (path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": bert.get("max_seq_length", 60)}))
    st = json.loads((path / "config_sentence_transformers.json").read_text())
    st.update(
        model_type="ColBERT",
        prompts={},
        query_prefix="[Q] ",
        document_prefix="[D] ",
        query_length=10,
        document_length=30,
        attend_to_expansion_tokens=False,
    )
    (path / "config_sentence_transformers.json").write_text(json.dumps(st))
    return str(path)


def build_stanford_colbert(out_dir, query_maxlen: int = 12, doc_maxlen: int = 30, dim: int = 16) -> str:
    """A Stanford-format ColBERT checkpoint (`HF_ColBERT`): the encoder's weights under `bert.` and the
    projection `linear.weight` in one model.safetensors, settings in artifact.metadata."""
    import transformers
    from safetensors.torch import save_file

    out = Path(out_dir) / "colbert"
    out.mkdir(parents=True, exist_ok=True)
    tok = _with_markers(models.build_wordpiece_tokenizer())
    torch.manual_seed(2)
    config = _bert_config(tok, architectures=["HF_ColBERT"])
    bert = transformers.BertModel(config, add_pooling_layer=False)
    weights = {f"bert.{k}": v.contiguous() for k, v in bert.state_dict().items()}
    weights["linear.weight"] = torch.randn(dim, 64) * 0.2
    save_file(weights, str(out / "model.safetensors"))
    config.save_pretrained(out)
    tok.save_pretrained(out)
    meta = {
        "query_token_id": "[unused0]",
        "doc_token_id": "[unused1]",
        "query_maxlen": query_maxlen,
        "doc_maxlen": doc_maxlen,
        "mask_punctuation": True,
        "attend_to_mask_tokens": False,
    }
    (out / "artifact.metadata").write_text(json.dumps(meta))
    return str(out)


def build_sparse(
    out_dir, router: bool = False, pooling: str = "max", similarity: str | None = None, bpe: bool = False, **kw
) -> str:
    """A SparseEncoder folder: a 2-layer BertForMaskedLM and SpladePooling; `router`: behind a
    Router whose query side is a SparseStaticEmbedding (random weights); `bpe`: over a byte-level
    BPE tokenizer (`_tokenizer`)."""
    import transformers
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Router, Transformer
    from sentence_transformers.sparse_encoder.modules import SparseStaticEmbedding, SpladePooling

    out = Path(out_dir)
    tok = _tokenizer(bpe)
    torch.manual_seed(3)
    base = models._save(transformers.BertForMaskedLM(_bert_config(tok)), tok, out / "base")
    transformer = Transformer(base, transformer_task="fill-mask")
    modules = [transformer, SpladePooling(pooling)]
    if router:
        torch.manual_seed(4)
        static = SparseStaticEmbedding(tokenizer=transformer.tokenizer, weight=torch.rand(len(tok)) * 2)
        modules = [Router.for_query_document(query_modules=[static], document_modules=modules)]
    model = SparseEncoder(modules=modules, similarity_fn_name=similarity, device="cpu", **kw)
    model.save(str(out / "sparse"))
    return str(out / "sparse")


def reference(path: str, rows: list[dict], kind: str) -> list[np.ndarray]:
    """sentence-transformers' scores of each row: similarity(encode_query([q]), encode_document(items))."""
    from sentence_transformers import MultiVectorEncoder, SparseEncoder

    model = (MultiVectorEncoder if kind == "multi-vector" else SparseEncoder)(path, device="cpu")
    out = []
    for row in rows:
        if not row["items"]:
            out.append(np.zeros(0))
            continue
        query, items = model.encode_query([row["query"]]), model.encode_document(row["items"])
        out.append(model.similarity(query, items)[0].float().numpy())
    return out


def reference_ids(path: str, query: str, item_ids: list[list[int]], kind: str) -> np.ndarray:
    """sentence-transformers' scores of a query against documents given as token ids (chunks of a
    long item), through the model's own modules on those ids."""
    from sentence_transformers import MultiVectorEncoder, SparseEncoder

    model = (MultiVectorEncoder if kind == "multi-vector" else SparseEncoder)(path, device="cpu")
    q = model.encode_query([query])
    docs = []
    with torch.inference_mode():
        for ids in item_ids:
            x = torch.tensor([ids])
            features = {"input_ids": x, "attention_mask": torch.ones_like(x), "token_type_ids": torch.zeros_like(x)}
            got = model(features, task="document")
            if kind == "multi-vector":
                docs.append(got["token_embeddings"][0][got["attention_mask"][0].bool()])
            else:
                docs.append(got["sentence_embedding"][0])
    d = docs if kind == "multi-vector" else torch.stack(docs)
    return model.similarity(q, d)[0].float().numpy()
