"""MIS vs single-item scoring on recurrent hybrids (issue 42), in one process, same rows.

Models: random mid-size classifiers shaped like Qwen3.5 (gated delta-net layers, 3 of every 4,
and full attention) and Jamba (Mamba-1 layers with one attention layer in 4, a mixture of
experts every other layer); hidden 384, 8 layers. Data: seeded pre-tokenized rows; the default
shape is sglang's (a 120-token query, 10 items of 160-200 tokens); `--query-tokens 80 --items
32 --item-tokens 20` is bench_mis_vs_single's. Each Scorer is built once and warmed up; the
modes then alternate, `--repeats` times. Printed: seconds per run (best, median), the speed-up
(single over MIS, medians), and the forward-token ratio, the most that computing each query
once can save. The machine is shared: read ratios, not seconds. On a GPU machine the Scorers
run on CUDA in its default dtype (bf16), with the kernels transformers uses there
(`gpu_session.sh forks` runs it with `--rows 64`).

    python benchmarks/bench_forks.py [--models qwen3_5 jamba] [--rows 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MID = {"hidden_size": 384, "intermediate_size": 1024, "num_attention_heads": 6, "num_key_value_heads": 2}


def build(name: str, out: Path) -> str:
    """A seeded random mid-size classifier of `name` (qwen3_5 or jamba), saved with the tests' tokenizer."""
    import torch
    import transformers

    from tests.builders.families import tokenizer
    from tests.builders.models import _save

    tok = tokenizer()
    common = dict(MID, vocab_size=len(tok), pad_token_id=tok.pad_token_id, num_labels=1, num_hidden_layers=8)
    if name == "qwen3_5":
        config = transformers.Qwen3_5TextConfig(
            **common,
            head_dim=64,
            layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 2,
            linear_num_key_heads=4,
            linear_num_value_heads=8,
            linear_key_head_dim=64,
            linear_value_head_dim=64,
            max_position_embeddings=4096,
        )
        cls = transformers.Qwen3_5ForSequenceClassification
    else:
        config = transformers.JambaConfig(
            **common,
            attn_layer_period=4,
            attn_layer_offset=2,
            expert_layer_period=2,
            expert_layer_offset=1,
            num_experts=4,
            num_experts_per_tok=2,
            mamba_d_state=16,
            mamba_d_conv=4,
            mamba_expand=2,
            mamba_dt_rank=24,
        )
        cls = transformers.JambaForSequenceClassification
    torch.manual_seed(0)
    return _save(cls(config).eval(), tok, out / name)


def rows(n: int, query: int, items: int, item_tokens: int, seed: int = 0, spread: int = 20) -> list[dict]:
    """Seeded pre-tokenized rows: `query` tokens, `items` items of item_tokens +- spread (at least 1)."""
    rng = np.random.default_rng(seed)
    spread = min(spread, item_tokens - 1)
    return [
        {
            "query_ids": rng.integers(5, 1000, size=query).tolist(),
            "item_ids": [
                rng.integers(5, 1000, size=int(rng.integers(item_tokens - spread, item_tokens + spread + 1))).tolist()
                for _ in range(items)
            ],
        }
        for _ in range(n)
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["qwen3_5", "jamba"])
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--query-tokens", type=int, default=120)
    ap.add_argument("--items", type=int, default=10)
    ap.add_argument("--item-tokens", type=int, default=180)
    ap.add_argument("--item-spread", type=int, default=20, help="items of --item-tokens +- this many tokens")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    import torch

    from scorecli import Scorer
    from tests.test_invariance import raw_rows

    work = Path("/tmp/scorecli-bench/forks")
    data = rows(args.rows, args.query_tokens, args.items, args.item_tokens, spread=args.item_spread)
    tokens_single = sum(len(r["query_ids"]) + len(i) for r in data for i in r["item_ids"])
    tokens_mis = sum(len(r["query_ids"]) + sum(len(i) for i in r["item_ids"]) for r in data)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.rows} rows x ({args.query_tokens} + "
        f"{args.items} x {args.item_tokens} +- {args.item_spread}); forward tokens: single {tokens_single}, MIS {tokens_mis} "
        f"(ratio {tokens_single / tokens_mis:.2f}x)"
    )
    for name in args.models:
        path = build(name, work)
        scorers = {mode: Scorer(path, mode=mode, self_check=False) for mode in ("mis", "single")}
        scores = {mode: s.score_rows(raw_rows(data))["scores"].to_pylist() for mode, s in scorers.items()}  # warm-up
        diff = max(float(np.abs(np.subtract(a, b)).max()) for a, b in zip(scores["mis"], scores["single"]))
        times: dict[str, list[float]] = {"mis": [], "single": []}
        for _ in range(args.repeats):
            for mode, scorer in scorers.items():
                start = time.perf_counter()
                scorer.score_rows(raw_rows(data))
                times[mode].append(time.perf_counter() - start)
        med = {m: statistics.median(t) for m, t in times.items()}
        print(
            f"{name}: MIS {min(times['mis']):.2f} s best / {med['mis']:.2f} median, single {min(times['single']):.2f} / "
            f"{med['single']:.2f}; speed-up {med['single'] / med['mis']:.2f}x (best {min(times['single']) / min(times['mis']):.2f}x); "
            f"max |MIS - single| {diff:.2g}; modes {scorers['mis'].metadata['mode']}/{scorers['single'].metadata['mode']}; "
            f"{scorers['mis'].metadata['device']}, {scorers['mis'].metadata['dtype']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
