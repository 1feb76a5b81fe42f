"""The command line's shared options and words: help panels, the options several commands take,
the examples after each command's options (`scorecli.help`), and the limits every flag is checked
against. Knows nothing about what a run does.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

# Every integer flag is range-checked while it is parsed (exit 2, one line): no count or token id
# needs more than 2**31 - 1, and a value past 2**63 - 1 would overflow numpy after the model loads.
MAX_INT = 2**31 - 1
# windows grow from one row until one takes this long, up to this many rows (README: Long runs)
WINDOW_SECONDS, WINDOW_ROWS = 30.0, 2048

# help panels (`scorecli.help`)
INPUT, MODEL, SCORING, OUTPUT, PERF, LONG = "Input", "Model", "Scoring", "Output", "Performance", "Long runs"
BENCH, CHECK = "Benchmark", "Self-check"


def opt(*decls: str, panel: str, help: str, **kw: Any) -> Any:
    """An option in help panel `panel` (`scorecli.help`)."""
    return typer.Option(*decls, help=help, rich_help_panel=panel, **kw)


Model = Annotated[Optional[str], opt("--model", "-m", envvar="SCORECLI_MODEL", show_envvar=True, metavar="MODEL", panel=MODEL,
                                     help="Model folder, .gguf file, Hub id, or a bundled model's short name: minilm (the default), smollm2-judge.")]  # fmt: skip
CacheDir = Annotated[Optional[str], opt(envvar="SCORECLI_CACHE_DIR", metavar="DIR", panel=MODEL,
                                        help="Cache for dequantized GGUF models and ONNX exports (default ~/.cache/scorecli).")]  # fmt: skip
Device = Annotated[str, opt(panel=PERF, help="auto | cpu | cuda | cuda:N.")]
DType = Annotated[str, opt(panel=PERF, help="auto (bfloat16 on CUDA, float32 on CPU) | float32 | bfloat16 | float16.")]
BatchTokens = Annotated[Optional[int], opt(min=1, max=MAX_INT, metavar="N", panel=PERF, help="Token budget of one forward batch, padding counted (default: 2048 on CPU; on CUDA what half the free memory holds, 16384 to 131072).")]  # fmt: skip
SCORE_EXAMPLES = """Examples (input rows: {"id": ..., "query": "...", "items": ["...", ...]}):
  scorecli score rows.jsonl --out scores.parquet       minilm, offline
  scorecli score rows.jsonl --out - --top-k 3          JSON lines on stdout
  scorecli score data/ --out scores/ -m smollm2-judge  a Parquet dataset
  scorecli score rows.jsonl --out s.parquet --resume   go on after a stop"""
APP_EXAMPLES = """Start here (README: Quickstart):
  scorecli score rows.jsonl --out scores.parquet   minilm, offline
  scorecli inspect                                 the bundled models
  scorecli inspect MODEL                           what scorecli sees in it
  scorecli bench --model minilm                    items/s on this machine"""
INSPECT_EXAMPLES = """Examples:
  scorecli inspect                      the bundled models, by short name
  scorecli inspect minilm
  scorecli inspect ./my-reranker --check
  scorecli inspect model.gguf --label-tokens yes,no"""
BENCH_EXAMPLES = """Examples:
  scorecli bench --model minilm --rows 8
  scorecli bench --model smollm2-judge --rows 2 --items 8
  scorecli bench --model ./reranker --attention sdpa,flex --json out.json"""
