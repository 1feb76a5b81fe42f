"""The Hugging Face reference of docs/models.md: How items are scored, computed independently of scorecli's code paths.

Item k's reference is the model's own forward pass over the single sequence P + I_k
(P with the tokenizer's special tokens, I_k without), read at its last token.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer


def load_reference(path: str, kind: str, attn: str = "sdpa", dtype: torch.dtype = torch.float32, device: str = "cpu"):
    auto = AutoModelForCausalLM if kind == "causal-lm" else AutoModelForSequenceClassification
    model = auto.from_pretrained(path, dtype=dtype, attn_implementation=attn).to(device).eval()
    return model, AutoTokenizer.from_pretrained(path)


def sequence_ids(tok, prefix, item) -> list[int]:
    """P + I_k token ids: text is tokenized (P with special tokens), ids are used as-is."""
    p = tok(prefix).input_ids if isinstance(prefix, str) else list(prefix)
    i = tok(item, add_special_tokens=False).input_ids if isinstance(item, str) else list(item)
    return p + i


@torch.inference_mode()
def reference_item(model, kind: str, ids: list[int], label_ids=None, activation="none"):
    """(scores [labels], pooled last hidden state [H]) of one sequence, float32 numpy."""
    out = model(input_ids=torch.tensor([ids], device=model.device), output_hidden_states=True)
    hidden = out.hidden_states[-1][0, -1].float().cpu()
    logits = out.logits[0, -1] if kind == "causal-lm" else out.logits[0]
    logits = logits.float().cpu()
    if kind == "causal-lm":
        if activation == "none":
            scores = torch.exp(torch.log_softmax(logits, dim=-1))[label_ids]
        else:
            scores = _activate(logits[label_ids], activation)
    else:
        scores = _activate(logits, activation)
    return scores.numpy(), hidden.numpy()


def _activate(logits, activation):
    if activation == "softmax":
        return torch.softmax(logits, dim=-1)
    if activation == "sigmoid":
        return torch.sigmoid(logits)
    return logits


def reference_rows(model, tok, kind, rows, label_ids=None, activation="none"):
    """Per row: (scores [n_items, labels], hidden [n_items, H]) from single-sequence runs."""
    result = []
    for row in rows:
        prefix = row.get("query", row.get("query_ids"))
        items = row.get("items", row.get("item_ids"))
        pairs = [reference_item(model, kind, sequence_ids(tok, prefix, it), label_ids, activation) for it in items]
        if not pairs:
            result.append((None, None))
            continue
        result.append((np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])))
    return result
