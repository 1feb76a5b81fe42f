"""What runs a model's forward, and speed-ups wrapped around it.

- `compiled`: `torch.compile` around a decoder's layers (norms, projections, rotary and MLP
  fused), attention left to scorecli's backends; `compile_layers` below decides `--compile`;
- `budget`: the default token budget of a batch (the device's free memory on CUDA);
- `onnx`, `int8`: ONNX Runtime for BERT-family encoders on CPU, and its int8 copy (`--runtime`);
- `fast_encoder`: BERT-family encoders with fused QKV and a last layer computed at the rows read.
This package knows nothing about files, rows or the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scorecli.errors import UsageError

if TYPE_CHECKING:
    import torch

    from scorecli.runtimes.compiled import CompiledLayers


# devices where `--compile auto` compiles: inductor's GPU kernels repay their compile; on a CPU its
# C++ build takes longer than most jobs gain
AUTO_DEVICES: tuple[str, ...] = ("cuda",)
# ... and jobs of at least this much forward work (2 x parameters x tokens): compiling costs about 11 s
# per process even with inductor's cache warm (importing it, tracing, loading kernels) and saved 37%
# of the forward time on an H200 (Qwen3-0.6B shapes: 10.7 s -> 6.7 s of scoring for 1.9M tokens,
# benchmarks/RESULTS.md), so it repays itself from about 30 s of uncompiled forward work there
COMPILE_MIN_FLOPS = 5e15


def compile_layers(choice: str, base: torch.nn.Module, device: torch.device,
                   job_tokens: int | None = None) -> CompiledLayers | None:  # fmt: skip
    """`--compile` for a decoder's base model: its layers compiled, or None. `auto` compiles on
    CUDA when the job (`job_tokens`, None: unknown) is long enough to repay the compile.

    Raises:
        UsageError: `--compile on` for layers `runtimes.compiled` cannot wrap.
    """
    if choice == "off" or (choice == "auto" and device.type not in AUTO_DEVICES):
        return None
    if choice == "auto" and job_tokens is not None:
        params = sum(p.numel() for p in base.parameters())
        if 2.0 * params * job_tokens < COMPILE_MIN_FLOPS:
            return None
    from scorecli.runtimes.compiled import CompiledLayers, compilable

    if not compilable(base):
        if choice == "on":
            raise UsageError(f"--compile on: {type(base).__name__} has no list of decoder layers of one kind to compile")
        return None
    return CompiledLayers(base.layers, strict=choice == "on")
