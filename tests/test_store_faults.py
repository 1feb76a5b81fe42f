"""A store that stalls, dies, cannot be found or holds a foreign lease (docs/object-stores.md),
through the real console script against the local S3 server and its proxy
(`tests/s3_server.py`): the run stops with one line, exit 1 with the rows kept and `--resume`
suggested when the store fails mid-run, exit 2 when it can never work; it never hangs, and what
it keeps resumes to the uninterrupted output.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests import s3_server
from tests.test_cli import Case, Result, _env, jsonl, make_rows, run_cli
from tests.test_new_user import ROOT
from tests.test_objectstores import env, keys, s3  # noqa: F401 - s3 is a fixture

pytestmark = pytest.mark.e2e  # the console script (or Ray) end to end

ROWS = 12
KEPT = 4  # part-00002 is where the store fails: two parts of two rows are kept


@pytest.fixture(autouse=True)
def revived(s3):  # noqa: F811
    """Each test's stalls and deaths end with it."""
    yield
    s3.clear()


def upload(s3, key: str) -> str:  # noqa: F811
    s3_server.client(s3).put_object(Bucket="inputs", Key=key, Body=jsonl(make_rows(ROWS, first_id=0, seed=3)))
    return f"s3://inputs/{key}"


def args(source: str, out: str, model: str) -> list[str]:
    return ["score", source, "--out", out, "--model", model, "--window-rows", "2", "--quiet"]


def with_deadlines(case: list[str], env: dict, stall: float, deadline: float, timeout: float) -> Result:
    """`scorecli CASE` whose store requests fail after `stall` s without a byte, and whose store
    operations stop retrying after `deadline` s (tests/store_cli.py)."""
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "tests.store_cli", str(stall), str(deadline), *case]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, env=env, timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr.decode(), time.perf_counter() - start)


def dataset_ids(s3, prefix: str) -> list[int]:  # noqa: F811
    client = s3_server.client(s3)
    parts = [k for k in keys(s3, "outputs", prefix) if k.endswith(".parquet")]
    tables = [pq.read_table(io.BytesIO(client.get_object(Bucket="outputs", Key=k)["Body"].read())) for k in parts]
    return pa.concat_tables(tables).column("id").to_pylist()


def test_a_stalled_store_stops_the_run_with_its_rows_kept(s3, qwen3_seq_cls):  # noqa: F811
    """The store stops answering while a part is written: the request's deadline ends the run
    (it used to hang for ever), exit 1, the rows kept named and --resume suggested."""
    source = upload(s3, "stall/rows.jsonl")
    s3.stall(r"^PUT /outputs/stalled/part-00002\.parquet")
    case = args(source, "s3://outputs/stalled/", qwen3_seq_cls)
    result = with_deadlines(case, env(s3), stall=1, deadline=3, timeout=120)
    assert result.rc == 1, result.stderr
    assert result.lines() == [result.lines()[0]], result.stderr
    assert "cannot write s3://outputs/stalled/part-00002.parquet" in result.stderr
    assert "the store did not answer for 1 s" in result.stderr
    assert f"({KEPT} rows kept in s3://outputs/stalled/; run the same command with --resume" in result.stderr
    s3.clear()
    resumed = run_cli(Case(case + ["--resume"], env=env(s3)))
    assert resumed.rc == 0, resumed.stderr
    assert dataset_ids(s3, "stalled/") == list(range(ROWS))


def test_a_store_that_dies_mid_run_is_one_failure_not_two(s3, qwen3_seq_cls):  # noqa: F811
    """Every request fails from a part's write on: exit 1 naming that write and the rows kept,
    within one round of retries; the failing run asks the dead store nothing more (it used to
    read the journal again inside its error handler, retrying all over, and say that instead)."""
    source = upload(s3, "dies/rows.jsonl")
    s3.die(r"^PUT /outputs/dying/part-00002\.parquet")
    case = args(source, "s3://outputs/dying/", qwen3_seq_cls)
    result = run_cli(Case(case, env=env(s3)))
    assert result.rc == 1, result.stderr
    assert result.lines() == [result.lines()[0]], result.stderr
    assert "cannot write s3://outputs/dying/part-00002.parquet (after 6 attempts" in result.stderr
    assert f"({KEPT} rows kept in s3://outputs/dying/; run the same command with --resume" in result.stderr
    assert "journal" not in result.stderr
    after = s3.seen[s3.seen.index(next(line for line in s3.seen if "part-00002" in line)) :]
    assert all("part-00002" in line for line in after), after  # nothing else asked of the dead store
    s3.clear()
    resumed = run_cli(Case(case + ["--resume"], env=env(s3)))
    assert resumed.rc == 0, resumed.stderr
    assert dataset_ids(s3, "dying/") == list(range(ROWS))


def test_a_throttled_head_is_retried_whatever_its_key_holds(s3, qwen3_seq_cls, tmp_path):  # noqa: F811
    """S3 answers a throttled HEAD with its status alone (pyarrow: `HTTP status 503`, no SlowDown
    to name): retried as throttling is (it failed at once, exit 1), and a key that holds `401` or
    `403` is no 'access denied' (exit 2) for it (docs/object-stores.md: Errors)."""
    source = upload(s3, "head/2401/part-00403.jsonl")
    rule = s3.throttle(r"^HEAD /inputs/head/2401/", times=8)  # more in a row than the SDK retries by itself
    out = tmp_path / "out.jsonl"
    result = run_cli(Case(args(source, str(out), qwen3_seq_cls), env=env(s3)))
    assert result.rc == 0, result.stderr
    assert rule.hits == 8
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == list(range(ROWS))


def test_an_endpoint_that_does_not_resolve_fails_at_once(s3, qwen3_seq_cls, tmp_path):  # noqa: F811
    """AWS_ENDPOINT_URL=garbage: one line naming the host, exit 2, without retrying a name that
    does not resolve (it used to take 45 s)."""
    source = upload(s3, "garbage/rows.jsonl")
    local = tmp_path / "rows.jsonl"
    local.write_bytes(jsonl(make_rows(ROWS, first_id=0, seed=3)))
    for inputs, out in [([source], str(tmp_path / "o.parquet")), ([str(local)], "s3://outputs/g.parquet")]:
        case = Case(
            ["score", *inputs, "--out", out, "--model", qwen3_seq_cls],
            env=_env(**{**s3.env(), "AWS_ENDPOINT_URL": "garbage"}),
        )
        result = run_cli(case)
        assert result.rc == 2, result.stderr
        assert len(result.lines()) == 1 and "the store's host garbage does not resolve" in result.stderr, result.stderr
        assert "AWS_ENDPOINT_URL" in result.stderr
        assert result.seconds < 15, result.seconds


def test_a_lease_object_of_another_shape_is_one_line_exit_2(s3, qwen3_seq_cls):  # noqa: F811
    source = upload(s3, "lease/rows.jsonl")
    shapes = {
        "list": [1, 2],
        "text": "a string",
        "renewed": {"run": "other", "host": "elsewhere", "pid": 1, "renewed": None},
    }
    for name, lease in shapes.items():
        body = json.dumps(lease).encode()
        s3_server.client(s3).put_object(Bucket="outputs", Key=f"lease-{name}/_scorecli_lease.json", Body=body)
        result = run_cli(Case(args(source, f"s3://outputs/lease-{name}/", qwen3_seq_cls), env=env(s3)))
        assert result.rc == 2, (name, result.stderr)
        assert len(result.lines()) == 1, (name, result.stderr)
        assert f"s3://outputs/lease-{name}/_scorecli_lease.json is not a scorecli lease" in result.stderr
        assert keys(s3, "outputs", f"lease-{name}/") == [f"lease-{name}/_scorecli_lease.json"]  # left as found


_INTERRUPTED_PUT = """
import os, signal, sys
from pyarrow import fs
from scorecli.io.stores import Store
from scorecli.process import watch_signals

watch_signals(lambda: None)
path = sys.argv[1]


class SignalledAfterOpening:  # the signal lands between opening the object's stream and writing it
    def open_output_stream(self, p):
        stream = fs.LocalFileSystem().open_output_stream(p)
        os.kill(os.getpid(), signal.SIGTERM)
        return stream


try:
    Store("s3", SignalledAfterOpening(), "s3://b").put(path, b"journal, two lines\\n")
except KeyboardInterrupt:
    print("interrupted", open(path, "rb").read())
"""


def test_an_interrupt_while_an_object_is_put_waits_for_its_write(tmp_path):
    """pyarrow completes an upload whose stream is closed, with what it holds: a SIGTERM between
    opening an object's stream and writing it replaced the journal with an empty object, and
    --resume then scored every row again. The interrupt now comes as the write ends."""
    path = tmp_path / "_scorecli_journal.jsonl"
    path.write_bytes(b"journal, one line\n")
    proc = subprocess.run([sys.executable, "-c", _INTERRUPTED_PUT, str(path)], capture_output=True, env=_env())
    assert proc.stdout == b"interrupted b'journal, two lines\\n'\n", (proc.stdout, proc.stderr)
