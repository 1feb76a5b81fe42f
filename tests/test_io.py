"""Tests for scorecli.io: readers (JSONL, gzip, Parquet, dirs, globs, stdin) and the sink."""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scorecli.errors import InputError, OutputClosed, UsageError
from scorecli.io.ids import IdCheck, schema_id_type
from scorecli.io.output import Target, output_format, resolve_output
from scorecli.io.readers import RawRow, count_rows, iter_rows, resolve_inputs
from scorecli.io.temp_files import clean_stale_temps, temp_path
from scorecli.io.writers import Sink


def write_jsonl(path, rows, gz=False):
    text = "".join(json.dumps(r) + "\n" for r in rows).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return str(path)


def write_parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def ids(specs, **kw):
    return [r.data["id"] for r in iter_rows(specs, **kw)]


# ---- readers ---------------------------------------------------------------------------


def test_jsonl_rows_and_where(tmp_path):
    p = write_jsonl(tmp_path / "a.jsonl", [{"id": 1}, {"id": 2}])
    rows = list(iter_rows([p]))
    assert rows == [RawRow({"id": 1}, f"{p}:1"), RawRow({"id": 2}, f"{p}:2")]


def test_gzip_jsonl(tmp_path):
    p = write_jsonl(tmp_path / "a.jsonl.gz", [{"id": i} for i in range(3)], gz=True)
    assert ids([p]) == [0, 1, 2]


def test_json_extension_is_lines(tmp_path):
    p = write_jsonl(tmp_path / "a.json", [{"id": "x"}])
    assert ids([p]) == ["x"]


def test_parquet_rows_and_where(tmp_path):
    p = write_parquet(tmp_path / "a.parquet", [{"id": i, "items": ["a"]} for i in range(2500)])
    rows = list(iter_rows([p]))
    assert [r.data["id"] for r in rows] == list(range(2500))
    assert rows[0].where == f"{p}: row 1"
    assert rows[-1].where == f"{p}: row 2500"
    assert rows[0].data["items"] == ["a"]


def test_parquet_with_no_rows_past_skip_reads_no_row_group(tmp_path, monkeypatch):
    """A Parquet file of no rows (a zero-row output fed back in, tests/test_refused_up_front.py), or
    one whose rows a resumed run has all kept, has no row group to read: pyarrow 18 (which
    pyproject allows) read row group -1 for the empty list and the run stopped, exit 2."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from scorecli.io.parquet_input import ParquetInput

    iter_batches = pq.ParquetFile.iter_batches

    def as_pyarrow_18(self, *args, row_groups=None, **kw):
        if row_groups is not None and not row_groups:
            raise OSError("The file only has 1 row groups, requested metadata for row group: -1")
        return iter_batches(self, *args, row_groups=row_groups, **kw)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", as_pyarrow_18)
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"id": pa.array([], pa.int64()), "items": pa.array([], pa.list_(pa.string()))}), empty)
    assert list(ParquetInput().rows(str(empty))) == []
    full = write_parquet(tmp_path / "full.parquet", [{"id": i, "items": ["a"]} for i in range(5)])
    assert list(ParquetInput().rows(full, skip=5)) == []
    assert [r.data["id"] for r in ParquetInput().rows(full, skip=3)] == [3, 4]


def test_corrupt_parquet_raises_input_error(tmp_path):
    p = tmp_path / "bad.parquet"
    p.write_bytes(b"not a parquet file at all")
    with pytest.raises(InputError, match="bad.parquet: cannot read Parquet"):
        list(iter_rows([str(p)]))


def test_parquet_text_that_is_not_utf8_is_a_bad_row_named_by_its_field(tmp_path):
    """pyarrow checks UTF-8 when it writes a string column, not when it reads one: a file another
    writer stored bytes in used to stop the run with `UnicodeDecodeError` (exit 1, no row named);
    each such row is a bad row, the others are read, as for JSON lines."""

    def text(values: list[bytes]) -> pa.Array:  # a string column holding these bytes unchecked
        return pa.Array.from_buffers(pa.string(), len(values), pa.array(values).buffers())

    items = pa.ListArray.from_arrays(pa.array([0, 1, 3, 4], pa.int32()), text([b"a", b"b", b"c\xff", b"d"]))
    table = pa.table({"id": [1, 2, 3], "query": text([b"q", b"q", b"q\xfe"]), "items": items})
    pq.write_table(table, tmp_path / "bytes.parquet", row_group_size=2)
    rows = list(iter_rows([str(tmp_path / "bytes.parquet")]))
    assert [(r.data, r.error, r.where[-5:]) for r in rows] == [
        ({"id": 1, "query": "q", "items": ["a"]}, None, "row 1"),
        ({"id": 2, "query": "q"}, "field 'items'[1]: invalid UTF-8 (byte offset 1)", "row 2"),
        ({"id": 3, "items": ["d"]}, "field 'query': invalid UTF-8 (byte offset 1)", "row 3"),
    ]  # a bad row keeps the fields that decode: its id is written with it (it was null)


def test_a_parquet_file_naming_a_column_twice_is_refused(tmp_path):
    """pyarrow writes a table whose columns share a name; a row holds one value per name, so a
    second 'query' silently replaced the first (scores of the wrong text, exit 0), and a second
    'id' stopped the run with `KeyError` (exit 1). Refused in one line, as a CSV header naming a
    column twice is; so is such a table given to the library."""
    from scorecli.io.parquet_input import table_rows

    for name in ("query", "id"):
        table = pa.Table.from_arrays(
            [pa.array([1]), pa.array(["a"]), pa.array([["b"]]), pa.array(["c"])], names=["id", "query", "items", name]
        )
        p = tmp_path / f"{name}.parquet"
        pq.write_table(table, p)
        said = rf"{name}.parquet: the file names the column '{name}' twice"
        with pytest.raises(InputError, match=said):
            schema_id_type([str(p)], "id")
        with pytest.raises(InputError, match=said):
            list(iter_rows([str(p)]))
        with pytest.raises(InputError, match=rf"the table names the column '{name}' twice"):
            table_rows(table, "id")


def test_corrupt_gzip_raises_input_error(tmp_path):
    p = tmp_path / "bad.jsonl.gz"
    p.write_bytes(b"this is not gzip\n")
    with pytest.raises(InputError, match="bad.jsonl.gz: cannot read"):
        list(iter_rows([str(p)]))


def test_directory_expansion_sorted_and_filtered(tmp_path):
    write_jsonl(tmp_path / "b.jsonl", [{"id": "b"}])
    write_parquet(tmp_path / "a.parquet", [{"id": "a"}])
    write_jsonl(tmp_path / "c.jsonl.gz", [{"id": "c"}], gz=True)
    (tmp_path / "notes.txt").write_text("ignore me")
    (tmp_path / ".hidden.jsonl").write_text('{"id": "hidden"}\n')
    (tmp_path / "sub").mkdir()
    write_jsonl(tmp_path / "sub" / "d.jsonl", [{"id": "d"}])
    assert [os.path.basename(p) for p in resolve_inputs([str(tmp_path)])] == ["a.parquet", "b.jsonl", "c.jsonl.gz"]
    assert ids([str(tmp_path)]) == ["a", "b", "c"]


def test_glob_expansion_sorted(tmp_path):
    for name in ["part-2.jsonl", "part-10.jsonl", "part-1.jsonl", "other.jsonl"]:
        write_jsonl(tmp_path / name, [{"id": name}])
    got = resolve_inputs([str(tmp_path / "part-*.jsonl")])
    assert [os.path.basename(p) for p in got] == ["part-1.jsonl", "part-10.jsonl", "part-2.jsonl"]


def test_a_double_star_glob_reaches_every_depth(tmp_path):
    """`data/**/*.jsonl` lists the files at any depth below `data/` (its own included), as a shell's
    globstar and the object stores' globs do; hidden files stay out."""
    for folder in ("sub/deeper", ".hidden"):
        (tmp_path / folder).mkdir(parents=True)
    write_jsonl(tmp_path / "a.jsonl", [{"id": "a"}])
    write_jsonl(tmp_path / "sub" / "b.jsonl", [{"id": "b"}])
    write_jsonl(tmp_path / "sub" / "deeper" / "c.jsonl", [{"id": "c"}])
    write_jsonl(tmp_path / ".hidden" / "d.jsonl", [{"id": "d"}])
    got = resolve_inputs([str(tmp_path / "**" / "*.jsonl")])
    assert [os.path.relpath(p, tmp_path) for p in got] == ["a.jsonl", "sub/b.jsonl", "sub/deeper/c.jsonl"]


def test_a_glob_passes_over_what_spark_keeps_beside_its_parts(tmp_path):
    """A killed or running Spark job leaves its tasks' outputs in `_temporary/` (parts that will be,
    or never were, committed): `DIR/**/*.parquet`, the glob a hive-partitioned folder is read with,
    read them as rows of the dataset, scoring them twice or scoring rows the dataset never held.
    A wildcard now passes over `_` names as over hidden ones, as pyarrow's datasets and Spark do;
    a `_` name written out is read."""
    ds = tmp_path / "ds"
    for key in ("date=1/part-0.parquet", "_temporary/0/_temporary/attempt_1/date=1/part-0.parquet"):
        (ds / key).parent.mkdir(parents=True, exist_ok=True)
        write_parquet(ds / key, [{"id": key, "query": "q", "items": ["x"]}])
    write_jsonl(ds / "_scratch.jsonl", [{"id": "scratch"}])
    got = resolve_inputs([str(ds / "**" / "*.parquet")])
    assert [os.path.relpath(p, ds) for p in got] == ["date=1/part-0.parquet"]
    assert len(resolve_inputs([str(ds / "_temporary" / "0" / "_temporary" / "*" / "*" / "*.parquet")])) == 1
    with pytest.raises(UsageError, match="input not found"):  # under `**`, a `_` folder is passed over at any depth
        resolve_inputs([str(ds / "_temporary" / "**" / "*.parquet")])
    assert [os.path.basename(p) for p in resolve_inputs([str(ds / "_*.jsonl")])] == ["_scratch.jsonl"]
    with pytest.raises(UsageError, match="no input files in directory; its subfolders"):
        resolve_inputs([str(ds)])  # `_scratch.jsonl` passed over as Spark's folder readers do


def test_specs_keep_their_order(tmp_path):
    b = write_jsonl(tmp_path / "b.jsonl", [{"id": "b"}])
    a = write_jsonl(tmp_path / "a.jsonl", [{"id": "a"}])
    assert ids([b, a]) == ["b", "a"]


def test_a_missing_file_url_is_named_as_the_url(tmp_path):
    """SPEC 15: a missing key is one line naming the URL, a `file://` URL's too (not its path)."""
    url = f"file://{tmp_path}/missing.jsonl"
    with pytest.raises(UsageError) as e:
        resolve_inputs([url])
    assert str(e.value) == f"input not found: {url}"
    with pytest.raises(UsageError) as e:
        resolve_inputs([f"file://{tmp_path}/*.jsonl"])
    assert str(e.value) == f"input not found: file://{tmp_path}/*.jsonl"


def test_file_name_with_glob_chars_is_a_file(tmp_path):
    p = write_jsonl(tmp_path / "data[1].jsonl", [{"id": 1}])
    assert resolve_inputs([p]) == [p]


def test_stdin(tmp_path):
    stdin = io.BytesIO(b'{"id": 1}\n\n{"id": 2}\n')
    rows = list(iter_rows(["-"], stdin=stdin))
    assert [(r.data, r.where) for r in rows] == [({"id": 1}, "<stdin>:1"), ({"id": 2}, "<stdin>:3")]
    assert resolve_inputs(["-"]) == ["-"]


def test_blank_lines_skipped_and_line_numbers_kept(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'\n{"id": 1}\n   \n\t\r\n{"id": 2}\r\n{"id": 3}')
    rows = list(iter_rows([str(p)]))
    assert [(r.data["id"], r.where) for r in rows] == [(1, f"{p}:2"), (2, f"{p}:5"), (3, f"{p}:6")]


def test_utf16_text_is_one_clear_error(tmp_path):
    """A file saved as UTF-16 (Excel's "Unicode Text", PowerShell's `>` on Windows) was 'invalid
    UTF-8 (byte offset 0)' on its first line, and with --skip-bad-rows every line a bad row; one
    error now says what the file is and how to convert it."""
    text = '{"id": 1, "query": "q"}\n{"id": 2, "query": "r"}\n'
    little, big = text.encode("utf-16"), b"\xfe\xff" + text.encode("utf-16-be")
    for name, data in [("a.jsonl", little), ("b.jsonl.gz", gzip.compress(big))]:
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(InputError, match=rf"^{p}:1: the file is UTF-16 text .*iconv -f UTF-16 -t UTF-8"):
            list(iter_rows([str(p)]))
    with pytest.raises(InputError, match=r"^<stdin>:1: the file is UTF-16 text"):
        list(iter_rows(["-"], stdin=io.BytesIO(little)))


def test_gzip_without_its_name_is_one_clear_error(tmp_path):
    """gzip-compressed JSON lines on stdin (`zcat` forgotten) or in a file not named .gz were
    'invalid UTF-8 (byte offset 1)', and with --skip-bad-rows bad rows of compressed bytes; one
    error now says what the input is."""
    data = gzip.compress(b'{"id": 1, "query": "q"}\n{"id": 2, "query": "r"}\n')
    p = tmp_path / "a.jsonl"
    p.write_bytes(data)
    with pytest.raises(InputError, match=rf"^{p}:1: the input is gzip-compressed .*not named .gz"):
        list(iter_rows([str(p)]))
    with pytest.raises(InputError, match=r"^<stdin>:1: the input is gzip-compressed .*zcat"):
        list(iter_rows(["-"], stdin=io.BytesIO(data)))
    named = tmp_path / "b.jsonl.gz"
    named.write_bytes(data)
    assert [r.data["id"] for r in iter_rows([str(named)])] == [1, 2]


def test_parquet_read_as_json_lines_is_one_clear_error(tmp_path):
    """A Parquet file piped on stdin (`cat x.parquet | scorecli score -`, `<(aws s3 cp ... -)`) or
    misnamed `.jsonl` was 'malformed JSON: Expecting value at column 1', and with --skip-bad-rows
    bad rows of its binary bytes; one error now says what the input is."""
    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"id": [1, 2], "query": ["q", "r"], "items": [["a"], ["b"]]}), p)
    misnamed = tmp_path / "a.jsonl"
    misnamed.write_bytes(p.read_bytes())
    with pytest.raises(InputError, match=rf"^{misnamed}:1: the input is a Parquet file .*name the file \*.parquet"):
        list(iter_rows([str(misnamed)]))
    with pytest.raises(InputError, match=r"^<stdin>:1: the input is a Parquet file .*not stdin or a pipe"):
        list(iter_rows(["-"], stdin=io.BytesIO(p.read_bytes())))
    assert [r.data["id"] for r in iter_rows([str(p)])] == [1, 2]


def test_carriage_returns_alone_are_one_clear_error(tmp_path):
    """A file saved with classic Mac OS line endings (CR alone) was one line to the reader: exit 2
    with 'malformed JSON: Extra data at column 36', or with --skip-bad-rows an output of one bad
    row and exit 0. It is one error for the whole input that says what the file is."""
    cr = b'{"id": 1, "query": "q"}\r{"id": 2, "query": "r"}\r'
    for name, data in [("a.jsonl", cr), ("a.jsonl.gz", gzip.compress(cr))]:
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(InputError, match=rf"^{p}:1: lines end in a carriage return alone .*tr '\\r' '\\n'"):
            list(iter_rows([str(p)]))
    with pytest.raises(InputError, match=r"^<stdin>:1: lines end in a carriage return alone"):
        list(iter_rows(["-"], stdin=io.BytesIO(cr)))
    fine = tmp_path / "b.jsonl"  # a CR is whitespace in JSON: inside a line that parses, or at a file's end
    fine.write_bytes(b'{"id": 1,\r"query": "q"}\r\n{"id": 2}\r')
    assert [r.data for r in iter_rows([str(fine)])] == [{"id": 1, "query": "q"}, {"id": 2}]


def test_utf8_bom_is_ignored(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'\xef\xbb\xbf{"id": "\xc3\xa9"}\n')
    assert ids([str(p)]) == ["é"]


def test_bad_lines_yield_errors_with_where(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"id": 1}\n{"id": \n{"id": "\xff"}\n[1, 2]\n"text"\n{"id": 6}\nnull\n7\n')
    rows = list(iter_rows([str(p)]))
    assert [r.where for r in rows] == [f"{p}:{i}" for i in range(1, 9)]
    assert rows[0] == RawRow({"id": 1}, f"{p}:1")
    assert rows[1].data is None
    assert rows[1].error == "malformed JSON: Expecting value at column 7"
    assert rows[2].error == "field 'id': invalid UTF-8 (byte offset 8)" and rows[2].data == {}
    p.write_bytes(b'{"id": 7, "query": "q\xff", "items": ["a"]}\n')
    assert [(r.data, r.error) for r in iter_rows([str(p)])] == [
        ({"id": 7, "items": ["a"]}, "field 'query': invalid UTF-8 (byte offset 21)")
    ]  # the bad row's id is written with it (it was null)
    assert rows[3].error == "expected a JSON object, got an array"
    assert rows[4].error == "expected a JSON object, got a string"
    assert rows[5].data == {"id": 6} and rows[5].error is None
    assert rows[6].error == "expected a JSON object, got null"  # not Python's NoneType
    assert rows[7].error == "expected a JSON object, got a number"


def test_missing_input(tmp_path):
    with pytest.raises(UsageError, match="^input not found: .*nope.jsonl$"):
        resolve_inputs([str(tmp_path / "nope.jsonl")])
    with pytest.raises(UsageError, match="input not found"):
        resolve_inputs([str(tmp_path / "*.jsonl")])
    with pytest.raises(UsageError, match="input not found"):
        list(iter_rows([str(tmp_path / "nope.parquet")]))


def test_empty_directory(tmp_path):
    (tmp_path / "x.txt").write_text("")
    with pytest.raises(UsageError, match="input not found"):
        resolve_inputs([str(tmp_path)])


def test_a_spark_or_delta_folder(tmp_path):
    """What Spark and Delta writers leave beside their parts: `_SUCCESS` and `.crc` files are not
    inputs; a Delta table's folder (`_delta_log/`) keeps the files of removed rows too and was read
    whole, those rows scored as if they were the table's: refused, naming the way out; a glob of
    its files is read as asked."""
    table = tmp_path / "table"
    (table / "_delta_log").mkdir(parents=True)
    (table / "_delta_log" / "00000000000000000000.json").write_text('{"commitInfo": {}}\n')
    for name in ("part-00000-a.snappy.parquet", "part-00001-b.snappy.parquet"):  # b: a later version's rewrite
        write_parquet(table / name, [{"id": 1, "query": "q", "items": ["x"]}])
        (table / f".{name}.crc").write_bytes(b"")
    (table / "_SUCCESS").write_text("")
    with pytest.raises(UsageError, match=r"a Delta table \(it holds _delta_log/\).*read_delta"):
        resolve_inputs([str(table)])
    assert [os.path.basename(p) for p in resolve_inputs([str(table / "*.parquet")])] == [
        "part-00000-a.snappy.parquet",
        "part-00001-b.snappy.parquet",
    ]
    (table / "_delta_log" / "00000000000000000000.json").unlink()
    (table / "_delta_log").rmdir()  # a Spark output folder: its parts
    assert len(resolve_inputs([str(table)])) == 2


def test_a_hive_partitioned_folder_names_the_glob_that_reads_it(tmp_path):
    """A folder whose parts lie in `key=value/` subfolders (polars, duckdb, Spark with
    partitioning): its own files are read, not its subfolders', and the message says how to."""
    (tmp_path / "ds" / "date=2026-11-29").mkdir(parents=True)
    write_parquet(tmp_path / "ds" / "date=2026-11-29" / "part-0.parquet", [{"query": "q", "items": ["x"]}])
    with pytest.raises(
        UsageError, match=r"its subfolders are not read: name their files with a glob, '.*ds/\*\*/\*\.parquet'"
    ):
        resolve_inputs([str(tmp_path / "ds")])
    assert len(resolve_inputs([str(tmp_path / "ds" / "**" / "*.parquet")])) == 1


def test_unknown_extension(tmp_path):
    p = tmp_path / "a.xlsx"
    p.write_text("id\n1\n")
    with pytest.raises(UsageError, match=r"unsupported input format: .*a\.xlsx.*\.jsonl.*\.parquet.*\.csv"):
        resolve_inputs([str(p)])


def test_count_rows(tmp_path):
    a = tmp_path / "a.jsonl"
    a.write_bytes(b'{"id": 1}\n\n  \n{"id": 2}\n{"id": 3}')  # no trailing newline
    big = write_jsonl(tmp_path / "big.jsonl", [{"id": i, "pad": "x" * 300} for i in range(5000)])
    pqt = write_parquet(tmp_path / "c.parquet", [{"id": i} for i in range(7)])
    assert count_rows([str(a)]) == 3
    assert count_rows([big]) == 5000  # spans several 1 MiB chunks
    assert count_rows([str(a), pqt]) == 10
    gz = write_jsonl(tmp_path / "d.jsonl.gz", [{"id": 1}], gz=True)
    assert count_rows([str(a), gz]) is None
    assert count_rows(["-"]) is None


# ---- writers ---------------------------------------------------------------------------


def test_output_format():
    assert output_format("-") == "jsonl"
    assert output_format("x.jsonl") == "jsonl"
    assert output_format("x.json") == "jsonl"
    assert output_format("x.parquet") == "parquet"
    assert output_format("x") == "parquet"


def test_check_output(tmp_path):
    resolve_output("-")
    resolve_output(str(tmp_path / "out.parquet"))
    assert resolve_output(str(tmp_path)).kind == "dataset"  # an existing directory: a Parquet dataset
    assert resolve_output(str(tmp_path / "new") + "/").kind == "dataset"
    (tmp_path / "file").touch()
    with pytest.raises(UsageError, match="cannot write output .*: not a directory"):
        resolve_output(str(tmp_path / "file") + "/")
    with pytest.raises(UsageError, match="cannot write output .*does not exist"):
        resolve_output(str(tmp_path / "missing" / "out.parquet"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_check_output_unwritable(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        with pytest.raises(UsageError, match="not writable"):
            resolve_output(str(d / "out.parquet"))
    finally:
        d.chmod(0o700)


def test_parquet_sink_commits_with_metadata(tmp_path):
    out = str(tmp_path / "out.parquet")
    with Sink(out, {"model": "m", "kind": "seq-cls"}) as sink:
        assert os.path.exists(temp_path(os.path.realpath(out))) and not os.path.exists(out)
        sink.write(pa.table({"id": [1, 2], "score": [[0.5], [0.25]]}))
        sink.write(pa.table({"id": [3], "score": [[1.0]]}))
    assert os.listdir(tmp_path) == ["out.parquet"]
    meta = pq.read_schema(out).metadata
    assert meta[b"model"] == b"m" and meta[b"kind"] == b"seq-cls"
    assert pq.read_table(out).column("id").to_pylist() == [1, 2, 3]
    assert pq.ParquetFile(out).metadata.row_group(0).column(0).compression == "ZSTD"


def test_sink_replaces_existing_output(tmp_path):
    out = tmp_path / "out.parquet"
    out.write_text("old")
    with Sink(str(out), {}) as sink:
        sink.write(pa.table({"x": [1]}))
    assert pq.read_table(out).num_rows == 1


@pytest.mark.parametrize("name", ["out.parquet", "out.jsonl"])
@pytest.mark.parametrize("exc", [ValueError, KeyboardInterrupt])
def test_sink_exception_leaves_nothing(tmp_path, name, exc):
    out = tmp_path / name
    with pytest.raises(exc):
        with Sink(str(out), {"model": "m"}) as sink:
            sink.write(pa.table({"x": [1, 2]}))
            raise exc("boom")
    assert os.listdir(tmp_path) == []


def test_sink_exception_keeps_previous_output(tmp_path):
    out = tmp_path / "out.parquet"
    out.write_bytes(b"previous")
    with pytest.raises(RuntimeError):
        with Sink(str(out), {}) as sink:
            sink.write(pa.table({"x": [1]}))
            raise RuntimeError("boom")
    assert out.read_bytes() == b"previous"
    assert os.listdir(tmp_path) == ["out.parquet"]


def test_abort_is_idempotent(tmp_path):
    sink = Sink(str(tmp_path / "out.parquet"), {})
    sink.write(pa.table({"x": [1]}))
    sink.abort()
    sink.abort()
    assert os.listdir(tmp_path) == []


def test_parquet_close_without_write_fails_and_cleans_up(tmp_path):
    out = tmp_path / "out.parquet"
    with pytest.raises(RuntimeError):
        with Sink(str(out), {}):
            pass
    assert os.listdir(tmp_path) == []


def test_empty_table_is_a_valid_output(tmp_path):
    out = tmp_path / "out.parquet"
    with Sink(str(out), {"k": "v"}) as sink:
        sink.write(pa.table({"score": pa.array([], pa.list_(pa.float32()))}))
    t = pq.read_table(out)
    assert t.num_rows == 0 and t.schema.field("score").type == pa.list_(pa.float32())


def test_reordered_columns_are_conformed_and_no_type_is_widened(tmp_path):
    out = tmp_path / "out.parquet"
    with Sink(str(out), {}) as sink:
        sink.write(pa.table({"id": pa.array([1, 2], pa.int32()), "s": [0.5, 0.5]}))
        sink.write(pa.table({"s": [0.25], "id": pa.array([3], pa.int32())}))  # reordered
    t = pq.read_table(out)
    assert t.column_names == ["id", "s"] and t.schema.field("id").type == pa.int32()
    assert t.column("id").to_pylist() == [1, 2, 3]
    with pytest.raises(InputError, match="id column changes type between rows: int32 vs int64"):
        with Sink(str(out), {}) as sink:
            sink.write(pa.table({"id": pa.array([1, 2], pa.int32())}))
            sink.write(pa.table({"id": pa.array([3], pa.int64())}))  # never silently widened
    assert pq.read_table(out).num_rows == 3  # the earlier output is kept


def test_missing_column_later_is_null_filled(tmp_path):
    out = tmp_path / "out.parquet"
    with Sink(str(out), {}) as sink:
        sink.write(pa.table({"id": ["a"], "s": [1.0]}))
        sink.write(pa.table({"s": [2.0]}))
    assert pq.read_table(out).column("id").to_pylist() == ["a", None]


@pytest.mark.parametrize("later", [["x"], ["007"], [1.5]])
def test_incompatible_id_type_is_input_error(tmp_path, later):
    out = tmp_path / "out.parquet"
    with pytest.raises(InputError, match="id column changes type between rows"):
        with Sink(str(out), {}) as sink:
            sink.write(pa.table({"id": [1, 2]}))
            sink.write(pa.table({"id": later}))
    assert os.listdir(tmp_path) == []


def test_null_first_window_then_int_ids(tmp_path):
    out = tmp_path / "out.parquet"
    with Sink(str(out), {"model": "m"}) as sink:
        sink.write(pa.table({"id": pa.nulls(2), "s": [1.0, 2.0]}))
        sink.write(pa.table({"id": pa.nulls(1), "s": [3.0]}))
        sink.write(pa.table({"id": [7], "s": [4.0]}))
        sink.write(pa.table({"id": pa.nulls(1), "s": [5.0]}))
    t = pq.read_table(out)
    assert t.schema.field("id").type == pa.int64()
    assert t.column("id").to_pylist() == [None, None, None, 7, None]
    assert t.column("s").to_pylist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert pq.read_schema(out).metadata[b"model"] == b"m"


def test_null_lists_resolve_to_concrete_lists(tmp_path):
    out = tmp_path / "out.parquet"
    with Sink(str(out), {}) as sink:
        sink.write(pa.table({"score": pa.array([[]], pa.list_(pa.null()))}))
        sink.write(pa.table({"score": pa.array([[0.5]], pa.list_(pa.float32()))}))
    t = pq.read_table(out)
    assert t.schema.field("score").type == pa.list_(pa.float32())
    assert t.column("score").to_pylist() == [[], [0.5]]


def test_all_null_column_is_written_at_close(tmp_path):
    out = tmp_path / "out.parquet"
    with Sink(str(out), {}) as sink:
        sink.write(pa.table({"id": pa.nulls(2), "s": [1.0, 2.0]}))
    t = pq.read_table(out)
    assert t.column("id").to_pylist() == [None, None]


def test_jsonl_sink_to_path(tmp_path):
    out = tmp_path / "out.jsonl"
    scores = pa.array([[0.1, 0.5]], pa.list_(pa.float32()))
    with Sink(str(out), {"model": "m"}) as sink:
        sink.write(pa.table({"id": ["é"], "score": scores}))
        sink.write(pa.table({"id": ["b"], "score": pa.array([[]], pa.list_(pa.float32()))}))
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[0] == '{"id": "é", "score": [0.1, 0.5]}'  # float32 digits, not 0.10000000149011612
    assert [json.loads(x) for x in lines] == [{"id": "é", "score": [0.1, 0.5]}, {"id": "b", "score": []}]
    assert os.listdir(tmp_path) == ["out.jsonl"]


def test_jsonl_sink_streams_to_stdout_window_by_window(tmp_path, capsys):
    with Sink("-", {"model": "m"}) as sink:
        sink.write(pa.table({"id": [1], "score": [[0.5]]}))
        assert capsys.readouterr().out == '{"id": 1, "score": [0.5]}\n'  # before the run ends
        sink.write(pa.table({"id": [2], "score": [[0.25]]}))
    assert capsys.readouterr().out == '{"id": 2, "score": [0.25]}\n'
    assert os.listdir(tmp_path) == []


def test_a_streamed_column_first_seen_later_is_in_every_later_line(capsys):
    """`--out -` wrote a window's lines with that window's columns: after a window with ids, a
    window whose rows have none left the id key out again (a reader that takes its columns from
    the lines it has seen, polars or DuckDB, then lost or refused them). A stream cannot go back
    to the lines before the first id; from there on every line has the key, null where a row has none."""
    scores = pa.array([[0.5]], pa.list_(pa.float32()))
    with Sink("-", {"model": "m"}) as sink:
        sink.write(pa.table({"score": scores}))
        sink.write(pa.table({"id": [5], "score": scores, "labels": pa.array([[1.0]], pa.list_(pa.float64()))}))
        sink.write(pa.table({"score": scores}))
        sink.write(pa.table({"id": pa.nulls(1, pa.null()), "score": scores}))
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0] == {"score": [0.5]}
    assert [list(line) for line in lines[1:]] == [["id", "score", "labels"]] * 3
    assert [line["id"] for line in lines[1:]] == [5, None, None]


def test_failed_run_keeps_stdout_open_and_adds_nothing(capsys):
    with pytest.raises(ValueError):
        with Sink("-", {"model": "m"}) as sink:
            sink.write(pa.table({"id": [1], "score": [[0.5]]}))
            raise ValueError("bad row later on")
    assert capsys.readouterr().out == '{"id": 1, "score": [0.5]}\n'  # whole windows only
    assert not sys.stdout.closed


# ---- output targets (scorecli.io.output) -----------------------------------------------


def test_output_format_by_suffix():
    assert output_format("/dev/stdout") == "jsonl"
    assert output_format("x.jsonl.gz") == "jsonl.gz" and output_format("X.JSONL") == "jsonl"
    assert output_format(".parquet") == "parquet"  # a hidden file without suffix
    for bad in ("x.csv", "x.gz", "scores.parquet.bak"):
        with pytest.raises(UsageError, match=f"unsupported output format: {bad}"):
            output_format(bad)


def test_resolve_output_kinds(tmp_path):
    assert resolve_output("-").kind == resolve_output("/dev/stdout").kind == "stdout"
    assert resolve_output("/dev/stderr") == Target("/dev/stderr", "parquet", "special", "/dev/stderr")  # as given
    assert resolve_output(os.devnull) == Target(os.devnull, "parquet", "special", os.devnull)
    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)
    assert resolve_output(str(fifo)).kind == "special"
    (tmp_path / "d").mkdir()
    link = tmp_path / "link.parquet"
    link.symlink_to("d/target.parquet")  # dangling: the target is created, the link kept
    assert resolve_output(str(link)) == Target(str(link), "parquet", "file", str(tmp_path / "d" / "target.parquet"))


def test_resolve_output_refusals(tmp_path):
    import socket

    inp = tmp_path / "in.jsonl"
    inp.write_text("{}\n")
    (tmp_path / "alias.jsonl").symlink_to(inp)
    os.link(inp, tmp_path / "hard.jsonl")
    ro = tmp_path / "ro.parquet"
    ro.write_bytes(b"x")
    ro.chmod(0o444)  # read-only for root too: no write bit
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s.jsonl"))
    try:
        for out, reason in [
            ("", "empty path"),
            (str(tmp_path / "alias.jsonl"), "is the input"),
            (str(tmp_path / "hard.jsonl"), "is the input"),
            (str(ro), "read-only"),
            (str(tmp_path / "s.jsonl"), "is a socket"),
        ]:
            with pytest.raises(UsageError, match=reason):
                resolve_output(out, [str(inp), "-"])
    finally:
        sock.close()


def test_an_output_name_too_long_for_what_is_written_beside_it_is_refused(tmp_path):
    """A name the file system takes (250 bytes: `touch` makes it) failed with exit 1 after the model
    loaded, at `NAME.partial/` or `.NAME.PID.tmp`, past the 255-byte limit; now it is refused up
    front, counted in bytes (a non-ASCII name is longer than its characters), and the longest name
    that fits is taken."""
    from scorecli.io.output import BESIDE

    fits = os.pathconf(tmp_path, "PC_NAME_MAX") - BESIDE
    name = "x" * (fits - len(".jsonl")) + ".jsonl"
    target = resolve_output(str(tmp_path / name))
    assert target.kind == "file"
    open(temp_path(target.path), "wb").close()  # the longest PID's temporary file fits
    os.mkdir(target.path + ".partial")
    with pytest.raises(UsageError, match=f"its name is {fits + 1} bytes.*at most {fits} bytes"):
        resolve_output(str(tmp_path / ("é" + name[1:])))  # one more byte, not one more character
    (tmp_path / "d").mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "d" / "link.jsonl").symlink_to(tmp_path / "a" / ("y" + name))  # the name of what is written
    with pytest.raises(UsageError, match="cannot write output .*link.jsonl: its name is"):
        resolve_output(str(tmp_path / "d" / "link.jsonl"))


@pytest.mark.e2e
def test_paths_whose_names_are_not_utf8_are_read_and_written(tmp_path, bert_cross_encoder):
    """A folder named in Latin-1 bytes (Python keeps them as surrogate escapes, which pyarrow cannot
    encode): a Parquet input there stopped with exit 1 (UnicodeEncodeError), a file output failed
    at the end reading back its parts (exit 1, its rows kept), and a score cache there was never
    hit (a warning per segment); each now reads its files through Python. The paths are given
    absolute: a relative one names no such bytes."""
    import subprocess

    from tests.test_cli import SCORECLI, _env

    folder = os.fsdecode(bytes(tmp_path) + b"/caf\xe9")
    os.mkdir(folder)
    rows = pa.table({"query": ["a query", "q"], "items": [["one", "two"], ["three"]]})
    with open(os.path.join(folder, "in.parquet"), "wb") as f:  # pyarrow cannot write it by name either
        pq.write_table(rows, f)
    for out, hits in (("o.jsonl", "0 hits, 3 misses"), ("o.parquet", "3 hits, 0 misses"), ("ds/", "3 hits")):
        args = [
            "score",
            os.path.join(folder, "in.parquet"),
            "--out",
            out,
            "--model",
            bert_cross_encoder,
            "--score-cache",
            os.path.join(folder, "cache"),
        ]
        proc = subprocess.run(SCORECLI + args, cwd=folder, capture_output=True, env=_env(), timeout=180)
        assert proc.returncode == 0 and f"score cache: {hits}" in proc.stderr.decode(), proc.stderr.decode()
        assert "warning" not in proc.stderr.decode()
    with open(os.path.join(folder, "o.jsonl"), "rb") as f:
        assert [len(json.loads(line)["scores"]) for line in f] == [2, 1]
    assert sorted(os.listdir(folder)) == ["cache", "ds", "in.parquet", "o.jsonl", "o.parquet"]


def test_a_dataset_folder_that_cannot_be_listed_is_refused(tmp_path):
    """A folder `--out DIR/` that may be written but not listed (mode 0333, a drop box) was a
    PermissionError, exit 1; it is refused as an unwritable one is. Root reads any folder: as root
    the check runs without the capabilities that let it (setpriv), as a user would meet it."""
    import shutil
    import subprocess

    folder = tmp_path / "drop"
    folder.mkdir()
    folder.chmod(0o333)
    check = "import sys; from scorecli.io.output import resolve_output; resolve_output(sys.argv[1])"
    command = [sys.executable, "-c", check, f"{folder}/"]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root, and no setpriv to drop the capabilities that let root read any folder")
        drop = "-dac_override,-dac_read_search"
        command = ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}", *command]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    finally:
        folder.chmod(0o755)
    assert proc.returncode == 1 and "UsageError: cannot write output" in proc.stderr, proc.stderr
    assert f"directory {folder} is not readable" in proc.stderr, proc.stderr


@pytest.mark.e2e
def test_stale_temps_of_dead_unlocked_runs_are_removed(tmp_path):
    import fcntl
    import subprocess

    proc = subprocess.Popen(["true"])
    proc.wait()
    out = str(tmp_path / "s.parquet")
    dead, locked, live = (tmp_path / f".s.parquet.{pid}.tmp" for pid in (proc.pid, proc.pid + 100000, os.getppid()))
    for p in (dead, locked, live):
        p.write_bytes(b"x")
    (tmp_path / ".other.parquet.1.tmp").write_bytes(b"x")  # another output's
    with open(locked, "rb") as f:  # a live run in another PID namespace: its lock is held
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        assert clean_stale_temps(out) == [str(dead)]
    assert sorted(os.listdir(tmp_path)) == sorted([".other.parquet.1.tmp", locked.name, live.name])


def test_sink_writes_through_a_fifo_and_devices(tmp_path):
    import threading

    fifo = tmp_path / "out.parquet"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    with Sink(str(fifo), {"model": "m"}) as sink:  # Parquet: spooled, copied in at the end
        sink.write(pa.table({"id": [1, 2]}))
    reader.join(10)
    assert pq.read_table(pa.BufferReader(got[0]))["id"].to_pylist() == [1, 2]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    with Sink(os.devnull, {}) as sink:
        sink.write(pa.table({"id": [1]}))
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_closed_fifo_raises_output_closed(tmp_path):
    import threading

    fifo = tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    reader = threading.Thread(target=lambda: open(fifo, "rb").close(), daemon=True)  # opens, then goes away
    reader.start()
    with pytest.raises(OutputClosed, match="the reader closed the output"):
        with Sink(str(fifo), {}) as sink:
            reader.join(10)
            for _ in range(100):
                sink.write(pa.table({"id": list(range(1000))}))


def test_replaced_file_keeps_its_mode_group_and_jsonl_gz(tmp_path):
    """A file replaced keeps its mode and its group: one `chgrp`ed to a group that reads it (0640)
    came back with the writer's own group, the 0640 shutting that group out."""
    out = tmp_path / "out.jsonl.gz"
    out.write_bytes(b"old")
    out.chmod(0o640)
    groups = [12345] if os.geteuid() == 0 else os.getgroups()  # root may give any group, a user their own
    other = next((g for g in groups if g != os.getegid()), None)
    if other is not None:
        os.chown(out, -1, other)
    with Sink(str(out), {}) as sink:
        sink.write(pa.table({"id": [1]}))
        sink.write(pa.table({"id": [2]}))
    assert gzip.decompress(out.read_bytes()) == b'{"id": 1}\n{"id": 2}\n'
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o640
    if other is not None:
        assert os.stat(out).st_gid == other


def test_a_symlink_planted_at_the_temporary_name_is_not_followed(tmp_path):
    """In a shared folder the temporary file's name is known (`.NAME.PID.tmp`): a symlink planted
    there was opened and followed, writing the output over the file it pointed to, and the rename
    then left `--out` a link to it. The link is now removed and the file made new; the same for a
    part, or a score cache segment, in a folder others may write (`io.folders`)."""
    from scorecli.io.folders import LocalFolder

    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me\n")
    out = tmp_path / "out.jsonl"
    os.symlink(victim, temp_path(str(out)))
    with Sink(str(out), {}) as sink:
        sink.write(pa.table({"id": [1]}))
    assert victim.read_bytes() == b"keep me\n"
    assert not out.is_symlink() and out.read_bytes() == b'{"id": 1}\n'
    os.symlink(victim, tmp_path / f".part.{os.getpid()}.tmp")
    LocalFolder(str(tmp_path)).write("part", lambda f: f.write(b"part"))
    assert victim.read_bytes() == b"keep me\n" and (tmp_path / "part").read_bytes() == b"part"
    assert not (tmp_path / "part").is_symlink()


def test_late_and_null_columns_rewrite_the_file_once(tmp_path):
    out = tmp_path / "out.parquet"
    with Sink(str(out), {"model": "m"}) as sink:
        sink.write(pa.table({"s": [1.0, 2.0]}))  # no id yet
        sink.write(pa.table({"id": pa.nulls(1), "s": [3.0]}))  # the column, all null
        sink.write(pa.table({"id": ["x"], "s": [4.0]}))  # its type
    t = pq.read_table(out)
    assert t.column_names == ["id", "s"] and t.schema.field("id").type == pa.string()
    assert t["id"].to_pylist() == [None, None, None, "x"] and t["s"].to_pylist() == [1.0, 2.0, 3.0, 4.0]
    assert t.schema.metadata[b"model"] == b"m"


def test_nonfinite_scores_become_null_and_are_counted(tmp_path):
    out = tmp_path / "out.jsonl"
    scores = pa.array([[0.5, float("nan")], None, [float("inf")]], pa.list_(pa.float32()))
    with Sink(str(out), {}) as sink:
        sink.write(pa.table({"id": [1, 2, 3], "score": scores, "n": [1, 2, 3]}))
    assert (
        out.read_text() == '{"id": 1, "score": [0.5, null], "n": 1}\n{"id": 2, "score": null, "n": 2}\n'
        '{"id": 3, "score": [null], "n": 3}\n'
    )
    assert sink.nulled == {"score": 2}
    out = tmp_path / "out.parquet"
    with Sink(str(out), {}) as sink:  # Parquet keeps a NaN id as it is; scores still null
        sink.write(pa.table({"id": [float("nan")], "score": pa.array([[float("nan")]], pa.list_(pa.float32()))}))
    row = pq.read_table(out).to_pylist()[0]
    assert row["id"] != row["id"] and row["score"] == [None]


def test_nonfinite_float16_values_become_null_and_are_counted(tmp_path):
    """float16 ids and scores: NaN and infinities null, as in float32 (under pyarrow 15, which has
    no float16 kernel to find them, the run stopped at its first write, exit 1)."""
    half = np.array([65504, np.inf, 0.5, np.nan, 0], np.float16)
    ids = pa.array(half, mask=np.array([0, 0, 0, 0, 1], bool))
    scores = pa.ListArray.from_arrays(pa.array(range(6), pa.int32()), pa.array(np.append(half[1:], np.float16(0.25))))
    out = tmp_path / "out.jsonl"
    with Sink(str(out), {}) as sink:
        sink.write(pa.table({"id": ids, "score": scores}))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [65504.0, None, 0.5, None, None]
    assert [r["score"] for r in rows] == [[None], [0.5], [None], [0.0], [0.25]]
    assert sink.nulled == {"id": 2, "score": 2}


def test_a_uuid_id_is_written_to_json_lines_as_its_text(tmp_path):
    """DuckDB writes its `uuid` ids as Parquet UUIDs, which pyarrow reads as `arrow.uuid`: a JSON
    lines output writes each as its canonical text (the run used to stop at the end, exit 1,
    `cannot write UUID as JSON`), and a Parquet output keeps the column's type."""
    import uuid

    first, second = uuid.UUID(int=1), uuid.UUID("c8bf5cba-6bdb-4d8a-9ec1-1f23118c10be")
    ids = pa.array([first.bytes, None, second.bytes], pa.uuid())
    table = pa.table({"id": ids, "score": pa.array([[0.5], [], [0.25]], pa.list_(pa.float32()))})
    out = tmp_path / "out.jsonl"
    with Sink(str(out), {}) as sink:
        sink.write(table)
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [str(first), None, str(second)]
    out = tmp_path / "out.parquet"
    with Sink(str(out), {}) as sink:
        sink.write(table)
    assert pq.read_table(out)["id"].combine_chunks().equals(ids)


def test_nan_float_id_of_a_parquet_input_stays_nan_end_to_end(tmp_path, qwen3_seq_cls):
    """Through the whole run as the CLI makes it (windows kept as parts, then the output): a NaN
    id from a float64 Parquet id column is NaN in Parquet output and in a dataset, as README
    says, and null in JSON lines (JSON has no NaN)."""
    import pyarrow.dataset as ds

    from scorecli.config import ScoreConfig
    from scorecli.engine.checkpoint import Checkpoint
    from scorecli.engine.run import run_score
    from scorecli.io.output import resolve_output

    inp = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [1.5, float("nan")], "query": ["q", "r"], "items": [["a"], ["b"]]}), inp)
    cfg = ScoreConfig(model=qwen3_seq_cls)
    for name in ("out.parquet", "out.jsonl", "ds/"):
        target = resolve_output(str(tmp_path / name), [str(inp)])
        checkpoint = Checkpoint.open(target, cfg, [str(inp)], resume=False)
        assert checkpoint is not None
        run_score(cfg, [str(inp)], target, None, None, None, checkpoint=checkpoint)
    for ids in (
        pq.read_table(tmp_path / "out.parquet")["id"].to_pylist(),
        ds.dataset(str(tmp_path / "ds")).to_table()["id"].to_pylist(),
    ):
        assert ids[0] == 1.5 and ids[1] != ids[1], ids  # NaN
    assert [json.loads(line)["id"] for line in (tmp_path / "out.jsonl").read_text().splitlines()] == [1.5, None]


def _nanosecond_table() -> pa.Table:
    """Ids of nanoseconds that are not whole microseconds (polars' `Time`, a pandas datetime read
    at full precision), and other such columns scorecli does not use (one of lists of structs)."""
    return pa.table(
        {
            "id": pa.array([3_723_000_000_001, None, 3_723_000_000_002], pa.time64("ns")),
            "created": pa.array([1_700_000_000_123_456_789, 0, -1], pa.timestamp("ns", "America/New_York")),
            "events": pa.array([[{"at": 1}], None, []], pa.list_(pa.struct([("at", pa.duration("ns"))]))),
            "query": ["q", "r", "s"],
            "items": [["a"], ["b"], []],
        }
    )


def test_nanosecond_ids_are_kept_exactly_end_to_end(tmp_path, qwen3_seq_cls):
    """A time64[ns] id came back without its nanoseconds (01:02:03.000000001 as 01:02:03, two ids
    made one) in every output where pandas was loaded; it is kept exactly, and JSON lines write it
    with nine digits after the second."""
    from scorecli.config import ScoreConfig
    from scorecli.engine.checkpoint import Checkpoint
    from scorecli.engine.run import run_score
    from scorecli.io.output import resolve_output

    inp = tmp_path / "in.parquet"
    table = _nanosecond_table()
    pq.write_table(table, inp)
    cfg = ScoreConfig(model=qwen3_seq_cls)
    for name in ("out.parquet", "out.jsonl"):
        target = resolve_output(str(tmp_path / name), [str(inp)])
        checkpoint = Checkpoint.open(target, cfg, [str(inp)], resume=False)
        assert checkpoint is not None
        run_score(cfg, [str(inp)], target, None, None, None, checkpoint=checkpoint)
    assert pq.read_table(tmp_path / "out.parquet")["id"].combine_chunks().equals(table["id"].combine_chunks())
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["01:02:03.000000001", None, "01:02:03.000000002"]


NO_PANDAS = """
import json, sys
from scorecli.io.lazy_pandas import defer
assert defer()
import pyarrow as pa, pyarrow.parquet as pq
from scorecli.io.ids import id_array
from scorecli.io.readers import iter_rows
from scorecli.io.writers import to_jsonl
path, = sys.argv[1:]
table = pq.read_table(path)
rows = [raw.data for raw in iter_rows([path])]
assert [r["events"] for r in rows] == [[{"at": 1}], None, []]  # nanoseconds inside: their numbers
for name in ("id", "created"):
    assert id_array([r[name] for r in rows], name, table.schema.field(name).type).equals(table[name].combine_chunks())
print(to_jsonl(table.select(["id", "created"])), end="")
"""


def test_nanoseconds_are_read_and_written_without_pandas(tmp_path):
    """A command-line run has no pandas (`io.lazy_pandas`), and pyarrow hands a nanosecond value
    that is not a whole microsecond to Python only through pandas: a Parquet input with such a
    column, even one scorecli does not use, stopped the run (exit 1, `ValueError: Nanosecond
    resolution temporal type ... is not safely convertible`), and so did a JSON lines output of
    such an id. Both hold the values exactly now."""
    import subprocess

    path = tmp_path / "in.parquet"
    pq.write_table(_nanosecond_table(), path)
    proc = subprocess.run([sys.executable, "-c", NO_PANDAS, str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line) for line in proc.stdout.splitlines()] == [
        {"id": "01:02:03.000000001", "created": "2023-11-14T17:13:20.123456789-05:00"},
        {"id": None, "created": "1969-12-31T19:00:00-05:00"},
        {"id": "01:02:03.000000002", "created": "1969-12-31T18:59:59.999999999-05:00"},
    ]


# ---- ids (scorecli.io.ids) -------------------------------------------------------------


def check_ids(values, schema_type=None):
    rows = [RawRow({"id": v}, f"f:{k + 1}") for k, v in enumerate(values)]
    return [r.error for r in IdCheck("id", schema_type)(rows)]


def test_json_ids_keep_the_first_ids_kind():
    assert check_ids([None, 1, None, -(2**63), 2**63 - 1]) == [None] * 5
    assert check_ids(["a", "b"]) == [None, None] and check_ids([2.5, 1e3]) == [None, None]
    errors = check_ids([1, 2.5, "x", True, 3])
    assert errors[0] is None and errors[4] is None
    assert (
        errors[1] == "field 'id': 2.5 is a number with a fraction or exponent, but the ids before it are integers "
        "(first at f:1); give every row the same kind of id"
    )
    assert "'x' is a string" in errors[2] and "True is a boolean" in errors[3]
    assert "1 is an integer, but the ids before it are numbers" in check_ids([0.5, 1])[1]


def test_bad_json_ids_are_bad_rows():
    errors = check_ids([{"a": 1}, [1], "\ud800", 2**63, -(2**63) - 1])
    assert "got an object" in errors[0] and "got an array" in errors[1]
    assert "'\\ud800' holds a lone surrogate" in errors[2]
    assert all("does not fit a 64-bit integer" in e for e in errors[3:])
    # JSON's 1e400 and NaN: 1e400 and 2e400 read as one id, inf, written null to JSON lines
    assert check_ids([1.5, json.loads("1e400"), float("nan")])[1:] == [
        "field 'id': inf is not a finite number (write it as a string)",
        "field 'id': nan is not a finite number (write it as a string)",
    ]


def test_ids_against_the_parquet_schema_type():
    errors = check_ids([5, 2**40, "x", 2.5, None], pa.int32())
    assert errors[0] is None and errors[4] is None
    assert all("does not fit the Parquet inputs' id type int32" in e for e in errors[1:4])
    typed = RawRow({"id": 2**40}, "p: row 1", typed=True)  # Parquet rows: their schema decides
    assert list(IdCheck("id", pa.int32())([typed])) == [typed]


def test_schema_id_type(tmp_path):
    a, b, c = (str(tmp_path / n) for n in ("a.parquet", "b.parquet", "c.parquet"))
    pq.write_table(pa.table({"id": pa.array([1], pa.int32())}), a)
    pq.write_table(pa.table({"x": [1]}), b)
    pq.write_table(pa.table({"id": ["s"]}), c)
    assert schema_id_type([a, b, "-"], "id") == pa.int32() and schema_id_type([b], "id") is None
    with pytest.raises(UsageError, match=f"field 'id' has type int32 in {a} but string in {c}"):
        schema_id_type([a, c], "id")
    # a shard whose ids are all None, as pandas writes them (type null), was refused beside int32 ids
    n = str(tmp_path / "n.parquet")
    pq.write_table(pa.table({"id": pa.array([None], pa.null())}), n)
    assert schema_id_type([n, a], "id") == pa.int32() and schema_id_type([n], "id") is None


# ---- readers: shells and messages ------------------------------------------------------


def test_json_array_file_is_named(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'\n  [{"id": 1},\n {"id": 2}]\n')
    with pytest.raises(InputError, match=rf"^{p}:2: a JSON array; expected JSON lines"):
        list(iter_rows([str(p)]))


def test_a_json_array_on_one_line_is_refused_without_reading_it_whole():
    """`json.dump(rows, f)` writes a whole file as one line: its first line was read whole before
    it was refused (twice the file's size in memory, a 10 GB file killed for memory, never
    reaching its message); now from its first MiB. A long first line of JSON lines is read whole."""
    array = b"\xef\xbb\xbf" + b"[" + b", ".join([b'{"id": 1, "query": "q", "items": ["x"]}'] * 200_000) + b"]"
    stdin = io.BufferedReader(io.BytesIO(array))
    with pytest.raises(InputError, match=r"^<stdin>:1: a JSON array; expected JSON lines"):
        list(iter_rows(["-"], stdin=stdin))
    assert stdin.tell() < len(array) // 2
    long_row = b'{"id": 1, "items": ["' + b"x" * 3_000_000 + b'"]}\n{"id": 2}'
    rows = list(iter_rows(["-"], stdin=io.BufferedReader(io.BytesIO(long_row))))
    assert [(r.data["id"], len(r.data.get("items", [""])[0]), r.where) for r in rows] == [
        (1, 3_000_000, "<stdin>:1"),
        (2, 0, "<stdin>:2"),
    ]


def test_pretty_printed_json_objects_are_named(tmp_path):
    """Objects over several lines (`jq '.[]'` without -c, `json.dump(row, f, indent=2)`) were a
    'malformed JSON' line each, and with --skip-bad-rows as many bad rows written, exit 0."""
    p = tmp_path / "a.json"
    p.write_text(json.dumps({"id": 1, "query": "q", "items": ["a"]}, indent=2) + "\n")
    with pytest.raises(InputError, match=rf"^{p}:1: a JSON object over several lines; .*jq -c \.\)"):
        list(iter_rows([str(p)]))
    stdin = io.BytesIO(b'\n{ \n  "id": 1\n}\n')
    with pytest.raises(InputError, match=r"^<stdin>:2: a JSON object over several lines"):
        list(iter_rows(["-"], stdin=stdin))


def test_nan_literal_and_unterminated_string(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"id": NaN}\n{"id": "x\n')
    errors = [r.error for r in iter_rows([str(p)])]
    assert errors == [
        "malformed JSON: NaN is not valid JSON (write null or a string)",
        "malformed JSON: Unterminated string starting at column 8",
    ]


def test_pipes_are_read_as_jsonl_and_never_counted(tmp_path, monkeypatch):
    import threading

    fifo = tmp_path / "rows"  # no suffix, like <(zcat x.gz) = /dev/fd/63
    os.mkfifo(fifo)
    assert resolve_inputs([str(fifo), "/dev/stdin"]) == [str(fifo), "-"]
    counted = []
    t = threading.Thread(target=lambda: counted.append(count_rows([str(fifo)])), daemon=True)
    t.start()
    t.join(5)
    assert counted == [None]  # it did not open (and drain) the FIFO
    os.mkfifo(tmp_path / "p.parquet")
    with pytest.raises(UsageError, match="Parquet input must be a regular file"):
        resolve_inputs([str(tmp_path / "p.parquet")])
    monkeypatch.setattr(sys, "stdin", None)  # started with `<&-`
    with pytest.raises(UsageError, match=r"cannot read - \(stdin\): it is closed"):
        list(iter_rows(["-"]))


def test_the_output_columns_a_run_writes_are_the_ones_copied_fields_may_not_take():
    """`config.check_copied_fields` refuses an --id-field or --labels-field named as a column of
    the output's own (`io.OUTPUT_COLUMNS`): every column `window_table` writes must be listed."""
    import re
    from pathlib import Path

    from scorecli.io import OUTPUT_COLUMNS
    from scorecli.io import columns as columns_module

    written = set(re.findall(r'columns\["(\w+)"\]', Path(columns_module.__file__).read_text()))
    assert written == set(OUTPUT_COLUMNS)


# a tree of files, and globs over it, that the store's and the local output check's matchers must
# answer as a local glob reads (`glob.glob`, less Spark's `_` names): hidden names, `*` within one
# name, `**` at either end and inside
GLOB_TREE = [
    "rows/a.jsonl",
    "rows/.hidden.jsonl",
    "rows/b.parquet",
    "rows/2026/x.jsonl",
    "rows/2026/11/y.jsonl",
    "rows/2026/11/z.parquet",
    "rows/a/x.jsonl",
    "rows/.cache/w.jsonl",
    "rows/2026/.tmp/v.jsonl",
    "rows/_SUCCESS",
    "rows/_temporary/0/u.jsonl",
    "rows/2026/_x.jsonl",
    "other/rows/a.jsonl",
]
GLOBS = [
    "rows/*.jsonl",
    "rows/*/*.jsonl",
    "rows/*/*",
    "rows/**/*.jsonl",
    "rows/**/2026/*.jsonl",
    "rows/**/11/*",
    "rows/**",
    "rows/20?6/**/*.parquet",
    "*/rows/*.jsonl",
    "rows/.*",
    "rows/*/.*/*.jsonl",
    "rows/[ab].*",
    "rows/_*",
    "rows/**/_*",
    "rows/_temporary/**/*.jsonl",
]


def _glob_tree(root) -> None:
    for key in GLOB_TREE:
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_text("{}\n")


def _glob_lists(root, pattern: str) -> set[str]:
    """The files of `GLOB_TREE` under `root` that a local glob reads for `pattern`."""
    from scorecli.io.sources import LocalSource

    try:
        return {os.path.relpath(p, root) for p in LocalSource().expand(str(root / pattern), lambda _: True, "")}
    except UsageError:
        return set()


def test_a_store_glob_lists_the_objects_glob_lists_of_the_same_local_tree(tmp_path):
    """A store glob matches as a local one does (docs/object-stores.md: "as for local paths"): a `*`
    within one folder's name, `**` any depth, hidden names only by a dot. `rows/*/*.jsonl` read
    `rows/2026/11/x.jsonl` too, since fnmatch's `*` crossed folders."""
    from scorecli.io.sources import _globbed

    _glob_tree(tmp_path)
    for pattern in GLOBS:
        listed = {k for k in GLOB_TREE if _globbed(f"bucket/{k}", f"bucket/{pattern}")}
        assert listed == _glob_lists(tmp_path, pattern), pattern


def test_a_local_output_check_lists_what_glob_lists(tmp_path):
    """`LocalSource.lists` (is an output one an input glob would read?) answers as `glob.glob` does
    for each file of a tree, through the matcher store globs use: a `**` pattern used to be judged by
    its last name alone, refusing `rows/a/x.jsonl` for `rows/**/2026/*.jsonl`. A folder reached
    through a symbolic link is listed under either spelling."""
    from scorecli.io.sources import LocalSource

    _glob_tree(tmp_path)
    source = LocalSource()
    for pattern in GLOBS:
        listed = {k for k in GLOB_TREE if source.lists(str(tmp_path / pattern), str(tmp_path / k))}
        assert listed == _glob_lists(tmp_path, pattern), pattern
    (tmp_path / "link").symlink_to(tmp_path / "rows" / "2026")
    assert source.lists(str(tmp_path / "rows" / "*" / "*.jsonl"), str(tmp_path / "link" / "new.jsonl"))
    assert source.lists(str(tmp_path / "link" / "*.jsonl"), str(tmp_path / "rows" / "2026" / "new.jsonl"))
    assert not source.lists(str(tmp_path / "link" / "*.jsonl"), str(tmp_path / "rows" / "new.jsonl"))
