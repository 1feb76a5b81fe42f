"""`--runtime auto` between torch and ONNX Runtime: for each batch, the one that ran faster at
its sequences' length for this model on this machine, timed once on probe batches and recorded
in the cache directory.

Which is faster depends on the CPU, the library versions and the sequences' length, not on a
rule: on the Xeon (AVX-512) of issue 36 ONNX Runtime ran about 9% slower than torch; on the AMD
EPYC of RESULTS 2026-11-27 16% faster at 64 tokens and 10% slower at 512 (its graph wins short
sequences, torch's flash attention long ones), and 14-19% faster on one stream alone where the
run, two streams at once, saw 1-10% (benchmarks/RESULTS.md). So the first run of a model on a
machine times both forwards as the run will run them: every CPU stream computing its own copy
of a probe batch at once, on the threads a stream has, at several lengths (`PROBE_LENGTHS`,
random ids), alternated; the verdict (`verdict`) is one runtime, or one for batches up to a
length and the other beyond (`route.Route`), kept in `<cache dir>/runtime/<model>-<what>-<key>.json`.
The key covers the model's export (its weights and the versions that shape the graph:
`onnx.cache_path`), onnxruntime's version, the CPU, the streams and threads and this way of
measuring, so a change in any of them measures again. Later runs read the verdict, and the
output's metadata (`runtime`, `runtime_cut_tokens`, `runtime_reason`) says it either way.

On one thread per stream (2 cores) the clock is each stream's thread CPU time: both runtimes
compute in the calling thread then, and the other work of a shared machine does not count; with
more threads per stream it is wall time. A probe's time is the best of the rounds.

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
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from scorecli.core.batching import Batch, collate
from scorecli.core.pack import Seq
from scorecli.errors import UsageError, runtime_gone
from scorecli.model.cache import build_once
from scorecli.runtimes.route import Pending, Route, Routed

PROBE_LENGTHS = (32, 128, 512)  # tokens per sequence of the probe batches
PROBE_FLOP = 2.5e10  # about this much work per probe batch (a quarter second on one core)
PROBE_TOKENS = (256, 2048)  # the fewest and most tokens of a probe batch (the CPU's token budget)
ROUNDS = 2  # timed passes over the probes, after one untimed pass of the longest (warm-up)
SPLIT_GAIN = 0.01  # two runtimes by length only where that beats the better one alone by 1% of the time
METHOD = "2: every stream at once, by length"  # part of the verdict's key: a new way of measuring measures again


def stream_threads(streams: int) -> int:
    """The torch threads each of `streams` concurrent CPU streams runs on (`Scorer._run_streams`),
    which an ONNX Runtime session gets too."""
    threads = torch.get_num_threads()
    return max(1, threads // streams) if threads >= streams else threads


def run_streams(streams: int) -> int:
    """How many streams a run with `streams` CPU streams computes at once (one where torch has
    fewer threads than streams: `Scorer.values`)."""
    return streams if torch.get_num_threads() >= streams else 1


def settle(
    cfg,
    runtime: str,
    reason: str,
    open_onnx: Callable[[], tuple[Any, str | None]],
    make_torch: Callable[[], Any],
    call: Callable[[Any, Batch], Any],
    record: Callable[[], str],
    probes: Callable[[], tuple[list[int], list[Batch]]],
    threads: int,
    streams: int,
    lazy_torch: bool = False,
) -> tuple[str, Any, str]:
    """(runtime, its forward, why it runs) of a run: `route.Route.name` and a `route.Routed`
    forward where the verdict sends short and long batches to different runtimes.

    Args:
        cfg: the run's configuration (`runtime`; `runtime_route`: a resumed job's route).
        runtime, reason: what `onnx.choose` chose and why.
        open_onnx: opens the ONNX forward: (it, None), or (None, why not) where `auto` falls back.
        make_torch: builds the torch forward.
        call: runs a forward on a batch.
        record: the path of this model's verdict (`record_path`).
        probes: the probe batches' lengths and batches (`probe_batches`).
        threads: the threads a forward runs on in the run (`stream_threads`).
        streams: the forwards the run computes at once (`run_streams`).
        lazy_torch: where the verdict routes long batches to torch, make its forward when a window
            first has such a batch (`route.Pending`: the model is not built yet, `model.remembered`).

    Raises:
        ResumeRefused: a resumed job's route needs ONNX Runtime, which cannot run here now.
    """
    resumed = Route.parse(cfg.runtime_route) if cfg.runtime == "auto" and cfg.runtime_route else None
    if runtime == "torch":
        if resumed is not None and resumed.runtimes != ("torch",):
            raise runtime_gone(resumed.name, reason)
        return "torch", make_torch(), reason
    kept = (resumed, "") if resumed else read(record(), ("torch", runtime)) if cfg.runtime == "auto" else None
    if kept is not None and kept[0].runtimes == ("torch",):  # no export, no session
        return "torch", make_torch(), kept[1]
    onnx, why_not = open_onnx()
    if onnx is None:
        if resumed:
            raise runtime_gone(resumed.name, why_not or reason)
        return "torch", make_torch(), why_not or reason
    if cfg.runtime != "auto":
        return runtime, onnx, reason
    forwards = {"torch": None, runtime: onnx}
    if kept is None:
        forwards["torch"] = make_torch()
        lengths, batches = probes()
        copies = {name: [f] + [f.twin() for _ in range(streams - 1)] for name, f in forwards.items()}
        timed = {name: [lambda b, f=f: call(f, b) for f in fs] for name, fs in copies.items()}
        seconds = measure(timed, batches, threads)
        kept = verdict(lengths, seconds)
        write(record(), kept[0], kept[1], lengths, seconds)
    route, why = kept
    if route.second is None:
        return route.first, forwards[route.first] or make_torch(), why
    forwards["torch"] = forwards["torch"] or (Pending(make_torch) if lazy_torch else make_torch())
    return route.name, Routed(route, {name: forwards[name] for name in route.runtimes}), why


def measure(
    forwards: dict[str, list[Callable[[Batch], Any]]], probes: list[Batch], threads: int
) -> dict[str, list[float]]:
    """Seconds each runtime took on each of `probes` (best of `ROUNDS`), alternated probe by
    probe: each of its forwards (one per stream) computes the probe at once, in threads of
    `threads` torch threads, and a pass takes the forwards' mean."""
    saved = torch.get_num_threads()
    clock = time.thread_time if threads == 1 else time.perf_counter
    best = {name: [math.inf] * len(probes) for name in forwards}
    names = list(forwards)

    def timed(forward: Callable[[Batch], Any], batch: Batch) -> float:
        with torch.inference_mode():
            start = clock()
            forward(batch)
            return clock() - start

    workers = max(len(f) for f in forwards.values())
    try:
        with ThreadPoolExecutor(workers, "scorecli-probe", torch.set_num_threads, (threads,)) as pool:

            def together(name: str, batch: Batch) -> float:
                runs = [pool.submit(timed, forward, batch) for forward in forwards[name]]
                return sum(run.result() for run in runs) / len(runs)

            for name in names:  # first calls allocate (the longest probe the most) and pick kernels
                together(name, probes[-1])
            for r in range(ROUNDS):
                for j, batch in enumerate(probes):
                    for name in names if (r + j) % 2 == 0 else names[::-1]:
                        best[name][j] = min(best[name][j], together(name, batch))
    finally:
        torch.set_num_threads(saved)
    return best


def verdict(lengths: list[int], seconds: dict[str, list[float]]) -> tuple[Route, str]:
    """(the route, the reason the metadata gives) from two runtimes' `seconds` at `lengths`:
    the runtime faster over all of them (a tie goes to torch, listed first), or, where one is
    faster on short sequences and the other on long ones by more than `SPLIT_GAIN`, each for
    its lengths, cut where their times cross (interpolated in log length)."""
    names = list(seconds)
    best = [min(seconds[name][i] for name in names) for i in range(len(lengths))]

    def loss(route: Route) -> float:  # the mean time lost to the faster runtime at each length
        return sum(seconds[route.runtime_for(n)][i] / best[i] for i, n in enumerate(lengths)) / len(lengths) - 1

    single = min((Route(name) for name in names), key=lambda r: (loss(r), r.first != "torch"))
    splits = [cut for i in range(len(lengths) - 1) if (cut := _crossing(lengths, seconds, i)) is not None]
    split = min(splits, key=loss, default=None)
    chosen = split if split is not None and loss(single) - loss(split) > SPLIT_GAIN else single
    a, b = names
    ratios = ", ".join(
        f"{seconds[a][i] / seconds[b][i]:.2f} at {n}" + (" tokens" if i == 0 else "") for i, n in enumerate(lengths)
    )
    shown = f"time {a}/{b}: {ratios}; probe batches, every stream at once; {dt.date.today().isoformat()}"
    if chosen.second is None:
        other = next(name for name in names if name != chosen.first)
        total = {name: sum(seconds[name]) for name in names}
        ratio = total[other] / total[chosen.first] if total[chosen.first] > 0 else math.inf
        return chosen, f"auto: {chosen.first} ran {ratio:.2f}x as fast as {other} on this machine ({shown})"
    return chosen, (
        f"auto: {chosen.first} for batches of sequences up to {chosen.cut} tokens, {chosen.second} for longer "
        f"ones, each faster there on this machine ({shown})"
    )


def _crossing(lengths: list[int], seconds: dict[str, list[float]], i: int) -> Route | None:
    """The route that switches runtimes where their times cross between `lengths[i]` and the
    next length (linear in log length), when a different runtime is faster at each; else None."""
    faster = [min(seconds, key=lambda name: (seconds[name][k], name != "torch")) for k in (i, i + 1)]
    a, b = faster
    if a == b:
        return None
    lead_a = math.log(seconds[b][i] / seconds[a][i])  # >= 0
    lead_b = math.log(seconds[a][i + 1] / seconds[b][i + 1])  # > 0
    share = lead_a / (lead_a + lead_b) if lead_a + lead_b > 0 else 0.5
    low, high = math.log(lengths[i]), math.log(lengths[i + 1])
    return Route(a, b, int(math.exp(low + share * (high - low))))


def read(path: str, names: tuple[str, ...]) -> tuple[Route, str] | None:
    """(route, reason) the verdict at `path` keeps; None when there is none (or not a whole one,
    or one naming a runtime not in `names`)."""
    try:
        with open(path, encoding="utf-8") as f:
            kept = json.load(f)
        route = Route.parse(kept["route"])
        if route is not None and set(route.runtimes) <= set(names) and isinstance(kept["reason"], str):
            return route, kept["reason"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def write(path: str, route: Route, reason: str, lengths: list[int], seconds: dict[str, list[float]]) -> None:
    """Keep a verdict (atomically); a cache that cannot be written only means measuring again."""

    record = {
        "route": route.text(),
        "reason": reason,
        "lengths": list(lengths),
        "seconds": seconds,
        "machine": machine(),
    }

    def build(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(record, f)

    try:
        build_once(path, build, "the runtime verdict")
    except UsageError:
        pass


def record_path(export: str, threads: int, streams: int) -> str:
    """Where the verdict for the model whose export folder is `export` (`onnx.cache_path`) lives,
    measured with `streams` forwards at once (`run_streams`) on `threads` threads each."""
    from scorecli.runtimes.onnx import onnxruntime

    parts = [os.path.basename(export), f"onnxruntime {onnxruntime().__version__}", machine(), METHOD]
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


def probe_batches(model: torch.nn.Module, max_len: int, pairs: bool) -> tuple[list[int], list[Batch]]:
    """The probe lengths (`PROBE_LENGTHS`, at most `max_len`) and one padded batch of sequences
    of each length, sized to about `PROBE_FLOP` of the model's work; random ids, query and item
    halves for pairs."""
    embeddings = model.get_input_embeddings().weight
    params = max(1, sum(p.numel() for p in model.parameters()) - embeddings.numel())
    tokens = int(min(max(PROBE_FLOP / (2 * params), PROBE_TOKENS[0]), PROBE_TOKENS[1]))
    rng = np.random.default_rng(0)
    lengths = sorted({max(2, min(n, max_len)) for n in PROBE_LENGTHS})
    batches = []
    for length in lengths:
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
    return lengths, batches
