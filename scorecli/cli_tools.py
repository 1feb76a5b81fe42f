"""The commands beside `score`: `scorecli inspect` (what scorecli sees in a model, and its
self-check), `scorecli eval` (ranking metrics of a scores output) and `scorecli bench` (items/s and
tokens/s on synthetic rows).

Each turns its flags into the call of the module that does the work (`inspect`, `evaluate`,
`bench`), after the checks every command shares (`cli_checks`); the app registers them and maps
their errors to exit codes (`cli`). torch is imported only inside the commands that run a model.
"""

from __future__ import annotations

from typing import Annotated

import typer

from scorecli import options as o
from scorecli.cli_checks import check_cache_and_runtime, check_working_folder, given, model_and_template
from scorecli.config import ScoreConfig
from scorecli.errors import UsageError
from scorecli.evaluate import evaluate
from scorecli.inspect import bundled_lines, describe, fitted
from scorecli.inspect import check as self_check
from scorecli.io.groups import grouping
from scorecli.options import opt
from scorecli.stderr import err, one_line_warnings, quiet_transformers


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
    check_cache_and_runtime(ctx, cache_dir)
    path, _ = model_and_template(model, ctx)
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
    if labels is None and (alone := [f"--{n.replace('_', '-')}" for n in _INPUT_ONLY if given(ctx, n)]):
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
    check_working_folder()  # before scorecli.bench imports torch
    from scorecli.bench import Workload, check_arguments, report, run_bench

    check_arguments(o.csv(attention), o.csv(modes) or (), peak_tflops, json_out, device)  # before the model loads
    check_cache_and_runtime(ctx, cache_dir)
    model_path, _ = model_and_template(model, ctx)
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
