"""GPU throughput of scorecli's attention backends on a Qwen3-0.6B-sized random classifier.

Builds once (cached in --model-dir) a random `Qwen3ForSequenceClassification` with
Qwen3-0.6B's shapes (hidden 1024, MLP 3072, 28 layers, 16 query / 8 KV heads of 128, vocab
151,936) and a local tokenizer, then times in one process, in bfloat16, with the Scorer the
CLI uses (`scorecli.bench.time_scorer`: one warm-up, median of --repeats, CUDA synchronized):

  1. "issue" workload: rows of a 128-token query and 32 items of 32 tokens, each backend in
     MIS and single-item mode: items/s, tokens/s, and the fraction of the GPU's bf16 FLOP
     peak reached, 2 x non-embedding parameters x tokens / time (attention's own FLOPs are
     not counted, so the fraction is a lower bound);
  2. "8k" workload: MIS sequences of 8,128 tokens (a 128-token query and 250 items of 32
     tokens) with flashinfer (paged MIS mode and the custom-mask fallback), sdpa as scorecli
     runs it (by blocks) and sdpa with the dense [L, L] mask.

A backend that fails (not installed, a kernel error) is reported as such; the others still
run. Prints a markdown section for benchmarks/RESULTS.md and writes it, with JSON, to --out.

    python benchmarks/bench_gpu.py --out $OUT              # on a GPU machine (gpu_session.sh)
    python benchmarks/bench_gpu.py --quick --device cpu    # smoke test: tiny model, CPU
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from scorecli.bench import Workload, device_peak_tflops, non_embedding_params, synthetic_rows, time_scorer  # noqa: E402
from scorecli.config import ScoreConfig  # noqa: E402

QWEN3_06B = {
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151_936,
    "max_position_embeddings": 40_960,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "initializer_range": 0.02,
}
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 2000,
    "max_position_embeddings": 16_384,
}

# (label, --attention, backend override): the override replaces the backend the Scorer built
VARIANTS = {
    "flashinfer": ("flashinfer", None),
    "flashinfer-custom": ("flashinfer", lambda: _flashinfer(mis_kernel="custom")),
    "flex": ("flex", None),
    "sdpa": ("sdpa", None),
    "sdpa-dense": ("sdpa", lambda: _sdpa(blocks="never")),
}


def _flashinfer(**kw):
    from scorecli.attention.flashinfer import FlashInferBackend

    return FlashInferBackend(**kw)


def _sdpa(**kw):
    from scorecli.attention.dense import SdpaBackend

    return SdpaBackend(**kw)


def build_model(model_dir: Path, sizes: dict) -> str:
    """The random classifier, built and saved once (a marker file says it is complete)."""
    done = model_dir / ".complete"
    if done.exists():
        return str(model_dir)
    from tests.builders.models import build_qwen3_seq_cls

    build_qwen3_seq_cls(model_dir, num_labels=1, _base=sizes)
    done.touch()
    return str(model_dir)


def run_case(loaded, cfg: ScoreConfig, variant: str, mode: str, work: Workload, repeats: int, peak, params) -> dict:
    from scorecli.scorer import Scorer

    attention, override = VARIANTS[variant]
    out = {"workload": dataclasses.asdict(work), "variant": variant, "mode": mode}
    try:
        scorer = Scorer(loaded, dataclasses.replace(cfg, attention=attention, mode=mode))
        if override is not None:
            scorer.forward.backend = override()
        rows = synthetic_rows(work, loaded.model.get_input_embeddings().num_embeddings)
        if loaded.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(loaded.device)
        seconds, tokens = time_scorer(scorer, rows, repeats, loaded.device)
        items = work.rows * work.items
        out.update(
            seconds=seconds,
            tokens=tokens,
            items_per_s=items / seconds,
            tokens_per_s=tokens / seconds,
            flop_fraction=(2.0 * params * tokens / seconds) / (peak * 1e12) if peak else None,
        )
        if loaded.device.type == "cuda":
            out["peak_gib"] = torch.cuda.max_memory_allocated(loaded.device) / 2**30
    except Exception as exc:  # noqa: BLE001 - one failing backend must not hide the others
        out["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        traceback.print_exc()
    print(json.dumps(out), flush=True)
    return out


def markdown(results: list[dict], header: str) -> str:
    lines = [
        header,
        "",
        "| workload | backend | mode | tokens | s (median) | items/s | tokens/s | FLOP fraction | peak GiB |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        w = r["workload"]
        name = f"{w['rows']} x ({w['query_tokens']} + {w['items']} x {w['item_tokens']})"
        if "error" in r:
            lines.append(f"| {name} | {r['variant']} | {r['mode']} | failed: {r['error']} | | | | | |")
            continue
        frac = f"{r['flop_fraction']:.1%}" if r.get("flop_fraction") is not None else "n/a"
        gib = f"{r['peak_gib']:.2f}" if "peak_gib" in r else "n/a"
        lines.append(
            f"| {name} | {r['variant']} | {r['mode']} | {r['tokens']:,} | {r['seconds']:.4f} | "
            f"{r['items_per_s']:,.0f} | {r['tokens_per_s']:,.0f} | {frac} | {gib} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model-dir", default="/tmp/scorecli-qwen3-0.6b-random")
    ap.add_argument("--rows", type=int, default=128, help="rows of the issue workload")
    ap.add_argument("--long-rows", type=int, default=16, help="rows of the 8k workload")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", choices=["issue", "8k"], help="run one workload")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of " + ",".join(VARIANTS))
    ap.add_argument("--quick", action="store_true", help="tiny model, few rows: checks the script runs")
    ap.add_argument("--out", help="folder for gpu_bench.md and gpu_bench.json")
    args = ap.parse_args()

    from scorecli.model.load import load_model
    from scorecli.stderr import quiet_transformers

    quiet_transformers()
    sizes = TINY if args.quick else QWEN3_06B
    model_dir = Path(args.model_dir + ("-tiny" if args.quick else ""))
    path = build_model(model_dir, sizes)
    cfg = ScoreConfig(model=path, device=args.device, dtype="bfloat16", share_prefix=False)
    loaded = load_model(cfg)
    peak = device_peak_tflops(loaded.device)
    params = non_embedding_params(loaded.model)
    variants = [v for v in args.variants.split(",") if v]
    if unknown := set(variants) - set(VARIANTS):
        ap.error(f"unknown variants: {sorted(unknown)}")
    rows, long_rows = (4, 2) if args.quick else (args.rows, args.long_rows)
    issue = Workload(rows=rows, items=32, query_tokens=128, item_tokens=32)
    long = Workload(rows=long_rows, items=250, query_tokens=128, item_tokens=32)
    results = []
    if args.only in (None, "issue"):
        for variant in [v for v in variants if v != "flashinfer-custom"]:
            for mode in ("mis", "single"):
                results.append(run_case(loaded, cfg, variant, mode, issue, args.repeats, peak, params))
    if args.only in (None, "8k"):
        for variant in [v for v in variants if v != "flex"]:
            results.append(run_case(loaded, cfg, variant, "mis", long, args.repeats, peak, params))

    name = torch.cuda.get_device_name(loaded.device) if loaded.device.type == "cuda" else "CPU"
    versions = f"torch {torch.__version__}"
    try:
        import flashinfer

        versions += f", flashinfer {flashinfer.__version__}"
    except ImportError:
        versions += ", flashinfer not installed"
    header = (
        f"### {dt.date.today()}: {name}, Qwen3-0.6B-sized random classifier "
        f"({'tiny' if args.quick else f'{params / 1e6:.0f}M non-embedding parameters'}), bfloat16\n\n"
        f"{versions}; peak bf16 {peak or 'n/a'} TFLOP/s; median of {args.repeats} after a warm-up; "
        f"`python benchmarks/bench_gpu.py`."
    )
    text = markdown(results, header)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu_bench.md").write_text(text)
        (out / "gpu_bench.json").write_text(
            json.dumps({"device": name, "versions": versions, "results": results}, indent=2)
        )
    return 1 if any("error" in r for r in results if r["variant"] in ("sdpa", "sdpa-dense")) else 0


if __name__ == "__main__":
    raise SystemExit(main())
