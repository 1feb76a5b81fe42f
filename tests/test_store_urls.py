"""What a store URL names (docs/object-stores.md), through the real console script
against the local S3 server (`tests/s3_server.py`): a key is the key as written, never decoded
again, so a listing's keys open as listed and an output is never another spelling of an input;
dot segments and empty ones, which a store would open as another key, are refused up front, and
so is an output an input glob would list;
`?region=` and the other options work wherever a URL is taken; credentials never show.
"""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests import s3_server
from tests.test_cli import Case, jsonl, make_rows, run_cli, write
from tests.test_objectstores import env, keys, s3  # noqa: F401 - s3 is a fixture

pytestmark = pytest.mark.e2e  # the console script (or Ray) end to end

ROWS = make_rows(3, first_id=0, seed=11)


def put(s3, key: str, body: bytes, bucket: str = "inputs") -> str:  # noqa: F811
    s3_server.client(s3).put_object(Bucket=bucket, Key=key, Body=body)
    return s3_server.client(s3).head_object(Bucket=bucket, Key=key)["ETag"]


def body(s3, key: str, bucket: str = "inputs") -> bytes:  # noqa: F811
    return s3_server.client(s3).get_object(Bucket=bucket, Key=key)["Body"].read()


def score(s3, inputs: list[str], out: str, model: str, *extra: str) -> Case:  # noqa: F811
    return Case(["score", *inputs, "--out", out, "--model", model, "--quiet", *extra], env=env(s3))


def dataset(s3, prefix: str, bucket: str = "outputs") -> pa.Table:  # noqa: F811
    parts = [k for k in keys(s3, bucket, prefix) if k.endswith(".parquet")]
    return pa.concat_tables(pq.read_table(io.BytesIO(body(s3, k, bucket))) for k in parts)


def test_an_input_spelled_another_way_is_refused_before_anything_is_written(s3, qwen3_seq_cls):  # noqa: F811
    """`./`, `x/../` and `//` would make the store open another key than the one compared with the
    output; `%2F` is a key of its own (no object here), not a slash."""
    etag = put(s3, "ow/rows.jsonl", jsonl(ROWS))
    user = put(s3, "sh/part-00000.parquet", b"a user's own file")
    refused = "a store URL's key may not hold '.', '..' or empty ('//') segments"
    cases = [
        (["s3://inputs/ow/./rows.jsonl"], "s3://inputs/ow/rows.jsonl", refused),
        (["s3://inputs/ow/x/../rows.jsonl"], "s3://inputs/ow/rows.jsonl", refused),
        (["s3://inputs/ow%2Frows.jsonl"], "s3://inputs/ow/rows.jsonl", "input not found: s3://inputs/ow%2Frows.jsonl"),
        (["s3://inputs/ow/rows.jsonl"], "s3://inputs/sh/x/../", refused),
        (["s3://inputs/ow/rows.jsonl"], "s3://inputs/sh/", "holds files scorecli did not write"),
        (["s3://inputs/ow/rows.jsonl"], "s3://outputs/dd/./out.parquet", refused),
        (["s3://inputs//ow/rows.jsonl"], "s3://outputs/dd/out.parquet", refused),
    ]
    for inputs, out, said in cases:
        result = run_cli(score(s3, inputs, out, qwen3_seq_cls))
        assert result.rc == 2, (inputs, out, result.stderr)
        assert len(result.lines()) == 1 and said in result.stderr, (inputs, out, result.stderr)
    assert put and s3_server.client(s3).head_object(Bucket="inputs", Key="ow/rows.jsonl")["ETag"] == etag
    assert body(s3, "sh/part-00000.parquet") == b"a user's own file" and user
    assert keys(s3, "inputs", "ow/") == ["ow/rows.jsonl"] and keys(s3, "outputs", "dd/") == []


def test_an_output_an_input_glob_in_the_store_would_list_is_refused(s3, qwen3_seq_cls):  # noqa: F811
    """As for local globs (docs/input-output.md: Output): the same command line run again would
    read the output as input. A glob that does not list it (another suffix; `*` lists no deeper
    folder) leaves it written."""
    for key in ("gl/rows1.jsonl", "gl/deep/rows2.jsonl"):
        put(s3, key, jsonl(ROWS))
    cases = [
        ("s3://inputs/gl/*.jsonl", "s3://inputs/gl/new.jsonl"),
        ("s3://inputs/gl/rows?.jsonl?region=us-east-1", "s3://inputs/gl/rowsx.jsonl"),
        ("s3://inputs/gl/**/*.jsonl", "s3://inputs/gl/deep/new.jsonl"),
        ("s3://inputs/gl/*/*", "s3://inputs/gl/ds/"),  # the dataset's parts
    ]
    for pattern, out in cases:
        result = run_cli(score(s3, [pattern], out, qwen3_seq_cls))
        assert result.rc == 2 and len(result.lines()) == 1, (pattern, out, result.stderr)
        shown = pattern.split("?region")[0]
        assert f"it matches the input pattern {shown} (a later run would read it as input)" in result.stderr
    assert keys(s3, "inputs", "gl/") == ["gl/deep/rows2.jsonl", "gl/rows1.jsonl"]
    for pattern, out in [
        ("s3://inputs/gl/*", "s3://inputs/gl/x/"),
        ("s3://inputs/gl/*.jsonl", "s3://inputs/gl/s.parquet"),
    ]:
        result = run_cli(score(s3, [pattern], out, qwen3_seq_cls))
        assert result.rc == 0, (pattern, out, result.stderr)


def test_listed_keys_open_as_listed_and_outputs_go_to_the_key_written(s3, qwen3_seq_cls, tmp_path):  # noqa: F811
    """`pct%41.jsonl` beside `pctA.jsonl`, a space, an accent and `#`: the prefix reads as a local
    folder of the same names does, and `--out s3://outputs/res%41/` writes under `res%41/`."""
    names = ["pct%41.jsonl", "pctA.jsonl", "a b.jsonl", "é.jsonl", "h#x.jsonl"]
    local = tmp_path / "rows"
    local.mkdir()
    for k, name in enumerate(names):
        data = jsonl(make_rows(2, first_id=10 * k, seed=k))
        write(local / name, data)
        put(s3, f"listed/{name}", data)
    want = run_cli(score(s3, [str(local)], str(tmp_path / "local.parquet"), qwen3_seq_cls))
    assert want.rc == 0, want.stderr
    got = run_cli(score(s3, ["s3://inputs/listed/"], "s3://outputs/res%41/", qwen3_seq_cls))
    assert got.rc == 0, got.stderr
    assert keys(s3, "outputs", "resA") == [] and "res%41/_SUCCESS" in keys(s3, "outputs", "res%41/")
    table, local_table = dataset(s3, "res%41/"), pq.read_table(tmp_path / "local.parquet")
    assert table.column("id").to_pylist() == local_table.column("id").to_pylist()
    assert sorted(table.column("id").to_pylist()) == [10 * k + i for k in range(len(names)) for i in range(2)]
    assert table.column("score").to_pylist() == local_table.column("score").to_pylist()
    one = run_cli(score(s3, ["s3://inputs/listed/h#x.jsonl"], str(tmp_path / "one.jsonl"), qwen3_seq_cls))
    assert one.rc == 0, one.stderr
    assert [json.loads(line)["id"] for line in (tmp_path / "one.jsonl").read_text().splitlines()] == [40, 41]


def test_url_options_work_wherever_a_url_is_taken(s3, qwen3_seq_cls):  # noqa: F811
    put(s3, "opt/rows.jsonl", jsonl(ROWS))
    region = "?region=us-east-1"
    to_prefix = run_cli(score(s3, [f"s3://inputs/opt/rows.jsonl{region}"], f"s3://outputs/rq/{region}", qwen3_seq_cls))
    assert to_prefix.rc == 0, to_prefix.stderr
    assert "rq" not in keys(s3, "outputs") and "rq/_SUCCESS" in keys(s3, "outputs", "rq/")  # a dataset
    assert dataset(s3, "rq/").column("id").to_pylist() == [0, 1, 2]
    to_object = run_cli(score(s3, [f"s3://inputs/opt/{region}"], f"s3://outputs/rq.jsonl{region}", qwen3_seq_cls))
    assert to_object.rc == 0, to_object.stderr
    assert [json.loads(line)["id"] for line in body(s3, "rq.jsonl", "outputs").splitlines()] == [0, 1, 2]
    inside = run_cli(score(s3, [f"s3://inputs/opt/{region}"], "s3://inputs/opt/out.parquet", qwen3_seq_cls))
    assert inside.rc == 2 and "inside the input folder s3://inputs/opt/" in inside.stderr, inside.stderr
    unknown = run_cli(score(s3, ["s3://inputs/opt/rows.jsonl?colour=red"], "s3://outputs/c.parquet", qwen3_seq_cls))
    assert unknown.rc == 2 and len(unknown.lines()) == 1, unknown.stderr
    assert "s3://inputs/opt/rows.jsonl?colour=red: not a URL scorecli can open" in unknown.stderr


@pytest.mark.parametrize("option", ["secret_key", "session_token", "sig", "access_key"])
def test_credentials_in_a_url_are_refused_and_never_shown(s3, qwen3_seq_cls, tmp_path, option):  # noqa: F811
    put(s3, "cred/rows.jsonl", jsonl(ROWS))
    for inputs, out in [
        ([f"s3://inputs/cred/rows.jsonl?region=us-east-1&{option}=SEKRIT"], str(tmp_path / "o.parquet")),
        ([f"s3://inputs/cred/missing.jsonl?{option}=SEKRIT"], str(tmp_path / "o.parquet")),
        (["s3://inputs/cred/rows.jsonl"], f"s3://outputs/cred.parquet?{option}=SEKRIT"),
    ]:
        result = run_cli(score(s3, inputs, out, qwen3_seq_cls))
        assert result.rc == 2 and len(result.lines()) == 1, result.stderr
        assert "credentials in a URL are not used" in result.stderr and "SEKRIT" not in result.stderr
        assert f"{option}=***" in result.stderr
    assert not list(tmp_path.iterdir()) and "cred.parquet" not in keys(s3, "outputs")
