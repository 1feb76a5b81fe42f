"""A faster, exact encoder stack for BERT-family cross-encoders (BERT, RoBERTa, XLM-R, ELECTRA).

A cross-encoder's score reads only the first ([CLS]) token of the last layer. This stack
is the `encoder` module of a view of the model (`forward.with_encoder`) and differs
from the model's own encoder in two ways:
  - the query, key and value projections of every layer run as one fused GEMM;
  - the last layer computes its queries, attention output, feed-forward and norms for the
    [CLS] rows only (its keys and values still come from every token), so it costs about a
    sixth of a full layer.
Everything else is the model's own code and weights: its embeddings, its attention mask,
its LayerNorms and activation, its pooler and classification head. The results equal the
model's own forward to float rounding (tests compare against HF and sentence-transformers).
Models that do not have exactly this structure run their own forward (`supports`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions

# Layer classes whose forward is: self-attention (query/key/value, scaled dot product,
# absolute positions only) -> SelfOutput(dense, dropout, LayerNorm(+residual)) ->
# Intermediate(dense, act) -> Output(dense, dropout, LayerNorm(+residual)), and whose
# sequence-classification heads read position 0 only.
LAYER_CLASSES = {"BertLayer", "RobertaLayer", "XLMRobertaLayer", "CamembertLayer", "ElectraLayer"}
HEAD_CLASSES = {
    "BertForSequenceClassification",
    "RobertaForSequenceClassification",
    "XLMRobertaForSequenceClassification",
    "CamembertForSequenceClassification",
    "ElectraForSequenceClassification",
}


# the same families' base models (embedding models read every token of the last layer)
BASE_CLASSES = {"BertModel", "RobertaModel", "XLMRobertaModel", "CamembertModel", "ElectraModel"}


def supports(model: torch.nn.Module) -> bool:
    """True when `model` is a BERT-family sequence classifier, or base model, this stack
    reproduces exactly."""
    if type(model).__name__ not in HEAD_CLASSES | BASE_CLASSES:
        return False
    config = model.config
    if config.is_decoder or getattr(config, "add_cross_attention", False):
        return False
    if getattr(config, "position_embedding_type", "absolute") not in (None, "absolute"):
        return False
    if getattr(config, "chunk_size_feed_forward", 0):
        return False
    encoder = getattr(model.base_model, "encoder", None)
    layers = getattr(encoder, "layer", None)
    return bool(layers) and all(type(layer).__name__ in LAYER_CLASSES for layer in layers)


def _fuse(sa: torch.nn.Module) -> tuple:
    """(weight [3 * H, H], bias, heads, head size, scale) of one self-attention's Q, K, V."""
    weight = torch.cat([sa.query.weight, sa.key.weight, sa.value.weight])
    bias = torch.cat([sa.query.bias, sa.key.bias, sa.value.bias])
    return weight, bias, sa.num_attention_heads, sa.attention_head_size, sa.scaling


class FastEncoder(torch.nn.Module):
    """Drop-in for `model.base_model.encoder`; one call at a time (it keeps `last_hidden`)."""

    def __init__(self, model: torch.nn.Module, fused: list | None = None):
        super().__init__()
        self.layers = list(model.base_model.encoder.layer)
        self.fused = fused if fused is not None else [_fuse(layer.attention.self) for layer in self.layers]
        self.cls_only = True
        self.last_hidden: torch.Tensor | None = None

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        last = len(self.layers) - 1
        for i, (layer, (weight, bias, heads, head_dim, scale)) in enumerate(zip(self.layers, self.fused)):
            b, length, width = hidden_states.shape
            residual, mask = hidden_states, attention_mask
            if i == last and self.cls_only:
                # queries for the [CLS] row only; keys and values for every token
                residual, n = hidden_states[:, :1], heads * head_dim
                q = F.linear(residual, weight[:n], bias[:n]).view(b, 1, heads, head_dim)
                kv = F.linear(hidden_states, weight[n:], bias[n:]).view(b, length, 2, heads, head_dim)
                k, v = kv.unbind(2)
                mask = None if mask is None else mask[:, :, :1]
            else:
                qkv = F.linear(hidden_states, weight, bias).view(b, length, 3, heads, head_dim)
                q, k, v = qkv.unbind(2)  # each [B, L, heads, d]
            attn = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=scale
            )  # [B, heads, q, d]
            attn = attn.transpose(1, 2).reshape(b, q.shape[1], width)
            hidden_states = layer.feed_forward_chunk(layer.attention.output(attn, residual))
        self.last_hidden = hidden_states
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden_states)
