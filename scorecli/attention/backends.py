"""Every attention backend, what it declares it can do, and the one place `--attention` is chosen.

vLLM's attention backends each declare what they support and a selector returns the reasons one
cannot run; this table does the same for scorecli's (docs/ARCHITECTURE.md: adding a backend is
its module and one entry here). Nothing outside `scorecli.attention` compares a backend's name
with a string: callers ask `choose` for a choice and `capabilities` for what it can do.

This module imports no torch (the CLI checks `--attention` before torch loads); dtypes are
named as strings. It knows nothing about models or batches.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass

from scorecli.errors import UsageError
from scorecli.runtimes import installed
from scorecli.runtimes.prefetch import prefetch


@dataclass(frozen=True)
class Capabilities:
    """What a backend declares.

    Attributes:
        devices: device types it runs on.
        float32_exact: whether a float32 model's attention runs in float32 (flashinfer's kernels
            run it in float16: the self-check then allows 16-bit rounding).
        head_dims: the head sizes it takes (None: any).
        ragged: a batch's sequences concatenated into one row `[1, T]`, so a model whose layers
            mix packed sequences cannot run on it (`model.compat.Support.packed`); else padded
            `[S, L]`, paying for the padding in the token budget.
        shares_prefix: batches may continue a prefix computed once (`attention.shared`).
        needs: a package it imports (None: torch alone).
        model_attention: transformers' own attention implementation of that name, which an
            encoder (a cross-encoder's or embedding model's own forward) runs under (None: the
            model's default).
        fused_encoder: BERT-family encoders may run scorecli's fused encoder
            (`runtimes.fast_encoder`, which calls sdpa) under this choice.
        in_graph: under compiled layers (`runtimes.compiled`) it runs as an operator inside each
            layer's one graph (`registry`); else the compiler compiles around it, a graph break
            on each side (flex: its own compiled kernel cannot run inside an operator).
    """

    devices: frozenset[str]
    float32_exact: bool = True
    head_dims: tuple[int, ...] | None = None
    ragged: bool = False
    shares_prefix: bool = True
    needs: str | None = None
    model_attention: str | None = None
    fused_encoder: bool = False
    in_graph: bool = True


@dataclass(frozen=True)
class Entry:
    capabilities: Capabilities
    factory: str  # "module:Class" of the backend, imported when it is built


# Head sizes flashinfer's prefill kernels are built for (0.7.2 on an H100: a model with head_dim 16
# failed inside the kernel, "Invalid configuration : NUM_MMA_Q=2 NUM_MMA_D_QK=1 ..."); others are
# refused at the first layer with a usage error, which `--attention auto` turns into sdpa.
FLASHINFER_HEAD_DIMS: tuple[int, ...] = (64, 128, 256)

BACKENDS: dict[str, Entry] = {
    "flashinfer": Entry(
        Capabilities(
            frozenset({"cuda"}),
            float32_exact=False,
            head_dims=FLASHINFER_HEAD_DIMS,
            ragged=True,
            shares_prefix=False,
            needs="flashinfer",
        ),
        "scorecli.attention.flashinfer:FlashInferBackend",
    ),
    "flex": Entry(
        Capabilities(frozenset({"cpu", "cuda"}), ragged=True, shares_prefix=False, in_graph=False),
        "scorecli.attention.flex:FlexBackend",
    ),
    "sdpa": Entry(
        Capabilities(frozenset({"cpu", "cuda"}), model_attention="sdpa", fused_encoder=True),
        "scorecli.attention.dense:SdpaBackend",
    ),
    "eager": Entry(
        Capabilities(frozenset({"cpu", "cuda"}), model_attention="eager"), "scorecli.attention.dense:EagerBackend"
    ),
}
# what `auto` tries, fastest first; the last one always runs
AUTO_ORDER: tuple[str, ...] = ("flashinfer", "sdpa")
NAMES: tuple[str, ...] = ("auto", *BACKENDS)
AUTO = Capabilities(frozenset({"cpu", "cuda"}), fused_encoder=True)  # what `auto` promises an encoder


@dataclass(frozen=True)
class Choice:
    """A backend to build, and the one `auto` switches to should it fail at run time (or None)."""

    name: str
    fallback: str | None = None


def capabilities(name: str) -> Capabilities:
    """What `--attention name` declares (`auto`: what every choice of it gives an encoder)."""
    if name == "auto":
        return AUTO
    if name not in BACKENDS:
        raise UsageError(f"--attention: expected one of {', '.join(NAMES)}, got {name!r}")
    return BACKENDS[name].capabilities


def reasons(name: str, device: str, half: bool, packed: bool) -> list[str]:
    """Why backend `name` cannot run here (empty: it can). `half`: a 16-bit dtype; `packed`: the
    model's layers keep packed sequences apart."""
    caps, why = BACKENDS[name].capabilities, []
    if device not in caps.devices:
        return [f"it needs a {' or '.join(sorted(d.upper() for d in caps.devices))} device"]
    if caps.ragged and not packed:
        why.append("this model runs single-item only, and this backend concatenates a batch's sequences into one row")
    if caps.needs and not installed(caps.needs):
        why.append(f"the {caps.needs} package is not installed")
    if not caps.float32_exact and not half and device == "cuda" and name in AUTO_ORDER:
        why.append("its kernels take 16-bit dtypes only")  # `auto` keeps float32 exact; explicit runs it in float16
    return why


def choose(requested: str, device: str, half: bool, packed: bool) -> Choice:
    """The backend a run builds for `--attention requested` on `device` (a device type).

    `auto`: the first of `AUTO_ORDER` that can run here, with the next one as its fallback.
    An explicit choice that cannot run: a UsageError naming why (except a missing float32
    kernel, which the backend itself handles in float16 with a warning).
    """
    if requested == "auto":
        fits = [n for n in AUTO_ORDER if not reasons(n, device, half, packed)]
        return Choice(fits[0], fits[1] if len(fits) > 1 else None)
    capabilities(requested)  # unknown names
    why = [r for r in reasons(requested, device, half, packed) if "16-bit" not in r]
    if why:
        raise UsageError(f"--attention {requested}: {'; '.join(why)}; use --attention sdpa or auto")
    return Choice(requested)


def prefetch_for(requested: str, device: str, half: bool) -> None:
    """Start importing, in the background, the package the backend `--attention requested` would
    need on `device` (a device type), so that its import overlaps the model's loading
    (`runtimes.prefetch`); `auto` runs a backend that needs one only in 16-bit (`reasons`)."""
    names = [n for n in AUTO_ORDER if half] if requested == "auto" else [requested] if requested in BACKENDS else []
    for name in names:
        needs = BACKENDS[name].capabilities.needs
        if not needs or device not in BACKENDS[name].capabilities.devices or needs in sys.modules:
            continue  # nothing to import, or imported (or blocked) already
        if importlib.util.find_spec(needs) is not None:
            prefetch(needs)


def fallback(requested: str, chosen: str) -> str | None:
    """The backend `--attention requested` switches to should `chosen` fail at run time (a kernel
    that cannot be compiled, scores that fail the self-check): the next of `AUTO_ORDER` under
    `auto`, none for an explicit choice."""
    if requested != "auto" or chosen not in AUTO_ORDER:
        return None
    later = AUTO_ORDER[AUTO_ORDER.index(chosen) + 1 :]
    return later[0] if later else None


def float32_exact(name: str) -> bool:
    """Whether what runs attention under `name` (a backend, or a runtime's name) keeps a float32
    model's attention in float32."""
    entry = BACKENDS.get(name)
    return entry is None or entry.capabilities.float32_exact


def build(name: str):
    """A new backend object for `name` (a key of `BACKENDS`)."""
    module, cls = BACKENDS[name].factory.split(":")
    return getattr(importlib.import_module(module), cls)()
