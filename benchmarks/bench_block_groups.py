"""MIS attention by blocks: items in one padded group vs grouped by length (one layer's call).

Times `BlockPlan.attend` alone (no model) on synthetic MIS rows shaped like the benchmarks'
data, with SmolLM2's attention shape (9 query heads, 3 key/value heads, head size 64), for
three groupings: one group padded to the longest item (the plan before grouping), the
default split (`blocks.GROUP_OVERHEAD`), and one group per distinct length. Every variant's
output is checked against the one-group plan. Rounds alternate the variants; medians.

    python benchmarks/bench_block_groups.py [--repeats 5] [--calls 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import _common as C
import numpy as np
import torch

from scorecli.attention import blocks
from scorecli.core.batching import collate
from scorecli.core.pack import EncodedRow, pack_row

CASES = {  # name: (prefix tokens, item lengths low..high, items)
    "bench 3 (qwen3-reranker prompt, 24 items of 34-76 tokens)": (84, (34, 76), 24),
    "mixed lengths (16 items of 10-150 tokens)": (30, (10, 150), 16),
    "bench 1 (32 items of 15-23 tokens)": (80, (15, 23), 32),
}
VARIANTS = {"one group (before)": 10**15, "default split": None, "one group per length": 0}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20, help="attend calls per timing")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    heads, kv, d = 9, 3, 64
    default = blocks.GROUP_OVERHEAD
    print(
        f"\n#### Attention by blocks, one call (`bench_block_groups.py`; {C.machine()}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, torch {torch.__version__}, {torch.get_num_threads()} threads)\n"
    )
    print("| rows shaped like | " + " | ".join(f"{v}: ms per call (groups)" for v in VARIANTS) + " |")
    print("|---|" + "---:|" * len(VARIANTS))
    for name, (p, (lo, hi), n) in CASES.items():
        row = EncodedRow(np.arange(p) + 5, [np.arange(k) + 7 for k in rng.integers(lo, hi + 1, n)])
        batch = collate(pack_row(row, 0, mis=True, max_seq_len=100_000))
        length = batch.max_len
        q, k, v = torch.randn(1, heads, length, d), torch.randn(1, kv, length, d), torch.randn(1, kv, length, d)
        real = torch.from_numpy(batch.padded_index())
        plans, times, ref = {}, {v: [] for v in VARIANTS}, None
        for variant, overhead in VARIANTS.items():
            blocks.GROUP_OVERHEAD = default if overhead is None else overhead
            plans[variant] = blocks.BlockPlan.build(batch, torch.device("cpu"), torch.float32)
            out = plans[variant].attend(q, k, v, 0.125).reshape(-1, heads, d)[real]
            ref = out if ref is None else ref
            torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        blocks.GROUP_OVERHEAD = default
        for r in range(args.repeats):
            for variant in VARIANTS if r % 2 == 0 else reversed(VARIANTS):
                plan = plans[variant]
                start = time.perf_counter()
                for _ in range(args.calls):
                    plan.attend(q, k, v, 0.125)
                times[variant].append((time.perf_counter() - start) / args.calls * 1e3)
        cells = [f"{statistics.median(times[v]):.2f} ({len(plans[v].groups)})" for v in VARIANTS]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()


if __name__ == "__main__":
    main(sys.argv[1:])
