"""Recurrent token mixers run from their prefix's state: the prefix once, then every item.

A state-space or linear-attention layer (gated delta-net, Mamba, lightning attention) carries
a convolution window and a recurrent state from token to token, so the MIS rule (an item sees
its prefix and itself) cannot be a mask. `ForkedMixer` runs the batch's prefixes once, batched
across rows (left-padded; the padding is zeroed before the convolution and masked as the
model's own left-padded generation masks it, so each state is the unpadded prefix's), keeps
each prefix's final convolution and recurrent state, and runs every item of every row from
its own prefix's copy of that state, batched (right-padded, which a causal layer never reads).
No state passes from one item to another: each item's is indexed from its prefix's, never
carried (sglang issue #31969 was that leak).

`CachedMixer` runs the mixer's own forward with a `StateCache`: transformers' gated delta-net
(Qwen3-Next, Qwen3.5) and Mamba-2 (Zamba2) layers continue several tokens from a cache's
states, with whatever kernels transformers picked for them (flash-linear-attention,
mamba-ssm, causal-conv1d on CUDA). `LightningMixer` does the same for MiniMax's lightning
attention. Mamba-1 layers, whose multi-token scan starts from zero, are in `forks.mamba1`.
Knows nothing about batches beyond `ForkLayout`, or about scoring.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from scorecli.forks.layout import Swapped

State = tuple[torch.Tensor | None, torch.Tensor | None]  # (convolution window, recurrent state) per sequence


def take(state: State, rows: torch.Tensor) -> State:
    """Each of `rows`' own copy of the state (a new tensor: the items' runs update theirs in place)."""
    return tuple(None if s is None else s.index_select(0, rows) for s in state)  # type: ignore[return-value]


class ForkedMixer(Swapped):
    """A mixer module swapped in for a forward call (`forks.run`); subclasses say how the mixer
    runs over `[B, T, H]` from a state (`run`) and what the layer expects back (`output`)."""

    @torch.compiler.disable  # compiled decoder layers call it as it runs eagerly
    def forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> Any:
        layout = self.layout
        assert layout is not None, "a forked mixer runs under forks.run"
        x = hidden_states.flatten(0, 1)  # [B * L, H]
        prefixes, state = None, (None, None)
        if layout.prefix_index.shape[1]:
            prefixes, state = self.run(layout.gather_prefixes(x), layout.prefix_mask, (None, None))
        items = None
        if layout.item_index.shape[0]:
            items, _ = self.run(layout.gather_items(x), None, take(state, layout.item_seq))
        return self.output(layout.scatter(x, prefixes, items).view_as(hidden_states))

    def run(self, x: torch.Tensor, mask: torch.Tensor | None, state: State) -> tuple[torch.Tensor, State]:
        """x [b, T, H] (zero at padding) from `state` -> ([b, T, H], the state after the last column).
        `mask` [b, T]: left-padded prefixes (None: no padding before a real token)."""
        raise NotImplementedError

    def output(self, out: torch.Tensor) -> Any:
        return out


class StateCache:
    """The part of transformers' `Cache` API a linear-attention mixer calls, for one layer and a
    batch of sequences: convolution and recurrent states in, the new ones out. With `mask` (a
    left-padded prefix) the convolution's input is zero at padding, as an unpadded sequence's
    left edge is, whatever the input projection's bias."""

    def __init__(self, state: State, mask: torch.Tensor | None = None):
        self.conv, self.recurrent = state
        self.mask = mask

    def state(self) -> State:
        return self.conv, self.recurrent

    def get_conv_state(self, layer_idx: int, state_idx: int = 0) -> torch.Tensor | None:
        return self.conv

    def get_recurrent_state(self, layer_idx: int, state_idx: int = 0) -> torch.Tensor | None:
        return self.recurrent

    def is_recording_past(self, layer_idx: int) -> bool:
        return False

    def update_conv_state(self, x: torch.Tensor, layer_idx: int, state_idx: int = 0, **kwargs) -> torch.Tensor:
        """x [b, C, T] -> the columns the convolution runs over (the kept window, then x); keeps the
        last `conv_kernel_size` columns, zero-padded on the left."""
        if self.mask is not None:
            x = x * self.mask[:, None, :].to(x.dtype)
        full = x if self.conv is None else torch.cat([self.conv, x], dim=-1)
        width = kwargs.get("conv_kernel_size") or x.shape[-1]
        kept = full[..., -width:]
        self.conv = F.pad(kept, (width - kept.shape[-1], 0)) if kept.shape[-1] < width else kept.contiguous()
        return full

    def update_recurrent_state(self, state: torch.Tensor, layer_idx: int, state_idx: int = 0, **kwargs):
        self.recurrent = state
        return state

    # MiniMax's lightning attention keeps its one state (sum of decayed K^T V) under these names
    def get_linear_cache(self, layer_idx: int) -> torch.Tensor | None:
        return self.recurrent

    def set_linear_cache(self, layer_idx: int, state: torch.Tensor) -> None:
        self.recurrent = state


class CachedMixer(ForkedMixer):
    """Gated delta-net and Mamba-2 mixers: their own forward over a `StateCache`."""

    def run(self, x, mask, state):
        cache = StateCache(state, mask)
        out = self.inner(x, cache=cache, attention_mask=None if mask is None else mask.to(x.dtype))
        return out, cache.state()


class LightningMixer(ForkedMixer):
    """MiniMax's lightning attention (no convolution; returns (output, state) to its layer)."""

    def run(self, x, mask, state):
        cache = StateCache(state, mask)
        out, _ = self.inner(x, None, None if mask is None else mask.to(x.dtype), cache=cache)
        return out, cache.state()

    def output(self, out):
        return out, None
