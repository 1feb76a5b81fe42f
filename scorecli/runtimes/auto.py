"""`--runtime auto` between torch and ONNX Runtime: the one that ran faster for this model on this
machine, timed once on probe batches and recorded in the cache directory.

Which is faster depends on the CPU and the library versions, not on a rule: on the AMD EPYC of
issue 21 ONNX Runtime ran the same batches 1-6% faster than torch, on the Xeon (AVX-512) of
issue 36 about 9% slower (benchmarks/RESULTS.md). So the first run of a model on a machine times
both forwards on the same padded probe batches (`PROBE_LENGTHS`, random ids), alternated, each on
the threads one CPU stream of the run has, and keeps the verdict in
`<cache dir>/runtime/<model>-<what>-<key>.json`; the key covers the model's export (its weights
and the versions that shape the graph: `onnx.cache_path`), onnxruntime's version, the CPU and the
threads, so a change in any of them measures again. Later runs read the verdict, and the
output's metadata (`runtime_reason`) says it, word for word, either way.

On one thread per stream (2 cores) the clock is the thread's CPU time: both runtimes compute in
the calling thread then, and the other work of a shared machine does not count; with more
threads per stream it is wall time, the best of the rounds.

Knows nothing about rows, files or the CLI: the families hand it their forwards.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from scorecli.core.batching import Batch, collate
from scorecli.core.pack import Seq
from scorecli.errors import UsageError
from scorecli.model.cache import build_once

PROBE_LENGTHS = (64, 256)  # tokens per sequence of the two probe batches (short and long items)
PROBE_FLOP = 2.5e10  # about this much work per probe batch (a quarter second on one core)
PROBE_TOKENS = (256, 1024)  # the fewest and most tokens of a probe batch
ROUNDS = 2  # timed passes over the probes, after one untimed (warm-up)


def stream_threads(streams: int) -> int:
    """The torch threads each of `streams` concurrent CPU streams runs on (`Scorer._run_streams`),
    which an ONNX Runtime session gets too."""
    threads = torch.get_num_threads()
    return max(1, threads // streams) if threads >= streams else threads


def settle(
    cfg,
    runtime: str,
    reason: str,
    open_onnx: Callable[[], tuple[Any, str | None]],
    make_torch: Callable[[], Any],
    call: Callable[[Any, Batch], Any],
    record: Callable[[], str],
    probes: Callable[[], list[Batch]],
    threads: int,
) -> tuple[str, Any, str]:
    """(runtime, its forward, why it runs) of a run.

    Args:
        cfg: the run's configuration (`runtime`).
        runtime, reason: what `onnx.choose` chose and why.
        open_onnx: opens the ONNX forward: (it, None), or (None, why not) where `auto` falls back.
        make_torch: builds the torch forward.
        call: runs a forward on a batch.
        record: the path of this model's verdict (`record_path`).
        probes: the probe batches (`probe_batches`).
        threads: the threads a forward runs on in the run (`stream_threads`).
    """
    if runtime == "torch":
        return "torch", make_torch(), reason
    kept = read(record(), ("torch", runtime)) if cfg.runtime == "auto" else None
    if kept is not None and kept[0] == "torch":  # no export, no session
        return "torch", make_torch(), kept[1]
    onnx, why_not = open_onnx()
    if onnx is None:
        return "torch", make_torch(), why_not or reason
    if cfg.runtime != "auto":
        return runtime, onnx, reason
    if kept is not None:
        return runtime, onnx, kept[1]
    torch_forward = make_torch()
    forwards = {"torch": torch_forward, runtime: onnx}
    seconds = measure({name: (lambda b, f=f: call(f, b)) for name, f in forwards.items()}, probes(), threads)
    chosen, why = verdict(seconds)
    write(record(), chosen, why, seconds)
    return chosen, forwards[chosen], why


def measure(forwards: dict[str, Callable[[Batch], Any]], probes: list[Batch], threads: int) -> dict[str, float]:
    """Seconds each forward took over `probes` (each probe's best of `ROUNDS`, summed), run in
    this thread on `threads` torch threads, alternated probe by probe."""
    saved = torch.get_num_threads()
    clock = time.thread_time if threads == 1 else time.perf_counter
    best = {name: [math.inf] * len(probes) for name in forwards}
    names = list(forwards)
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            for forward in forwards.values():  # first calls allocate and pick kernels
                for batch in probes:
                    forward(batch)
            for r in range(ROUNDS):
                for j, batch in enumerate(probes):
                    for name in names if (r + j) % 2 == 0 else names[::-1]:
                        start = clock()
                        forwards[name](batch)
                        best[name][j] = min(best[name][j], clock() - start)
    finally:
        torch.set_num_threads(saved)
    return {name: sum(times) for name, times in best.items()}


def verdict(seconds: dict[str, float]) -> tuple[str, str]:
    """(the faster runtime, the reason the metadata gives); a tie goes to torch (listed first)."""
    chosen = min(seconds, key=lambda name: (seconds[name], name != "torch"))
    other = next(name for name in seconds if name != chosen)
    ratio = seconds[other] / seconds[chosen] if seconds[chosen] > 0 else math.inf
    shown = ", ".join(f"{name} {s:.3f} s" for name, s in seconds.items())
    day = dt.date.today().isoformat()
    return (
        chosen,
        f"auto: {chosen} ran {ratio:.2f}x as fast as {other} on this machine ({shown} of probe batches; {day})",
    )


def read(path: str, names: tuple[str, ...]) -> tuple[str, str] | None:
    """(runtime, reason) the verdict at `path` keeps; None when there is none (or not a whole one)."""
    try:
        with open(path, encoding="utf-8") as f:
            kept = json.load(f)
        if kept["runtime"] in names and isinstance(kept["reason"], str):
            return kept["runtime"], kept["reason"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def write(path: str, runtime: str, reason: str, seconds: dict[str, float]) -> None:
    """Keep a verdict (atomically); a cache that cannot be written only means measuring again."""

    record = {"runtime": runtime, "reason": reason, "seconds": seconds, "machine": machine()}

    def build(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(record, f)

    try:
        build_once(path, build, "the runtime verdict")
    except UsageError:
        pass


def record_path(export: str, threads: int, streams: int) -> str:
    """Where the verdict for the model whose export folder is `export` (`onnx.cache_path`) lives."""
    from scorecli.runtimes.onnx import onnxruntime

    parts = [os.path.basename(export), f"onnxruntime {onnxruntime().__version__}", machine()]
    parts.append(f"{streams} streams x {threads} threads")
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return os.path.join(os.path.dirname(os.path.dirname(export)), "runtime", f"{os.path.basename(export)}-{key}.json")


def machine() -> str:
    """The CPU's model name and how many cores this process sees."""
    import platform

    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"


def probe_batches(model: torch.nn.Module, max_len: int, pairs: bool) -> list[Batch]:
    """One padded batch of `PROBE_LENGTHS[k]`-token sequences for each k (at most `max_len`),
    sized to about `PROBE_FLOP` of the model's work; random ids, query and item halves for pairs."""
    embeddings = model.get_input_embeddings().weight
    params = max(1, sum(p.numel() for p in model.parameters()) - embeddings.numel())
    tokens = int(min(max(PROBE_FLOP / (2 * params), PROBE_TOKENS[0]), PROBE_TOKENS[1]))
    rng = np.random.default_rng(0)
    batches = []
    for length in sorted({min(n, max_len) for n in PROBE_LENGTHS}):
        head = length // 4 if pairs else 0
        seqs = [
            Seq(
                rng.integers(5, embeddings.shape[0], size=length).astype(np.int64),
                np.arange(length, dtype=np.int64),
                head,
                np.array([length - head], dtype=np.int64),
                np.array([k], dtype=np.int64),
                np.zeros(length, dtype=np.int64) if pairs else None,
            )
            for k in range(max(1, tokens // length))
        ]
        batches.append(collate(seqs))
    return batches
