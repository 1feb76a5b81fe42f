"""Contender B of bench_vs_st_vectors.py: the plain sentence-transformers way, row by row.

Reads rows {"id", "query", "items"} from JSONL and, for each row, scores its items as a
sentence-transformers 6 user does: `encode_query([query])`, `encode_document(items,
batch_size=B)`, `similarity(query, items)`, with a `MultiVectorEncoder` or a `SparseEncoder`
(`--kind`); writes one Parquet row per input row: `id`, `score` (list<float32>).

    python benchmarks/st_vectors_job.py in.jsonl out.parquet MODEL --kind multi-vector [--batch-size 32]
"""

from __future__ import annotations

import argparse

import _common as C
import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("model")
    ap.add_argument("--kind", choices=["multi-vector", "sparse"], required=True)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()

    from sentence_transformers import MultiVectorEncoder, SparseEncoder

    rows = C.read_jsonl(args.input)
    model = (MultiVectorEncoder if args.kind == "multi-vector" else SparseEncoder)(args.model, device="cpu")
    scores: list[float] = []
    for row in rows:
        if not row["items"]:
            continue
        query = model.encode_query([row["query"]])
        items = model.encode_document(row["items"], batch_size=args.batch_size)
        scores += model.similarity(query, items)[0].tolist()
    C.write_row_scores(rows, scores, args.output)


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
