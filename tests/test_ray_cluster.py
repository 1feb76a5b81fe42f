"""Joining a Ray cluster (`--ray-address`, `$RAY_ADDRESS`): an address where nothing listens fails
within seconds, in one line (exit 2), instead of Ray retrying for minutes and printing its own log
lines whatever `--quiet` says. No Ray instance is started."""

from __future__ import annotations

import socket
import subprocess

import pytest

from tests.test_cli import GOOD_LINE, SCORECLI, _env, write

pytestmark = pytest.mark.e2e  # the console script (or Ray) end to end

pytest.importorskip("ray")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is


@pytest.mark.parametrize("how", ["flag", "env", "ray-client"])
def test_an_address_where_nothing_listens_fails_in_seconds_in_one_line(tmp_path, qwen3_seq_cls, how):
    inp = write(tmp_path / "q.jsonl", GOOD_LINE % 1)
    out = tmp_path / "s.jsonl"
    address = f"127.0.0.1:{_closed_port()}"
    args = ["score", inp, "-m", qwen3_seq_cls, "-o", str(out), "--engine", "ray", "--quiet"]
    env = _env()
    if how == "flag":
        args += ["--ray-address", address]
    elif how == "env":
        env["RAY_ADDRESS"] = address
    else:
        address = "ray://" + address
        args += ["--ray-address", address]
    run = subprocess.run(SCORECLI + args, capture_output=True, env=env, timeout=60)  # Ray alone: minutes
    lines = run.stderr.decode().splitlines()
    assert run.returncode == 2, lines
    assert lines == [f"error: cannot join Ray at {address}: connection refused " + lines[0].split("refused ", 1)[1]]
    assert "is a Ray cluster running there?" in lines[0]
    assert not out.exists() and not (tmp_path / "s.jsonl.partial").exists()


def test_ray_data_keeps_a_failed_blocks_traceback_off_stderr():
    """A worker lost mid-run (killed, out of memory): Ray Data logged its ERROR traceback (40 lines)
    on stderr, even under --quiet, before scorecli's one-line 'error: Ray failed: ...'."""
    import logging

    import ray

    from scorecli.engine.ray_cluster import quiet_ray_data

    executor = logging.getLogger("ray.data._internal.execution.streaming_executor_state")
    with quiet_ray_data(ray):
        assert not executor.isEnabledFor(logging.ERROR)
