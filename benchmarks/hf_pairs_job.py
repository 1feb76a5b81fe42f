"""Peer of gpu_compare.py: transformers by hand, as a user would write it for (query, item) pairs.

Reads rows {"id", "query", "items"} from JSONL; tokenizes every query and item once (one batched
call each, as scorecli does: the pair is the query's tokens then the item's, P + I_k), sorts the
pairs by length, runs `AutoModelForSequenceClassification` in padded batches of --batch-size
pairs (attention mask, right padding; the model reads its last non-pad token) and writes one
Parquet row per input row: `id`, `score` (list<float32>, raw logits).

    python benchmarks/hf_pairs_job.py in.jsonl out.parquet MODEL [--dtype bfloat16] [--attn sdpa]
        [--batch-size 128] [--limit ROWS]
"""

from __future__ import annotations

import argparse

import _common as C
import numpy as np
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("model")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--attn", default="sdpa")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--limit", type=int, default=None, help="score only the first ROWS rows")
    args = ap.parse_args()

    rows = C.read_jsonl(args.input)[: args.limit]
    tok = AutoTokenizer.from_pretrained(args.model)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = (
        AutoModelForSequenceClassification.from_pretrained(
            args.model, dtype=getattr(torch, args.dtype), attn_implementation=args.attn
        )
        .to(device)
        .eval()
    )
    queries = tok([r["query"] for r in rows], add_special_tokens=False)["input_ids"]
    items = tok([i for r in rows for i in r["items"]], add_special_tokens=False)["input_ids"]
    pairs, k = [], 0
    for r, row in enumerate(rows):
        for _ in row["items"]:
            pairs.append(queries[r] + items[k])
            k += 1
    order = np.argsort([-len(p) for p in pairs], kind="stable")
    scores = np.zeros(len(pairs), dtype=np.float32)
    pad = tok.pad_token_id
    with torch.inference_mode():
        for start in range(0, len(order), args.batch_size):
            index = order[start : start + args.batch_size]
            longest = max(len(pairs[i]) for i in index)
            ids = torch.full((len(index), longest), pad, dtype=torch.long)
            mask = torch.zeros((len(index), longest), dtype=torch.long)
            for row, i in enumerate(index):
                ids[row, : len(pairs[i])] = torch.tensor(pairs[i])
                mask[row, : len(pairs[i])] = 1
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
            scores[index] = logits[:, 0].float().cpu().numpy()
    C.write_row_scores(rows, scores.tolist(), args.output)


if __name__ == "__main__":
    main()
