"""CSV and TSV inputs (issue 41): pyarrow's reader behind the one `InputFormat` protocol; items as
a cell holding a JSON array, or one record per (query, item) grouped with `--group-by`; bad records
named by FILE:LINE as JSON lines' are; the output equals the JSON lines input's."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from scorecli.core.rows import Fields, Row, parse_row
from scorecli.errors import InputError
from scorecli.io.groups import group_rows, grouping
from scorecli.io.ids import IdCheck
from scorecli.io.readers import count_rows, iter_rows
from tests.test_cli import Case, jsonl, run_cli, write

# line 1: header; record 2 spans lines 3-4; line 5 is blank; line 6 has a cell too many; line 7
# a malformed JSON array; line 8 bytes that are not UTF-8; line 9 a good record after them
LAYOUT_A = (
    b'id,query,items\n1,a fox,"[""the quick fox"", ""a lazy dog""]"\n2,"two\nlines","[""x""]"\n\n'
    b'3,q,y,extra\n4,q,"[""a"", ]"\n5,caf\xe9,"[""z""]"\n6,last,"[""the end""]"\n'
)


def test_csv_rows_and_their_lines(tmp_path):
    path = write(tmp_path / "a.csv", LAYOUT_A)
    rows = list(iter_rows([path]))
    where = [r.where.rsplit(":", 1)[1] for r in rows]
    assert where == ["2", "3", "6", "7", "8", "9"]
    assert parse_row(rows[0].data, "a", Fields()) == Row("a fox", ["the quick fox", "a lazy dog"], None, "1")
    assert parse_row(rows[1].data, "a", Fields()) == Row("two\nlines", ["x"], None, "2")
    assert rows[2].error == "expected 3 cells (the header's), got 4"
    with pytest.raises(InputError, match=r"^a.csv:7: field 'items': malformed JSON array: "):
        parse_row(rows[3].data, "a.csv:7", Fields())
    assert rows[4].error == "field 'query': invalid UTF-8 (byte offset 3)" and rows[4].data["id"] == "5"  # written
    assert parse_row(rows[5].data, "a", Fields()).items == ["the end"] and not rows[5].typed
    assert count_rows([path]) == 6
    assert [r.where for r in iter_rows([path], skip=4)] == [r.where for r in rows[4:]]  # a resumed run
    tsv = write(tmp_path / "a.tsv", b'id\tquery\titems\n1\ta fox\t"[""the quick fox"", ""a lazy dog""]"\n')
    zipped = write(tmp_path / "a.csv.gz", gzip.compress(LAYOUT_A))
    assert [(r.data, r.where[-2:]) for r in iter_rows([zipped])] == [(r.data, r.where[-2:]) for r in rows]
    assert [r.data for r in iter_rows([tsv])] == [rows[0].data]


def test_a_header_without_records_is_no_rows_and_a_header_naming_a_column_twice_is_refused(tmp_path):
    """An export with no rows (a header line only) is an input of zero rows, as an empty JSON lines
    file is: one empty shard used to stop a whole run. A column named twice would hide one of them."""
    for name, data in [
        ("h.csv", b"id,query,items\n"),
        ("h.tsv", b"id\tquery\titems\r\n"),
        ("n.csv", b"id,query,items"),
    ]:
        path = write(tmp_path / name, data)
        assert list(iter_rows([path])) == [] and count_rows([path]) == 0
    zipped = write(tmp_path / "h.csv.gz", gzip.compress(b"id,query,items\n"))
    assert list(iter_rows([zipped])) == []
    twice = write(tmp_path / "d.csv", b'id,query,items,query\n1,a,"[""x""]",b\n')
    with pytest.raises(InputError, match=r"d.csv:1: the header names the column 'query' twice"):
        list(iter_rows([twice]))


def test_blank_lines_before_the_header_are_passed_over(tmp_path):
    """A blank first line used to be read as an empty header: the file's records then made an input
    of zero rows and the run succeeded having scored none of them. Blank lines before the header are
    skipped, as blank lines after it are, and records are named by their own lines."""
    path = write(tmp_path / "lead.csv", b'\xef\xbb\xbf\r\n\nid,query,items\n1,q,"[""a""]"\n2,r,x,y\n')
    rows = list(iter_rows([path]))
    assert [(r.data, r.where, r.error) for r in rows] == [
        ({"id": "1", "query": "q", "items": '["a"]'}, f"{path}:4", None),
        (None, f"{path}:5", "expected 3 cells (the header's), got 4"),
    ]
    assert parse_row(rows[0].data, rows[0].where, Fields()).items == ["a"]
    assert count_rows([path]) == 2
    twice = write(tmp_path / "twice.tsv", b"\n\t\nid\tid\n")
    with pytest.raises(InputError, match=r"twice.tsv:3: the header names the column 'id' twice"):
        list(iter_rows([twice]))


def test_a_record_longer_than_a_block_of_the_reader_is_read(tmp_path):
    """pyarrow parses 1 MiB at a time: a record of a few long documents (2.4 MB) stopped the run,
    `cannot read: straddling object straddles two block boundaries (try to increase block size?)`,
    where pandas and Python's `csv` read the file. Such a record is read, first in a file or after
    records given already, and lines and counts stay each record's."""
    long_items = json.dumps(["word " * 120_000] * 4).replace('"', '""').encode()
    small = b"".join(b'%d,q,"[""a""]"\n' % i for i in range(60_000))  # past the first block
    data = b"id,query,items\n" + small + b'L,"two\nlines","' + long_items + b'"\nB,x,y,z\nE,last,"[""b""]"\n'
    path = write(tmp_path / "long.csv", data)
    rows = list(iter_rows([path]))
    assert len(rows) == 60_003 and [r.data["id"] for r in rows[:3]] == ["0", "1", "2"]
    assert rows[60_000].where == f"{path}:60002" and rows[60_000].data["query"] == "two\nlines"
    assert parse_row(rows[60_000].data, "a", Fields()).items == ["word " * 120_000] * 4
    assert (rows[60_001].where, rows[60_001].error) == (f"{path}:60004", "expected 3 cells (the header's), got 4")
    assert (rows[60_002].where, rows[60_002].data["id"]) == (f"{path}:60005", "E")
    assert count_rows([path]) == 60_003
    first = write(tmp_path / "first.csv.gz", gzip.compress(b'id,query,items\n1,q,"' + long_items + b'"\n2,r,[]\n'))
    assert [(r.where[-1], r.data["id"]) for r in iter_rows([first])] == [("2", "1"), ("3", "2")]


def test_carriage_returns_alone_are_one_clear_error(tmp_path):
    """A CSV export with classic Mac OS line endings failed with Python's 'new-line character seen
    in unquoted field - do you need to open the file in universal-newline mode?'."""
    for name, data in [
        ("m.csv", b'id,query,items\r1,q,"[""a""]"\r'),
        ("m.tsv", b'"id"\t"query"\t"items"\r"1"\t"q"\t"[""a""]"\r'),
    ]:
        path = write(tmp_path / name, data)
        with pytest.raises(InputError, match=rf"^{path}:1: lines end in a carriage return alone \(classic Mac OS"):
            list(iter_rows([path]))


def test_utf16_text_is_one_clear_error(tmp_path):
    """Excel's "Unicode Text" export (UTF-16 with a byte-order mark, tab-separated) failed with
    'cannot read the header line: 'utf-8' codec can't decode byte 0xff': one line now says what the
    file is and how to convert it."""
    path = write(tmp_path / "u.tsv", "id\tquery\titems\n1\tq\t[]\n".encode("utf-16"))
    with pytest.raises(InputError, match=rf"^{path}:1: the file is UTF-16 text .*iconv -f UTF-16"):
        list(iter_rows([path]))


def test_records_grouped_into_rows(tmp_path):
    path = write(
        tmp_path / "pairs.csv",
        b"qid,query,items,labels\n"
        b"a,fox,the quick fox,1\na,fox,a lazy dog,0\n"  # one row of two items
        b"b,dog,a dog,2\nb,cat,a cat,0\n"  # another query within the group: a bad row
        b"c,x,y,0\na,fox,again,1\n"  # a's records after another group's: a bad row
        b",no id,z,0\n",
    )
    rows = list(group_rows(iter_rows([path]), grouping("qid", "query", "items", "labels")))
    assert rows[0].data == {"qid": "a", "query": "fox", "items": ["the quick fox", "a lazy dog"], "labels": ["1", "0"]}
    assert rows[0].where.endswith("pairs.csv:2")
    assert rows[1].where.endswith(":4") and "field 'query': " in rows[1].error and "pairs.csv:5" in rows[1].error
    assert rows[2].data["items"] == ["y"]
    assert (
        rows[3].where.endswith(":7")
        and "began a group at" in rows[3].error
        and "sort the input by qid" in rows[3].error
    )
    assert rows[4].where.endswith(":8") and rows[4].error == "missing field 'qid': --group-by qid needs it in every row"
    assert len(rows) == 5


def test_a_bad_group_keeps_its_id(tmp_path):
    """Under --skip-bad-rows a bad group (records apart, another query, no group value) was written
    with a null id, where a bad JSON row keeps its id: a job could not tell which group failed. Its
    first record's id is the bad row's, checked as every id is (a bad id is null, its error kept)."""
    path = write(
        tmp_path / "pairs.jsonl",
        jsonl(
            [
                {"id": 1, "g": "a", "query": "q", "items": "x"},
                {"id": 2, "g": "b", "query": "q", "items": "y"},
                {"id": 3, "g": "a", "query": "q", "items": "z"},  # a's records apart
                {"id": 4, "g": "c", "query": "q1", "items": "z"},
                {"id": 5, "g": "c", "query": "q2", "items": "z"},  # another query
                {"id": 6, "query": "q", "items": "z"},  # no group value
                {"id": [7], "g": "d", "query": "q1", "items": "z"},
                {"id": 8, "g": "d", "query": "q2", "items": "z"},  # a bad group with a bad id
            ]
        ),
    )
    rows = list(IdCheck("id")(group_rows(iter_rows([path]), grouping("g", "query", "items", "labels"))))
    assert [(r.data or {}).get("id") for r in rows] == [1, 2, 3, 4, 6, None]
    assert [r.error is None for r in rows] == [True, True, False, False, False, False]
    assert "field 'query'" in rows[5].error and rows[5].where.endswith(":7")


def test_a_field_only_later_records_of_a_group_hold_is_not_dropped(tmp_path):
    """A group's labels are its records' values in order, whichever record holds them first: a
    group whose first record has none became an unlabelled row, silently left out of the metrics."""
    path = write(
        tmp_path / "pairs.jsonl",
        jsonl(
            [
                {"qid": "q1", "query": "fox", "items": "a"},
                {"qid": "q1", "query": "fox", "items": "b", "labels": 1},
                {"qid": "q2", "query": "dog", "items": "c", "labels": 1},
                {"qid": "q2", "query": "dog", "items": "d"},
                {"qid": "q3", "query": "cat", "items": "e"},
            ]
        ),
    )
    rows = list(group_rows(iter_rows([path]), grouping("qid", "query", "items", "labels")))
    assert [r.data["labels"] for r in rows[:2]] == [[None, 1], [1, None]]  # both a bad row when scored
    assert "labels" not in rows[2].data and "item_ids" not in rows[0].data


def scores_of(path) -> list:
    table = pq.read_table(path)
    return [(r.get("id"), r.get("qid"), r["score"], r.get("labels")) for r in table.to_pylist()]


@pytest.mark.e2e
def test_csv_and_grouped_csv_score_as_json_lines_do(tmp_path, qwen3_seq_cls):
    """The same rows as JSON lines, as CSV (items in a JSON array cell), and as grouped pairs give
    the same output; a bad record stops the run in one line naming FILE:LINE."""
    rows = [
        {"id": "1", "query": "a fox", "items": ["the quick fox", "a lazy dog", "yes"], "labels": [1, 0, 0]},
        {"id": "2", "query": "two words", "items": ["relevant passage"], "labels": [0]},
    ]
    as_jsonl = write(tmp_path / "rows.jsonl", jsonl(rows))
    cells = "".join(
        f'{r["id"]},{r["query"]},"{json.dumps(r["items"]).replace(chr(34), 2 * chr(34))}","{r["labels"]}"\n'
        for r in rows
    )
    as_csv = write(tmp_path / "rows.csv", ("id,query,items,labels\n" + cells).encode())
    pairs = "".join(f"{r['id']},{r['query']},{item},{g}\n" for r in rows for item, g in zip(r["items"], r["labels"]))
    as_pairs = write(tmp_path / "pairs.tsv", ("id\tquery\titems\tlabels\n" + pairs.replace(",", "\t")).encode())
    model = ["--model", qwen3_seq_cls]
    outs = [tmp_path / f"{name}.parquet" for name in ("jsonl", "csv", "pairs")]
    for inp, out, extra in zip((as_jsonl, as_csv, as_pairs), outs, ([], [], ["--group-by", "id"])):
        result = run_cli(Case(["score", inp, "--out", str(out), *model, *extra]))
        assert result.rc == 0, result.stderr
        assert "over 2 labelled rows" in result.lines()[-1], result.stderr
    assert scores_of(outs[0]) == scores_of(outs[1]) == scores_of(outs[2])
    bad = write(tmp_path / "bad.csv", b'id,query,items\n1,q,"[""a""]"\n2,q,"[""b""]",extra\n')
    result = run_cli(Case(["score", bad, "--out", str(tmp_path / "bad.parquet"), *model, "--window-rows", "1"]))
    assert result.rc == 2 and len(result.lines()) == 1, result.stderr
    assert result.lines()[0] == f"error: {bad}:3: expected 3 cells (the header's), got 4"
    assert not (tmp_path / "bad.parquet").exists()


@pytest.mark.e2e
def test_text_cells_that_look_like_arrays_stay_text(tmp_path, qwen3_seq_cls):
    """A query `[citation needed]` was read as a JSON array: a malformed one stopped the run (exit
    2), `[1, 2]` was a list where a string must be, and so were an id `[1]` and a grouped record's
    item `[see also]`. Only a field that holds a list (items, token ids, labels) reads the array."""
    rows = [
        {"id": "[1]", "query": "[citation needed]", "items": ["[a] first", "plain"], "labels": [1, 0]},
        {"id": "2", "query": "[1, 2]", "items": ["[see also]"], "labels": [0]},
    ]
    as_jsonl = write(tmp_path / "rows.jsonl", jsonl(rows))
    quoted = [[r["id"], r["query"], json.dumps(r["items"]), json.dumps(r["labels"])] for r in rows]
    cells = "".join(",".join('"' + c.replace('"', '""') + '"' for c in row) + "\n" for row in quoted)
    as_csv = write(tmp_path / "rows.csv", ("id,query,items,labels\n" + cells).encode())
    pairs = "".join(f"{r['id']}\t{r['query']}\t{item}\t{g}\n" for r in rows for item, g in zip(r["items"], r["labels"]))
    as_pairs = write(tmp_path / "pairs.tsv", ("id\tquery\titems\tlabels\n" + pairs).encode())
    outs = [tmp_path / f"{name}.parquet" for name in ("jsonl", "csv", "pairs")]
    for inp, out, extra in zip((as_jsonl, as_csv, as_pairs), outs, ([], [], ["--group-by", "id"])):
        result = run_cli(Case(["score", inp, "--out", str(out), "--model", qwen3_seq_cls, *extra]))
        assert result.rc == 0, result.stderr
    assert scores_of(outs[0]) == scores_of(outs[1]) == scores_of(outs[2])
    assert [r[0] for r in scores_of(outs[1])] == ["[1]", "2"]
    # `eval --labels` reads a CSV row's items array to check the scores are of that row
    edited = write(
        tmp_path / "edited.csv", Path(as_csv).read_bytes().replace(b'"[""[see also]""]"', b'"[""a"", ""b""]"')
    )
    result = run_cli(Case(["eval", str(outs[1]), "--labels", edited]))
    assert result.rc == 2 and "edited.csv:3: 2 items but " in result.stderr, result.stderr


def test_csv_token_id_cells_are_lists_and_a_bad_array_names_its_field(tmp_path):
    path = write(tmp_path / "ids.csv", b'query_ids,item_ids,labels\n"[1, 2]","[[3], [4, 5]]",[1]\n[1],[[3],[1]\n')
    first, second = list(iter_rows([path]))
    row = parse_row(first.data, first.where, Fields())
    assert (row.query, row.items, row.labels.tolist()) == ([1, 2], [[3], [4, 5]], [0.0, 1.0])
    with pytest.raises(InputError, match=r"ids.csv:3: field 'item_ids': malformed JSON array: "):
        parse_row(second.data, second.where, Fields())
    grouped = write(tmp_path / "g.csv", b'g,query_ids,item_ids\na,[1],[3]\na,[1],"[4, 5]"\nb,[1],"[6,]"\n')
    rows = list(group_rows(iter_rows([grouped]), grouping("g", "query", "items", "labels")))
    assert parse_row(rows[0].data, rows[0].where, Fields()).items == [[3], [4, 5]]
    with pytest.raises(InputError, match=r"g.csv:4: field 'item_ids'\[0\]: malformed JSON array: "):
        parse_row(rows[1].data, rows[1].where, Fields())


@pytest.mark.e2e
@pytest.mark.parametrize("flag", [["--group-by", "id", "--engine", "ray"]])
def test_group_by_needs_the_local_engine(tmp_path, flag):
    inp = write(tmp_path / "rows.csv", b"id,query,items\n1,q,a\n")
    result = run_cli(Case(["score", inp, "--out", str(tmp_path / "o.parquet"), *flag]))
    assert result.rc == 2 and "--group-by needs --engine local" in result.stderr, result.stderr
