"""Inputs and outputs in an object store (docs/object-stores.md), through the real
console script against a real S3-protocol endpoint on 127.0.0.1 (`tests/s3_server.py`: moto's
server behind a proxy that can deny a bucket or throttle requests). Outputs are read back with
polars' own S3 reader and must equal a local run's.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import time
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests import s3_server
from tests.test_cli import SCORECLI, WORDS, Case, _env, jsonl, make_rows, run_cli, write
from tests.test_new_user import slow_run

ROWS = 24
WINDOW = 2
JOURNAL = "_scorecli_journal.jsonl"


@pytest.fixture(scope="module")
def s3():
    endpoint, proc, proxy = s3_server.start()
    saved = {k: v for k, v in _env().items() if k.startswith("AWS")}
    s3_server.apply_env(endpoint)  # polars and pyarrow in this process read back through it
    client = s3_server.client(endpoint)
    for bucket in ("inputs", "outputs", "secret"):
        client.create_bucket(Bucket=bucket)
    yield endpoint
    import os

    for k in endpoint.env():
        os.environ.pop(k, None)
    os.environ.update(saved)
    s3_server.stop(proc, proxy)


@pytest.fixture(autouse=True)
def no_rules(request):
    yield
    if "s3" in request.fixturenames:
        request.getfixturevalue("s3").clear()


def rows(n: int = ROWS) -> list[dict]:
    out = []
    for i in range(n):
        k = 3 + 2 * i
        items = [" ".join(WORDS[(i + j + w) % len(WORDS)] for w in range(k)) for j in range(3)]
        out.append({"id": i, "query": " ".join(WORDS[i % 5 : i % 5 + 4]), "items": items})
    return out


@pytest.fixture(scope="module")
def local_inputs(tmp_path_factory) -> Path:
    """The same rows as three files: JSON lines, gzip JSON lines and Parquet (read in that order)."""
    folder = tmp_path_factory.mktemp("rows")
    data = rows()
    write(folder / "a.jsonl", jsonl(data[:8]))
    write(folder / "b.jsonl.gz", gzip.compress(jsonl(data[8:16])))
    pq.write_table(pa.Table.from_pylist(data[16:]), folder / "c.parquet", row_group_size=3)
    return folder


@pytest.fixture(scope="module")
def uploaded(s3, local_inputs) -> str:
    client = s3_server.client(s3)
    for path in sorted(local_inputs.iterdir()):
        client.upload_file(str(path), "inputs", f"rows/{path.name}")
    client.upload_file(str(local_inputs / "a.jsonl"), "secret", "rows/a.jsonl")
    return "s3://inputs/rows/"


def env(s3) -> dict[str, str]:
    return _env(**s3.env())


def score(s3, inputs: list[str], out: str, model: str, *extra: str) -> Case:
    return Case(
        [
            "score",
            *inputs,
            "--out",
            out,
            "--model",
            model,
            "--window-rows",
            str(WINDOW),
            "--max-batch-tokens",
            "96",
            *extra,
        ],
        env=env(s3),
    )


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, local_inputs, qwen3_seq_cls) -> pa.Table:
    out = tmp_path_factory.mktemp("local") / "scores.parquet"
    result = run_cli(
        Case(
            [
                "score",
                str(local_inputs),
                "--out",
                str(out),
                "--model",
                qwen3_seq_cls,
                "--window-rows",
                str(WINDOW),
                "--max-batch-tokens",
                "96",
            ]
        )
    )
    assert result.rc == 0, result.stderr
    return pq.read_table(out)


def same(got: pl.DataFrame, want: pa.Table) -> None:
    assert got.columns == want.column_names
    assert got.equals(pl.from_arrow(want)), "the store's output differs from the local run's"


def keys(s3, bucket: str, prefix: str = "") -> list[str]:
    listed = s3_server.client(s3).list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"] for o in listed)


@pytest.mark.e2e
def test_folder_of_jsonl_gzip_parquet_to_a_file_equals_the_local_run(s3, uploaded, qwen3_seq_cls, local_run):
    result = run_cli(score(s3, [uploaded], "s3://outputs/file/scores.parquet", qwen3_seq_cls))
    assert result.rc == 0, result.stderr
    assert "-> s3://outputs/file/scores.parquet" in result.stderr
    same(pl.read_parquet("s3://outputs/file/scores.parquet"), local_run)
    assert pq.read_table("s3://outputs/file/scores.parquet").schema.metadata == local_run.schema.metadata
    assert [k for k in keys(s3, "outputs", "file/") if not k.endswith("/")] == [
        "file/scores.parquet"
    ]  # no parts, no temp


@pytest.mark.e2e
def test_glob_to_a_dataset_equals_the_local_run(s3, uploaded, qwen3_seq_cls, local_run):
    result = run_cli(
        score(s3, ["s3://inputs/rows/*.jsonl*", "s3://inputs/rows/c.parquet"], "s3://outputs/ds/", qwen3_seq_cls)
    )
    assert result.rc == 0, result.stderr
    objects = [k for k in keys(s3, "outputs", "ds/") if not k.endswith("/")]
    assert objects == ["ds/_SUCCESS"] + [f"ds/part-{k:05d}.parquet" for k in range(ROWS // WINDOW)]
    same(pl.read_parquet("s3://outputs/ds/*.parquet"), local_run)


@pytest.mark.e2e
def test_jsonl_output_and_file_urls(s3, uploaded, local_inputs, qwen3_seq_cls, local_run):
    result = run_cli(score(s3, [f"file://{local_inputs}/a.jsonl"], "s3://outputs/a.jsonl.gz", qwen3_seq_cls))
    assert result.rc == 0, result.stderr
    body = s3_server.client(s3).get_object(Bucket="outputs", Key="a.jsonl.gz")["Body"].read()
    got = [json.loads(line) for line in gzip.decompress(body).splitlines()]
    assert [r["id"] for r in got] == list(range(8))
    assert got[0]["score"] == pytest.approx(local_run["score"][0].as_py(), abs=1e-6)


def _start(case: Case) -> subprocess.Popen:
    return subprocess.Popen(SCORECLI + case.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=case.env)


def _wait_for_parts(s3, proc: subprocess.Popen, bucket: str, journal: str, parts: int) -> None:
    client, deadline = s3_server.client(s3), time.monotonic() + 180
    while True:
        assert proc.poll() is None, proc.communicate()[1].decode()
        assert time.monotonic() < deadline, "the run never got that far"
        try:
            body = client.get_object(Bucket=bucket, Key=journal)["Body"].read()
            if body.count(b"\n") >= parts:
                return
        except client.exceptions.NoSuchKey:
            pass
        time.sleep(0.05)


@pytest.mark.e2e
def test_kill_9_then_resume_equals_the_local_run(s3, uploaded, qwen3_seq_cls, local_run):
    case = score(s3, [uploaded], "s3://outputs/job.parquet", qwen3_seq_cls)
    proc = _start(case)
    try:
        _wait_for_parts(s3, proc, "outputs", f"job.parquet.partial/{JOURNAL}", 2)
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "job.parquet" not in keys(s3, "outputs")  # whole or not at all
    kept = s3_server.client(s3).get_object(Bucket="outputs", Key="job.parquet.partial/part-00000.parquet")["ETag"]
    result = run_cli(Case(case.args + ["--resume"], env=case.env))
    assert result.rc == 0, result.stderr
    assert "resumed after" in result.stderr  # the killed run's lease (its process is gone) did not stop it
    same(pl.read_parquet("s3://outputs/job.parquet"), local_run)
    assert not [k for k in keys(s3, "outputs", "job.parquet.partial/") if not k.endswith("/")]
    assert kept  # the kept part was read, not scored again: its rows were skipped ("resumed after")


@pytest.mark.e2e
def test_dataset_resume_and_a_second_run_on_the_prefix(s3, uploaded, qwen3_seq_cls, local_run):
    case = score(s3, [uploaded], "s3://outputs/busy/", qwen3_seq_cls)
    # the first run's batches take a second more (tests/slow_cli.py): it is still scoring when
    # the second run has started and when its lease is taken, however fast this machine is
    first = slow_run(Path(os.devnull), 1, case.args, case.env)
    try:
        _wait_for_parts(s3, first, "outputs", f"busy/{JOURNAL}", 1)
        second = run_cli(case)  # the same prefix while the first run holds its lease
        assert second.rc == 2, second.stderr
        assert second.lines() == [second.lines()[0]] and "another scorecli run" in second.stderr
        assert "is writing s3://outputs/busy/ now" in second.stderr
        # someone else takes the lease: the first run stops before its next commit
        lease = {"run": "other", "host": "elsewhere", "pid": 1, "renewed": time.time()}
        s3_server.client(s3).put_object(
            Bucket="outputs", Key="busy/_scorecli_lease.json", Body=json.dumps(lease).encode()
        )
        _, err = first.communicate(timeout=180)
        assert first.returncode == 2, err.decode()
        assert "took over s3://outputs/busy/" in err.decode()
    finally:
        if first.poll() is None:
            first.kill()
    assert "busy/_SUCCESS" not in keys(s3, "outputs")
    s3_server.client(s3).delete_object(Bucket="outputs", Key="busy/_scorecli_lease.json")  # that run ends
    resumed = run_cli(Case(case.args + ["--resume"], env=case.env))
    assert resumed.rc == 0, resumed.stderr
    assert "resumed after" in resumed.stderr
    same(pl.read_parquet("s3://outputs/busy/*.parquet"), local_run)
    assert keys(s3, "outputs", "busy/")[-1] == "busy/part-00011.parquet" and "busy/_SUCCESS" in keys(s3, "outputs")
    assert not [k for k in keys(s3, "outputs", "busy/") if "_scorecli_" in k]


@pytest.mark.e2e
def test_denied_bucket_missing_key_and_bad_urls_are_one_line_exit_2(s3, uploaded, qwen3_seq_cls, tmp_path):
    s3.deny("secret")
    cases = {
        "s3://secret/rows/a.jsonl": "access denied",
        "s3://inputs/rows/missing.jsonl": "input not found: s3://inputs/rows/missing.jsonl",
        "s3://nobucket/rows/": "the bucket or container nobucket does not exist",
        "ftp://in/rows/a.jsonl": "unsupported URL scheme ftp://",
        "s3://KEY:SECRET@inputs/rows/a.jsonl": "s3://***@inputs/rows/a.jsonl: credentials in a URL are not used",
    }
    for url, said in cases.items():
        result = run_cli(score(s3, [url], str(tmp_path / "out.parquet"), qwen3_seq_cls))
        assert result.rc == 2, (url, result.stderr)
        assert len(result.lines()) == 1 and said in result.stderr, (url, result.stderr)
        assert "SECRET" not in result.stderr
    for out, said in {
        "s3://secret/out.parquet": "access denied",
        "s3://inputs/rows/out.parquet": "inside the input folder",
        "s3://nobucket/x.parquet": "nobucket does not exist",
        "hf://datasets/o/n/x.parquet": "read-only",
    }.items():
        result = run_cli(score(s3, [uploaded], out, qwen3_seq_cls))
        assert result.rc == 2 and len(result.lines()) == 1 and said in result.stderr, (out, result.stderr)
    assert not list(tmp_path.iterdir())


@pytest.mark.e2e
def test_throttled_requests_are_retried(s3, uploaded, qwen3_seq_cls, local_run):
    rule = s3.throttle(r"^GET /inputs/rows/a\.jsonl", times=12)  # more in a row than the SDK retries by itself
    result = run_cli(score(s3, [uploaded], "s3://outputs/throttled.parquet", qwen3_seq_cls, "--quiet"))
    assert result.rc == 0, result.stderr
    assert rule.hits == 12
    same(pl.read_parquet("s3://outputs/throttled.parquet"), local_run)


@pytest.mark.e2e
def test_a_store_failure_is_exit_1_with_the_rows_kept(s3, uploaded, qwen3_seq_cls, local_run):
    # the final server-side copy is refused as S3 refuses a copy of more than 5 GB
    s3.fail(r"^PUT /outputs/stuck\.parquet( |$|\?)", 400, s3_server.TOO_LARGE)
    case = score(s3, [uploaded], "s3://outputs/stuck.parquet", qwen3_seq_cls)
    result = run_cli(case)
    assert result.rc == 1, result.stderr
    assert len(result.lines()) == 1
    assert (
        f"{ROWS:,} rows kept in s3://outputs/stuck.parquet.partial/; run the same command with --resume"
        in result.stderr
    )
    assert "stuck.parquet" not in keys(s3, "outputs")
    s3.clear()
    resumed = run_cli(Case(case.args + ["--resume"], env=case.env))
    assert resumed.rc == 0, resumed.stderr
    same(pl.read_parquet("s3://outputs/stuck.parquet"), local_run)


@pytest.mark.e2e
def test_ray_workers_read_and_write_the_store_and_resume_after_a_kill(s3, uploaded, qwen3_seq_cls, local_run):
    """--engine ray on a local cluster of 2 workers: the workers read their blocks from the store
    (the driver only lists and indexes the inputs, on worker tasks) and write their parts there;
    a kill -9 of the driver, then --resume, gives the local run's output."""
    pytest.importorskip("ray")
    import os
    import signal

    case = score(s3, [uploaded], "s3://outputs/ray/", qwen3_seq_cls, "--engine", "ray", "--num-workers", "2")
    s3.track, s3.senders[:] = True, []
    proc = subprocess.Popen(
        SCORECLI + case.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=case.env, start_new_session=True
    )
    try:
        _wait_for_parts(s3, proc, "outputs", f"ray/{JOURNAL}", 1)
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the local Ray it started
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "ray/_SUCCESS" not in keys(s3, "outputs")
    s3.track = False
    # nothing funnels through the driver: its workers read every input (the driver reads first rows
    # and footers only, to check them) and write every part
    read_by_workers = {
        line.split()[1] for line, pid in s3.senders if line.startswith("GET /inputs/rows/") and pid != proc.pid
    }
    parts = {pid for line, pid in s3.senders if re.match(r"(PUT|POST) /outputs/ray/part-", line)}
    assert read_by_workers == {"/inputs/rows/a.jsonl", "/inputs/rows/b.jsonl.gz", "/inputs/rows/c.parquet"}, s3.senders
    assert parts and proc.pid not in parts and None not in parts, s3.senders
    resumed = run_cli(Case(case.args + ["--resume"], env=case.env))
    assert resumed.rc == 0, resumed.stderr
    assert "resumed after" in resumed.stderr
    same(pl.read_parquet("s3://outputs/ray/*.parquet"), local_run)
    assert not [k for k in keys(s3, "outputs", "ray/") if "_scorecli_" in k]


def test_store_calls_retry_what_is_transient_and_name_the_url(monkeypatch):
    """`Store.call`, the one place every store operation goes through: what the SDK gives up on
    and is transient is tried again (backoff), the rest is mapped at once to the exit codes."""
    from scorecli.errors import ScorecliError, UsageError
    from scorecli.io import stores

    monkeypatch.setattr(stores, "BACKOFF", 0.0)
    store = stores.Store("s3", None, "s3://")
    failures = iter([OSError("AWS Error SLOW_DOWN during GetObject operation: Please reduce your request rate.")] * 5)

    def flaky() -> str:
        for exc in failures:
            raise exc
        return "read"

    assert store.call("cannot read", "b/k", flaky) == "read"  # 5 throttled attempts, then the 6th
    always = OSError("AWS Error INTERNAL_FAILURE during GetObject operation: Failed to flush response stream")
    with pytest.raises(ScorecliError, match=r"cannot read s3://b/k \(after 6 attempts\): AWS Error INTERNAL") as err:
        store.call("cannot read", "b/k", lambda: (_ for _ in ()).throw(always))
    assert err.value.exit_code == 1
    with pytest.raises(ScorecliError, match=r"cannot read s3://b/j: the store stopped answering \(AWS Error INTERNAL"):
        store.call("cannot read", "b/j", lambda: "never asked")  # a failing run's clean-up does not retry it all again
    store = stores.Store("s3", None, "s3://")
    calls = []

    def denied() -> None:
        calls.append(1)
        raise OSError("AWS Error ACCESS_DENIED during HeadObject operation: No response body.")

    with pytest.raises(UsageError, match=r"cannot read s3://b/k: access denied \(check AWS_ACCESS_KEY_ID"):
        store.call("cannot read", "b/k", denied)
    assert calls == [1]  # never retried


def test_an_s3_host_that_does_not_resolve_while_finding_the_region_says_so(monkeypatch):
    """Offline, with no AWS_ENDPOINT_URL, pyarrow fails while it asks for the bucket's region, before
    any object is read: that said `not a URL scorecli can open: When resolving region ...`, as if
    the URL were wrong; it is the line of a store host that does not resolve."""
    import dataclasses

    from scorecli.errors import UsageError
    from scorecli.io import schemes, stores

    said = (
        "When resolving region for bucket 'my-bucket': AWS Error NETWORK_CONNECTION during HeadBucket operation: "
        "curlCode: 6, Could not resolve hostname; Details: Could not resolve host: my-bucket.s3.us-east-1"
    )

    def offline(url: str):
        raise OSError(said)

    monkeypatch.setitem(schemes.SCHEMES, "s3", dataclasses.replace(schemes.SCHEMES["s3"], filesystem=offline))
    monkeypatch.setattr(stores, "_STORES", {})
    with pytest.raises(UsageError) as raised:
        stores.locate("s3://my-bucket/q.jsonl")
    assert str(raised.value) == (
        "cannot open s3://my-bucket/q.jsonl: the store's host my-bucket.s3.us-east-1 does not resolve "
        "(check AWS_ENDPOINT_URL or the URL)"
    )


def test_an_s3_endpoint_that_does_not_resolve_is_named_from_the_store_when_curl_does_not():
    """pyarrow before 19 (pyproject allows 18) says only "Couldn't resolve host name", which was
    taken for a transient failure: six attempts, then exit 1 without the host. It is the line of a
    host that does not resolve, at once, the host named from the store's endpoint."""
    from pyarrow import fs

    from scorecli.errors import UsageError
    from scorecli.io import stores

    said = (
        "When getting information for key 'rows.jsonl' in bucket 'inputs': AWS Error NETWORK_CONNECTION during "
        "HeadObject operation: curlCode: 6, Couldn't resolve host name"
    )
    calls = []

    def offline():
        calls.append(1)
        raise OSError(said)

    store = stores.Store("s3", fs.S3FileSystem(endpoint_override="garbage", region="us-east-1"), "s3://")
    with pytest.raises(UsageError) as raised:
        store.call("cannot read", "inputs/rows.jsonl", offline)
    assert str(raised.value) == (
        "cannot read s3://inputs/rows.jsonl: the store's host garbage does not resolve "
        "(check AWS_ENDPOINT_URL or the URL)"
    )
    assert calls == [1]  # never retried


def test_a_gcs_host_that_does_not_resolve_fails_at_once(monkeypatch):
    """Offline (or a GCS endpoint that does not resolve), Google's client retried its host to the
    deadline and past it, getting a token: about 100 s before the one line. The host is resolved
    first, and the line comes at once (`.invalid` never resolves, RFC 2606)."""
    import time

    from scorecli.errors import UsageError
    from scorecli.io import stores

    monkeypatch.setattr(stores, "_STORES", {})
    url = "gs://my-bucket/q.jsonl?endpoint_override=gcs.invalid:4443&scheme=http&retry_limit_seconds=20"
    started = time.monotonic()
    with pytest.raises(UsageError, match="the store's host gcs.invalid does not resolve"):
        stores.locate(url)[0].info("my-bucket/q.jsonl")
    assert time.monotonic() - started < 10


def test_azure_without_credentials_is_access_denied_naming_the_url():
    """Azure with no credential that gives a token: pyarrow raises an ArrowException, no OSError,
    which passed `Store.call` by (exit code 1, `error: ArrowException: Unknown error: ...`, no URL);
    it is access denied, exit 2, one line naming the URL and where credentials come from."""
    import pyarrow.lib

    from scorecli.errors import UsageError
    from scorecli.io import stores

    store = stores.Store("abfs", None, "abfs://c@acct.dfs.core.windows.net", base="c")
    said = (
        "Unknown error: Check for Hierarchical Namespace support on 'https://acct.blob.core.windows.net/c' failed: "
        "N5Azure4Core11Credentials23AuthenticationExceptionE: Failed to get token from DefaultAzureCredential."
    )

    def no_token() -> None:
        raise pyarrow.lib.ArrowException(said)

    with pytest.raises(UsageError, match=r"^cannot read abfs://c@acct.dfs.core.windows.net/q.jsonl: access denied"):
        store.call("cannot read", "c/q.jsonl", no_token)


def test_a_prefix_holding_a_users_objects_further_down_is_refused_as_a_folder_is(s3, qwen3_seq_cls):
    """A user's object below `<out>.partial/` or below a dataset prefix (`sub/user.parquet`) was
    not seen (the listing kept objects only): the run wrote beside it, and a successful run removed
    `.partial/` with it. Now refused, as a local folder with a subfolder is, and left as it was."""
    client = s3_server.client(s3)
    client.put_object(Bucket="inputs", Key="nested/rows.jsonl", Body=jsonl(make_rows(2, first_id=0, seed=3)))
    client.put_object(Bucket="outputs", Key="n.parquet.partial/keep/user.txt", Body=b"the user's")
    client.put_object(Bucket="outputs", Key="nds/sub/user.parquet", Body=b"the user's too")
    for out, where in [("s3://outputs/n.parquet", "n.parquet.partial"), ("s3://outputs/nds/", "nds")]:
        args = ["score", "s3://inputs/nested/rows.jsonl", "--out", out, "--model", qwen3_seq_cls, "-q"]
        result = run_cli(Case(args, env=env(s3)))
        assert result.rc == 2 and len(result.lines()) == 1, result.stderr
        assert f"s3://outputs/{where}: it holds files scorecli did not write" in result.stderr, result.stderr
    objects = [k for k in keys(s3, "outputs", "n") if not k.endswith("/")]  # pyarrow's empty folder markers aside
    assert objects == ["n.parquet.partial/keep/user.txt", "nds/sub/user.parquet"]


@pytest.mark.parametrize(
    "message, kind",
    [
        # pyarrow's S3: a throttled or failing request answered by its status alone, whatever the key holds
        (
            "When getting information for key 'r/2401/rows.jsonl' in bucket 'inputs': AWS Error UNKNOWN "
            "(HTTP status 503) during HeadObject operation: No response body.",
            "transient",
        ),
        ("AWS Error UNKNOWN (HTTP status 429) during GetObject operation: No response body.", "transient"),
        (
            "When uploading part for key 'scores/part-00401.parquet' in bucket 'outputs': AWS Error UNKNOWN "
            "(HTTP status 500) during UploadPart operation: No response body.",
            "transient",
        ),
        (
            "When getting information for key 'AccessDenied/Forbidden/403 x.jsonl' in bucket 'inputs': AWS Error "
            "UNKNOWN (HTTP status 400) during HeadObject operation: No response body.",
            "other",
        ),
        (
            "When getting information for key 'r/Throttling/part-00503.parquet' in bucket 'inputs': AWS Error "
            "UNKNOWN (HTTP status 400) during HeadObject operation: No response body.",
            "other",
        ),
        (
            "When getting information for key 'r/rows.jsonl' in bucket 'secret': AWS Error ACCESS_DENIED during "
            "HeadObject operation: No response body.",
            "denied",
        ),
        ("AWS Error UNKNOWN (HTTP status 403) during GetObject operation: No response body.", "denied"),
        ("AWS Error [code 403]: No response body.", "denied"),
        ("AWS Error [code 503]: No response body.", "transient"),
        # pyarrow's Azure, and the hub (huggingface_hub, httpx)
        (
            "GetProperties for 'c/part-00401.parquet' failed. Azure Error: [AuthorizationFailure] 403 This request "
            "is not authorized to perform this operation.",
            "denied",
        ),
        ("GetProperties for 'c/403.parquet' failed. Azure Error: [ServerBusy] 503 Server Busy", "transient"),
        (
            "403 Forbidden: None.\nCannot access content at: https://huggingface.co/datasets/o/n/resolve/main/x.",
            "denied",
        ),
        (
            "Server error '503 Service Unavailable' for url 'https://huggingface.co/datasets/o/401/resolve/main/x'",
            "transient",
        ),
    ],
)
def test_store_failures_are_told_by_the_status_the_message_gives_not_by_the_keys_it_quotes(monkeypatch, message, kind):
    """A status is matched where a message gives it as one, never inside a key or a URL
    (`r/2401/`, `part-00401`): 401 and 403 are access denied (exit 2 at once), 429 and 5xx retried."""
    from scorecli.errors import ScorecliError, UsageError
    from scorecli.io import stores

    monkeypatch.setattr(stores, "BACKOFF", 0.0)
    calls = []

    def failing() -> None:
        calls.append(1)
        raise OSError(message)

    raised = UsageError if kind == "denied" else ScorecliError
    with pytest.raises(raised) as err:
        stores.Store("s3", None, "s3://").call("cannot read", "b/k", failing)
    assert err.value.exit_code == (2 if kind == "denied" else 1), err.value
    assert ("access denied" in str(err.value)) == (kind == "denied"), err.value
    assert len(calls) == (stores.RETRIES if kind == "transient" else 1), err.value
