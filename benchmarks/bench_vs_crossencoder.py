"""scorecli vs sentence-transformers CrossEncoder, whole processes, same model and pairs.

Model: the real all-MiniLM-L6-v2 encoder with a random 1-label head, saved as a BERT
cross-encoder (tests.models.build_minilm_cross_encoder). Data: seeded rows of one query
(5-20 words) and 8 items of 5-120 words each (mixed lengths).
Contender A: `scorecli score in.jsonl --out a.parquet --model M --quiet` (auto mode = one pair
per sequence for cross-encoders, raw logits). Contender B: `benchmarks/st_crossencoder_job.py`
(CrossEncoder(M, activation_fn=Identity()).predict(pairs, batch_size=32), Parquet out).
Also checks both give the same scores (max abs difference <= 1e-4). Goal: scorecli >= 1.25x.
ONNX peers (issue 21; skipped with --no-onnx or without onnxruntime): `scorecli score --runtime
onnx` (its cached export built in the untimed warm-up) beside `--runtime torch`, and
`benchmarks/ort_crossencoder_job.py` on the model's own forward exported once beforehand, fp32
and int8 (what sentence-transformers' backend="onnx" runs; optimum does not import here).

    python benchmarks/bench_vs_crossencoder.py [--rows 300] [--items 8] [--repeats 5]
"""

from __future__ import annotations

import argparse
import random
import sys

import _common as C


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--items", type=int, default=8)
    ap.add_argument("--min-words", type=int, default=5)
    ap.add_argument("--max-words", type=int, default=120)
    ap.add_argument("--batch-size", type=int, default=32, help="CrossEncoder.predict batch size")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-onnx", action="store_true", help="leave out the ONNX Runtime contenders")
    return ap


def build(args, work) -> tuple[str, list[dict]]:
    """(model folder, rows): the benchmark's model (built under `work`) and seeded data."""
    from tests.models import build_minilm_cross_encoder

    model = build_minilm_cross_encoder(work / "model")
    rng, pool = random.Random(args.seed), C.word_pool()
    rows = []
    for r in range(args.rows):
        query = C.words(rng, pool, rng.randint(5, 20))
        items = [C.words(rng, pool, rng.randint(args.min_words, args.max_words)) for _ in range(args.items)]
        rows.append({"id": r, "query": query, "items": items})
    return model, rows


def main(argv: list[str] | None = None) -> float:
    args = parser().parse_args(argv)

    from transformers import AutoTokenizer

    work = C.workdir("vs-crossencoder")
    model, rows = build(args, work)
    tok = AutoTokenizer.from_pretrained(model)
    C.write_jsonl(work / "in.jsonl", rows)
    C.write_jsonl(work / "one.jsonl", rows[:1])
    pair_lens = [len(x) for r in rows for x in tok([r["query"]] * len(r["items"]), r["items"])["input_ids"]]

    a = C.Contender("scorecli score --runtime torch", C.scorecli_cmd(
        "score", str(work / "in.jsonl"), "--out", str(work / "a.parquet"), "--model", model, "--quiet", "--runtime", "torch"))
    b = C.Contender("sentence-transformers CrossEncoder.predict", [
        C.PYTHON, str(C.BENCH_DIR / "st_crossencoder_job.py"), str(work / "in.jsonl"), str(work / "b.parquet"),
        model, "--batch-size", str(args.batch_size)])
    a1 = C.Contender("scorecli score, 1 row (start-up + load)", C.scorecli_cmd(
        "score", str(work / "one.jsonl"), "--out", str(work / "a1.parquet"), "--model", model, "--quiet"), info=True)
    b1 = C.Contender("CrossEncoder job, 1 row (start-up + load)", [
        C.PYTHON, str(C.BENCH_DIR / "st_crossencoder_job.py"), str(work / "one.jsonl"), str(work / "b1.parquet"),
        model, "--batch-size", str(args.batch_size)], info=True)  # fmt: skip
    contenders, warmup = [a, b, a1, b1], [a1, b1]
    onnx = [] if args.no_onnx else onnx_contenders(work, model, args.batch_size)
    contenders, warmup = contenders + onnx, warmup + onnx[:1]  # scorecli's export is built in the warm-up
    C.alternate(contenders, args.repeats, work / "stderr.log", warmup=warmup)
    diff = C.max_abs_diff(C.read_scores(work / "a.parquet"), C.read_scores(work / "b.parquet"))
    onnx_diffs = {c.name: C.max_abs_diff(C.read_scores(work / out), C.read_scores(work / "b.parquet"))
                  for c, out in zip(onnx, ("ao.parquet", "o32.parquet", "o8.parquet"))}  # fmt: skip

    ratio = b.median_s / a.median_s
    cpu_ratio = b.median_cpu / a.median_cpu
    min_ratio = b.min_s / a.min_s
    net = C.net_ratio(b, b1, a, a1)
    C.header(
        "2. scorecli vs sentence-transformers CrossEncoder (`bench_vs_crossencoder.py`)",
        [
            "model: all-MiniLM-L6-v2 weights + random 1-label head (BertForSequenceClassification), float32, CPU",
            f"data: {args.rows} rows x {args.items} items = {len(pair_lens)} pairs (seed {args.seed}); items "
            f"{args.min_words}-{args.max_words} words; pair tokens mean {sum(pair_lens) / len(pair_lens):.1f} "
            f"(min {min(pair_lens)}, max {max(pair_lens)}), {sum(pair_lens):,} in all",
            f"CrossEncoder.predict batch_size={args.batch_size}; scorecli defaults (--max-batch-tokens: 2048 on CPU)",
            f"{args.repeats} alternating rounds after one untimed 1-row warm-up each; whole processes",
        ],
    )
    C.commands(contenders)
    C.table(contenders, b)
    print(f"**scorecli speed-up over CrossEncoder: {ratio:.2f}x** (goal >= 1.25x: "
          f"{'met' if ratio >= 1.25 else 'NOT met'}); best-of-N ratio {min_ratio:.2f}x; CPU-time ratio {cpu_ratio:.2f}x; net of each side's 1-row run: {net}. "
          f"Max |scorecli - CrossEncoder| score difference: {diff:.2e} "
          f"({'within' if diff <= 1e-4 else 'OUTSIDE'} 1e-4).\n")
    if onnx:
        fastest = min(onnx[1:], key=lambda c: c.median_s)
        best = min((a, onnx[0]), key=lambda c: c.median_s)
        print(f"**ONNX: fastest scorecli ({best.name}) over the fp32 ONNX peer: {onnx[1].median_s / best.median_s:.2f}x** "
              f"(issue 21's goal >= 1.25x: {'met' if onnx[1].median_s / best.median_s >= 1.25 else 'NOT met'}); "
              f"fastest peer: {fastest.name}. Max |score - CrossEncoder|: "
              + ", ".join(f"{name} {d:.2e}" for name, d in onnx_diffs.items()) + "\n")
    return ratio


def onnx_contenders(work, model: str, batch_size: int) -> list:
    """[scorecli --runtime onnx, ONNX peer fp32, ONNX peer int8]; [] without onnxruntime."""
    import subprocess

    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        print("(no onnxruntime: the ONNX contenders are left out)")
        return []
    job = str(C.BENCH_DIR / "ort_crossencoder_job.py")
    subprocess.run([C.PYTHON, job, "export", model, str(work / "peer.onnx"), "--int8", str(work / "peer8.onnx")],
                   check=True, capture_output=True)  # fmt: skip
    ao = C.Contender("scorecli score --runtime onnx", C.scorecli_cmd(
        "score", str(work / "in.jsonl"), "--out", str(work / "ao.parquet"), "--model", model, "--quiet",
        "--runtime", "onnx", "--cache-dir", str(work / "cache")))  # fmt: skip
    peers = [C.Contender(f"ONNX peer ({name}, ORT session, batch {batch_size})", [
        C.PYTHON, job, "score", str(work / "in.jsonl"), str(work / out), model, str(work / f), "--batch-size", str(batch_size)])
        for name, out, f in (("fp32", "o32.parquet", "peer.onnx"), ("int8", "o8.parquet", "peer8.onnx"))]  # fmt: skip
    return [ao, *peers]


if __name__ == "__main__":
    main(sys.argv[1:])
