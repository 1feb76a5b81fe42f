"""Drop the JIT sources a scoring run never builds from flashinfer's wheel, in place.

The GPU machine is sent the working tree and `.whl` (64 MiB in all); flashinfer 0.7.2's wheel is
62 MB, most of it CUDA sources for kernels it compiles on first use. Sampling, DeepSeek-V4 and
MoE sources are never built by attention (prefill, the MIS plans), so `make gpu-wheels` removes
them (and their RECORD lines):

    python benchmarks/slim_wheel.py .whl/flashinfer_python-*.whl
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

UNUSED = (
    "flashinfer/data/csrc/cake_sampling/",
    "flashinfer/data/csrc/cake_dsv4/",
    "flashinfer/data/csrc/fused_moe/",
    "flashinfer/data/csrc/alphamoe_",
)


def slim(path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename.startswith(UNUSED):
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(line for line in lines if not line.startswith(UNUSED)).encode()
            dst.writestr(info, data)
    before, after = path.stat().st_size, tmp.stat().st_size
    tmp.replace(path)
    print(f"{path.name}: {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        slim(Path(arg))
