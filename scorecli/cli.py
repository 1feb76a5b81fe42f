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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Optional

import typer
from rich.console import Console

from scorecli.config import ScoreConfig
from scorecli.errors import Notice, OutputClosed, ScorecliError, UsageError, error_line, first_line
from scorecli.process import finish, interrupted_code, pipe_closed, reserve_standard_fds, watch_signals

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Offline batch scoring with transformer rerankers, classifiers and reward models.")
# paths and user text are printed as they are: no markup, no :emoji: codes
err = Console(stderr=True, highlight=False, markup=False, emoji=False)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
# Every integer flag is range-checked while it is parsed (exit 2, one line): no count or token id
# needs more than 2**31 - 1, and a value past 2**63 - 1 would overflow numpy after the model loads.
MAX_INT = 2**31 - 1

Model = Annotated[Optional[str], typer.Option("--model", "-m", envvar="SCORECLI_MODEL", show_envvar=True, help="Model folder, .gguf file or Hub id (default: the bundled demo judge).")]
CacheDir = Annotated[Optional[str], typer.Option(envvar="SCORECLI_CACHE_DIR", help="Cache for dequantized GGUF models and ONNX exports (default ~/.cache/scorecli).")]


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


@app.command()
def score(
    inputs: Annotated[list[str], typer.Argument(help="JSONL/Parquet files, directories, globs, URLs (s3://, gs://, abfs://, hf://datasets/...), or - for stdin.")],
    out: Annotated[str, typer.Option("--out", "-o", help="Output .parquet, .jsonl, a DIR/ for a dataset (a path or an s3://, gs://, abfs:// URL), or - (JSONL on stdout).")],
    model: Model = None,
    kind: Annotated[Optional[str], typer.Option(help="seq-cls | causal-lm | cross-encoder | embedding (default: detected).")] = None,
    mode: Annotated[str, typer.Option(help="auto | mis | single.")] = "auto",
    template: Annotated[Optional[str], typer.Option(help="plain | qwen3-reranker | yes-no-chat | a .toml/.json file.")] = None,
    instruction: Annotated[Optional[str], typer.Option(help="Instruction for templates that take one.")] = None,
    label_tokens: Annotated[Optional[str], typer.Option(help="Causal-LM label tokens, e.g. yes,no.")] = None,
    label_token_ids: Annotated[Optional[str], typer.Option(help="Causal-LM label token ids, e.g. 9454,2152.")] = None,
    activation: Annotated[Optional[str], typer.Option(help="none | softmax | sigmoid.")] = None,
    apply_softmax: Annotated[bool, typer.Option("--apply-softmax", help="Same as --activation softmax.")] = False,
    positive_label: Annotated[Optional[str], typer.Option(help="Label (name or index) that fills `score`.")] = None,
    pooled_hidden_states: Annotated[bool, typer.Option("--pooled-hidden-states", help="Also write each item's pooled final hidden state.")] = False,
    pooling: Annotated[Optional[str], typer.Option(help="last | cls (default: last for decoders, cls for cross-encoders).")] = None,
    hidden_dtype: Annotated[str, typer.Option(help="float32 | float16 for pooled hidden states.")] = "float32",
    query_field: Annotated[str, typer.Option(help="Input field holding the query.")] = "query",
    items_field: Annotated[str, typer.Option(help="Input field holding the items.")] = "items",
    id_field: Annotated[str, typer.Option(help="Input field copied to the output as the row id.")] = "id",
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N.")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto | float32 | bfloat16 | float16.")] = "auto",
    attention: Annotated[str, typer.Option(help="auto | flashinfer | flex | sdpa | eager.")] = "auto",
    runtime: Annotated[str, typer.Option(help="CPU BERT-family encoders: auto (onnx where installed and it applies, else torch) | torch | onnx (exported once, cached) | onnx-int8 (opt-in, int8 dynamic quantization; its drift is measured and recorded).")] = "auto",
    compile_layers: Annotated[str, typer.Option("--compile", help="Decoders: torch.compile the model's layers. auto: on CUDA (falls back to uncompiled layers if the compiler fails) | on | off.")] = "auto",
    max_batch_tokens: Annotated[Optional[int], typer.Option(min=1, max=MAX_INT, help="Token budget of one forward batch, padding counted (default: 2048 on CPU; on CUDA what half the free memory holds, 16384 to 131072).")] = None,
    max_seq_len: Annotated[Optional[int], typer.Option(min=2, max=MAX_INT, help="Longest packed sequence (default: model maximum, capped at 8192).")] = None,
    truncate: Annotated[str, typer.Option(help="item: cut over-long items' text | error: fail.")] = "item",
    window_rows: Annotated[int, typer.Option(min=1, max=MAX_INT, help="Rows read, scored and written per window.")] = 2048,
    skip_bad_rows: Annotated[bool, typer.Option("--skip-bad-rows", help="Write bad rows with null scores and an error column.")] = False,
    top_k: Annotated[Optional[int], typer.Option(min=1, max=MAX_INT, help="Add the column top_k: the indices of each row's K best items, best first.")] = None,
    chunk_tokens: Annotated[Optional[int], typer.Option(min=1, max=MAX_INT, help="Score items longer than N tokens in chunks of N tokens instead of cutting them.")] = None,
    chunk_overlap: Annotated[int, typer.Option(min=0, max=MAX_INT, help="Tokens each chunk shares with the one before (less than --chunk-tokens).")] = 0,
    chunk_aggregate: Annotated[str, typer.Option(help="max | mean | first: an item's score from its chunks'.")] = "max",
    similarity: Annotated[Optional[str], typer.Option(help="Embedding models: cosine | dot (default: the model's own, else cosine).")] = None,
    query_prompt: Annotated[Optional[str], typer.Option(help="Embedding models: the query's prompt, by name or as text (default: the model's 'query').")] = None,
    item_prompt: Annotated[Optional[str], typer.Option(help="Embedding models: the items' prompt, by name or as text (default: 'document', else 'passage').")] = None,
    self_check: Annotated[bool, typer.Option("--self-check/--no-self-check", help="First compare a probe row's scores with the model's own forward; stop on a mismatch.")] = True,
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code", help="Allow the checkpoint's own Python code to run.")] = False,
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help="Allow pickled .bin weights (they can run code).")] = False,
    cache_dir: CacheDir = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress and no summary (for cron).")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the job whose finished rows <out>.partial/ (or a directory --out) keeps; without one, start it.")] = False,
    engine: Annotated[str, typer.Option(help="local: score in this process | ray: on Ray workers (needs the ray extra).")] = "local",
    ray_address: Annotated[Optional[str], typer.Option(envvar="RAY_ADDRESS", show_envvar=True, help="With --engine ray: the cluster to join (auto, HOST:PORT, ray://...); default: a local Ray.")] = None,
    num_workers: Annotated[Optional[int], typer.Option(min=1, max=MAX_INT, help="With --engine ray: scoring workers (default: one per GPU in the cluster, else 1).")] = None,
) -> None:
    """Score every item of every input row against its query; write one output row per input row."""
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
        max_seq_len=max_seq_len, truncate=truncate, window_rows=window_rows, skip_bad_rows=skip_bad_rows, top_k=top_k,
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


def _resolve_model(model: str | None) -> tuple[str, str]:
    """(model path, default template): the flag or $SCORECLI_MODEL, else the bundled judge."""
    from scorecli.model.default_model import default_model_path

    if model:  # the bundled judge named by its path keeps its template
        return model, "yes-no-chat" if _same_file(model, default_model_path) else "plain"
    return default_model_path(), "yes-no-chat"


def _same_file(path: str, other: Callable[[], str]) -> bool:
    """Whether `path` is the file `other()` names (False when either cannot be found)."""
    if not path.endswith(".gguf") or not os.path.isfile(path):
        return False
    try:
        return os.path.samefile(path, other())
    except Exception:  # noqa: BLE001 - the bundled model is not installed, or its path is unreadable
        return False


@app.command()
def inspect(
    model: Annotated[str, typer.Argument(help="Model folder, .gguf file or Hub id.")],
    label_tokens: Annotated[Optional[str], typer.Option(help="Show how these label tokens tokenize.")] = None,
    check: Annotated[bool, typer.Option("--check", help="Also load the weights and run the self-check in each mode (exit 1 if one fails).")] = False,
    device: Annotated[str, typer.Option(help="With --check: auto | cpu | cuda | cuda:N.")] = "auto",
    dtype: Annotated[str, typer.Option(help="With --check: auto | float32 | bfloat16 | float16.")] = "auto",
    attention: Annotated[str, typer.Option(help="With --check: auto | flashinfer | flex | sdpa | eager.")] = "auto",
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code")] = False,
    cache_dir: CacheDir = None,
) -> None:
    """Show a model's kind, architecture, labels, sizes and whether MIS applies."""
    from scorecli.inspect import describe

    _check_cache_and_runtime(cache_dir)
    _quiet_transformers()
    for line in describe(model, _csv(label_tokens), trust_remote_code, cache_dir, mis_line=not check):
        typer.echo(line)
    if check:
        from scorecli.inspect import check as self_check

        _one_line_warnings(quiet=False)  # e.g. --runtime auto running torch where ONNX Runtime cannot run

        lines, ok = self_check(model, _csv(label_tokens), trust_remote_code, cache_dir, device, dtype, attention)
        for line in lines:
            typer.echo(line)
        if not ok:
            raise typer.Exit(1)


@app.command()
def bench(
    model: Model = None,
    rows: Annotated[int, typer.Option(min=1, max=MAX_INT, help="Synthetic rows.")] = 32,
    items: Annotated[int, typer.Option(min=1, max=MAX_INT, help="Items per row.")] = 32,
    query_tokens: Annotated[int, typer.Option(min=1, max=MAX_INT, help="Tokens per query (prefix).")] = 128,
    item_tokens: Annotated[int, typer.Option(min=1, max=MAX_INT, help="Tokens per item.")] = 32,
    attention: Annotated[str, typer.Option(help="Comma-separated backends to compare.")] = "sdpa",
    modes: Annotated[Optional[str], typer.Option(help="Comma-separated modes to compare (default: mis,single; single alone for a model that runs only single-item).")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N.")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto | float32 | bfloat16 | float16.")] = "auto",
    max_batch_tokens: Annotated[Optional[int], typer.Option(min=1, max=MAX_INT, help="Token budget of one forward batch (default: 2048 on CPU; on CUDA sized from the free memory, 16384 to 131072).")] = None,
    label_tokens: Annotated[Optional[str], typer.Option(help="Causal-LM label tokens (default: any two).")] = None,
    repeats: Annotated[int, typer.Option(min=1, max=MAX_INT, help="Timed repeats (median reported) after one warm-up.")] = 3,
    peak_tflops: Annotated[Optional[float], typer.Option(help="GPU bf16 peak for the FLOP fraction (default: known GPUs).")] = None,
    json_out: Annotated[Optional[str], typer.Option("--json", help="Also write results as JSON to this path (- for stdout).")] = None,
    cache_dir: CacheDir = None,
) -> None:
    """Synthetic throughput: items/s and tokens/s for MIS and single-item, per attention backend."""
    import json

    from rich.table import Table

    from scorecli.bench import Workload, as_json, check_arguments, run_bench

    model_path, _ = _resolve_model(model)
    cfg = ScoreConfig(model=model_path, device=device, dtype=dtype, max_batch_tokens=max_batch_tokens,
                      label_tokens=_csv(label_tokens), cache_dir=cache_dir)  # fmt: skip
    check_arguments(_csv(attention), _csv(modes) or (), peak_tflops, json_out)  # before the model loads
    _check_cache_and_runtime(cache_dir)
    _quiet_transformers()
    work = Workload(rows, items, query_tokens, item_tokens)
    results = run_bench(cfg, work, list(_csv(attention)), list(_csv(modes)) if modes else None, repeats, peak_tflops,
                        note=lambda line: typer.echo(f"scorecli bench: {line}", err=True))  # fmt: skip
    table = Table(title=f"scorecli bench: {rows} rows x {items} items, query {query_tokens} + item {item_tokens} tokens")
    for col in ("attention", "mode", "seconds", "items/s", "tokens/s", "FLOP fraction"):
        table.add_column(col, justify="right")
    for r in results:
        frac = f"{r.flop_fraction:.1%}" if r.flop_fraction is not None else "n/a"
        table.add_row(r.attention, r.mode, f"{r.seconds:.3f}", f"{r.items_per_s:,.1f}", f"{r.tokens_per_s:,.0f}", frac)
    Console(stderr=json_out == "-").print(table)
    if json_out:
        text = json.dumps(as_json(results, work, cfg, _device_name(device)), indent=2)
        if json_out == "-":
            typer.echo(text)
        else:
            with open(json_out, "w", encoding="utf-8") as f:
                f.write(text + "\n")


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
