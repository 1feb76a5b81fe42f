"""What the start-up self-check costs: `selfcheck.self_check` on an already loaded model.

Loads the model once, builds one Scorer with the self-check off, then times the check
itself (`--repeats` times, median and best, wall and process CPU time: the machines are
shared) in the given mode and backend, and prints the difference it measured. Run it against another checkout (PYTHONPATH) to compare versions.

    python benchmarks/bench_selfcheck.py --model PATH [--template qwen3-reranker] [--mode mis] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--template", default="plain")
    ap.add_argument("--mode", default="auto")
    ap.add_argument("--attention", default="auto")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)

    from scorecli import Scorer
    from scorecli.checks.selfcheck import self_check
    from scorecli.config import ScoreConfig
    from scorecli.model.load import load_model

    cfg = ScoreConfig(
        model=args.model, template=args.template, mode=args.mode, attention=args.attention, self_check=False
    )
    loaded = load_model(cfg)
    scorer = Scorer(loaded, cfg)
    self_check(scorer)  # warm-up
    wall, cpu = [], []
    for _ in range(args.repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        error = self_check(scorer)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    print(
        f"self-check on {args.model} ({scorer.metadata['mode']}, {scorer.backend_name}): wall median "
        f"{statistics.median(wall):.3f} s, best {min(wall):.3f} s; CPU median {statistics.median(cpu):.3f} s, best "
        f"{min(cpu):.3f} s over {args.repeats}; difference {error:.2g}"
    )


if __name__ == "__main__":
    main()
