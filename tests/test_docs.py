"""The docs hold together with the code: README's size and links, every flag of `scorecli score`
documented in docs/cli.md (and nothing documented there that the command lacks), with the default
and the choices the command has, and the README's offline quickstart commands run as written."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    out = set()
    for line in path.read_text().splitlines():
        if line.startswith("#") and not line.startswith("#!"):
            text = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return out


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_point_at_files_and_headings_that_exist(doc):
    broken = []
    for target in LINK.findall(doc.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    assert not broken, f"{doc.name}: broken links {broken}"


def _score_options() -> set[str]:
    import typer

    from scorecli.cli import app

    command = typer.main.get_command(app).commands["score"]  # type: ignore[attr-defined]
    return {opt for p in command.params for opt in (*p.opts, *p.secondary_opts) if opt.startswith("--")}


def test_every_score_flag_is_in_docs_cli_and_nothing_else():
    table = [line for line in (ROOT / "docs" / "cli.md").read_text().splitlines() if line.startswith("| `--")]
    documented = {flag for line in table for flag in re.findall(r"--[a-z][a-z0-9-]*", line.split(" | ")[0])}
    options = _score_options() - {"--help"}
    assert options - documented == set(), "flags of `scorecli score` missing from docs/cli.md's table"
    assert documented - options == set(), "docs/cli.md documents flags `scorecli score` does not have"


def _quickstart_commands() -> list[str]:
    """The README's `scorecli score sample_data/...` lines that need no network (bundled models)."""
    text = (ROOT / "README.md").read_text()
    lines = [m.strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S) for m in block.splitlines()]

    def offline(argv: list[str]) -> bool:  # no --model (the default), or a bundled model's short name
        return "--model" not in argv or "/" not in argv[argv.index("--model") + 1]

    return [line for line in lines if line.startswith("scorecli score sample_data/") and offline(shlex.split(line))]


def test_the_quickstart_has_offline_commands():
    cmds = _quickstart_commands()
    assert any("--model" not in c for c in cmds) and any("smollm2-judge" in c for c in cmds)


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("command", _quickstart_commands())
def test_readme_quickstart_command_runs_as_written(command, tmp_path):
    """As a new user types it, in a scratch folder holding sample_data/ (outputs land there)."""
    import shutil

    shutil.copytree(ROOT / "sample_data", tmp_path / "sample_data")
    argv = shlex.split(command)
    script = Path(sys.executable).with_name("scorecli")
    argv = [str(script), *argv[1:]] if script.exists() else [sys.executable, "-m", "scorecli", *argv[1:]]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = argv[argv.index("--out") + 1]
    assert (tmp_path / out).stat().st_size > 0


# flags whose default the command resolves after parsing (the parser's is None): what docs/cli.md
# states for them, checked against where the command takes it from
def _resolved_defaults() -> dict[str, object]:
    from scorecli import options
    from scorecli.model.gguf import default_cache_dir

    return {"--window-seconds": options.WINDOW_SECONDS, "--cache-dir": default_cache_dir()}


def _documented_default(cell: str) -> object:
    """What a default cell of docs/cli.md's table states, when it states one value: `x`, a number
    (`2048 on CPU` is not one), off or on; else NOTHING (`detected`, the model's, ...)."""
    cell = cell.strip()
    if m := re.fullmatch(r"`([^`]+)`", cell):
        return m.group(1)
    if m := re.fullmatch(r"(\d+)( \(none\))?", cell):
        return int(m.group(1))
    return {"off": False, "on": True}.get(cell, NOTHING)


NOTHING = object()


def test_docs_cli_states_each_flags_default_as_the_command_has_it():
    """A default docs/cli.md's table states (`auto`, 0, off, ...) is the parser's, or, for a flag
    the command resolves later, the value it resolves to; `--query-field`, `--items-field`,
    `--id-field` state theirs in the same order."""
    import typer

    from scorecli.cli import app

    params = {opt: p for p in typer.main.get_command(app).commands["score"].params for opt in p.opts}  # type: ignore[attr-defined]
    resolved = _resolved_defaults()
    wrong, checked = [], 0
    for line in (ROOT / "docs" / "cli.md").read_text().splitlines():
        if not line.startswith("| `--"):
            continue
        flags_cell, default_cell = line.strip("|").split(" | ")[:2]
        flags = [f for f in re.findall(r"--[a-z][a-z0-9-]*", flags_cell) if f in params and not f.startswith("--no-")]
        cells = re.findall(r"`[^`]+`", default_cell) if len(flags) > 1 else [default_cell]
        if len(flags) > 1 and len(cells) != len(flags):
            cells = [default_cell] * len(flags)
        for flag, cell in zip(flags, cells):
            stated = _documented_default(cell)
            if stated is NOTHING:
                continue
            actual = params[flag].default
            if actual is None and flag in resolved:
                actual = resolved[flag]
                stated = os.path.expanduser(stated) if isinstance(stated, str) else stated
            if isinstance(stated, bool):
                ok = actual is stated or (stated is False and actual is None)  # off: a flag not given
            else:
                ok = actual == stated or (isinstance(actual, float) and str(stated) == f"{actual:g}")
            checked += 1
            if not ok:
                wrong.append(f"{flag}: docs/cli.md says {cell.strip()}, the command has {actual!r}")
    assert checked >= 25 and not wrong, "\n".join(wrong)


def test_docs_cli_lists_every_choice_the_tables_declare():
    """`--kind`, `--attention` and `--runtime` take their choices from the tables (KINDS, BACKENDS,
    RUNTIMES): a kind, backend or runtime added there is one docs/cli.md's row names too."""
    from scorecli.attention.backends import BACKENDS
    from scorecli.kinds import KINDS
    from scorecli.runtimes import RUNTIMES

    rows = {
        line.split(" | ")[0].strip("| `"): line
        for line in (ROOT / "docs" / "cli.md").read_text().splitlines()
        if line.startswith("| `--")
    }
    missing = [
        f"{flag}: {name}"
        for flag, names in (("--kind", KINDS), ("--attention", ["auto", *BACKENDS]), ("--runtime", ["auto", *RUNTIMES]))
        for name in names
        if f"`{name}`" not in rows[flag]
    ]
    assert not missing, missing
