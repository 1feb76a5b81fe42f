"""Diagnostic: whole-process `scorecli score` time vs `--max-batch-tokens` on a benchmark's data.

On CPU, a 16,384-token batch makes activations of ~100 MB per layer (MLP intermediate),
far beyond the caches; they are allocated, page-faulted and freed every layer. This sweep
runs the same command with several budgets, alternating, to show what a smaller CPU default
would change. Rebuilds the benchmark's exact data and model (its `build`).

    python benchmarks/sweep_batch_tokens.py crossencoder [--budgets 16384,4096,2048] [--repeats 3]
    python benchmarks/sweep_batch_tokens.py qwen3
    python benchmarks/sweep_batch_tokens.py mis --mode single
"""

from __future__ import annotations

import argparse

import _common as C


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", choices=["qwen3", "crossencoder", "mis"])
    ap.add_argument("--budgets", default="16384,4096,2048")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mode", default="auto", help="scorecli --mode (mis workload: mis or single)")
    ap.add_argument("--scorecli-flags", default="", help="extra flags for every scorecli run, e.g. '--dtype bfloat16'")
    ap.add_argument(
        "--with-competitor",
        action="store_true",
        help="also run the benchmark's competitor (CrossEncoder job / Qwen3 recipe) as the baseline",
    )
    args, rest = ap.parse_known_args()
    work = C.workdir(f"sweep-{args.workload}")
    flags = ["--mode", args.mode, *args.scorecli_flags.split()]
    if args.workload == "qwen3":
        import bench_vs_qwen3_recipe as bench

        model, rows = bench.build(bench.parser().parse_args(rest))
        flags += ["--template", "qwen3-reranker"]
    elif args.workload == "crossencoder":
        import bench_vs_crossencoder as bench

        model, rows = bench.build(bench.parser().parse_args(rest), work)
    else:
        import bench_mis_vs_single as bench

        model, rows = bench.build(bench.parser().parse_args(rest), work)
    C.write_jsonl(work / "in.jsonl", rows)
    competitor = None
    if args.with_competitor and args.workload in ("crossencoder", "qwen3"):
        job = "st_crossencoder_job.py" if args.workload == "crossencoder" else "qwen3_recipe_job.py"
        name = (
            "sentence-transformers CrossEncoder job" if args.workload == "crossencoder" else "Qwen3-Reranker recipe job"
        )
        competitor = C.Contender(
            name, [C.PYTHON, str(C.BENCH_DIR / job), str(work / "in.jsonl"), str(work / "competitor.parquet"), model]
        )
    budgets = [int(b) for b in args.budgets.split(",")]
    contenders = [
        C.Contender(
            f"--max-batch-tokens {b}",
            C.scorecli_cmd(
                "score",
                str(work / "in.jsonl"),
                "--out",
                str(work / f"out{b}.parquet"),
                "--model",
                model,
                *flags,
                "--max-batch-tokens",
                str(b),
                "--quiet",
            ),
        )
        for b in budgets
    ]
    if competitor:
        contenders.append(competitor)
    C.alternate(contenders, args.repeats, work / "stderr.log", warmup=[])
    C.header(
        f"Sweep of --max-batch-tokens on the {args.workload} workload (`sweep_batch_tokens.py`)",
        [f"scorecli flags: {' '.join(flags)}; {args.repeats} alternating rounds; whole processes"],
    )
    C.commands(contenders[:1] + ([competitor] if competitor else []))
    C.table(contenders, competitor or contenders[0])
    ref_name = "competitor.parquet" if competitor else f"out{budgets[0]}.parquet"
    ref = C.read_scores(work / ref_name)
    for b in budgets:
        diff = C.max_abs_diff(C.read_scores(work / f"out{b}.parquet"), ref)
        print(f"- max |score difference| of --max-batch-tokens {b} vs {ref_name.removesuffix('.parquet')}: {diff:.2e}")
    print()


if __name__ == "__main__":
    main()
