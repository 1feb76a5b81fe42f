"""How transformers' model code reaches scorecli's backends, and which backend `--attention` names.

transformers calls our registered attention function ("scorecli") in every layer; it forwards
to the backend bound to the current forward call (`bound`, a context variable: decoder layers
that do not hand `**kwargs` down to attention, StableLM's and Nemotron's, still reach it), or
to one passed as the `scorecli_backend` forward kwarg. Under compiled layers it is a custom
operator (`scorecli::attend`), which the compiler keeps whole inside each layer's graph. Knows
nothing about masks or kernels.
"""

from __future__ import annotations

import contextlib
import weakref
from contextvars import ContextVar

import torch

from scorecli.attention.backends import build, choose
from scorecli.attention.protocol import AttentionBackend
from scorecli.errors import UsageError

ATTN_NAME = "scorecli"


# attention arguments some models pass that change the result and that no backend implements
UNSUPPORTED = {"sinks": "attention sinks given as `sinks`", "position_bias": "a position bias (ALiBi, T5)"}


# the backend of the forward call running in this thread (`bound`)
_BACKEND: ContextVar[AttentionBackend | None] = ContextVar("scorecli_backend", default=None)


@contextlib.contextmanager
def bound(backend: AttentionBackend):
    """Run the enclosed model call with every attention layer dispatching to `backend`."""
    token = _BACKEND.set(backend)
    try:
        yield backend
    finally:
        _BACKEND.reset(token)


def _dispatch(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    backend = kwargs.get("scorecli_backend") or _BACKEND.get()
    if backend is None:
        raise RuntimeError("scorecli attention called without a backend (bind one with attention.bound)")
    for name, what in UNSUPPORTED.items():
        if kwargs.get(name) is not None:
            raise UsageError(
                f"{type(module).__name__}: this model's attention uses {what}, which scorecli does not implement"
            )
    if attention_mask is not None:  # we register no mask function: a mask here is one the layer made itself
        raise UsageError(
            f"{type(module).__name__}: this model's attention builds its own mask or bias (e.g. a dynamic "
            "or sparse-attention mask), which scorecli's backends do not apply"
        )
    return backend.attend(module, query, key, value, scaling, kwargs.get("softcap"), kwargs.get("s_aux")), None


# `_dispatch` disabled for the compiler, which compiled layers call (`_entry`); made by `register`:
# `torch.compiler.disable` imports torch's compiler (~1 s on a 2-core CPU), which a run of a model
# that runs its own attention (an encoder) never needs
_DISPATCH = None

# attention modules a compiled layer reaches (`traced_through`), by number: the custom operator
# below is handed the number as a 0-dim CPU tensor (a graph input, so one graph serves every
# layer and inductor's cache holds across processes) and finds the module here
_MODULES: list[weakref.ref[torch.nn.Module]] = []
_KEY = "_scorecli_attention_key"


@torch.library.custom_op("scorecli::attend", mutates_args=())
def _attend_op(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    module_key: torch.Tensor,
    scaling: float | None,
    softcap: float | None,
) -> torch.Tensor:
    """The backend bound to this forward call (`bound`), as `_dispatch` calls it, opaque to the
    compiler: a compiled layer is one graph around it rather than pieces between graph breaks."""
    module = _MODULES[int(module_key)]()
    out, _ = _dispatch(module, query, key, value, None, scaling, softcap=softcap)
    return out.clone() if out.data_ptr() in (query.data_ptr(), key.data_ptr(), value.data_ptr()) else out.contiguous()


@_attend_op.register_fake
def _(query, key, value, module_key, scaling, softcap):
    return query.new_empty((query.shape[0], query.shape[2], query.shape[1], value.shape[3]))


def _entry(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention function for "scorecli": `_dispatch`, through the custom operator
    when a compiled layer (`traced_through`) calls it with nothing but tensors and numbers."""
    if not torch.compiler.is_compiling():
        return _dispatch(module, query, key, value, attention_mask, scaling, dropout, **kwargs)
    module_key = getattr(module, _KEY, None)
    plain = attention_mask is None and all(kwargs.get(n) is None for n in (*UNSUPPORTED, "scorecli_backend", "s_aux"))
    if module_key is None or not plain:  # compiled around: the backend runs between two graphs
        assert _DISPATCH is not None  # `register` made it before transformers could call this
        return _DISPATCH(module, query, key, value, attention_mask, scaling, dropout, **kwargs)
    softcap = kwargs.get("softcap")  # numbers fixed per layer: the operator's arguments are constants
    scaling, softcap = (None if x is None else float(x) for x in (scaling, softcap))
    return torch.ops.scorecli.attend(query, key, value, module_key, scaling, softcap), None


def traced_through(modules) -> None:
    """Let the compiler trace attention from these modules (a compiled layer's) through the
    custom operator: each gets its number."""
    for m in modules:
        if getattr(m, _KEY, None) is None:
            m.__dict__[_KEY] = torch.tensor(len(_MODULES))
            _MODULES.append(weakref.ref(m))


def set_implementation(model: torch.nn.Module, name: str) -> None:
    """`model.set_attn_implementation(name)` without transformers' note that a model whose
    attention ignores the interface cannot switch (`scorecli.model.compat` finds such layers itself,
    and a refusal stays one line)."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model.set_attn_implementation(name)
    finally:
        hf_logging.set_verbosity(verbosity)


def register() -> None:
    """Make the "scorecli" attention name known to transformers (idempotent).

    Under compiled layers (`runtimes.compiled`) the backend runs as it does eagerly, inside the
    custom operator `scorecli::attend` (one graph per layer), or `torch.compiler.disable`d
    between two graphs where the operator cannot take the call (`_entry`)."""
    from transformers import AttentionInterface

    global _DISPATCH
    if _DISPATCH is None:
        _DISPATCH = torch.compiler.disable(_dispatch)
    AttentionInterface.register(ATTN_NAME, _entry)


def make_backend(name: str, device: torch.device, dtype: torch.dtype = torch.float32) -> AttentionBackend:
    """Build the backend for `--attention name` on `device` (`backends.choose` decides `auto`:
    flashinfer on CUDA when it is installed and the dtype is 16-bit, else sdpa; an explicit
    backend that cannot run here is a UsageError naming why)."""
    return build(choose(name, device.type, dtype in (torch.bfloat16, torch.float16), packed=True).name)
