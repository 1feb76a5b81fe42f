"""The command line's flags in one table: each flag's help panel, its value's name and its help
(`FLAGS`, read by `opt`), the options several commands share, the examples after each command's
options (`scorecli.help`), and the limits flags are checked against. Knows nothing about what a
run does.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

import typer

from scorecli import runtimes
from scorecli.attention import backends as attention
from scorecli.config import MAX_INT, split_list, token_ids
from scorecli.core.templates import ACTIVATIONS, PRESETS
from scorecli.io.readers import FORMATS
from scorecli.io.schemes import listed
from scorecli.kinds import KINDS
from scorecli.model.default_model import BUNDLED, DEFAULT

# windows grow from one row until one takes this long, up to this many rows (docs/long-jobs.md)
WINDOW_SECONDS, WINDOW_ROWS = 30.0, 2048
MIN_SECONDS = 0.001  # the shortest --window-seconds


def one_of(names: Iterable[str], helps: Mapping[str, str] | None = None) -> str:
    """A flag's choices as its help shows them, from the table that declares them:
    `a | b (what b does) | c`."""
    helps = helps or {}
    return " | ".join(f"{name} ({helps[name]})" if helps.get(name) else name for name in names)


ATTENTIONS = one_of(attention.NAMES) + "."
EVERYWHERE = attention.AUTO_ORDER[-1]  # the backend that runs on any device (`bench`'s default)
RUNTIME_HELP = f"{runtimes.APPLIES_TO}: " + one_of(
    runtimes.NAMES, {"auto": runtimes.AUTO_HELP} | {name: r.help for name, r in runtimes.RUNTIMES.items()}
)
INPUT_FORMATS = "/".join(f.name for f in FORMATS)
MODELS = ", ".join(f"{name} (the default)" if name == DEFAULT else name for name in BUNDLED)

# help panels (`scorecli.help` shows them in this order)
INPUT, MODEL, SCORING, OUTPUT, PERF, LONG = "Input", "Model", "Scoring", "Output", "Performance", "Long runs"
BENCH, CHECK = "Benchmark", "Self-check"

# flag: (help panel, the value's name in help (None: a switch), help)
FLAGS: dict[str, tuple[str, str | None, str]] = {
    "--out": (
        OUTPUT,
        "OUT",
        "FILE.parquet, FILE.jsonl, FILE.jsonl.gz, DIR/ (a Parquet dataset of parts), any of them as a URL "
        f"({', '.join(listed(writable=True))}), or - (JSON lines on stdout).",
    ),
    "--kind": (MODEL, "KIND", " | ".join(KINDS) + " (default: detected)."),
    "--mode": (SCORING, "MODE", "auto | mis (all items of a row in one sequence) | single."),
    "--template": (SCORING, "NAME", one_of([*PRESETS, "a .toml/.json file."])),
    "--instruction": (SCORING, "TEXT", "Instruction for templates that take one."),
    "--label-tokens": (SCORING, "LIST", "Causal-LM label tokens, e.g. yes,no."),
    "--label-token-ids": (SCORING, "IDS", "Causal-LM label token ids, e.g. 9454,2152."),
    "--activation": (SCORING, "NAME", one_of(ACTIVATIONS) + "."),
    "--apply-softmax": (SCORING, None, "Same as --activation softmax."),
    "--positive-label": (SCORING, "LABEL", "Label (name or index) that fills `score`."),
    "--pooled-hidden-states": (OUTPUT, None, "Also write each item's pooled final hidden state."),
    "--pooling": (OUTPUT, "WHERE", "last | cls (default: last for decoders, cls for cross-encoders)."),
    "--hidden-dtype": (OUTPUT, "DTYPE", "float32 | float16 for pooled hidden states."),
    "--query-field": (INPUT, "NAME", "Input field holding the query."),
    "--items-field": (INPUT, "NAME", "Input field holding the items."),
    "--id-field": (INPUT, "NAME", "Input field copied to the output as the row id."),
    "--labels-field": (
        INPUT,
        "NAME",
        "Input field of relevance labels (a number per item, or the relevant items' indices): kept in "
        "the output, and MRR@k, nDCG@k, accuracy@1 reported.",
    ),
    "--labels": (INPUT, "INPUT", "The input SCORES was scored from, whose rows hold relevance labels."),
    "--group-by": (
        INPUT,
        "COLUMN",
        "Input records hold one (query, item) each: consecutive records with the same COLUMN are one row.",
    ),
    "--attention": (PERF, "NAME", ATTENTIONS),
    "--runtime": (PERF, "NAME", RUNTIME_HELP + "."),
    "--compile": (
        PERF,
        "WHEN",
        "Decoders: torch.compile the model's layers. auto: on CUDA, for a job long enough to repay the "
        "compile (falls back to uncompiled layers if the compiler fails) | on | off.",
    ),
    "--max-seq-len": (SCORING, "N", "Longest packed sequence (default: model maximum, capped at 8192)."),
    "--truncate": (SCORING, "HOW", "item: cut over-long items' text | error: fail."),
    "--window-rows": (
        LONG,
        "N",
        "Rows per window (read, scored, written and kept as one part): N each (default: windows of 1, 2 "
        "and 4 rows, then the rows one window scores in --window-seconds, up to 2048).",
    ),
    "--window-seconds": (
        LONG,
        "S",
        "After the first three, windows take about S seconds, so that the first rows are kept, and progress "
        "shows, within seconds on any model (default: 30; with --window-rows, windows grow up to N).",
    ),
    "--skip-bad-rows": (INPUT, None, "Write bad rows with null scores and an error column."),
    "--top-k": (OUTPUT, "K", "Add the column top_k: the indices of each row's K best items, best first."),
    "--chunk-tokens": (SCORING, "N", "Score items longer than N tokens in chunks of N tokens instead of cutting them."),
    "--chunk-overlap": (SCORING, "N", "Tokens each chunk shares with the one before (less than --chunk-tokens)."),
    "--chunk-aggregate": (SCORING, "HOW", "max | mean | first: an item's score from its chunks'."),
    "--similarity": (SCORING, "NAME", "Embedding models: cosine | dot (default: the model's own, else cosine)."),
    "--query-prompt": (
        SCORING,
        "PROMPT",
        "Embedding models: the query's prompt, by name or as text (default: the model's 'query').",
    ),
    "--item-prompt": (
        SCORING,
        "PROMPT",
        "Embedding models: the items' prompt, by name or as text (default: 'document', else 'passage').",
    ),
    "--self-check": (
        SCORING,
        None,
        "First compare a probe row's scores with the model's own forward; stop on a mismatch.",
    ),
    "--compact": (
        OUTPUT,
        None,
        "Leave out the scores column when the model has one label (score holds the same values).",
    ),
    "--trust-remote-code": (MODEL, None, "Allow the checkpoint's own Python code to run."),
    "--allow-pickle": (MODEL, None, "Allow pickled .bin weights (they can run code)."),
    "--quiet": (OUTPUT, None, "No status, progress or summary on stderr (for cron)."),
    "--resume": (
        LONG,
        None,
        "Continue the job whose finished rows OUT.partial/ (or a DIR/ output) keeps; without one, start it.",
    ),
    "--score-cache": (
        LONG,
        "LOCATION",
        f"Reuse the scores of pairs scored before (a folder, or a store prefix: {', '.join(listed(writable=True))}; "
        "made if missing) and add the new ones: a nightly job scores only what changed.",
    ),
    "--audit": (
        LONG,
        "N",
        "After scoring, re-score N of the run's pairs one at a time through the model's own float32 forward "
        "and record the largest difference (0: no audit).",
    ),
    "--audit-strict": (LONG, None, "Exit 1, after the output is written, when the audit is beyond tolerance."),
    "--older-than": (LONG, "AGE", "Remove entries added longer ago than AGE: 30d, 12h, 90m, 2w (days without a unit)."),
    "--engine": (PERF, "NAME", "local: score in this process | ray: on Ray workers (needs the ray extra)."),
    "--ray-address": (
        PERF,
        "ADDRESS",
        "With --engine ray: the cluster to join (auto, HOST:PORT, ray://...); default: a local Ray.",
    ),
    "--num-workers": (PERF, "N", "With --engine ray: scoring workers (default: one per GPU in the cluster, else 1)."),
    "--check": (CHECK, None, "Also load the weights and run the self-check in each mode (exit 1 if one fails)."),
    "--device": (PERF, "DEVICE", "auto | cpu | cuda | cuda:N."),
    "--dtype": (PERF, "DTYPE", "auto (bfloat16 on CUDA, float32 on CPU) | float32 | bfloat16 | float16."),
    "--max-batch-tokens": (
        PERF,
        "N",
        "Token budget of one forward batch, padding counted (default: 2048 on CPU; on CUDA what half the "
        "free memory holds, 16384 to 131072).",
    ),
    "--model": (
        MODEL,
        "MODEL",
        f"Model folder, .gguf file, Hub id, or a bundled model's short name: {MODELS}.",
    ),
    "--cache-dir": (
        MODEL,
        "DIR",
        "Cache for dequantized GGUF models and ONNX exports (default $XDG_CACHE_HOME/scorecli, else ~/.cache/scorecli).",
    ),
    "--rows": (BENCH, "N", "Synthetic rows."),
    "--items": (BENCH, "N", "Items per row."),
    "--query-tokens": (BENCH, "N", "Tokens per query (prefix)."),
    "--item-tokens": (BENCH, "N", "Tokens per item."),
    "--modes": (
        BENCH,
        "LIST",
        "Comma-separated modes to compare (default: mis,single; single alone for a model that runs only single-item).",
    ),
    "--repeats": (BENCH, "N", "Timed repeats (median reported) after one warm-up."),
    "--peak-tflops": (OUTPUT, "TFLOPS", "GPU bf16 peak for the FLOP fraction (default: known GPUs)."),
    "--json": (OUTPUT, "PATH", "Also write results as JSON to this path (- for stdout)."),
}


def csv(value: str | None) -> tuple[str, ...] | None:
    """A comma-separated flag's values (None: not given)."""
    return None if value is None else split_list(value)


def csv_ints(value: str | None) -> tuple[int, ...] | None:
    """`--label-token-ids`' token ids, each checked (UsageError, exit 2)."""
    return None if value is None else token_ids(value)


def seconds(value: float | None) -> float | None:
    """`--window-seconds` as it is parsed: a finite number of seconds, at least 0.001 (typer's own
    range check calls `nan` too small and lets `inf` through, whose window size is no integer)."""
    if value is not None and not (math.isfinite(value) and value >= MIN_SECONDS):
        raise typer.BadParameter(f"expected a finite number of seconds, at least {MIN_SECONDS}, got {value}")
    return value


def home(value: str | None) -> str | None:
    """A folder scorecli makes (`--cache-dir`, `$SCORECLI_CACHE_DIR`, `--score-cache`) or a file it
    reads (`--template`) whose `~` no shell expanded (a systemd `Environment=`, a crontab's
    variable, a quoted flag, `--template=~/...`) in your home folder, as `--model` takes it, not a
    new folder named `~` in the current one (nor an unknown template). `~user` is left."""
    if value is not None and (value == "~" or value.startswith("~/")):
        return os.path.expanduser(value)
    return value


def opt(flag: str, *names: str, **kw: Any) -> Any:
    """typer's Option for `flag` (and its other `names`) as `FLAGS` declares it; `panel`, `metavar`
    and `help` in `kw` replace the table's for one command."""
    panel, metavar, text = FLAGS[flag.split("/")[0]]
    panel, metavar, text = kw.pop("panel", panel), kw.pop("metavar", metavar), kw.pop("help", text)
    return typer.Option(flag, *names, help=text, rich_help_panel=panel, metavar=metavar, **kw)


Model = Annotated[str | None, opt("--model", "-m", envvar="SCORECLI_MODEL", show_envvar=True)]
CacheDir = Annotated[str | None, opt("--cache-dir", envvar="SCORECLI_CACHE_DIR", callback=home)]
Device = Annotated[str, opt("--device")]
DType = Annotated[str, opt("--dtype")]
BatchTokens = Annotated[int | None, opt("--max-batch-tokens", min=1, max=MAX_INT)]

SCORE_EXAMPLES = """Examples (input rows: {"id": ..., "query": "...", "items": ["...", ...]}):
  scorecli score rows.jsonl --out scores.parquet       minilm, offline
  scorecli score rows.jsonl --out - --top-k 3          JSON lines on stdout
  scorecli score data/ --out scores/ -m smollm2-judge  a Parquet dataset
  scorecli score rows.jsonl --out s.parquet --resume   go on after a stop"""
APP_EXAMPLES = """Start here (README: Quickstart):
  scorecli score rows.jsonl --out scores.parquet   minilm, offline
  scorecli inspect                                 the bundled models
  scorecli inspect MODEL                           what scorecli sees in it
  scorecli eval scores.parquet                     MRR@10, nDCG@10 from labels
  scorecli bench --model minilm                    items/s on this machine"""
INSPECT_EXAMPLES = """Examples:
  scorecli inspect                      the bundled models, by short name
  scorecli inspect minilm
  scorecli inspect ./my-reranker --check
  scorecli inspect model.gguf --label-tokens yes,no"""
BENCH_EXAMPLES = """Examples:
  scorecli bench --model minilm --rows 8
  scorecli bench --model smollm2-judge --rows 2 --items 8
  scorecli bench -m ./reranker --attention {compared} --json out.json""".format(
    compared=",".join(reversed(attention.AUTO_ORDER))  # what `--attention auto` chooses between
)
EVAL_EXAMPLES = """Examples (labels: a grade per item, or the relevant items' indices):
  scorecli eval scores.parquet                     the labels the output kept
  scorecli eval scores.parquet --labels rows.jsonl the input's labels
  scorecli eval scores/ --labels pairs.csv --group-by qid --id-field qid"""
INPUTS = f"{INPUT_FORMATS} files, folders, globs, URLs ({', '.join(listed())}), or - for stdin."
SCORES = "An output of scorecli score: a Parquet or JSON lines file, or a dataset folder."
EVAL_K = "k of MRR@k and nDCG@k (default: 10)."
EVAL_LABELS_FIELD = "Field of relevance labels in the scores (kept there) or in --labels' rows."
EVAL_ID_FIELD = "Field of the row ids, which must agree between the scores and --labels' rows."
CACHE_EXAMPLES = """Examples:
  scorecli cache info ~/.cache/nightly-scores
  scorecli cache prune ~/.cache/nightly-scores --older-than 30d
  scorecli cache prune /mnt/shared/scores --model ./old-reranker"""
LOCATION = "A score cache: the folder or store prefix given to --score-cache."
INSPECTED = "Model folder, .gguf file, Hub id or short name (none: list the bundled models)."
