"""Where the time goes: phase timings and torch op profiles for the benchmark workloads.

Rebuilds a benchmark's exact data and model (its `build`), then, in this one process,
runs scorecli's own stages (the same calls `scorecli score` makes: Scorer, iter_rows,
prepare, run, Sink) and the competitor's code, timing each phase. Inside the model pass,
scorecli's attention backend is wrapped (not edited) to time mask building (`plan`) and
attention (`attend`) apart from the rest (linear layers, norms, RoPE). Start-up costs are
measured in fresh interpreters. Prints markdown.

    python benchmarks/profile_scorecli.py qwen3          # bench 3's workload (scorecli vs recipe)
    python benchmarks/profile_scorecli.py crossencoder   # bench 2's workload
    python benchmarks/profile_scorecli.py mis            # bench 1's workload (MIS and single)
    python benchmarks/profile_scorecli.py startup        # interpreter / import / load costs only
"""

from __future__ import annotations

import argparse
import subprocess
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import _common as C

T: dict[str, float] = defaultdict(float)


@contextmanager
def phase(name: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        T[name] += time.perf_counter() - start


def report(title: str, total_key: str | None = None) -> None:
    total = T[total_key] if total_key else sum(v for k, v in T.items() if not k.startswith(" "))
    print(f"\n#### {title}\n")
    print("| phase (indented: part of the phase above) | seconds | share of the process after imports |")
    print("|---|---:|---:|")
    for k, v in T.items():
        print(f"| {k} | {v:.2f} | {100 * v / total:.0f}% |")
    print()
    T.clear()


def fresh(code: str, repeats: int = 3) -> float:
    """Median wall seconds of `python -c code` in a fresh interpreter."""
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(
            [C.PYTHON, "-c", code], check=True, cwd=C.ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        runs.append(time.perf_counter() - start)
    return sorted(runs)[len(runs) // 2]


def startup(model: str | None = None, extra: str = "") -> None:
    print("\n#### Start-up costs (fresh interpreters, median of 3)\n")
    print("| what | seconds |")
    print("|---|---:|")
    rows = [
        ("python -c pass", "pass"),
        ("import torch", "import torch"),
        (
            "import torch, transformers (+ AutoModel classes)",
            "import torch, transformers; from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification",
        ),
        ("import scorecli.cli (what `scorecli --help` pays)", "import scorecli.cli"),
        ("import scorecli.scorer (torch, transformers, pyarrow, rich)", "import scorecli.scorer, scorecli.engine.run"),
        ("import sentence_transformers", "import sentence_transformers"),
    ]
    if model:
        rows.append(
            (
                "scorecli.Scorer(model) (imports + load)",
                f"from scorecli.scorer import Scorer; from scorecli.config import ScoreConfig; Scorer({model!r}, ScoreConfig(model={model!r}{extra}))",
            )
        )
    for name, code in rows:
        print(f"| {name} | {fresh(code):.2f} |")
    print()


# ---------------------------------------------------------------- scorecli, instrumented


def profile_scorecli(model: str, data: Path, out: Path, label: str, op_table: bool = True, **flags) -> None:
    import torch

    from scorecli.config import ScoreConfig
    from scorecli.io.readers import count_rows, iter_rows
    from scorecli.io.writers import Sink
    from scorecli.scorer import Scorer

    cfg = ScoreConfig(model=model, **flags)
    with phase("load model + tokenizer (Scorer)"):
        scorer = Scorer(model, cfg)
    with phase("count input rows (progress total)"):
        count_rows([str(data)])
    with phase("read JSONL"):
        rows = list(iter_rows([str(data)]))
    with phase("validate + tokenize + pack + plan (prepare)"):
        prepared = scorer.prepare(rows)

    fwd = scorer.forward
    backend = getattr(fwd, "backend", None)
    if backend is not None:  # decoders: time mask building and attention apart
        plan, attend = backend.plan, backend.attend

        def timed_plan(*a, **k):
            with phase("  mask + padding (backend.plan)"):
                return plan(*a, **k)

        def timed_attend(*a, **k):
            with phase("  attention (backend.attend)"):
                return attend(*a, **k)

        backend.plan, backend.attend = timed_plan, timed_attend
    lengths = [s.length for s in prepared.seqs]
    padded = sum(len(b) * max(lengths[i] for i in b) for b in prepared.batches)
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if op_table else None
    with phase("model passes (run)"):
        if prof:
            with prof:
                table = scorer.run(prepared)
        else:
            table = scorer.run(prepared)
    with phase("write Parquet (Sink)"):
        with Sink(str(out), scorer.metadata) as sink:
            sink.write(table)
    if backend is not None:
        backend.plan, backend.attend = plan, attend
        T["  rest of the model (linear, norms, RoPE, head)"] = (
            T["model passes (run)"] - T["  mask + padding (backend.plan)"] - T["  attention (backend.attend)"]
        )
    print(
        f"\n{label}: {len(prepared.seqs)} sequences in {len(prepared.batches)} batches, "
        f"{sum(lengths):,} tokens, {padded:,} padded tokens (x{padded / max(sum(lengths), 1):.2f}); "
        f"longest sequence {max(lengths)}"
    )
    report(f"{label}: phases in one process (after imports)")
    if prof:
        ops(prof, f"{label}: top torch ops inside `run` (self CPU time)")


def ops(prof, title: str, top: int = 10) -> None:
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    print(f"#### {title}\n")
    print("| op | calls | self CPU s | share |")
    print("|---|---:|---:|---:|")
    for e in events[:top]:
        print(
            f"| {e.key} | {e.count} | {e.self_cpu_time_total / 1e6:.2f} | {100 * e.self_cpu_time_total / total:.0f}% |"
        )
    print()


# ---------------------------------------------------------------- competitors, instrumented


def profile_recipe(model: str, rows: list[dict], batch_size: int) -> None:
    """The model card's recipe (qwen3_recipe_job.load_recipe) with phase timers and hooks."""
    import qwen3_recipe_job as job

    with phase("load model + tokenizer"):
        lm, process_inputs, compute_logits = job.load_recipe(model)
    pairs = [job.format_instruction(None, r["query"], d) for r in rows for d in r["items"]]

    starts: dict[str, float] = {}

    def pre(name):
        return lambda *a: starts.__setitem__(name, time.perf_counter())

    def post(name):
        return lambda *a: T.__setitem__(name, T[name] + time.perf_counter() - starts[name])

    lm.model.register_forward_pre_hook(pre("  decoder body (model.model)"))
    lm.model.register_forward_hook(post("  decoder body (model.model)"))
    lm.lm_head.register_forward_pre_hook(pre("  lm_head over every position"))
    lm.lm_head.register_forward_hook(post("  lm_head over every position"))
    real, padded = 0, 0
    for start in range(0, len(pairs), batch_size):
        with phase("tokenize + pad"):
            inputs = process_inputs(pairs[start : start + batch_size])
        real += int(inputs["attention_mask"].sum())
        padded += inputs["input_ids"].numel()
        with phase("model passes"):
            compute_logits(inputs)
    T["  other (output allocation, masks)"] = (
        T["model passes"] - T["  decoder body (model.model)"] - T["  lm_head over every position"]
    )
    print(
        f"\nrecipe: {len(pairs)} sequences in batches of {batch_size}, {real:,} tokens, "
        f"{padded:,} padded tokens (x{padded / real:.2f})"
    )
    report("recipe: phases in one process (after imports)")


def profile_st(model: str, rows: list[dict], batch_size: int) -> None:
    import torch
    from sentence_transformers import CrossEncoder

    with phase("load model + tokenizer"):
        ce = CrossEncoder(model, activation_fn=torch.nn.Identity())
    pairs = [(r["query"], i) for r in rows for i in r["items"]]
    pre = ce.preprocess

    def timed_pre(*a, **k):
        with phase("  tokenize (preprocess)"):
            return pre(*a, **k)

    ce.preprocess = timed_pre
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    with phase("predict"), prof:
        ce.predict(pairs, batch_size=batch_size, show_progress_bar=False)
    T["  model passes + rest"] = T["predict"] - T["  tokenize (preprocess)"]
    # the padding it pays: char-length sort, batches of `batch_size`, padded to each batch's longest
    lens = [len(x) for x in ce.tokenizer([p[0] for p in pairs], [p[1] for p in pairs])["input_ids"]]
    order = sorted(range(len(pairs)), key=lambda k: -(len(pairs[k][0]) + len(pairs[k][1])))
    padded = sum(
        len(order[s : s + batch_size]) * max(lens[k] for k in order[s : s + batch_size])
        for s in range(0, len(order), batch_size)
    )
    print(
        f"\nCrossEncoder: {len(pairs)} pairs in batches of {batch_size}, {sum(lens):,} tokens, "
        f"{padded:,} padded tokens (x{padded / sum(lens):.2f})"
    )
    report("CrossEncoder.predict: phases in one process (after imports)")
    ops(prof, "CrossEncoder.predict: top torch ops (self CPU time)")


# ---------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", choices=["qwen3", "crossencoder", "mis", "startup"])
    ap.add_argument("--no-ops", action="store_true", help="skip the torch op profiles")
    args, rest = ap.parse_known_args()
    work = C.workdir(f"profile-{args.workload}")
    print(f"### Profile: {args.workload} ({C.machine()}, {time.strftime('%Y-%m-%d %H:%M')})")

    if args.workload == "startup":
        startup()
        return
    if args.workload == "qwen3":
        import bench_vs_qwen3_recipe as bench

        bargs = bench.parser().parse_args(rest)
        model, rows = bench.build(bargs)
        C.write_jsonl(work / "in.jsonl", rows)
        startup(model, ", template='qwen3-reranker'")
        profile_scorecli(
            model, work / "in.jsonl", work / "a.parquet", "scorecli MIS", not args.no_ops, template="qwen3-reranker"
        )
        profile_recipe(model, rows, bargs.batch_size)
    elif args.workload == "crossencoder":
        import bench_vs_crossencoder as bench

        bargs = bench.parser().parse_args(rest)
        model, rows = bench.build(bargs, work)
        C.write_jsonl(work / "in.jsonl", rows)
        startup(model)
        profile_scorecli(model, work / "in.jsonl", work / "a.parquet", "scorecli cross-encoder", not args.no_ops)
        profile_st(model, rows, bargs.batch_size)
    else:
        import bench_mis_vs_single as bench

        bargs = bench.parser().parse_args(rest)
        model, rows = bench.build(bargs, work)
        C.write_jsonl(work / "in.jsonl", rows)
        startup(model)
        profile_scorecli(
            model, work / "in.jsonl", work / "a.parquet", "scorecli --mode mis", not args.no_ops, mode="mis"
        )
        profile_scorecli(
            model, work / "in.jsonl", work / "b.parquet", "scorecli --mode single", not args.no_ops, mode="single"
        )


if __name__ == "__main__":
    main()
