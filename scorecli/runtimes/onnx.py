"""ONNX Runtime as a CPU runtime for BERT-family encoders: choose it, open it, run it.

The graph it runs is the model's export, made once and cached (`runtimes.onnx_export`). `OnnxForward` is called like
`forward.EncoderForward` (a padded batch in, `Pooled` out), `OnnxTextForward` like
`kinds.embedding.EmbeddingForward` (ragged last hidden states out).

`--runtime onnx-int8` runs a dynamically quantized copy of the export (`runtimes.int8`).

Knows nothing about tokenization, pooling, activations, files of rows or the CLI; which runtime
a run may use is decided by `choose` from the frozen config, `open_forward` opens it or, under
`--runtime auto`, falls back to torch, and `runtimes.auto` keeps the faster of it and torch
(all called by the families).
"""

from __future__ import annotations

import os

import numpy as np
import torch

from scorecli.attention import pad_ragged
from scorecli.attention.backends import capabilities
from scorecli.core.batching import Batch
from scorecli.errors import ScorecliError, UsageError, error_line, first_line, runtime_gone
from scorecli.runtimes import RUNTIMES
from scorecli.runtimes.forward import Pooled
from scorecli.runtimes.onnx_export import (
    Reference,
    cache_path,
    check_cached,
    model_file,
    onnxruntime,
    open_session,
    own_probe_output,
    probe_feeds,
    set_aside,
)

# the runtimes this module runs, as `runtimes.RUNTIMES` declares them (onnx-int8: opt-in only)
ONNX_RUNTIMES = tuple(name for name, info in RUNTIMES.items() if info.needs == "onnxruntime")
BACKEND_NAMES = {name: RUNTIMES[name].description for name in ONNX_RUNTIMES}


def available() -> bool:
    """Whether onnxruntime can be imported."""
    try:
        onnxruntime()
    except Exception:  # noqa: BLE001 - not installed, or an install that fails to load
        return False
    return True


def check_packages(runtime: str) -> None:
    """UsageError when an explicit ONNX `runtime` cannot import onnxruntime or onnx (its exporter):
    checked before the model loads. `auto` and torch need neither."""
    if runtime not in ONNX_RUNTIMES:
        return
    missing = [] if available() else ["onnxruntime"]
    try:
        import onnx  # noqa: F401
    except Exception:  # noqa: BLE001 - not installed, or an install that fails to load
        missing.append("onnx")
    if missing:
        raise UsageError(f"--runtime {runtime} needs {' and '.join(missing)}: pip install 'scorecli[onnx]'")


class OnnxForward:
    """A cross-encoder's forward on padded pairs through an ONNX Runtime session.

    Reads the [CLS] row only (the scores, and pooled hidden states with `cls` pooling).
    Calls may run concurrently from several threads (`twin`: another session over the same
    file, so that each stream has its own threads).
    """

    def __init__(self, path: str, threads: int = 1):
        self.path, self.threads = path, threads
        self.session = open_session(path, threads)

    def twin(self) -> OnnxForward:
        return OnnxForward(self.path, self.threads)

    def __call__(self, batch: Batch, pooling: str | None) -> Pooled:
        if pooling not in (None, "cls"):
            raise RuntimeError(f"the ONNX runtime reads the [CLS] row only, not {pooling!r} pooling")
        s, length = batch.num_seqs, batch.max_len
        where = torch.from_numpy(batch.padded_index())  # [T]
        types = batch.token_type_ids if batch.token_type_ids is not None else np.zeros_like(batch.input_ids)
        ids, tt = torch.from_numpy(batch.input_ids.astype(np.int64)), torch.from_numpy(types.astype(np.int64))
        feeds = {
            "input_ids": pad_ragged(ids, where, s, length, 0).numpy(),  # [S, L]
            "attention_mask": pad_ragged(torch.ones_like(ids), where, s, length, 0).numpy(),
            "token_type_ids": pad_ragged(tt, where, s, length, 0).numpy(),
        }
        logits, cls = self.session.run(["logits", "cls"], feeds)
        return Pooled(None, torch.from_numpy(logits), torch.from_numpy(cls) if pooling == "cls" else None)


class OnnxTextForward:
    """An encoder's last hidden states of a batch's texts, ragged [T, H], through an ONNX
    Runtime session (drop-in for `kinds.embedding.EmbeddingForward` of an encoder)."""

    def __init__(self, path: str, threads: int = 1):
        self.path, self.threads = path, threads
        self.session = open_session(path, threads)

    def twin(self) -> OnnxTextForward:
        return OnnxTextForward(self.path, self.threads)

    def __call__(self, batch: Batch) -> torch.Tensor:
        s, length = batch.num_seqs, batch.max_len
        where = torch.from_numpy(batch.padded_index())  # [T]
        ids = torch.from_numpy(batch.input_ids.astype(np.int64))
        feeds = {
            "input_ids": pad_ragged(ids, where, s, length, 0).numpy(),  # [S, L]
            "attention_mask": pad_ragged(torch.ones_like(ids), where, s, length, 0).numpy(),
        }
        (hidden,) = self.session.run(["hidden"], feeds)  # [S, L, H]
        return torch.from_numpy(hidden).flatten(0, 1)[where]  # [T, H]


def choose(cfg, loaded, fast: bool, why_not: str | None = None) -> tuple[str, str]:
    """(torch, onnx or onnx-int8; why): `--runtime onnx` (or `onnx-int8`) where ONNX Runtime can
    run this model exactly (a local float32 BERT-family encoder on the CPU, `fast`; `why_not`: a
    family's own reason it cannot), else a UsageError. `auto` offers onnx there when onnxruntime
    is installed, and `runtimes.auto` keeps whichever of it and torch it measured faster on this
    machine; torch with a one-line warning when onnxruntime is not installed; never onnx-int8
    (opt-in only)."""
    if cfg.runtime == "torch":
        return "torch", "--runtime torch"
    import warnings

    why = why_not
    if loaded.device.type != "cpu" or loaded.dtype != torch.float32:
        why = "it runs float32 models on the CPU only"
    elif not fast and not capabilities(cfg.attention).fused_encoder:  # the flag the user gave, first
        why = f"it runs the fused encoder, which --attention {cfg.attention} turns off"
    elif not fast:
        why = f"it runs BERT-family encoders only (fused encoder), not {loaded.architecture}"
    elif not os.path.isdir(loaded.folder or ""):
        why = "it exports models from a local folder only"
    if why is not None:
        if cfg.runtime in ONNX_RUNTIMES and cfg.runtime_reason is not None:  # a resumed job's, `auto` chose it
            raise runtime_gone(cfg.runtime, f"ONNX Runtime cannot run this model ({why})")
        if cfg.runtime in ONNX_RUNTIMES:
            raise UsageError(f"--runtime {cfg.runtime}: {why}; use --runtime torch")
        return "torch", f"auto: ONNX Runtime cannot run this model ({why})"
    if not available():
        if cfg.runtime in ONNX_RUNTIMES:
            raise UsageError(f"--runtime {cfg.runtime} needs onnxruntime: pip install 'scorecli[onnx]'")
        warnings.warn(
            "--runtime auto: onnxruntime is not installed, running torch (pip install 'scorecli[onnx]' "
            "for the other CPU runtime, which auto runs where it measures faster)",
            RuntimeWarning,
            stacklevel=3,
        )
        return "torch", "auto: onnxruntime is not installed"
    if cfg.runtime in ONNX_RUNTIMES:
        return cfg.runtime, f"--runtime {cfg.runtime}"
    return "onnx", "auto"


def open_forward(
    runtime: str, cfg, loaded, what: str = "pairs", threads: int = 1
) -> tuple[OnnxForward | OnnxTextForward | None, str | None]:
    """(the ONNX forward of a run with `runtime` (from `choose`), or None for torch; why not, when
    `auto` falls back): `OnnxForward` for pairs, `OnnxTextForward` for texts, each session on
    `threads` threads.

    A cached export that does not load (a truncated or corrupt `model.onnx`), or no longer gives the
    model's own answer on the probe (`check_cached`), is set aside and built again, once. Under `--runtime auto`, anything else that stops ONNX Runtime here (no
    exporter, an unwritable cache, an export or load error) means torch, with one warning line
    (docs/cli.md: Runtimes); an explicit `--runtime onnx` or `onnx-int8` stops with a UsageError.
    """
    if runtime not in ONNX_RUNTIMES:
        return None, None
    make, folder = (OnnxForward if what == "pairs" else OnnxTextForward), loaded.folder
    model = lambda: loaded.model
    config = loaded.config  # the model's own answer on the probe, remembered with its others (`model.remembered`)
    own = Reference(
        config,
        lambda: loaded.own_output(f"onnx {what}", probe_feeds(config, what), lambda m: own_probe_output(m, what)),
    )
    try:
        path, fresh = model_file(runtime, model, folder, cfg.cache_dir, what, own)
        try:
            forward = make(path, threads)
            if not fresh and runtime == "onnx":  # an int8 copy's drift is measured by the self-check
                check_cached(forward.path, forward.session, what, own)
            return forward, None
        except Exception:
            if not set_aside(cache_path(folder, cfg.cache_dir, what)):
                raise
            return make(model_file(runtime, model, folder, cfg.cache_dir, what, own)[0], threads), None
    except Exception as exc:
        if cfg.runtime == "auto":
            import warnings

            why = first_line(exc, 200) if isinstance(exc, ScorecliError) else error_line(exc, 200)
            warnings.warn(
                f"--runtime auto: ONNX Runtime cannot run here ({why}); running torch instead (the same scores)",
                RuntimeWarning,
                stacklevel=2,
            )
            return None, f"auto: ONNX Runtime cannot run here ({why})"
        if isinstance(exc, UsageError):
            raise
        raise UsageError(f"--runtime {runtime}: {error_line(exc)}") from exc
