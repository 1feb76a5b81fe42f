"""MIS vs single-item scoring, whole `scorecli score` processes, same model and data.

Model: a mid-size random Qwen3 classifier (tests.models.build_mid_qwen3_seq_cls: hidden 384,
6 layers). Data: seeded rows of a ~80-token query and 32 items of ~20 tokens each.
Contenders: `scorecli score in.jsonl --out out.parquet --model M --mode mis --quiet` and the
same with `--mode single`; plus a 1-row run of the same command (start-up + model load +
Parquet write, for the diagnosis). Goal: MIS >= 3x faster than single.

    python benchmarks/bench_mis_vs_single.py [--rows 64] [--items 32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import random
import sys

import _common as C


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--items", type=int, default=32)
    ap.add_argument("--query-tokens", type=int, default=80)
    ap.add_argument("--item-tokens", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def build(args, work) -> tuple[str, list[dict]]:
    """(model folder, rows): the benchmark's model (built under `work`) and seeded data."""
    from transformers import AutoTokenizer

    from tests.models import build_mid_qwen3_seq_cls

    model = build_mid_qwen3_seq_cls(work / "model")
    tok = AutoTokenizer.from_pretrained(model)
    rng, pool = random.Random(args.seed), C.word_pool()
    rows = []
    for r in range(args.rows):
        query = C.fit_words(rng, pool, tok, args.query_tokens)
        items = [" " + C.fit_words(rng, pool, tok, args.item_tokens) for _ in range(args.items)]
        rows.append({"id": r, "query": query, "items": items})
    return model, rows


def main(argv: list[str] | None = None) -> float:
    args = parser().parse_args(argv)

    from transformers import AutoTokenizer

    work = C.workdir("mis-vs-single")
    model, rows = build(args, work)
    tok = AutoTokenizer.from_pretrained(model)
    data = work / "in.jsonl"
    C.write_jsonl(data, rows)
    C.write_jsonl(work / "one.jsonl", rows[:1])
    q_stats = C.token_stats(tok, [r["query"] for r in rows])
    i_stats = C.token_stats(tok, [i for r in rows for i in r["items"]])

    def cmd(inp: str, out: str, mode: str) -> list[str]:
        return C.scorecli_cmd("score", str(work / inp), "--out", str(work / out), "--model", model,
                              "--mode", mode, "--quiet")  # fmt: skip

    mis = C.Contender("scorecli --mode mis", cmd("in.jsonl", "mis.parquet", "mis"))
    single = C.Contender("scorecli --mode single", cmd("in.jsonl", "single.parquet", "single"))
    startup = C.Contender("scorecli --mode mis, 1 row (start-up + load)", cmd("one.jsonl", "one.parquet", "mis"), info=True)
    contenders = [mis, single, startup]
    C.alternate(contenders, args.repeats, work / "stderr.log", warmup=[startup])
    diff = C.max_abs_diff(C.read_scores(work / "mis.parquet"), C.read_scores(work / "single.parquet"))

    n_items = args.rows * args.items
    mis_tokens = sum(q_stats[0] + args.items * i_stats[0] for _ in range(args.rows))
    single_tokens = n_items * (q_stats[0] + i_stats[0])
    ratio = single.median_s / mis.median_s
    cpu_ratio = single.median_cpu / mis.median_cpu
    min_ratio = single.min_s / mis.min_s
    net = C.net_ratio(single, startup, mis, startup)
    C.header(
        "1. MIS vs single-item (`bench_mis_vs_single.py`)",
        [
            f"model: mid-size random Qwen3ForSequenceClassification (hidden 384, 6 layers), float32, CPU, sdpa",
            f"data: {args.rows} rows x {args.items} items = {n_items} items (seed {args.seed}); "
            f"query tokens mean {q_stats[0]:.1f} (min {q_stats[1]}, max {q_stats[2]}), "
            f"item tokens mean {i_stats[0]:.1f} (min {i_stats[1]}, max {i_stats[2]})",
            f"forward tokens: MIS ~{mis_tokens:,.0f}, single ~{single_tokens:,.0f} "
            f"({single_tokens / mis_tokens:.1f}x more)",
            f"{args.repeats} alternating rounds after one untimed 1-row warm-up each; whole processes",
        ],
    )
    C.commands(contenders)
    C.table(contenders, single)
    print(f"**MIS speed-up over single: {ratio:.2f}x** (goal >= 3x: {'met' if ratio >= 3 else 'NOT met'}); best-of-N ratio {min_ratio:.2f}x; CPU-time ratio {cpu_ratio:.2f}x; "
          f"net of the 1-row run (start-up + load): {net}. "
          f"Max |MIS - single| score difference: {diff:.2e}.\n")
    return ratio


if __name__ == "__main__":
    main(sys.argv[1:])
