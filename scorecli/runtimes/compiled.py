"""`torch.compile` wrapped around a decoder's layers: the code is transformers' own, made fast.

Eagerly, a decoder layer on a GPU spends most of its time outside its matrix products: every
RMSNorm, rotary embedding, activation and residual add is several kernels that stream the
activations through memory (measured on an H200, Qwen3-0.6B shapes, 64k-token MIS batches: 64%
of the device time; benchmarks/RESULTS.md). Inductor fuses each of them into one kernel.

- Every layer but the last runs `torch.compile(type(layer).forward, dynamic=True)`: one
  compiled function shared by all layers (their weights are its inputs) and by every batch's
  token count; the last layer stays eager (`forward.RowsLastLayer` computes only the rows read).
- Attention stays outside the compiled graphs: transformers' attention function for scorecli
  is `torch.compiler.disable`d (`attention.registry`), so every backend runs as it does
  eagerly, planned once per batch.
- A compile that fails (no compiler, an unsupported construct) puts the layers back as they
  were, with one warning, when the run chose compilation itself (`--compile auto`); a compiled
  forward that scores differently is caught by the start-up self-check, which does the same
  (its reference runs the layers eagerly, `paused`).

Knows nothing about batches, kinds or files.
"""

from __future__ import annotations

import contextlib
import types
import warnings
from collections.abc import Iterable, Iterator

import torch

from scorecli.attention.registry import traced_through
from scorecli.errors import UsageError, notice
from scorecli.runtimes import Speedup

# devices where `--compile auto` compiles: inductor's GPU kernels repay their compile; on a CPU its
# C++ build takes longer than most jobs gain
AUTO_DEVICES: tuple[str, ...] = ("cuda",)
# ... and jobs of at least this much forward work (2 x parameters x the inputs' tokens, estimated at
# 4 bytes a token). On an H200 (Qwen3-0.6B shapes, benchmarks/RESULTS.md 2026-11-28 04:15) compiling
# saved 26-29% of the scoring (1.13-1.17 us per token MIS computes) and cost 3.9-5.1 s of a process's
# start-up with inductor's cache warm and the bytecode kept (7.6-13.3 s before, 2026-11-27): it repays
# itself from 3.4-4.4M tokens, 4-5e15 FLOP of English text on that model
COMPILE_MIN_FLOPS = 5e15


def compile_layers(
    choice: str, base: torch.nn.Module, device: torch.device, job_tokens: int | None = None, in_graph: bool = True
) -> CompiledLayers | None:
    """`--compile` for a decoder's base model: its layers compiled, or None. `auto` compiles on
    CUDA when the job (`job_tokens`, None: unknown) is long enough to repay the compile;
    `in_graph`: the attention backend runs inside the layers' graphs (`Capabilities.in_graph`).

    Raises:
        UsageError: `--compile on` for layers `runtimes.compiled` cannot wrap.
    """
    if choice == "off" or (choice == "auto" and device.type not in AUTO_DEVICES):
        return None
    if choice == "auto" and job_tokens is not None:
        params = sum(p.numel() for p in base.parameters())
        if 2.0 * params * job_tokens < COMPILE_MIN_FLOPS:
            return None
    if not compilable(base):
        if choice == "on":
            raise UsageError(
                f"--compile on: {type(base).__name__} has no list of decoder layers of one kind to compile"
            )
        return None
    layers: torch.nn.ModuleList = base.layers  # type: ignore[assignment]  # `compilable` checked its type
    return CompiledLayers(layers, strict=choice == "on", in_graph=in_graph)


COMPILE_NOTE = (
    "compiling the model's layers with torch.compile for this device (the first run on this machine "
    "waits for it; --compile off skips it)"
)


def is_compiler_error(exc: BaseException) -> bool:
    """Whether `exc` is the compiler's (dynamo's or inductor's) rather than the model's; inductor
    is imported only when something failed (importing it costs seconds)."""
    from torch._dynamo.exc import TorchDynamoException

    if isinstance(exc, TorchDynamoException):
        return True
    try:
        from torch._inductor.exc import InductorError
    except ImportError:  # older torch: inductor's errors reach us as dynamo's
        return False
    return isinstance(exc, InductorError)


class CompiledLayers(Speedup):
    """A decoder's layers (but the last) run compiled until `restore()` (eagerly while `paused()`).

    Args:
        layers: the model's decoder layers (a `torch.nn.ModuleList` of one class).
        strict: re-raise a compile failure instead of falling back (`--compile on`).
        in_graph: attention runs as an operator inside each layer's graph (else between two).
    """

    name = "the compiled layers"

    def __init__(self, layers: torch.nn.ModuleList, strict: bool = False, in_graph: bool = True) -> None:
        self.layers, self.strict = layers, strict
        self.active = True
        self.said = False
        layer_type = type(layers[0])
        compiled = torch.compile(layer_type.forward, dynamic=True)
        eager = layer_type.forward

        def forward(layer, *args, **kwargs):
            if not self.active:
                return eager(layer, *args, **kwargs)
            if not self.said:
                self.said = True
                notice(COMPILE_NOTE)
            try:
                with _one_graph(kwargs.values()):
                    return compiled(layer, *args, **kwargs)
            except Exception as exc:
                if self.strict or not is_compiler_error(exc):  # the model's errors (OOM...) go on up
                    raise
                self.restore(f"torch.compile failed ({type(exc).__name__}: {str(exc).strip().splitlines()[0][:160]})")
                return eager(layer, *args, **kwargs)

        for layer in layers[:-1]:
            if in_graph:
                traced_through(layer.modules())  # attention as an operator in the layer's graph
            layer.forward = types.MethodType(forward, layer)

    def restore(self, why: str | None = None) -> None:
        """Run the layers eagerly from now on, saying `why` (if given) once."""
        if self.active:
            self.active = False
            for layer in self.layers[:-1]:
                layer.__dict__.pop("forward", None)
            if why is not None:
                warnings.warn(f"--compile: {why}; running the layers uncompiled", RuntimeWarning, stacklevel=2)


@contextlib.contextmanager
def _one_graph(kwargs: Iterable[object]) -> Iterator[None]:
    """A compiled layer's call, set up so that the compiler traces the layer once, as one graph,
    for every batch (each of these cost a GPU run seconds of start-up, measured on the CPU in
    benchmarks/RESULTS.md 2026-11-28):

    - every dimension of the tensors among its keyword arguments (the rotary tables, positions)
      is left symbolic, as `dynamic=True` leaves the positional ones: otherwise the rotary product
      with the hidden states bakes the first batch's token count into the graph, and the second
      batch traces it again;
    - floats are specialized while it traces (`specialize_float`): they are the layer's constants
      (its attention's scaling, its norms' epsilon), and a symbolic float handed to scorecli's
      attention operator makes the compiler trace the layer twice;
    - transformers' output-capturing hooks (installed on the layer's modules once any forward asked
      for hidden states, as the self-check's reference does) read their collector from a plain
      attribute (None) instead of a context variable, which the compiler cannot trace (a graph
      break in every layer), while this thread's collector asks for nothing: transformers' own
      switch for compiled code (`CompileableContextVar.compiling`).
    """
    for value in kwargs:
        for t in value if isinstance(value, tuple) else (value,):
            if isinstance(t, torch.Tensor):
                for dim in range(t.dim()):
                    torch._dynamo.maybe_mark_dynamic(t, dim)
    config = torch._dynamo.config
    floats, config.specialize_float = config.specialize_float, True
    hooks = _collector()
    # nothing to capture in this thread (no collector, or one that asks for nothing): the hooks return at once
    quiet = hooks is not None and not hooks.compiling and hooks.global_var is None and not hooks.context_var.get()
    if quiet:
        hooks.compiling = True
    try:
        yield
    finally:
        config.specialize_float = floats
        if quiet:
            hooks.compiling = False


def _collector():
    """transformers' output collector (`utils.output_capturing._active_collector`), where this
    transformers has one of the shape `_one_graph` knows; else None."""
    from transformers.utils import output_capturing

    hooks = getattr(output_capturing, "_active_collector", None)
    return hooks if all(hasattr(hooks, a) for a in ("compiling", "global_var", "context_var")) else None


def compilable(base: torch.nn.Module) -> bool:
    """Whether `base` (a decoder's base model) has layers `CompiledLayers` can wrap: a
    `ModuleList` of one class, at least two of them."""
    layers = getattr(base, "layers", None)
    return isinstance(layers, torch.nn.ModuleList) and len(layers) >= 2 and len({type(m) for m in layers}) == 1
