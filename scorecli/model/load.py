"""Load a Hugging Face checkpoint (weights; its tokenizer through `model.tokenizer`) and detect its kind.

What a run does with the model (mode, labels, lengths) is resolved in `spec.py`; what a kind
needs at run time in `kinds`. Knows nothing about input rows or output files. Loading is safe by default: no remote
code without `trust_remote_code`, and no pickled weights without `allow_pickle`.
"""

from __future__ import annotations

import os
import pickle
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from scorecli.attention import ATTN_NAME, register, set_implementation
from scorecli.attention.backends import capabilities, prefetch_for
from scorecli.config import ScoreConfig
from scorecli.errors import UsageError, a_kind, first_line
from scorecli.kinds import KINDS, Checkpoint, detect, family_class
from scorecli.model import gguf, lean_imports, weight_files
from scorecli.model.fit import Kinds, check_report, config_problem
from scorecli.model.gguf import materialize
from scorecli.model.hub import hub_folder, locate, utf8_folder
from scorecli.model.precision import check_finite, float32_heads, ieee_convolutions, resolve_device, resolve_dtype
from scorecli.model.quiet import as_loaded, quiet_transformers
from scorecli.model.remembered import Memory, inputs_key, record_path
from scorecli.model.sentence import sentence_folder_type, transformer_folder
from scorecli.model.tokenizer import load_tokenizer
from scorecli.timings import mark

# model_type values of encoder (bidirectional) classifiers, scored as cross-encoders
ENCODER_TYPES = {
    "bert",
    "roberta",
    "xlm-roberta",
    "modernbert",
    "deberta",
    "deberta-v2",
    "electra",
    "distilbert",
    "mpnet",
    "albert",
    "camembert",
    "xlm",
    "ernie",
    "nomic_bert",
    "new",
    "bge-m3",
    "jina_bert",
}


def scorecli_attends(kind: str, config) -> bool:
    """Whether a model of this kind and config runs its attention under scorecli's backends (a
    decoder of a kind that scores through them); else its own attention, masks and all."""
    return KINDS[kind].scorecli_attention and config.model_type not in ENCODER_TYPES


class Deferred:
    """A torch model built on its first use, once, whichever thread asks first: a run whose
    answers from it are remembered (`model.remembered`) may never need it."""

    def __init__(self, build: Callable[[], torch.nn.Module]):
        self._build: Callable[[], torch.nn.Module] | None = build
        self._model: torch.nn.Module | None = None
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        return self._model is not None

    def get(self) -> torch.nn.Module:
        with self._lock:
            if self._model is None:
                assert self._build is not None
                self._model, self._build = self._build(), None
            return self._model


@dataclass(frozen=True)
class Loaded:
    """A loaded model with its tokenizer, the resolved kind, device and dtype.

    `source` is the torch model, or a `Deferred` one where what a run needs of it may be
    remembered (`memory`; `fact`, `own_output`): `model` builds it when something asks."""

    source: torch.nn.Module | Deferred
    tokenizer: object
    kind: str
    path: str
    device: torch.device
    dtype: torch.dtype
    sentence: Any = None  # the modules its folder applies after the transformer (the family's `read_folder`)
    hf_config: Any = None  # the transformer's config as its folder says (what `config` is until the model is built)
    memory: Memory | None = None  # what this model answered before, and what this run learns of it

    @property
    def model(self) -> torch.nn.Module:
        return self.source.get() if isinstance(self.source, Deferred) else self.source

    @property
    def built(self) -> bool:
        """Whether the torch model exists in this process (it may be deferred, and never built)."""
        return not isinstance(self.source, Deferred) or self.source.built

    @property
    def is_encoder(self) -> bool:
        """Whether its tokens attend both ways (it runs its own attention, never scorecli's)."""
        return self.config.model_type in ENCODER_TYPES

    @property
    def config(self):
        return self.model.config if self.built or self.hf_config is None else self.hf_config

    @property
    def architecture(self) -> str:
        archs = getattr(self.config, "architectures", None) or [self.fact("class", lambda m: type(m).__name__)]
        return archs[0]

    @property
    def folder(self) -> str:
        """The folder the transformer's weights were read from (transformers' `name_or_path`)."""
        return self.model.name_or_path if self.built else self.hf_config.name_or_path

    def fact(self, name: str, compute: Callable[[torch.nn.Module], Any]) -> Any:
        """What `compute` reads from the model (a JSON value), remembered where the model is not built."""
        if not self.built and self.memory is not None and (known := self.memory.fact(name)) is not None:
            return known
        value = compute(self.model)
        if self.memory is not None:
            self.memory.learn_fact(name, value)
        return value

    def own_output(
        self, what: str, inputs: dict[str, np.ndarray], compute: Callable[[torch.nn.Module], np.ndarray]
    ) -> np.ndarray:
        """`compute`'s output (`what`: which output of the forward) of the model's own forward on
        `inputs` (the arrays it is computed from), remembered for these weights as loaded."""
        key = inputs_key(what, inputs)
        if self.memory is not None and (known := self.memory.output(key)) is not None:
            return known
        value = compute(self.model)
        if self.memory is not None:
            self.memory.learn_output(key, value)
        return value


def load_model(cfg: ScoreConfig) -> Loaded:
    """Load the checkpoint named by `cfg.model` for scoring (eval mode, on the device).

    Refused with a UsageError: a checkpoint that lacks weights the model class needs (they
    would be randomly initialised: `--kind` not fitting the checkpoint, a base model without
    a head), one whose weights hold NaN or infinity, a corrupt safetensors file, a tokenizer
    that cannot encode text (no tokenizer files), and custom code without `trust_remote_code`.
    """
    path, hf_config, kind = open_checkpoint(cfg)
    declared = KINDS[kind]
    sentence = family_class(kind).read_folder(kind, path)  # the modules after the transformer, if any
    if sentence is not None:  # the transformer may sit in a subfolder
        path, hf_config = sentence.transformer_dir, _load_config(sentence.transformer_dir, cfg)
    common = {"trust_remote_code": cfg.trust_remote_code}
    _check_custom_code(hf_config, kind, cfg)
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    if device.type == "cuda" and dtype == torch.float32:
        ieee_convolutions()
    if scorecli_attends(kind, hf_config):  # a kernel package imports while the weights load
        lean_imports.import_model_code()  # before that import starts beside it
        prefetch_for(cfg.attention, device.type, dtype in (torch.float16, torch.bfloat16))
    elif cfg.attention != "auto" and capabilities(cfg.attention).model_attention is None:
        raise UsageError(
            f"--attention {cfg.attention}: {a_kind(kind)} model ({hf_config.model_type}) runs its own attention, "
            "not scorecli's backends; use --attention auto, sdpa or eager"
        )

    def build() -> torch.nn.Module:  # the weights read into the model class, on the device, checked
        lean_imports.import_model_code()
        model = _load_weights(path, kind, hf_config, dtype, cfg, common)
        mark("weights read")
        if scorecli_attends(kind, hf_config):
            register()
            set_implementation(model, ATTN_NAME)
        elif own := capabilities(cfg.attention).model_attention:  # an encoder's own attention, by that name
            model.set_attn_implementation(own)
        if declared.float32_head and dtype != torch.float32:
            float32_heads(model)
        model.to(device).eval()
        mark("on the device")  # a GPU's context made and the weights copied
        # the checkpoint's own dtype, as its config says
        saved = str(getattr(hf_config, "dtype", None)).removeprefix("torch.")
        check_finite(model, cfg.model, narrowed=dtype == torch.float16 and saved != "float16")
        return model

    memory = _memory(path, kind, hf_config, device, dtype, cfg)
    source: torch.nn.Module | Deferred = (
        Deferred(as_loaded(build)) if memory is not None and memory.recorded else build()
    )
    tokenizer = load_tokenizer(path, cfg)
    if sentence is not None:
        sentence = sentence.resolved(path, hf_config).to(device)
        sentence.adapt_tokenizer(tokenizer)
    return Loaded(source, tokenizer, kind, cfg.model, device, dtype, sentence, hf_config, memory)


def _memory(
    path: str, kind: str, hf_config, device: torch.device, dtype: torch.dtype, cfg: ScoreConfig
) -> Memory | None:
    """What this model as loaded answered before (`model.remembered`), for a run that may not need
    to build it: a CPU float32 encoder in a local folder, whose kind was detected (`--kind` may
    warn at load of weights it leaves unused), that may run ONNX Runtime; else None."""
    if not (
        cfg.kind is None
        and cfg.runtime != "torch"
        and device.type == "cpu"
        and dtype == torch.float32
        and hf_config.model_type in ENCODER_TYPES
        and os.path.isdir(path)
    ):
        return None
    load = {"kind": kind, "device": str(device), "dtype": str(dtype), "attention": cfg.attention}
    load["trust_remote_code"] = str(cfg.trust_remote_code)
    load["allow_pickle"] = str(cfg.allow_pickle)  # pickled weights a run without it refuses to read
    try:
        return Memory(record_path(path, cfg.cache_dir or gguf.default_cache_dir(), load))
    except OSError:  # a folder that cannot be listed: the load says what is wrong
        return None


def open_checkpoint(cfg: ScoreConfig) -> tuple[str, object, str]:
    """(folder, Hugging Face config, kind) of `cfg.model`, without loading weights: a GGUF file
    is dequantized into a cached folder first; the kind is `cfg.kind`, else detected."""
    path, gguf_file = locate(cfg.model)
    if gguf_file:
        path = materialize(path, gguf_file, cfg.cache_dir)
    elif not os.path.isdir(path):  # a Hub id: its files, a sentence-transformers model's modules too
        path = hub_folder(path)
    path = utf8_folder(path) if os.path.isdir(path) else path  # a folder not named in UTF-8: by descriptor
    checkpoint = read_checkpoint(path, cfg)
    hf_config = checkpoint.config
    kind = cfg.kind or detect(checkpoint)
    if kind is None:
        raise UsageError(f"cannot tell the kind of model {_architecture(hf_config)!r}: pass --kind")
    if not KINDS[kind].encoder and hf_config.model_type in ENCODER_TYPES:
        found = detect(checkpoint)  # what leaving --kind out runs
        use = f"leave --kind out (detected: {found})" if found else "use --kind cross-encoder"
        raise UsageError(
            f"cannot score model {cfg.model} as {kind}: it is a {hf_config.model_type} encoder, whose tokens "
            f"attend both ways (scorecli's decoder kinds would attend causally); {use}"
        )
    return path, hf_config, kind


def read_checkpoint(path: str, cfg: ScoreConfig) -> Checkpoint:
    """What the folder `path` says about itself (its transformer's config; a sentence-transformers
    folder's type), for detecting its kind."""
    folder_type = sentence_folder_type(path)
    hf_config = _load_config(transformer_folder(path) if folder_type is not None else path, cfg)
    return Checkpoint(path, hf_config, folder_type, hf_config.model_type in ENCODER_TYPES)


def _architecture(hf_config) -> str:
    archs = getattr(hf_config, "architectures", None) or []
    return archs[0] if archs else hf_config.model_type


def _load_config(path: str, cfg: ScoreConfig):
    from transformers import AutoConfig

    try:
        with quiet_transformers(bar=False):  # a refused load is one line
            return AutoConfig.from_pretrained(path, trust_remote_code=cfg.trust_remote_code)
    except (OSError, ValueError) as exc:
        msg = first_line(exc)
        if "custom code" in msg or "trust_remote_code" in msg:
            raise UsageError(
                f"cannot load model {cfg.model}: it needs its own Python code (auto_map in its config); "
                "pass --trust-remote-code if you trust it"
            ) from exc
        if not os.path.isdir(path):
            raise UsageError(
                f"cannot load model {cfg.model}: no such model folder, and not found on the Hub ({msg})"
            ) from exc
        if not os.path.isfile(os.path.join(path, "config.json")):  # transformers: "Should have a `model_type` key"
            raise UsageError(
                f"cannot load model {cfg.model}: the folder has no config.json (not a Hugging Face model folder, "
                "or an incomplete download)"
            ) from exc
        raise UsageError(f"cannot load model {cfg.model}: {msg}") from exc
    except Exception as exc:  # what the config's own checks raise (huggingface_hub's StrictDataclassError)
        raise UsageError(f"cannot load model {cfg.model}: its config is invalid: {innermost_line(exc)}") from exc


def innermost_line(exc: BaseException) -> str:
    """The line of an error's message that says what is wrong: the last one, less the name of the
    error it wraps ("Class validation error for validator ...:\n    ValueError: `x` must be ...")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    last = lines[-1] if lines else type(exc).__name__
    head, sep, rest = last.partition(": ")
    return rest if sep and head.isidentifier() and head.endswith(("Error", "Exception")) else last


def _check_custom_code(hf_config, kind: str, cfg: ScoreConfig) -> None:
    """A config with `auto_map` names its own code, which runs only with --trust-remote-code:
    refuse when transformers has no class of the architecture's name, else warn that the
    built-in class scores it."""
    auto_map = getattr(hf_config, "auto_map", None)
    if not auto_map or cfg.trust_remote_code:
        return
    import transformers

    archs = getattr(hf_config, "architectures", None) or []
    arch = archs[0] if archs else hf_config.model_type
    if not archs or not hasattr(transformers, arch):
        raise UsageError(
            f"cannot load model {cfg.model}: its architecture {arch} is its own code (auto_map in its config), "
            "which runs only with --trust-remote-code; pass it if you trust the model"
        )
    warnings.warn(
        f"model {cfg.model} ships its own code (auto_map in its config), which runs only with "
        f"--trust-remote-code: scoring it as transformers' built-in {arch}",
        UserWarning,
        stacklevel=3,
    )


def _load_weights(path, kind, hf_config, dtype, cfg: ScoreConfig, common) -> torch.nn.Module:
    import transformers

    auto = getattr(transformers, KINDS[kind].auto_class)
    # weights of another shape are reported (`fit`), not raised as "look at the above report"
    kwargs = dict(common, dtype=dtype, use_safetensors=None if cfg.allow_pickle else True, ignore_mismatched_sizes=True)
    try:
        with quiet_transformers(bar=False):  # its load report would break the one-line error; `fit` says what matters
            model, info = auto.from_pretrained(path, output_loading_info=True, **kwargs)
    except (OSError, ValueError, RuntimeError) as exc:
        msg = first_line(exc)
        if missing := weight_files.missing_weights(path, exc, cfg.allow_pickle):
            raise UsageError(f"cannot load model {cfg.model}: {missing}") from exc
        if "safetensors" in msg.lower() and not cfg.allow_pickle and "deserializ" not in msg.lower():
            raise UsageError(  # a Hub id: which files it holds is not known here
                f"cannot load model {cfg.model}: no safetensors weights; pickled .bin weights can run code, "
                "pass --allow-pickle if you trust them"
            ) from exc
        raise UsageError(f"cannot load model {cfg.model}: {msg}") from exc
    except ImportError as exc:  # a quantized checkpoint whose quantization package is not installed here
        if (method := weight_files.quantization(hf_config)) is None:
            raise
        raise UsageError(
            f"cannot load model {cfg.model}: its weights are quantized ({method}), which needs what is not "
            f"installed here: {first_line(exc)}; use the unquantized checkpoint"
        ) from exc
    except pickle.UnpicklingError as exc:  # torch.load(weights_only=True) met more than tensors
        raise UsageError(f"cannot load model {cfg.model}: {weight_files.unsafe_pickle(path)}") from exc
    except AssertionError as exc:  # a module of the config's shape cannot be built (nn.Embedding's padding_idx)
        raise UsageError(f"cannot load model {cfg.model}: {config_problem(hf_config) or first_line(exc)}") from exc
    except Exception as exc:  # safetensors' own error for a corrupt file
        if type(exc).__name__ != "SafetensorError":
            raise
        raise UsageError(
            f"cannot load model {cfg.model}: {weight_files.corrupt_safetensors(path) or path}: "
            f"corrupt safetensors file ({first_line(exc)})"
        ) from exc
    detected = detect(Checkpoint("", hf_config, None, hf_config.model_type in ENCODER_TYPES))
    check_report(model, info, cfg.model, Kinds(kind, cfg.kind, detected), KINDS[kind].sentence_modules)
    return model
