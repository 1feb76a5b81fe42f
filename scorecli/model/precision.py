"""The precision a model runs in and that its weights are numbers: the device and dtype a run's
`--device`/`--dtype` resolve to, float32 convolutions on a GPU, a 16-bit cross-encoder's head kept
in float32 (docs/models.md, How items are scored: heads and activations stay float32), and weights
that hold NaN or infinity refused at load.
"""

from __future__ import annotations

import torch

from scorecli.errors import UsageError
from scorecli.runtimes import auto_device


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device(auto_device())
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: CUDA is not available on this machine")
    device = torch.device(name)
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UsageError(f"--device {name}: no such CUDA device (this machine has {torch.cuda.device_count()})")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, name)


def ieee_convolutions() -> None:
    """Float32 convolutions on a GPU in float32: torch lets cuDNN run them in TF32 by default
    (unlike its matrix products), a 10-bit mantissa in Mamba's and the gated delta-net's short
    convolutions where float32 on a GPU promises <= 1e-4 (docs/cli.md: --dtype). Process-wide, as
    torch's flag is; the legacy flag, which sets cuDNN's convolutions and RNNs alike."""
    torch.backends.cudnn.allow_tf32 = False


# a cross-encoder's own head modules: BERT's pooler, the classifier (DistilBERT's in two parts)
_HEAD_MODULES = ("pooler", "pre_classifier", "classifier")


class Float32Head(torch.nn.Module):
    """Runs a 16-bit model's head module in float32 on its upcast input (docs/models.md, How items are scored: heads and
    activations stay float32)."""

    def __init__(self, head: torch.nn.Module):
        super().__init__()
        self.head = head.float()

    def forward(self, hidden: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        return self.head(hidden.float(), *args, **kwargs)


def float32_heads(model: torch.nn.Module) -> None:
    """Swap a cross-encoder's pooler and classifier for float32 copies, in place."""
    for owner in (model, model.base_model):
        for name in _HEAD_MODULES:
            module = getattr(owner, name, None)
            if isinstance(module, torch.nn.Module) and not isinstance(module, Float32Head):
                setattr(owner, name, Float32Head(module))


def check_finite(model: torch.nn.Module, name: str, narrowed: bool = False) -> None:
    """UsageError naming the first weight that holds NaN or infinity (one sum per tensor: NaN
    and infinity propagate, and finite 16- or 32-bit weights cannot overflow a float64 sum).
    `narrowed`: the weights were cast to float16 from a wider dtype, where a large finite weight
    becomes infinite: that is said as such, not as a corrupt checkpoint."""
    params = list(model.named_parameters())
    if not params:
        return
    sums = torch.stack([p.detach().sum(dtype=torch.float64) for _, p in params])
    bad = torch.nonzero(~torch.isfinite(sums)).flatten().tolist()
    if not bad:
        return
    weight, values = params[bad[0]]
    if narrowed and not torch.isnan(values).any():
        raise UsageError(
            f"cannot load model {name}: its weight {weight} overflows float16 (values beyond 65504 become "
            "infinite) under --dtype float16: use --dtype bfloat16 or float32"
        )
    raise UsageError(
        f"cannot load model {name}: its weight {weight} holds NaN or infinite values "
        "(a corrupt or badly converted checkpoint)"
    )
