"""The real console script in a real shell's situations: what `--out` points at,
usage errors, ids across windows, pipes, closed stdin, signals, and the exact shape of
messages (exit code, one line, location, no traceback, nothing written).

As in test_cli, the plain runs are declared up front and started together by one module
fixture; runs that need a live peer (a FIFO's reader, a signal, `| head -1`) are tests
of their own.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import stat
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_cli import GOOD_LINE, SCORECLI, Case, Result, _env, jsonl, make_rows, read_jsonl, run_cli, write

ROW = b'{"id": %s, "query": "a query", "items": ["one item", "two items"]}\n'


@dataclass
class ShellCase(Case):
    preexec: object = None  # run in the child before exec (e.g. close stdin)


@dataclass
class Expect:
    """What a run must show: exit code, fragments of its one error line (if rc 2)."""

    rc: int = 0
    error: list[str] = field(default_factory=list)
    untouched: Path | None = None  # must hold the same bytes after the run


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _nan_model(folder: Path, base: str) -> str:
    """`base` with a classifier head so large that every score overflows (NaN or inf)."""
    from safetensors.torch import load_file, save_file

    folder.mkdir()
    for name in os.listdir(base):
        (folder / name).write_bytes(Path(base, name).read_bytes())
    weights = load_file(folder / "model.safetensors")
    weights["score.weight"] = weights["score.weight"].sign() * 3e38
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return str(folder)


def declare(tmp: Path, model: str) -> tuple[dict[str, Case], dict[str, Expect]]:
    """Every fixture run: its command line and what it must show."""
    cases: dict[str, Case] = {}
    expect: dict[str, Expect] = {}
    good = write(tmp / "good.jsonl", b"".join(GOOD_LINE % i for i in range(1, 6)))

    def add(
        name: str, inputs: list[str], out: str, extra: list[str] = (), exp: Expect | None = None, model_=model, **kw
    ):
        cases[name] = ShellCase(["score", *inputs, "--out", out, "--model", model_, *extra], **kw)
        expect[name] = exp or Expect()

    # item 1: what --out points at
    add("dev_null", [good], os.devnull)
    link = tmp / "link" / "scores.parquet"
    link.parent.mkdir()
    (tmp / "link" / "real").mkdir()
    (tmp / "link" / "real" / "target.parquet").write_bytes(b"old")
    link.symlink_to("real/target.parquet")
    add("symlink", [good], str(link))
    add("dev_stdout", [good], "/dev/stdout", ["-q"])
    read_only = tmp / "ro" / "scores.parquet"
    read_only.parent.mkdir()
    read_only.write_bytes(b"keep me")
    read_only.chmod(0o444)
    add("read_only", [good], str(read_only), exp=Expect(2, [str(read_only), "read-only"], read_only))
    alias = tmp / "alias.jsonl"
    alias.symlink_to(good)
    add("out_is_input", [good], str(alias), exp=Expect(2, [str(alias), f"is the input {good}"], Path(good)))
    add("out_empty", [good], "", exp=Expect(2, ["--out: empty path"]))
    add("out_csv", [good], str(tmp / "scores.csv"), exp=Expect(2, ["scores.csv", "unsupported output format"]))
    (tmp / "gz").mkdir()
    add("jsonl_gz", [good], str(tmp / "gz" / "scores.jsonl.gz"))
    stale = tmp / "stale" / f".scores.parquet.{_dead_pid()}.tmp"
    live = tmp / "stale" / f".scores.parquet.{os.getpid()}.tmp"
    write(stale, b"left by a killed run")
    write(live, b"a live run's")
    add("stale_temp", [good], str(tmp / "stale" / "scores.parquet"))

    # item 2: usage errors
    cases["no_input"] = Case(["score", "--out", str(tmp / "x.parquet")])
    expect["no_input"] = Expect(2, ["Missing argument"])
    add("unknown_option", [good], str(tmp / "x.parquet"), ["--no-such-flag"], Expect(2, ["--no-such-flag"]))
    add(
        "window_rows_abc",
        [good],
        str(tmp / "x.parquet"),
        ["--window-rows", "abc"],
        Expect(2, ["--window-rows", "integer"]),
    )

    # items 4-5: ids
    late = write(
        tmp / "late.jsonl", b"".join(ROW % b"null" if i == 2 else ROW[:1] + ROW[11:] for i in range(5)) + ROW % b"7"
    )
    add("id_late", [late], str(tmp / "late.parquet"), ["--window-rows", "2"])
    mixed = write(tmp / "mixed.jsonl", ROW % b"1" + ROW % b"2.5")
    where = [f"{mixed}:2: field 'id'", "2.5", "integers", f"{mixed}:1"]
    add("id_int_float_one_window", [mixed], str(tmp / "m1.parquet"), [], Expect(2, where))
    add("id_int_float_two_windows", [mixed], str(tmp / "m2.parquet"), ["--window-rows", "1"], Expect(2, where))
    floats = write(tmp / "floats.jsonl", ROW % b"2.5" + ROW % b"1e3" + ROW % b"-0.5")
    add("id_floats_jsonl", [floats], str(tmp / "floats_out.jsonl"), ["--window-rows", "1"])
    bad_ids = [b'{"a": 1}', b'"\\ud800"', str(2**63).encode(), b"[1]"]
    bad = write(tmp / "bad_ids.jsonl", ROW % b'"ok"' + b"".join(ROW % v for v in bad_ids))
    add("bad_ids_skipped", [bad], str(tmp / "bad_ids.parquet"), ["--skip-bad-rows"])
    add("id_object", [bad], str(tmp / "obj.parquet"), [], Expect(2, [f"{bad}:2: field 'id'", "got an object"]))
    small = tmp / "int32.parquet"
    pq.write_table(
        pa.table({"id": pa.array([1, None, 3], pa.int32()), "query": ["q"] * 3, "items": [["a"]] * 3}), small
    )
    add("parquet_id_type", [str(small)], str(tmp / "int32_out.parquet"), ["--window-rows", "1"])

    # item 6: stdin closed (`<&-`)
    add("stdin_closed_file", [good], str(tmp / "closed.parquet"), preexec=lambda: os.close(0))
    add(
        "stdin_closed_dash",
        ["-"],
        str(tmp / "closed2.parquet"),
        [],
        Expect(2, ["stdin", "closed"]),
        preexec=lambda: os.close(0),
    )
    # stdout closed (`>&-`): --out - is refused before the model loads; a file output does not mind
    add(
        "stdout_closed_dash",
        [good],
        "-",
        [],
        Expect(2, ["cannot write output -", "standard output is closed"]),
        model_=str(tmp / "no_such_model"),
        preexec=lambda: os.close(1),
    )
    add("stdout_closed_file", [good], str(tmp / "closed3.parquet"), ["--window-rows", "2"], preexec=lambda: os.close(1))

    # item 8: messages
    fire = tmp / ":fire: rows :x:.jsonl"
    fire.write_bytes(GOOD_LINE % 1 + b'{"id": 2, "query": "q", "items": [3]}\n')
    add("emoji_path", [str(fire)], str(tmp / "fire.parquet"), [], Expect(2, [f"{fire}:2", "'items'[0]"]))
    array = write(tmp / "array.jsonl", b'[{"id": 1, "query": "q", "items": ["a"]},\n {"id": 2}]\n')
    add("json_array", [array], str(tmp / "array.parquet"), [], Expect(2, [f"{array}:1", "JSON array", "JSON lines"]))
    unterminated = write(tmp / "unterminated.jsonl", GOOD_LINE % 1 + b'{"id": 2, "query": "q\n')
    add(
        "at_column",
        [unterminated],
        str(tmp / "u.parquet"),
        [],
        Expect(2, [f"{unterminated}:2", "Unterminated string starting at column 20"]),
    )
    corrupt = _corrupt_parquet(tmp / "corrupt.parquet")
    add("corrupt_page", [corrupt], str(tmp / "c.parquet"), [], Expect(2, [f"{corrupt}: rows ", "cannot read Parquet"]))
    add("skipped_counted", [bad], str(tmp / "skipped.parquet"), ["--skip-bad-rows"])
    add("nan_scores", [good], str(tmp / "nan.jsonl"), ["--no-self-check"], model_=_nan_model(tmp / "nan_model", model))

    # item 9: library noise under --quiet; checks before the model loads
    add("flex_quiet", [good], str(tmp / "flex.parquet"), ["--attention", "flex", "--device", "cpu", "-q"])
    # a model folder that would fail to load: these errors must come first, before any loading
    no_model = str(tmp / "unloadable_model")
    os.makedirs(no_model, exist_ok=True)
    write(tmp / "unloadable_model" / "config.json", b'{"model_type": "no-such-architecture"}')
    add(
        "template_before_model",
        [good],
        str(tmp / "t.parquet"),
        ["--template", "no-such-template"],
        Expect(2, ["no-such-template"]),
        model_=no_model,
    )
    first_bad = write(tmp / "first_bad.jsonl", b'{"id": 1, "query": "q"}\n')
    add(
        "first_row_before_model",
        [first_bad],
        str(tmp / "f.parquet"),
        [],
        Expect(2, [f"{first_bad}:1", "'items'"]),
        model_=no_model,
    )
    return cases, expect


@dataclass
class Runs:
    tmp: Path
    good: str
    cases: dict[str, Case]
    expect: dict[str, Expect]
    results: dict[str, Result]


def _run(case: Case) -> Result:
    if getattr(case, "preexec", None) is None:
        return run_cli(case)
    start = time.perf_counter()
    proc = subprocess.run(
        SCORECLI + case.args,
        capture_output=True,
        stdin=None,
        preexec_fn=case.preexec,
        env=_env(),
        timeout=180,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"), time.perf_counter() - start)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, qwen3_seq_cls) -> Runs:
    tmp = tmp_path_factory.mktemp("shell")
    cases, expect = declare(tmp, qwen3_seq_cls)
    before = {n: e.untouched.read_bytes() for n, e in expect.items() if e.untouched}
    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        results = dict(zip(cases, pool.map(_run, cases.values())))
    for name, data in before.items():
        assert expect[name].untouched.read_bytes() == data, name
    return Runs(tmp, str(tmp / "good.jsonl"), cases, expect, results)


def ok(runs: Runs, name: str) -> Result:
    result = runs.results[name]
    assert result.rc == 0, result.stderr
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr
    return result


ERRORS = [
    "read_only",
    "out_is_input",
    "out_empty",
    "out_csv",
    "no_input",
    "unknown_option",
    "window_rows_abc",
    "id_int_float_one_window",
    "id_int_float_two_windows",
    "id_object",
    "stdin_closed_dash",
    "stdout_closed_dash",
    "emoji_path",
    "json_array",
    "at_column",
    "corrupt_page",
    "template_before_model",
    "first_row_before_model",
]


@pytest.mark.e2e
@pytest.mark.parametrize("name", ERRORS)
def test_error_is_one_line_exit_2_and_writes_nothing(runs, name):
    result, exp = runs.results[name], runs.expect[name]
    assert result.rc == exp.rc == 2, result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr  # one line, no blank
    assert result.stderr[:-1].isprintable(), result.stderr  # no raw control bytes
    for fragment in exp.error:
        assert fragment in result.stderr, result.stderr
    assert result.stdout == b""
    out = runs.cases[name].args[runs.cases[name].args.index("--out") + 1] if "--out" in runs.cases[name].args else ""
    if out and exp.untouched is None:
        assert not os.path.lexists(out)


# ---- item 1: --out -----------------------------------------------------------------------


@pytest.mark.e2e
def test_dev_null_stays_a_device(runs):
    ok(runs, "dev_null")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


@pytest.mark.e2e
def test_symlink_is_written_through(runs):
    ok(runs, "symlink")
    link = runs.tmp / "link" / "scores.parquet"
    assert link.is_symlink() and os.readlink(link) == "real/target.parquet"
    assert pq.read_table(link)["id"].to_pylist() == [1, 2, 3, 4, 5]
    assert sorted(os.listdir(runs.tmp / "link" / "real")) == ["target.parquet"]  # no temp file left


@pytest.mark.e2e
def test_dev_stdout_is_like_dash(runs):
    result = ok(runs, "dev_stdout")
    assert [r["id"] for r in read_jsonl(result.stdout)] == [1, 2, 3, 4, 5]


@pytest.mark.e2e
def test_jsonl_gz_is_compressed_json_lines(runs):
    ok(runs, "jsonl_gz")
    rows = read_jsonl(gzip.decompress((runs.tmp / "gz" / "scores.jsonl.gz").read_bytes()))
    assert [r["id"] for r in rows] == [1, 2, 3, 4, 5]


@pytest.mark.e2e
def test_stale_temp_of_a_dead_run_is_removed(runs):
    ok(runs, "stale_temp")
    names = sorted(os.listdir(runs.tmp / "stale"))
    assert names == [f".scores.parquet.{os.getpid()}.tmp", "scores.parquet"]  # a live process's temp stays


# ---- items 4-5: ids ----------------------------------------------------------------------


@pytest.mark.e2e
def test_id_appearing_after_the_first_windows(runs):
    ok(runs, "id_late")
    table = pq.read_table(runs.tmp / "late.parquet")
    assert table.column_names[0] == "id" and table.schema.field("id").type == pa.int64()
    assert table["id"].to_pylist() == [None] * 5 + [7]


@pytest.mark.e2e
def test_float_ids_come_back_as_the_same_json_values(runs):
    result = ok(runs, "id_floats_jsonl")
    assert [r["id"] for r in read_jsonl((runs.tmp / "floats_out.jsonl").read_bytes())] == [2.5, 1000.0, -0.5]
    assert "scored 3 rows" in result.stderr


@pytest.mark.e2e
def test_bad_ids_are_bad_rows_named_by_line_and_field(runs):
    ok(runs, "bad_ids_skipped")
    rows = pq.read_table(runs.tmp / "bad_ids.parquet").to_pylist()
    assert [r["id"] for r in rows] == ["ok", None, None, None, None]
    inp = runs.tmp / "bad_ids.jsonl"
    for line, what in zip(range(2, 6), ["got an object", "lone surrogate", "64-bit", "got an array"]):
        error = rows[line - 1]["error"]
        assert error.startswith(f"{inp}:{line}: field 'id': ") and what in error, error
        assert rows[line - 1]["scores"] is None


@pytest.mark.e2e
def test_parquet_ids_keep_their_schema_type(runs):
    ok(runs, "parquet_id_type")
    table = pq.read_table(runs.tmp / "int32_out.parquet")
    assert table.schema.field("id").type == pa.int32() and table["id"].to_pylist() == [1, None, 3]


# ---- item 6: shells and pipes ------------------------------------------------------------


@pytest.mark.e2e
def test_closed_stdin_does_not_matter_when_reading_files(runs):
    ok(runs, "stdin_closed_file")
    assert pq.read_table(runs.tmp / "closed.parquet").num_rows == 5


@pytest.mark.e2e
def test_closed_stdout_does_not_matter_when_writing_files(runs):
    """With descriptor 1 closed, no file the run opens takes its number: the output is whole."""
    ok(runs, "stdout_closed_file")
    assert pq.read_table(runs.tmp / "closed3.parquet")["id"].to_pylist() == [1, 2, 3, 4, 5]


@pytest.mark.e2e
def test_fifo_output_is_streamed_into_not_replaced(tmp_path, qwen3_seq_cls):
    fifo = tmp_path / "scores.jsonl"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    inp = write(tmp_path / "in.jsonl", b"".join(GOOD_LINE % i for i in range(1, 4)))
    result = run_cli(Case(["score", inp, "--out", str(fifo), "--model", qwen3_seq_cls, "-q"]))
    reader.join(30)
    assert result.rc == 0 and result.stderr == "", result.stderr
    assert [r["id"] for r in read_jsonl(got[0])] == [1, 2, 3]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.e2e
def test_fifo_input_is_read_once(tmp_path, qwen3_seq_cls):
    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(jsonl(make_rows(7, 0, 1))), daemon=True)
    writer.start()
    result = run_cli(Case(["score", str(fifo), "--out", "-", "--model", qwen3_seq_cls, "-q", "--window-rows", "3"]))
    assert result.rc == 0, result.stderr
    assert [r["id"] for r in read_jsonl(result.stdout)] == list(range(7))


def _popen(args: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen(
        SCORECLI + args,
        stderr=subprocess.PIPE,
        env=_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        **kw,
    )


@pytest.mark.e2e
@pytest.mark.parametrize("signals", [[signal.SIGTERM], [signal.SIGINT, signal.SIGINT]], ids=["SIGTERM", "SIGINT-twice"])
def test_signal_with_a_stalled_stdin_producer(tmp_path, qwen3_seq_cls, signals):
    out = tmp_path / "scores.parquet"
    proc = _popen(
        ["score", "-", "--out", str(out), "--model", qwen3_seq_cls], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        proc.stdin.write(GOOD_LINE % 1)
        proc.stdin.flush()  # ... and then nothing: the producer stalls with the pipe open
        temp = tmp_path / f".scores.parquet.{proc.pid}.tmp"
        deadline = time.monotonic() + 90
        while not temp.exists():  # the first window (one row) is written; the reader waits for line 2
            if proc.poll() is not None or time.monotonic() > deadline:  # not read while it runs: that would wait
                proc.kill()
                pytest.fail(f"no {temp.name} (rc={proc.wait()}): {proc.stderr.read().decode()}")
            time.sleep(0.05)
        for signum in signals:
            proc.send_signal(signum)
        proc.wait(timeout=20)  # with the producer's end still open: nothing may wait for it
        stderr = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signals[0], stderr
    text = stderr.decode()
    assert "Traceback" not in text and "Fatal" not in text and text.strip().endswith("interrupted: no output written")
    assert os.listdir(tmp_path) == []


@pytest.mark.e2e
def test_closed_pipe_ends_the_run_quietly_and_promptly(tmp_path, qwen3_seq_cls):
    rows = make_rows(3000, 0, 5)
    inp = write(tmp_path / "big.jsonl", jsonl(rows))
    proc = _popen(["score", inp, "--out", "-", "--model", qwen3_seq_cls, "--window-rows", "20"], stdout=subprocess.PIPE)
    try:
        first = proc.stdout.readline()  # `| head -1`
        proc.stdout.close()
        closed = time.monotonic()
        stderr = proc.stderr.read()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert json.loads(first)["id"] == 0
    assert time.monotonic() - closed < 20  # not after the whole input (3000 rows)
    assert proc.returncode == -signal.SIGPIPE, stderr  # as Unix filters end: status 141 in a shell
    assert stderr == b""


# ---- item 8: messages --------------------------------------------------------------------


@pytest.mark.e2e
def test_skipped_rows_are_counted_apart(runs):
    summary = ok(runs, "skipped_counted").lines()[-1]
    assert summary.startswith("scored 1 row, 2 items") and "skipped 4 bad rows" in summary, summary


@pytest.mark.e2e
def test_nan_scores_are_null_and_counted(runs):
    result = ok(runs, "nan_scores")
    rows = read_jsonl((runs.tmp / "nan.jsonl").read_bytes())  # strict JSON: no bare NaN
    assert [r["score"] for r in rows] == [[None, None]] * 5
    assert "10 items scored NaN or infinite (written as null)" in result.lines()[-1]


def _corrupt_parquet(path: Path) -> str:
    """3000 good-looking rows whose middle pages are garbage (the first rows read fine)."""
    n = 3000
    table = pa.table({"id": list(range(n)), "query": ["q" * 40] * n, "items": [["an item"]] * n})
    pq.write_table(table, path, row_group_size=1000, compression="none")
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 3000):
        data[i] = (data[i] * 7 + 3) % 256
    path.write_bytes(bytes(data))
    return str(path)


def test_corrupt_parquet_page_names_rows_without_control_bytes(tmp_path):
    from scorecli.errors import InputError
    from scorecli.io.readers import iter_rows

    path = _corrupt_parquet(tmp_path / "c.parquet")
    with pytest.raises(InputError) as err:
        list(iter_rows([path]))
    assert f"{path}: rows " in str(err.value) and str(err.value).isprintable()


# ---- item 9: noise and early checks ------------------------------------------------------


@pytest.mark.e2e
def test_flex_on_cpu_is_quiet(runs):
    assert ok(runs, "flex_quiet").stderr == ""


# A successful run ends without tearing the interpreter down (process.finish): the exit
# handlers still run, the output is whole, and a worker thread still running is waited for.
EXIT_PROBE = """import atexit, sys, threading, time
from pathlib import Path
marks = Path(sys.argv.pop(1))
atexit.register(lambda: marks.with_suffix(".atexit").write_text("ran"))
def late():
    time.sleep(float(sys.argv.pop(1)))
    marks.with_suffix(".thread").write_text("done")
threading.Thread(target=late).start()
from scorecli.cli import main
sys.argv[0] = "scorecli"
main()
"""


@pytest.mark.e2e
@pytest.mark.parametrize("delay", ["0", "3"])
def test_success_runs_exit_handlers_and_waits_for_live_threads(tmp_path, qwen3_seq_cls, delay):
    import sys

    data = write(tmp_path / "in.jsonl", b"".join(GOOD_LINE % i for i in range(3)))
    out, marks = tmp_path / "scores.parquet", tmp_path / "marks"
    args = ["score", data, "--out", str(out), "--model", qwen3_seq_cls, "--quiet"]
    proc = subprocess.run(
        [sys.executable, "-c", EXIT_PROBE, str(marks), delay, *args], capture_output=True, env=_env(), timeout=180
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert pq.read_table(out).num_rows == 3
    assert marks.with_suffix(".atexit").read_text() == "ran"
    assert marks.with_suffix(".thread").read_text() == "done"


def test_an_interrupt_just_after_the_rename_says_the_output_is_whole(tmp_path, monkeypatch, qwen3_seq_cls):
    """A run written straight through (no parts: rows from stdin do that) interrupted while the
    output's directory is fsync'ed after the rename: the output is in place, whole, and the line
    says so, not 'no output written'."""
    from scorecli.config import ScoreConfig
    from scorecli.engine.checkpoint import Interrupted
    from scorecli.engine.run import open_rows, run_score
    from scorecli.io import writers

    inp = write(tmp_path / "rows.jsonl", ROW % b"1" + ROW % b"2")
    out = tmp_path / "scores.parquet"
    cfg = ScoreConfig(model=qwen3_seq_cls)

    def interrupted(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(writers, "fsync_dir", interrupted)
    with pytest.raises(KeyboardInterrupt) as raised:
        run_score(cfg, [inp], str(out), None, None, None, open_rows(cfg, [inp], None))
    assert isinstance(raised.value, Interrupted) and str(raised.value) == f"interrupted after {out} was written whole"
    assert pq.read_table(out).num_rows == 2


def test_a_second_signal_while_the_first_unwinds_still_says_what_is_kept(tmp_path, monkeypatch, qwen3_seq_cls):
    """Ctrl-C twice (an impatient user): the second comes while the first still unwinds (seconds on a
    real model: a batch finishing, threads joined), before its message exists, and ends the process
    after `say_interrupted()`. The parts stay; the line said 'interrupted: no output written', as
    if the finished rows were lost. Here the second signal comes as the part store is released."""
    from scorecli import cli_score, stderr
    from scorecli.config import ScoreConfig
    from scorecli.io import parts
    from scorecli.io.output import resolve_output

    inp = write(tmp_path / "rows.jsonl", b"".join(ROW % str(i).encode() for i in range(6)))
    out = tmp_path / "scores.parquet"
    said: list[str] = []
    monkeypatch.setattr(stderr, "say", said.append)
    monkeypatch.setattr(stderr, "_interrupt_said", [])
    monkeypatch.setattr(stderr, "_interrupt_notes", [])
    add, release = parts.PartStore.add, parts.PartStore.release

    def add_then_interrupt(self, table):  # the first Ctrl-C, after two windows are kept
        if len(self.parts) == 2:
            raise KeyboardInterrupt
        return add(self, table)

    def second_signal_then_release(self):  # what the second one does before it exits at once
        stderr.say_interrupted()
        release(self)

    monkeypatch.setattr(parts.PartStore, "add", add_then_interrupt)
    monkeypatch.setattr(parts.PartStore, "release", second_signal_then_release)
    cfg = ScoreConfig(model=qwen3_seq_cls, window_rows=1)
    with pytest.raises(KeyboardInterrupt):
        cli_score._run(cfg, [inp], resolve_output(str(out), [inp]), "local", False, True, None, None)
    assert said == [
        f"interrupted: no output written; 2 rows kept in {out}.partial/; run the same command with --resume to continue"
    ]
    assert not out.exists() and len(list((tmp_path / "scores.parquet.partial").glob("part-*.parquet"))) == 2
