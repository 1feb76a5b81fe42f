"""What long-run safety costs (SPEC §11): checkpointed parts, and resuming a killed job.

1. Checkpointing: the same `scorecli score` job, whole processes, alternated: as users run it
   (every window kept as a durable part in `<out>.partial/`, merged into `<out>` at the end)
   and with parts disabled internally (`scorecli.engine.checkpoint.PARTS = False`: straight into the
   atomic sink, as before §11). Goal: parts cost under 3% of the whole-process time.
2. Resuming: the job is killed (SIGKILL) once 75% of its rows are kept, then run again with
   `--resume`; that second process, start-up included, against the uninterrupted run.
   Goal: under 40% of the uninterrupted run.

Model: the mid-size random Qwen3 classifier (tests.builders.models.build_mid_qwen3_seq_cls: hidden
384, 6 layers) unless --tiny; data: seeded rows of a short query and 4 short items; default
--window-rows 2048, so the job is several windows; `--pooled-hidden-states` makes the parts
and the merge carry 384 floats per item (the heavy case for the merge).

    python benchmarks/bench_checkpoint.py [--rows 16384] [--repeats 3] [--tiny]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _common as C

# both contenders start the same way (the console script's main() under `python -c`), so they
# differ in the switch alone
LAUNCH = "import sys, scorecli.engine.checkpoint as c; c.PARTS = {parts}; from scorecli.cli import main; sys.argv[0] = 'scorecli'; main()"


def write_rows(path: Path, n: int, seed: int, pool: list[str]) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for r in range(n):
            row = {
                "id": r,
                "query": C.words(rng, pool, rng.randint(4, 10)),
                "items": [" " + C.words(rng, pool, rng.randint(2, 8)) for _ in range(4)],
            }
            f.write(json.dumps(row) + "\n")


def journal_rows(folder: Path) -> int:
    try:
        lines = (folder / "_scorecli_journal.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return sum(json.loads(line)["rows"] for line in lines if line.endswith("}"))


def killed_at(cmd: list[str], folder: Path, rows: int, log: Path) -> int:
    """Start `cmd`, SIGKILL it once `rows` rows are kept; the rows kept."""
    with open(log, "ab") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=C.ROOT)
        while (kept := journal_rows(folder)) < rows:
            if proc.poll() is not None:
                raise SystemExit("the job ended before it could be killed")
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return kept


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=16384)  # 8 windows: the kill at 75% falls after window 6
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tiny", action="store_true", help="the tiny Qwen3 (hidden 64): checkpointing's worst case")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import pyarrow.parquet as pq

    from tests.builders.models import build_mid_qwen3_seq_cls, build_qwen3_seq_cls

    work = C.workdir("checkpoint")
    model = (build_qwen3_seq_cls if args.tiny else build_mid_qwen3_seq_cls)(work / "model")
    write_rows(work / "in.jsonl", args.rows, args.seed, C.word_pool())
    out_parts, out_plain = work / "parts.parquet", work / "plain.parquet"
    common = ["score", str(work / "in.jsonl"), "--model", model, "--pooled-hidden-states", "--quiet"]
    parts = C.Contender(
        "checkpointed (as shipped)", [C.PYTHON, "-c", LAUNCH.format(parts=True), *common, "--out", str(out_parts)]
    )
    plain = C.Contender(
        "parts disabled internally", [C.PYTHON, "-c", LAUNCH.format(parts=False), *common, "--out", str(out_plain)]
    )
    C.alternate([parts, plain], args.repeats, work / "stderr.log")
    same = pq.read_table(out_parts).equals(pq.read_table(out_plain))

    resumed = C.Contender("--resume after a kill at 75%", parts.cmd + ["--resume"])
    kept = []
    for r in range(args.repeats):
        out_parts.unlink(missing_ok=True)
        kept.append(killed_at(parts.cmd, Path(str(out_parts) + ".partial"), int(0.75 * args.rows), work / "stderr.log"))
        run = C.run_process(resumed.cmd, None, work / "stderr.log")
        resumed.runs.append(run)
        print(f"  round {r + 1}/{args.repeats} resume after {kept[-1]:,} rows: {run.seconds:.2f} s", file=sys.stderr)
    resumed_same = pq.read_table(out_parts).equals(pq.read_table(out_plain))

    C.header(
        "Long-run safety: checkpointed parts and --resume (bench_checkpoint.py)",
        [
            f"model: {'tiny' if args.tiny else 'mid'} random Qwen3 classifier; {args.rows:,} rows x 4 items, "
            f"--pooled-hidden-states, default --window-rows 2048 ({-(-args.rows // 2048)} parts)",
            f"outputs identical (checkpointed vs not): {same}; resumed output identical: {resumed_same}",
        ],
    )
    C.table([parts, plain], plain)
    cost = parts.median_s / plain.median_s - 1
    print(f"Checkpointing cost: {cost:+.1%} of the whole-process time (goal: under 3%).\n")
    share = resumed.median_s / parts.median_s
    print(
        f"Resume after a kill at 75% ({statistics.median(kept):,.0f} rows kept, median): {resumed.median_s:.2f} s "
        f"(runs {resumed.times()}) = {share:.0%} of the uninterrupted run's {parts.median_s:.2f} s (goal: under 40%).\n"
    )
    C.commands([parts, plain, resumed])


if __name__ == "__main__":
    main()
