"""The Ray cluster of an `--engine ray` run: join or start it, plan its workers, keep Ray Data
quiet and in order. Ray is passed in (imported by the caller). Knows nothing about rows or models.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from scorecli.config import ScoreConfig
from scorecli.errors import UsageError, first_line


@contextmanager
def connected(ray, address: str | None, num_workers: int | None) -> Iterator[None]:
    """Join `address`, or start a local instance; shut down only what this call started."""
    if ray.is_initialized():
        yield
        return
    quiet = {"log_to_driver": False, "logging_level": logging.ERROR}
    if address:
        check_reachable(address)
    # ray.init replaces SIGTERM's handler with sys.exit(15) (exit 15, no word of the kept rows)
    # and its core worker prints a stack dump on it: the process's own handler is put back
    main = threading.current_thread() is threading.main_thread()
    on_term = signal.getsignal(signal.SIGTERM) if main else None
    try:
        if address:
            ray.init(address=address, **quiet)
        else:
            # "local": a new instance even where $RAY_ADDRESS names a cluster (the CLI reads it)
            cpus = max(os.cpu_count() or 1, num_workers or 1)
            ray.init(address="local", num_cpus=cpus, include_dashboard=False, **quiet)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise UsageError(f"cannot start or join Ray at {address or 'a local instance'}: {first_line(exc)}") from exc
    finally:
        if on_term is not None:
            signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        ray.shutdown()


# how long a cluster's port may take to accept a connection: Ray itself retries a closed or
# silent address for minutes, printing its own log lines whatever --quiet says
CONNECT_SECONDS = 5.0


def check_reachable(address: str) -> None:
    """UsageError unless something accepts connections at `address` (`HOST:PORT` or
    `ray://HOST:PORT`; `auto` and names Ray resolves itself are left to Ray)."""
    import socket

    where = address.removeprefix("ray://")
    host, sep, port = where.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or first_line(exc)).lower()
        raise UsageError(
            f"cannot join Ray at {address}: {reason} (is a Ray cluster running there? "
            "leave out --ray-address and $RAY_ADDRESS to start a local one)"
        ) from exc


@contextmanager
def quiet_ray_data(ray) -> Iterator[None]:
    """Keep block order; keep Ray Data's progress bars and logs (and its warning that the bars
    are off) off stderr: our own progress is the only one, and failures come back as errors."""
    ctx = ray.data.DataContext.get_current()
    logger = logging.getLogger("ray.data")
    saved = (ctx.execution_options.preserve_order, getattr(ctx, "enable_progress_bars", None), logger.level)
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    logger.setLevel(logging.CRITICAL)  # a failed block's traceback too: it comes back as our one-line error
    try:
        yield
    finally:
        ctx.execution_options.preserve_order = saved[0]
        if saved[1] is not None:
            ctx.enable_progress_bars = saved[1]
        logger.setLevel(saved[2])


def plan_workers(ray, cfg: ScoreConfig, num_workers: int | None) -> tuple[int, dict[str, float], str]:
    """(workers, Ray resources per worker, device for the workers' Scorer)."""
    if num_workers is not None and num_workers < 1:
        raise UsageError("--num-workers must be at least 1")
    res = ray.cluster_resources()
    gpus, cpus = int(res.get("GPU", 0)), int(res.get("CPU", 0))
    if cfg.device.startswith("cuda") and not gpus:
        raise UsageError(f"--device {cfg.device}: the Ray cluster has no GPUs")
    if gpus and cfg.device != "cpu":
        workers = num_workers or gpus
        if workers > gpus:
            raise UsageError(f"--num-workers {workers}: each worker takes a GPU and the Ray cluster has {gpus}")
        return workers, {"num_gpus": 1, "num_cpus": 1}, "cuda"
    workers = num_workers or 1
    if workers > cpus:
        raise UsageError(f"--num-workers {workers}: each worker takes a CPU and the Ray cluster has {cpus}")
    # torch in a worker runs as many threads as CPUs Ray gives it (OMP_NUM_THREADS)
    biggest_node = max((int(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n["Alive"]), default=1)
    return workers, {"num_cpus": max(1, min(cpus // workers, biggest_node))}, "cpu"
