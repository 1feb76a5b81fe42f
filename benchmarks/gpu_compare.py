"""scorecli against the tools a user would otherwise use, on one GPU, as whole processes.

The same rows (text) for every contender; a random `Qwen3ForSequenceClassification` with
Qwen3-0.6B's shapes (440M non-embedding parameters), bfloat16. Contenders, one process each:
scorecli as a user runs it (`auto`: flashinfer where installed, its cascade MIS plan, layers
compiled on jobs long enough to repay it), scorecli with `--attention sdpa`, transformers by hand
(`hf_pairs_job.py`: pairs P + I_k, padded, sdpa) and sentence-transformers'
`CrossEncoder.predict` (`st_crossencoder_job.py`, batch 128). Workloads: sglang's published MIS
shape (1,000 rows x (120-token query + 10 items of ~180 tokens)), a passage shape (400 rows x
(16-token query + 20 passages of ~160)), and a steady-state job (10,000 rows, 100,000 items, of
the first shape, scorecli alone: auto, then `--compile off`, which shows what compiling repays). Printed per run: wall s, items/s, the useful-FLOP fraction (2 x
non-embedding parameters x sum(|P| + |I_k|) over wall time, against the bf16 matmul rate
measured here), GPU busy % and peak memory (nvidia-smi, sampled every 100 ms), scorecli's own
start-up and scoring seconds, and each output's largest score difference from transformers'
bf16 forward; then float32 agreement on a subset. First, untimed, one scorecli run per path
compiles what a first run on a machine compiles (flashinfer's JIT, inductor), and its time is
reported as the first-run cost.

    python benchmarks/gpu_compare.py --out $OUT          # on the GPU machine (gpu_session.sh compare)
    python benchmarks/gpu_compare.py --dry --out /tmp/c  # tiny model on the CPU: checks the script
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
sys.path[:0] = [str(ROOT), str(BENCH)]

import _common as C  # noqa: E402

SUMMARY = re.compile(r"start-up ([\d.]+) s, scoring ([\d.]+) s")
RESULTS: list[dict] = []
ST = "sentence-transformers CrossEncoder.predict (bf16, batch 128)"


def log(out: Path, record: dict) -> None:
    RESULTS.append(record)
    print(json.dumps(record), flush=True)
    with (out / "compare.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")


def matmul_tflops(dry: bool) -> float:
    """The bf16 matmul rate measured in a child process (8192^3, mean of 10 after 3)."""
    code = (
        "import torch,time\nn=8192\na=torch.randn(n,n,device='cuda',dtype=torch.bfloat16);b=a.clone()\n"
        "for _ in range(3): a@b\ntorch.cuda.synchronize();t=time.perf_counter()\n"
        "for _ in range(10): a@b\ntorch.cuda.synchronize();print(2*n**3*10/(time.perf_counter()-t)/1e12)"
    )
    if dry:
        return 1.0
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def make_rows(tok, n_rows: int, query_tokens: int, items: int, item_tokens: int, seed: int) -> list[dict]:
    """Rows of words from the tiny tokenizer's corpus, lengths near the targets (+-20% per item)."""
    rng = random.Random(seed)
    pool = C.word_pool()
    sample = " ".join(rng.choice(pool) for _ in range(5000))
    per_word = len(tok(sample, add_special_tokens=False)["input_ids"]) / 5000

    def text(tokens: int) -> str:
        return " ".join(rng.choice(pool) for _ in range(max(1, round(tokens / per_word))))

    return [
        {
            "id": r,
            "query": text(query_tokens),
            "items": [text(item_tokens * rng.uniform(0.8, 1.2)) for _ in range(items)],
        }
        for r in range(n_rows)
    ]


def pair_tokens(tok, rows: list[dict]) -> tuple[int, int, int]:
    """(items, sum over items of |P| + |I_k|, MIS tokens sum over rows of |P| + sum |I_k|)."""
    q = [len(x) for x in tok([r["query"] for r in rows], add_special_tokens=False)["input_ids"]]
    i = [len(x) for x in tok([t for r in rows for t in r["items"]], add_special_tokens=False)["input_ids"]]
    pairs, mis, k = 0, 0, 0
    for r, row in enumerate(rows):
        n = len(row["items"])
        pairs += n * q[r] + sum(i[k : k + n])
        mis += q[r] + sum(i[k : k + n])
        k += n
    return k, pairs, mis


class GpuSampler:
    """nvidia-smi's utilization and memory, every 100 ms, while a contender runs."""

    def __init__(self, dry: bool) -> None:
        self.proc = (
            None
            if dry
            else subprocess.Popen(
                [
                    "nvidia-smi",
                    "--query-gpu=utilization.gpu,memory.used",
                    "--format=csv,noheader,nounits",
                    "-lms",
                    "100",
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
        )

    def stop(self) -> tuple[float | None, float | None]:
        """(mean utilization %, peak memory GiB) over the samples."""
        if self.proc is None:
            return None, None
        self.proc.terminate()
        text = self.proc.communicate()[0]
        samples = [tuple(float(v) for v in line.split(",")) for line in text.splitlines() if line.count(",") == 1]
        if not samples:
            return None, None
        return sum(u for u, _ in samples) / len(samples), max(m for _, m in samples) / 1024


def run(
    out: Path,
    name: str,
    shape: str,
    cmd: list[str],
    work: dict,
    peak: float,
    dry: bool,
    timeout: int,
    env: dict[str, str] | None = None,
) -> dict:
    sampler = GpuSampler(dry)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "SCORECLI_TIMINGS": "1", **(env or {})},
        )
        rc, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, err = "timeout", (exc.stderr or b"").decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    wall = time.perf_counter() - start
    busy, mem = sampler.stop()
    record = {
        "contender": name,
        "shape": shape,
        "rc": rc,
        "wall_s": round(wall, 2),
        "items": work["items"],
        "items_s": round(work["items"] / wall, 1),
        "useful_flop": round(2 * work["params"] * work["pair_tokens"] / wall / (peak * 1e12), 4),
        "gpu_busy": None if busy is None else round(busy, 1),
        "peak_gib": None if mem is None else round(mem, 2),
    }
    found = SUMMARY.search(err or "")
    if found:
        startup, scoring = float(found.group(1)), float(found.group(2))
        record.update(
            startup_s=startup,
            scoring_s=scoring,
            scoring_items_s=round(work["items"] / max(scoring, 1e-9), 1),
            mis_flop_scoring=round(2 * work["params"] * work["mis_tokens"] / max(scoring, 1e-9) / (peak * 1e12), 4),
        )
    notes = [line for line in (err or "").splitlines() if line.startswith(("note:", "warning:", "error:", "timings"))]
    if notes or rc != 0:
        record["stderr"] = (notes or (err or "").splitlines()[-5:])[:6]
    log(out, record)
    return record


def first_runs(out: Path, runs: dict[str, tuple[list[str], dict[str, str]]], timeout: int) -> None:
    """One process per path at once, untimed against the others: what a first run on a machine
    compiles (flashinfer's JIT modules, inductor's kernels) lands in the caches, each path's
    compiles running beside the others' on the machine's cores."""
    start, procs = time.perf_counter(), {}
    for name, (cmd, env) in runs.items():
        procs[name] = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, **env}
        )
    for name, proc in procs.items():
        try:
            _, err = proc.communicate(timeout=max(1.0, timeout - (time.perf_counter() - start)))
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            rc, err = "timeout", ""
        record = {"contender": name, "shape": "first", "rc": rc, "wall_s": round(time.perf_counter() - start, 2)}
        if rc != 0:
            record["stderr"] = (err or "").splitlines()[-3:]
        log(out, record)


def scores(path: Path):
    import numpy as np
    import pyarrow.parquet as pq

    if not path.exists():
        return None
    return np.array(
        [s for row in pq.read_table(path, columns=["score"])["score"].to_pylist() for s in row or []], dtype=np.float64
    )


def max_diff(a: Path, b: Path) -> float | None:
    x, y = scores(a), scores(b)
    if x is None or y is None or len(x) != len(y):
        return None
    return float(abs(x - y).max())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/scorecli-compare")
    ap.add_argument("--dry", action="store_true", help="tiny model on the CPU, few rows")
    ap.add_argument("--steady-rows", type=int, default=10_000, help="rows of 10 items in the steady job")
    ap.add_argument(
        "--skip",
        default="",
        help="comma-separated contenders to leave out (st, hf, sdpa, noc, auto; agree: the float32 agreement)",
    )
    ap.add_argument("--timeout", type=int, default=240, help="seconds per process")
    ap.add_argument("--work", default="/tmp/scorecli-compare-work", help="rows and outputs (large: not in --out)")
    ap.add_argument("--shapes", default="sglang,steady,passage", help="comma-separated workloads to run, in order")
    ap.add_argument(
        "--steady-st",
        action="store_true",
        help="sentence-transformers on the steady job too (~6 min on an H200): the 100,000-item ratio measured",
    )
    ap.add_argument(
        "--st-bytecode",
        action="store_true",
        help="sentence-transformers also with Python's bytecode kept (as scorecli keeps it where the machine "
        "keeps none: PYTHONDONTWRITEBYTECODE), its folder filled by an untimed import first",
    )
    ap.add_argument(
        "--no-first",
        action="store_true",
        help="no first runs (a second call on a warm machine whose caches the first call filled)",
    )
    args = ap.parse_args()
    out, work_dir = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work_dir.mkdir(parents=True, exist_ok=True)
    from transformers import AutoTokenizer

    from benchmarks.bench_gpu import QWEN3_06B, TINY, build_model
    from scorecli.bench import non_embedding_params

    t0 = time.perf_counter()
    model = build_model(
        Path("/tmp/scorecli-qwen3-0.6b-random" + ("-tiny" if args.dry else "")), TINY if args.dry else QWEN3_06B
    )
    from transformers import AutoConfig, AutoModelForSequenceClassification

    # no chat template: sentence-transformers 6.2 renders pairs through one where a tokenizer has it,
    # and every contender must score the same tokens (P + I_k)
    Path(model, "chat_template.jinja").unlink(missing_ok=True)

    with __import__("torch").device("meta"):
        params = non_embedding_params(AutoModelForSequenceClassification.from_config(AutoConfig.from_pretrained(model)))
    tok = AutoTokenizer.from_pretrained(model)
    peak = matmul_tflops(args.dry)
    log(
        out,
        {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="minutes"),
            "matmul_tflops": round(peak, 1),
            "params_M": round(params / 1e6, 1),
            "build_s": round(time.perf_counter() - t0, 1),
        },
    )
    scale = 20 if args.dry else 1
    shapes = {"sglang": (1000 // scale, 120, 10, 180), "passage": (400 // scale, 16, 20, 160)}
    files, works = {}, {}
    for shape, (n, q, k, i) in list(shapes.items()) + [("steady", (args.steady_rows // scale**2, 120, 10, 180))]:
        rows = make_rows(tok, n, q, k, i, seed={"sglang": 1, "passage": 2, "steady": 3}[shape])
        files[shape] = work_dir / f"{shape}.jsonl"
        C.write_jsonl(files[shape], rows)
        items, pairs, mis = pair_tokens(tok, rows)
        works[shape] = {"items": items, "pair_tokens": pairs, "mis_tokens": mis, "params": params}
        log(out, {"shape": shape, "rows": n, **{k_: v for k_, v in works[shape].items() if k_ != "params"}})
    py = sys.executable

    def st_job(shape: str, tag: str = "st") -> list[str]:
        """sentence-transformers' `CrossEncoder.predict` over the shape's rows (output: `cmd[3]`)."""
        job = [py, str(BENCH / "st_crossencoder_job.py"), str(files[shape]), str(work_dir / f"{shape}-{tag}.parquet")]
        return job + [model, "--batch-size", "128", "--dtype", "bfloat16"]

    dry_flags = ["--device", "cpu", "--dtype", "bfloat16"] if args.dry else []
    scorecli = [py, "-m", "scorecli", "score"]
    # flashinfer's MIS plan is the cascade since 2026-11-26 17:12 (RESULTS.md); auto runs it, compiled
    # where the job is long enough (`--compile auto`), so the uncompiled variant differs on the steady job
    variants = {
        "scorecli auto": [],
        "scorecli flashinfer, --compile off": ["--attention", "flashinfer", "--compile", "off"],
        "scorecli sdpa": ["--attention", "sdpa"],
    }
    envs: dict[str, dict[str, str]] = {}
    if args.dry:
        variants = {"scorecli auto": [], "scorecli sdpa": ["--attention", "sdpa", "--compile", "off"]}
    skip = set(filter(None, args.skip.split(",")))
    variants = {
        k: v
        for k, v in variants.items()
        if not (
            ("sdpa" in skip and "sdpa" in k)
            or ("noc" in skip and "off" in k)
            or ("cascade" in skip and "cascade" in k)
            or ("auto" in skip and k == "scorecli auto")
        )
    }
    # first runs on this machine, at once: flashinfer's JIT and inductor's compiles land in their caches
    first = work_dir / "first.jsonl"
    C.write_jsonl(first, C.read_jsonl(files["sglang"])[:20])
    starts = {
        f"{name} (first run on this machine, 20 rows, beside the others)": (
            scorecli
            + [str(first), "--out", str(work_dir / f"first-{n}.parquet"), "--model", model, *dry_flags]
            # 20 rows are too few for `--compile auto` to compile: `on` fills inductor's cache for the jobs that do
            + (flags or ["--compile", "on"]),
            envs.get(name, {}),
        )
        for n, (name, flags) in enumerate(variants.items())
        if "off" not in flags or name in envs  # the paged plan's first run is auto's
    }
    if args.steady_st:  # first: it needs no warm cache, and it is the run this option is for
        run(
            out,
            ST,
            "steady",
            st_job("steady"),
            works["steady"],
            peak,
            args.dry,
            max(args.timeout, 600),
        )
    if not args.no_first:
        first_runs(out, starts, 600)
    # sentence-transformers' bytecode in a folder of its own (PYTHONDONTWRITEBYTECODE="" unsets it)
    st_kept = {"PYTHONPYCACHEPREFIX": str(work_dir / "st-pycache"), "PYTHONDONTWRITEBYTECODE": ""}
    if args.st_bytecode:
        fill = "import torch, transformers.modeling_utils, sentence_transformers"
        subprocess.run([py, "-c", fill], env={**os.environ, **st_kept}, check=False, timeout=300)
    for shape in [s_ for s_ in args.shapes.split(",") if s_]:
        if shape == "steady":  # before the optional passage shape: the steady state, then float32 agreement
            for name in ("scorecli auto", "scorecli flashinfer, --compile off"):
                if name in variants:  # auto compiles a job this long; the other shows what that repays
                    run(
                        out,
                        name,
                        "steady",
                        scorecli
                        + [str(files["steady"]), "--out", str(work_dir / "steady.parquet"), "--model", model]
                        + dry_flags
                        + variants[name],
                        works["steady"],
                        peak,
                        args.dry,
                        max(args.timeout, 300),
                    )
                if name == "scorecli auto" and "agree" not in skip:
                    agreement(out, work_dir, files["sglang"], model, py, args.dry)
            continue
        ref = work_dir / f"{shape}-hf.parquet"
        peers = {}
        if "hf" not in skip:
            peers["transformers by hand (sdpa, bf16, batch 128)"] = [
                py,
                str(BENCH / "hf_pairs_job.py"),
                str(files[shape]),
                str(ref),
                model,
            ]
        if "st" not in skip:
            peers[ST] = st_job(shape)
            if args.st_bytecode:
                peers[ST + ", bytecode kept"] = st_job(shape, "st-kept")
        outputs = {}
        for name, flags in variants.items():
            if name == "scorecli flashinfer, --compile off":
                continue  # the same path as auto on a job too short to compile: the steady job alone
            dest = work_dir / f"{shape}-{len(outputs)}.parquet"
            outputs[name] = dest
            run(
                out,
                name,
                shape,
                scorecli + [str(files[shape]), "--out", str(dest), "--model", model, *dry_flags, *flags],
                works[shape],
                peak,
                args.dry,
                args.timeout,
                envs.get(name),
            )
        for name, cmd in peers.items():
            env = st_kept if name.endswith("bytecode kept") else None
            run(out, name, shape, cmd, works[shape], peak, args.dry, args.timeout, env)
            outputs[name] = Path(cmd[3])
        log(
            out,
            {"shape": shape, "max_abs_diff_vs_transformers_bf16": {n: max_diff(p, ref) for n, p in outputs.items()}},
        )
    (out / "compare.md").write_text(markdown(RESULTS))
    print(markdown(RESULTS))
    return 0


def markdown(results: list[dict]) -> str:
    """The runs as a RESULTS.md table, then the agreement records as they are."""
    head = next((r for r in results if "matmul_tflops" in r), {})
    lines = [
        f"bf16 matmul rate measured: {head.get('matmul_tflops')} TFLOP/s; {head.get('params_M')}M non-embedding "
        "parameters",
        "",
        "| workload | contender | wall s | items/s | useful FLOP % | GPU busy % | peak GiB | start-up s | "
        "scoring s | scoring items/s | MIS FLOP % (scoring) | rc |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]

    def pct(v):
        return "" if v is None else f"{100 * v:.1f}"

    for r in results:
        if "contender" not in r:
            continue
        lines.append(
            f"| {r['shape']} | {r['contender']} | {r['wall_s']} | {format(r['items_s'], ',.0f') if 'items_s' in r else ''} | "
            f"{pct(r.get('useful_flop'))} | "
            f"{r.get('gpu_busy') or ''} | {r.get('peak_gib') or ''} | {r.get('startup_s', '')} | "
            f"{r.get('scoring_s', '')} | {r.get('scoring_items_s', '')} | {pct(r.get('mis_flop_scoring'))} | "
            f"{r['rc']} |"
        )
    lines.append("")
    lines += [f"- {json.dumps(r)}" for r in results if "contender" not in r and "matmul_tflops" not in r]
    return "\n".join(lines) + "\n"


def agreement(out: Path, work_dir: Path, rows: Path, model: str, py: str, dry: bool) -> None:
    """float32 on the GPU against transformers' float32 forward, and transformers' own bf16 error,
    on the first 100 rows of the sglang shape."""
    subset = work_dir / "subset.jsonl"
    C.write_jsonl(subset, C.read_jsonl(rows)[:100])
    hf32, hf16 = work_dir / "subset-hf32.parquet", work_dir / "subset-hf16.parquet"
    device = ["--device", "cpu"] if dry else []
    cmds = {
        "hf32": [py, str(BENCH / "hf_pairs_job.py"), str(subset), str(hf32), model, "--dtype", "float32"],
        "hf16": [py, str(BENCH / "hf_pairs_job.py"), str(subset), str(hf16), model],
        "scorecli32": [
            py,
            "-m",
            "scorecli",
            "score",
            str(subset),
            "--out",
            str(work_dir / "subset-sc32.parquet"),
            "--model",
            model,
            "--dtype",
            "float32",
            *device,
        ],
    }
    for name, cmd in cmds.items():
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode:
            log(out, {"agreement_run": name, "rc": proc.returncode, "stderr": proc.stderr.splitlines()[-3:]})
    log(
        out,
        {
            "agreement (first 100 rows, sglang shape)": {
                "scorecli float32 vs transformers float32": max_diff(work_dir / "subset-sc32.parquet", hf32),
                "transformers bf16 vs transformers float32": max_diff(hf16, hf32),
            }
        },
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
