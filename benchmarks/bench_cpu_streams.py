"""One stream of all torch threads vs concurrent CPU streams, for a cross-encoder, in one process.

Same model and data as bench_vs_crossencoder.py (the first --rows rows). One `Scorer`; the
same prepared window is scored alternately with `scorer.streams` off (one batch at a time
on every thread) and on (two batches at once, each on its share of the threads), and with
torch on 1 thread, to show how well one stream scales. Prints median seconds per window
and the largest score difference between the two modes.

    python benchmarks/bench_cpu_streams.py [--rows 100] [--repeats 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import _common as C
import bench_vs_crossencoder as CE


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=4)
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    from scorecli import Scorer
    from scorecli.io.readers import RawRow

    model, rows = CE.build(CE.parser().parse_args(["--rows", str(args.rows)]), C.workdir("cpu-streams"))
    scorer = Scorer(model)
    threads, streams = torch.get_num_threads(), scorer.streams
    prepared = scorer.prepare([RawRow(r, f"row {k + 1}") for k, r in enumerate(rows)])
    modes = {
        f"one stream, {threads} threads": (threads, []),
        f"{len(streams)} streams, {threads} threads in all": (threads, streams),
        "one stream, 1 thread": (1, []),
    }
    seconds: dict[str, list[float]] = {name: [] for name in modes}
    scores: dict[str, np.ndarray] = {}
    for _ in range(args.repeats):
        for name, (n, s) in modes.items():
            torch.set_num_threads(n)
            scorer.streams = s
            start = time.perf_counter()
            table = scorer.run(prepared)
            seconds[name].append(time.perf_counter() - start)
            scores[name] = np.concatenate([np.asarray(x, dtype=np.float32) for x in table["score"].to_pylist()])
    torch.set_num_threads(threads)

    C.header(
        "CPU streams for cross-encoders (`bench_cpu_streams.py`)",
        [
            f"model: all-MiniLM-L6-v2 weights + random 1-label head, float32, CPU; {args.rows} rows x 8 items, "
            f"{int(prepared.num_tokens.sum()):,} tokens in {len(prepared.batches)} batches",
            f"{args.repeats} alternating rounds in one process; seconds of `Scorer.run` on one prepared window",
        ],
    )
    base = statistics.median(seconds[next(iter(modes))])
    print("| mode | median s | runs (s) | speed-up vs one stream |\n|---|---:|---|---:|")
    for name, runs in seconds.items():
        med = statistics.median(runs)
        print(f"| {name} | {med:.2f} | {', '.join(f'{r:.2f}' for r in runs)} | {base / med:.2f}x |")
    first, second = list(scores.values())[:2]
    print(f"\nMax |streams - one stream| score difference: {np.abs(first - second).max():.2e}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
