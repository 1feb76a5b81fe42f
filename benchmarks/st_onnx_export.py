"""Export a cross-encoder (or, with `--embedding`, a SentenceTransformer) with sentence-transformers'
own ONNX helpers (the real ONNX peers of issues 21 and 36).

Run under the ST-ONNX peer interpreter (benchmarks/make_st_onnx_env.sh: optimum does not import
under the project's transformers 5). Copies MODEL to OUT (default MODEL-st-onnx, replaced if
present) and writes there, as sentence-transformers' documentation does:

    CrossEncoder(OUT, backend="onnx", activation_fn=Identity()).save_pretrained(OUT)  # onnx/model.onnx (fp32)
    export_optimized_onnx_model(ce, "O3", OUT)                                        # onnx/model_O3.onnx
    export_dynamic_quantized_onnx_model(ce, "avx2", OUT)                              # onnx/model_quint8_avx2.onnx

    .bench-st-onnx/bin/python benchmarks/st_onnx_export.py MODEL [OUT]

Prints OUT on its last line. `st_crossencoder_job.py OUT --backend onnx --file-name onnx/...` scores with them.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

FILES = ("onnx/model.onnx", "onnx/model_O3.onnx", "onnx/model_quint8_avx2.onnx")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a local cross-encoder folder (left untouched)")
    ap.add_argument("out", nargs="?", help="the copy to export into (default MODEL-st-onnx)")
    ap.add_argument("--embedding", action="store_true", help="MODEL is a SentenceTransformer folder")
    args = ap.parse_args()

    import torch
    from sentence_transformers import CrossEncoder, SentenceTransformer
    from sentence_transformers.backend import export_dynamic_quantized_onnx_model, export_optimized_onnx_model

    src = Path(args.model)
    out = Path(args.out) if args.out else src.with_name(src.name + "-st-onnx")
    if out.resolve() == src.resolve():
        raise SystemExit("OUT must differ from MODEL (the export writes into a copy)")
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out)

    if args.embedding:
        ce = SentenceTransformer(str(out), backend="onnx", device="cpu")  # exports onnx/model.onnx
    else:
        ce = CrossEncoder(str(out), backend="onnx", activation_fn=torch.nn.Identity())  # exports onnx/model.onnx
    ce.save_pretrained(str(out))
    export_optimized_onnx_model(ce, "O3", str(out))
    export_dynamic_quantized_onnx_model(ce, "avx2", str(out))

    missing = [f for f in FILES if not (out / f).is_file()]
    if missing:
        raise SystemExit(f"export incomplete, missing under {out}: {', '.join(missing)}")
    print(out)


if __name__ == "__main__":
    main()
