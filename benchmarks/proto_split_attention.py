"""Prototype (benchmarks only, scorecli untouched): MIS attention without the dense L x L mask.

scorecli's sdpa backend runs a packed MIS row `P I_1 ... I_n` as one dense attention over
all L = |P| + sum|I_k| tokens with an additive mask, so it computes L^2 scores per head and
layer although only the prefix's causal triangle and each item's [|I_k| x (|P| + |I_k|)] block
are allowed. This prototype backend computes exactly those blocks with two SDPA calls:
  - prefix tokens: causal attention among the (padded) prefixes, [S, H, P, P];
  - item tokens: every item as its own query block against [its row's prefix K/V ++ its own
    K/V], [N_items, H, m, P + m] with a small causal mask (m = longest item in the batch).
It plugs into a live `Scorer` by replacing `scorer.forward.backend` (same protocol as
scorecli.attention's backends), then times `Scorer.run` with both backends on the same
prepared window and checks that the scores agree.

    python benchmarks/proto_split_attention.py qwen3   # bench 3's workload (SmolLM2-135M)
    python benchmarks/proto_split_attention.py mis     # bench 1's workload (mid Qwen3)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import _common as C


class SplitBackend:
    """Exact MIS attention from a prefix block and per-item blocks (no L x L mask)."""

    name = "split-sdpa (prototype)"
    is_padded = True

    def __init__(self, dense):
        self.dense = dense  # scorecli's SdpaBackend: reuse its padded inputs and positions

    def plan(self, batch, device, dtype):
        inputs = self.dense.plan(batch, device, dtype)
        self.dense.mask = None  # not used
        s, length = batch.num_seqs, batch.max_len
        p_lens, i_lens, counts = batch.prefix_lens, batch.item_lens, batch.item_counts
        p_max = max(int(p_lens.max()), 1)
        m = max(int(i_lens.max()) if len(i_lens) else 1, 1)
        seq_of_item = np.repeat(np.arange(s), counts)
        within = np.cumsum(i_lens) - i_lens
        within -= np.repeat((np.cumsum(i_lens) - i_lens)[np.cumsum(counts) - counts], counts) if len(i_lens) else 0
        start = p_lens[seq_of_item] + within  # first token of each item within its sequence
        t = np.arange(m)
        q_valid = t[None, :] < i_lens[:, None]  # [N, m]
        q_idx = seq_of_item[:, None] * length + np.where(q_valid, start[:, None] + t[None, :], 0)
        pp = np.arange(p_max)
        p_valid = pp[None, :] < p_lens[:, None]  # [S, P]
        p_idx = np.arange(s)[:, None] * length + np.where(p_valid, pp[None, :], 0)
        k_idx = np.concatenate([p_idx[seq_of_item], q_idx], axis=1)  # [N, P + m]
        k_valid = np.concatenate([p_valid[seq_of_item], q_valid], axis=1)
        causal_items = t[None, :] <= t[:, None]  # [m, m]
        allowed_items = np.concatenate(
            [np.broadcast_to(p_valid[seq_of_item][:, None, :], (len(i_lens), m, p_max)),
             causal_items[None] & q_valid[:, None, :]], axis=2)  # fmt: skip
        allowed_items = allowed_items & k_valid[:, None, :]
        allowed_items[:, :, 0] |= ~allowed_items.any(axis=2)  # padded query rows: attend something
        allowed_prefix = (pp[None, :] <= pp[:, None])[None] & p_valid[:, None, :]
        allowed_prefix[:, :, 0] |= ~allowed_prefix.any(axis=2)
        zero, low = torch.zeros((), dtype=dtype), torch.finfo(dtype).min
        self.item_mask = torch.where(torch.from_numpy(allowed_items), zero, low)[:, None].to(device)
        self.prefix_mask = torch.where(torch.from_numpy(allowed_prefix), zero, low)[:, None].to(device)
        self.q_idx, self.k_idx, self.p_idx = (torch.from_numpy(a).to(device) for a in (q_idx, k_idx, p_idx))
        self.q_out = torch.from_numpy(q_idx[q_valid]).to(device)
        self.q_sel = torch.from_numpy(q_valid).to(device)
        self.p_out = torch.from_numpy(p_idx[p_valid]).to(device)
        self.p_sel = torch.from_numpy(p_valid).to(device)
        self.shape = (s, length)
        return inputs

    def attend(self, module, query, key, value, scaling):
        s, length = self.shape
        heads, kv, d = query.shape[1], key.shape[1], query.shape[3]
        qf = query.transpose(1, 2).reshape(s * length, heads, d)
        kf = key.transpose(1, 2).reshape(s * length, kv, d)
        vf = value.transpose(1, 2).reshape(s * length, kv, d)
        gqa = kv != heads
        out = torch.zeros(s * length, heads, d, dtype=query.dtype, device=query.device)
        # prefixes: causal among themselves
        qp, kp, vp = (x[self.p_idx].transpose(1, 2) for x in (qf, kf, vf))
        op = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=self.prefix_mask, scale=scaling, enable_gqa=gqa)
        out[self.p_out] = op.transpose(1, 2)[self.p_sel]
        # items: each against its prefix and its own earlier tokens
        qi = qf[self.q_idx].transpose(1, 2)
        ki, vi = (x[self.k_idx].transpose(1, 2) for x in (kf, vf))
        oi = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=self.item_mask, scale=scaling, enable_gqa=gqa)
        out[self.q_out] = oi.transpose(1, 2)[self.q_sel]
        return out.view(s, length, heads, d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", choices=["qwen3", "mis"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-batch-tokens", type=int, default=16384, help="scorecli's token budget per batch")
    args, rest = ap.parse_known_args()

    from scorecli.config import ScoreConfig
    from scorecli.io.readers import iter_rows
    from scorecli.scorer import Scorer

    work = C.workdir(f"proto-{args.workload}")
    if args.workload == "qwen3":
        import bench_vs_qwen3_recipe as bench

        model, rows = bench.build(bench.parser().parse_args(rest))
        flags = {"template": "qwen3-reranker"}
    else:
        import bench_mis_vs_single as bench

        model, rows = bench.build(bench.parser().parse_args(rest), work)
        flags = {"mode": "mis"}
    C.write_jsonl(work / "in.jsonl", rows)
    scorer = Scorer(model, ScoreConfig(model=model, max_batch_tokens=args.max_batch_tokens, **flags))
    prepared = scorer.prepare(list(iter_rows([str(work / "in.jsonl")])))
    dense = scorer.forward.backend
    split = SplitBackend(dense)
    times = {"dense mask (scorecli sdpa)": [], "split prefix/item blocks (prototype)": []}
    tables = {}
    for r in range(args.repeats):
        for name, backend in (list(zip(times, (dense, split))) if r % 2 == 0 else list(zip(times, (dense, split)))[::-1]):
            scorer.forward.backend = backend
            start = time.perf_counter()
            tables[name] = scorer.run(prepared)
            times[name].append(time.perf_counter() - start)
            print(f"  {name}: {times[name][-1]:.2f} s", file=sys.stderr, flush=True)
    a, b = (t.column("score").to_pylist() for t in tables.values())
    diff = C.max_abs_diff(a, b)
    print(f"\n#### Prototype: MIS attention by blocks vs the dense mask ({args.workload} workload, "
          f"`Scorer.run` in one process, --max-batch-tokens {args.max_batch_tokens}, {C.machine()})\n")
    print("| attention | median s of `Scorer.run` | runs (s) |")
    print("|---|---:|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.2f} | {', '.join(f'{x:.2f}' for x in ts)} |")
    print(f"\nMax |split - dense| score difference: {diff:.2e}.\n")


if __name__ == "__main__":
    main()
