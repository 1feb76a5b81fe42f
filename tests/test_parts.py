"""The part store of long runs (docs/long-jobs.md), in-process: durable parts, the journal, recovery
after a kill at any point, fingerprint checks, and reading input from where a job stopped."""

from __future__ import annotations

import gzip
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scorecli.config import ScoreConfig
from scorecli.engine.job import fingerprint
from scorecli.errors import UsageError
from scorecli.io import parts
from scorecli.io.parts import JOB, JOURNAL, FingerprintMismatch, open_store
from scorecli.io.readers import iter_rows

FP = {"model": "m", "--template": "plain"}


def table(first: int, n: int) -> pa.Table:
    """Rows as scorecli writes them: its version in the metadata (what makes a part its own)."""
    data = {"id": list(range(first, first + n)), "score": [[float(i)] for i in range(first, first + n)]}
    return pa.table(data).replace_schema_metadata({"scorecli_version": "test"})


def store_with(folder, sizes, fmt="parquet"):
    store, _ = open_store(str(folder), FP, fmt, resume=False)
    first = 0
    for n in sizes:
        store.add(table(first, n))
        first += n
    return store


def test_parts_are_journaled_in_order(tmp_path):
    store = store_with(tmp_path / "p", [3, 2, 4])
    assert [p.file for p in store.parts] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert [(p.first_row, p.rows) for p in store.parts] == [(0, 3), (3, 2), (5, 4)]
    assert pa.concat_tables(store.tables()).equals(table(0, 9))
    lines = (tmp_path / "p" / JOURNAL).read_text().splitlines()
    assert [json.loads(line)["file"] for line in lines] == [
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
    ]


def test_resume_continues_after_the_journaled_parts(tmp_path):
    store_with(tmp_path / "p", [3, 2])
    store, note = open_store(str(tmp_path / "p"), FP, "parquet", resume=True)
    assert note is None and store.rows_done == 5
    store.add(table(5, 1))
    assert pa.concat_tables(store.tables()).equals(table(0, 6))


def test_many_parts_are_counted_once_each(tmp_path, monkeypatch):
    """A job of tens of thousands of parts: recovering its journal and adding a part read each
    part's rows a few times, not once per part before it (30,000 parts: 10 s to resume before)."""
    n = 2000
    folder = tmp_path / "p"
    folder.mkdir()
    lines = []
    for i in range(n):
        (folder / f"part-{i:05d}.parquet").write_bytes(b"x")
        lines.append(json.dumps({"file": f"part-{i:05d}.parquet", "first_row": 3 * i, "rows": 3, "bytes": 1}))
    (folder / JOURNAL).write_text("\n".join(lines) + "\n")
    reads = [0]

    class Counted(parts.Part):
        @property
        def rows(self):
            reads[0] += 1
            return self._rows

        @rows.setter
        def rows(self, value):
            object.__setattr__(self, "_rows", value)

    monkeypatch.setattr(parts, "Part", Counted)
    recovered = parts._recover(parts.folder_at(str(folder)), "parquet")
    store = parts.PartStore(str(folder), "parquet", list(recovered))
    for _ in range(n):
        store.parts.append(Counted("x", 0, 3, 1))  # as `record` adds them
        assert store.rows_done % 3 == 0
    assert len(recovered) == n and store.rows_done == 6 * n
    assert reads[0] < 10 * n


@pytest.mark.parametrize(
    "damage", ["torn_line", "unjournaled_part", "temp_part", "missing_part", "short_part", "swapped_parts"]
)
def test_recovery_keeps_only_intact_journaled_parts(tmp_path, damage):
    folder = tmp_path / "p"
    store_with(folder, [3, 2, 4])
    journal = folder / JOURNAL
    lines = journal.read_text().splitlines(keepends=True)
    keep = 3
    if damage == "torn_line":  # killed while appending the third line
        journal.write_text("".join(lines[:2]) + lines[2][:10])
        keep = 2
    elif damage == "unjournaled_part":  # killed after the rename, before the journal line
        journal.write_text("".join(lines[:2]))
        keep = 2
    elif damage == "temp_part":  # killed while writing the fourth part
        (folder / ".part-00003.parquet.tmp").write_bytes(b"PAR1 half")
    elif damage == "missing_part":
        os.unlink(folder / "part-00001.parquet")
        keep = 1
    elif damage == "swapped_parts":  # another part of as many rows under its name (the footer alone cannot tell)
        other = pa.table({"id": ["row-1003", "row-1004"], "score": [[3.0], [4.0]]})
        pq.write_table(other.replace_schema_metadata({"scorecli_version": "test"}), folder / "part-00001.parquet")
        keep = 1
    else:
        with open(folder / "part-00002.parquet", "r+b") as f:
            f.truncate(10)
        keep = 2
    store, _ = open_store(str(folder), FP, "parquet", resume=True)
    assert len(store.parts) == keep
    assert store.rows_done == [3, 5, 9][keep - 1]
    assert sorted(n for n in os.listdir(folder) if n.startswith(("part-", ".part-"))) == [
        f"part-{k:05d}.parquet" for k in range(keep)
    ]
    store.add(table(store.rows_done, 1))  # the next part follows the intact ones
    assert pa.concat_tables(store.tables()).equals(table(0, store.rows_done))
    reopened, _ = open_store(str(folder), FP, "parquet", resume=True)
    assert reopened.parts == store.parts


@pytest.mark.parametrize("killed", ["before", "after"])
def test_a_part_rewritten_under_its_final_schema_is_kept_either_side_of_a_kill(tmp_path, killed):
    """`rewrite` journals the part's new size before it replaces the file: a kill before or after
    the replacement leaves a part that the journal accepts, and nothing is scored again."""
    folder = tmp_path / "p"
    store = store_with(folder, [3, 2])
    wider = table(3, 2).append_column("note", pa.array(["a", "b"]))
    if killed == "before":
        store.dir.write = lambda name, fill: 0  # the journal line is written, the replacement is not
    store.rewrite("part-00001.parquet", wider)
    resumed, _ = open_store(str(folder), FP, "parquet", resume=True)
    assert resumed.rows_done == 5
    assert resumed.table("part-00001.parquet").column_names == (
        ["id", "score", "note"] if killed == "after" else ["id", "score"]
    )
    assert len((folder / JOURNAL).read_text().splitlines()) == 2  # recovery leaves one line a part


def test_a_kept_part_damaged_in_place_stops_a_resume_in_one_line(tmp_path):
    """Bytes of a kept part changed after it was written (its size the same, which the journal
    cannot tell): the resumed run is refused with the part named and the way on (it failed with a
    raw pyarrow error whose advice, --resume, failed the same way again)."""
    folder = tmp_path / "p"
    store_with(folder, [3, 2, 4])
    path = folder / "part-00001.parquet"
    data = bytearray(path.read_bytes())
    data[4:40] = b"X" * 36  # the first page's header, past the magic bytes
    path.write_bytes(bytes(data))
    store, _ = open_store(str(folder), FP, "parquet", resume=True)
    assert len(store.parts) == 3  # same size: kept, as the journal says
    with pytest.raises(FingerprintMismatch, match="kept part .*part-00001.parquet cannot be read .*without --resume"):
        list(store.tables())


def test_fingerprint_mismatch_names_what_differs_and_changes_nothing(tmp_path):
    folder = tmp_path / "p"
    store_with(folder, [3])
    before = {n: (folder / n).read_bytes() for n in os.listdir(folder)}
    with pytest.raises(FingerprintMismatch, match=r"different --template \(\"plain\" then, \"x\" now\)"):
        open_store(str(folder), {**FP, "--template": "x"}, "parquet", resume=True)
    assert {n: (folder / n).read_bytes() for n in os.listdir(folder)} == before


def test_without_resume_a_leftover_folder_is_replaced_with_a_note(tmp_path):
    folder = tmp_path / "p"
    store_with(folder, [3])
    before = sorted(os.listdir(folder))
    store, note = open_store(str(folder), {**FP, "--template": "x"}, "parquet", resume=False)
    assert store.rows_done == 0 and "replacing" in note and "--resume" in note
    assert sorted(os.listdir(folder)) == before  # nothing changes until the first part
    store.discard()  # a run that fails before its first part leaves the earlier run's files
    assert sorted(os.listdir(folder)) == before
    store.add(table(0, 1))
    assert sorted(os.listdir(folder)) == [JOB, JOURNAL, "part-00000.parquet"]
    assert json.loads((folder / JOB).read_text())["fingerprint"]["--template"] == "x"


def test_a_leftover_unfinished_dataset_is_replaced_with_a_note_a_finished_one_silently(tmp_path):
    folder = tmp_path / "d"
    store, _ = open_store(str(folder), FP, "parquet", resume=False, dataset=True)
    store.add(table(0, 2))  # an unfinished dataset: its job file and journal are there
    _, note = open_store(str(folder), {**FP, "--template": "x"}, "parquet", resume=False, dataset=True)
    assert note is not None and "replacing" in note and "--resume" in note
    store.mark_finished()
    store.drop_bookkeeping()
    _, note = open_store(str(folder), {**FP, "--template": "x"}, "parquet", resume=False, dataset=True)
    assert note is None  # a finished output is replaced as a file output is: no note


def test_partial_that_is_a_file_or_a_symlink_is_refused_before_any_work(tmp_path):
    from scorecli.engine.checkpoint import Checkpoint
    from scorecli.io.output import resolve_output

    data = tmp_path / "in.jsonl"
    data.write_text("{}\n")
    (tmp_path / "m").mkdir()
    for name, make in (("a", lambda p: p.write_bytes(b"mine")), ("b", lambda p: p.symlink_to(tmp_path / "m"))):
        make(tmp_path / f"{name}.parquet.partial")
        target = resolve_output(str(tmp_path / f"{name}.parquet"), [str(data)])
        with pytest.raises(UsageError, match="a file|a symlink") as err:
            Checkpoint.open(target, ScoreConfig(model=str(tmp_path / "m")), [str(data)], resume=False)
        assert f"{name}.parquet.partial" in str(err.value) and "\n" not in str(err.value)
    assert (tmp_path / "a.parquet.partial").read_bytes() == b"mine" and os.listdir(tmp_path / "m") == []


@pytest.mark.parametrize("when", ["removing the parts", "syncing the rename"])
def test_interrupt_after_the_output_is_in_place_says_so(tmp_path, monkeypatch, when):
    """SIGINT/SIGTERM after the output was renamed into place (while its directory is fsync'ed,
    or the parts are removed): the message says the output is whole, not 'no output written'."""
    from scorecli.engine.checkpoint import Checkpoint, Interrupted
    from scorecli.io import writers
    from scorecli.io.output import resolve_output
    from scorecli.io.parts import PartStore

    data = tmp_path / "in.jsonl"
    data.write_text("{}\n")
    (tmp_path / "m").mkdir()
    target = resolve_output(str(tmp_path / "s.parquet"), [str(data)])
    cp = Checkpoint.open(target, ScoreConfig(model=str(tmp_path / "m")), [str(data)], resume=False)

    def interrupted(self):
        raise KeyboardInterrupt

    if when == "removing the parts":
        monkeypatch.setattr(PartStore, "remove", interrupted)
    else:
        monkeypatch.setattr(writers, "fsync_dir", lambda path: interrupted(path))
    with pytest.raises(
        Interrupted, match="interrupted after .*s.parquet was written whole; .*s.parquet.partial/ is left"
    ):
        with cp.keeping():
            cp.write(table(0, 2).replace_schema_metadata({"k": "v"}))
            cp.finish({"k": "v"})
    assert pq.read_table(tmp_path / "s.parquet").num_rows == 2


def test_resume_without_a_folder_starts_the_job(tmp_path):
    store, note = open_store(str(tmp_path / "new"), FP, "parquet", resume=True)
    assert store.rows_done == 0 and note is None and not (tmp_path / "new").exists()


@pytest.mark.parametrize("dataset", [True, False], ids=["dataset", "partial"])
@pytest.mark.parametrize("name", ["theirs.parquet", "part-00000.parquet", "part-00001.jsonl"])
def test_folder_with_files_scorecli_did_not_write_is_refused(tmp_path, name, dataset):
    """Another writer's file, even one named as scorecli names its parts (without its metadata)."""
    (tmp_path / "d").mkdir()
    theirs = pa.table({"id": [1]})
    pq.write_table(theirs, tmp_path / "d" / name)
    with pytest.raises(UsageError, match=f"holds files scorecli did not write \\({name}\\)"):
        open_store(str(tmp_path / "d"), FP, "parquet", resume=False, dataset=dataset)
    assert os.listdir(tmp_path / "d") == [name] and pq.read_table(tmp_path / "d" / name).equals(theirs)


@pytest.mark.parametrize("dataset", [True, False], ids=["dataset", "partial"])
def test_a_success_marker_with_content_is_not_ours(tmp_path, dataset):
    """scorecli's `_SUCCESS` is empty: one holding something is another writer's, kept and refused;
    an empty one (a finished dataset's) is replaced as before."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "_SUCCESS").write_text("user data")
    with pytest.raises(UsageError, match="holds files scorecli did not write \\(_SUCCESS\\)"):
        open_store(str(tmp_path / "d"), FP, "parquet", resume=False, dataset=dataset)
    assert (tmp_path / "d" / "_SUCCESS").read_text() == "user data"
    (tmp_path / "d" / "_SUCCESS").write_text("")
    open_store(str(tmp_path / "d"), FP, "parquet", resume=False, dataset=dataset)


def test_finished_dataset_has_parts_and_success_only(tmp_path):
    store = store_with(tmp_path / "d", [2, 2])
    store.mark_finished()
    store.drop_bookkeeping()
    assert sorted(os.listdir(tmp_path / "d")) == ["_SUCCESS", "part-00000.parquet", "part-00001.parquet"]
    import pyarrow.dataset as ds

    assert ds.dataset(str(tmp_path / "d")).to_table().equals(table(0, 4))


@pytest.mark.parametrize("out", ["ds/", "o.parquet"])
def test_a_finish_the_store_fails_keeps_the_job_until_the_output_is_in_place(tmp_path, out):
    """A dataset's bookkeeping went before `_SUCCESS` was written: a store that failed on the marker
    (or a kill there) left parts no journal listed, and --resume scored the whole job again. Once
    the output is in place, a folder the store cannot tidy is a warning: the run succeeded (it was
    exit 1, "rows kept", with the output whole)."""
    from scorecli.engine.checkpoint import Checkpoint
    from scorecli.io.output import resolve_output

    (tmp_path / "m").mkdir()
    data = tmp_path / "in.jsonl"
    data.write_text("{}\n")
    target = resolve_output(f"{tmp_path}/{out}")
    cfg = ScoreConfig(model=str(tmp_path / "m"))
    meta = {"scorecli_version": "x"}

    def failing(name, *args):
        raise OSError(f"the store stopped answering ({name})")

    cp = Checkpoint.open(target, cfg, [str(data)], resume=False)
    cp.write(table(0, 2).replace_schema_metadata(meta))
    cp.write(table(2, 2).replace_schema_metadata(meta))
    if out == "ds/":
        write = cp.store.dir.write
        cp.store.dir.write = lambda name, fill: failing(name) if name == "_SUCCESS" else write(name, fill)
        with pytest.raises(OSError, match="_SUCCESS"):
            cp.finish(meta)
        assert not cp.written
    cp = Checkpoint.open(target, cfg, [str(data)], resume=True)
    assert cp.rows_done == 4  # every part kept
    if out == "ds/":
        cp.store.dir.delete = lambda name: failing(name)
    else:
        cp.store.dir.remove = lambda: failing("o.parquet.partial")
    with pytest.warns(RuntimeWarning, match="is written whole, but .*(bookkeeping|o.parquet.partial/ is left over)"):
        cp.finish(meta)
    assert cp.written
    got = pq.read_table(tmp_path / out)
    assert got["id"].to_pylist() == [0, 1, 2, 3]


def test_jsonl_parts(tmp_path):
    store = store_with(tmp_path / "j", [2, 1], fmt="jsonl")
    text = "".join(open(p, encoding="utf-8").read() for p in store.files())
    assert [json.loads(line)["id"] for line in text.splitlines()] == [0, 1, 2]


# ---- the fingerprint -----------------------------------------------------------------


def test_fingerprint_covers_inputs_model_and_content_flags(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"12345")
    data = tmp_path / "in.jsonl"
    data.write_text('{"query": "q", "items": []}\n')
    cfg = ScoreConfig(model=str(model))
    base = fingerprint(cfg, [str(data)], "parquet")
    assert base == json.loads(json.dumps(base))
    assert base["model file"] == {"model.safetensors": [5, os.stat(model / "model.safetensors").st_mtime_ns]}
    same = fingerprint(ScoreConfig(model=str(model), window_rows=7, cache_dir="/elsewhere"), [str(data)], "parquet")
    assert same == base  # how the work is done is not the job
    assert (
        fingerprint(ScoreConfig(model=str(model), template="yes-no-chat"), [str(data)], "parquet")["--template"]
        == "yes-no-chat"
    )
    (model / "model.safetensors").write_bytes(b"123456")
    assert fingerprint(cfg, [str(data)], "parquet")["model file"] != base["model file"]
    data.write_text('{"query": "q2", "items": []}\n')
    assert fingerprint(cfg, [str(data)], "parquet")["input files"] != base["input files"]


# ---- reading from where a job stopped ------------------------------------------------------


def test_skip_reads_on_from_any_row(tmp_path):
    rows = [{"id": i, "query": "q", "items": ["a"]} for i in range(40)]
    (tmp_path / "a.jsonl").write_text("\ufeff" + "\n\n".join(json.dumps(r) for r in rows[:15]) + "\n")
    pq.write_table(pa.Table.from_pylist(rows[15:32]), tmp_path / "b.parquet", row_group_size=3)
    with gzip.open(tmp_path / "c.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows[32:]))
    full = list(iter_rows([str(tmp_path)]))
    assert [r.data["id"] for r in full] == list(range(40))
    for k in range(42):
        assert list(iter_rows([str(tmp_path)], skip=k)) == full[k:], k


def test_skip_does_not_parse_skipped_lines(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text("not json\n" * 3 + '{"id": 1}\n')
    assert [r.data for r in iter_rows([str(p)], skip=3)] == [{"id": 1}]


def test_dataset_parts_share_one_schema_when_a_column_type_appears_late(tmp_path):
    import pyarrow.dataset as ds

    from scorecli.engine.checkpoint import Checkpoint
    from scorecli.io.output import resolve_output

    target = resolve_output(str(tmp_path / "ds") + "/")
    model = tmp_path / "m"
    model.mkdir()
    data = tmp_path / "in.jsonl"
    data.write_text("{}\n")
    cp = Checkpoint.open(target, ScoreConfig(model=str(model)), [str(data)], resume=False)
    meta = {"scorecli_version": "x"}
    first = pa.table({"id": pa.nulls(2), "score": [[1.0], [2.0]]}).replace_schema_metadata(meta)
    second = pa.table({"id": [7, 8], "score": [[3.0], [float("nan")]]}).replace_schema_metadata(meta)
    with cp.keeping():
        cp.write(first)
        cp.write(second)
        cp.finish(meta)
    names = sorted(os.listdir(tmp_path / "ds"))
    assert names == ["_SUCCESS", "part-00000.parquet", "part-00001.parquet"]
    schemas = [pq.read_schema(tmp_path / "ds" / n) for n in names[1:]]
    assert schemas[0].equals(schemas[1], check_metadata=True)
    assert schemas[0].field("id").type == pa.int64()
    got = ds.dataset(str(tmp_path / "ds"), format="parquet").to_table()
    assert got.column("id").to_pylist() == [None, None, 7, 8]
    assert got.column("score").to_pylist() == [[1.0], [2.0], [3.0], [None]]  # NaN written as null
    assert cp.nulled == {"score": 1}


def test_a_kill_while_dataset_parts_get_their_final_schema_keeps_them(tmp_path):
    """A dataset's parts rewritten under the final schema at the end (an id type known late)
    still count for --resume after a kill there: nothing is scored again."""
    from scorecli.engine.checkpoint import Checkpoint
    from scorecli.io.output import resolve_output

    target = resolve_output(str(tmp_path / "ds") + "/")
    (tmp_path / "m").mkdir()
    data = tmp_path / "in.jsonl"
    data.write_text("{}\n")
    cfg = ScoreConfig(model=str(tmp_path / "m"))
    cp = Checkpoint.open(target, cfg, [str(data)], resume=False)
    meta = {"scorecli_version": "x"}
    cp.write(pa.table({"id": pa.nulls(2), "score": [[1.0], [2.0]]}).replace_schema_metadata(meta))
    cp.write(pa.table({"id": [7, 8], "score": [[3.0], [4.0]]}).replace_schema_metadata(meta))
    before = os.path.getsize(tmp_path / "ds" / "part-00000.parquet")
    cp._unify_parts({})  # then killed, before the bookkeeping goes and _SUCCESS is written
    assert os.path.getsize(tmp_path / "ds" / "part-00000.parquet") != before
    resumed = Checkpoint.open(target, cfg, [str(data)], resume=True)
    assert resumed.rows_done == 4
    assert pq.read_schema(tmp_path / "ds" / "part-00000.parquet").field("id").type == pa.int64()
    # a part whose footer does not hold the journaled rows is not taken
    pq.write_table(pa.table({"id": [1], "score": [[1.0]]}), tmp_path / "ds" / "part-00001.parquet")
    assert Checkpoint.open(target, cfg, [str(data)], resume=True).rows_done == 2
