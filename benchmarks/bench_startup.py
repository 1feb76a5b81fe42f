"""Where a one-row `scorecli score` spends its start-up: imports by package, then the run's phases.

Runs whole processes (`python -X importtime -m scorecli score ONE_ROW --out ... --model M`, with
`SCORECLI_TIMINGS=1`), `--repeats` times per model, and prints per model the median of: each
package's own import time (`-X importtime`'s self times summed by top-level package: what
importing scorecli's modules costs apart from what they pull in), the packages a run imports that
it could do without, and the run's own timings line (imports, model loaded, scorer built,
self-checked, first batch). Figures go to benchmarks/RESULTS.md.

    python benchmarks/bench_startup.py                        # the default model (minilm)
    python benchmarks/bench_startup.py --model smollm2-judge --model /path/to/qwen3-like
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMINGS = re.compile(r"timings \(since start\): (.*)")
PHASE = re.compile(r"([a-z -]+) ([\d.]+) s")
# packages a run imports without needing them for scoring (their modules' own import times; where
# each comes from is in the `-X importtime` tree: pandas from pyarrow's pandas shim at the first
# `pa.array`, scipy from transformers' loss functions, sympy from torch's dynamo)
OPTIONAL = (
    "pandas",
    "scipy",
    "sympy",
    "onnxruntime",
    "sentence_transformers",
    "torch._inductor.compile_fx",
    "flashinfer",
)


def one_run(model: str, extra: list[str], row: Path, out: Path) -> tuple[dict[str, float], dict[str, float]]:
    cmd = [sys.executable, "-X", "importtime", "-m", "scorecli", "score", str(row), "--out", str(out)]
    cmd += ["--model", model, *extra]
    env = {**os.environ, "SCORECLI_TIMINGS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    by_package: dict[str, float] = collections.defaultdict(float)
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, self_us, _, name = (part.strip() for part in re.split(r"[:|]", line, maxsplit=3))
        by_package[name.split(".")[0]] += int(self_us) / 1e6
    found = TIMINGS.search(proc.stderr)
    phases = {k.strip(): float(v) for k, v in PHASE.findall(found.group(1))} if found else {}
    return dict(by_package), phases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", help="model names or folders (default: the default model)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--extra", default="", help="more flags for every run, e.g. '--dtype float32'")
    args = ap.parse_args()
    models = args.model or ["minilm"]
    work = Path(tempfile.mkdtemp(prefix="scorecli-startup-"))
    row = work / "one.jsonl"
    row.write_text('{"query": "what is the capital of France?", "items": ["Paris is.", "Bananas are yellow."]}\n')
    print("| model | scorecli's own modules s | torch s | transformers s | other packages s | all imports s |", end="")
    print(" imported, not needed | imports | model loaded | scorer built | self-checked | first batch launched |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for model in models:
        runs = [one_run(model, args.extra.split(), row, work / "out.parquet") for _ in range(args.repeats)]
        med = {k: statistics.median(r[0].get(k, 0.0) for r in runs) for k in set().union(*(r[0] for r in runs))}
        phases = {k: statistics.median(r[1].get(k, 0.0) for r in runs) for k in runs[0][1]}
        total = sum(med.values())
        own, torch_s, hf = med.get("scorecli", 0.0), med.get("torch", 0.0), med.get("transformers", 0.0)
        optional = [f"{m} {med[m]:.2f} s" for m in OPTIONAL if med.get(m)]
        cells = [own, torch_s, hf, total - own - torch_s - hf, total]
        print(f"| {model} | " + " | ".join(f"{c:.2f}" for c in cells) + f" | {', '.join(optional) or '-'} | ", end="")
        print(
            " | ".join(
                f"{phases.get(k, float('nan')):.2f}"
                for k in ("imports", "model loaded", "scorer built", "self-checked", "first batch launched")
            )
            + " |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
