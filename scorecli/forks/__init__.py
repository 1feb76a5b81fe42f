"""MIS for decoders whose layers a mask cannot keep apart: recurrent state forked at the prefix,
and attention a model computes itself given positions per item.

scorecli's MIS row `P I1 I2 ...` is exact when tokens meet only in attention that runs under
scorecli's backends (`model.compat`). Two kinds of layers break that, and each registered
class here gets an adapter swapped in for a forward call (`Fork.running`):
  - recurrent mixers (`MIXERS`: gated delta-net, Mamba-1/2, lightning attention): the
    prefix runs once, and every item runs from its own copy of the prefix's final
    convolution and recurrent state (`forks.mixers`, `forks.mamba1`); the model's attention
    layers keep the MIS mask of whichever backend runs;
  - attention computed by the model's own code (`ATTENTIONS`: GPT-1, BLOOM, MPT, Falcon,
    GPT-Neo): the MIS mask, ALiBi at key positions and local windows counted in positions
    (`forks.positional`), on padded layouts only (`Fork.ragged_reason`).
A model is forked when every layer that needs it holds a registered class its adapter supports
as the installed transformers wrote it (`fork_for`); otherwise it stays single-item, with the
reason (`model.compat.Support`). Adding a family is its adapter and one entry below, with
tests/test_forks.py's exactness test.
This package knows nothing about rows, scoring or output.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass

import torch

from scorecli.core.batching import Batch
from scorecli.forks.layout import ForkLayout

# recurrent mixers, by "<model folder>.<class>": their adapter, "module:Class"
MIXERS = {
    "qwen3_next.Qwen3NextGatedDeltaNet": "scorecli.forks.mixers:CachedMixer",
    "qwen3_5.Qwen3_5GatedDeltaNet": "scorecli.forks.mixers:CachedMixer",
    "zamba2.Zamba2MambaMixer": "scorecli.forks.mixers:CachedMixer",
    "minimax.MiniMaxLightningAttention": "scorecli.forks.mixers:LightningMixer",
    "jamba.JambaMambaMixer": "scorecli.forks.mamba1:JambaMixer",
    "zamba.ZambaMambaMixer": "scorecli.forks.mamba1:ZambaMixer",
}
# attention modules that compute attention themselves
ATTENTIONS = {
    "openai.Attention": "scorecli.forks.positional:MaskedAttention",
    "gpt_neo.GPTNeoSelfAttention": "scorecli.forks.positional:WindowAttention",
    "bloom.BloomAttention": "scorecli.forks.positional:AlibiAttention",
    "falcon.FalconAttention": "scorecli.forks.positional:AlibiAttention",
    "mpt.MptAttention": "scorecli.forks.positional:MptAttention",
}


def class_key(module: torch.nn.Module) -> str:
    """'<model folder>.<class>' of a module (`MIXERS`, `ATTENTIONS`)."""
    cls = type(module)
    parts = cls.__module__.split(".")
    return f"{parts[-2] if len(parts) > 1 else parts[0]}.{cls.__name__}"


@dataclass(frozen=True)
class Swap:
    owner: torch.nn.Module
    name: str
    adapter: torch.nn.Module
    recurrent: bool  # a mixer (not needed where every sequence is one padded item)


@dataclass(frozen=True)
class Fork:
    """The adapters of one model, and why ragged backends cannot run it ('' : they can)."""

    swaps: tuple[Swap, ...]
    ragged_reason: str

    def running(self, batch: Batch, padded: bool, device: torch.device) -> contextlib.AbstractContextManager:
        """Swap the adapters in for one forward call over `batch` (laid out padded or ragged).
        Mixers are left out where each sequence is one item of a padded layout: causal layers
        never read the right padding, so the model's own layer is exact there."""

        single = padded and int(batch.item_counts.max()) <= 1
        swaps = [s for s in self.swaps if not (single and s.recurrent)]
        if not swaps:
            return contextlib.nullcontext()
        layout = ForkLayout.of(batch, padded, device)
        stack = contextlib.ExitStack()
        for swap in swaps:
            swap.adapter.layout = layout
            stack.enter_context(_swapped(swap.owner, swap.name, swap.adapter))
        return stack


@contextlib.contextmanager
def _swapped(owner: torch.nn.Module, name: str, module: torch.nn.Module):
    own = owner._modules[name]
    owner._modules[name] = module
    try:
        yield
    finally:
        owner._modules[name] = own


def fork_for(layers: list[torch.nn.Module], needed: set[int], stateful: list[torch.nn.Module]) -> Fork | None:
    """The model's Fork, when every layer in `needed` (indices into `layers`: layers whose tokens
    meet outside scorecli's attention) holds a registered class and every module of `stateful`
    (modules that carry state across tokens, by class name) is a registered mixer, inside one or
    holding one (a Mamba decoder layer); else None."""
    swaps, covered, inside, seen, mixers = [], set(), set(), set(), set()
    for i, layer in enumerate(layers):
        for owner in layer.modules():
            for name, child in owner.named_children():
                key = class_key(child)
                target = MIXERS.get(key) or ATTENTIONS.get(key)
                if target is None or id(child) in seen:
                    continue
                seen.add(id(child))
                module_name, class_name = target.split(":")
                cls = getattr(importlib.import_module(module_name), class_name)
                if not cls.supports(child):  # this transformers' layer takes no state we can give it
                    continue
                adapter = cls(child)
                swaps.append(Swap(owner, name, adapter, key in MIXERS))
                covered.add(i)
                if key in MIXERS:
                    inside.update(id(m) for m in child.modules())
                    mixers.add(id(child))
    holds = [id(m) in inside or any(id(c) in mixers for c in m.modules()) for m in stateful]
    if not needed <= covered or not all(holds):
        return None
    own = sorted({type(s.adapter.inner).__name__ for s in swaps if not s.recurrent})
    reason = (
        f"its attention ({own[0]}) adds its own masks and position biases, which scorecli builds over padded "
        "sequences only"
        if own
        else ""
    )
    return Fork(tuple(swaps), reason)
