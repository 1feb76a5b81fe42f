"""A token prefix every sequence of a window continues, computed once: its keys and values.

Rows scored with one template usually start with the same tokens (a system prompt and an
instruction, 60+ tokens for `qwen3-reranker`). Under causal attention those tokens' keys and
values do not depend on anything after them, so one forward pass over the shared tokens gives
every layer's keys and values for all sequences: the batches then carry only the tokens after
it (`pack.drop_shared`, positions unchanged) and attention puts the shared keys in front of
every sequence's own. This module knows nothing about tokenization or heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from scorecli.attention.kernel import attention


@dataclass(frozen=True)
class SharedKV:
    """Keys and values of the shared tokens `ids`, per layer ([1, kv_heads, C, d] each)."""

    ids: np.ndarray  # [C] int64
    keys: dict[int, torch.Tensor]
    values: dict[int, torch.Tensor]

    @property
    def length(self) -> int:
        return int(self.ids.shape[0])

    def of(self, module: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """(keys, values) of the layer that `module` (an attention module) belongs to."""
        layer = module.layer_idx
        return self.keys[layer], self.values[layer]

    def prepend(
        self, module: torch.nn.Module, key: torch.Tensor, value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """key/value [S, KV, L, d] -> [S, KV, C + L, d], the shared keys first in every sequence."""
        k0, v0 = self.of(module)
        s = key.shape[0]
        return torch.cat([k0.expand(s, -1, -1, -1), key], dim=2), torch.cat([v0.expand(s, -1, -1, -1), value], dim=2)


class Recorder:
    """Backend of the pass over the shared tokens: one causal sequence; records each layer's
    keys and values (by the attention module's `layer_idx`)."""

    name = "record"
    is_padded = False

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}

    def attend(self, module, query, key, value, scaling, softcap=None, sinks=None):
        self.keys[module.layer_idx], self.values[module.layer_idx] = key, value
        return (
            attention(query, key, value, None, scaling, softcap, causal=True, sinks=sinks).transpose(1, 2).contiguous()
        )


def records_layers(layers) -> bool:
    """Whether every decoder layer's attention module knows its `layer_idx` (needed to record)."""
    return all(isinstance(getattr(getattr(layer, "self_attn", None), "layer_idx", None), int) for layer in layers)
