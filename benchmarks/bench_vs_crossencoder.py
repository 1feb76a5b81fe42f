"""scorecli vs sentence-transformers CrossEncoder, whole processes, same model and pairs.

Model: the real all-MiniLM-L6-v2 encoder with a random 1-label head, saved as a BERT
cross-encoder (tests.builders.models.build_minilm_cross_encoder). Data: seeded rows of one query
(5-20 words) and `--items` items of 5-120 words each (mixed lengths), or with `--item-tokens N`
items of about N tokens each (the long-item shape).
Contender A: `scorecli score in.jsonl --out a.parquet --model M --quiet --cache-dir $WORK/cache`:
the defaults as shipped (`--runtime auto`, which runs the runtime it measured faster for this
model on this machine, and growing windows); `--cache-dir` only keeps the ONNX export and that
verdict out of ~/.cache, and both are made in A's untimed 1-row warm-up. Beside it: `--runtime
torch`, `--runtime onnx` and one fixed window of all the rows (`--window-rows ROWS`: what the
growing windows cost). Contender B: `benchmarks/st_crossencoder_job.py`
(CrossEncoder(M, activation_fn=Identity()).predict(pairs, batch_size=32), Parquet out).
Also checks every scorecli contender gives B's scores (max abs difference <= 1e-4). Goal
(issue 36): A >= 1.5x B. ONNX peers (skipped with --no-onnx):

- with `--st-onnx-python PATH` (or $SCORECLI_ST_ONNX_PYTHON): the REAL sentence-transformers
  `backend="onnx"`, run by `st_crossencoder_job.py --backend onnx --file-name ...` under PATH, an
  interpreter of the separate peer environment that `benchmarks/make_st_onnx_env.sh` builds
  (optimum does not import under the project's transformers 5). A copy of the model is exported
  once before the rounds, untimed, by `st_onnx_export.py` (ST's own helpers): fp32
  onnx/model.onnx, O3 onnx/model_O3.onnx (and with --int8, int8 onnx/model_quint8_avx2.onnx);
  each peer gets an untimed 1-row warm-up. Goal: A >= 1.5x the fastest fp32 peer (fp32 or O3).
- without it: an emulation, `ort_crossencoder_job.py` on the model's own forward exported once
  beforehand (one ORT session, length-sorted batches; needs onnxruntime here).

    python benchmarks/bench_vs_crossencoder.py [--rows 300] [--items 8] [--item-tokens 200] [--repeats 5]
        [--st-onnx-python .bench-st-onnx/bin/python] [--int8]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from dataclasses import dataclass, field

import _common as C

GOAL = 1.5  # issue 36: the defaults over sentence-transformers on torch and its fastest fp32 ONNX file


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--items", type=int, default=8)
    ap.add_argument("--min-words", type=int, default=5)
    ap.add_argument("--max-words", type=int, default=120)
    ap.add_argument("--item-tokens", type=int, default=None, help="items of about this many tokens (long-item shape)")
    ap.add_argument("--batch-size", type=int, default=32, help="CrossEncoder.predict batch size")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-onnx", action="store_true", help="leave out the ONNX Runtime contenders")
    ap.add_argument("--int8", action="store_true", help="also the int8 contenders (scorecli onnx-int8, ST's avx2 file)")
    ap.add_argument(
        "--st-onnx-python",
        default=os.environ.get("SCORECLI_ST_ONNX_PYTHON") or None,
        metavar="PATH",
        help="interpreter of the ST-ONNX peer environment (benchmarks/make_st_onnx_env.sh; default "
        "$SCORECLI_ST_ONNX_PYTHON): the ONNX peers are then sentence-transformers' own "
        "backend='onnx' instead of the emulation (ort_crossencoder_job.py)",
    )
    return ap


def make_rows(args, tokenizer) -> list[dict]:
    """Seeded rows: items of min-max words, or of about `--item-tokens` tokens (+-10%)."""
    rng, pool = random.Random(args.seed), C.word_pool()

    def item() -> str:
        if args.item_tokens:
            return C.fit_words(
                rng, pool, tokenizer, rng.randint(args.item_tokens * 9 // 10, args.item_tokens * 11 // 10)
            )
        return C.words(rng, pool, rng.randint(args.min_words, args.max_words))

    rows = []
    for r in range(args.rows):
        query = C.words(rng, pool, rng.randint(5, 20))
        rows.append({"id": r, "query": query, "items": [item() for _ in range(args.items)]})
    return rows


def scorecli_contenders(work, model: str, rows: int, onnx: bool, int8: bool) -> tuple[list, list]:
    """(contenders, [(contender, output)]): the defaults (first), --runtime torch and onnx, one window."""

    def score(name: str, out: str, *extra: str) -> tuple:
        cmd = C.scorecli_cmd(
            "score", str(work / "in.jsonl"), "--out", str(work / out), "--model", model, "--quiet",
            "--cache-dir", str(work / "cache"), *extra,
        )  # fmt: skip
        return C.Contender(name, cmd), work / out

    made = [
        score("scorecli score (defaults: --runtime auto, growing windows)", "a.parquet"),
        score("scorecli score --runtime torch", "at.parquet", "--runtime", "torch"),
        score(f"scorecli score, one window (--window-rows {rows})", "aw.parquet", "--window-rows", str(rows)),
    ]
    if onnx:
        made.append(score("scorecli score --runtime onnx", "ao.parquet", "--runtime", "onnx"))
    if onnx and int8:
        made.append(
            score("scorecli score --runtime onnx-int8 (opt-in, approximate)", "ai8.parquet", "--runtime", "onnx-int8")
        )
    return [c for c, _ in made], made


def main(argv: list[str] | None = None) -> float:
    args = parser().parse_args(argv)

    from transformers import AutoTokenizer

    from tests.builders.models import build_minilm_cross_encoder

    work = C.workdir("vs-crossencoder")
    model = build_minilm_cross_encoder(work / "model")
    tok = AutoTokenizer.from_pretrained(model)
    rows = make_rows(args, tok)
    C.write_jsonl(work / "in.jsonl", rows)
    C.write_jsonl(work / "one.jsonl", rows[:1])
    pair_lens = [len(x) for r in rows for x in tok([r["query"]] * len(r["items"]), r["items"])["input_ids"]]
    onnx_here = not args.no_onnx and C.has_module("onnxruntime")
    ours, outputs = scorecli_contenders(work, model, args.rows, onnx_here, args.int8)
    a = ours[0]
    b = C.Contender(
        "sentence-transformers CrossEncoder.predict",
        [C.PYTHON, str(C.BENCH_DIR / "st_crossencoder_job.py"), str(work / "in.jsonl"), str(work / "b.parquet"),
         model, "--batch-size", str(args.batch_size)],
    )  # fmt: skip
    a1 = C.Contender(
        "scorecli score, 1 row (start-up + load)",
        C.scorecli_cmd("score", str(work / "one.jsonl"), "--out", str(work / "a1.parquet"), "--model", model,
                       "--quiet", "--cache-dir", str(work / "cache")),
        info=True,
    )  # fmt: skip
    b1 = C.Contender(
        "CrossEncoder job, 1 row (start-up + load)",
        [C.PYTHON, str(C.BENCH_DIR / "st_crossencoder_job.py"), str(work / "one.jsonl"), str(work / "b1.parquet"),
         model, "--batch-size", str(args.batch_size)],
        info=True,
    )  # fmt: skip
    # A's 1-row warm-up exports the model and measures auto's verdict into $WORK/cache
    warmup = [a1, b1] + ([ours[-1]] if args.int8 and onnx_here else [])
    onnx = OnnxSide() if args.no_onnx else onnx_contenders(work, model, args.batch_size, args.st_onnx_python, args.int8)
    contenders = [*ours, b, a1, b1, *onnx.peers]
    C.alternate(contenders, args.repeats, work / "stderr.log", warmup=warmup + onnx.warmup)
    theirs = C.read_scores(work / "b.parquet")
    diffs = {c.name: C.max_abs_diff(C.read_scores(out), theirs) for c, out in outputs + onnx.outputs}
    ran = C.read_metadata(work / "a.parquet")

    ratio = b.median_s / a.median_s
    shape = (
        f"items of about {args.item_tokens} tokens (+-10%)"
        if args.item_tokens
        else f"items {args.min_words}-{args.max_words} words"
    )
    warmups = ["both 1-row runs (scorecli's builds its ONNX export and auto's verdict in $WORK/cache)"]
    if onnx.real:
        warmups.append("each sentence-transformers ONNX peer on 1 row")
    C.header(
        "scorecli vs sentence-transformers CrossEncoder (`bench_vs_crossencoder.py`)",
        [
            "model: all-MiniLM-L6-v2 weights + random 1-label head (BertForSequenceClassification), float32, CPU",
            f"data: {args.rows} rows x {args.items} items = {len(pair_lens)} pairs (seed {args.seed}); {shape}; "
            f"pair tokens mean {sum(pair_lens) / len(pair_lens):.1f} "
            f"(min {min(pair_lens)}, max {max(pair_lens)}), {sum(pair_lens):,} in all",
            f"CrossEncoder.predict batch_size={args.batch_size}; scorecli defaults (--max-batch-tokens: 2048 on CPU)",
            f"{args.repeats} alternating rounds; whole processes; untimed warm-ups first: " + "; ".join(warmups),
            f"the defaults ran `{ran.get('runtime')}`: {ran.get('runtime_reason')}",
            *onnx.details,
        ],
    )
    C.commands(contenders)
    C.table(contenders, b)
    window = ours[2]
    print(
        f"**scorecli (defaults) over CrossEncoder: {ratio:.2f}x** (goal >= {GOAL}x: "
        f"{'met' if ratio >= GOAL else 'NOT met'}); best-of-N ratio {b.min_s / a.min_s:.2f}x; CPU-time ratio "
        f"{b.median_cpu / a.median_cpu:.2f}x; net of each side's 1-row run: {C.net_ratio(b, b1, a, a1)}. "
        f"Growing windows against one window: {a.median_s / window.median_s:.3f}x the time (CPU "
        f"{a.median_cpu / window.median_cpu:.3f}x). Max |score - CrossEncoder|: "
        + ", ".join(f"{name} {d:.2e}" for name, d in diffs.items())
        + f" (scorecli's {'all within' if max(diffs[c.name] for c in ours) <= 1e-4 else 'NOT all within'} 1e-4).\n"
    )
    if onnx.peers:
        onnx_summary(a, onnx)
    if onnx.note:
        print(onnx.note + "\n")
    return ratio


def onnx_summary(a, onnx) -> None:
    """Issue 36's second line: scorecli's defaults over the fastest fp32 ONNX peer."""
    peer = min(onnx.fp32, key=lambda c: c.median_s)
    fastest = min(onnx.peers, key=lambda c: c.median_s)
    ratio = peer.median_s / a.median_s
    kind = "" if onnx.real else ", emulated by ort_crossencoder_job.py"
    print(
        f"**ONNX: scorecli (defaults) over the fastest fp32 ONNX peer ({peer.name}{kind}): "
        f"{ratio:.2f}x** (goal >= {GOAL}x: {'met' if ratio >= GOAL else 'NOT met'}); best-of-N ratio "
        f"{peer.min_s / a.min_s:.2f}x; CPU-time ratio {peer.median_cpu / a.median_cpu:.2f}x; fastest peer "
        f"of all: {fastest.name}.\n"
    )


@dataclass
class OnnxSide:
    """The ONNX peers, with their outputs and warm-ups."""

    peers: list = field(default_factory=list)  # the peers, fp32 ones first
    fp32: list = field(default_factory=list)  # the fp32 peers (the goal is against the fastest)
    outputs: list = field(default_factory=list)  # (contender, its Parquet) (scores checked against B's)
    warmup: list = field(default_factory=list)  # untimed runs before the rounds
    details: list = field(default_factory=list)  # header lines
    real: bool = False  # sentence-transformers' own backend="onnx" (else the emulation)
    note: str = ""  # a line printed after the results


def onnx_contenders(work, model: str, batch_size: int, st_python: str | None, int8: bool) -> OnnxSide:
    """The ONNX peers: sentence-transformers' own backend="onnx" under `st_python` (exported once,
    untimed), else the emulation (needs onnxruntime here)."""
    side = OnnxSide(real=bool(st_python))
    if st_python:
        st_onnx_peers(side, work, model, batch_size, st_python, int8)
    elif not C.has_module("onnxruntime"):
        print("(no onnxruntime: the ONNX contenders are left out)")
    else:
        emulated_peers(side, work, model, batch_size, int8)
        side.note = (
            '(ONNX peers emulated by ort_crossencoder_job.py; the real sentence-transformers backend="onnx" '
            "peers need --st-onnx-python PATH, an interpreter built by benchmarks/make_st_onnx_env.sh.)"
        )
    return side


def emulated_peers(side: OnnxSide, work, model: str, batch_size: int, int8: bool) -> None:
    """ort_crossencoder_job.py on the model's own forward exported once beforehand, fp32 (and int8)."""
    job = str(C.BENCH_DIR / "ort_crossencoder_job.py")
    export = [C.PYTHON, job, "export", model, str(work / "peer.onnx")] + (
        ["--int8", str(work / "peer8.onnx")] if int8 else []
    )
    subprocess.run(export, check=True, capture_output=True)
    files = (("fp32", "o32.parquet", "peer.onnx"), ("int8", "o8.parquet", "peer8.onnx"))
    for name, out, f in files[: 2 if int8 else 1]:
        peer = C.Contender(
            f"ONNX peer ({name}, ORT session, batch {batch_size})",
            [C.PYTHON, job, "score", str(work / "in.jsonl"), str(work / out), model, str(work / f),
             "--batch-size", str(batch_size)],
        )  # fmt: skip
        side.peers.append(peer)
        side.outputs.append((peer, work / out))
    side.fp32 = side.peers[:1]


ST_ONNX_FILES = (  # (label, file under the exported model, output, fp32?)
    ("fp32 model.onnx", "onnx/model.onnx", "so32", True),
    ("O3 model_O3.onnx", "onnx/model_O3.onnx", "so3", True),
    ("int8 model_quint8_avx2.onnx", "onnx/model_quint8_avx2.onnx", "so8", False),
)


def st_onnx_peers(
    side: OnnxSide, work, model: str, batch_size: int, st_python: str, int8: bool, embedding: bool = False
) -> None:
    """sentence-transformers' backend="onnx" in the ST-ONNX environment on a copy of the model,
    exported once (st_onnx_export.py: fp32, O3, int8 avx2) before the rounds, untimed; the
    CrossEncoder job, or with `embedding` the SentenceTransformer encode + similarity job."""
    st_python = os.path.abspath(st_python)  # not realpath: a venv's python is a symlink
    if not os.access(st_python, os.X_OK):
        raise SystemExit(f"--st-onnx-python {st_python}: not an executable (build it: benchmarks/make_st_onnx_env.sh)")
    print(f"  exporting the sentence-transformers ONNX files with {st_python} ...", file=sys.stderr, flush=True)
    st_model = str(work / "model-st-onnx")
    export = [st_python, str(C.BENCH_DIR / "st_onnx_export.py"), model, st_model] + (
        ["--embedding"] if embedding else []
    )
    proc = subprocess.run(export, capture_output=True, text=True, cwd=C.ROOT, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"st_onnx_export.py failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    code = (
        "import importlib.metadata as m, sys; print(sys.version.split()[0], *(m.version(p) for p in "
        "('sentence-transformers', 'transformers', 'optimum', 'onnxruntime', 'torch')))"
    )
    versions = subprocess.run([st_python, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    job = str(C.BENCH_DIR / ("st_embedding_job.py" if embedding else "st_crossencoder_job.py"))
    what = "SentenceTransformer encode + similarity" if embedding else "CrossEncoder"
    for label, file_name, out, fp32 in ST_ONNX_FILES:
        if not fp32 and not int8:
            continue
        cmd = [st_python, job, str(work / "in.jsonl"), str(work / f"{out}.parquet"), st_model,
               "--batch-size", str(batch_size), "--backend", "onnx", "--file-name", file_name]  # fmt: skip
        peer = C.Contender(f"sentence-transformers {what}, backend=onnx ({label})", cmd)
        side.peers.append(peer)
        side.outputs.append((peer, work / f"{out}.parquet"))
        if fp32:
            side.fp32.append(peer)
        # untimed warm-up: the same process on the 1-row input (page cache, bytecode caches)
        warm = cmd.copy()
        warm[2:4] = [str(work / "one.jsonl"), str(work / f"{out}-warm.parquet")]
        side.warmup.append(C.Contender(f"{peer.name}, 1-row warm-up", warm))
    side.details.append(
        f'ONNX peers: sentence-transformers {versions[1]} {what.split()[0]}(backend="onnx", model_kwargs={{file_name}}) '
        f"in a separate env (Python {versions[0]}, transformers {versions[2]}, optimum {versions[3]}, onnxruntime "
        f"{versions[4]}, torch {versions[5]}; `make_st_onnx_env.sh`), files exported once before the rounds, untimed, "
        "by `st_onnx_export.py` (ST's save_pretrained, export_optimized_onnx_model O3, "
        "export_dynamic_quantized_onnx_model avx2)"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
