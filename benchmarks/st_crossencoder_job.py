"""Contender B of bench_vs_crossencoder.py: the plain sentence-transformers way.

Reads rows {"id", "query", "items"} from JSONL, scores every (query, item) pair with
`sentence_transformers.CrossEncoder(M, activation_fn=torch.nn.Identity()).predict(pairs,
batch_size=32)` (raw logits, like `scorecli score` with the default `--activation none`) and
writes one Parquet row per input row: `id`, `score` (list<float32>).

    python benchmarks/st_crossencoder_job.py in.jsonl out.parquet MODEL [--batch-size 32] [--dtype bfloat16]
        [--backend onnx --file-name onnx/model.onnx]

`--backend onnx` is sentence-transformers' own ONNX Runtime backend (v4.1+, through optimum),
on a file exported once beforehand (`st_onnx_export.py`); it needs an environment where
optimum imports (see RESULTS.md, issue 21).
"""

from __future__ import annotations

import argparse

import _common as C
import torch
from sentence_transformers import CrossEncoder


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("model")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--backend", default="torch", choices=["torch", "onnx"])
    ap.add_argument("--file-name", default=None, help="the ONNX file under MODEL (backend onnx)")
    ap.add_argument(
        "--dtype",
        default=None,
        choices=["bfloat16", "float16", "float32"],
        help="the model's dtype (torch backend; default: as saved)",
    )
    args = ap.parse_args()

    rows = C.read_jsonl(args.input)
    pairs = [(row["query"], item) for row in rows for item in row["items"]]

    kwargs = {"file_name": args.file_name} if args.file_name else {}
    if args.dtype:
        kwargs["dtype"] = getattr(torch, args.dtype)
    model = CrossEncoder(args.model, activation_fn=torch.nn.Identity(), backend=args.backend, model_kwargs=kwargs)
    scores = model.predict(pairs, batch_size=args.batch_size, show_progress_bar=False, convert_to_numpy=True)
    C.write_row_scores(rows, scores, args.output)


if __name__ == "__main__":
    main()
