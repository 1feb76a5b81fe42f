"""Which execution paths reproduce a loaded decoder exactly, decided once at load.

Packing (MIS rows, the ragged one-row layout of flex and flashinfer, the shared-prefix pass)
is exact only when tokens of one sequence reach another solely through attention, and all of
that attention runs in scorecli's backend, which applies the MIS and sequence masks. So:
  - a layer that carries state from token to token outside attention (state-space / Mamba
    mixers, linear or lightning attention, recurrent or convolutional token mixers: named by
    the config's `layer_types` or found by module type), or
  - a layer whose attention never dispatches to the backend (its own attention code, found
    by counting dispatches per layer in one probe forward: GPT-1, BLOOM, MPT, Falcon, GPT-Neo)
needs a fork (`scorecli.forks`): registered mixers run each item from its prefix's state, and
registered attention modules take the MIS mask and positions per item (`Support.fork`). A
model with such a layer that no fork covers is *single-item only*: one padded sequence per
item, right-padded, where causal layers never see the padding. `--mode auto` then runs single-item; `--mode mis`, a ragged
backend and the shared prefix are refused or not used (`Support`).
Refused outright (`UsageError`): a probe forward that fails under scorecli's attention (a
layer that reads a mask we do not build, e.g. a sparse-attention indexer), attention that
builds its own mask or bias (`attention.registry._dispatch`), a model that is not causal (bidirectional
attention modules, or early states that move when later tokens change: an encoder, which
`--kind cross-encoder` runs with its own forward), and a classifier that is more than one
linear layer on the last token. This module knows nothing about rows, batches or output.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch

from scorecli.attention import bound
from scorecli.attention.backends import capabilities
from scorecli.attention.kernel import attention
from scorecli.errors import UsageError, error_line
from scorecli.forks import fork_for
from scorecli.kinds import KINDS

# layer kinds (config `layer_types` values) that are attention computed by the backend
ATTENTION_LAYER_TYPES = {"full_attention", "sliding_attention", "chunked_attention", "attention", "global", "local"}
# substrings of module class names that mix tokens outside attention (state carried across tokens)
STATEFUL_MODULES = ("Mamba", "SSM", "GatedDeltaNet", "LinearAttention", "Lightning", "Recurrent", "RWKV", "ShortConv")


@dataclass(frozen=True)
class Support:
    """What a decoder allows. `packed`: MIS rows, ragged backends and a shared prefix are exact;
    otherwise `reason` says why only padded single-item runs are. `fork` (`forks.Fork`): MIS is
    exact with its adapters swapped in; no shared prefix then, and ragged backends only where
    `fork.ragged_reason` is empty."""

    packed: bool
    reason: str = ""
    fork: Any = None


_CACHE: weakref.WeakKeyDictionary[torch.nn.Module, Support] = weakref.WeakKeyDictionary()


def support_of(loaded) -> Support:
    """The Support of a loaded model (`model.Loaded`): `support` for decoders; a cross-encoder
    runs single-item by its kind, and an encoder (an embedding model's) its own attention."""
    own_forward = not KINDS[loaded.kind].scorecli_attention
    return Support(True) if own_forward or loaded.is_encoder else support(loaded.model, loaded.kind)


def support(model: torch.nn.Module, kind: str) -> Support:
    """The Support of a loaded decoder (`kind` seq-cls or causal-lm), computed once per model.

    Raises:
        UsageError: scorecli cannot reproduce the model in any mode.
    """
    if model not in _CACHE:
        found = _support(model)  # first: an encoder is told to run as a cross-encoder, whatever its head
        if KINDS[kind].classifier_head:
            _check_head(model)
        _CACHE[model] = found
    return _CACHE[model]


def _support(model: torch.nn.Module) -> Support:
    layers = decoder_layers(model)
    silent = _layers_without_dispatch(model, layers)  # first: refuses a model that fails under our attention
    stateful = stateful_reason(model)
    if stateful or silent:
        found = _stateful_modules(layers)
        fork = fork_for(layers, set(silent) | _stateful_indices(model, layers, found), found)
        if fork is not None:
            return Support(True, fork=fork)
    if stateful:
        return Support(False, stateful)
    if silent:
        return Support(
            False,
            f"the attention of {next(iter(silent.values()))} does not go through scorecli's attention backend, "
            "which applies the masks that keep packed sequences apart",
        )
    return Support(True)


def _stateful_modules(layers: list[torch.nn.Module]) -> list[torch.nn.Module]:
    """The modules of `layers` whose class names say they carry state across tokens."""
    return [m for layer in layers for m in layer.modules() if any(k in type(m).__name__ for k in STATEFUL_MODULES)]


def _stateful_indices(model: torch.nn.Module, layers: list[torch.nn.Module], found: list[torch.nn.Module]) -> set[int]:
    """Indices of the layers that mix tokens outside attention (by `layer_types` or module)."""
    kinds = getattr(model.config, "layer_types", None) or []
    named = {i for i, kind in enumerate(kinds) if isinstance(kind, str) and kind not in ATTENTION_LAYER_TYPES}
    ids = {id(m) for m in found}
    return named | {i for i, layer in enumerate(layers) if any(id(m) in ids for m in layer.modules())}


def text_config(config):
    """The config of the text model: `config` itself, or a multimodal config's text part."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The base model's stack of decoder layers: the first ModuleList as long as the text
    config's layer count (not a vision tower's blocks), else the longest."""
    base = model.base_model
    lists = [m for m in base.modules() if isinstance(m, torch.nn.ModuleList)]
    n = getattr(text_config(model.config), "num_hidden_layers", None)
    sized = [m for m in lists if len(m) == n]
    return list(sized[0] if sized else max(lists, key=len)) if lists else [base]


def stateful_reason(model: torch.nn.Module) -> str:
    """Why the model is single-item only, as far as its config and module types tell (no forward;
    works on a model built on the meta device), else ''."""
    stateful = _stateful_layer(model, decoder_layers(model))
    return f"{stateful} carries state from token to token, across packed sequences" if stateful else ""


def state_forked(model: torch.nn.Module) -> bool:
    """Whether a fork (`forks.fork_for`) covers every layer that carries state across tokens, as
    far as module types tell (no forward; a model on the meta device will do): MIS then runs each
    item from the prefix's state."""
    layers = decoder_layers(model)
    found = _stateful_modules(layers)
    return fork_for(layers, _stateful_indices(model, layers, found), found) is not None


def _stateful_layer(model: torch.nn.Module, layers: list[torch.nn.Module]) -> str:
    """'layer i (what)' of the first layer that mixes tokens outside attention, else ''."""
    kinds = getattr(model.config, "layer_types", None) or []
    for i, kind in enumerate(kinds):
        if isinstance(kind, str) and kind not in ATTENTION_LAYER_TYPES:
            return f"layer {i} ({kind})"
    for i, layer in enumerate(layers):
        for module in layer.modules():
            name = type(module).__name__
            if any(marker in name for marker in STATEFUL_MODULES):
                return f"layer {i} ({name})"
    return ""


class _Counter:
    """A backend for the probe forward: plain causal attention; records who called it."""

    name = "probe"
    is_padded = True
    shares_prefix = False
    shared = None

    def __init__(self) -> None:
        self.callers: set[int] = set()

    def attend(self, module, query, key, value, scaling, softcap=None, sinks=None):
        self.callers.add(id(module))
        return (
            attention(query, key, value, None, scaling, softcap, causal=True, sinks=sinks).transpose(1, 2).contiguous()
        )


@torch.inference_mode()
def _layers_without_dispatch(model: torch.nn.Module, layers: list[torch.nn.Module]) -> dict[int, str]:
    """{i: 'layer i (Class)'} of the decoder layers that ran without calling the backend, in order."""
    counter = _Counter()
    try:
        early = _probe(model, counter)
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(
            f"{type(model).__name__}: its layers do not run under scorecli's attention backends "
            f"({error_line(exc, 160)}); scorecli cannot score this model"
        ) from exc
    bidirectional = [m for m in model.modules() if id(m) in counter.callers and getattr(m, "is_causal", True) is False]
    if bidirectional or not torch.allclose(*early, atol=1e-3, rtol=1e-3):  # 16-bit kernels may round differently
        raise UsageError(
            f"{type(model).__name__}: not a causal decoder (its tokens see later tokens); if it is an "
            "encoder classifier, pass --kind cross-encoder to score (query, item) pairs"
        )
    silent = {}
    for i, layer in enumerate(layers):
        if not any(id(m) in counter.callers for m in layer.modules()):
            attn = next((m for m in layer.modules() if "Attention" in type(m).__name__), layer)
            silent[i] = f"layer {i} ({type(attn).__name__})"
    return silent


def _probe(model: torch.nn.Module, counter: _Counter) -> list[torch.Tensor]:
    """The first 4 hidden states of two 8-token inputs that differ after them, under `counter`
    (transformers' notes about fallback kernels stay quiet: our output is one line)."""
    from transformers.utils import logging as hf_logging

    device = next(model.parameters()).device
    vocab = getattr(model.config, "vocab_size", None) or model.get_input_embeddings().num_embeddings
    ids = (torch.arange(8, device=device)[None] * 7 + 3) % vocab  # [1, 8]
    later = ids.clone()
    later[0, 4:] = (later[0, 4:] + 1) % vocab  # the same first 4 tokens, other later ones
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with bound(counter):
            return [_states(model, x)[:, :4] for x in (ids, later)]
    finally:
        hf_logging.set_verbosity(verbosity)


def _states(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The base model's last hidden states [1, L, H] for `ids` [1, L]."""
    positions = torch.arange(ids.shape[1], device=ids.device)[None]
    return model.base_model(input_ids=ids, position_ids=positions, use_cache=False).last_hidden_state


def _check_head(model: torch.nn.Module) -> None:
    """A classifier must be one linear layer (`score` or `classifier`) on the base model's output."""
    head = getattr(model, "score", None) or getattr(model, "classifier", None)
    base = model.base_model
    extra = [
        name
        for name, child in model.named_children()
        if child is not base and child is not head and any(True for _ in child.parameters())
    ]
    if extra or not isinstance(head, torch.nn.Linear):
        what = f"has `{extra[0]}` besides its linear classifier" if extra else "has no linear classifier (`score`)"
        raise UsageError(
            f"{type(model).__name__}: its head {what}; scorecli applies one linear layer at the "
            "item's last token and cannot reproduce this head"
        )


def backend_for(support: Support, attention: str, mis: bool) -> str:
    """The `--attention` a run uses: `auto` is a padded backend (sdpa) for a single-item-only
    model or a fork that needs padding; a packed mode or a ragged backend it cannot run exactly
    is refused (`check_backend`)."""
    padded_only = not support.packed or bool(support.fork and support.fork.ragged_reason)
    name = "sdpa" if attention == "auto" and padded_only else attention
    check_backend(support, name, mis)
    return name


def check_backend(support: Support, backend: str, mis: bool) -> None:
    """Refuse a packed mode or a ragged backend for a single-item-only model, and a ragged backend
    for a fork that needs padding (one line, why)."""
    if support.packed:
        if support.fork and support.fork.ragged_reason and capabilities(backend).ragged:
            raise UsageError(
                f"--attention {backend}: {support.fork.ragged_reason}, and this backend concatenates a batch's "
                "sequences into one row; use --attention sdpa or eager"
            )
        return
    if mis:
        raise UsageError(f"--mode mis: {support.reason}; this model runs single-item only (--mode single or auto)")
    if capabilities(backend).ragged:
        raise UsageError(
            f"--attention {backend}: {support.reason}, and this backend concatenates a batch's sequences "
            "into one row; use --attention sdpa or eager"
        )
