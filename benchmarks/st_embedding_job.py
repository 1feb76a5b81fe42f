"""Contender B of bench_vs_st_embedding.py: the plain sentence-transformers way.

Reads rows {"id", "query", "items"} from JSONL, embeds every row's query and every item with
`SentenceTransformer(M).encode(..., batch_size=32)` (the queries in one call, the items in
another, as a bi-encoder pipeline does), scores each item with `model.similarity` against its
row's query and writes one Parquet row per input row: `id`, `score` (list<float32>).

    python benchmarks/st_embedding_job.py in.jsonl out.parquet MODEL [--batch-size 32]
        [--backend onnx --file-name onnx/model.onnx]

`--backend onnx` is sentence-transformers' own ONNX Runtime backend on a file exported once
beforehand (`st_onnx_export.py --embedding`), in the peer environment of `make_st_onnx_env.sh`.
"""

from __future__ import annotations

import argparse

import _common as C
import torch
from sentence_transformers import SentenceTransformer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("model")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--backend", default="torch", choices=["torch", "onnx"])
    ap.add_argument("--file-name", default=None, help="the ONNX file under MODEL (backend onnx)")
    args = ap.parse_args()

    rows = C.read_jsonl(args.input)
    kwargs = {"file_name": args.file_name} if args.file_name else {}
    model = SentenceTransformer(args.model, device="cpu", backend=args.backend, model_kwargs=kwargs)
    queries = model.encode([r["query"] for r in rows], batch_size=args.batch_size, convert_to_tensor=True)
    items = model.encode([x for r in rows for x in r["items"]], batch_size=args.batch_size, convert_to_tensor=True)
    scores, start = [], 0
    for k, row in enumerate(rows):
        n = len(row["items"])
        scores += model.similarity(queries[k : k + 1], items[start : start + n])[0].tolist() if n else []
        start += n
    C.write_row_scores(rows, scores, args.output)


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
