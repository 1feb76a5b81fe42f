"""Peak memory of `scorecli score` on 2,000 vs 100,000 rows: streaming must keep it bounded.

Model: the tiny random Qwen3 classifier (tests.builders.models.build_qwen3_seq_cls: hidden 64, 2 layers).
Data: seeded JSONL rows of a short query (4-10 words) and 4 short items (2-6 words each).
Both runs: `scorecli score in.jsonl --out out.parquet --model M --quiet` (default
--window-rows 2048, so the small input is one window and the large one ~49). Peak RSS of
each whole process comes from os.wait4 (ru_maxrss) in a small launcher. Goal: peak RSS growth <= 1.25x.

    python benchmarks/bench_memory.py [--small 2000] [--large 100000] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import random
import sys

import _common as C


def write_rows(path, n: int, seed: int, pool: list[str]) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for r in range(n):
            row = {
                "id": r,
                "query": C.words(rng, pool, rng.randint(4, 10)),
                "items": [" " + C.words(rng, pool, rng.randint(2, 6)) for _ in range(4)],
            }
            f.write(json.dumps(row) + "\n")


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--large", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import pyarrow.parquet as pq

    from tests.builders.models import build_qwen3_seq_cls

    work = C.workdir("memory")
    model = build_qwen3_seq_cls(work / "model")
    pool = C.word_pool()
    write_rows(work / "small.jsonl", args.small, args.seed, pool)
    write_rows(work / "large.jsonl", args.large, args.seed, pool)
    sizes = {n: (work / f"{n}.jsonl").stat().st_size / 2**20 for n in ("small", "large")}

    def cmd(name: str) -> list[str]:
        return C.scorecli_cmd(
            "score", str(work / f"{name}.jsonl"), "--out", str(work / f"{name}.parquet"), "--model", model, "--quiet"
        )

    small = C.Contender(f"scorecli score, {args.small:,} rows", cmd("small"))
    large = C.Contender(f"scorecli score, {args.large:,} rows", cmd("large"))
    C.alternate([small, large], args.repeats, work / "stderr.log", warmup=[small])
    rows_out = pq.ParquetFile(work / "large.parquet").metadata.num_rows
    if rows_out != args.large:
        raise SystemExit(f"large run wrote {rows_out} rows, expected {args.large}")

    growth = large.median_rss / small.median_rss
    C.header(
        f"4. Peak memory, {args.small:,} vs {args.large:,} rows (`bench_memory.py`)",
        [
            "model: tiny random Qwen3ForSequenceClassification (hidden 64, 2 layers), float32, CPU, MIS",
            f"data: 4 items per row, query 4-10 words, items 2-6 words (seed {args.seed}); JSONL inputs of "
            f"{sizes['small']:.1f} MiB and {sizes['large']:.1f} MiB; Parquet out; default --window-rows 2048",
            f"peak RSS = ru_maxrss of each whole process (os.wait4 in a small launcher); {args.repeats} alternating rounds "
            "after one untimed warm-up of the small run",
        ],
    )
    C.commands([small, large])
    print("| run | median peak RSS MiB | RSS runs (MiB) | median wall s | wall runs (s) | rows/s |")
    print("|---|---:|---|---:|---|---:|")
    for c, n in ((small, args.small), (large, args.large)):
        rss_runs = ", ".join(f"{r.max_rss_mib:.0f}" for r in c.runs)
        print(
            f"| {c.name} | {c.median_rss:.0f} | {rss_runs} | {c.median_s:.1f} | {c.times()} | {n / c.median_s:,.0f} |"
        )
    print(
        f"\n**Peak RSS growth, {args.large:,} vs {args.small:,} rows: {growth:.2f}x** "
        f"(goal <= 1.25x: {'met' if growth <= 1.25 else 'NOT met'}).\n"
    )
    return growth


if __name__ == "__main__":
    main(sys.argv[1:])
