"""`scorecli bench`: synthetic throughput of MIS and single-item scoring per attention backend,
for every kind (cross-encoders and embedding models run single-item).

Rows of random token ids with exact lengths (rows × items × lengths; text of one-token words for
cross-encoders, which tokenize pairs themselves) go through the same Scorer the CLI uses; the
model is loaded once and shared. Reports items/s, tokens/s and,
on CUDA, the fraction of the GPU's bf16 FLOP limit reached. Knows nothing about files.
"""

from __future__ import annotations

import functools
import math
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from scorecli.attention.backends import choose
from scorecli.config import ATTENTIONS, MODES, ScoreConfig, check_choice
from scorecli.engine.progress import loading, quiet_unless_live
from scorecli.errors import InputError, ScorecliError, UsageError, a_kind, first_line
from scorecli.io.output import unwritable_file
from scorecli.io.readers import RawRow
from scorecli.kinds import KINDS
from scorecli.kinds.spec import RunSpec, any_label_ids
from scorecli.model.default_model import short_name
from scorecli.model.load import load_model
from scorecli.model.precision import resolve_device, resolve_dtype
from scorecli.scorer import Scorer

# dense bf16 tensor-core peaks (TFLOP/s) of GPUs we measure on; --peak-tflops overrides
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 70.0, "L4": 121.0}


@dataclass(frozen=True)
class Workload:
    rows: int = 32
    items: int = 32
    query_tokens: int = 128
    item_tokens: int = 32
    seed: int = 0


@dataclass(frozen=True)
class BenchResult:
    attention: str
    mode: str
    seconds: float  # median over repeats
    items_per_s: float
    tokens_per_s: float  # tokens actually run through the model
    tokens: int
    flop_fraction: float | None


def check_arguments(
    attentions: tuple[str, ...],
    modes: tuple[str, ...],
    peak_tflops: float | None,
    json_out: str | None,
    device: str = "auto",
) -> None:
    """UsageError for an argument that would fail the benchmark after its work: an unknown
    backend or mode, a backend that cannot run on `device` whatever the model (another device's,
    a package not installed), a peak that is not a positive number, a --json path that cannot be
    written."""
    for name in attentions:
        check_choice("--attention", name, ATTENTIONS)
    for mode in modes:
        check_choice("--modes", mode, MODES[1:])  # what bench compares: mis and single, not auto
    where = resolve_device(device).type
    for name in attentions:  # as for a 16-bit model that packs: what the model decides is asked once it loads
        choose(name, where, half=True, packed=True)
    if peak_tflops is not None and not (math.isfinite(peak_tflops) and peak_tflops > 0):
        raise UsageError(f"--peak-tflops: expected a positive number of TFLOP/s, got {peak_tflops}")
    reason = unwritable_file(json_out) if json_out and json_out != "-" else None
    if reason:
        raise UsageError(f"--json: cannot write {json_out}: {reason}")


def synthetic_rows(work: Workload, vocab: int) -> list[RawRow]:
    """Pre-tokenized rows with exact lengths, ids drawn away from special tokens."""
    rng = np.random.default_rng(work.seed)
    low, high = min(100, vocab // 4), vocab
    return [
        RawRow(
            {
                "id": r,
                "query_ids": rng.integers(low, high, work.query_tokens).tolist(),
                "item_ids": rng.integers(low, high, (work.items, work.item_tokens)).tolist(),
            },
            f"bench row {r}",
        )
        for r in range(work.rows)
    ]


# words most vocabularies hold as one token each (WordPiece and byte-level BPE alike)
_WORDS = "the of and to in is was for on that with as by at from his an were are which this be has".split()


def text_rows(work: Workload, tokenizer) -> list[RawRow]:
    """Rows of text (for kinds that tokenize text pairs themselves: cross-encoders) whose query and
    items are about as many tokens long as asked: words the tokenizer holds as one token."""
    words = [w for w in _WORDS if len(tokenizer(" " + w, add_special_tokens=False)["input_ids"]) == 1] or _WORDS
    rng = np.random.default_rng(work.seed)

    def text(n: int) -> str:
        return " ".join(rng.choice(words, n))

    rows = [
        {"query": text(work.query_tokens), "items": [text(work.item_tokens) for _ in range(work.items)]}
        for _ in range(work.rows)
    ]
    return [RawRow({"id": r, **row}, f"bench row {r}") for r, row in enumerate(rows)]


def run_bench(
    cfg: ScoreConfig,
    work: Workload,
    attentions: list[str],
    modes: list[str] | None,
    repeats: int,
    peak_tflops: float | None,
    note: Callable[[str], None] | None = None,
    console: Console | None = None,
) -> list[BenchResult]:
    """Time every (attention, mode) pair on the same rows; the model loads once. `modes` None:
    MIS and single-item, or single-item alone (said through `note`) for a model that runs only
    that way (a cross-encoder, an embedding model, a decoder `compat.Support` keeps single); modes
    given are run as asked, and refused as `score` refuses. Progress on `console` (a terminal)."""
    cfg = replace(cfg, truncate="error")  # the rows are run at the sizes asked, or refused
    with loading(console, short_name(cfg.model) or cfg.model):
        loaded = load_model(cfg)
    vocab = loaded.model.get_input_embeddings().num_embeddings
    kind = KINDS[loaded.kind]
    rows = text_rows(work, loaded.tokenizer) if kind.pairs else synthetic_rows(work, vocab)
    # a CrossEncoder folder names its own (its LogitScore)
    if kind.label_tokens and loaded.sentence is None and not (cfg.label_tokens or cfg.label_token_ids):
        cfg = replace(cfg, label_token_ids=any_label_ids(loaded))
    peak = peak_tflops or device_peak_tflops(loaded.device)
    params = non_embedding_params(loaded.model)
    results = []
    with bench_progress(console) as progress:
        for attention in attentions:
            auto = Scorer(loaded, replace(cfg, attention=attention))
            if modes is None and not auto.spec.mis and note is not None and not results:
                note("single-item mode only: " + _single_only(auto.spec))
            for mode in modes or (["mis", "single"] if auto.spec.mis else ["single"]):
                if mode == "mis" and not auto.spec.mis:  # refused as `score` refuses --mode mis, named as bench's flag
                    raise UsageError(
                        f"--modes mis: this model runs single-item only: {_single_only(auto.spec)}; use --modes single"
                    )
                same = mode == ("mis" if auto.spec.mis else "single")
                scorer = auto if same else Scorer(loaded, replace(cfg, attention=attention, mode=mode))
                n_items = work.rows * work.items
                task = progress.add_task(f"{scorer.backend_name} {mode}", total=(repeats + 1) * n_items)
                advance = functools.partial(_advance, progress, task)
                try:
                    seconds, tokens = time_scorer(scorer, rows, repeats, loaded.device, advance)
                except InputError as e:  # the first row, in the warm-up: the sizes asked do not fit
                    raise UsageError(
                        f"--query-tokens {work.query_tokens} and --item-tokens {work.item_tokens} do not fit the "
                        f"model's sequences (bench runs the sizes asked, never cut): {_WHY.sub('', first_line(e))}"
                    ) from e
                flops = 2.0 * params * tokens / seconds
                fraction = flops / (peak * 1e12) if peak else None
                results.append(
                    BenchResult(
                        scorer.backend_name, mode, seconds, n_items / seconds, tokens / seconds, tokens, fraction
                    )
                )
    return results


def _single_only(spec: RunSpec) -> str:
    """Why a model runs single-item only (its `kinds.spec.RunSpec`): a decoder's reason, else its kind's."""
    kind = spec.kind
    return spec.single_reason or f"{a_kind(kind)} model scores each item in a sequence of its own"


# what an over-long bench row's error says besides why: its row and field, and `score`'s way out
_WHY = re.compile(r"^bench row \d+: field '[^']*'(\[\d+\])?: | \((use )?--truncate [^)]*\)")


def _advance(progress: Progress, task: int, items: int, tokens: int) -> None:
    progress.advance(task, items)


def bench_progress(console: Console | None) -> Progress:
    """One line per measurement: items of its warm-up and timed passes (live on a terminal only)."""
    columns = (
        TextColumn("bench {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("items"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    return quiet_unless_live(columns, console)


def time_scorer(
    scorer, rows: list[RawRow], repeats: int, device: torch.device, on_batch: Callable[[int, int], None] | None = None
) -> tuple[float, int]:
    """Median seconds of `repeats` timed passes over `rows` after one warm-up, and the tokens run;
    `on_batch(items, tokens)` after each batch (progress)."""
    table = scorer.run(scorer.prepare(rows), on_batch)  # warm-up: kernels, JIT, allocator
    tokens = int(sum(table["num_tokens"].to_pylist()))
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        scorer.run(scorer.prepare(rows), on_batch)
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), tokens


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def non_embedding_params(model: torch.nn.Module) -> int:
    """Parameters every token runs through (the FLOP count's 2 x params x tokens)."""
    total = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight.numel()
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if out is not None and out.weight is not model.get_input_embeddings().weight:
        total -= out.weight.numel()  # lm_head runs only at pooled positions
    return total - embed


def device_peak_tflops(device: torch.device) -> float | None:
    """The GPU's dense bf16 peak from `PEAK_BF16_TFLOPS`, or None (CPU, unknown GPU)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def as_json(results: list[BenchResult], work: Workload, cfg: ScoreConfig, device: str) -> dict:
    return {
        "workload": asdict(work),
        "model": cfg.model,
        "dtype": str(resolve_dtype(cfg.dtype, resolve_device(cfg.device))).removeprefix("torch."),  # what ran
        "device": device,
        "results": [asdict(r) for r in results],
    }


def report(results: list[BenchResult], work: Workload, cfg: ScoreConfig, json_out: str | None) -> None:
    """The results as a table (on stderr when JSON takes stdout), and as JSON to `json_out`."""
    import json

    from rich.table import Table

    table = Table(
        title=f"scorecli bench: {work.rows} rows x {work.items} items, query {work.query_tokens} + item "
        f"{work.item_tokens} tokens"
    )
    for col in ("attention", "mode", "seconds", "items/s", "tokens/s", "FLOP fraction"):
        table.add_column(col, justify="right")
    for r in results:
        frac = f"{r.flop_fraction:.1%}" if r.flop_fraction is not None else "n/a"
        table.add_row(r.attention, r.mode, f"{r.seconds:.3f}", f"{r.items_per_s:,.1f}", f"{r.tokens_per_s:,.0f}", frac)
    Console(stderr=json_out == "-").print(table)
    if not json_out:
        return
    text = json.dumps(as_json(results, work, cfg, device_name(cfg.device)), indent=2)
    if json_out == "-":
        print(text, flush=True)
        return
    try:
        with open(json_out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    except OSError as exc:  # a full disk, /dev/full: the results are in the table above
        raise ScorecliError(f"--json: cannot write {json_out}: {exc.strerror or exc}") from exc


def device_name(device: str) -> str:
    """The GPU's name (`cuda`), else `cpu`: where the figures were measured."""
    dev = resolve_device(device)
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
