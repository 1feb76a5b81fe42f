"""The `scorecli` command line: flags -> one frozen config -> the scoring core.

Thin by design: it parses flags, checks what it can before the model loads (inputs, output,
template, first rows), hands the run to `run` (or `ray`), whose progress and summary go to
stderr (`progress`), and maps errors to exit codes: 2 for bad usage or input, 1 otherwise,
130 / 143 / 129 after SIGINT / SIGTERM / SIGHUP (`process`); each error is one line of plain text (no
markup, no emoji codes, control bytes escaped). A closed pipe on the output ends the process
quietly by SIGPIPE. torch is imported only inside commands, so `--help` is instant. The only
environment reads are $SCORECLI_MODEL and $SCORECLI_CACHE_DIR/$RAY_ADDRESS (through typer; the
model's name then goes through `model.default_model.resolve_model`, the resolution the library's
`Scorer` calls too, which reads $SCORECLI_MODEL itself when no name is given), $SCORECLI_TIMINGS
and $SCORECLI_BYTECODE_CACHE (0: no bytecode in the cache folder, `bytecode`). The
flags themselves (panels, help) are declared in `options`; `--help` is drawn by `help`.
"""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer

from scorecli import bytecode, timings
from scorecli import options as o
from scorecli.cli_cache import cache_app
from scorecli.config import ScoreConfig, check_copied_fields
from scorecli.core.templates import check_template
from scorecli.errors import OutputClosed, ScorecliError, UsageError, error_line
from scorecli.evaluate import evaluate
from scorecli.help import Command, Group, usage_errors
from scorecli.inspect import bundled_lines, describe, fitted
from scorecli.inspect import check as self_check
from scorecli.io import lazy_pandas
from scorecli.io.groups import grouping
from scorecli.io.output import Target, check_apart, resolve_output
from scorecli.io.readers import estimate_tokens, input_folders, resolve_inputs
from scorecli.model import lean_imports
from scorecli.model.cache import check_writable
from scorecli.model.default_model import resolve_model
from scorecli.model.gguf import default_cache_dir
from scorecli.options import opt
from scorecli.process import finish, pipe_closed, reserve_standard_fds, watch_signals
from scorecli.runtimes import runtime_info
from scorecli.stderr import (
    err,
    fail,
    interrupted,
    noting_interrupts,
    one_line_warnings,
    quiet_transformers,
    say,
    say_interrupted,
)
from scorecli.version import __version__

app = typer.Typer(
    cls=Group,
    add_completion=False,
    no_args_is_help=True,
    epilog=o.APP_EXAMPLES,
    help="Offline batch scoring with transformer rerankers, classifiers, embedding and reward models.",
)


def _print_version(value: bool) -> None:
    if value:
        print(f"scorecli {__version__}")
        raise typer.Exit()


@app.callback()
def _app(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Offline batch scoring with transformer rerankers, classifiers, embedding and reward models."""


@app.command(cls=Command, epilog=o.SCORE_EXAMPLES)
def score(
    ctx: typer.Context,
    inputs: Annotated[
        list[str], typer.Argument(metavar="INPUT", show_default=False, rich_help_panel=o.INPUT, help=o.INPUTS)
    ],
    out: Annotated[str, opt("--out", "-o")],
    model: o.Model = None,
    kind: Annotated[str | None, opt("--kind")] = None,
    mode: Annotated[str, opt("--mode")] = "auto",
    template: Annotated[str | None, opt("--template")] = None,
    instruction: Annotated[str | None, opt("--instruction")] = None,
    label_tokens: Annotated[str | None, opt("--label-tokens")] = None,
    label_token_ids: Annotated[str | None, opt("--label-token-ids")] = None,
    activation: Annotated[str | None, opt("--activation")] = None,
    apply_softmax: Annotated[bool, opt("--apply-softmax")] = False,
    positive_label: Annotated[str | None, opt("--positive-label")] = None,
    pooled_hidden_states: Annotated[bool, opt("--pooled-hidden-states")] = False,
    pooling: Annotated[str | None, opt("--pooling")] = None,
    hidden_dtype: Annotated[str, opt("--hidden-dtype")] = "float32",
    query_field: Annotated[str, opt("--query-field")] = "query",
    items_field: Annotated[str, opt("--items-field")] = "items",
    id_field: Annotated[str, opt("--id-field")] = "id",
    labels_field: Annotated[str, opt("--labels-field")] = "labels",
    group_by: Annotated[str | None, opt("--group-by")] = None,
    device: o.Device = "auto",
    dtype: o.DType = "auto",
    attention: Annotated[str, opt("--attention")] = "auto",
    runtime: Annotated[str, opt("--runtime")] = "auto",
    compile_layers: Annotated[str, opt("--compile")] = "auto",
    max_batch_tokens: o.BatchTokens = None,
    max_seq_len: Annotated[int | None, opt("--max-seq-len", min=2, max=o.MAX_INT)] = None,
    truncate: Annotated[str, opt("--truncate")] = "item",
    window_rows: Annotated[int | None, opt("--window-rows", min=1, max=o.MAX_INT)] = None,
    window_seconds: Annotated[float | None, opt("--window-seconds", callback=o.seconds)] = None,
    skip_bad_rows: Annotated[bool, opt("--skip-bad-rows")] = False,
    top_k: Annotated[int | None, opt("--top-k", min=1, max=o.MAX_INT)] = None,
    chunk_tokens: Annotated[int | None, opt("--chunk-tokens", min=1, max=o.MAX_INT)] = None,
    chunk_overlap: Annotated[int, opt("--chunk-overlap", min=0, max=o.MAX_INT)] = 0,
    chunk_aggregate: Annotated[str, opt("--chunk-aggregate")] = "max",
    similarity: Annotated[str | None, opt("--similarity")] = None,
    query_prompt: Annotated[str | None, opt("--query-prompt")] = None,
    item_prompt: Annotated[str | None, opt("--item-prompt")] = None,
    self_check: Annotated[bool, opt("--self-check/--no-self-check")] = True,
    compact: Annotated[bool, opt("--compact")] = False,
    trust_remote_code: Annotated[bool, opt("--trust-remote-code")] = False,
    allow_pickle: Annotated[bool, opt("--allow-pickle")] = False,
    cache_dir: o.CacheDir = None,
    quiet: Annotated[bool, opt("--quiet", "-q")] = False,
    resume: Annotated[bool, opt("--resume")] = False,
    score_cache: Annotated[str | None, opt("--score-cache", callback=o.home)] = None,
    audit: Annotated[int, opt("--audit", min=0, max=o.MAX_INT)] = 0,
    audit_strict: Annotated[bool, opt("--audit-strict")] = False,
    engine: Annotated[str, opt("--engine")] = "local",
    ray_address: Annotated[str | None, opt("--ray-address", envvar="RAY_ADDRESS", show_envvar=True)] = None,
    num_workers: Annotated[int | None, opt("--num-workers", min=1, max=o.MAX_INT)] = None,
) -> None:
    """Score every item of every input row against its query.

    Writes one output row per input row, in input order (README: Quickstart)."""
    _check_working_folder()
    _check_engine(ctx, engine, num_workers, audit)
    if engine == "local":
        lazy_pandas.defer()  # pyarrow asks for pandas objects no input here holds: 0.3-0.5 s
    paths, target = _inputs_and_output(inputs, out, score_cache)
    # what the flags alone tell fails before anything about the model is looked up
    token_ids = o.csv_ints(label_token_ids)
    _check_flags(id_field, labels_field, template, apply_softmax, activation)
    _check_cache_and_runtime(ctx, cache_dir, runtime, quiet)
    model_path, default_template = _resolve_model(model, ctx, quiet)
    cfg = ScoreConfig(  # each flag's field
        model=model_path,
        kind=kind,
        mode=mode,
        template=template or default_template,
        instruction=instruction,
        label_tokens=o.csv(label_tokens),
        label_token_ids=token_ids,
        activation="softmax" if apply_softmax and activation is None else activation,
        positive_label=positive_label,
        pooled_hidden_states=pooled_hidden_states,
        pooling=pooling,
        hidden_dtype=hidden_dtype,
        query_field=query_field,
        items_field=items_field,
        id_field=id_field,
        labels_field=labels_field,
        group_by=group_by,
        device=device,
        dtype=dtype,
        attention=attention,
        compile=compile_layers,
        runtime=runtime,
        max_batch_tokens=max_batch_tokens,
        max_seq_len=max_seq_len,
        truncate=truncate,
        window_rows=window_rows or o.WINDOW_ROWS,
        window_seconds=window_seconds if window_seconds or window_rows else o.WINDOW_SECONDS,
        self_check=self_check,
        skip_bad_rows=skip_bad_rows,
        compact=compact,
        top_k=top_k,
        chunk_tokens=chunk_tokens,
        chunk_overlap=chunk_overlap,
        chunk_aggregate=chunk_aggregate,
        similarity=similarity,
        query_prompt=query_prompt,
        item_prompt=item_prompt,
        trust_remote_code=trust_remote_code,
        allow_pickle=allow_pickle,
        cache_dir=cache_dir,
        score_cache=score_cache,
        audit=audit,
        audit_strict=audit_strict,
        job_tokens=estimate_tokens(paths),
    )
    if template is None:
        check_template(cfg.template)
    _run(cfg, paths, target, engine, resume, quiet, ray_address, num_workers)


def _check_engine(ctx: typer.Context, engine: str, num_workers: int | None, audit: int) -> None:
    """UsageError for an engine scorecli does not have, and for flags the chosen engine does not
    take (`--num-workers`, `--ray-address` without Ray; `--audit` with it)."""
    if engine not in ("local", "ray"):
        raise UsageError(f"--engine: expected local or ray, got {engine!r}")
    if num_workers is not None and engine != "ray":
        raise UsageError("--num-workers needs --engine ray")
    if _given(ctx, "ray_address") and engine != "ray":  # $RAY_ADDRESS may be set for other tools: not refused
        raise UsageError("--ray-address needs --engine ray")
    if audit and engine == "ray":
        raise UsageError("--audit re-scores pairs in this process: use --engine local (the default)")


def _inputs_and_output(inputs: list[str], out: str, score_cache: str | None) -> tuple[list[str], Target]:
    """(the input paths, the output `Target`), checked before any work: the output may not touch an
    input, nor the score cache's folder the output (`io.output`)."""
    paths = resolve_inputs(inputs)
    target = resolve_output(out, paths, input_folders(inputs))
    if score_cache:
        check_apart(target, score_cache, "--score-cache")
    return paths, target


def _check_flags(
    id_field: str, labels_field: str, template: str | None, apply_softmax: bool, activation: str | None
) -> None:
    """UsageError for what the flags alone tell: copied fields that clash, a `--template` that
    does not read, `--apply-softmax` against another `--activation`."""
    check_copied_fields(id_field, labels_field)
    if template is not None:
        check_template(template)
    if apply_softmax and activation not in (None, "softmax"):
        raise UsageError("--apply-softmax contradicts --activation " + activation)


def _run(
    cfg: ScoreConfig,
    paths: list[str],
    target: Target,
    engine: str,
    resume: bool,
    quiet: bool,
    ray_address: str | None,
    num_workers: int | None,
) -> None:
    """Run the job on its engine: its checkpoint opened (an earlier run's folder said as it is
    replaced), the first rows read before the model loads (`preflight`), progress and the summary
    on stderr unless `quiet`, then the timings line ($SCORECLI_TIMINGS)."""
    one_line_warnings(quiet)
    console = None if quiet else err
    from scorecli.engine.checkpoint import Checkpoint
    from scorecli.engine.run import open_rows, preflight, run_score, total_rows

    warn = None if quiet else lambda line: say(f"warning: {line}")
    checkpoint = Checkpoint.open(target, cfg, paths, resume, warn)  # an earlier run's folder: said as it is replaced
    if checkpoint is not None and checkpoint.note and not quiet:
        say(f"warning: {checkpoint.note}")
    with noting_interrupts():
        if engine == "ray":
            from scorecli.engine.ray import run_score_ray

            preflight(cfg, paths, iter(()))  # the driver reads the inputs itself
            run_score_ray(
                cfg,
                paths,
                target,
                address=ray_address,
                num_workers=num_workers,
                console=console,
                checkpoint=checkpoint,
                started=_STARTED[-1] if _STARTED else None,
            )
            return
        rows = preflight(cfg, paths, open_rows(cfg, paths, stdin=None, checkpoint=checkpoint))
        run_score(
            cfg,
            paths,
            target,
            total_rows=total_rows(cfg, paths),
            console=console,
            stdin=None,
            rows=rows,
            checkpoint=checkpoint,
            started=_STARTED[-1] if _STARTED else None,
        )
    timings.mark("done")
    if (line := timings.line()) and not quiet:
        say(line)


def _given(ctx: typer.Context, name: str, source: str = "COMMANDLINE") -> bool:
    """Whether the parameter `name` was given on the command line (or where `source` names: "ENVIRONMENT"),
    not a default."""
    given = ctx.get_parameter_source(name)
    return given is not None and given.name == source


_STARTED: list[float] = []  # when `main` began: the summary's start-up time counts from here


def _check_cache_and_runtime(
    ctx: typer.Context, cache_dir: str | None, runtime: str = "auto", quiet: bool = False
) -> None:
    """An explicit --cache-dir (or $SCORECLI_CACHE_DIR, named as the user gave it) that cannot be
    written, or an explicit ONNX runtime whose packages are missing, stop the run before the model
    loads (`--runtime auto` falls back instead). Before torch is imported: where the environment
    keeps no bytecode for it, it goes to the cache folder (`bytecode`)."""
    _check_working_folder()
    from_env = _given(ctx, "cache_dir", "ENVIRONMENT")
    check_writable(cache_dir, f"$SCORECLI_CACHE_DIR={cache_dir}" if from_env else f"--cache-dir {cache_dir}")
    if (note := bytecode.cache_bytecode(cache_dir or default_cache_dir())) and not quiet:
        say(f"note: {note}")
    if runtime_info(runtime).needs is not None:  # the runtime's module imports torch: not for the others
        from scorecli.runtimes.onnx import check_packages

        check_packages(runtime)


def _check_working_folder() -> None:
    """UsageError when the current directory is gone (deleted after the shell entered it): torch's
    MKL stops the process on import there ("Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so"),
    and a relative path cannot be made absolute (FileNotFoundError, exit 1)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise UsageError(
            "the current directory no longer exists (deleted after the shell entered it): cd into one that does"
        ) from None


def _resolve_model(model: str | None, ctx: typer.Context | None = None, quiet: bool = False) -> tuple[str, str]:
    """(model path, default template) of --model or $SCORECLI_MODEL (a path, a Hub id, a bundled
    model's short name), else the default model (docs/models.md: Which models, by short name). A Hub id is asked
    for once, briefly: one that cannot be reached fails here, in one line (`model.hub`)."""
    choice = resolve_model(model, ctx is not None and _given(ctx, "model", "ENVIRONMENT"))
    if choice.note and not quiet:
        say(f"note: {choice.note}")
    return choice.path, choice.template


@app.command(cls=Command, epilog=o.INSPECT_EXAMPLES)
def inspect(
    ctx: typer.Context,
    model: Annotated[
        str | None, typer.Argument(metavar="MODEL", show_default=False, rich_help_panel=o.MODEL, help=o.INSPECTED)
    ] = None,
    label_tokens: Annotated[
        str | None, opt("--label-tokens", panel=o.MODEL, help="Show how these label tokens tokenize.")
    ] = None,
    check: Annotated[bool, opt("--check")] = False,
    device: Annotated[str, opt("--device", panel=o.CHECK, help="With --check: auto | cpu | cuda | cuda:N.")] = "auto",
    dtype: Annotated[
        str, opt("--dtype", panel=o.CHECK, help="With --check: auto | float32 | bfloat16 | float16.")
    ] = "auto",
    attention: Annotated[str, opt("--attention", panel=o.CHECK, help=f"With --check: {o.ATTENTIONS}")] = "auto",
    trust_remote_code: Annotated[bool, opt("--trust-remote-code")] = False,
    cache_dir: o.CacheDir = None,
) -> None:
    """Show what scorecli sees in a model: kind, labels, sizes, MIS.

    Without MODEL: the models the set-up installs, by short name."""
    if model is None:
        for line in fitted(bundled_lines()):
            typer.echo(line)
        return
    _check_cache_and_runtime(ctx, cache_dir)
    path, _ = _resolve_model(model, ctx)
    ScoreConfig(model=path, device=device, dtype=dtype, attention=attention)  # a bad choice refused before any line
    quiet_transformers()
    for line in fitted(
        describe(path, o.csv(label_tokens), trust_remote_code, cache_dir, mis_line=not check, name=model)
    ):
        typer.echo(line)
    if check:
        one_line_warnings(quiet=False)  # e.g. --runtime auto running torch where ONNX Runtime cannot run

        lines, ok = self_check(path, o.csv(label_tokens), trust_remote_code, cache_dir, device, dtype, attention)
        for line in fitted(lines):
            typer.echo(line)
        if not ok:
            raise typer.Exit(1)


@app.command(name="eval", cls=Command, epilog=o.EVAL_EXAMPLES)
def eval_(
    ctx: typer.Context,
    scores: Annotated[
        list[str], typer.Argument(metavar="SCORES", show_default=False, rich_help_panel=o.INPUT, help=o.SCORES)
    ],
    labels: Annotated[list[str] | None, opt("--labels")] = None,
    labels_field: Annotated[str, opt("--labels-field", help=o.EVAL_LABELS_FIELD)] = "labels",
    id_field: Annotated[str, opt("--id-field", help=o.EVAL_ID_FIELD)] = "id",
    query_field: Annotated[str, opt("--query-field")] = "query",
    items_field: Annotated[str, opt("--items-field")] = "items",
    group_by: Annotated[str | None, opt("--group-by")] = None,
    top_k: Annotated[int | None, opt("--top-k", min=1, max=o.MAX_INT, help=o.EVAL_K)] = None,
) -> None:
    """Ranking metrics of scores against relevance labels: MRR@k, nDCG@k, accuracy@1.

    The labels the output kept, or those of the input it was scored from (--labels)."""
    if labels is None and (alone := [f"--{n.replace('_', '-')}" for n in _INPUT_ONLY if _given(ctx, n)]):
        raise UsageError(
            f"{', '.join(alone)} {'needs' if len(alone) == 1 else 'need'} --labels: "
            f"{'it names' if len(alone) == 1 else 'they name'} the scored input's fields, which eval reads from --labels"
        )
    ranking = evaluate(
        scores,
        labels,
        labels_field,
        id_field,
        grouping(group_by, query_field, items_field, labels_field),
        top_k,
        items_field,
    )
    typer.echo(ranking.line())


# eval's flags that name the fields of the input a scores output came from: read with --labels only
_INPUT_ONLY = ("id_field", "query_field", "items_field", "group_by")


@app.command(cls=Command, epilog=o.BENCH_EXAMPLES)
def bench(
    ctx: typer.Context,
    model: o.Model = None,
    rows: Annotated[int, opt("--rows", min=1, max=o.MAX_INT)] = 32,
    items: Annotated[int, opt("--items", min=1, max=o.MAX_INT)] = 32,
    query_tokens: Annotated[int, opt("--query-tokens", min=1, max=o.MAX_INT)] = 128,
    item_tokens: Annotated[int, opt("--item-tokens", min=1, max=o.MAX_INT)] = 32,
    attention: Annotated[
        str, opt("--attention", panel=o.BENCH, metavar="LIST", help="Comma-separated attention backends to compare.")
    ] = o.EVERYWHERE,
    modes: Annotated[str | None, opt("--modes")] = None,
    device: o.Device = "auto",
    dtype: o.DType = "auto",
    max_batch_tokens: o.BatchTokens = None,
    label_tokens: Annotated[
        str | None, opt("--label-tokens", panel=o.MODEL, help="Causal-LM label tokens (default: any two).")
    ] = None,
    repeats: Annotated[int, opt("--repeats", min=1, max=o.MAX_INT)] = 3,
    peak_tflops: Annotated[float | None, opt("--peak-tflops")] = None,
    json_out: Annotated[str | None, opt("--json")] = None,
    cache_dir: o.CacheDir = None,
) -> None:
    """Measure items/s and tokens/s on synthetic rows.

    MIS and single-item per attention backend; any kind of model (those that score pairs or
    compare embeddings run single-item)."""
    _check_working_folder()  # before scorecli.bench imports torch
    from scorecli.bench import Workload, check_arguments, report, run_bench

    check_arguments(o.csv(attention), o.csv(modes) or (), peak_tflops, json_out, device)  # before the model loads
    _check_cache_and_runtime(ctx, cache_dir)
    model_path, _ = _resolve_model(model, ctx)
    cfg = ScoreConfig(
        model=model_path,
        device=device,
        dtype=dtype,
        max_batch_tokens=max_batch_tokens,
        label_tokens=o.csv(label_tokens),
        cache_dir=cache_dir,
    )
    quiet_transformers()
    one_line_warnings(quiet=False)  # as `score` shows them (flex on the CPU: not torch's 8-line note)
    work = Workload(rows, items, query_tokens, item_tokens)
    results = run_bench(
        cfg,
        work,
        list(o.csv(attention)),
        list(o.csv(modes)) if modes else None,
        repeats,
        peak_tflops,
        note=lambda line: typer.echo(f"scorecli bench: {line}", err=True),
        console=err,
    )
    report(results, work, cfg, json_out)


app.add_typer(cache_app, name="cache", help="What a score cache holds (info), and pruning it (prune).")


def main() -> None:
    """Console entry point: run the app and map errors to exit codes (docs/cli.md: Exit codes)."""
    _STARTED.append(time.perf_counter())
    if os.environ.get("SCORECLI_TIMINGS"):
        timings.enable(_STARTED[-1])
    watch_signals(say_interrupted)
    reserve_standard_fds()
    lean_imports.skip_unneeded()  # no command trains, generates or launches: model code without scipy &c.
    if os.environ.get("SCORECLI_BYTECODE_CACHE", "1") not in ("0", "off"):
        bytecode.keep_bytecode()  # where the environment keeps no bytecode for torch: in the cache folder
    try:
        code = app(standalone_mode=False)
    except OutputClosed:
        pipe_closed()
    except ScorecliError as exc:
        fail(str(exc), exc.exit_code)
    except KeyboardInterrupt as exc:
        interrupted(str(exc))
    except typer.Exit as exc:
        finish(exc.exit_code)
    except usage_errors() as exc:  # every parsing error of typer / click is a usage error
        # a group run without a command (`scorecli`, `scorecli cache`) has shown its help: no message
        fail(exc.format_message() or "no command given: the commands are listed above", 2)
    except typer.Abort:
        interrupted()
    except Exception as exc:  # noqa: BLE001 - anything unexpected: one line, exit 1
        fail(error_line(exc), 1)
    # Outside standalone mode typer returns exit codes instead of exiting, and turns
    # Ctrl-C (and SIGTERM) into 130 after the output was already discarded.
    if code == 130:
        interrupted()
    finish(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
