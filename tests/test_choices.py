"""Every flag's choices come from the table that declares them (STYLE habit 17): no attention
backend, kind, URL scheme or runtime is named in the command line's modules (`cli*.py`) or
`options.py`, `--help` lists what the tables hold, and each `score` flag named as a `ScoreConfig`
field is passed to it by name."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path

from typer.testing import CliRunner

from scorecli import cli, cli_score
from scorecli.attention.backends import BACKENDS
from scorecli.config import ScoreConfig
from scorecli.io.readers import FORMATS
from scorecli.io.schemes import SCHEMES, listed
from scorecli.kinds import KINDS
from scorecli.runtimes import RUNTIMES

ROOT = Path(__file__).resolve().parents[1] / "scorecli"
# names that are ordinary words in these modules' prose as well: the torch runtime's is the library's
# (`torch.compile`, "torch is imported only inside commands"), the embedding kind's a kind of model
# ("rerankers, classifiers, embedding and reward models"); these are caught in a list of choices
SHARED_WORDS = {"torch", "embedding"}


def _strings(path: Path) -> list[tuple[int, str]]:
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def _names() -> dict[str, str]:
    """Each choice the tables declare -> the pattern that finds it written in text."""
    words = {*BACKENDS, *KINDS, *RUNTIMES}
    found = {name: rf"(?<![\w-]){re.escape(name)}(?![\w-])" for name in words - SHARED_WORDS}
    found |= {
        name: rf"\|\s*{re.escape(name)}(?![\w-])|(?<![\w-]){re.escape(name)}\s*\|" for name in words & SHARED_WORDS
    }
    found |= {f"{scheme}://": rf"(?<![\w-]){re.escape(scheme)}://" for scheme in SCHEMES}
    return found


def test_cli_and_options_name_no_backend_kind_scheme_or_runtime():
    wrong = [
        f"{module}:{line}: {name}"
        for module in (*sorted(path.name for path in ROOT.glob("cli*.py")), "options.py")
        for line, text in _strings(ROOT / module)
        for name, pattern in _names().items()
        if re.search(pattern, text)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_check_finds_a_name_typed_by_hand(tmp_path):
    typed = tmp_path / "options.py"
    typed.write_text('HELP = "auto | flashinfer | sdpa | torch"\nURLS = "s3:// or gs://"\nOK = "torch.compile"\n')
    found = {name for _, text in _strings(typed) for name, p in _names().items() if re.search(p, text)}
    assert found == {"flashinfer", "sdpa", "torch", "s3://", "gs://"}


def test_help_lists_what_the_tables_hold():
    text = " ".join(CliRunner().invoke(cli.app, ["score", "--help"], terminal_width=200).output.split())
    for name in [*BACKENDS, *KINDS, *RUNTIMES, *listed(), *(f.name for f in FORMATS)]:
        assert name in text, name
    check = " ".join(CliRunner().invoke(cli.app, ["inspect", "--help"], terminal_width=200).output.split())
    assert all(name in check for name in BACKENDS)


def test_each_score_flag_named_as_a_config_field_is_passed_to_it():
    """`score` builds its ScoreConfig keyword by keyword; a flag named as a field that the call
    leaves out would be silently ignored."""
    call = next(
        node
        for node in ast.walk(ast.parse(inspect.getsource(cli_score.score)))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "ScoreConfig"
    )
    given = {keyword.arg for keyword in call.keywords}
    flags = set(inspect.signature(cli_score.score).parameters)
    assert flags & {field.name for field in dataclasses.fields(ScoreConfig)} <= given
