"""scorecli vs sentence-transformers CrossEncoder, whole processes, same model and pairs.

Model: the real all-MiniLM-L6-v2 encoder with a random 1-label head, saved as a BERT
cross-encoder (tests.models.build_minilm_cross_encoder). Data: seeded rows of one query
(5-20 words) and 8 items of 5-120 words each (mixed lengths).
Contender A: `scorecli score in.jsonl --out a.parquet --model M --quiet` (auto mode = one pair
per sequence for cross-encoders, raw logits). Contender B: `benchmarks/st_crossencoder_job.py`
(CrossEncoder(M, activation_fn=Identity()).predict(pairs, batch_size=32), Parquet out).
Also checks both give the same scores (max abs difference <= 1e-4). Goal: scorecli >= 1.25x.

    python benchmarks/bench_vs_crossencoder.py [--rows 300] [--items 8] [--repeats 5]
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
    ap.add_argument("--batch-size", type=int, default=32, help="CrossEncoder.predict batch size")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def build(args, work) -> tuple[str, list[dict]]:
    """(model folder, rows): the benchmark's model (built under `work`) and seeded data."""
    from tests.models import build_minilm_cross_encoder

    model = build_minilm_cross_encoder(work / "model")
    rng, pool = random.Random(args.seed), C.word_pool()
    rows = []
    for r in range(args.rows):
        query = C.words(rng, pool, rng.randint(5, 20))
        items = [C.words(rng, pool, rng.randint(args.min_words, args.max_words)) for _ in range(args.items)]
        rows.append({"id": r, "query": query, "items": items})
    return model, rows


def main(argv: list[str] | None = None) -> float:
    args = parser().parse_args(argv)

    from transformers import AutoTokenizer

    work = C.workdir("vs-crossencoder")
    model, rows = build(args, work)
    tok = AutoTokenizer.from_pretrained(model)
    C.write_jsonl(work / "in.jsonl", rows)
    C.write_jsonl(work / "one.jsonl", rows[:1])
    pair_lens = [len(x) for r in rows for x in tok([r["query"]] * len(r["items"]), r["items"])["input_ids"]]

    a = C.Contender("scorecli score", C.scorecli_cmd(
        "score", str(work / "in.jsonl"), "--out", str(work / "a.parquet"), "--model", model, "--quiet"))
    b = C.Contender("sentence-transformers CrossEncoder.predict", [
        C.PYTHON, str(C.BENCH_DIR / "st_crossencoder_job.py"), str(work / "in.jsonl"), str(work / "b.parquet"),
        model, "--batch-size", str(args.batch_size)])
    a1 = C.Contender("scorecli score, 1 row (start-up + load)", C.scorecli_cmd(
        "score", str(work / "one.jsonl"), "--out", str(work / "a1.parquet"), "--model", model, "--quiet"), info=True)
    b1 = C.Contender("CrossEncoder job, 1 row (start-up + load)", [
        C.PYTHON, str(C.BENCH_DIR / "st_crossencoder_job.py"), str(work / "one.jsonl"), str(work / "b1.parquet"),
        model, "--batch-size", str(args.batch_size)], info=True)  # fmt: skip
    contenders = [a, b, a1, b1]
    C.alternate(contenders, args.repeats, work / "stderr.log", warmup=[a1, b1])
    diff = C.max_abs_diff(C.read_scores(work / "a.parquet"), C.read_scores(work / "b.parquet"))

    ratio = b.median_s / a.median_s
    cpu_ratio = b.median_cpu / a.median_cpu
    min_ratio = b.min_s / a.min_s
    net = C.net_ratio(b, b1, a, a1)
    C.header(
        "2. scorecli vs sentence-transformers CrossEncoder (`bench_vs_crossencoder.py`)",
        [
            "model: all-MiniLM-L6-v2 weights + random 1-label head (BertForSequenceClassification), float32, CPU",
            f"data: {args.rows} rows x {args.items} items = {len(pair_lens)} pairs (seed {args.seed}); items "
            f"{args.min_words}-{args.max_words} words; pair tokens mean {sum(pair_lens) / len(pair_lens):.1f} "
            f"(min {min(pair_lens)}, max {max(pair_lens)}), {sum(pair_lens):,} in all",
            f"CrossEncoder.predict batch_size={args.batch_size}; scorecli defaults (--max-batch-tokens: 2048 on CPU)",
            f"{args.repeats} alternating rounds after one untimed 1-row warm-up each; whole processes",
        ],
    )
    C.commands(contenders)
    C.table(contenders, b)
    print(f"**scorecli speed-up over CrossEncoder: {ratio:.2f}x** (goal >= 1.25x: "
          f"{'met' if ratio >= 1.25 else 'NOT met'}); best-of-N ratio {min_ratio:.2f}x; CPU-time ratio {cpu_ratio:.2f}x; net of each side's 1-row run: {net}. "
          f"Max |scorecli - CrossEncoder| score difference: {diff:.2e} "
          f"({'within' if diff <= 1e-4 else 'OUTSIDE'} 1e-4).\n")
    return ratio


if __name__ == "__main__":
    main(sys.argv[1:])
