"""What `--runtime auto` measured (`scorecli.runtimes.auto`), fixed for a test: a verdict kept in
a cache folder, as a run that measured would have kept it, so that subprocess runs (which no
monkeypatch reaches) run the runtime the test needs."""

from __future__ import annotations

import os


def keep_verdict(model: str, cache_dir: str, runtime: str, what: str = "pairs") -> str:
    """Write the verdict `runtime` for `model` under `cache_dir`; its path."""
    from scorecli.kinds.pairs import CPU_STREAMS
    from scorecli.runtimes import auto
    from scorecli.runtimes.onnx import cache_path

    threads = auto.stream_threads(CPU_STREAMS)
    path = auto.record_path(cache_path(str(model), str(cache_dir), what), threads, CPU_STREAMS)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    seconds = {"torch": 1.0, "onnx": 1.0}
    seconds[runtime] = 0.5
    auto.write(path, *auto.verdict(seconds), seconds)
    return path
