"""Where a one-row `scorecli score` spends its start-up: imports by package, then the run's phases.

Runs whole processes (`python -X importtime -m scorecli score ONE_ROW --out ... --model M`, with
`SCORECLI_TIMINGS=1`), `--repeats` times per model, and prints per model the median of: each
package's own import time (`-X importtime`'s self times summed by top-level package: what
importing scorecli's modules costs apart from what they pull in), the packages a run imports that
it could do without, and the run's own timings line (imports, model loaded, scorer built,
self-checked, first batch). Figures go to benchmarks/RESULTS.md.

    python benchmarks/bench_startup.py                        # the default model (minilm)
    python benchmarks/bench_startup.py --model smollm2-judge --model /path/to/qwen3-like
    python benchmarks/bench_startup.py --imports   # no model: each import step timed alone, and
                                                  # where the interpreter reads its modules from
                                                  # (the GPU machines' 8-10 s of imports)
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
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
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(SCORECLI_TIMINGS="1"), cwd=ROOT)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    found = TIMINGS.search(proc.stderr)
    phases = {k.strip(): float(v) for k, v in PHASE.findall(found.group(1))} if found else {}
    return by_package(proc.stderr), phases


def _env(**extra: str) -> dict[str, str]:
    """This environment with the source tree first on PYTHONPATH (what is already there kept:
    the GPU machines' flashinfer lies in /tmp/site)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def by_package(stderr: str) -> dict[str, float]:
    """`-X importtime`'s self times summed by top-level package, seconds."""
    sums: dict[str, float] = collections.defaultdict(float)
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, self_us, _, name = (part.strip() for part in re.split(r"[:|]", line, maxsplit=3))
        sums[name.split(".")[0]] += int(self_us) / 1e6
    return dict(sums)


# what a `scorecli score` process imports before it reads a Qwen3 model's weights
CLI_MODEL_CODE = (
    "import scorecli.cli, scorecli.scorer; from scorecli.model import lean_imports; "
    "lean_imports.skip_unneeded(); lean_imports.import_model_code(); import transformers.models.qwen3.modeling_qwen3"
)

# (label, code): each step in a fresh interpreter, wall time; the later steps include the earlier
IMPORT_STEPS = (
    ("python3 -c pass (interpreter start)", "pass"),
    ("import torch", "import torch"),
    ("+ CUDA initialized (where there is CUDA)", "import torch; torch.cuda.is_available() and torch.cuda.init()"),
    ("+ transformers", "import torch, transformers"),
    ("+ transformers.modeling_utils (what loading a model imports)", "import transformers.modeling_utils"),
    ("scorecli's CLI and Scorer (the timings' `imports` mark)", "import scorecli.cli, scorecli.scorer"),
    ("+ transformers' model code as the command line imports it, and a Qwen3 model's", CLI_MODEL_CODE),
    ("flashinfer alone", "import flashinfer"),
    (
        "flashinfer's prefill and cascade modules alone (its __init__, which imports every kernel family, skipped)",
        "import importlib.util, sys; spec = importlib.util.find_spec('flashinfer'); "
        "sys.modules['flashinfer'] = importlib.util.module_from_spec(spec); import flashinfer.prefill, flashinfer.cascade",
    ),
)


def imports(repeats: int) -> int:
    """Each import step's median wall time, the packages' own import times, and the filesystems
    the modules are read from."""
    print("| step (fresh interpreter) | median wall s |\n|---|---:|")
    for label, code in IMPORT_STEPS:
        walls = []
        for _ in range(repeats):
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=ROOT)
            walls.append(time.perf_counter() - start)
            if proc.returncode:
                break
        cell = (
            f"{statistics.median(walls):.2f}"
            if not proc.returncode
            else f"failed: {proc.stderr.strip().splitlines()[-1][:80]}"
        )
        print(f"| {label} | {cell} |")
    # what `scorecli.bytecode` does where the environment keeps no bytecode: a folder of its own
    code = CLI_MODEL_CODE + "\ntry:\n    import flashinfer\nexcept ImportError:\n    pass"
    with tempfile.TemporaryDirectory() as folder:
        env = {**_env(), "PYTHONPYCACHEPREFIX": folder}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for run in ("first run, filling it", "second run"):
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
            wall = f"{time.perf_counter() - start:.2f}" if not proc.returncode else "failed"
            print(f"| the command line's imports and flashinfer's, bytecode in a folder of its own: {run} | {wall} |")
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", CLI_MODEL_CODE], capture_output=True, text=True, env=_env(), cwd=ROOT
    )
    sums = sorted(by_package(proc.stderr).items(), key=lambda kv: -kv[1])
    print(
        f"\n`-X importtime` of the command line's imports (scorecli, transformers' model code, a Qwen3 model's), own time by package (s, slowed by the tracing; all: {sum(v for _, v in sums):.2f}):"
    )
    print(", ".join(f"{name} {s:.2f}" for name, s in sums[:15]))
    paths = [p for p in (str(ROOT), *os.environ.get("PYTHONPATH", "").split(os.pathsep)) if p]
    paths.append(sysconfig.get_paths()["purelib"])
    kinds = subprocess.run(["stat", "-f", "-c", "%T", *paths], capture_output=True, text=True).stdout.split()
    print("\nmodules read from: " + ", ".join(f"{p} ({k})" for p, k in zip(paths, kinds)))
    print(bytecode())
    return 0


def bytecode() -> str:
    """Whether imports can use compiled bytecode: a package whose modules have no current .pyc
    (installed without it, in a folder this user cannot write) compiles every module each run."""
    parts = [f"dont_write_bytecode={sys.flags.dont_write_bytecode}", f"pycache_prefix={sys.pycache_prefix}"]
    for name in ("torch", "transformers", "scorecli", "flashinfer"):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(next(iter(spec.submodule_search_locations)))
        sources = list(root.rglob("*.py"))
        cached = sum(Path(importlib.util.cache_from_source(str(p))).exists() for p in sources)
        writable = os.access(root, os.W_OK)
        parts.append(f"{name}: {cached}/{len(sources)} modules with .pyc, {'writable' if writable else 'read-only'}")
    return "bytecode: " + "; ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", help="model names or folders (default: the default model)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--extra", default="", help="more flags for every run, e.g. '--dtype float32'")
    ap.add_argument("--imports", action="store_true", help="time the import steps alone (no model, no run)")
    args = ap.parse_args()
    if args.imports:
        return imports(args.repeats)
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
