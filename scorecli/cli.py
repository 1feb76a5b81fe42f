"""The `scorecli` command line: flags -> one frozen config -> the scoring core.

Thin by design: it parses flags, checks what it can before the model loads (inputs, output,
template, first rows), hands the run to `run` (or `ray`), whose progress and summary go to
stderr (`progress`), and maps errors to exit codes: 2 for bad usage or input, 1 otherwise,
130 / 143 after SIGINT / SIGTERM (`process`); each error is one line of plain text (no
markup, no emoji codes, control bytes escaped). A closed pipe on the output ends the process
quietly by SIGPIPE. torch is imported only inside commands, so `--help` is instant. The only environment reads are $SCORECLI_MODEL and $SCORECLI_CACHE_DIR/$RAY_ADDRESS
(through typer).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from scorecli.config import ScoreConfig
from scorecli.errors import Notice, OutputClosed, ScorecliError, UsageError, error_line, first_line
from scorecli.help import Command, Group
from scorecli.options import (APP_EXAMPLES, BENCH, BENCH_EXAMPLES, CHECK, INPUT, INSPECT_EXAMPLES, LONG, MAX_INT, MODEL,
                              OUTPUT, PERF, SCORE_EXAMPLES, SCORING, WINDOW_ROWS, WINDOW_SECONDS, BatchTokens, CacheDir,
                              Device, DType, Model, opt)
from scorecli.process import finish, interrupted_code, pipe_closed, reserve_standard_fds, watch_signals

app = typer.Typer(cls=Group, add_completion=False, no_args_is_help=True, epilog=APP_EXAMPLES,
                  help="Offline batch scoring with transformer rerankers, classifiers, embedding and reward models.")  # fmt: skip
# paths and user text are printed as they are: no markup, no :emoji: codes
err = Console(stderr=True, highlight=False, markup=False, emoji=False)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
def _csv(value: str | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(v.strip() for v in value.split(","))


def _csv_ints(value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        ids = tuple(int(v) for v in value.split(","))
    except ValueError:
        raise UsageError(f"--label-token-ids: expected comma-separated integers, got {value!r}") from None
    for i in ids:
        if not 0 <= i <= MAX_INT:
            raise UsageError(f"--label-token-ids: {i} is not a token id (0 to {MAX_INT})")
    return ids


@app.command(cls=Command, epilog=SCORE_EXAMPLES)
def score(
    inputs: Annotated[list[str], typer.Argument(metavar="INPUT", show_default=False, rich_help_panel=INPUT, help="JSONL/Parquet files, folders, globs, or - for stdin.")],
    out: Annotated[str, opt("--out", "-o", metavar="OUT", panel=OUTPUT, help="FILE.parquet, FILE.jsonl, FILE.jsonl.gz, DIR/ (a Parquet dataset of parts), or - (JSON lines on stdout).")],
    model: Model = None,
    kind: Annotated[Optional[str], opt(panel=MODEL, help="seq-cls | causal-lm | cross-encoder | embedding (default: detected).")] = None,
    mode: Annotated[str, opt(panel=SCORING, help="auto | mis (all items of a row in one sequence) | single.")] = "auto",
    template: Annotated[Optional[str], opt(metavar="NAME", panel=SCORING, help="plain | qwen3-reranker | yes-no-chat | a .toml/.json file.")] = None,
    instruction: Annotated[Optional[str], opt(metavar="TEXT", panel=SCORING, help="Instruction for templates that take one.")] = None,
    label_tokens: Annotated[Optional[str], opt(metavar="LIST", panel=SCORING, help="Causal-LM label tokens, e.g. yes,no.")] = None,
    label_token_ids: Annotated[Optional[str], opt(metavar="IDS", panel=SCORING, help="Causal-LM label token ids, e.g. 9454,2152.")] = None,
    activation: Annotated[Optional[str], opt(metavar="NAME", panel=SCORING, help="none | softmax | sigmoid.")] = None,
    apply_softmax: Annotated[bool, opt("--apply-softmax", panel=SCORING, help="Same as --activation softmax.")] = False,
    positive_label: Annotated[Optional[str], opt(metavar="LABEL", panel=SCORING, help="Label (name or index) that fills `score`.")] = None,
    pooled_hidden_states: Annotated[bool, opt("--pooled-hidden-states", panel=OUTPUT, help="Also write each item's pooled final hidden state.")] = False,
    pooling: Annotated[Optional[str], opt(metavar="WHERE", panel=OUTPUT, help="last | cls (default: last for decoders, cls for cross-encoders).")] = None,
    hidden_dtype: Annotated[str, opt(metavar="DTYPE", panel=OUTPUT, help="float32 | float16 for pooled hidden states.")] = "float32",
    query_field: Annotated[str, opt(metavar="NAME", panel=INPUT, help="Input field holding the query.")] = "query",
    items_field: Annotated[str, opt(metavar="NAME", panel=INPUT, help="Input field holding the items.")] = "items",
    id_field: Annotated[str, opt(metavar="NAME", panel=INPUT, help="Input field copied to the output as the row id.")] = "id",
    device: Device = "auto",
    dtype: DType = "auto",
    attention: Annotated[str, opt(metavar="NAME", panel=PERF, help="auto | flashinfer | flex | sdpa | eager.")] = "auto",
    runtime: Annotated[str, opt(metavar="NAME", panel=PERF, help="CPU BERT-family encoders: auto (onnx where installed and it applies, else torch) | torch | onnx (exported once, cached) | onnx-int8 (opt-in, int8 dynamic quantization; its drift is measured and recorded).")] = "auto",
    compile_layers: Annotated[str, opt("--compile", metavar="WHEN", panel=PERF, help="Decoders: torch.compile the model's layers. auto: on CUDA (falls back to uncompiled layers if the compiler fails) | on | off.")] = "auto",
    max_batch_tokens: BatchTokens = None,
    max_seq_len: Annotated[Optional[int], opt(min=2, max=MAX_INT, metavar="N", panel=SCORING, help="Longest packed sequence (default: model maximum, capped at 8192).")] = None,
    truncate: Annotated[str, opt(metavar="HOW", panel=SCORING, help="item: cut over-long items' text | error: fail.")] = "item",
    window_rows: Annotated[Optional[int], opt(min=1, max=MAX_INT, metavar="N", panel=LONG, help="Rows per window (read, scored, written and kept as one part): N each (default: windows start at one row and double, up to 2048 rows, while one takes less than --window-seconds).")] = None,
    window_seconds: Annotated[Optional[float], opt(min=0.001, metavar="S", panel=LONG, help="Windows grow until one takes about S seconds, so that the first rows are kept, and progress shows, within seconds on any model (default: 30; with --window-rows, windows grow up to N).")] = None,
    skip_bad_rows: Annotated[bool, opt("--skip-bad-rows", panel=INPUT, help="Write bad rows with null scores and an error column.")] = False,
    top_k: Annotated[Optional[int], opt(min=1, max=MAX_INT, metavar="K", panel=OUTPUT, help="Add the column top_k: the indices of each row's K best items, best first.")] = None,
    chunk_tokens: Annotated[Optional[int], opt(min=1, max=MAX_INT, metavar="N", panel=SCORING, help="Score items longer than N tokens in chunks of N tokens instead of cutting them.")] = None,
    chunk_overlap: Annotated[int, opt(min=0, max=MAX_INT, metavar="N", panel=SCORING, help="Tokens each chunk shares with the one before (less than --chunk-tokens).")] = 0,
    chunk_aggregate: Annotated[str, opt(metavar="HOW", panel=SCORING, help="max | mean | first: an item's score from its chunks'.")] = "max",
    similarity: Annotated[Optional[str], opt(metavar="NAME", panel=SCORING, help="Embedding models: cosine | dot (default: the model's own, else cosine).")] = None,
    query_prompt: Annotated[Optional[str], opt(metavar="PROMPT", panel=SCORING, help="Embedding models: the query's prompt, by name or as text (default: the model's 'query').")] = None,
    item_prompt: Annotated[Optional[str], opt(metavar="PROMPT", panel=SCORING, help="Embedding models: the items' prompt, by name or as text (default: 'document', else 'passage').")] = None,
    self_check: Annotated[bool, opt("--self-check/--no-self-check", panel=SCORING, help="First compare a probe row's scores with the model's own forward; stop on a mismatch.")] = True,
    compact: Annotated[bool, opt("--compact", panel=OUTPUT, help="Leave out the scores column when the model has one label (score holds the same values).")] = False,
    trust_remote_code: Annotated[bool, opt("--trust-remote-code", panel=MODEL, help="Allow the checkpoint's own Python code to run.")] = False,
    allow_pickle: Annotated[bool, opt("--allow-pickle", panel=MODEL, help="Allow pickled .bin weights (they can run code).")] = False,
    cache_dir: CacheDir = None,
    quiet: Annotated[bool, opt("--quiet", "-q", panel=OUTPUT, help="No status, progress or summary on stderr (for cron).")] = False,
    resume: Annotated[bool, opt("--resume", panel=LONG, help="Continue the job whose finished rows OUT.partial/ (or a DIR/ output) keeps; without one, start it.")] = False,
    engine: Annotated[str, opt(metavar="NAME", panel=PERF, help="local: score in this process | ray: on Ray workers (needs the ray extra).")] = "local",
    ray_address: Annotated[Optional[str], opt(envvar="RAY_ADDRESS", show_envvar=True, metavar="ADDRESS", panel=PERF, help="With --engine ray: the cluster to join (auto, HOST:PORT, ray://...); default: a local Ray.")] = None,
    num_workers: Annotated[Optional[int], opt(min=1, max=MAX_INT, metavar="N", panel=PERF, help="With --engine ray: scoring workers (default: one per GPU in the cluster, else 1).")] = None,
) -> None:  # fmt: skip
    """Score every item of every input row against its query.

    Writes one output row per input row, in input order (README: Quickstart)."""
    if engine not in ("local", "ray"):
        raise UsageError(f"--engine: expected local or ray, got {engine!r}")
    if num_workers is not None and engine != "ray":
        raise UsageError("--num-workers needs --engine ray")
    from scorecli.io.output import resolve_output
    from scorecli.io.readers import count_rows, estimate_tokens, input_folders, resolve_inputs

    paths = resolve_inputs(inputs)
    target = resolve_output(out, paths, input_folders(inputs))
    model_path, default_template = _resolve_model(model)
    cfg = ScoreConfig(
        model=model_path, kind=kind, mode=mode, template=template or default_template, instruction=instruction,
        label_tokens=_csv(label_tokens), label_token_ids=_csv_ints(label_token_ids),
        activation="softmax" if apply_softmax and activation is None else activation,
        positive_label=positive_label, pooled_hidden_states=pooled_hidden_states, pooling=pooling,
        hidden_dtype=hidden_dtype, query_field=query_field, items_field=items_field, id_field=id_field,
        device=device, dtype=dtype, attention=attention, runtime=runtime, compile=compile_layers, max_batch_tokens=max_batch_tokens,
        max_seq_len=max_seq_len, truncate=truncate, window_rows=window_rows or WINDOW_ROWS, skip_bad_rows=skip_bad_rows, top_k=top_k,
        window_seconds=window_seconds if window_seconds or window_rows else WINDOW_SECONDS, compact=compact,
        chunk_tokens=chunk_tokens, chunk_overlap=chunk_overlap, chunk_aggregate=chunk_aggregate, similarity=similarity,
        query_prompt=query_prompt, item_prompt=item_prompt, self_check=self_check, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle, cache_dir=cache_dir,
        job_tokens=estimate_tokens(paths),
    )  # fmt: skip
    if apply_softmax and activation not in (None, "softmax"):
        raise UsageError("--apply-softmax contradicts --activation " + activation)
    _check_template(cfg.template)
    _check_cache_and_runtime(cache_dir, runtime)
    _one_line_warnings(quiet)
    console = None if quiet else err
    from scorecli.engine.checkpoint import Checkpoint
    from scorecli.engine.run import open_rows, preflight, run_score

    checkpoint = Checkpoint.open(target, cfg, paths, resume)
    if checkpoint is not None and checkpoint.note and not quiet:
        _say(f"warning: {checkpoint.note}")
    with _noting_interrupts():
        if engine == "ray":
            from scorecli.engine.ray import run_score_ray

            preflight(cfg, paths, iter(()))  # the driver reads the inputs itself
            run_score_ray(cfg, paths, target, address=ray_address, num_workers=num_workers, console=console,
                          checkpoint=checkpoint, started=_STARTED[-1] if _STARTED else None)  # fmt: skip
            return
        rows = preflight(cfg, paths, open_rows(cfg, paths, stdin=None, checkpoint=checkpoint))
        run_score(cfg, paths, target, total_rows=count_rows(paths), console=console, stdin=None, rows=rows,
                  checkpoint=checkpoint, started=_STARTED[-1] if _STARTED else None)  # fmt: skip
    from scorecli import timings

    timings.mark("done")
    if (line := timings.line()) and not quiet:
        _say(line)


_STARTED: list[float] = []  # when `main` began: the summary's start-up time counts from here
_interrupt_notes: list[str] = []  # what an interrupted run kept (typer turns the interrupt into exit code 130)
_interrupt_said: list[bool] = []


def _say_interrupted(message: str = "") -> None:
    """The one line of an interrupted run, once (a second signal may come while it is said)."""
    if not _interrupt_said:
        _interrupt_said.append(True)
        _say(message or (_interrupt_notes or ["interrupted: no output written"])[-1])


@contextmanager
def _noting_interrupts() -> Iterator[None]:
    try:
        yield
    except KeyboardInterrupt as exc:
        if str(exc):
            _interrupt_notes.append(str(exc))
        raise


def _check_template(name: str) -> None:
    """Unknown template names and bad template files fail before the model loads
    (`yes-no-chat` needs the model's tokenizer: it is checked with the model)."""
    if name != "yes-no-chat":
        from scorecli.core.templates import load_template

        load_template(name)


def _check_cache_and_runtime(cache_dir: str | None, runtime: str = "auto") -> None:
    """An explicit --cache-dir that cannot be written, or an explicit ONNX runtime whose packages
    are missing, stop the run before the model loads (`--runtime auto` falls back instead)."""
    from scorecli.model.cache import check_writable
    from scorecli.runtimes.onnx import check_packages

    check_writable(cache_dir)
    check_packages(runtime)


def _resolve_model(model: str | None, quiet: bool = False) -> tuple[str, str]:
    """(model path, default template) of --model or $SCORECLI_MODEL (a path, a Hub id, a bundled
    model's short name), else the default model (README: Models by short name). A Hub id is asked
    for once, briefly: one that cannot be reached fails here, in one line (`model.hub`)."""
    from scorecli.model.default_model import resolve
    from scorecli.model.hub import is_hub_id, reach

    path, template = resolve(model)
    if is_hub_id(path) and (line := reach(path)) and not quiet:
        _say(f"note: {line}")
    return path, template


@app.command(cls=Command, epilog=INSPECT_EXAMPLES)
def inspect(
    model: Annotated[Optional[str], typer.Argument(metavar="MODEL", show_default=False, rich_help_panel=MODEL, help="Model folder, .gguf file, Hub id or short name (none: list the bundled models).")] = None,
    label_tokens: Annotated[Optional[str], opt(metavar="LIST", panel=MODEL, help="Show how these label tokens tokenize.")] = None,
    check: Annotated[bool, opt("--check", panel=CHECK, help="Also load the weights and run the self-check in each mode (exit 1 if one fails).")] = False,
    device: Annotated[str, opt(panel=CHECK, help="With --check: auto | cpu | cuda | cuda:N.")] = "auto",
    dtype: Annotated[str, opt(panel=CHECK, help="With --check: auto | float32 | bfloat16 | float16.")] = "auto",
    attention: Annotated[str, opt(metavar="NAME", panel=CHECK, help="With --check: auto | flashinfer | flex | sdpa | eager.")] = "auto",
    trust_remote_code: Annotated[bool, opt("--trust-remote-code", panel=MODEL, help="Allow the checkpoint's own Python code to run.")] = False,
    cache_dir: CacheDir = None,
) -> None:  # fmt: skip
    """Show what scorecli sees in a model: kind, labels, sizes, MIS.

    Without MODEL: the models the set-up installs, by short name."""
    from scorecli.inspect import bundled_lines, describe

    if model is None:
        for line in bundled_lines():
            typer.echo(line)
        return
    _check_cache_and_runtime(cache_dir)
    path, _ = _resolve_model(model)
    _quiet_transformers()
    for line in describe(path, _csv(label_tokens), trust_remote_code, cache_dir, mis_line=not check, name=model):
        typer.echo(line)
    if check:
        from scorecli.inspect import check as self_check

        _one_line_warnings(quiet=False)  # e.g. --runtime auto running torch where ONNX Runtime cannot run

        lines, ok = self_check(path, _csv(label_tokens), trust_remote_code, cache_dir, device, dtype, attention)
        for line in lines:
            typer.echo(line)
        if not ok:
            raise typer.Exit(1)


@app.command(cls=Command, epilog=BENCH_EXAMPLES)
def bench(
    model: Model = None,
    rows: Annotated[int, opt(min=1, max=MAX_INT, metavar="N", panel=BENCH, help="Synthetic rows.")] = 32,
    items: Annotated[int, opt(min=1, max=MAX_INT, metavar="N", panel=BENCH, help="Items per row.")] = 32,
    query_tokens: Annotated[int, opt(min=1, max=MAX_INT, metavar="N", panel=BENCH, help="Tokens per query (prefix).")] = 128,
    item_tokens: Annotated[int, opt(min=1, max=MAX_INT, metavar="N", panel=BENCH, help="Tokens per item.")] = 32,
    attention: Annotated[str, opt(metavar="LIST", panel=BENCH, help="Comma-separated attention backends to compare.")] = "sdpa",
    modes: Annotated[Optional[str], opt(metavar="LIST", panel=BENCH, help="Comma-separated modes to compare (default: mis,single; single alone for a model that runs only single-item).")] = None,
    device: Device = "auto",
    dtype: DType = "auto",
    max_batch_tokens: BatchTokens = None,
    label_tokens: Annotated[Optional[str], opt(metavar="LIST", panel=MODEL, help="Causal-LM label tokens (default: any two).")] = None,
    repeats: Annotated[int, opt(min=1, max=MAX_INT, metavar="N", panel=BENCH, help="Timed repeats (median reported) after one warm-up.")] = 3,
    peak_tflops: Annotated[Optional[float], opt(metavar="TFLOPS", panel=OUTPUT, help="GPU bf16 peak for the FLOP fraction (default: known GPUs).")] = None,
    json_out: Annotated[Optional[str], opt("--json", metavar="PATH", panel=OUTPUT, help="Also write results as JSON to this path (- for stdout).")] = None,
    cache_dir: CacheDir = None,
) -> None:  # fmt: skip
    """Measure items/s and tokens/s on synthetic rows.

    MIS and single-item per attention backend; any kind of model (cross-encoders and embedding
    models run single-item)."""
    from scorecli.bench import Workload, check_arguments, report, run_bench

    check_arguments(_csv(attention), _csv(modes) or (), peak_tflops, json_out)  # before the model loads
    _check_cache_and_runtime(cache_dir)
    model_path, _ = _resolve_model(model)
    cfg = ScoreConfig(model=model_path, device=device, dtype=dtype, max_batch_tokens=max_batch_tokens,
                      label_tokens=_csv(label_tokens), cache_dir=cache_dir)  # fmt: skip
    _quiet_transformers()
    work = Workload(rows, items, query_tokens, item_tokens)
    results = run_bench(cfg, work, list(_csv(attention)), list(_csv(modes)) if modes else None, repeats, peak_tflops,
                        note=lambda line: typer.echo(f"scorecli bench: {line}", err=True), console=err)  # fmt: skip
    report(results, work, cfg, json_out, _device_name(device) if json_out else "")


def _quiet_transformers() -> None:
    """Our output is the only output: no "Loading weights" bars from transformers."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def _device_name(device: str) -> str:
    import torch

    from scorecli.model.load import resolve_device

    dev = resolve_device(device)
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"


def main() -> None:
    """Console entry point: run the app and map errors to exit codes (README: Exit codes)."""
    _STARTED.append(time.perf_counter())
    if os.environ.get("SCORECLI_TIMINGS"):
        from scorecli import timings

        timings.enable(_STARTED[-1])
    watch_signals(_say_interrupted)
    reserve_standard_fds()
    try:
        code = app(standalone_mode=False)
    except OutputClosed:
        pipe_closed()
    except ScorecliError as exc:
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt as exc:
        _interrupted(str(exc))
    except typer.Exit as exc:
        finish(exc.exit_code)
    except _usage_errors() as exc:  # every parsing error of typer / click is a usage error
        _fail(exc.format_message(), 2)
    except typer.Abort:
        _interrupted()
    except Exception as exc:  # anything unexpected: one line, exit 1
        _fail(error_line(exc), 1)
    # Outside standalone mode typer returns exit codes instead of exiting, and turns
    # Ctrl-C (and SIGTERM) into 130 after the output was already discarded.
    if code == 130:
        _interrupted()
    finish(code if isinstance(code, int) else 0)


def _usage_errors() -> tuple[type[Exception], ...]:
    """typer >= 0.20 raises its own vendored click's exceptions; older typer, click's."""
    found = [t for t in (getattr(typer, "TyperException", None),) if t is not None]
    try:
        import click

        found.append(click.ClickException)
    except ImportError:
        pass
    return tuple(found)


def _say(message: str) -> None:
    """One line on stderr, printed as it is: no markup, no emoji, control bytes escaped."""
    err.print(_one_line(message), markup=False, emoji=False, highlight=False, soft_wrap=True)


def _one_line(text: str) -> str:
    text = _CONTROL.sub(lambda m: repr(m.group())[1:-1], text.strip())
    return text.encode("utf-8", "backslashreplace").decode("utf-8")  # undecodable file names



def _fail(message: str, code: int) -> None:
    _say(f"error: {message}")
    finish(code)


def _one_line_warnings(quiet: bool) -> None:
    """Warnings as one line each (`warning: ...`); under --quiet only scorecli's own.
    torch's note that flex attention runs uncompiled (as documented on CPU) is not shown."""
    import warnings

    import scorecli

    ours = os.path.dirname(os.path.abspath(scorecli.__file__))
    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
    warnings.filterwarnings("ignore", module=r"torch\._(inductor|dynamo)")  # the compiler's notes to its developers

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, Notice):
            if not quiet:
                _say(f"note: {first_line(str(message))}")
        elif not quiet or os.path.abspath(filename).startswith(ours):
            _say(f"warning: {first_line(str(message))}")

    warnings.showwarning = show


def _interrupted(message: str = "") -> None:
    _say_interrupted(message)
    finish(interrupted_code())


if __name__ == "__main__":
    main()
