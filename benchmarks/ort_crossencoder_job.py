"""ONNX peer of bench_vs_crossencoder.py: what sentence-transformers' `backend="onnx"` does,
without optimum (optimum-onnx 0.1.0 does not import under transformers 5.24).

`export` writes the model's own forward (transformers' BERT, all tokens, eager attention)
once with `torch.onnx.export` (fp32), optionally also int8 weights (onnxruntime's
`quantize_dynamic`, QUInt8 as sentence-transformers' `model_quint8_avx2.onnx`). `score` is the
timed job: tokenizer + one ONNX Runtime session (all cores, ORT_ENABLE_ALL), pairs sorted by
length in batches of 32 as `CrossEncoder.predict` does, raw logits, one Parquet row per input row.

    python benchmarks/ort_crossencoder_job.py export MODEL OUT.onnx [--int8 OUT8.onnx]
    python benchmarks/ort_crossencoder_job.py score in.jsonl out.parquet MODEL FILE.onnx [--batch-size 32]
"""

from __future__ import annotations

import argparse

import _common as C


def export(model_dir: str, out: str, int8: str | None) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(model_dir, attn_implementation="eager").eval()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    args = tuple(torch.ones(2, 8, dtype=torch.long) for _ in names)
    axes = {k: {0: "batch", 1: "length"} for k in names} | {"logits": {0: "batch"}}
    with torch.no_grad():
        torch.onnx.export(
            model,
            args,
            out,
            input_names=names,
            output_names=["logits"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    if int8:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(out, int8, weight_type=QuantType.QUInt8)


def score(args) -> None:
    import numpy as np
    import onnxruntime as ort
    from transformers import AutoTokenizer

    rows = C.read_jsonl(args.input)
    pairs = [(row["query"], item) for row in rows for item in row["items"]]
    tok = AutoTokenizer.from_pretrained(args.model)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(args.onnx, options, providers=["CPUExecutionProvider"])
    order = np.argsort([-len(q) - len(d) for q, d in pairs], kind="stable")  # CrossEncoder.predict's sort
    scores = np.zeros(len(pairs), dtype=np.float32)
    for start in range(0, len(pairs), args.batch_size):
        idx = order[start : start + args.batch_size]
        enc = tok(
            [pairs[i][0] for i in idx], [pairs[i][1] for i in idx], padding=True, truncation=True, return_tensors="np"
        )
        feeds = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
        scores[idx] = session.run(["logits"], feeds)[0][:, 0]
    C.write_row_scores(rows, scores, args.output)


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("model")
    e.add_argument("out")
    e.add_argument("--int8")
    s = sub.add_parser("score")
    for name in ("input", "output", "model", "onnx"):
        s.add_argument(name)
    s.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    if args.cmd == "export":
        export(args.model, args.out, args.int8)
    else:
        score(args)


if __name__ == "__main__":
    main()
