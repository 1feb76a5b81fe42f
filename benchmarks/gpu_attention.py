"""flashinfer's MIS plans side by side on one GPU: attention alone, Qwen3-0.6B's heads, bf16.

Decides which plan `--attention flashinfer` runs for multi-item batches (`paged`, the kernel's
own MIS mask over pages of one token, or `cascade`, two ragged plans merged; see
scorecli/attention/flashinfer.py). For each shape, one batch of about `--tokens` tokens is
packed as scorecli packs it (query + items, no delimiters), q/k/v are random bf16 with
Qwen3-0.6B's heads (16 query heads, 8 KV heads, head size 128), and each plan runs `--layers`
attention calls after its plan(), timed with CUDA events around all of them (one sync). Printed
per plan: ms per attention call, the useful work's rate (4 x heads x head size x the keys each
query may see, per call), and the largest difference from the `paged` plan's output. Then the
norms a layer runs eagerly (scorecli/runtimes/fused_norms.py): transformers' Qwen3RMSNorm and
`rms_norm` on the same activations (a layer norm over 1,024 and a per-head norm over 128), ms per
call and the largest difference.

    python benchmarks/gpu_attention.py --out $OUT      # on the GPU machine (gpu_session.sh compare)
    python benchmarks/gpu_attention.py --dry           # CPU, flashinfer's stand-in (tests/), tiny
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from scorecli.core.batching import collate  # noqa: E402
from scorecli.core.pack import EncodedRow, pack_row  # noqa: E402

SHAPES = {"sglang": (120, 10, 180), "passage": (16, 20, 160)}  # query tokens, items, item tokens (+-20%)
HEADS, KV_HEADS, HEAD_DIM = 16, 8, 128


def batch_of(shape: str, tokens: int, seed: int):
    rng = np.random.default_rng(seed)
    query, n_items, item = SHAPES[shape]
    seqs, total = [], 0
    while total < tokens:
        lens = [int(item * rng.uniform(0.8, 1.2)) for _ in range(n_items)]
        row = EncodedRow(rng.integers(5, 1000, query), [rng.integers(5, 1000, n) for n in lens])
        new = pack_row(row, len(seqs), mis=True, max_seq_len=100_000)
        seqs += new
        total += sum(s.length for s in new)
    return collate(seqs)


def useful_flop(batch) -> float:
    """4 x heads x head size x (keys each query may see under the MIS rule), one call."""
    seen = sum(int(p) * (int(p) + 1) // 2 for p in batch.prefix_lens)  # prefixes: causal
    for n, s in zip(batch.item_lens, np.repeat(np.arange(batch.num_seqs), batch.item_counts)):
        n = int(n)
        seen += n * int(batch.prefix_lens[s]) + n * (n + 1) // 2
    return 4.0 * HEADS * HEAD_DIM * seen


def run_plan(kernel: str, batch, q, k, v, layers: int, cuda: bool) -> tuple[float, torch.Tensor]:
    from scorecli.attention.flashinfer import FlashInferBackend

    backend = FlashInferBackend(kernel)
    backend.plan(batch, q.device, q.dtype)
    out = backend.attend(None, q, k, v, HEAD_DIM**-0.5)  # plan() and a first call, untimed
    if cuda:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t0 = time.perf_counter()
    for _ in range(layers):
        out = backend.attend(None, q, k, v, HEAD_DIM**-0.5)
    if cuda:
        end.record()
        torch.cuda.synchronize()
        ms = start.elapsed_time(end) / layers
    else:
        ms = (time.perf_counter() - t0) * 1e3 / layers
    return ms, out


def warm_up(plans: list[str], device: torch.device) -> dict:
    """Each plan once on a small batch, all at once: a fresh machine JIT-compiles each plan's
    flashinfer modules (a minute or more each), and the builds run side by side this way."""
    from concurrent.futures import ThreadPoolExecutor

    batch = batch_of("sglang", 2000, seed=9)

    def one(plan: str) -> str:
        q = torch.randn(1, HEADS, batch.num_tokens, HEAD_DIM, device=device, dtype=torch.bfloat16)
        k = torch.randn(1, KV_HEADS, batch.num_tokens, HEAD_DIM, device=device, dtype=torch.bfloat16)
        try:
            run_plan(plan, batch, q, k, k, 1, device.type == "cuda")
        except Exception as exc:  # noqa: BLE001 (reported; the timed run reports it again)
            return f"{type(exc).__name__}: {exc}"[:200]
        return "ok"

    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(plans)) as pool:
        outcome = dict(zip(plans, pool.map(one, plans)))
    rec = {"warm_up_s": round(time.perf_counter() - t0, 1), "outcome": outcome}
    print(json.dumps(rec), flush=True)
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="folder for attention.jsonl")
    ap.add_argument("--dry", action="store_true", help="CPU, flashinfer's pure-torch stand-in, small")
    ap.add_argument("--tokens", type=int, default=65_536)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--plans", default="paged,cascade")
    args = ap.parse_args()
    if args.dry:
        import pytest

        from tests import fake_flashinfer

        fake_flashinfer.install(pytest.MonkeyPatch())
        args.tokens, args.layers = min(args.tokens, 3000), min(args.layers, 2)  # the stand-in is slow
    cuda = not args.dry
    device = torch.device("cuda" if cuda else "cpu")
    records = [warm_up(args.plans.split(","), device)]
    for n, shape in enumerate(SHAPES):
        batch = batch_of(shape, args.tokens, seed=n)
        gen = torch.Generator(device=device).manual_seed(n)
        q = torch.randn(1, HEADS, batch.num_tokens, HEAD_DIM, device=device, dtype=torch.bfloat16, generator=gen)
        k = torch.randn(1, KV_HEADS, batch.num_tokens, HEAD_DIM, device=device, dtype=torch.bfloat16, generator=gen)
        v = torch.randn(1, KV_HEADS, batch.num_tokens, HEAD_DIM, device=device, dtype=torch.bfloat16, generator=gen)
        flop, first = useful_flop(batch), None
        for plan in args.plans.split(","):
            try:
                ms, out = run_plan(plan, batch, q, k, v, args.layers, cuda)
            except Exception as exc:  # noqa: BLE001 (a plan that fails is a result: it is reported)
                rec = {"shape": shape, "plan": plan, "error": f"{type(exc).__name__}: {exc}"[:300]}
            else:
                diff = None if first is None else float((out.float() - first.float()).abs().max())
                first = out if first is None else first
                rec = {
                    "shape": shape,
                    "plan": plan,
                    "tokens": batch.num_tokens,
                    "seqs": batch.num_seqs,
                    "ms_per_call": round(ms, 3),
                    "useful_tflops": round(flop / (ms / 1e3) / 1e12, 1),
                    "max_abs_diff_vs_first": diff,
                }
            records.append(rec)
            print(json.dumps(rec), flush=True)
            if args.out:
                Path(args.out).mkdir(parents=True, exist_ok=True)
                with (Path(args.out) / "attention.jsonl").open("a") as f:
                    f.write(json.dumps(rec) + "\n")
    records += norms(args.tokens, device, args.out)
    return 0 if all("error" not in r for r in records[1:]) else 1


@torch.inference_mode()
def norms(tokens: int, device: torch.device, out: str | None) -> list[dict]:
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    records = []
    for what, shape in (("layer norm", (tokens, 1024)), ("per-head norm", (tokens, HEADS, HEAD_DIM))):
        x = torch.randn(*shape, device=device, dtype=torch.bfloat16)
        norm = Qwen3RMSNorm(shape[-1], eps=1e-6).to(device, torch.bfloat16)
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5)
        rec: dict = {"norm": what, "shape": list(shape)}
        own = functools.partial(norm, x)
        fused = functools.partial(torch.nn.functional.rms_norm, x, (shape[-1],), norm.weight, 1e-6)
        for name, fn in (("transformers", own), ("rms_norm", fused)):
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(20):
                y = fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            rec[f"{name}_ms"] = round((time.perf_counter() - t0) * 1e3 / 20, 3)
            rec.setdefault("outputs", []).append(y)
        a, b = rec.pop("outputs")
        rec["max_abs_diff"] = float((a.float() - b.float()).abs().max())
        records.append(rec)
        print(json.dumps(rec), flush=True)
        if out:
            with (Path(out) / "attention.jsonl").open("a") as f:
                f.write(json.dumps(rec) + "\n")
    return records


if __name__ == "__main__":
    raise SystemExit(main())
