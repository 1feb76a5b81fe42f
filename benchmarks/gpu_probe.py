"""Where a Qwen3-0.6B-shaped MIS job spends its GPU time (one process, bf16, flashinfer).

Answers, on the GPU machine, the questions that decide how to make scoring fast:
  1. the measured bf16 matmul rate (8192^3);
  2. per token budget: host prepare time, the GPU's own time per batch (CUDA events, no sync
     between batches), wall with one sync at the end, and wall as `Scorer.run` does it (a
     `.cpu()` per batch); peak memory per token;
  3. a profile of one large batch: GEMM / attention / everything else;
  4. the same batches with each decoder layer under `torch.compile` (attention an opaque
     custom op): compile time, time per batch, largest score difference from eager.

    python benchmarks/gpu_probe.py --out $OUT
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import traceback
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

RESULTS: dict = {}
LOG: list[Path] = []


def log(key: str, value) -> None:
    RESULTS[key] = value
    print(f"{key}: {value}", flush=True)
    for path in LOG:  # as it goes: a run cut off at its time limit keeps what it measured
        with path.open("a") as f:
            f.write(json.dumps({key: value}, default=str) + "\n")


def matmul_tflops() -> float:
    n, dev = (8192, "cuda") if "dry" not in RESULTS else (512, "cpu")
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return 2 * n**3 * 10 / (start.elapsed_time(end) / 1e3) / 1e12


def timed_batches(forward, batches) -> tuple[float, float, list]:
    """(wall s with one sync at the end, summed GPU ms per batch from events, outputs)."""
    events, outs = [], []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for b in batches:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        outs.append(forward(b, None).score_states)
        e.record()
        events.append((s, e))
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    return wall, sum(s.elapsed_time(e) for s, e in events), outs


def categorize(prof) -> dict:
    cats = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    rows = []
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
        if ev.device_type.name != "CUDA" or not t:
            continue
        name = ev.key.lower()
        if any(k in name for k in ("gemm", "xmma", "cutlass", "nvjet", "sm90", "cublas")):
            cats["gemm"] += t
        elif any(k in name for k in ("prefill", "flashinfer", "attention", "fmha")):
            cats["attention"] += t
        else:
            cats["other"] += t
        rows.append((t, ev.key[:110], ev.count))
    rows.sort(reverse=True)
    total = sum(cats.values()) or 1.0
    return {
        "share": {k: round(v / total, 3) for k, v in cats.items()},
        "total_ms": total / 1e3,
        "top": [f"{t / 1e3:9.2f} ms  x{c:5d}  {n}" for t, n, c in rows[:25]],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/probe")
    ap.add_argument("--rows", type=int, default=400)
    ap.add_argument("--budgets", default="16384,65536,131072")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--dry", action="store_true", help="tiny model on the CPU with sdpa: checks the script runs")
    args = ap.parse_args()
    if args.dry:
        _fake_cuda()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    LOG.append(out / "probe.jsonl")
    try:
        run(args)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        log("fatal", traceback.format_exc()[-2000:])
    (out / "probe.json").write_text(json.dumps(RESULTS, indent=1, default=str))
    return 0


def _fake_cuda() -> None:
    """CPU stand-ins for the CUDA calls this script makes (--dry)."""

    class Event:
        def __init__(self, **_):
            self.t = 0.0

        def record(self):
            self.t = time.perf_counter()

        def elapsed_time(self, other):
            return (other.t - self.t) * 1e3

    cuda = torch.cuda
    cuda.Event, cuda.synchronize, cuda.get_device_name = Event, lambda *a: None, lambda *a: "CPU (dry run)"
    cuda.reset_peak_memory_stats, cuda.memory_allocated, cuda.max_memory_allocated = (
        lambda *a: None,
        lambda *a: 0,
        lambda *a: 0,
    )
    RESULTS["dry"] = True


def run(args) -> None:
    from benchmarks.bench_gpu import QWEN3_06B, TINY, build_model
    from scorecli.bench import Workload, non_embedding_params, synthetic_rows
    from scorecli.config import ScoreConfig
    from scorecli.core.batching import collate
    from scorecli.model.load import load_model
    from scorecli.scorer import Scorer
    from scorecli.stderr import quiet_transformers

    quiet_transformers()
    log("device", torch.cuda.get_device_name())
    peak = matmul_tflops()
    log("matmul_tflops", round(peak, 1))
    t = time.perf_counter()
    dry = "dry" in RESULTS
    path = build_model(Path("/tmp/scorecli-qwen3-0.6b-random" + ("-tiny" if dry else "")), TINY if dry else QWEN3_06B)
    log("build_s", round(time.perf_counter() - t, 1))
    cfg = ScoreConfig(
        model=path,
        device="cpu" if dry else "cuda",
        dtype="bfloat16",
        share_prefix=False,
        self_check=False,
        attention="sdpa" if dry else "flashinfer",
    )
    t = time.perf_counter()
    loaded = load_model(cfg)
    log("load_s", round(time.perf_counter() - t, 1))
    params = non_embedding_params(loaded.model)
    log("params_M", params / 1e6)
    rows = synthetic_rows(
        Workload(rows=args.rows, items=10, query_tokens=120, item_tokens=180),
        loaded.model.get_input_embeddings().num_embeddings,
    )
    items = args.rows * 10
    keep = {}
    for budget in [int(b) for b in args.budgets.split(",")]:
        scorer = Scorer(loaded, dataclasses.replace(cfg, max_batch_tokens=budget))
        t = time.perf_counter()
        prepared = scorer.prepare(rows)
        prep = time.perf_counter() - t
        t = time.perf_counter()
        batches = [collate([prepared.seqs[i] for i in idx], 0) for idx in prepared.batches]
        coll = time.perf_counter() - t
        tokens = sum(b.num_tokens for b in batches)
        t = time.perf_counter()
        timed_batches(scorer.forward, batches)  # warm-up (the first one JIT-compiles flashinfer)
        log(f"b{budget}_warmup_s", round(time.perf_counter() - t, 2))
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        wall, gpu_ms, outs = timed_batches(scorer.forward, batches)
        peak_b = torch.cuda.max_memory_allocated() - base
        t = time.perf_counter()
        scorer.run(prepared)
        run_wall = time.perf_counter() - t
        flop = 2.0 * params * tokens
        log(
            f"b{budget}",
            {
                "batches": len(batches),
                "tokens": tokens,
                "prepare_s": round(prep, 3),
                "collate_s": round(coll, 3),
                "async_wall_s": round(wall, 3),
                "gpu_s": round(gpu_ms / 1e3, 3),
                "run_wall_s": round(run_wall, 3),
                "gpu_frac_of_peak": round(flop / (gpu_ms / 1e3) / (peak * 1e12), 3),
                "run_items_s": round(items / run_wall),
                "async_items_s": round(items / wall),
                "peak_bytes_per_token": round(peak_b / max(b.num_tokens for b in batches)),
            },
        )
        keep[budget] = (scorer, batches, outs)
    budget = 65536 if 65536 in keep else next(iter(keep))
    scorer, batches, outs = keep[budget]
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        scorer.forward(batches[0], None)
        torch.cuda.synchronize()
    log("profile_one_batch", categorize(prof))
    if not args.no_compile:
        compiled(scorer, batches, outs, params, peak)


def compiled(scorer, batches, eager_outs, params, peak) -> None:
    """Each decoder layer but the last under torch.compile(dynamic=True); attention opaque."""
    from transformers import AttentionInterface

    from scorecli.attention import set_implementation

    backend = scorer.forward.backend

    @torch.library.custom_op("scorecli_probe::attend", mutates_args=())
    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float) -> torch.Tensor:
        return backend.attend(None, q, k, v, scaling)

    @attend.register_fake
    def _(q, k, v, scaling):
        return q.new_empty((q.shape[0], q.shape[2], q.shape[1], v.shape[3]))

    def probe_attn(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
        return attend(query, key, value, float(scaling)), None

    AttentionInterface.register("scorecli_probe", probe_attn)
    model = scorer.loaded.model
    set_implementation(model, "scorecli_probe")
    from torch import _dynamo

    _dynamo.config.cache_size_limit = 64
    layers = scorer.forward.base.layers
    fn = torch.compile(type(layers[0]).forward, dynamic=True)
    for layer in layers[:-1]:
        layer.forward = types.MethodType(fn, layer)
    t = time.perf_counter()
    try:
        _, _, outs = timed_batches(scorer.forward, batches[:1])
    except Exception:  # noqa: BLE001
        log("compile_error", traceback.format_exc()[-3000:])
        return
    log("compile_first_batch_s", round(time.perf_counter() - t, 1))
    t = time.perf_counter()
    timed_batches(scorer.forward, batches)  # other shapes
    log("compile_rest_s", round(time.perf_counter() - t, 1))
    wall, gpu_ms, outs = timed_batches(scorer.forward, batches)
    tokens = sum(b.num_tokens for b in batches)
    diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(outs, eager_outs))
    rel = max(float((a.float() - b.float()).abs().max() / b.float().abs().max()) for a, b in zip(outs, eager_outs))
    log(
        "compiled",
        {
            "async_wall_s": round(wall, 3),
            "gpu_s": round(gpu_ms / 1e3, 3),
            "gpu_frac_of_peak": round(2.0 * params * tokens / (gpu_ms / 1e3) / (peak * 1e12), 3),
            "max_abs_diff_hidden": diff,
            "max_rel_diff_hidden": rel,
            "unique_graphs": _dynamo.utils.counters["stats"]["unique_graphs"],
        },
    )
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        scorer.forward(batches[0], None)
        torch.cuda.synchronize()
    log("profile_compiled", categorize(prof))


if __name__ == "__main__":
    raise SystemExit(main())
