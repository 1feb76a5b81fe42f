"""One fused kernel for each of a decoder's RMSNorms, where transformers' eager code runs five.

transformers' RMSNorm (Llama's, Qwen's, Mistral's and most others') casts the activations to
float32, squares, averages, takes the reciprocal square root, multiplies, casts back and
multiplies by the weight: each step a kernel streaming the activations through memory. On an
H200 with Qwen3-0.6B's shapes the norms (two per layer, and the per-head query and key norms)
took ~100 ms of a 64k-token batch's 341 ms uncompiled (benchmarks/RESULTS.md, 2026-11-26 03:05).
`torch.nn.functional.rms_norm` computes the same in one kernel on CUDA (float32 inside, one
rounding at the end instead of two: within 16-bit rounding of transformers' result, equal in
float32).

Which modules: those of a class named `*RMSNorm` with one 1-D `weight` and an epsilon
(`variance_epsilon` or `eps`) whose forward, run on random float32 input with a random weight,
equals `rms_norm` (checked once per class at start-up: a norm of another formula, Gemma's
`1 + weight` say, is left as it is). A call whose input dtype differs from the weight's runs
the module's own forward. `torch.compile` fuses the norms itself: compiled layers need none of
this. The start-up self-check's reference runs the modules' own forward (`paused`).

Knows nothing about batches, kinds or files.
"""

from __future__ import annotations

import copy
import types
import warnings

import torch
import torch.nn.functional as F

from scorecli.runtimes import Speedup

# devices where decoders run fused norms by default: on a CPU the norms are a small share of the
# forward beside the matrix products
DEVICES: tuple[str, ...] = ("cuda",)


def _eps(module: torch.nn.Module) -> float | None:
    for name in ("variance_epsilon", "eps"):
        value = getattr(module, name, None)
        if isinstance(value, float):
            return value
    return None


def _shaped_like_rms_norm(module: torch.nn.Module) -> bool:
    params = dict(module.named_parameters(recurse=False))
    weight = params.get("weight")
    return (
        type(module).__name__.endswith("RMSNorm")
        and list(params) == ["weight"]
        and weight is not None
        and weight.dim() == 1
        and not list(module.children())
        and not list(module.buffers(recurse=False))
        and _eps(module) is not None
    )


@torch.inference_mode()
def computes_rms_norm(module: torch.nn.Module) -> bool:
    """Whether `module`'s own forward is `rms_norm` with its weight and epsilon (float32, random
    input and weight, on the CPU: a copy, the module itself is not touched)."""
    probe = copy.deepcopy(module).to("cpu", torch.float32)
    gen = torch.Generator().manual_seed(0)
    d = probe.weight.shape[0]
    probe.weight.copy_(torch.rand(d, generator=gen) * 2 - 0.5)  # away from 0 and 1: 1 + w shows
    x = torch.randn(3, 5, d, generator=gen) * 3
    try:
        own = type(probe).forward(probe, x)
    except Exception:  # noqa: BLE001 (a forward that takes other arguments is not a plain norm)
        return False
    if not isinstance(own, torch.Tensor) or own.shape != x.shape:
        return False
    fused = F.rms_norm(x, (d,), probe.weight, _eps(probe))
    return bool(torch.allclose(own, fused, rtol=1e-5, atol=1e-6))


class FusedNorms(Speedup):
    """A model's RMSNorm modules (those `computes_rms_norm` accepts) run `rms_norm` until
    `restore()`; `paused()` runs their own forward for a while."""

    name = "fused RMSNorm"

    def __init__(self, model: torch.nn.Module) -> None:
        verdicts: dict[type, bool] = {}
        self.modules: list[torch.nn.Module] = []
        for module in model.modules():
            if not _shaped_like_rms_norm(module):
                continue
            cls = type(module)
            if cls not in verdicts:
                verdicts[cls] = computes_rms_norm(module)
            if verdicts[cls]:
                self.modules.append(module)
        self.active = bool(self.modules)
        for module in self.modules:
            module.forward = self._fused(module)

    def _fused(self, module: torch.nn.Module):
        """`module`'s forward as `rms_norm`, its own while paused or for another dtype or call."""
        own = types.MethodType(type(module).forward, module)
        shape, eps = (module.weight.shape[0],), _eps(module)

        def forward(hidden_states, *args, **kwargs):
            weight = module.weight
            if not self.active or args or kwargs or hidden_states.dtype != weight.dtype:
                return own(hidden_states, *args, **kwargs)
            return F.rms_norm(hidden_states, shape, weight, eps)

        return forward

    def restore(self, why: str | None = None) -> None:
        """Every module runs its own forward again; `why`: said in one warning."""
        self.active = False
        for module in self.modules:
            module.__dict__.pop("forward", None)
        if why is not None:
            warnings.warn(
                f"{why}; running the model's own norms",
                RuntimeWarning,
                stacklevel=3,
            )


def fuse_norms(model: torch.nn.Module, device: torch.device) -> FusedNorms | None:
    """The model's RMSNorms fused on `device` (a type in `DEVICES`), or None (no device or no
    norm of the standard formula)."""
    if device.type not in DEVICES:
        return None
    fused = FusedNorms(model)
    return fused if fused.modules else None
