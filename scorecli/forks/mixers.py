"""Recurrent token mixers run from their prefix's state: the prefix once, then every item.

A state-space or linear-attention layer (gated delta-net, Mamba, lightning attention) carries
a convolution window and a recurrent state from token to token, so the MIS rule (an item sees
its prefix and itself) cannot be a mask. `ForkedMixer` runs the batch's prefixes once, batched
across rows (left-padded; the padding is zeroed before the convolution and masked as the
model's own left-padded generation masks it, so each state is the unpadded prefix's), keeps
each prefix's final convolution and recurrent state, and runs every item of every row from
its own prefix's copy of that state, batched (right-padded, which a causal layer never reads;
where the mixer pads what it runs to whole chunks, in runs of items that take as many chunks:
`ForkLayout.item_groups`).
No state passes from one item to another: each item's is indexed from its prefix's, never
carried (sglang issue #31969 was that leak).

`CachedMixer` runs the mixer's own forward with a `StateCache`: transformers' gated delta-net
(Qwen3-Next, Qwen3.5) and Mamba-2 (Zamba2) layers continue several tokens from a cache's
states, with whatever kernels transformers picked for them (flash-linear-attention,
mamba-ssm, causal-conv1d on CUDA). `LightningMixer` does the same for MiniMax's lightning
attention. transformers changed how a mixer reads its cache in 5.24 (`cache=`,
`get_recurrent_state`; before: `cache_params=` or `past_key_values=`, `has_previous_state`,
`layers[i].recurrent_states`): `StateCache` answers both, under the keyword the mixer's
forward takes (`cache_keyword`); a mixer that takes none of them is not forked. Mamba-1
layers, whose multi-token scan starts from zero, are in `forks.mamba1`.
Knows nothing about batches beyond `ForkLayout`, or about scoring.
"""

from __future__ import annotations

import functools
import inspect
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from scorecli.forks.layout import ForkLayout, Swapped

State = tuple[torch.Tensor | None, torch.Tensor | None]  # (convolution window, recurrent state) per sequence
# what a mixer's forward calls its cache, newest transformers first (5.24; 5.23 and before)
CACHE_KEYWORDS = ("cache", "cache_params", "past_key_values")


def cache_keyword(module: torch.nn.Module) -> str | None:
    """The keyword under which `module.forward` takes its cache (None: none this package knows)."""
    return _keyword(type(module))


@functools.cache
def _keyword(cls: type) -> str | None:
    params = inspect.signature(cls.forward).parameters
    return next((k for k in CACHE_KEYWORDS if k in params), None)


@functools.cache
def _chunk_rule_block(cls: type) -> int:
    """The default `chunk_size` of the chunked delta rule in `cls`'s model file (1: none there)."""
    rule = getattr(sys.modules[cls.__module__], "torch_chunk_gated_delta_rule", None)
    size = inspect.signature(rule).parameters.get("chunk_size") if rule is not None else None
    return size.default if size is not None and isinstance(size.default, int) else 1


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
            items = self.run_items(x, layout, state)
        return self.output(layout.scatter(x, prefixes, items).view_as(hidden_states))

    def run_items(self, x: torch.Tensor, layout: ForkLayout, state: State) -> torch.Tensor:
        """Every item of `layout` from its prefix's `state` -> [M, I, H'] (zero at padding); in
        runs of similar length where the mixer pads what it runs to whole blocks (`block`)."""
        if self.by_length(x):
            rows, lens = layout.longest_first()
            y, _ = self.run(layout.gather_items(x, rows), None, take(state, layout.item_seq[rows]), lens)
            return torch.empty_like(y).index_copy_(0, rows, y)
        block = self.block()
        groups = layout.item_groups(block) if block > 1 else [(None, layout.item_index.shape[1])]
        if len(groups) == 1:
            return self.run(layout.gather_items(x), None, take(state, layout.item_seq))[0]
        out = None
        for rows, width in groups:
            y, _ = self.run(layout.gather_items(x, rows, width), None, take(state, layout.item_seq[rows]))
            if out is None:
                out = y.new_zeros(layout.item_index.shape[0], layout.item_index.shape[1], y.shape[-1])
            out[rows, :width] = y
        assert out is not None
        return out

    def block(self) -> int:
        """The block the mixer pads every sequence it runs to (its chunked scan's; 1: none)."""
        return 1

    def by_length(self, x: torch.Tensor) -> bool:
        """Whether the mixer runs only the tokens of items it is given longest first with their
        lengths (`run`'s `lens`): a loop over time steps that drops each item as it ends."""
        return False

    def run(
        self, x: torch.Tensor, mask: torch.Tensor | None, state: State, lens: np.ndarray | None = None
    ) -> tuple[torch.Tensor, State]:
        """x [b, T, H] (zero at padding) from `state` -> ([b, T, H], the state after the last column).
        `mask` [b, T]: left-padded prefixes (None: no padding before a real token). `lens` (where
        `by_length`): each sequence's length, longest first, right padding after."""
        raise NotImplementedError

    def output(self, out: torch.Tensor) -> Any:
        return out


class StateCache:
    """The part of transformers' `Cache` API a linear-attention mixer calls (5.24's, and the
    `has_previous_state` / `layers[i]` reads of 5.23 and before), for one layer and a batch of
    sequences: convolution and recurrent states in, the new ones out. With `mask` (a
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

    # transformers <= 5.23 asks whether a layer has states, then reads them per layer
    def has_previous_state(self, layer_idx: int | None = None, state_idx: int = 0) -> bool:
        return self.conv is not None or self.recurrent is not None

    @property
    def layers(self) -> _Layers:
        return _Layers(self)

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


class _Layers:
    """`cache.layers[i]` of transformers <= 5.23: any layer's states are the one layer's here."""

    def __init__(self, cache: StateCache):
        self.cache = cache

    def __getitem__(self, layer_idx: int) -> SimpleNamespace:
        cache = self.cache
        return SimpleNamespace(conv_states=[cache.conv], recurrent_states=[cache.recurrent], record_past=False)


class CachedMixer(ForkedMixer):
    """Gated delta-net and Mamba-2 mixers: their own forward over a `StateCache`."""

    @staticmethod
    def supports(module: torch.nn.Module) -> bool:
        """Whether this transformers' mixer takes a cache this package can stand in for."""
        return cache_keyword(module) is not None

    BLOCK = "chunk_size"  # the mixer's attribute holding its scan's block, where it has one

    def block(self) -> int:
        """The mixer's own block (Mamba-2's `chunk_size`, lightning attention's `block_size`), else
        gated delta-net's chunked rule's (`chunk_size` of the model file's
        `torch_chunk_gated_delta_rule`, as flash-linear-attention's chunks on CUDA)."""
        size = getattr(self.inner, self.BLOCK, None)
        return size if isinstance(size, int) else _chunk_rule_block(type(self.inner))

    def handing(self, cache: StateCache) -> dict[str, StateCache]:
        """The keyword argument that hands the mixer its cache."""
        keyword = cache_keyword(self.inner)
        assert keyword is not None, "forked only where the mixer takes a cache (supports)"
        return {keyword: cache}

    def run(self, x, mask, state, lens=None):
        cache = StateCache(state, mask)
        out = self.inner(x, attention_mask=None if mask is None else mask.to(x.dtype), **self.handing(cache))
        return out, cache.state()


class LightningMixer(CachedMixer):
    """MiniMax's lightning attention (no convolution; returns (output, state) to its layer)."""

    BLOCK = "block_size"

    def run(self, x, mask, state, lens=None):
        cache = StateCache(state, mask)
        out, _ = self.inner(x, None, None if mask is None else mask.to(x.dtype), **self.handing(cache))
        return out, cache.state()

    def output(self, out):
        return out, None
