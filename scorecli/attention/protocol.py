"""The protocol every attention backend implements, and the model inputs a plan produces.

A backend turns a ragged `Batch` into model inputs once per batch (`plan`) and computes
attention per layer (`attend`). Knows nothing about tokenization, heads or output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from scorecli.attention.shared import SharedKV
from scorecli.core.batching import Batch


@dataclass(frozen=True, slots=True)
class ModelInputs:
    """Device tensors for one forward pass, in the backend's layout."""

    input_ids: torch.Tensor  # [B, L]
    position_ids: torch.Tensor  # [B, L]
    pool_index: torch.Tensor  # [N] flat index into [B * L] hidden states
    first_index: torch.Tensor  # [N] flat index of each item's sequence start


class AttentionBackend(Protocol):
    name: str
    is_padded: bool
    shares_prefix: bool  # whether batches may continue a shared prefix held in `shared`
    shared: SharedKV | None

    def plan(self, batch: Batch, device: torch.device, dtype: torch.dtype) -> ModelInputs:
        """Prepare masks or kernel plans for this batch; return the model inputs."""
        ...

    def attend(
        self,
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        scaling: float,
        softcap: float | None = None,
        sinks: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """query [b, heads, q, d], key/value [b, kv_heads, k, d] -> [b, q, heads, d]. `softcap`:
        the model's attention-logit soft cap (Gemma 2); `sinks` [heads]: its attention-sink
        logits (GPT-OSS `s_aux`); see `kernel.attention`."""
        ...
