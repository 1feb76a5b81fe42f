"""Pooling parts: which token states a kind's score reads (`KINDS[kind].pooling`, `POOLINGS`).

`last` and `cls` are gathered by the forward itself (`runtimes.forward`: an item's last token, a
sequence's first); `sentence` is a sentence-transformers Pooling module (`model.sentence.pool`);
`tokens` keeps every token (a multi-vector kind masks them, `kinds.multi_vector`); `splade` is
here. Everything runs on the device, in float32. Knows nothing about heads or batches' layout.
"""

from __future__ import annotations

import torch


def splade(logits: torch.Tensor, present: torch.Tensor, pooling: str, activation: str) -> torch.Tensor:
    """SPLADE pooling, as sentence-transformers' SpladePooling computes it: log(1 + relu(logits))
    (`log1p_relu`: log1p once more) of every token that is present, then max (or sum) over tokens.

    Args:
        logits: [S, L, K] float32 MLM logits (at K vocabulary entries: all, or those a query holds).
        present: [S, L] bool, the tokens of each text (padding contributes 0, as it does there).
    Returns:
        [S, K] float32.
    """
    x = torch.log1p(torch.relu(logits * present[..., None].to(logits.dtype)))
    if activation == "log1p_relu":
        x = torch.log1p(x)
    if x.shape[1] == 0:
        return x.new_zeros(x.shape[0], x.shape[2])
    return x.amax(dim=1) if pooling == "max" else x.sum(dim=1)


def top_dims(vectors: torch.Tensor, keep: int | None) -> torch.Tensor:
    """[S, V] with all but the `keep` largest values (by magnitude) of each row zeroed, as
    sentence-transformers' `max_active_dims` keeps them (None: unchanged)."""
    if keep is None:
        return vectors
    top = torch.topk(vectors.abs(), k=min(keep, vectors.shape[-1]), dim=-1).indices
    return torch.zeros_like(vectors).scatter_(-1, top, vectors.gather(-1, top))
