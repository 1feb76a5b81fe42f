"""What `--runtime auto` measured (`scorecli.runtimes.auto`), fixed for a test: a verdict kept in
a cache folder, as a run that measured would have kept it, so that subprocess runs (which no
monkeypatch reaches) run the runtime the test needs."""

from __future__ import annotations

import os


def keep_verdict(model: str, cache_dir: str, runtime: str, what: str = "pairs") -> str:
    """Write the verdict `runtime` for `model` under `cache_dir`: a runtime's name, or a route
    (`Route.text`: `onnx:100:torch`, onnx for batches up to 100 tokens, torch beyond), as this
    process's threads key it and as a one-thread process's do; the first's path."""
    from scorecli.kinds.pairs import CPU_STREAMS
    from scorecli.runtimes import auto
    from scorecli.runtimes.onnx import cache_path
    from scorecli.runtimes.route import Route

    export = cache_path(str(model), str(cache_dir), what)
    path = auto.record_path(export, auto.stream_threads(CPU_STREAMS), auto.run_streams(CPU_STREAMS))
    # and as a run with one torch thread keys it (the CLI's subprocesses of the tests: OMP_NUM_THREADS=1)
    paths = [path, auto.record_path(export, 1, 1)]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    route = Route.parse(runtime)
    assert route is not None, runtime
    lengths = list(auto.PROBE_LENGTHS)
    seconds = {name: [0.5 if route.runtime_for(n) == name else 1.0 for n in lengths] for name in ("torch", "onnx")}
    measured, reason = auto.verdict(lengths, seconds)
    if measured != route:  # a cut of the test's own, not where these times cross
        reason = (
            f"auto: {route.first} for batches of sequences up to {route.cut} tokens, {route.second} for longer ones"
        )
    for each in dict.fromkeys(paths):
        auto.write(each, route, reason, lengths, seconds)
    return path


def interrupted_after(rows, n: int):
    """The rows, then a KeyboardInterrupt (Ctrl-C) after `n` of them."""
    for i, row in enumerate(rows):
        if i == n:
            raise KeyboardInterrupt
        yield row


def run_job(cfg, paths: list[str], out: str, resume: bool = False, stop: int | None = None):
    """The table a `scorecli score` job of `cfg` over `paths` writes to `out` (with `--resume`
    when `resume`; interrupted after `stop` rows when given), warnings silenced."""
    import warnings

    import pyarrow.parquet as pq

    from scorecli.engine.checkpoint import Checkpoint
    from scorecli.engine.run import open_rows, run_score
    from scorecli.io.output import resolve_output

    target = resolve_output(out, paths)
    checkpoint = Checkpoint.open(target, cfg, paths, resume)
    rows = open_rows(cfg, paths, None, checkpoint)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_score(cfg, paths, target, None, None, None, interrupted_after(rows, stop) if stop else rows, checkpoint)
    return pq.read_table(out)
