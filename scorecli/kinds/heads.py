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
        difference: bool = False,
    ):
        """`multiplier` scales the logits before `softcap` caps them, as the model's own head does;
        `difference`: one score, the first label's logit less the second's (the first's alone when
        it is the only one), then the activation (sentence-transformers' LogitScore)."""
        self.difference = difference
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
        if self.difference:
            return activate(logit_score(label_logits), self.activation)
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


def logit_score(label_logits: torch.Tensor) -> torch.Tensor:
    """[N, 1 or 2] label logits -> [N, 1]: the first less the second, or the first alone."""
    if label_logits.shape[-1] == 1:
        return label_logits
    return label_logits[..., :1] - label_logits[..., 1:2]


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


# what sentence-transformers scores a document with no token left to compare (every token masked)
EMPTY_DOCUMENT_SCORE = -1e9


def maxsim(
    query: torch.Tensor, query_mask: torch.Tensor, item: torch.Tensor, item_mask: torch.Tensor, mean: bool = False
) -> torch.Tensor:
    """The MaxSim head: [N] float32 scores of row-aligned token vectors, as sentence-transformers'
    `maxsim` computes them: for each scored query token its best similarity with a scored item
    token, summed (`mean`: divided by the scored query tokens, MeanMaxSim). An item with no scored
    token gets `EMPTY_DOCUMENT_SCORE`.

    Args:
        query: [N, Lq, D]; query_mask: [N, Lq] bool, the query tokens that count.
        item: [N, Ld, D]; item_mask: [N, Ld] bool, the item tokens that count.
    """
    sims = torch.bmm(query, item.transpose(1, 2))  # [N, Lq, Ld]
    # masked item tokens never win the max (a zero would beat a negative similarity)
    sims = sims.masked_fill(~item_mask[:, None, :], torch.finfo(sims.dtype).min)
    best = sims.max(dim=-1).values.float() if sims.shape[-1] else sims.new_zeros(sims.shape[:2]).float()
    scores = (best * query_mask.float()).sum(dim=-1)  # [N]
    scores = scores.masked_fill(~item_mask.any(dim=-1), EMPTY_DOCUMENT_SCORE)
    if mean:
        scores = scores / query_mask.sum(dim=-1).clamp(min=1).float()
    return scores


def sparse_dot(
    item: torch.Tensor, values: torch.Tensor, norms: tuple[torch.Tensor, torch.Tensor] | None = None
) -> torch.Tensor:
    """The sparse dot-product head: [N] float32 dot products of sparse vectors, from the items' values
    `item` [N, K] at the dimensions where their query's `values` [N, K] are (0 where padded); with
    `norms` (the items' [N] and the queries' [N] L2 norms), their cosine, as `cos_sim` divides."""
    dot = (item.double() * values.double()).sum(dim=-1)
    if norms is not None:
        dot = dot / (norms[0].double().clamp(min=1e-12) * norms[1].double().clamp(min=1e-12))
    return dot.float()
