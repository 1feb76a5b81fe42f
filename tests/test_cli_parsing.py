"""Command lines the parser would read as something else than what was meant (docs/cli.md: Exit codes):
a short option glued to a word that spells a long option (`-out x` is `-o ut` and a second input
`x`) is refused with one line suggesting the long option, before anything is read or written."""

from __future__ import annotations

import os
import subprocess

import pytest

from scorecli.cli import app
from scorecli.errors import UsageError
from tests.test_cli import GOOD_LINE, SCORECLI, TIMEOUT, Case, _env, run_cli, write


@pytest.mark.e2e
@pytest.mark.parametrize(
    "words,expect",
    [
        (["-out", "prev.parquet"], "--out"),
        (["-out=prev.parquet"], "--out=prev.parquet"),
        (["-o", "s.jsonl", "-model", "tiny"], "--model"),
        (["-o", "s.jsonl", "-top-k", "2"], "--top-k"),
        (["-o=s.jsonl"], "-o s.jsonl"),
    ],
    ids=["-out", "-out=", "-model", "-top-k", "-o="],
)
def test_a_glued_short_option_is_a_usage_error(tmp_path, words, expect):
    write(tmp_path / "q.jsonl", GOOD_LINE % 1)
    # in a folder of its own: misread, `-out x` writes a file named `ut` where it runs
    run = subprocess.run(
        [*SCORECLI, "score", "q.jsonl", *words], cwd=tmp_path, capture_output=True, env=_env(), timeout=TIMEOUT
    )
    lines = run.stderr.decode().splitlines()
    assert run.returncode == 2, lines
    glued = next(w for w in words if w.startswith("-") and len(w) > 2)
    assert len(lines) == 1 and lines[0].startswith(f"error: {glued}: ")
    assert f"did you mean {expect}?" in lines[0] or f"({expect})" in lines[0]
    assert os.listdir(tmp_path) == ["q.jsonl"]


def _params(command: str):
    import typer

    return typer.main.get_command(app).commands[command].params


@pytest.mark.parametrize(
    "words",
    [
        ["q.jsonl", "--instruction", "-out", "-o", "s.jsonl"],  # an option's value, whatever it spells
        ["q.jsonl", "-o", "-model"],  # the output's name
        ["q.jsonl", "--out=s.jsonl", "-q", "-m", "tiny"],
        ["q.jsonl", "-os.jsonl"],  # a short option glued to a value that is no option's name
        ["-o", "s.jsonl", "--", "-out"],  # after --: inputs
    ],
)
def test_what_is_not_a_glued_option_is_left_to_the_parser(words):
    from scorecli.argv import check_glued

    check_glued(_params("score"), words)


def test_every_command_checks(tmp_path):
    from scorecli.argv import check_glued

    with pytest.raises(UsageError, match="--json"):
        check_glued(_params("bench"), ["-json", "x"])
    with pytest.raises(UsageError, match="--model"):
        check_glued(_params("bench"), ["-model", "x"])


def test_version_prints_the_version():
    from scorecli.version import __version__

    result = run_cli(Case(["--version"]))
    assert result.rc == 0 and result.stdout.decode().strip() == f"scorecli {__version__}", result.stderr
