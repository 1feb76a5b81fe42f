"""Load a Hugging Face checkpoint, detect its kind, and resolve what scoring needs from it.

Knows nothing about input rows or output files. Loading is safe by default: no remote
code without `trust_remote_code`, and no pickled weights without `allow_pickle`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from scorecli.config import ScoreConfig
from scorecli.errors import UsageError

# model_type values of encoder (bidirectional) classifiers, scored as cross-encoders
ENCODER_TYPES = {
    "bert", "roberta", "xlm-roberta", "modernbert", "deberta", "deberta-v2", "electra", "distilbert",
    "mpnet", "albert", "camembert", "xlm", "ernie", "nomic_bert", "new", "bge-m3", "jina_bert",
}  # fmt: skip


@dataclass(frozen=True)
class Loaded:
    """A loaded model with its tokenizer, the resolved kind, device and dtype."""

    model: torch.nn.Module
    tokenizer: object
    kind: str
    path: str
    device: torch.device
    dtype: torch.dtype

    @property
    def config(self):
        return self.model.config

    @property
    def architecture(self) -> str:
        archs = getattr(self.config, "architectures", None) or [type(self.model).__name__]
        return archs[0]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: CUDA is not available on this machine")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, name)


def detect_kind(config) -> str:
    """seq-cls, causal-lm or cross-encoder, from the checkpoint's config."""
    archs = getattr(config, "architectures", None) or []
    arch = archs[0] if archs else ""
    if config.model_type in ENCODER_TYPES:
        return "cross-encoder"
    if arch.endswith("ForSequenceClassification") or arch.endswith("ForRewardModel"):
        return "seq-cls"
    if arch.endswith("ForCausalLM") or arch.endswith("LMHeadModel") or arch.endswith("ForConditionalGeneration"):
        return "causal-lm"
    raise UsageError(f"cannot tell the kind of model {arch or config.model_type!r}: pass --kind")


def load_model(cfg: ScoreConfig) -> Loaded:
    """Load the checkpoint named by `cfg.model` for scoring (eval mode, on the device)."""
    from transformers import AutoConfig

    path, gguf_file = locate(cfg.model)
    if gguf_file:
        from scorecli.gguf import materialize

        path = materialize(path, gguf_file, cfg.cache_dir)
    common = {"trust_remote_code": cfg.trust_remote_code}
    try:
        hf_config = AutoConfig.from_pretrained(path, **common)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot load model {cfg.model}: {first_line(exc)}") from exc
    kind = cfg.kind or detect_kind(hf_config)
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    model = _load_weights(path, kind, hf_config, dtype, cfg, common)
    tokenizer = _load_tokenizer(path, common)
    if kind != "cross-encoder":
        from scorecli.attention import ATTN_NAME, register, set_implementation

        register()
        set_implementation(model, ATTN_NAME)
    elif cfg.attention in ("sdpa", "eager"):
        model.set_attn_implementation(cfg.attention)
    if kind == "cross-encoder" and dtype != torch.float32:
        float32_heads(model)
    model.to(device).eval()
    return Loaded(model, tokenizer, kind, cfg.model, device, dtype)


# a cross-encoder's own head modules: BERT's pooler, the classifier (DistilBERT's in two parts)
_HEAD_MODULES = ("pooler", "pre_classifier", "classifier")


class Float32Head(torch.nn.Module):
    """Runs a 16-bit model's head module in float32 on its upcast input (SPEC: heads and
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


def locate(name: str) -> tuple[str, str | None]:
    """(folder or hub id, gguf file name or None)."""
    if name.endswith(".gguf"):
        if not os.path.isfile(name):
            raise UsageError(f"cannot load model {name}: no such file")
        return os.path.dirname(os.path.abspath(name)), os.path.basename(name)
    if os.path.isdir(name):
        ggufs = sorted(f for f in os.listdir(name) if f.endswith(".gguf"))
        has_config = os.path.isfile(os.path.join(name, "config.json"))
        return name, (ggufs[0] if ggufs and not has_config else None)
    if os.path.exists(name) or name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise UsageError(f"cannot load model {name}: not a model folder, .gguf file or Hub id")
    return name, None


def _load_weights(path, kind, hf_config, dtype, cfg: ScoreConfig, common) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    auto = AutoModelForCausalLM if kind == "causal-lm" else AutoModelForSequenceClassification
    kwargs = dict(common, dtype=dtype, use_safetensors=None if cfg.allow_pickle else True)
    try:
        return auto.from_pretrained(path, **kwargs)
    except (OSError, ValueError, EnvironmentError) as exc:
        msg = first_line(exc)
        if "safetensors" in msg.lower() and not cfg.allow_pickle:
            raise UsageError(
                f"cannot load model {cfg.model}: no safetensors weights; pickled .bin weights can run code, "
                "pass --allow-pickle if you trust them"
            ) from exc
        raise UsageError(f"cannot load model {cfg.model}: {msg}") from exc


def _load_tokenizer(path, common):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, **common)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot load the tokenizer of {path}: {first_line(exc)}") from exc


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
