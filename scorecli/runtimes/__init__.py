"""What runs a model's forward, and speed-ups wrapped around it.

- `compiled`: `torch.compile` around a decoder's layers (norms, projections, rotary and MLP
  fused), attention left to scorecli's backends; its `compile_layers` decides `--compile`;
- `fused_norms`: a decoder's RMSNorms as one `rms_norm` kernel each when its layers run uncompiled;
- `budget`: the default token budget of a batch (the device's free memory on CUDA);
- `onnx`, `int8`: ONNX Runtime for BERT-family encoders on CPU, and its int8 copy (`--runtime`);
- `fast_encoder`: BERT-family encoders with fused QKV and a last layer computed at the rows read.
This package knows nothing about files, rows or the command line.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import os
import sys
from dataclasses import dataclass

from scorecli.runtimes.prefetch import imported


@dataclass(frozen=True)
class RuntimeInfo:
    """What a `--runtime` declares.

    Attributes:
        description: what runs the forward, as the metadata's `attention` says it.
        encoders_only: it runs BERT-family encoders (cross-encoders, embedding models) alone.
        approximate: its scores drift from the model's own forward by design (int8): the
            self-check measures and records the drift instead of judging it.
        auto: `--runtime auto` may choose it (where it can run here).
        needs: a package it imports (None: torch alone).
        help: what `--runtime`'s help says of it, beside its name ("": its name says it).
    """

    description: str
    encoders_only: bool = False
    approximate: bool = False
    auto: bool = True
    needs: str | None = None
    help: str = ""


RUNTIMES: dict[str, RuntimeInfo] = {
    "torch": RuntimeInfo("torch"),
    "onnx": RuntimeInfo(
        "onnxruntime (fused encoder export)", encoders_only=True, needs="onnxruntime", help="exported once, cached"
    ),
    "onnx-int8": RuntimeInfo(
        "onnxruntime (fused encoder export, int8 dynamic quantization)",
        encoders_only=True,
        approximate=True,
        auto=False,
        needs="onnxruntime",
        help="opt-in, int8 dynamic quantization; its drift is measured and recorded",
    ),
}
NAMES: tuple[str, ...] = ("auto", *RUNTIMES)
# what `--runtime auto` runs (`onnx.choose`), as `--runtime`'s help says it; which models a runtime
# other than torch may run
AUTO_HELP = "torch or onnx, whichever this machine ran faster when measured, per sequence length"
APPLIES_TO = "CPU BERT-family encoders"


class Speedup:
    """A speed-up wrapped around a model's modules (`compiled`, `fused_norms`): in force while
    `active`; `paused()` runs the model's own modules for a while (the self-check's reference);
    `restore(why)` puts them back for good, saying why, unless the user asked for it (`strict`)."""

    name: str = "a speed-up"  # as a warning names it
    active: bool = True
    strict: bool = False

    @contextlib.contextmanager
    def paused(self):
        active, self.active = self.active, False
        try:
            yield
        finally:
            self.active = active

    def restore(self, why: str | None = None) -> None:
        raise NotImplementedError


def all_paused(speedups: tuple[Speedup, ...]) -> contextlib.ExitStack:
    """Inside, every speed-up of `speedups` is paused: the model runs its own forward."""
    stack = contextlib.ExitStack()
    for speedup in speedups:
        stack.enter_context(speedup.paused())
    return stack


def runtime_info(name: str) -> RuntimeInfo:
    """What runtime `name` declares (`auto` resolves to one of them per run)."""
    return RUNTIMES[name] if name in RUNTIMES else RUNTIMES["torch"]


def auto_device() -> str:
    """Where `--device auto` runs: "cuda" where torch sees a GPU, else "cpu". A torch built for the
    CPU alone is answered for without importing it (its `version.py` names no CUDA or ROCm
    build), so that a run which needs no model (every pair in the score cache) skips torch's
    import, a second or more of its start-up."""
    if "torch" not in sys.modules and cpu_only_torch():
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cpu_only_torch() -> bool:
    """Whether the installed torch was built without CUDA and ROCm (False when it cannot tell)."""
    try:
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.origin is None:
            return False
        with open(os.path.join(os.path.dirname(spec.origin), "version.py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError, ImportError):
        return False
    builds: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Constant):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            builds |= {t.id: node.value.value for t in targets if isinstance(t, ast.Name)}
    return "cuda" in builds and "hip" in builds and builds["cuda"] is None and builds["hip"] is None


def installed(package: str) -> bool:
    """Whether `package` imports here (a package blocked in `sys.modules` does not); a package
    whose import was prefetched (`runtimes.prefetch`) is waited for, not imported again."""
    import importlib

    if (done := imported(package)) is not None:
        return done
    try:
        importlib.import_module(package)
    except ImportError:
        return False
    return True
