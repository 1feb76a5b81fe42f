"""MIS vs single-item scoring, whole `scorecli score` processes, same model and data.

Model: a mid-size random Qwen3 classifier (tests.builders.models.build_mid_qwen3_seq_cls: hidden 384,
6 layers). Data: seeded rows of a ~80-token query and 32 items of ~20 tokens each, as files
of each size in --rows (the smaller files are the first rows of the largest).
Contenders, per file: `scorecli score in.jsonl --out out.parquet --model M --mode mis --quiet`
and the same with `--mode single`; plus a 1-row run of the same command (start-up + model
load + Parquet write, for the diagnosis). All alternated in one run. Goal: MIS >= 3x faster
than single, whole process. Start-up (~8-9 s of interpreter, torch and transformers imports
on the 2-core machines) is paid by both, so the whole-process ratio grows with the file.

    python benchmarks/bench_mis_vs_single.py [--rows 64 256] [--items 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import sys

import _common as C


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[64, 256], help="file sizes, in rows")
    ap.add_argument("--items", type=int, default=32)
    ap.add_argument("--query-tokens", type=int, default=80)
    ap.add_argument("--item-tokens", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def build(args, work) -> tuple[str, list[dict]]:
    """(model folder, rows): the benchmark's model (built under `work`) and seeded data."""
    from transformers import AutoTokenizer

    from tests.builders.models import build_mid_qwen3_seq_cls

    model = build_mid_qwen3_seq_cls(work / "model")
    tok = AutoTokenizer.from_pretrained(model)
    rng, pool = random.Random(args.seed), C.word_pool()
    rows = []
    for r in range(max(args.rows)):
        query = C.fit_words(rng, pool, tok, args.query_tokens)
        items = [" " + C.fit_words(rng, pool, tok, args.item_tokens) for _ in range(args.items)]
        rows.append({"id": r, "query": query, "items": items})
    return model, rows


def main(argv: list[str] | None = None) -> dict[int, float]:
    args = parser().parse_args(argv)

    from transformers import AutoTokenizer

    work = C.workdir("mis-vs-single")
    model, rows = build(args, work)
    tok = AutoTokenizer.from_pretrained(model)
    C.write_jsonl(work / "one.jsonl", rows[:1])
    q_stats = C.token_stats(tok, [r["query"] for r in rows])
    i_stats = C.token_stats(tok, [i for r in rows for i in r["items"]])

    def cmd(inp: str, out: str, mode: str) -> list[str]:
        return C.scorecli_cmd(
            "score", str(work / inp), "--out", str(work / out), "--model", model, "--mode", mode, "--quiet"
        )

    sizes = sorted(set(args.rows))
    pairs = {}
    for n in sizes:
        C.write_jsonl(work / f"in{n}.jsonl", rows[:n])
        pairs[n] = (
            C.Contender(f"scorecli --mode mis, {n} rows", cmd(f"in{n}.jsonl", f"mis{n}.parquet", "mis")),
            C.Contender(f"scorecli --mode single, {n} rows", cmd(f"in{n}.jsonl", f"single{n}.parquet", "single")),
        )
    startup = C.Contender(
        "scorecli --mode mis, 1 row (start-up + load)", cmd("one.jsonl", "one.parquet", "mis"), info=True
    )
    contenders = [c for n in sizes for c in pairs[n]] + [startup]
    C.alternate(contenders, args.repeats, work / "stderr.log", warmup=[startup])

    C.header(
        "1. MIS vs single-item (`bench_mis_vs_single.py`)",
        [
            "model: mid-size random Qwen3ForSequenceClassification (hidden 384, 6 layers), float32, CPU, sdpa",
            f"data: files of {', '.join(str(n) for n in sizes)} rows x {args.items} items (seed {args.seed}; each file "
            f"the first rows of the largest); query tokens mean {q_stats[0]:.1f} (min {q_stats[1]}, max {q_stats[2]}), "
            f"item tokens mean {i_stats[0]:.1f} (min {i_stats[1]}, max {i_stats[2]})",
            f"forward tokens per row: MIS ~{q_stats[0] + args.items * i_stats[0]:,.0f}, "
            f"single ~{args.items * (q_stats[0] + i_stats[0]):,.0f}",
            f"{args.repeats} alternating rounds of all contenders after one untimed 1-row warm-up; whole processes",
        ],
    )
    C.commands(contenders)
    ratios = {}
    for n in sizes:
        mis, single = pairs[n]
        diff = C.max_abs_diff(C.read_scores(work / f"mis{n}.parquet"), C.read_scores(work / f"single{n}.parquet"))
        ratio = ratios[n] = single.median_s / mis.median_s
        print(f"#### {n} rows x {args.items} items = {n * args.items:,} items\n")
        C.table([mis, single, startup], single)
        print(
            f"**MIS speed-up over single, {n} rows: {ratio:.2f}x** (goal >= 3x: {'met' if ratio >= 3 else 'NOT met'}); "
            f"best-of-N ratio {single.min_s / mis.min_s:.2f}x; CPU-time ratio {single.median_cpu / mis.median_cpu:.2f}x; "
            f"net of the 1-row run (start-up + load): {C.net_ratio(single, startup, mis, startup)}. "
            f"Max |MIS - single| score difference: {diff:.2e}.\n"
        )
    return ratios


if __name__ == "__main__":
    main(sys.argv[1:])
