"""Shared helpers for the benchmark scripts: whole-process timing, seeded data, tables.

Every benchmark times WHOLE PROCESSES (interpreter start, imports, model load, reading,
scoring, writing Parquet), runs the contenders alternately (A B, then B A, ...) after one
untimed warm-up run each, and reports medians. Peak RSS and CPU time of each child come
from `os.wait4` in a tiny launcher process (`LAUNCHER`): on Linux a forked child starts with
its parent's peak RSS as its own ru_maxrss, so a benchmark script that has loaded a model
would otherwise lend its own peak to every contender.
"""

from __future__ import annotations

import atexit
import datetime as dt
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "benchmarks"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PYTHON = sys.executable
# the console script installed next to this interpreter (the venv's `scorecli`)
SCORECLI = str(Path(sys.executable).with_name("scorecli"))


def scorecli_cmd(*args: str) -> list[str]:
    if not os.path.exists(SCORECLI):
        raise SystemExit(f"no scorecli console script next to {PYTHON}: run `make install` or use .venv/bin/python")
    return [SCORECLI, *args]


def workdir(name: str) -> Path:
    """A fresh temporary folder for one benchmark's data, models and outputs.

    Removed when the script exits, unless $SCORECLI_BENCH_KEEP is set (to inspect it).
    """
    path = Path(tempfile.mkdtemp(prefix=f"scorecli-bench-{name}-"))
    if not os.environ.get("SCORECLI_BENCH_KEEP"):
        atexit.register(shutil.rmtree, path, True)
    else:
        print(f"  keeping {path}", file=sys.stderr)
    return path


# ---------------------------------------------------------------- processes


@dataclass
class Run:
    seconds: float  # wall clock of the whole process
    max_rss_mib: float  # its peak resident set
    returncode: int
    cpu_seconds: float = 0.0  # user + system CPU time of the process (and its waited children)
    load: float = 0.0  # 1-minute load average when it started (other work on the machine)


# Forks the command from a small process and writes its rusage (peak RSS KiB, CPU s) to argv[1].
LAUNCHER = """import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, ru = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{ru.ru_maxrss} {ru.ru_utime + ru.ru_stime}")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_process(cmd: list[str], env: dict | None = None, log: Path | None = None) -> Run:
    """Run one whole process; wall seconds, its own peak RSS and CPU time (os.wait4 in LAUNCHER)."""
    stderr = open(log, "ab") if log else subprocess.DEVNULL
    fd, usage_file = tempfile.mkstemp(prefix="scorecli-bench-usage-")
    os.close(fd)
    try:
        load = os.getloadavg()[0]
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", LAUNCHER, usage_file, *cmd],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            cwd=ROOT,
        )
        seconds = time.perf_counter() - start
        usage = Path(usage_file).read_text().split()
    finally:
        os.unlink(usage_file)
        if log:
            stderr.close()
    max_rss_kib, cpu = (float(usage[0]), float(usage[1])) if len(usage) == 2 else (0.0, 0.0)
    run = Run(seconds, max_rss_kib / 1024.0, proc.returncode, cpu, load)
    if run.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:] if log else ""
        raise SystemExit(f"command failed with exit code {run.returncode}: {' '.join(cmd)}\n{tail}")
    return run


@dataclass
class Contender:
    name: str
    cmd: list[str]
    runs: list[Run] = field(default_factory=list)
    info: bool = False  # a reference measurement, not a contender: no speed-up shown

    @property
    def median_s(self) -> float:
        return statistics.median(r.seconds for r in self.runs)

    @property
    def min_s(self) -> float:
        return min(r.seconds for r in self.runs)

    @property
    def median_cpu(self) -> float:
        return statistics.median(r.cpu_seconds for r in self.runs)

    @property
    def median_rss(self) -> float:
        return statistics.median(r.max_rss_mib for r in self.runs)

    def times(self) -> str:
        return ", ".join(f"{r.seconds:.2f}" for r in self.runs)


def alternate(contenders: list[Contender], repeats: int, log: Path, warmup: list[Contender] | None = None) -> None:
    """Untimed warm-up runs (`warmup`, default: every contender once; they fill the page cache
    and the bytecode caches), then `repeats` rounds, the order reversed every round."""
    env = dict(os.environ)
    for c in contenders if warmup is None else warmup:
        print(f"  warm-up {c.name} ...", file=sys.stderr, flush=True)
        run_process(c.cmd, env, log)
    for r in range(repeats):
        order = contenders if r % 2 == 0 else list(reversed(contenders))
        for c in order:
            run = run_process(c.cmd, env, log)
            c.runs.append(run)
            print(
                f"  round {r + 1}/{repeats} {c.name}: {run.seconds:.2f} s wall, {run.cpu_seconds:.2f} s CPU, "
                f"peak RSS {run.max_rss_mib:.0f} MiB, load {run.load:.1f}",
                file=sys.stderr,
                flush=True,
            )


# ---------------------------------------------------------------- data


def word_pool(seed: int = 0) -> list[str]:
    """English-ish words from the test corpus word lists (known to the tiny BPE tokenizers)."""
    from tests.builders import models

    words: list[str] = []
    for lst in (models._NOUNS, models._ADJECTIVES, models._ADVERBS, models._VERBS):
        words.extend(lst)
    for lst in (models._SUBJECTS, models._OBJECTS):
        for phrase in lst:
            words.extend(phrase.split())
    return sorted(set(words))


def words(rng: random.Random, pool: list[str], n: int) -> str:
    return " ".join(rng.choice(pool) for _ in range(n))


def fit_words(rng: random.Random, pool: list[str], tokenizer, target_tokens: int) -> str:
    """A word string of about `target_tokens` tokens (no special tokens) under `tokenizer`."""
    text_words: list[str] = []
    while True:
        text_words.append(rng.choice(pool))
        n = len(tokenizer(" ".join(text_words), add_special_tokens=False)["input_ids"])
        if n >= target_tokens:
            if n > target_tokens and len(text_words) > 1:
                shorter = len(tokenizer(" ".join(text_words[:-1]), add_special_tokens=False)["input_ids"])
                if target_tokens - shorter < n - target_tokens:
                    text_words.pop()
            return " ".join(text_words)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def read_jsonl(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_row_scores(rows: list[dict], scores: list[float], path) -> None:
    """Regroup flat per-item scores by row; Parquet with `id` and `score` (list<float32>)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out, start = [], 0
    for row in rows:
        n = len(row["items"])
        out.append([float(s) for s in scores[start : start + n]])
        start += n
    table = pa.table(
        {
            "id": pa.array([row.get("id") for row in rows]),
            "score": pa.array(out, type=pa.list_(pa.float32())),
        }
    )
    pq.write_table(table, path)


def token_stats(tokenizer, texts: list[str]) -> tuple[float, int, int]:
    lens = [len(x) for x in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    return statistics.mean(lens), min(lens), max(lens)


# ---------------------------------------------------------------- scores


def read_scores(path: Path) -> list[list[float]]:
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=["score"]).column("score").to_pylist()


def read_metadata(path: Path) -> dict[str, str]:
    """The Parquet file's key-value metadata (which runtime ran, and why)."""
    import pyarrow.parquet as pq

    return {k.decode(): v.decode() for k, v in (pq.read_schema(path).metadata or {}).items()}


def has_module(name: str) -> bool:
    """Whether `name` imports in this interpreter."""
    import importlib.util

    return importlib.util.find_spec(name) is not None


def max_abs_diff(a: list[list[float]], b: list[list[float]]) -> float:
    if len(a) != len(b):
        raise SystemExit(f"row counts differ: {len(a)} vs {len(b)}")
    worst = 0.0
    for k, (x, y) in enumerate(zip(a, b)):
        if len(x) != len(y):
            raise SystemExit(f"row {k}: item counts differ: {len(x)} vs {len(y)}")
        for u, v in zip(x, y):
            worst = max(worst, abs(u - v))
    return worst


# ---------------------------------------------------------------- reporting


def net_ratio(b: Contender, b1: Contender, a: Contender, a1: Contender) -> str:
    """(B - B's 1-row run) / (A - A's 1-row run): the speed-up of the work after start-up."""
    num, den = b.median_s - b1.median_s, a.median_s - a1.median_s
    return f"{num / den:.2f}x" if num > 0 and den > 0 else "n/a (a run was no slower than its 1-row run)"


def machine() -> str:
    name = platform.processor() or "unknown"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                name = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"


def header(title: str, details: list[str]) -> None:
    print(f"\n### {title}\n")
    print(f"- date: {dt.datetime.now().isoformat(timespec='seconds')}; machine: {machine()}")
    for d in details:
        print(f"- {d}")
    print()


def table(contenders: list[Contender], baseline: Contender) -> None:
    """Markdown rows: median and best wall seconds, every run, speed-ups over `baseline`, CPU, RSS.

    The median wall-clock ratio is the headline. On a shared, noisy machine the best-of-N
    (min) ratio estimates the undisturbed speed, and the CPU-time ratio (user + system of
    the process) is less disturbed by other work; both are shown beside it.
    """
    print(
        "| contender | median wall s | wall runs (s) | median speed-up vs B | min wall s | min speed-up vs B "
        "| median CPU s | CPU speed-up vs B | median peak RSS MiB | load avg at starts |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for c in contenders:
        speed = "-" if c.info else f"{baseline.median_s / c.median_s:.2f}x"
        best = "-" if c.info else f"{baseline.min_s / c.min_s:.2f}x"
        cpu = "-" if c.info else f"{baseline.median_cpu / c.median_cpu:.2f}x"
        loads = f"{min(r.load for r in c.runs):.1f}-{max(r.load for r in c.runs):.1f}"
        print(
            f"| {c.name} | {c.median_s:.2f} | {c.times()} | {speed} | {c.min_s:.2f} | {best} | {c.median_cpu:.2f} "
            f"| {cpu} | {c.median_rss:.0f} | {loads} |"
        )
    print(f"\n(B = {baseline.name}.)\n")


def commands(contenders: list[Contender]) -> None:
    print("Commands (one whole process each):\n")
    for c in contenders:
        print(f"- {c.name}: `{' '.join(_short(a) for a in c.cmd)}`")
    print()


def _short(arg: str) -> str:
    """Paths under temporary folders shown relative to that folder, the venv as `.venv`."""
    for prefix in (str(ROOT) + "/",):
        arg = arg.replace(prefix, "")
    tmp = tempfile.gettempdir() + "/"
    if arg.startswith(tmp):
        parts = Path(arg).parts
        arg = "$WORK/" + "/".join(parts[3:]) if len(parts) > 3 else arg
    return arg
