"""Scaled dot-product attention with the options decoder models use, on any device.

`attention` is torch SDPA unless the model soft-caps its attention logits (Gemma 2:
`attn_logit_softcapping`, `softcap = cap * tanh(scores / cap)` before the mask) or has
attention sinks (GPT-OSS: a learned logit per head that joins every softmax), which SDPA's
kernels cannot do: the scores are then computed explicitly, as the model's own eager code
does (softmax in float32). This module knows nothing about masks' meaning or batches.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    causal: bool = False,
    sinks: torch.Tensor | None = None,
    explicit: bool = False,
) -> torch.Tensor:
    """query [b, H, q, d], key/value [b, KV, k, d] (KV divides H), additive float mask
    broadcastable to [b, H, q, k] -> [b, H, q, d]. `causal`: no mask, q == k. `sinks` [H]:
    per-head attention-sink logits (GPT-OSS `s_aux`), a key every query sees with no value.
    `explicit` (or a soft cap, or sinks): computed as matmul, soft cap, mask, float32 softmax
    (over the keys and the sink), matmul: the models' own eager path."""
    if not (explicit or softcap or sinks is not None):
        return F.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, scale=scale, is_causal=causal, enable_gqa=key.shape[1] != query.shape[1]
        )
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.matmul(query, key.transpose(2, 3)) * scale  # [b, H, q, k]
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    if causal:
        q, k = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(q, k, dtype=torch.bool, device=scores.device).triu(1), float("-inf"))
    if mask is not None:
        scores = scores + mask
    if sinks is None:
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    else:
        sink = sinks.to(scores.dtype).reshape(1, -1, 1, 1).expand(*scores.shape[:3], 1)  # [b, H, q, 1]
        weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1, dtype=torch.float32)[..., :-1]
        weights = weights.to(query.dtype)
    return torch.matmul(weights, value)
