"""Attention that a model computes itself, run by MIS with positions per item.

GPT-1, BLOOM, MPT, Falcon and GPT-Neo compute attention in their own modules, never through
scorecli's backends, with index-based causal masks and (BLOOM, MPT, Falcon with `alibi`)
ALiBi biases built from token indices, or (GPT-Neo's local layers) windows counted in token
indices. In a packed MIS row an item's index is not its position, so these adapters hand the
module what it would build for the item after its prefix alone: the MIS mask, ALiBi biases
read at each key's position, and local windows counted in positions (a window that reaches
back into the prefix counts the prefix's positions). Masks and biases are dense over the
padded layout, so these models run under padded backends (sdpa, eager). Knows nothing about
batches beyond `ForkLayout`.
"""

from __future__ import annotations

import math
import sys

import torch

from scorecli.attention.dense import mis_allowed
from scorecli.forks.layout import Swapped


class PaddedAttention(Swapped):
    """An attention module swapped in for a forward call (`forks.run`); subclasses override the
    mask and bias arguments its layer passes (`arguments`) or compute it (`forward`)."""

    @property
    def allowed(self) -> torch.Tensor:
        """[S, 1, L, L] bool: the MIS rule (causal; the prefix, or the query's own item)."""
        layout = self.layout
        assert layout is not None and layout.segment is not None, "positional attention runs on padded layouts"
        return layout.masks("allowed", lambda: mis_allowed(layout.segment)[:, None])

    def additive(self, allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        zero = torch.zeros((), dtype=dtype, device=allowed.device)
        return torch.where(allowed, zero, torch.finfo(dtype).min)

    def alibi(self, table: torch.Tensor) -> torch.Tensor:
        """[S, H, 1, L]: the model's own ALiBi row `table` [H, 1, n] read at each key's position."""
        positions = self.layout.positions  # type: ignore[union-attr]
        return table[:, 0, positions].permute(1, 0, 2)[:, :, None]

    @torch.compiler.disable
    def forward(self, *args, **kwargs):
        return self.inner(*args, **self.arguments(kwargs))

    def arguments(self, kwargs: dict) -> dict:
        raise NotImplementedError


def _dtype(module: torch.nn.Module) -> torch.dtype:
    return next(module.parameters()).dtype


def _own(module: torch.nn.Module, name: str):
    return getattr(sys.modules[type(module).__module__], name)


class MaskedAttention(PaddedAttention):
    """GPT-1's `Attention`: its index-causal mask allows every key the MIS rule does; the MIS
    mask goes in as its additive `attention_mask`."""

    def arguments(self, kwargs):
        return kwargs | {"attention_mask": self.additive(self.allowed, _dtype(self.inner))}


class WindowAttention(PaddedAttention):
    """GPT-Neo's `GPTNeoSelfAttention` (float32 scores): local layers' windows are counted in
    positions; its own index window is lifted (plain causal) for the call."""

    def forward(self, *args, **kwargs):
        m, allowed = self.inner, self.allowed
        if m.attention_type != "local":
            return m(*args, **kwargs | {"attention_mask": self.additive(allowed, torch.float32)})
        positions = self.layout.positions  # type: ignore[union-attr]
        near = (positions[:, :, None] - positions[:, None, :]) < m.config.window_size  # [S, L, L]
        own, length = m.bias, positions.shape[1]
        m.bias = torch.ones(1, 1, length, length, dtype=torch.bool, device=own.device).tril()
        try:
            return m(*args, **kwargs | {"attention_mask": self.additive(allowed & near[:, None], torch.float32)})
        finally:
            m.bias = own


class AlibiAttention(PaddedAttention):
    """BLOOM's and Falcon's attention: ALiBi at key positions (their `alibi` argument,
    [S * H, 1, L]) and the MIS mask; Falcon's model also folds ALiBi / sqrt(head_dim) into its
    mask, which is repeated here. Falcon without ALiBi (rotary) takes the mask only."""

    def arguments(self, kwargs):
        m, allowed, dtype = self.inner, self.allowed, _dtype(self.inner)
        if kwargs.get("alibi") is None:
            return kwargs | {"attention_mask": self.additive(allowed, dtype)}
        positions = self.layout.positions  # type: ignore[union-attr]
        ones = torch.ones(1, self.layout.max_position + 1, dtype=torch.long, device=positions.device)  # type: ignore[union-attr]
        alibi = self.alibi(_own(m, "build_alibi_tensor")(ones, m.num_heads, dtype))  # [S, H, 1, L]
        if type(m).__name__.startswith("Falcon"):
            mask = alibi / math.sqrt(m.head_dim)
            mask = mask.masked_fill(~allowed, torch.finfo(dtype).min)
        else:
            mask = self.additive(allowed, dtype)
        return kwargs | {"alibi": alibi.flatten(0, 1), "attention_mask": mask}


class MptAttention(PaddedAttention):
    """MPT's attention: its ALiBi (`position_bias`, [H, 1, L]) is one row for the whole batch,
    so the module's steps run here, with the bias at each key's position."""

    @torch.compiler.disable
    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        m = self.inner
        b, length = hidden_states.shape[:2]
        qkv = m.Wqkv(hidden_states)
        if m.clip_qkv:
            qkv = qkv.clamp(min=-m.clip_qkv, max=m.clip_qkv)
        q, k, v = (x.reshape(b, length, m.n_heads, m.head_dim).transpose(1, 2) for x in qkv.chunk(3, dim=2))
        table = _own(m, "build_mpt_alibi_tensor")(m.n_heads, self.layout.max_position + 1, device=q.device)  # type: ignore[union-attr]
        scores = torch.matmul(q, k.transpose(-1, -2)) * m.softmax_scale + self.alibi(table)
        scores = scores.masked_fill(~self.allowed, torch.finfo(q.dtype).min)
        weights = torch.softmax(scores.float(), dim=-1).to(v.dtype)
        context = torch.matmul(weights, v).permute(0, 2, 1, 3).reshape(b, length, -1)
        return m.out_proj(context), weights
