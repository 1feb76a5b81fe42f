"""int8 ONNX exports (`--runtime onnx-int8`): dynamic quantization of the cached float32 export.

The float32 export of `runtime_onnx` (checked against the torch forward before it was cached) is
quantized with ONNX Runtime's `quantize_dynamic` (weights QUInt8, activations quantized at run
time: what sentence-transformers ships as `model_quint8_avx2.onnx`) and cached next to it, keyed
by the float32 file's size and modification time and the onnxruntime version. The file is written
under a temporary name and renamed into place (`cache.build_once`), so a killed run never leaves
half a file.

Knows nothing about how far the int8 scores drift: the self-check measures that on its probe
and the metadata records it (`drift.measure_drift`). Knows nothing about tokenization, the
CLI or which runtime a run chose.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from scorecli.model.cache import build_once

WEIGHT_TYPE = "QUInt8"


def int8_path(fp32_path: str, onnxruntime_version: str) -> str:
    """Where the int8 version of the float32 export `fp32_path` lives (same folder)."""
    stat = os.stat(fp32_path)
    # the real path: a cache folder not named in UTF-8 is read through /proc/self/fd/N (`onnx.cache_path`)
    key = f"{os.path.realpath(fp32_path)}:{stat.st_size}:{stat.st_mtime_ns}\nonnxruntime {onnxruntime_version}"
    key += f"\nquantize_dynamic weight_type={WEIGHT_TYPE}"
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(os.path.dirname(fp32_path), f"model_quint8-{digest}.onnx")


def quantized(fp32_path: str, onnxruntime_version: str) -> tuple[str, bool]:
    """(path of the int8 model, whether it was made now): the cached dynamic quantization of
    the float32 export `fp32_path` by the installed onnxruntime (its version is part of the key),
    made on first use."""
    target = int8_path(fp32_path, onnxruntime_version)
    if os.path.isfile(target):  # before importing onnx and its quantizer (build_once checks again)
        return target, False
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def build(tmp: str) -> None:
        # a ModelProto, not the path: quantize_dynamic then writes its shape-inferred copy to a
        # temporary folder of its own, not next to the cached export
        with _quiet_root_logger():  # its "consider pre-processing" warning goes to the root logger
            quantize_dynamic(onnx.load(fp32_path), tmp, weight_type=getattr(QuantType, WEIGHT_TYPE))

    return target, build_once(target, build, f"the int8 ONNX model of {fp32_path}")


@contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """Warnings of the root logger dropped for the duration (one-line stderr contract)."""
    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(before)
