"""scorecli (MIS, qwen3-reranker template) vs the official Qwen3-Reranker transformers recipe.

Model: the real SmolLM2-135M-Instruct (the bundled demo GGUF), through the dequantized
safetensors folder that scorecli caches (`scorecli.model.gguf.materialize`), so both contenders
load the same plain HF checkpoint. Data: seeded rows of one query (8-16 words) and 24 items
of 20-60 words each.
Contender A: `scorecli score in.jsonl --out a.parquet --model FOLDER --template qwen3-reranker
--quiet` (MIS). Contender B: `benchmarks/qwen3_recipe_job.py` (the model card's code, batches
of 8, left padding). Also checks both give the same yes-probabilities (max abs diff <= 1e-3).
Goal: scorecli >= 3x faster.

    python benchmarks/bench_vs_qwen3_recipe.py [--rows 64] [--items 24] [--repeats 2]

64 rows by default (about 35 minutes here): each process first pays ~10 s of start-up on
this CPU, which a 16-row file (a 60-70 s scorecli job) cannot amortize; `--rows 16
--repeats 5` reproduces the smaller figure in RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import random
import sys

import _common as C


def model_folder() -> str:
    from scorecli.model.default_model import default_model_path
    from scorecli.model.gguf import materialize

    gguf = default_model_path()
    return materialize(os.path.dirname(gguf), os.path.basename(gguf), None)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--items", type=int, default=24)
    ap.add_argument("--min-words", type=int, default=20)
    ap.add_argument("--max-words", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=8, help="the recipe's batch size")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def build(args) -> tuple[str, list[dict]]:
    """(model folder, rows): the benchmark's model and seeded data."""
    model = model_folder()
    rng, pool = random.Random(args.seed), C.word_pool()
    rows = []
    for r in range(args.rows):
        query = C.words(rng, pool, rng.randint(8, 16)) + "?"
        items = [C.words(rng, pool, rng.randint(args.min_words, args.max_words)) + "." for _ in range(args.items)]
        rows.append({"id": r, "query": query, "items": items})
    return model, rows


def main(argv: list[str] | None = None) -> float:
    args = parser().parse_args(argv)

    from transformers import AutoTokenizer

    model, rows = build(args)
    work = C.workdir("vs-qwen3-recipe")
    tok = AutoTokenizer.from_pretrained(model)
    C.write_jsonl(work / "in.jsonl", rows)
    C.write_jsonl(work / "one.jsonl", [{"id": 0, "query": rows[0]["query"], "items": rows[0]["items"][:1]}])
    q_stats = C.token_stats(tok, [r["query"] for r in rows])
    i_stats = C.token_stats(tok, [" " + i for r in rows for i in r["items"]])

    def a_cmd(inp: str, out: str) -> list[str]:
        return C.scorecli_cmd(
            "score",
            str(work / inp),
            "--out",
            str(work / out),
            "--model",
            model,
            "--template",
            "qwen3-reranker",
            "--quiet",
        )

    def b_cmd(inp: str, out: str) -> list[str]:
        return [
            C.PYTHON,
            str(C.BENCH_DIR / "qwen3_recipe_job.py"),
            str(work / inp),
            str(work / out),
            model,
            "--batch-size",
            str(args.batch_size),
        ]

    a = C.Contender("scorecli score --template qwen3-reranker (MIS)", a_cmd("in.jsonl", "a.parquet"))
    b = C.Contender(f"Qwen3-Reranker recipe (transformers, batch {args.batch_size})", b_cmd("in.jsonl", "b.parquet"))
    a1 = C.Contender("scorecli, 1 row x 1 item (start-up + load)", a_cmd("one.jsonl", "a1.parquet"), info=True)
    b1 = C.Contender("recipe, 1 row x 1 item (start-up + load)", b_cmd("one.jsonl", "b1.parquet"), info=True)
    contenders = [a, b, a1, b1]
    C.alternate(contenders, args.repeats, work / "stderr.log", warmup=[a1, b1])
    diff = C.max_abs_diff(C.read_scores(work / "a.parquet"), C.read_scores(work / "b.parquet"))

    work = forward_work(model, work / "in.jsonl", rows, args.batch_size)
    ratio = b.median_s / a.median_s
    cpu_ratio = b.median_cpu / a.median_cpu
    min_ratio = b.min_s / a.min_s
    net = C.net_ratio(b, b1, a, a1)
    C.header(
        "3. scorecli vs the Qwen3-Reranker recipe (`bench_vs_qwen3_recipe.py`)",
        [
            "model: SmolLM2-135M-Instruct (bundled Q4_1 GGUF, dequantized safetensors folder cached by scorecli), "
            "float32, CPU",
            f"data: {args.rows} rows x {args.items} items = {args.rows * args.items} items (seed {args.seed}); "
            f"query tokens mean {q_stats[0]:.1f}; item tokens mean {i_stats[0]:.1f} (min {i_stats[1]}, "
            f"max {i_stats[2]}); the template adds ~{_template_tokens(tok)} prompt tokens per (query, item)",
            f"{args.repeats} alternating rounds after one untimed 1-row warm-up each; whole processes",
            work.describe(),
        ],
    )
    C.commands(contenders)
    C.table(contenders, b)
    print(
        f"**scorecli speed-up over the recipe: {ratio:.2f}x** (goal >= 3x: {'met' if ratio >= 3 else 'NOT met'}); best-of-N ratio {min_ratio:.2f}x; CPU-time ratio {cpu_ratio:.2f}x; "
        f"net of each side's 1-row run: {net}. Max |scorecli - recipe| yes-probability difference: "
        f"{diff:.2e} ({'within' if diff <= 1e-3 else 'OUTSIDE'} 1e-3). "
        f"Ceiling at equal FLOP/s (the recipe's model time divided by {work.ratio:.2f}, each side's measured "
        f"start-up): {work.ceiling(a1.median_s, b.median_s, b1.median_s):.2f}x.\n"
    )
    return ratio


class Work:
    """Linear-layer FLOPs of the two contenders' forward passes over this data."""

    def __init__(
        self,
        body: float,
        head: float,
        recipe_tokens: int,
        mis_tokens: int,
        read_rows: int,
        mlp: float,
        layers: int,
        shared: int = 0,
    ):
        self.body, self.head = body, head  # FLOPs per token: decoder layers; the LM head
        self.recipe_tokens, self.mis_tokens = recipe_tokens, mis_tokens
        self.recipe = recipe_tokens * (body + head)  # the recipe computes logits at every position
        # scorecli: every MIS token through every layer but the last layer's MLP, run at the read rows only
        self.mis = mis_tokens * body - (mis_tokens - read_rows) * mlp
        self.layers, self.shared = layers, shared
        self.ratio = self.recipe / self.mis

    def describe(self) -> str:
        return (
            f"forward work (linear layers, 2 FLOPs per multiply-add): the recipe {self.recipe_tokens:,} padded "
            f"tokens x ({self.body / 1e6:.1f} MFLOP in the {self.layers} layers + {self.head / 1e6:.1f} MFLOP "
            f"of LM head) = {self.recipe / 1e12:.2f} TFLOP; scorecli {self.mis_tokens:,} MIS tokens (the "
            f"{self.shared}-token shared prompt counted once) x "
            f"{self.body / 1e6:.1f} MFLOP, less the last layer's MLP away from the item ends = "
            f"{self.mis / 1e12:.2f} TFLOP: the recipe does {self.ratio:.2f}x the work (attention excluded)"
        )

    def ceiling(self, a1: float, b: float, b1: float) -> float:
        """Whole-process speed-up if scorecli ran its FLOPs exactly as fast as the recipe runs its own."""
        return b / (a1 + (b - b1) / self.ratio)


def forward_work(model: str, data, rows: list[dict], batch_size: int) -> Work:
    """Token counts from each side's own code: scorecli's packing and the recipe's padding."""
    import qwen3_recipe_job as job
    from transformers import AutoConfig

    from scorecli.io.readers import iter_rows
    from scorecli.scorer import Scorer

    prepared = Scorer(model, template="qwen3-reranker").prepare(list(iter_rows([str(data)])))
    shared = len(prepared.shared)  # the shared prompt runs once for the window (one window here)
    mis_tokens = sum(s.length for s in prepared.seqs) + shared
    read_rows = sum(len(s.item_lens) for s in prepared.seqs)
    _, process_inputs, _ = job.load_recipe(model)
    pairs = [job.format_instruction(r.get("instruction"), r["query"], d) for r in rows for d in r["items"]]
    recipe_tokens = sum(
        process_inputs(pairs[i : i + batch_size])["input_ids"].numel() for i in range(0, len(pairs), batch_size)
    )
    c = AutoConfig.from_pretrained(model)
    h, heads, kv = c.hidden_size, c.num_attention_heads, c.num_key_value_heads
    d = getattr(c, "head_dim", None) or h // heads
    mlp = 3 * h * c.intermediate_size
    per_layer = 2 * h * heads * d + 2 * h * kv * d + mlp  # q and o, k and v, gate/up/down
    return Work(
        2 * per_layer * c.num_hidden_layers,
        2 * h * c.vocab_size,
        recipe_tokens,
        mis_tokens,
        read_rows,
        2 * mlp,
        c.num_hidden_layers,
        shared,
    )


def _template_tokens(tok) -> int:
    from scorecli.core.templates import DEFAULT_INSTRUCTION, QWEN3_ITEM, QWEN3_PREFIX

    text = QWEN3_PREFIX.replace("{instruction}", DEFAULT_INSTRUCTION).replace("{query}", "") + QWEN3_ITEM.replace(
        "{item}", ""
    )
    return len(tok(text, add_special_tokens=False)["input_ids"])


if __name__ == "__main__":
    main(sys.argv[1:])
