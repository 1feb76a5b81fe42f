"""What runs a model's forward, and speed-ups wrapped around it.

- `compiled`: `torch.compile` around a decoder's layers (norms, projections, rotary and MLP
  fused), attention left to scorecli's backends.
This package knows nothing about files, rows or the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scorecli.errors import UsageError

if TYPE_CHECKING:
    import torch

    from scorecli.runtimes.compiled import CompiledLayers


# devices where `--compile auto` compiles: inductor's GPU kernels repay their compile in a few batches;
# on a CPU its C++ build takes longer than most jobs gain
AUTO_DEVICES: tuple[str, ...] = ("cuda",)


def compile_layers(choice: str, base: torch.nn.Module, device: torch.device) -> CompiledLayers | None:
    """`--compile` for a decoder's base model: its layers compiled (`auto`: on CUDA), or None.

    Raises:
        UsageError: `--compile on` for layers `runtimes.compiled` cannot wrap.
    """
    if choice == "off" or (choice == "auto" and device.type not in AUTO_DEVICES):
        return None
    from scorecli.runtimes.compiled import CompiledLayers, compilable

    if not compilable(base):
        if choice == "on":
            raise UsageError(f"--compile on: {type(base).__name__} has no list of decoder layers of one kind to compile")
        return None
    return CompiledLayers(base.layers, strict=choice == "on")
