"""What a model's weights answered, remembered so that a later run of the same weights need not
build the torch model (docs/speed.md: a CPU run on ONNX Runtime starts ~2 s sooner).

A run that ONNX Runtime scores (a CPU float32 cross-encoder or embedding model) needs its torch
model for three things only: facts read from the built model (whether scorecli's fused encoder
reproduces it, its vocabulary, the longest sequence it embeds), the ONNX export (made once and
cached, `runtimes.onnx_export`, and checked by each run against the model's own answer on its probe) and
the self-check's reference: the model's own forward on the probe's token ids. Building the model imports transformers' model code (and with it torch's compiler,
`torch._dynamo`) and reads the weights: ~2 s of a 5 s one-row run on a 2-core CPU. So a run that
built the model and ran ONNX Runtime keeps the facts it read and the reference outputs it
computed in `<cache dir>/remembered/<model>-<key>.npz`, and a later run whose key matches reads
them there and builds the model only if something asks for more (`model.load.Deferred`: the
audit, a torch batch, a probe not remembered).

The key covers what makes those answers: each config and weight file of the folder (real path,
size, modification time, as the ONNX export is keyed, and its inode and status-change time), the
versions of torch, transformers and scorecli, the kind, device, dtype and attention the model is
loaded with, and whether its own code and pickled weights are allowed (a run that refuses them
builds the model, and refuses). Every run still
runs the self-check's probe through its own forward; what is remembered is the other side of
the comparison, a function of the key and the probe's token ids alone (`inputs_key`). A record
that cannot be read is ignored (the model is built, and the record written again); one that
cannot be written only means building the model next time too. Knows nothing about kinds,
runtimes or rows.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np

from scorecli.model.cache import fresh_file
from scorecli.version import __version__

FORMAT = "1"  # bump when what is remembered, or how, changes
_FACTS = "facts"  # the member of the .npz file that holds the facts, as JSON


def weight_stamps(folder: str, changes: bool = False) -> list[str]:
    """Each file whose contents make the transformer in `folder` (config and weights, sorted) by
    its real path (a folder not named in UTF-8 is read as /proc/self/fd/N, the same name for any
    such folder), size and modification time: what caches of its answers are keyed by (here, and
    the ONNX export, `runtimes.onnx_export.cache_path`).

    `changes`: with its inode and status-change time too, which other weights written over the
    file with its modification time kept (`cp -p`, `rsync -a`, `tar x` of a fine-tune of the same
    size) change: a record of the old weights' answers agrees with the ONNX export made of them,
    and would score them in silence, where the model's own forward shows that export out of date
    (the self-check). A `chmod` or a new hard link only builds the model once more."""
    names = sorted(n for n in os.listdir(folder) if n == "config.json" or n.endswith((".safetensors", ".bin")))
    stamps = []
    for name in names:
        path = os.path.join(folder, name)
        stat = os.stat(path)
        stamp = f"{os.path.realpath(path)}:{stat.st_size}:{stat.st_mtime_ns}"
        stamps.append(f"{stamp}:{stat.st_ino}:{stat.st_ctime_ns}" if changes else stamp)
    return stamps


def folder_stem(folder: str) -> str:
    """The folder's own name in UTF-8, for a cache entry's name (onnxruntime opens UTF-8 paths only)."""
    stem = os.path.basename(os.path.normpath(os.path.realpath(folder))) or "model"
    return stem.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def record_path(folder: str, cache_dir: str, load: dict[str, str]) -> str:
    """Where what the model in `folder`, loaded as `load` says (kind, device, dtype, attention),
    answered is remembered."""
    import torch
    import transformers

    parts = weight_stamps(folder, changes=True) + [f"{k} {v}" for k, v in sorted(load.items())]
    parts += [
        f"scorecli {__version__}",
        f"torch {torch.__version__}",
        f"transformers {transformers.__version__}",
        f"format {FORMAT}",
    ]
    key = hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(cache_dir, "remembered", f"{folder_stem(folder)}-{key}.npz")


def inputs_key(what: str, inputs: dict[str, np.ndarray]) -> str:
    """A name for `what` a forward outputs on `inputs`: their names, dtypes, shapes and values."""
    digest = hashlib.sha256(f"{what}\n".encode())
    for name in sorted(inputs):
        array = np.ascontiguousarray(inputs[name])
        digest.update(f"{name} {array.dtype.str} {array.shape}\n".encode())
        digest.update(array.tobytes())
    return "out-" + digest.hexdigest()[:24]


class Memory:
    """The facts and own-forward outputs of one model as it is loaded (`record_path`): read from
    its record when there is one (`recorded`), added to as a run learns more, and kept (`save`)."""

    def __init__(self, path: str):
        self.path = path
        self.facts: dict[str, Any] = {}
        self.outputs: dict[str, np.ndarray] = {}
        self.recorded = self._read()
        self._learned = False

    def _read(self) -> bool:
        try:
            with np.load(self.path, allow_pickle=False) as record:
                facts = json.loads(str(record[_FACTS]))
                outputs = {name: record[name] for name in record.files if name != _FACTS}
        except Exception:  # noqa: BLE001 - none, or not a whole one (a truncated zip, a foreign file)
            return False
        if not isinstance(facts, dict) or not facts:
            return False
        self.facts, self.outputs = facts, outputs
        return True

    def fact(self, name: str) -> Any:
        """A remembered fact (None: not known)."""
        return self.facts.get(name)

    def output(self, key: str) -> np.ndarray | None:
        """A remembered output of the model's own forward on the inputs named `key` (`inputs_key`)."""
        return self.outputs.get(key)

    def learn_fact(self, name: str, value: Any) -> None:
        if self.facts.get(name) != value:
            self.facts[name], self._learned = value, True

    def learn_output(self, key: str, value: np.ndarray) -> None:
        if key not in self.outputs:
            self.outputs[key], self._learned = np.ascontiguousarray(value), True

    def save(self) -> None:
        """Keep what was learned (atomically: written beside, then renamed into place, with the
        modes the umask gives, as the cache's other files: `model.cache`); a cache that cannot be
        written only means building the model next time too."""
        if not self._learned or not self.facts:
            return
        folder = os.path.dirname(self.path)
        try:
            os.makedirs(folder, exist_ok=True)
            tmp = fresh_file(folder, ".npz")
        except OSError:
            return
        try:
            with open(tmp, "wb") as f:
                np.savez(f, **{_FACTS: np.array(json.dumps(self.facts))}, **self.outputs)
            os.replace(tmp, self.path)
            self._learned = False
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
