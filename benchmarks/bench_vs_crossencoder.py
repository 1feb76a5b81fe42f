"""scorecli vs sentence-transformers CrossEncoder, whole processes, same model and pairs.

Model: the real all-MiniLM-L6-v2 encoder with a random 1-label head, saved as a BERT
cross-encoder (tests.models.build_minilm_cross_encoder). Data: seeded rows of one query
(5-20 words) and 8 items of 5-120 words each (mixed lengths).
Contender A: `scorecli score in.jsonl --out a.parquet --model M --quiet` (auto mode = one pair
per sequence for cross-encoders, raw logits). Contender B: `benchmarks/st_crossencoder_job.py`
(CrossEncoder(M, activation_fn=Identity()).predict(pairs, batch_size=32), Parquet out).
Also checks both give the same scores (max abs difference <= 1e-4). Goal: scorecli >= 1.25x.
ONNX contenders (issue 21; skipped with --no-onnx): `scorecli score --runtime onnx` (needs
onnxruntime; its cached export built in the untimed warm-up) beside `--runtime torch`, and ONNX peers:

- with `--st-onnx-python PATH` (or $SCORECLI_ST_ONNX_PYTHON): the REAL sentence-transformers
  `backend="onnx"`, run by `st_crossencoder_job.py --backend onnx --file-name ...` under PATH, an
  interpreter of the separate peer environment that `benchmarks/make_st_onnx_env.sh` builds
  (optimum does not import under the project's transformers 5). A copy of the model is exported
  once before the rounds, untimed, by `st_onnx_export.py` (ST's own helpers): fp32
  onnx/model.onnx, O3 onnx/model_O3.onnx, int8 onnx/model_quint8_avx2.onnx; each peer gets an
  untimed 1-row warm-up. Issue 21's goal: the fastest scorecli (torch or onnx runtime) >= 1.25x
  the fastest fp32 peer (fp32 or O3); every ONNX contender's max score difference to the
  CrossEncoder (torch) scores is reported.
- without it: an emulation, `ort_crossencoder_job.py` on the model's own forward exported once
  beforehand, fp32 and int8 (one ORT session, length-sorted batches; needs onnxruntime here).

    python benchmarks/bench_vs_crossencoder.py [--rows 300] [--items 8] [--repeats 5]
        [--st-onnx-python .bench-st-onnx/bin/python]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from dataclasses import dataclass, field

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
    ap.add_argument(
        "--st-onnx-python",
        default=os.environ.get("SCORECLI_ST_ONNX_PYTHON") or None,
        metavar="PATH",
        help="interpreter of the ST-ONNX peer environment (benchmarks/make_st_onnx_env.sh; default "
        "$SCORECLI_ST_ONNX_PYTHON): the ONNX peers are then sentence-transformers' own "
        "backend='onnx' instead of the emulation (ort_crossencoder_job.py)",
    )
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

    a = C.Contender(
        "scorecli score --runtime torch",
        C.scorecli_cmd(
            "score",
            str(work / "in.jsonl"),
            "--out",
            str(work / "a.parquet"),
            "--model",
            model,
            "--quiet",
            "--runtime",
            "torch",
        ),
    )
    b = C.Contender(
        "sentence-transformers CrossEncoder.predict",
        [
            C.PYTHON,
            str(C.BENCH_DIR / "st_crossencoder_job.py"),
            str(work / "in.jsonl"),
            str(work / "b.parquet"),
            model,
            "--batch-size",
            str(args.batch_size),
        ],
    )
    a1 = C.Contender(
        "scorecli score, 1 row (start-up + load)",
        C.scorecli_cmd(
            "score", str(work / "one.jsonl"), "--out", str(work / "a1.parquet"), "--model", model, "--quiet"
        ),
        info=True,
    )
    b1 = C.Contender(
        "CrossEncoder job, 1 row (start-up + load)",
        [
            C.PYTHON,
            str(C.BENCH_DIR / "st_crossencoder_job.py"),
            str(work / "one.jsonl"),
            str(work / "b1.parquet"),
            model,
            "--batch-size",
            str(args.batch_size),
        ],
        info=True,
    )
    contenders, warmup = [a, b, a1, b1], [a1, b1]
    onnx = OnnxSide() if args.no_onnx else onnx_contenders(work, model, args.batch_size, args.st_onnx_python)
    contenders, warmup = contenders + onnx.all, warmup + onnx.warmup
    C.alternate(contenders, args.repeats, work / "stderr.log", warmup=warmup)
    diff = C.max_abs_diff(C.read_scores(work / "a.parquet"), C.read_scores(work / "b.parquet"))
    onnx_diffs = {
        c.name: C.max_abs_diff(C.read_scores(out), C.read_scores(work / "b.parquet")) for c, out in onnx.outputs
    }

    ratio = b.median_s / a.median_s
    cpu_ratio = b.median_cpu / a.median_cpu
    min_ratio = b.min_s / a.min_s
    net = C.net_ratio(b, b1, a, a1)
    warmups = ["both 1-row runs (same model and code as A and B)"]
    if onnx.scorecli:
        warmups.append("scorecli --runtime onnx and onnx-int8 on the whole input (build their cached exports)")
    if onnx.real:
        warmups.append("each sentence-transformers ONNX peer on 1 row")
    C.header(
        "2. scorecli vs sentence-transformers CrossEncoder (`bench_vs_crossencoder.py`)",
        [
            "model: all-MiniLM-L6-v2 weights + random 1-label head (BertForSequenceClassification), float32, CPU",
            f"data: {args.rows} rows x {args.items} items = {len(pair_lens)} pairs (seed {args.seed}); items "
            f"{args.min_words}-{args.max_words} words; pair tokens mean {sum(pair_lens) / len(pair_lens):.1f} "
            f"(min {min(pair_lens)}, max {max(pair_lens)}), {sum(pair_lens):,} in all",
            f"CrossEncoder.predict batch_size={args.batch_size}; scorecli defaults (--max-batch-tokens: 2048 on CPU)",
            f"{args.repeats} alternating rounds; whole processes; untimed warm-ups first: " + "; ".join(warmups),
            *onnx.details,
        ],
    )
    C.commands(contenders)
    C.table(contenders, b)
    print(
        f"**scorecli speed-up over CrossEncoder: {ratio:.2f}x** (goal >= 1.25x: "
        f"{'met' if ratio >= 1.25 else 'NOT met'}); best-of-N ratio {min_ratio:.2f}x; CPU-time ratio {cpu_ratio:.2f}x; net of each side's 1-row run: {net}. "
        f"Max |scorecli - CrossEncoder| score difference: {diff:.2e} "
        f"({'within' if diff <= 1e-4 else 'OUTSIDE'} 1e-4).\n"
    )
    if onnx.peers:
        onnx_summary(a, onnx, onnx_diffs)
    if onnx.note:
        print(onnx.note + "\n")
    return ratio


def onnx_summary(a, onnx, onnx_diffs: dict) -> None:
    """Issue 21's line: the fastest scorecli (torch or onnx runtime) over the fastest fp32 ONNX peer."""
    best = min([a, onnx.scorecli] if onnx.scorecli else [a], key=lambda c: c.median_s)
    peer = min(onnx.fp32, key=lambda c: c.median_s)
    fastest = min(onnx.peers, key=lambda c: c.median_s)
    ratio = peer.median_s / best.median_s
    kind = "" if onnx.real else ", emulated by ort_crossencoder_job.py"
    print(
        f"**ONNX: fastest scorecli ({best.name}) over the fastest fp32 ONNX peer ({peer.name}{kind}): "
        f"{ratio:.2f}x** (issue 21's goal >= 1.25x: {'met' if ratio >= 1.25 else 'NOT met'}); best-of-N ratio "
        f"{peer.min_s / best.min_s:.2f}x; CPU-time ratio {peer.median_cpu / best.median_cpu:.2f}x; fastest peer "
        f"of all: {fastest.name}. Max |score - CrossEncoder (torch)|: "
        + ", ".join(f"{name} {d:.2e}" for name, d in onnx_diffs.items())
        + "\n"
    )


@dataclass
class OnnxSide:
    """The ONNX contenders: scorecli --runtime onnx and the peers, with their outputs and warm-ups."""

    scorecli: C.Contender | None = None
    int8: C.Contender | None = None  # scorecli --runtime onnx-int8 (beside the int8 peer; not in the fp32 goal)
    peers: list = field(default_factory=list)  # the peers, fp32 ones first
    fp32: list = field(default_factory=list)  # the fp32 peers (issue 21's goal is against the fastest)
    outputs: list = field(default_factory=list)  # (contender, its Parquet) (scores checked against B's)
    warmup: list = field(default_factory=list)  # untimed runs before the rounds
    details: list = field(default_factory=list)  # header lines
    real: bool = False  # sentence-transformers' own backend="onnx" (else the emulation)
    note: str = ""  # a line printed after the results

    @property
    def all(self) -> list:
        return [c for c in (self.scorecli, self.int8) if c] + self.peers


def onnx_contenders(work, model: str, batch_size: int, st_python: str | None) -> OnnxSide:
    """scorecli --runtime onnx (needs onnxruntime here) and the ONNX peers: sentence-transformers'
    own backend="onnx" under `st_python` (exported once, untimed), else the emulation."""
    side = OnnxSide(real=bool(st_python))
    try:
        import onnxruntime
    except ImportError:
        onnxruntime = None
    if onnxruntime is not None:
        side.scorecli = C.Contender(
            "scorecli score --runtime onnx",
            C.scorecli_cmd(
                "score",
                str(work / "in.jsonl"),
                "--out",
                str(work / "ao.parquet"),
                "--model",
                model,
                "--quiet",
                "--runtime",
                "onnx",
                "--cache-dir",
                str(work / "cache"),
            ),
        )
        side.outputs.append((side.scorecli, work / "ao.parquet"))
        side.warmup.append(side.scorecli)  # scorecli's export is built in the warm-up
        side.int8 = C.Contender(
            "scorecli score --runtime onnx-int8 (opt-in, approximate)",
            C.scorecli_cmd(
                "score",
                str(work / "in.jsonl"),
                "--out",
                str(work / "ai8.parquet"),
                "--model",
                model,
                "--quiet",
                "--runtime",
                "onnx-int8",
                "--cache-dir",
                str(work / "cache"),
            ),
        )
        side.outputs.append((side.int8, work / "ai8.parquet"))
        side.warmup.append(side.int8)  # and its int8 quantization
    if st_python:
        st_onnx_peers(side, work, model, batch_size, st_python)
    elif onnxruntime is None:
        print("(no onnxruntime: the ONNX contenders are left out)")
    else:
        emulated_peers(side, work, model, batch_size)
        side.note = (
            '(ONNX peers emulated by ort_crossencoder_job.py; the real sentence-transformers backend="onnx" '
            "peers need --st-onnx-python PATH, an interpreter built by benchmarks/make_st_onnx_env.sh.)"
        )
    return side


def emulated_peers(side: OnnxSide, work, model: str, batch_size: int) -> None:
    """ort_crossencoder_job.py on the model's own forward exported once beforehand, fp32 and int8."""
    job = str(C.BENCH_DIR / "ort_crossencoder_job.py")
    subprocess.run(
        [C.PYTHON, job, "export", model, str(work / "peer.onnx"), "--int8", str(work / "peer8.onnx")],
        check=True,
        capture_output=True,
    )
    for name, out, f in (("fp32", "o32.parquet", "peer.onnx"), ("int8", "o8.parquet", "peer8.onnx")):
        peer = C.Contender(
            f"ONNX peer ({name}, ORT session, batch {batch_size})",
            [
                C.PYTHON,
                job,
                "score",
                str(work / "in.jsonl"),
                str(work / out),
                model,
                str(work / f),
                "--batch-size",
                str(batch_size),
            ],
        )
        side.peers.append(peer)
        side.outputs.append((peer, work / out))
    side.fp32 = side.peers[:1]


ST_ONNX_FILES = (  # (label, file under the exported model, output, fp32?)
    ("fp32 model.onnx", "onnx/model.onnx", "so32", True),
    ("O3 model_O3.onnx", "onnx/model_O3.onnx", "so3", True),
    ("int8 model_quint8_avx2.onnx", "onnx/model_quint8_avx2.onnx", "so8", False),
)


def st_onnx_peers(side: OnnxSide, work, model: str, batch_size: int, st_python: str) -> None:
    """sentence-transformers' backend="onnx" in the ST-ONNX environment on a copy of the model,
    exported once (st_onnx_export.py: fp32, O3, int8 avx2) before the rounds, untimed."""
    st_python = os.path.abspath(st_python)  # not realpath: a venv's python is a symlink
    if not os.access(st_python, os.X_OK):
        raise SystemExit(f"--st-onnx-python {st_python}: not an executable (build it: benchmarks/make_st_onnx_env.sh)")
    print(f"  exporting the sentence-transformers ONNX files with {st_python} ...", file=sys.stderr, flush=True)
    st_model = str(work / "model-st-onnx")
    proc = subprocess.run(
        [st_python, str(C.BENCH_DIR / "st_onnx_export.py"), model, st_model],
        capture_output=True,
        text=True,
        cwd=C.ROOT,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"st_onnx_export.py failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    code = (
        "import importlib.metadata as m, sys; print(sys.version.split()[0], *(m.version(p) for p in "
        "('sentence-transformers', 'transformers', 'optimum', 'onnxruntime', 'torch')))"
    )
    versions = subprocess.run([st_python, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    job = str(C.BENCH_DIR / "st_crossencoder_job.py")
    for label, file_name, out, fp32 in ST_ONNX_FILES:
        cmd = [
            st_python,
            job,
            str(work / "in.jsonl"),
            str(work / f"{out}.parquet"),
            st_model,
            "--batch-size",
            str(batch_size),
            "--backend",
            "onnx",
            "--file-name",
            file_name,
        ]
        peer = C.Contender(f"sentence-transformers CrossEncoder, backend=onnx ({label})", cmd)
        side.peers.append(peer)
        side.outputs.append((peer, work / f"{out}.parquet"))
        if fp32:
            side.fp32.append(peer)
        # untimed warm-up: the same process on the 1-row input (page cache, bytecode caches)
        warm = cmd.copy()
        warm[2:4] = [str(work / "one.jsonl"), str(work / f"{out}-warm.parquet")]
        side.warmup.append(C.Contender(f"{peer.name}, 1-row warm-up", warm))
    side.details.append(
        f'ONNX peers: sentence-transformers {versions[1]} CrossEncoder(backend="onnx", model_kwargs={{file_name}}) '
        f"in a separate env (Python {versions[0]}, transformers {versions[2]}, optimum {versions[3]}, onnxruntime "
        f"{versions[4]}, torch {versions[5]}; `make_st_onnx_env.sh`), files exported once before the rounds, untimed, "
        "by `st_onnx_export.py` (ST's save_pretrained, export_optimized_onnx_model O3, "
        "export_dynamic_quantized_onnx_model avx2)"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
