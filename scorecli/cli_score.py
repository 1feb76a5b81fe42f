"""`scorecli score`: its flags -> one frozen `ScoreConfig` -> the job on its engine.

What the flags alone tell is checked before anything about the model is looked up (the engine's
flags, inputs and output, copied fields, the template), then the cache folder and runtime and the
model's name (`cli_checks`); the run goes to `engine.run` (or `engine.ray`), whose progress and
summary go to stderr. The flags themselves (panels, help, choices) are declared in `options`; the
app registers the command and maps its errors to exit codes (`cli`). Knows nothing about tensors:
torch loads inside `_run`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from scorecli import options as o
from scorecli import timings
from scorecli.cache import FILES as SCORE_CACHE_FILES
from scorecli.cli_checks import check_cache_and_runtime, check_working_folder, given, model_and_template
from scorecli.config import ScoreConfig, check_copied_fields
from scorecli.core.templates import check_template
from scorecli.errors import UsageError
from scorecli.io import lazy_pandas
from scorecli.io.output import Target, check_apart, check_unread, resolve_output
from scorecli.io.readers import estimate_tokens, input_folders, resolve_inputs
from scorecli.model.cache import GLOBBED_FILES
from scorecli.options import opt
from scorecli.stderr import err, noting_interrupts, one_line_warnings, say

STARTED: list[float] = []  # when `cli.main` began: the summary's start-up time counts from here


def score(
    ctx: typer.Context,
    inputs: Annotated[
        list[str], typer.Argument(metavar="INPUT", show_default=False, rich_help_panel=o.INPUT, help=o.INPUTS)
    ],
    out: Annotated[str, opt("--out", "-o")],
    model: o.Model = None,
    kind: Annotated[str | None, opt("--kind")] = None,
    mode: Annotated[str, opt("--mode")] = "auto",
    template: Annotated[str | None, opt("--template", callback=o.home)] = None,
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
    check_working_folder()
    _check_engine(ctx, engine, num_workers, audit)
    if engine == "local":
        lazy_pandas.defer()  # pyarrow asks for pandas objects no input here holds: 0.3-0.5 s
    paths, target = _inputs_and_output(inputs, out, score_cache, cache_dir)
    # what the flags alone tell fails before anything about the model is looked up
    token_ids = o.csv_ints(label_token_ids)
    _check_flags(id_field, labels_field, template, apply_softmax, activation)
    check_cache_and_runtime(ctx, cache_dir, runtime, quiet)
    model_path, default_template = model_and_template(model, ctx, quiet)
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
    if given(ctx, "ray_address") and engine != "ray":  # $RAY_ADDRESS may be set for other tools: not refused
        raise UsageError("--ray-address needs --engine ray")
    if audit and engine == "ray":
        raise UsageError("--audit re-scores pairs in this process: use --engine local (the default)")


def _inputs_and_output(
    inputs: list[str], out: str, score_cache: str | None, cache_dir: str | None
) -> tuple[list[str], Target]:
    """(the input paths, the output `Target`), checked before any work: the output may not touch an
    input, nor the score cache's folder the output, nor an input glob list the files of the score
    cache or of a cache folder given (`io.output`)."""
    paths = resolve_inputs(inputs)
    folders = input_folders(inputs)
    target = resolve_output(out, paths, folders)
    if score_cache:
        check_apart(target, score_cache, "--score-cache")
        check_unread(score_cache, SCORE_CACHE_FILES, "--score-cache", folders)
    if cache_dir:
        check_unread(cache_dir, GLOBBED_FILES, "--cache-dir", folders)
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
    with noting_interrupts(None if checkpoint is None else checkpoint.second_signal_line):
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
                started=STARTED[-1] if STARTED else None,
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
            started=STARTED[-1] if STARTED else None,
        )
    timings.mark("done")
    if (line := timings.line()) and not quiet:
        say(line)
