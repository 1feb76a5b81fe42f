"""Heads applied to pooled hidden states, and activations, all in float32.

Pooling (gathering item-end states) happens in `forward.py`; this module only maps
pooled states [N, hidden] to per-item scores [N, labels]. It never sees a full sequence,
so a full-vocabulary lm_head is never computed over every token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_VOCAB_CHUNK = 16384


class ClassifierHead:
    """A linear classifier (`model.score` of `*ForSequenceClassification` decoders)."""

    def __init__(self, linear: torch.nn.Linear, activation: str):
        self.weight = linear.weight.detach().float()  # [C, H]
        self.bias = None if linear.bias is None else linear.bias.detach().float()
        self.activation = activation

    def __call__(self, pooled: torch.Tensor) -> torch.Tensor:
        """pooled [N, H] -> scores [N, C] float32."""
        return activate(F.linear(pooled.float(), self.weight, self.bias), self.activation)


class LabelTokenHead:
    """Label-token scores of a causal LM, read from its `lm_head` at pooled positions.

    activation "none": full-vocabulary probabilities exp(log_softmax(logits))[label]
    (computed in float32, vocabulary in chunks); "softmax": softmax over the label
    tokens' logits only, which needs only the label rows of `lm_head`.
    """

    def __init__(
        self,
        lm_head: torch.nn.Linear,
        label_ids: list[int],
        activation: str,
        softcap: float | None,
        multiplier: float = 1.0,
    ):
        """`multiplier` scales the logits before `softcap` caps them, as the model's own head does."""
        self.lm_head = lm_head
        self.multiplier = multiplier
        ids = torch.tensor(label_ids, dtype=torch.long, device=lm_head.weight.device)
        self.label_ids = ids
        self.label_weight = lm_head.weight.detach()[ids].float()  # [C, H]
        bias = getattr(lm_head, "bias", None)
        self.label_bias = None if bias is None else bias.detach()[ids].float()
        self.activation = activation
        self.softcap = softcap

    def __call__(self, pooled: torch.Tensor) -> torch.Tensor:
        """pooled [N, H] -> scores [N, C] float32."""
        h = pooled.float()
        label_logits = self._cap(F.linear(h, self.label_weight, self.label_bias))  # [N, C]
        if self.activation != "none":
            return activate(label_logits, self.activation)
        return torch.exp(label_logits - self._logsumexp(h)[:, None])

    def _logsumexp(self, h: torch.Tensor) -> torch.Tensor:
        """log-sum-exp of the full-vocabulary float32 logits, chunk by chunk: [N]."""
        weight = self.lm_head.weight.detach()
        bias = getattr(self.lm_head, "bias", None)
        parts = []
        for start in range(0, weight.shape[0], _VOCAB_CHUNK):
            w = weight[start : start + _VOCAB_CHUNK].float()
            b = None if bias is None else bias.detach()[start : start + _VOCAB_CHUNK].float()
            parts.append(torch.logsumexp(self._cap(F.linear(h, w, b)), dim=-1))  # [N]
        return torch.logsumexp(torch.stack(parts, dim=-1), dim=-1)

    def _cap(self, logits: torch.Tensor) -> torch.Tensor:
        if self.multiplier != 1.0:
            logits = logits * self.multiplier
        if self.softcap:
            return torch.tanh(logits / self.softcap) * self.softcap
        return logits


def lm_logit_transform(model: torch.nn.Module) -> tuple[float | None, float]:
    """(soft cap, multiplier) a causal LM applies to its lm_head's logits: Gemma's
    `final_logit_softcapping`, Cohere's `logit_scale` (times), Granite's `logits_scaling`
    (divided by)."""
    config = model.config
    softcap = getattr(config, "final_logit_softcapping", None)
    multiplier = 1.0
    scale = getattr(model, "logit_scale", None)
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        multiplier *= float(scale)
    if getattr(config, "logits_scaling", None):
        multiplier /= float(config.logits_scaling)
    return softcap, multiplier


def activate(logits: torch.Tensor, activation: str) -> torch.Tensor:
    """Apply `none`, `softmax` (over the last dim) or `sigmoid` to float32 logits."""
    logits = logits.float()
    if activation == "softmax":
        return torch.softmax(logits, dim=-1)
    if activation == "sigmoid":
        return torch.sigmoid(logits)
    return logits
