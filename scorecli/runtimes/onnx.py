"""ONNX Runtime as a CPU runtime for BERT-family encoders: export once, cache, run.

The model's forward as scorecli runs it, through the fused encoder view of `fast_encoder`,
is exported: for a cross-encoder ("pairs") its logits and [CLS] state, the last layer computing
the [CLS] row only; for an embedding model's transformer ("texts") its last hidden states. It is
exported with `torch.onnx.export` into the cache
directory, keyed by the weight files' paths, sizes and modification times (as `gguf.py` keys
dequantized checkpoints) and the versions that shape the graph (scorecli's, torch's, transformers'). Before a new export is
cached, ONNX Runtime's scores of a probe batch are compared with the torch forward (at most
`EXPORT_TOLERANCE`); a graph that differs is never cached. `OnnxForward` is called like
`forward.EncoderForward` (a padded batch in, `Pooled` out), `OnnxTextForward` like
`kinds.embedding.EmbeddingForward` (ragged last hidden states out).

`--runtime onnx-int8` runs a dynamically quantized copy of the export (`runtime_int8`).

Knows nothing about tokenization, pooling, activations, files of rows or the CLI; which runtime
a run may use is decided by `choose` from the frozen config, `open_forward` opens it or, under
`--runtime auto`, falls back to torch, and `runtimes.auto` keeps the faster of it and torch
(all called by the families).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

import numpy as np
import torch

from scorecli.attention import pad_ragged
from scorecli.attention.backends import capabilities
from scorecli.core.batching import Batch
from scorecli.errors import ScorecliError, UsageError, error_line, first_line, runtime_gone
from scorecli.model import gguf
from scorecli.model.cache import build_once
from scorecli.model.hub import utf8_folder
from scorecli.model.remembered import folder_stem, weight_stamps
from scorecli.runtimes import RUNTIMES
from scorecli.runtimes.fast_encoder import FastEncoder
from scorecli.runtimes.forward import Pooled, with_encoder
from scorecli.runtimes.int8 import quantized
from scorecli.version import __version__

EXPORT_TOLERANCE = 1e-4  # max abs difference of the export's logits from the torch forward
OPSET = 17
GRAPH_VERSION = "2"  # bump when the exported graph's inputs or outputs change
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# the runtimes this module runs, as `runtimes.RUNTIMES` declares them (onnx-int8: opt-in only)
ONNX_RUNTIMES = tuple(name for name, info in RUNTIMES.items() if info.needs == "onnxruntime")
BACKEND_NAMES = {name: RUNTIMES[name].description for name in ONNX_RUNTIMES}
# a model's config and its own answer on the probe (`own_probe_output`), which a caller may remember
Reference = tuple[object, Callable[[], np.ndarray]]


def onnxruntime():
    """The onnxruntime module, imported with its import-time log lines kept off stderr (a coloured
    telemetry warning where the user's cache cannot be written, device discovery notes): scorecli's
    stderr holds its own lines only (docs/cli.md: Runtimes). Its later logs go at errors only."""
    import sys

    if sys.modules.get("onnxruntime") is not None:
        return sys.modules["onnxruntime"]
    import tempfile

    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as sink:  # the lines are printed by C++ on descriptor 2
            os.dup2(sink.fileno(), 2)
            import onnxruntime as ort  # ImportError where it is missing (or blocked: None in sys.modules)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    ort.set_default_logger_severity(3)
    return ort


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


def default_cache_dir() -> str:
    """The cache directory when none is given (the one dequantized GGUF models use)."""
    return gguf.default_cache_dir()


def cache_path(folder: str, cache_dir: str | None, what: str = "pairs") -> str:
    """Where the export (`what`: pairs or texts) of the checkpoint in `folder` lives: one
    folder per weights' identity (their inodes and change times too: other weights of the same size
    copied over them with their times kept, `cp -p`, `rsync -a`, are other weights; a `chmod` only
    exports again), and the versions that shape the graph: transformers' too, whose model code
    (embeddings, norms, activation, head) is what is traced."""
    import transformers

    parts = weight_stamps(folder, changes=True) + [
        f"scorecli {__version__}",
        f"torch {torch.__version__}",
        f"transformers {transformers.__version__}",
        f"opset {OPSET}",
        f"graph {GRAPH_VERSION} {what}",
    ]
    key = hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    root = cache_dir or default_cache_dir()
    try:  # a cache folder not named in UTF-8 (the exporter and onnxruntime take UTF-8 paths only): by descriptor
        root.encode("utf-8")
    except UnicodeEncodeError:
        try:
            os.makedirs(root, exist_ok=True)
            root = utf8_folder(root)
        except OSError:  # what cannot be made says so as the export is cached
            pass
    return os.path.join(root, "onnx", f"{folder_stem(folder)}-{what}-{key}")


class _Graph(torch.nn.Module):
    """What is exported: (ids, mask, types) -> (logits [S, C], [CLS] hidden state [S, H])."""

    def __init__(self, view: torch.nn.Module, fast):
        super().__init__()
        self.view, self.fast = view, fast

    def forward(self, input_ids, attention_mask, token_type_ids):
        logits = self.view(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits
        return logits, self.fast.last_hidden[:, 0]


class _TextGraph(torch.nn.Module):
    """What is exported for texts: (ids, mask) -> last hidden states [S, L, H]."""

    def __init__(self, view: torch.nn.Module):
        super().__init__()
        self.view = view

    def forward(self, input_ids, attention_mask):
        return self.view(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _probe_inputs(vocab: int, type_vocab: int) -> dict[str, np.ndarray]:
    """A padded probe batch: 3 sequences of different lengths (padding shows), seeded ids."""
    rng = np.random.default_rng(0)
    lengths = [19, 7, 12]
    ids = rng.integers(5, max(vocab, 6), size=(3, 19)).astype(np.int64)
    mask = (np.arange(19)[None] < np.array(lengths)[:, None]).astype(np.int64)
    types = ((np.arange(19)[None] >= 5) & (mask == 1) & (type_vocab > 1)).astype(np.int64)
    return {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": types}


def _export(model: torch.nn.Module, out: str, what: str = "pairs") -> None:
    with torch.no_grad():  # the fused weights become constants of the graph
        fast = FastEncoder(model)
    fast.cls_only = what == "pairs"
    view = with_encoder(model, fast)
    graph = (_Graph(view, fast) if what == "pairs" else _TextGraph(view)).eval()
    inputs, outputs = _names(what)
    probe = _probe_inputs(model.config.vocab_size, getattr(model.config, "type_vocab_size", 1))
    args = tuple(torch.from_numpy(probe[k]) for k in inputs)
    axes = {k: {0: "batch", 1: "length"} for k in inputs} | {
        "logits": {0: "batch"},
        "cls": {0: "batch"},
        "hidden": {0: "batch", 1: "length"},
    }
    import warnings

    grads = [p.requires_grad for p in model.parameters()]
    model.requires_grad_(False)  # the fast encoder's layers are not submodules of the graph: constants
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on Python control flow it sees as constants
            torch.onnx.export(
                graph,
                args,
                out,
                input_names=list(inputs),
                output_names=list(outputs),
                dynamic_axes={k: v for k, v in axes.items() if k in inputs + outputs},
                opset_version=OPSET,
                dynamo=False,
            )
    finally:
        for p, g in zip(model.parameters(), grads):
            p.requires_grad_(g)


def _session(path: str, threads: int):
    ort = onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _names(what: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(input names, output names) of the graph exported for `what`."""
    return (INPUTS, ("logits", "cls")) if what == "pairs" else (INPUTS[:2], ("hidden",))


def _probe(config, what: str) -> dict[str, np.ndarray]:
    """The probe's inputs the graph exported for `what` takes, for a model of `config`."""
    probe = _probe_inputs(config.vocab_size, getattr(config, "type_vocab_size", 1))
    return {k: probe[k] for k in _names(what)[0]}


@torch.inference_mode()
def own_probe_output(model: torch.nn.Module, what: str = "pairs") -> np.ndarray:
    """The model's own forward on the probe: its logits (pairs) or last hidden states (texts)."""
    out = model(**{k: torch.from_numpy(v) for k, v in _probe(model.config, what).items()})
    return (out.logits if what == "pairs" else out.last_hidden_state).float().numpy()


def export_error(reference: np.ndarray, config, session, what: str = "pairs") -> float:
    """Max abs difference of the exported graph's (an ONNX Runtime `session` of it) logits (pairs)
    or last hidden states (texts, at real tokens) from the model's own forward on the probe
    (`reference`: `own_probe_output`)."""
    probe = _probe(config, what)
    ours = session.run([_names(what)[1][0]], probe)[0]
    if what == "pairs":
        return float(np.abs(ours - reference).max())
    real = probe["attention_mask"].astype(bool)  # padding rows are never read
    return float(np.abs(ours[real] - reference[real]).max())


def materialize(
    model: Callable[[], torch.nn.Module], folder: str, cache_dir: str | None, what: str, reference: Reference
) -> tuple[str, bool]:
    """(path of model.onnx, whether it was exported now): the cached export (`what`: pairs or
    texts) of the model `model()` returns (built only when the export is not cached), loaded from
    `folder`, built and checked against the torch forward (`reference`) on first use."""
    target = cache_path(folder, cache_dir, what)
    path = os.path.join(target, "model.onnx")

    def build(tmp: str) -> None:
        built = model()
        _export(built, os.path.join(tmp, "model.onnx"), what)
        error = export_error(reference[1](), built.config, _session(os.path.join(tmp, "model.onnx"), 1), what)
        if not error <= EXPORT_TOLERANCE:  # NaN fails too
            raise UsageError(
                f"--runtime onnx: the ONNX export of {folder} differs from its torch forward by "
                f"{error:.2g} (tolerance {EXPORT_TOLERANCE:g}); use --runtime torch"
            )

    return path, build_once(target, build, f"the ONNX export of {folder}", ready=path)


def check_cached(forward: OnnxForward | OnnxTextForward, what: str, reference: Reference) -> None:
    """UsageError when the cached export `forward` runs no longer gives the model's own answer on
    the probe (bytes changed on disk, a cache copied from elsewhere), which failed the self-check
    of every run, `--runtime auto`'s too, its message blaming the architecture."""
    error = export_error(reference[1](), reference[0], forward.session, what)
    if not error <= EXPORT_TOLERANCE:  # NaN fails too
        raise UsageError(
            f"the cached ONNX export {forward.path} differs from the model's own forward by {error:.2g} "
            f"(tolerance {EXPORT_TOLERANCE:g}) and cannot be replaced: delete it, or use --runtime torch"
        )


class OnnxForward:
    """A cross-encoder's forward on padded pairs through an ONNX Runtime session.

    Reads the [CLS] row only (the scores, and pooled hidden states with `cls` pooling).
    Calls may run concurrently from several threads (`twin`: another session over the same
    file, so that each stream has its own threads).
    """

    def __init__(self, path: str, threads: int = 1):
        self.path, self.threads = path, threads
        self.session = _session(path, threads)

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
        self.session = _session(path, threads)

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
    own = (config, lambda: loaded.own_output(f"onnx {what}", _probe(config, what), lambda m: own_probe_output(m, what)))
    try:
        path, fresh = model_file(runtime, model, folder, cfg.cache_dir, what, own)
        try:
            forward = make(path, threads)
            if not fresh and runtime == "onnx":  # an int8 copy's drift is measured by the self-check
                check_cached(forward, what, own)
            return forward, None
        except Exception:
            if not _set_aside(cache_path(folder, cfg.cache_dir, what)):
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


def _set_aside(entry: str) -> bool:
    """Move a cache entry that does not load out of the way (renamed, then removed), so that it is
    built again; False when the cache cannot be changed (the run then cannot use it)."""
    aside = f"{entry}.broken-{os.getpid()}"
    try:
        os.replace(entry, aside)
    except OSError:
        return False
    import shutil

    shutil.rmtree(aside, ignore_errors=True)
    return True


def model_file(
    runtime: str,
    model: Callable[[], torch.nn.Module],
    folder: str,
    cache_dir: str | None,
    what: str,
    reference: Reference,
) -> tuple[str, bool]:
    """(the ONNX file a run with `runtime` (onnx or onnx-int8, from `choose`) runs, whether it was
    made now): the cached export (`materialize`), dynamically quantized for onnx-int8 (`runtime_int8`)."""
    path, fresh = materialize(model, folder, cache_dir, what, reference)
    if runtime == "onnx-int8":
        path, fresh = quantized(path, onnxruntime().__version__)
    return path, fresh
