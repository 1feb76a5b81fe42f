"""Refused before any work, through the real console script: an output that is, holds or lies inside an input
(a dataset folder over its input shards, globs, symlinked folders, `..`, relative paths,
`<out>.partial/`, stdin and stdout redirected from or into an input), a folder of files scorecli
did not write, a zero-row Parquet input's id column, integer flags out of range, a --window-seconds
that is no finite number, an input field named as an output column, `bench`'s arguments, and
`--runtime auto` where ONNX Runtime cannot run (no `onnx` exporter, an unwritable HOME, a
truncated cached export). Each refused run: exit 2, one line, before the
model loads (the model path given does not exist where that is what shows it), nothing touched.

As in test_shell, the independent runs are declared up front and started together (two at a
time) by one module fixture; runs that depend on an earlier run are tests of their own.
"""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_cli import GOOD_LINE, SCORECLI, Result, _env, write

pytestmark = pytest.mark.e2e  # the console script (or Ray) end to end

BIG = str(2**63)  # one past int64: numpy overflowed on it after the model loaded


@dataclass
class Run:
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the test environment
    cwd: Path | None = None
    stdin: Path | None = None  # a file opened as standard input (`< file`)
    stdout: Path | None = None  # a file appended to as standard output (`>> file`)


@dataclass
class Expect:
    rc: int = 0
    error: list[str] = field(default_factory=list)  # fragments of the one error line
    untouched: list[Path] = field(default_factory=list)  # files and folders that must not change


def run(r: Run) -> Result:
    start = time.perf_counter()
    stdin = open(r.stdin, "rb") if r.stdin else subprocess.DEVNULL
    stdout = open(r.stdout, "ab") if r.stdout else subprocess.PIPE
    try:
        proc = subprocess.run(
            SCORECLI + r.args,
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            cwd=r.cwd,
            env=_env(**r.env),
            timeout=300,
        )
    finally:
        for f in (stdin, stdout):
            if hasattr(f, "close"):
                f.close()
    return Result(
        proc.returncode, proc.stdout or b"", proc.stderr.decode("utf-8", "replace"), time.perf_counter() - start
    )


def snapshot(paths: list[Path]) -> dict[str, bytes | None]:
    """Every file under `paths` (symlinks by their target's name) and its bytes."""
    out: dict[str, bytes | None] = {}
    for path in paths:
        if path.is_symlink():
            out[str(path)] = os.readlink(path).encode()
        elif path.is_dir():
            for sub in sorted(path.rglob("*")):
                out[str(sub)] = None if sub.is_dir() else sub.read_bytes()
        else:
            out[str(path)] = path.read_bytes() if path.exists() else None
    return out


def shards(folder: Path) -> list[Path]:
    """Input shards as many writers name them (no scorecli metadata)."""
    folder.mkdir(parents=True)
    out = []
    for k in range(2):
        rows = {"id": [10 * k + 1, 10 * k + 2], "query": ["a query", "q"], "items": [["one", "two"], ["three"]]}
        pq.write_table(pa.table(rows), folder / f"part-{k:05d}.parquet")
        out.append(folder / f"part-{k:05d}.parquet")
    return out


def shadow_onnx(folder: Path) -> str:
    """A folder for PYTHONPATH in which `import onnx` fails, as where only onnxruntime is installed."""
    write(folder / "onnx" / "__init__.py", b"raise ImportError(\"No module named 'onnx'\")\n")
    return str(folder)


def declare(tmp: Path, seq: str, cross: str) -> tuple[dict[str, Run], dict[str, Expect]]:
    runs: dict[str, Run] = {}
    expect: dict[str, Expect] = {}
    no_model = str(tmp / "no_such_model")
    good = Path(write(tmp / "good.jsonl", b"".join(GOOD_LINE % i for i in range(1, 4))))

    def add(
        name: str, inputs: list[str], out: str, extra: list[str] = (), exp: Expect | None = None, model: str = seq, **kw
    ) -> None:
        runs[name] = Run(["score", *inputs, "--out", out, "--model", model, "-q", *extra], **kw)
        expect[name] = exp or Expect()

    # item 1: every target a run writes against every input, before anything is written; each
    # case has its own shards (and a symlink to them), so that one run's damage shows in its test
    def own(name: str) -> tuple[Path, list[Path], list[Path]]:
        base = tmp / name
        parts = shards(base / "shards")
        (base / "link").symlink_to("shards")
        (base / "elsewhere").mkdir()
        return base, parts, [base]

    holds = ["holds the input", "part-00000.parquet"]
    base, parts, kept = own("over_folder")
    add(
        "dataset_over_its_input_folder",
        [str(parts[0].parent)],
        f"{base}/shards/",
        exp=Expect(2, [f"{base}/shards/", *holds], kept),
    )
    base, parts, kept = own("over_shard")
    add("dataset_over_one_input_shard", [str(parts[0])], f"{base}/shards/", exp=Expect(2, holds, kept))
    base, parts, kept = own("over_glob")
    add("dataset_over_a_glob", [f"{base}/shards/*.parquet"], f"{base}/shards/", exp=Expect(2, holds, kept))
    base, parts, kept = own("link_in")
    add("dataset_through_a_symlinked_input", [str(base / "link")], f"{base}/shards/", exp=Expect(2, holds, kept))
    base, parts, kept = own("link_out")
    add("dataset_through_a_symlinked_out", [f"{base}/shards"], f"{base}/link/", exp=Expect(2, holds, kept))
    base, parts, kept = own("dotdot")
    add("dataset_through_dotdot", [f"{base}/shards"], f"{base}/elsewhere/../shards/", exp=Expect(2, holds, kept))
    base, parts, kept = own("relative")
    add("dataset_relative", ["shards"], "./shards", exp=Expect(2, holds, kept), cwd=base)
    inside = ["lies inside the input folder"]
    base, parts, kept = own("file_inside")
    add(
        "file_inside_the_input_folder",
        [f"{base}/shards"],
        f"{base}/shards/scores.parquet",
        exp=Expect(2, [f"{base}/shards/scores.parquet", *inside], kept),
    )
    base, parts, kept = own("dataset_inside")
    add("dataset_inside_the_input_folder", [f"{base}/shards"], f"{base}/shards/out/", exp=Expect(2, inside, kept))
    partial = tmp / "p" / "scores.parquet.partial"
    rows = Path(write(partial / "rows.jsonl", good.read_bytes()))
    add(
        "input_inside_the_parts_folder",
        [str(rows)],
        str(tmp / "p" / "scores.parquet"),
        exp=Expect(2, ["its parts folder", "holds the input", "rows.jsonl"], [partial]),
    )
    add(
        "parts_folder_is_the_input_folder",
        [str(partial)],
        str(tmp / "p" / "scores.parquet"),
        exp=Expect(2, ["its parts folder", "holds the input"], [partial]),
    )
    copy = Path(write(tmp / "stdin" / "rows.jsonl", good.read_bytes()))
    add("stdin_redirected_from_the_output", ["-"], str(copy), exp=Expect(2, ["is the input -"], [copy]), stdin=copy)
    copy = Path(write(tmp / "stdout" / "rows.jsonl", good.read_bytes()))
    add(
        "stdout_appended_to_an_input",
        [str(copy)],
        "-",
        exp=Expect(2, ["standard output is the input"], [copy]),
        stdout=copy,
    )
    not_ours = ["files scorecli did not write", "part-00000.parquet"]
    base, parts, kept = own("theirs")
    add("dataset_into_another_writers_parts", [str(good)], f"{base}/shards/", exp=Expect(2, not_ours, kept))
    base, parts, kept = own("theirs_stdin")
    add("stdin_dataset_into_another_writers_parts", ["-"], f"{base}/shards/", exp=Expect(2, not_ours, kept), stdin=good)
    notes = Path(write(tmp / "q" / "scores.parquet.partial" / "notes.txt", b"mine\n"))
    add(
        "file_whose_parts_folder_holds_other_files",
        [str(good)],
        str(tmp / "q" / "scores.parquet"),
        exp=Expect(2, ["files scorecli did not write", "notes.txt"], [notes.parent]),
    )
    add("stdin_to_a_new_dataset", ["-"], f"{tmp / 'fresh'}/", stdin=good)
    # an output its input's glob would list: the next run of the same command line would read it
    globbed = Path(write(tmp / "g" / "a.jsonl", good.read_bytes()))
    pattern = ["the input pattern", "a later run would read it as input"]
    add(
        "file_the_input_glob_matches",
        [str(tmp / "g" / "*.jsonl")],
        str(tmp / "g" / "scores.jsonl"),
        exp=Expect(2, pattern, [globbed.parent]),
    )
    add(
        "file_a_wildcard_glob_matches",
        [f"{tmp}/g/*"],
        str(tmp / "g" / "s.parquet"),
        exp=Expect(2, pattern, [globbed.parent]),
    )
    nested = Path(write(tmp / "g2" / "sub" / "a.jsonl", good.read_bytes()))
    add(
        "dataset_parts_the_input_glob_matches",
        [f"{tmp}/g2/*/*"],
        f"{tmp}/g2/ds/",
        exp=Expect(2, pattern, [nested.parent.parent]),
    )
    deep = Path(write(tmp / "g4" / "sub" / "a.jsonl", good.read_bytes()))
    add(
        "file_a_recursive_glob_matches",
        [f"{tmp}/g4/**/*.jsonl"],
        f"{tmp}/g4/sub/s.jsonl",
        exp=Expect(2, pattern, [deep.parent.parent]),
    )
    # a file's parts: a killed run leaves them, and the glob would read them into its --resume
    parted = shards(tmp / "g5" / "sub")
    add(
        "parts_folder_a_recursive_glob_matches",
        [f"{tmp}/g5/**/*.parquet"],
        f"{tmp}/g5/scores.jsonl",
        exp=Expect(2, ["its parts folder", "scores.jsonl.partial/", "the input pattern"], [parted[0].parent.parent]),
    )
    add("beside_a_glob_that_does_not_match", [str(tmp / "g3" / "*.jsonl")], str(tmp / "g3" / "s.parquet"))
    write(tmp / "g3" / "a.jsonl", good.read_bytes())

    # item 3: a zero-row Parquet input keeps its id column (and its type)
    schema = pa.schema([("id", pa.int32()), ("query", pa.string()), ("items", pa.list_(pa.string()))])
    pq.write_table(schema.empty_table(), tmp / "empty.parquet")
    pq.write_table(pa.table({"id": pa.array([7], pa.int32()), "query": ["q"], "items": [["a"]]}), tmp / "one.parquet")
    add("zero_rows", [str(tmp / "empty.parquet")], str(tmp / "zero.parquet"))
    add("zero_rows_dataset", [str(tmp / "empty.parquet")], f"{tmp / 'zero_dataset'}/")
    add("one_row", [str(tmp / "one.parquet")], str(tmp / "one_out.parquet"))

    # item 4: integer flags, range-checked while parsing (typer's message), before the model loads
    for flag, value in [
        ("--top-k", BIG),
        ("--window-rows", BIG),
        ("--max-batch-tokens", BIG),
        ("--max-seq-len", BIG),
        ("--chunk-tokens", BIG),
        ("--chunk-overlap", "-1"),
        ("--num-workers", BIG),
    ]:
        add(
            f"flag{flag}",
            [str(good)],
            str(tmp / "flags.parquet"),
            [flag, value],
            Expect(2, [f"Invalid value for '{flag}'"]),
            model=no_model,
        )
    # a number of seconds that is none (nan) or no window size can be made of (inf, 1e309 read as
    # inf): inf crashed after the first windows were kept, nan was called too small
    for value in ("nan", "inf", "1e309"):
        add(
            f"flag--window-seconds-{value}",
            [str(good)],
            str(tmp / "flags.parquet"),
            ["--window-seconds", value],
            Expect(2, ["Invalid value for '--window-seconds': expected a finite number of seconds"]),
            model=no_model,
        )
    # --ray-address without --engine ray was ignored (--num-workers is refused); $RAY_ADDRESS, set
    # for other tools, is not refused
    add(
        "flag--ray-address",
        [str(good)],
        str(tmp / "flags.parquet"),
        ["--ray-address", "1.2.3.4:6379"],
        Expect(2, ["--ray-address needs --engine ray"]),
        model=no_model,
    )
    add(
        "ray_address_from_env",
        [str(good)],
        str(tmp / "flags.parquet"),
        exp=Expect(2, ["cannot load model"]),
        model=no_model,
        env={"RAY_ADDRESS": "1.2.3.4:6379"},
    )
    add(
        "flag--label-token-ids",
        [str(good)],
        str(tmp / "flags.parquet"),
        ["--label-token-ids", f"1,{BIG}"],
        Expect(2, [f"--label-token-ids: {BIG} is not a token id"]),
        model=no_model,
    )

    # an input field named as a column the output has of its own: its values replaced the scores
    # (--labels-field score: metrics of 1.0) or the run crashed
    for flag, name, what in [
        ("--labels-field", "score", "--labels-field score: the output has a column 'score' of its own"),
        ("--labels-field", "num_tokens", "--labels-field num_tokens: the output has a column"),
        ("--id-field", "scores", "--id-field scores: the output has a column 'scores' of its own"),
        ("--id-field", "labels", "--id-field and --labels-field are both 'labels'"),
    ]:
        add(
            f"field{flag}-{name}",
            [str(good)],
            str(tmp / "fields.parquet"),
            [flag, name],
            Expect(2, [what]),
            model=no_model,
        )

    # item 5: bench's arguments, checked before any work
    for name, extra, what in [
        ("rows", ["--rows", "-1"], "--rows"),
        ("repeats", ["--repeats", "0"], "--repeats"),
        ("items", ["--items", BIG], "--items"),
        ("attention", ["--attention", "sdpa,nope"], "nope"),
        ("modes", ["--modes", "mis,both"], "expected one of mis, single"),
        ("peak", ["--peak-tflops", "0"], "--peak-tflops"),
        # whatever the model: it was refused once the model had loaded (~15 s for a real one)
        ("device", ["--attention", "sdpa,flashinfer", "--device", "cpu"], "--attention flashinfer: it needs a CUDA"),
        ("json", ["--json", str(tmp / "nonexistent" / "b.json")], "--json"),
    ]:
        runs[f"bench_{name}"] = Run(["bench", "--model", no_model, *extra])
        expect[f"bench_{name}"] = Expect(2, [what])

    # item 2: --runtime auto where ONNX Runtime cannot run; explicit choices that cannot
    no_onnx = {"PYTHONPATH": shadow_onnx(tmp / "shadow")}
    home_file = Path(write(tmp / "home_file", b"HOME cannot be made here\n"))
    read_only = {"HOME": str(home_file / "home"), "XDG_CACHE_HOME": str(home_file / "cache")}
    add("torch", [str(good)], str(tmp / "torch.parquet"), ["--runtime", "torch"], model=cross)
    add(
        "auto_without_onnx",
        [str(good)],
        str(tmp / "no_onnx.parquet"),
        ["--cache-dir", str(tmp / "cache_a")],
        model=cross,
        env=no_onnx,
    )
    add("auto_with_a_read_only_home", [str(good)], str(tmp / "read_only.parquet"), model=cross, env=read_only)
    runs["inspect_check_without_onnx"] = Run(
        ["inspect", cross, "--check", "--cache-dir", str(tmp / "cache_i")], env=no_onnx
    )
    expect["inspect_check_without_onnx"] = Expect()
    add(
        "onnx_without_onnx",
        [str(good)],
        str(tmp / "x.parquet"),
        ["--runtime", "onnx"],
        Expect(2, ["--runtime onnx needs onnx"]),
        model=no_model,
        env=no_onnx,
    )
    add(
        "unwritable_cache_dir",
        [str(good)],
        str(tmp / "x.parquet"),
        ["--cache-dir", str(home_file / "c")],
        Expect(2, ["--cache-dir", "not a directory"]),
        model=no_model,
    )
    add(
        "unwritable_cache_dir_from_env",
        [str(good)],
        str(tmp / "x.parquet"),
        [],
        Expect(2, ["$SCORECLI_CACHE_DIR=", "cannot write the cache there"]),  # named as given (issue 35)
        model=no_model,
        env={"SCORECLI_CACHE_DIR": str(home_file / "c")},
    )
    # a score cache (kept across runs) inside what a run writes and replaces, or holding it
    for name, out, cache in (
        ("score_cache_in_partial", tmp / "sc1" / "z.parquet", tmp / "sc1" / "z.parquet.partial"),
        ("score_cache_is_the_dataset", tmp / "sc2" / "dd", tmp / "sc2" / "dd" / "cache"),
        ("score_cache_holds_the_output", tmp / "sc3" / "cache" / "z.parquet", tmp / "sc3" / "cache"),
    ):
        out.parent.mkdir(parents=True, exist_ok=True)
        shown = str(out) + ("/" if name == "score_cache_is_the_dataset" else "")
        add(
            name, [str(good)], shown, ["--score-cache", str(cache)], Expect(2, ["--score-cache", "overlaps the output"])
        )
    return runs, expect


@dataclass
class Runs:
    tmp: Path
    runs: dict[str, Run]
    expect: dict[str, Expect]
    results: dict[str, Result]
    before: dict[str, dict[str, bytes | None]]  # what must stay untouched, as it was


@pytest.fixture(scope="module")
def runs(tmp_path_factory, qwen3_seq_cls, bert_cross_encoder) -> Runs:
    tmp = tmp_path_factory.mktemp("hardening3")
    declared, expect = declare(tmp, qwen3_seq_cls, bert_cross_encoder)
    before = {name: snapshot(e.untouched) for name, e in expect.items() if e.untouched}
    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        results = dict(zip(declared, pool.map(run, declared.values())))
    return Runs(tmp, declared, expect, results, before)


REFUSED = [
    "dataset_over_its_input_folder",
    "dataset_over_one_input_shard",
    "dataset_over_a_glob",
    "dataset_through_a_symlinked_input",
    "dataset_through_a_symlinked_out",
    "dataset_through_dotdot",
    "dataset_relative",
    "file_inside_the_input_folder",
    "dataset_inside_the_input_folder",
    "input_inside_the_parts_folder",
    "parts_folder_is_the_input_folder",
    "stdin_redirected_from_the_output",
    "file_the_input_glob_matches",
    "file_a_wildcard_glob_matches",
    "dataset_parts_the_input_glob_matches",
    "file_a_recursive_glob_matches",
    "parts_folder_a_recursive_glob_matches",
    "stdout_appended_to_an_input",
    "dataset_into_another_writers_parts",
    "stdin_dataset_into_another_writers_parts",
    "file_whose_parts_folder_holds_other_files",
    "flag--top-k",
    "flag--window-rows",
    "flag--max-batch-tokens",
    "flag--max-seq-len",
    "flag--chunk-tokens",
    "flag--chunk-overlap",
    "flag--num-workers",
    "flag--window-seconds-nan",
    "flag--window-seconds-inf",
    "flag--window-seconds-1e309",
    "flag--label-token-ids",
    "flag--ray-address",
    "ray_address_from_env",
    "field--labels-field-score",
    "field--labels-field-num_tokens",
    "field--id-field-scores",
    "field--id-field-labels",
    "bench_rows",
    "bench_repeats",
    "bench_items",
    "bench_attention",
    "bench_modes",
    "bench_peak",
    "bench_device",
    "bench_json",
    "onnx_without_onnx",
    "unwritable_cache_dir",
    "unwritable_cache_dir_from_env",
    "score_cache_in_partial",
    "score_cache_is_the_dataset",
    "score_cache_holds_the_output",
]


@pytest.mark.parametrize("name", REFUSED)
def test_refused_with_one_line_before_any_work(runs, name):
    result, exp = runs.results[name], runs.expect[name]
    assert result.rc == exp.rc == 2, result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    for fragment in exp.error:
        assert fragment in result.stderr, result.stderr
    assert result.stdout == b""
    args = runs.runs[name].args
    out = args[args.index("--out") + 1] if "--out" in args else None
    if exp.untouched:
        assert snapshot(exp.untouched) == runs.before[name]
    elif out and out != "-":
        assert not os.path.lexists(out), out


def ok(runs: Runs, name: str) -> Result:
    result = runs.results[name]
    assert result.rc == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result


# ---- item 1: outputs and inputs ------------------------------------------------------------


def test_an_output_beside_a_glob_that_does_not_match_it_is_written(runs):
    ok(runs, "beside_a_glob_that_does_not_match")
    assert pq.read_table(runs.tmp / "g3" / "s.parquet")["id"].to_pylist() == [1, 2, 3]


def test_stdin_into_a_new_folder_writes_a_dataset(runs):
    ok(runs, "stdin_to_a_new_dataset")
    folder = runs.tmp / "fresh"
    names = sorted(os.listdir(folder))  # a folder, not a file named fresh
    assert names[0] == "_SUCCESS" and names[1:] == [f"part-{k:05d}.parquet" for k in range(len(names) - 1)]
    assert pq.read_table(folder)["id"].to_pylist() == [1, 2, 3]


@pytest.mark.parametrize("command", ["score", "inspect", "bench"])
def test_a_deleted_current_directory_is_refused_in_one_line(tmp_path, bert_cross_encoder, command):
    """Run from a directory deleted after the shell entered it, torch's MKL stopped the process
    ("Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so", three times, though every path was
    absolute) and a relative --out was a FileNotFoundError (exit 1); now one line says why."""
    good = write(tmp_path / "good.jsonl", b"".join(GOOD_LINE % i for i in range(1, 3)))
    args = {
        "score": ["score", good, "--out", str(tmp_path / "o.jsonl"), "--model", bert_cross_encoder],
        "inspect": ["inspect", bert_cross_encoder],
        "bench": ["bench", "--model", bert_cross_encoder, "--rows", "1", "--items", "1"],
    }[command]
    gone = tmp_path / "gone"
    gone.mkdir()
    shell = 'cd "$1" && rmdir "$1" && shift && exec "$@"'
    proc = subprocess.run(
        ["sh", "-c", shell, "sh", str(gone), *SCORECLI, *args], capture_output=True, env=_env(), timeout=120
    )
    stderr = proc.stderr.decode()
    assert proc.returncode == 2 and stderr.count("\n") == 1, stderr
    assert stderr.startswith("error: the current directory no longer exists"), stderr
    assert sorted(os.listdir(tmp_path)) == ["good.jsonl"]


def test_a_folder_of_scorecli_parts_is_replaced_by_the_next_run(tmp_path, qwen3_seq_cls):
    """The dataset rule refuses others' files only: scorecli's own earlier output is replaced."""
    good = write(tmp_path / "good.jsonl", b"".join(GOOD_LINE % i for i in range(1, 5)))
    out = f"{tmp_path / 'daily'}/"
    for window in ("1", "3"):
        result = run(Run(["score", good, "--out", out, "--model", qwen3_seq_cls, "-q", "--window-rows", window]))
        assert result.rc == 0 and result.stderr == "", result.stderr
    assert sorted(os.listdir(tmp_path / "daily")) == ["_SUCCESS", "part-00000.parquet", "part-00001.parquet"]


# ---- item 3: zero rows ---------------------------------------------------------------------


def test_zero_row_parquet_keeps_the_id_column(runs):
    for name in ("zero_rows", "zero_rows_dataset", "one_row"):
        ok(runs, name)
    zero = pq.read_table(runs.tmp / "zero.parquet")
    one = pq.read_table(runs.tmp / "one_out.parquet")
    assert zero.num_rows == 0 and zero.schema.field("id").type == pa.int32()
    assert zero.schema.remove_metadata() == one.schema.remove_metadata()  # a job's outputs union
    assert pa.concat_tables([zero, one.replace_schema_metadata(zero.schema.metadata)]).num_rows == 1
    part = pq.read_table(runs.tmp / "zero_dataset" / "part-00000.parquet")
    assert part.schema.remove_metadata() == one.schema.remove_metadata()


# ---- item 2: --runtime auto ----------------------------------------------------------------


def fallback_line(result: Result) -> str:
    """The run's one line: a warning that names why ONNX Runtime cannot run; nothing else."""
    lines = result.lines()
    assert len(lines) == 1, result.stderr
    assert (
        lines[0].startswith("warning: --runtime auto: ONNX Runtime cannot run here (") and "running torch" in lines[0]
    )
    assert "onnxruntime:" not in result.stderr and "\x1b[" not in result.stderr  # no telemetry line, no colours
    return lines[0]


def same_scores(a: Path, b: Path) -> None:
    left, right = pq.read_table(a), pq.read_table(b)
    assert left["scores"].to_pylist() == right["scores"].to_pylist()
    assert left.schema.metadata[b"runtime"] == right.schema.metadata[b"runtime"] == b"torch"


def test_auto_without_the_onnx_exporter_runs_torch(runs):
    ok(runs, "torch")
    assert "onnx" in fallback_line(ok(runs, "auto_without_onnx"))
    same_scores(runs.tmp / "no_onnx.parquet", runs.tmp / "torch.parquet")


def test_inspect_check_says_the_fallback_in_one_line(runs):
    result = ok(runs, "inspect_check_without_onnx")
    assert "onnx" in fallback_line(result) and b"self-check:     passed" in result.stdout


def test_auto_with_a_home_that_cannot_be_written_runs_torch_quietly(runs):
    assert "cannot cache" in fallback_line(ok(runs, "auto_with_a_read_only_home"))
    same_scores(runs.tmp / "read_only.parquet", runs.tmp / "torch.parquet")


def test_a_truncated_cached_export_is_rebuilt_or_bypassed(tmp_path, bert_cross_encoder):
    good = write(tmp_path / "good.jsonl", b"".join(GOOD_LINE % i for i in range(1, 4)))
    cache = tmp_path / "cache"

    def score(out: str, *extra: str, env: dict | None = None) -> Result:
        return run(
            Run(
                [
                    "score",
                    good,
                    "--out",
                    str(tmp_path / out),
                    "--model",
                    bert_cross_encoder,
                    "-q",
                    "--cache-dir",
                    str(cache),
                    *extra,
                ],
                env=env or {},
            )
        )

    def truncate() -> Path:
        (export,) = cache.glob("onnx/*/model.onnx")
        export.write_bytes(export.read_bytes()[:1000])  # a full disk, a killed copy
        return export

    from tests.auto_runtime import keep_verdict

    keep_verdict(bert_cross_encoder, cache, "onnx")  # auto runs ONNX Runtime for this model here
    first = score("first.parquet")
    assert first.rc == 0 and first.stderr == "", first.stderr
    expected = pq.read_table(tmp_path / "first.parquet")
    assert expected.schema.metadata[b"runtime"] == b"onnx"
    for runtime in ("auto", "onnx"):  # rebuilt, silently: the entry was scorecli's own
        export = truncate()
        again = score(f"{runtime}.parquet", "--runtime", runtime)
        assert again.rc == 0 and again.stderr == "", again.stderr
        assert pq.read_table(tmp_path / f"{runtime}.parquet")["scores"].equals(expected["scores"])
        assert export.stat().st_size > 1000
    truncate()  # and where it cannot be rebuilt (no exporter): bypassed, torch scores
    shadow = {"PYTHONPATH": shadow_onnx(tmp_path / "shadow")}
    bypassed = score("bypassed.parquet", env=shadow)
    assert bypassed.rc == 0, bypassed.stderr
    assert "onnx" in fallback_line(bypassed)
    torch = score("torch.parquet", "--runtime", "torch")
    assert torch.rc == 0, torch.stderr
    same_scores(tmp_path / "bypassed.parquet", tmp_path / "torch.parquet")
