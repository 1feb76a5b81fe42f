"""The ONNX export of a BERT-family encoder, and its cache: what is traced, where it is kept, and
the check that a graph answers as the model does.

The model's forward as scorecli runs it, through the fused encoder view of `fast_encoder`, is
exported: for a cross-encoder ("pairs") its logits and [CLS] state, the last layer computing the
[CLS] row only; for an embedding model's transformer ("texts") its last hidden states. It is
exported with `torch.onnx.export` into the cache directory, keyed by the weight files' paths,
sizes and modification times (as `gguf.py` keys dequantized checkpoints) and the versions that
shape the graph (scorecli's, torch's, transformers'). Before a new export is cached, ONNX
Runtime's answer on a probe batch is compared with the torch forward's (at most
`EXPORT_TOLERANCE`); a graph that differs is never cached, and a cached one is checked against
the model's own answer (remembered, `model.remembered`) by each run that opens it. `--runtime
onnx-int8` runs a dynamically quantized copy of the export (`runtimes.int8`).

Knows nothing about batches, tokenization, pooling, which runtime a run chooses (`runtimes.onnx`)
or the CLI.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from scorecli.errors import UsageError
from scorecli.model import gguf
from scorecli.model.cache import build_once
from scorecli.model.hub import utf8_folder
from scorecli.model.remembered import folder_stem, weight_stamps
from scorecli.runtimes.fast_encoder import FastEncoder
from scorecli.runtimes.forward import with_encoder
from scorecli.runtimes.int8 import quantized
from scorecli.version import __version__

EXPORT_TOLERANCE = 1e-4  # max abs difference of the export's logits from the torch forward
OPSET = 17
GRAPH_VERSION = "2"  # bump when the exported graph's inputs or outputs change
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class Reference(NamedTuple):
    """What a graph is checked against: the model's config, and its own answer on the probe
    (`own_probe_output`, which a caller may remember: computed when asked)."""

    config: object
    answer: Callable[[], np.ndarray]


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


def open_session(path: str, threads: int):
    """An ONNX Runtime session of the graph at `path` on `threads` threads (the CPU provider)."""
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


def probe_feeds(config, what: str) -> dict[str, np.ndarray]:
    """The probe's inputs the graph exported for `what` takes, for a model of `config`."""
    probe = _probe_inputs(config.vocab_size, getattr(config, "type_vocab_size", 1))
    return {k: probe[k] for k in _names(what)[0]}


@torch.inference_mode()
def own_probe_output(model: torch.nn.Module, what: str = "pairs") -> np.ndarray:
    """The model's own forward on the probe: its logits (pairs) or last hidden states (texts)."""
    out = model(**{k: torch.from_numpy(v) for k, v in probe_feeds(model.config, what).items()})
    return (out.logits if what == "pairs" else out.last_hidden_state).float().numpy()


def export_error(reference: np.ndarray, config, session, what: str = "pairs") -> float:
    """Max abs difference of the exported graph's (an ONNX Runtime `session` of it) logits (pairs)
    or last hidden states (texts, at real tokens) from the model's own forward on the probe
    (`reference`: `own_probe_output`)."""
    probe = probe_feeds(config, what)
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
        error = export_error(reference.answer(), built.config, open_session(os.path.join(tmp, "model.onnx"), 1), what)
        if not error <= EXPORT_TOLERANCE:  # NaN fails too
            raise UsageError(
                f"--runtime onnx: the ONNX export of {folder} differs from its torch forward by "
                f"{error:.2g} (tolerance {EXPORT_TOLERANCE:g}); use --runtime torch"
            )

    return path, build_once(target, build, f"the ONNX export of {folder}", ready=path)


def check_cached(path: str, graph, what: str, reference: Reference) -> None:
    """UsageError when the cached export at `path` (`graph`: an ONNX Runtime session of it) no longer gives the model's own answer on
    the probe (bytes changed on disk, a cache copied from elsewhere), which failed the self-check
    of every run, `--runtime auto`'s too, its message blaming the architecture."""
    error = export_error(reference.answer(), reference.config, graph, what)
    if not error <= EXPORT_TOLERANCE:  # NaN fails too
        raise UsageError(
            f"the cached ONNX export {path} differs from the model's own forward by {error:.2g} "
            f"(tolerance {EXPORT_TOLERANCE:g}) and cannot be replaced: delete it, or use --runtime torch"
        )


def set_aside(entry: str) -> bool:
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
