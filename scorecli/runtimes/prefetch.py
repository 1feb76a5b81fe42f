"""Optional packages imported in the background while the model loads.

`import flashinfer` costs ~3 s of a GPU run's start-up on top of torch and transformers (an
H200, benchmarks/RESULTS.md 2026-11-26 17:12), and loading a model's weights is mostly reading
files and copying tensors, which run outside the GIL. `prefetch` starts such an import in a
thread as loading begins; `imported` is its outcome once it is needed (`runtimes.installed`
waits for it). Knows nothing about which packages a run needs.
"""

from __future__ import annotations

import importlib
import threading
from concurrent.futures import Future

from scorecli.timings import mark

_STARTED: dict[str, Future[bool]] = {}
_LOCK = threading.Lock()


def _import(package: str, future: Future[bool]) -> None:
    try:
        importlib.import_module(package)
    except ImportError:
        future.set_result(False)
    except BaseException as exc:  # noqa: BLE001 - handed to whoever asks (`imported` raises it there)
        future.set_exception(exc)
    else:
        mark(f"{package} imported")  # in the timings line: when the background import ended
        future.set_result(True)


def prefetch(package: str) -> None:
    """Start importing `package` in a daemon thread (once per process)."""
    with _LOCK:
        if package in _STARTED:
            return
        future: Future[bool] = Future()
        _STARTED[package] = future
    threading.Thread(target=_import, args=(package, future), name=f"import {package}", daemon=True).start()


def imported(package: str) -> bool | None:
    """Whether the prefetched import of `package` succeeded (waiting for it); None when it was
    never prefetched. An error other than ImportError is raised here, as the import would."""
    future = _STARTED.get(package)
    return None if future is None else future.result()
