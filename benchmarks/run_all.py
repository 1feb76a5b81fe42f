"""Run every benchmark, one after another (never in parallel: they time whole processes).

Each benchmark is its own script, run here as a child process with this interpreter;
their markdown sections are printed to stdout (progress goes to stderr) and, with --out,
also written to a file, ready to paste into benchmarks/RESULTS.md.

    python benchmarks/run_all.py                 # full sizes (what `make bench` runs; ~1-2 h on 2 cores)
    python benchmarks/run_all.py --quick         # small sizes and 1 round, a smoke test (~10 min)
    python benchmarks/run_all.py --only memory --out /tmp/bench.md
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

BENCHMARKS = {
    "mis": ("bench_mis_vs_single.py", ["--rows", "4", "8", "--repeats", "1"]),
    "crossencoder": ("bench_vs_crossencoder.py", ["--rows", "30", "--repeats", "1"]),
    "qwen3": ("bench_vs_qwen3_recipe.py", ["--rows", "2", "--items", "8", "--repeats", "1"]),
    "memory": ("bench_memory.py", ["--large", "10000", "--repeats", "1"]),
    "blocks": ("bench_block_groups.py", ["--repeats", "1", "--calls", "3"]),
    "streams": ("bench_cpu_streams.py", ["--rows", "10", "--repeats", "1"]),
    "checkpoint": ("bench_checkpoint.py", ["--rows", "3000", "--repeats", "1", "--tiny"]),
    "chunks": ("bench_chunks.py", ["--rows", "2", "--items", "4", "--item-tokens", "600", "--repeats", "1"]),
    "embedding": ("bench_vs_st_embedding.py", ["--rows", "30", "--repeats", "1"]),
    "retrieval": ("retrieval_pydoc.py", ["--candidates", "5"]),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", choices=sorted(BENCHMARKS), help="run only these (repeatable)")
    ap.add_argument("--quick", action="store_true", help="small sizes, one round: checks the scripts run")
    ap.add_argument("--repeats", type=int, help="override every benchmark's number of rounds")
    ap.add_argument("--out", help="also write the markdown to this file")
    args = ap.parse_args()

    sections, failed = [], []
    for name in args.only or list(BENCHMARKS):
        script, quick = BENCHMARKS[name]
        cmd = [sys.executable, str(HERE / script), *(quick if args.quick else [])]
        if args.repeats:
            cmd += ["--repeats", str(args.repeats)]
        print(f"== {name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        print(
            f"== {name}: exit {proc.returncode} after {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True
        )
        sys.stdout.write(proc.stdout)
        sys.stdout.flush()
        sections.append(proc.stdout)
        if proc.returncode != 0:
            failed.append(name)
    if args.out:
        Path(args.out).write_text("".join(sections), encoding="utf-8")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
