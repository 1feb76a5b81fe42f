"""Long runs survive (docs/long-jobs.md), through the real console script: a run killed with SIGKILL at
several points, or stopped by SIGINT/SIGTERM or a full disk, continues with `--resume` to the
output an uninterrupted run writes; a changed input, flag or model is refused; directory
outputs are Parquet datasets that pyarrow, DuckDB and polars read in input order."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_cli import SCORECLI, WORDS, Case, _env, jsonl, run_cli, write

ROWS = 24
WINDOW = 2  # rows per part: 12 parts
PARTS = ROWS // WINDOW
JOURNAL = "_scorecli_journal.jsonl"


@pytest.fixture(scope="module")
def job_input(tmp_path_factory) -> str:
    """Rows whose items grow longer row by row, so later parts take longer than the first."""
    rows = []
    for i in range(ROWS):
        n = 4 + 3 * i
        items = [" ".join(WORDS[(i + j + k) % len(WORDS)] for k in range(n)) for j in range(3)]
        rows.append({"id": i, "query": " ".join(WORDS[i % 5 : i % 5 + 4]), "items": items})
    return write(tmp_path_factory.mktemp("job") / "rows.jsonl", jsonl(rows))


def score_args(inp: str, model: str, out: Path, *extra: str) -> list[str]:
    return [
        "score",
        inp,
        "--model",
        model,
        "--out",
        str(out),
        "--window-rows",
        str(WINDOW),
        "--max-batch-tokens",
        "96",
        "--pooled-hidden-states",
        *extra,
    ]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, job_input, qwen3_seq_cls) -> pa.Table:
    out = tmp_path_factory.mktemp("whole") / "scores.parquet"
    result = run_cli(Case(score_args(job_input, qwen3_seq_cls, out)))
    assert result.rc == 0, result.stderr
    assert not Path(str(out) + ".partial").exists()
    return pq.read_table(out)


def start(args: list[str]) -> subprocess.Popen:
    # SIGINT at its default, as under a terminal (a background shell hands children SIGINT ignored)
    return subprocess.Popen(
        SCORECLI + args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def journaled(folder: Path) -> int:
    try:
        return (folder / JOURNAL).read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def stop_after(proc: subprocess.Popen, folder: Path, parts: int, signum: int = signal.SIGKILL) -> tuple[int, str]:
    """Send `signum` once `parts` parts are journaled; (parts journaled then, the run's stderr)."""
    deadline = time.monotonic() + 120
    try:
        while (done := journaled(folder)) < parts:
            assert proc.poll() is None, proc.communicate()[1].decode()
            assert time.monotonic() < deadline, "the run never got that far"
            time.sleep(0.005)
        assert proc.poll() is None, "the run finished before it could be stopped"
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return done, stderr.decode("utf-8", "replace")


@pytest.mark.e2e
@pytest.mark.parametrize("parts", [1, 3, PARTS - 1], ids=["after-1", "after-3", "all-but-one"])
def test_sigkill_then_resume_equals_uninterrupted(tmp_path, job_input, qwen3_seq_cls, uninterrupted, parts):
    out = tmp_path / "scores.parquet"
    folder = Path(str(out) + ".partial")
    args = score_args(job_input, qwen3_seq_cls, out)
    kept, _ = stop_after(start(args), folder, parts)
    assert parts <= kept < PARTS
    assert not out.exists() and folder.is_dir()
    result = run_cli(Case(args + ["--resume"]))
    assert result.rc == 0, result.stderr
    assert f"resumed after {journaled_rows(kept):,} rows" in result.stderr
    got = pq.read_table(out)
    assert got.equals(uninterrupted)
    assert got.schema.metadata == uninterrupted.schema.metadata
    assert not folder.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.parquet"]


def journaled_rows(parts: int) -> int:
    return parts * WINDOW


@pytest.mark.e2e
@pytest.mark.parametrize(
    "signum,code",
    [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)],
    ids=["SIGINT", "SIGTERM", "SIGHUP"],
)
def test_signal_keeps_parts_and_says_resume(tmp_path, job_input, qwen3_seq_cls, uninterrupted, signum, code):
    out = tmp_path / "scores.jsonl"
    folder = Path(str(out) + ".partial")
    args = score_args(job_input, qwen3_seq_cls, out)
    proc = start(args)
    _, stderr = stop_after(proc, folder, 2, signum)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    assert not out.exists() and journaled(folder) >= 2
    result = run_cli(Case(args + ["--resume"]))
    assert result.rc == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(ROWS))
    # JSON lines hold float32 digits: read back as float32, they are the Parquet run's values
    assert [pa.array(r["score"], pa.float32()).to_pylist() for r in rows] == uninterrupted.column("score").to_pylist()


@pytest.mark.e2e
def test_a_closed_terminal_keeps_parts_and_exits_129(tmp_path, job_input, qwen3_seq_cls, uninterrupted):
    """An ssh session closes under a run on its terminal: the kernel sends SIGHUP and the terminal
    gives EIO to every later write, the progress bar's and the interrupted line's included."""
    out = tmp_path / "scores.parquet"
    folder = Path(str(out) + ".partial")
    args = score_args(job_input, qwen3_seq_cls, out)
    pid, terminal = pty.fork()  # the child leads a session whose controlling terminal is `terminal`
    if pid == 0:
        os.execve(SCORECLI[0], SCORECLI + args, _env())
    deadline = time.monotonic() + 120
    try:
        while journaled(folder) < 2:
            assert time.monotonic() < deadline, "the run never got that far"
            if select.select([terminal], [], [], 0.05)[0]:
                os.read(terminal, 65536)  # what a terminal shows (the bar): read, so the run never waits on it
    finally:
        os.close(terminal)  # the terminal goes away
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 129, status
    assert not out.exists() and journaled(folder) >= 2
    result = run_cli(Case(args + ["--resume"]))
    assert result.rc == 0, result.stderr
    assert pq.read_table(out).equals(uninterrupted)


@pytest.mark.e2e
def test_sighup_under_nohup_is_ignored(tmp_path, job_input, qwen3_seq_cls, uninterrupted):
    out = tmp_path / "scores.parquet"
    folder = Path(str(out) + ".partial")

    def nohup() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    proc = subprocess.Popen(
        SCORECLI + score_args(job_input, qwen3_seq_cls, out), stderr=subprocess.PIPE, env=_env(), preexec_fn=nohup
    )
    deadline = time.monotonic() + 120
    while journaled(folder) < 2 and proc.poll() is None:
        assert time.monotonic() < deadline, "the run never got that far"
        time.sleep(0.005)
    proc.send_signal(signal.SIGHUP)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr.decode()
    assert pq.read_table(out).equals(uninterrupted)


@pytest.mark.e2e
def test_interrupted_message_names_rows_kept_and_resume(tmp_path, job_input, qwen3_seq_cls):
    out = tmp_path / "scores.parquet"
    folder = Path(str(out) + ".partial")
    proc = start(score_args(job_input, qwen3_seq_cls, out))
    deadline = time.monotonic() + 120
    while journaled(folder) < 2:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    lines = [line for line in err.decode().splitlines() if line.strip()]
    assert proc.returncode == 143 and "Traceback" not in err.decode()
    kept = journaled(folder) * WINDOW
    assert f"{kept:,} rows kept in {folder}" in lines[-1] and "--resume" in lines[-1]


@pytest.mark.e2e
def test_changed_flag_input_or_model_is_refused(tmp_path, job_input, qwen3_seq_cls):
    model = tmp_path / "model"
    shutil.copytree(qwen3_seq_cls, model)
    inp = tmp_path / "rows.jsonl"
    shutil.copy(job_input, inp)
    stat = os.stat(inp)
    out = tmp_path / "scores.parquet"
    folder = Path(str(out) + ".partial")
    args = score_args(str(inp), str(model), out)
    stop_after(start(args), folder, 1)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    def refused(case_args: list[str], what: str) -> None:
        result = run_cli(Case(case_args + ["--resume"]))
        assert result.rc == 2, result.stderr
        assert len(result.lines()) == 1 and what in result.stderr and "Traceback" not in result.stderr
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
        assert not out.exists()

    refused(args + ["--activation", "sigmoid"], "--activation")
    os.utime(inp, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched: maybe edited
    refused(args, "input files")
    os.utime(inp, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    for name in ("model.safetensors", "tokenizer.json"):  # retrained or re-tokenized in place, same sizes
        st = os.stat(model / name)
        os.utime(model / name, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        refused(args, f"model file {name}")
        os.utime(model / name, ns=(st.st_atime_ns, st.st_mtime_ns))
    code = model / "modeling_custom.py"  # a --trust-remote-code model's code, edited between the runs
    code.write_text("# one version\n")
    refused(args, "model file modeling_custom.py")
    code.unlink()
    with open(model / "model.safetensors", "ab") as f:  # other weights
        f.write(b"\0")
    refused(args, "model file model.safetensors")


@pytest.mark.e2e
def test_changed_engine_settings_are_not_a_different_job(tmp_path, job_input, qwen3_seq_cls, uninterrupted):
    out = tmp_path / "scores.parquet"
    folder = Path(str(out) + ".partial")
    args = score_args(job_input, qwen3_seq_cls, out)
    stop_after(start(args), folder, 2)
    resumed = [a if a != str(WINDOW) else "5" for a in args] + ["--resume", "--quiet"]
    result = run_cli(Case(resumed))
    assert result.rc == 0 and result.lines() == [], result.stderr
    assert pq.read_table(out).equals(uninterrupted)


@pytest.mark.e2e
def test_resume_keeps_the_jobs_windows_so_scores_are_identical(tmp_path, job_input, qwen3_seq_cls):
    """Which rows share a batch moves float32 scores in their last bits, and windows decide it:
    a job resumed with another --window-rows goes on in its own windows (with a warning), and
    its output is the uninterrupted run's to the bit, pooled states too."""

    def args(out: Path, window: int) -> list[str]:  # the default batch budget: windows shape the batches
        a = score_args(job_input, qwen3_seq_cls, out)
        i = a.index("--max-batch-tokens")
        a = a[:i] + a[i + 2 :]
        a[a.index("--window-rows") + 1] = str(window)
        return a

    whole = {}
    for window in (WINDOW, 5):
        assert run_cli(Case(args(tmp_path / f"whole{window}.parquet", window))).rc == 0
        whole[window] = pq.read_table(tmp_path / f"whole{window}.parquet")
    assert not whole[WINDOW].equals(whole[5])  # else this test could not fail
    out = tmp_path / "scores.parquet"
    stop_after(start(args(out, WINDOW)), Path(str(out) + ".partial"), 3)
    result = run_cli(Case(args(out, 5) + ["--resume"]))
    assert result.rc == 0, result.stderr
    assert "--window-rows 5 is not used" in result.stderr and f"parts of {WINDOW} rows" in result.stderr
    assert pq.read_table(out).equals(whole[WINDOW])


@pytest.mark.e2e
def test_resume_needs_files(tmp_path, job_input, qwen3_seq_cls):
    stdin = run_cli(
        Case(
            ["score", "-", "--model", qwen3_seq_cls, "--out", str(tmp_path / "o.parquet"), "--resume"],
            stdin=Path(job_input).read_bytes(),
        )
    )
    stdout = run_cli(Case(["score", job_input, "--model", qwen3_seq_cls, "--out", "-", "--resume"]))
    fifo = tmp_path.parent / f"{tmp_path.name}.fifo"  # a pipe named as a file (`<(zcat rows.gz)`): read once
    os.mkfifo(fifo)
    pipe = run_cli(
        Case(["score", str(fifo), "--model", qwen3_seq_cls, "--out", str(tmp_path / "o.parquet"), "--resume"])
    )
    for result in (stdin, stdout, pipe):
        assert result.rc == 2 and len(result.lines()) == 1 and "--resume" in result.stderr, result.stderr
        assert result.stdout == b""
    assert "is a pipe, which cannot be read again" in pipe.stderr
    assert list(tmp_path.iterdir()) == []
    device = run_cli(Case(["score", job_input, "--model", qwen3_seq_cls, "--out", os.devnull, "--resume", "-q"]))
    assert device.rc == 0, device.stderr  # a device keeps no parts: --resume just runs the job (docs/long-jobs.md)


@pytest.mark.e2e
def test_resume_without_a_folder_starts_and_a_leftover_is_replaced(tmp_path, job_input, qwen3_seq_cls, uninterrupted):
    out = tmp_path / "scores.parquet"
    folder = Path(str(out) + ".partial")
    args = score_args(job_input, qwen3_seq_cls, out)
    stop_after(start(args + ["--activation", "sigmoid"]), folder, 1)
    result = run_cli(Case(args))  # not --resume: the other job's parts go, with a warning
    assert result.rc == 0, result.stderr
    assert "replacing" in result.stderr and str(folder) in result.stderr
    assert pq.read_table(out).equals(uninterrupted)
    out.unlink()
    result = run_cli(Case(args + ["--resume"]))  # nothing to resume: just runs
    assert result.rc == 0, result.stderr
    assert pq.read_table(out).equals(uninterrupted)


@pytest.mark.e2e
def test_a_second_run_on_a_folder_in_use_is_refused(tmp_path, job_input, qwen3_seq_cls, uninterrupted):
    """Two runs never interleave their parts: while one run holds `<out>.partial/` (here stopped
    with SIGSTOP), another on the same --out (another job, or the same one with --resume, as
    overlapping cron lines do) exits 2 and touches nothing; the first then finishes whole."""
    out = tmp_path / "scores.parquet"
    folder = Path(str(out) + ".partial")
    args = score_args(job_input, qwen3_seq_cls, out)
    first = start(args)
    try:
        deadline = time.monotonic() + 120
        while journaled(folder) < 2:
            assert first.poll() is None and time.monotonic() < deadline, "the first run never got that far"
            time.sleep(0.005)
        first.send_signal(signal.SIGSTOP)
        before = sorted(os.listdir(folder))
        for other in (args + ["--activation", "sigmoid"], args + ["--resume", "--window-rows", "5"]):
            result = run_cli(Case(other))
            assert result.rc == 2 and len(result.lines()) == 1, result.stderr
            assert "another scorecli run is writing" in result.stderr and str(folder) in result.stderr
        assert sorted(os.listdir(folder)) == before
        first.send_signal(signal.SIGCONT)
        assert first.wait(timeout=120) == 0, first.communicate()[1].decode()
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGCONT)
            first.kill()
            first.wait()
    assert pq.read_table(out).equals(uninterrupted) and not folder.exists()


@pytest.mark.e2e
def test_a_new_job_failing_before_its_first_part_does_not_count_the_old_jobs_rows(tmp_path, job_input, qwen3_seq_cls):
    """A run of another job on a leftover folder, failing or interrupted before its first part,
    does not say the old job's rows are kept for it to --resume, nor that it replaces them, and
    leaves them as they were."""
    from scorecli.config import ScoreConfig
    from scorecli.engine.checkpoint import Checkpoint, Interrupted
    from scorecli.errors import InputError
    from scorecli.io.output import resolve_output

    out = tmp_path / "scores.parquet"
    folder = Path(str(out) + ".partial")
    stop_after(start(score_args(job_input, qwen3_seq_cls, out)), folder, 2)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    target = resolve_output(str(out), [job_input])
    other = ScoreConfig(
        model=qwen3_seq_cls, window_rows=WINDOW, max_batch_tokens=96, pooled_hidden_states=True, activation="sigmoid"
    )
    said: list[str] = []
    for exc in (KeyboardInterrupt(), InputError("rows.jsonl:3: bad row")):
        checkpoint = Checkpoint.open(target, other, [job_input], resume=False, warn=said.append)
        with pytest.raises(type(exc)) as raised:
            with checkpoint.keeping():
                raise exc
        assert not isinstance(raised.value, Interrupted) and "rows kept" not in str(raised.value)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert said == []
    bad = write(tmp_path / "bad.jsonl", b'{"id": 1, "query":\n')  # refused before the model loads
    result = run_cli(Case(score_args(bad, qwen3_seq_cls, out)))
    assert result.rc == 2 and len(result.lines()) == 1, result.stderr  # no 'replacing ...' line first
    assert result.lines()[0].startswith("error: ") and "malformed JSON" in result.stderr
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    checkpoint = Checkpoint.open(target, other, [job_input], resume=False, warn=said.append)
    with checkpoint.keeping():
        assert said == []
        checkpoint.write(pq.read_table(folder / "part-00000.parquet"))
        checkpoint.write(pq.read_table(folder / "part-00000.parquet"))
    assert len(said) == 1 and said[0].startswith(f"replacing {folder} left by an earlier run")


@pytest.mark.e2e
def test_directory_output_is_a_dataset_readers_agree_on(tmp_path, job_input, qwen3_seq_cls, uninterrupted):
    out = tmp_path / "ds"
    args = score_args(job_input, qwen3_seq_cls, Path(str(out) + "/"))
    args[args.index("--out") + 1] = str(out) + "/"
    result = run_cli(Case(args))
    assert result.rc == 0, result.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == ["_SUCCESS"] + [f"part-{k:05d}.parquet" for k in range(PARTS)]
    import pyarrow.dataset as ds

    got = ds.dataset(str(out), format="parquet").to_table()
    assert got.replace_schema_metadata(None).equals(uninterrupted.replace_schema_metadata(None))
    for name in names[1:]:
        assert pq.read_schema(out / name).metadata == uninterrupted.schema.metadata
    duckdb = pytest.importorskip("duckdb")
    query = f"select id from read_parquet('{out}/*.parquet', filename=true, file_row_number=true) order by filename, file_row_number"
    assert [r[0] for r in duckdb.sql(query).fetchall()] == list(range(ROWS))
    polars = pytest.importorskip("polars")
    assert polars.read_parquet(f"{out}/*.parquet")["id"].to_list() == list(range(ROWS))


@pytest.mark.e2e
def test_directory_output_resumes(tmp_path, job_input, qwen3_seq_cls, uninterrupted):
    out = str(tmp_path / "ds") + "/"
    args = score_args(job_input, qwen3_seq_cls, Path(out))
    args[args.index("--out") + 1] = out
    kept, _ = stop_after(start(args), Path(out), 3)
    assert not (Path(out) / "_SUCCESS").exists() and kept >= 3
    result = run_cli(Case(args + ["--resume"]))
    assert result.rc == 0, result.stderr
    import pyarrow.dataset as ds

    got = ds.dataset(out, format="parquet").to_table()
    assert got.replace_schema_metadata(None).equals(uninterrupted.replace_schema_metadata(None))
    assert sorted(os.listdir(out))[0] == "_SUCCESS" and len(os.listdir(out)) == PARTS + 1


@pytest.mark.e2e
def test_full_disk_fails_clearly_and_resumes_when_there_is_room(tmp_path, job_input, qwen3_seq_cls, uninterrupted):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        out = mnt / "scores.parquet"
        args = score_args(job_input, qwen3_seq_cls, out)
        result = run_cli(Case(args))
        assert result.rc == 1, result.stderr
        assert "No space left on device" in result.lines()[-1] and "--resume" in result.lines()[-1]
        assert "Traceback" not in result.stderr and not out.exists()
        kept = journaled(Path(str(out) + ".partial"))
        assert 0 < kept < PARTS
        subprocess.run(["mount", "-o", "remount,size=4m", str(mnt)], check=True)
        result = run_cli(Case(args + ["--resume"]))
        assert result.rc == 0, result.stderr
        assert f"resumed after {kept * WINDOW:,} rows" in result.stderr
        assert pq.read_table(out).equals(uninterrupted)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.e2e
def test_ray_engine_resumes_a_job_and_keeps_its_blocks_as_parts(tmp_path, job_input, qwen3_seq_cls, uninterrupted):
    pytest.importorskip("ray")
    out = tmp_path / "scores.parquet"
    folder = Path(str(out) + ".partial")
    args = score_args(job_input, qwen3_seq_cls, out)
    kept, _ = stop_after(start(args), folder, 2)
    result = run_cli(Case(args + ["--resume", "--engine", "ray"]))  # the engine is not part of the job
    assert result.rc == 0, result.stderr
    assert f"resumed after {kept * WINDOW:,} rows" in result.stderr
    assert pq.read_table(out).equals(uninterrupted)
    assert not folder.exists()


KILL_IN_MERGE = """import os, signal, sys
import scorecli.io.writers as writers
write = writers.Sink.write
def write_then_die(self, table):  # the merge's first table reaches the temporary file, then SIGKILL
    write(self, table)
    self._file.flush()
    os.kill(os.getpid(), signal.SIGKILL)
writers.Sink.write = write_then_die
from scorecli.cli import main
sys.argv[0] = "scorecli"
main()
"""


@pytest.mark.e2e
def test_sigkill_during_the_final_merge_then_resume(tmp_path, job_input, qwen3_seq_cls, uninterrupted):
    import sys

    out = tmp_path / "scores.parquet"
    folder = Path(str(out) + ".partial")
    args = score_args(job_input, qwen3_seq_cls, out)
    proc = subprocess.run([sys.executable, "-c", KILL_IN_MERGE, *args], capture_output=True, env=_env(), timeout=180)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert not out.exists() and journaled(folder) == PARTS
    assert any(p.name.startswith(".scores.parquet.") for p in tmp_path.iterdir())  # the merge's temporary file
    result = run_cli(Case(args + ["--resume"]))
    assert result.rc == 0, result.stderr
    assert f"resumed after {ROWS:,} rows; scored 0 rows" in result.stderr
    assert pq.read_table(out).equals(uninterrupted)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.parquet"]  # the stale temporary file is gone


NO_MODEL = """import sys
import scorecli.scorer as scorer
def refuse(*args, **kwargs):
    sys.exit("the model was loaded")
scorer.Scorer.__init__ = refuse
from scorecli.cli import main
sys.argv[0] = "scorecli"
main()
"""


@pytest.mark.e2e
@pytest.mark.parametrize("said", [True, False], ids=["job-file-says-so", "input-counted"])
def test_resume_with_every_row_kept_loads_no_model(tmp_path, job_input, qwen3_seq_cls, uninterrupted, said):
    """A job killed after its last part (here in the final merge) resumes to the uninterrupted
    output, metadata and summary without loading the model: its parts hold every row. The job file
    says so; a folder whose job file does not (an earlier version's) is found whole by counting the
    input's rows."""
    import sys

    out = tmp_path / "scores.parquet"
    folder = Path(str(out) + ".partial")
    args = score_args(job_input, qwen3_seq_cls, out, "--score-cache", str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", KILL_IN_MERGE, *args], capture_output=True, env=_env(), timeout=180)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    if not said:
        job = json.loads((folder / "_scorecli_job.json").read_text())
        del job["settings"]["input_rows"]
        (folder / "_scorecli_job.json").write_text(json.dumps(job))
    result = subprocess.run(
        [sys.executable, "-c", NO_MODEL, *args, "--resume"], capture_output=True, env=_env(), timeout=180
    )
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr
    assert f"resumed after {ROWS:,} rows; scored 0 rows" in stderr
    assert f"score cache: 0 hits, {3 * ROWS} misses (the output's, its {ROWS} kept rows included)" in stderr
    got = pq.read_table(out)
    assert got.equals(uninterrupted)
    want = dict(uninterrupted.schema.metadata) | {b"score_cache_hits": b"0", b"score_cache_misses": b"72"}
    assert dict(got.schema.metadata) == want
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "scores.parquet"]


@pytest.mark.e2e
def test_embedding_job_resumes_to_the_uninterrupted_output(tmp_path, job_input):
    """An embedding model's job (docs/models.md: Which models, embedding models) killed after its first part continues with --resume
    to what an uninterrupted run writes; its own flags are part of the job."""
    from tests.builders.embedding import build_sentence_model

    model = build_sentence_model(tmp_path / "st", pooling="mean", dense=True, normalize=True)
    whole, out = tmp_path / "whole.parquet", tmp_path / "scores.parquet"
    args = score_args(job_input, model, out, "--similarity", "dot", "--top-k", "2")
    assert run_cli(Case(score_args(job_input, model, whole, "--similarity", "dot", "--top-k", "2"))).rc == 0
    stop_after(start(args), Path(str(out) + ".partial"), 1)
    changed = run_cli(Case(score_args(job_input, model, out, "--similarity", "cosine", "--top-k", "2", "--resume")))
    assert changed.rc == 2 and "--similarity" in changed.stderr
    result = run_cli(Case(args + ["--resume"]))
    assert result.rc == 0, result.stderr
    got, want = pq.read_table(out), pq.read_table(whole)
    assert got.select(["id", "score", "top_k", "pooled_hidden_states"]).equals(
        want.select(["id", "score", "top_k", "pooled_hidden_states"])
    )


def test_a_pair_repeated_across_the_kill_is_reused_as_the_uninterrupted_run_reused_it(tmp_path, bert_cross_encoder):
    """A pair that every tenth row lists again is scored once a job and reused later; a run
    killed after its first window and resumed reuses it too (its kept pairs are the job's
    entries again: `Reusing.seed`), so the windows after the kill batch as the uninterrupted
    run's did: scores and token counts identical, bit for bit."""
    rows = []
    for i in range(60):
        n = 3 + (i * 7) % 25
        items = [" ".join(WORDS[(i + j + k) % len(WORDS)] for k in range(n)) for j in range(3)]
        query = " ".join(WORDS[i % 5 : i % 5 + 4])
        if i % 10 == 0:
            query, items = "the shared query here", ["alpha beta gamma delta", *items]
        rows.append({"id": i, "query": query, "items": items})
    inp = write(tmp_path / "rows.jsonl", jsonl(rows))
    whole, out = tmp_path / "whole.parquet", tmp_path / "scores.parquet"

    def args(path: Path) -> list[str]:
        return ["score", inp, "--model", bert_cross_encoder, "--out", str(path), "--window-rows", "4"]

    assert run_cli(Case(args(whole))).rc == 0
    stop_after(start(args(out)), Path(str(out) + ".partial"), 1)
    result = run_cli(Case(args(out) + ["--resume"]))
    assert result.rc == 0, result.stderr
    got, want = pq.read_table(out), pq.read_table(whole)
    assert got.select(["id", "scores", "num_tokens"]).equals(want.select(["id", "scores", "num_tokens"]))
    alone = write(tmp_path / "row10.jsonl", jsonl(rows[10:11]))
    assert (
        run_cli(Case(["score", alone, "--model", bert_cross_encoder, "--out", str(tmp_path / "alone.parquet")])).rc == 0
    )
    assert want["num_tokens"][10].as_py() < pq.read_table(tmp_path / "alone.parquet")["num_tokens"][0].as_py()  # reused


def test_bad_id_after_the_kept_rows_gives_the_uninterrupted_error(tmp_path, qwen3_seq_cls):
    """--skip-bad-rows: a row whose id kind differs from the kept rows' ids, met after --resume,
    has the error text an uninterrupted run writes (where the first id was), not the folder's."""
    from scorecli.config import ScoreConfig
    from scorecli.engine.checkpoint import Checkpoint
    from scorecli.engine.run import open_rows, run_score
    from scorecli.io.output import resolve_output

    rows = [{"query": "q", "items": ["a b", "c"]}] + [
        {"id": "nine" if i == 9 else i, "query": WORDS[i], "items": [WORDS[i + 1], WORDS[i + 2]]} for i in range(1, 12)
    ]
    inp = str(tmp_path / "rows.jsonl")
    Path(inp).write_bytes(jsonl(rows))
    cfg = ScoreConfig(model=qwen3_seq_cls, window_rows=2, skip_bad_rows=True)

    def run(out: str, resume: bool, stop: int | None = None) -> pa.Table:
        target = resolve_output(str(tmp_path / out), [inp])
        checkpoint = Checkpoint.open(target, cfg, [inp], resume)
        it = open_rows(cfg, [inp], None, checkpoint)
        if stop is not None:
            it = (row if n < stop else (_ for _ in ()).throw(KeyboardInterrupt) for n, row in enumerate(it))
        run_score(cfg, [inp], target, None, None, None, it, checkpoint)
        return pq.read_table(tmp_path / out)

    whole = run("whole.parquet", False)
    error = whole["error"].to_pylist()[9]
    assert "(first at " in error and "rows.jsonl:2)" in error
    with pytest.raises(KeyboardInterrupt):
        run("job.parquet", False, stop=6)
    assert run("job.parquet", True).equals(whole)


@pytest.mark.e2e
def test_every_json_line_has_the_keys_any_window_has(tmp_path, qwen3_seq_cls):
    """A JSON lines file made from windows of one row: the id and labels keys a later window's
    rows carry are in every line (null where a row has none), as the Parquet file's columns are."""
    rows = [{"query": "q", "items": ["x"]}, {"id": 5, "query": "q", "items": ["x", "y"], "labels": [1]}]
    inp = write(tmp_path / "in.jsonl", jsonl(rows))
    result = run_cli(
        Case(["score", inp, "--model", qwen3_seq_cls, "--out", str(tmp_path / "o.jsonl"), "--window-rows", "1"])
    )
    assert result.rc == 0, result.stderr
    lines = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [list(line) for line in lines] == [list(lines[1])] * 2 and "id" in lines[0] and "labels" in lines[0]
    assert lines[0]["id"] is None and lines[0]["labels"] is None and lines[1]["id"] == 5
