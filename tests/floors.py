"""The oldest releases pyproject.toml allows, for `make test-floors` (docs/development.md):

    python -m tests.floors            pip constraints, one `name==floor` a line
    python -m tests.floors --check    exit 1 unless the installed releases are those

The floors are the `>=` bounds of the dependencies and of the extras `make test-floors` installs
(the `dev` extra's own tools, pytest and the rest, are not floors: they install as they come).
torch is left out: the package index holds no CPU build of torch 2.5 (its Linux wheels are CUDA
builds), so the check runs under the torch `make install` pins.
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

EXTRAS = ("gguf", "onnx", "ray")
LEFT_OUT = {"torch"}


def floors(pyproject: Path = Path(__file__).resolve().parent.parent / "pyproject.toml") -> dict[str, str]:
    """name -> the release its `>=` bound names, for the dependencies and `EXTRAS`."""
    project = tomllib.loads(pyproject.read_text())["project"]
    specs = list(project["dependencies"])
    for extra in EXTRAS:
        specs += project["optional-dependencies"][extra]
    found = {}
    for spec in specs:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][0-9.]*)(?:\s*,.*)?", spec.strip())
        if not match:
            raise SystemExit(f"pyproject.toml: {spec!r} has no `>=` floor")
        if match[1] not in LEFT_OUT:
            found[match[1]] = match[2]
    return found


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


def check() -> int:
    """0 if every floor is installed at that release (1.26 is 1.26.0), else 1, naming the others."""
    wrong = []
    for name, floor in floors().items():
        try:
            have = version(name)
        except PackageNotFoundError:
            have = "not installed"
        want = _release(floor) + (0,) * (3 - len(_release(floor)))
        if have == "not installed" or _release(have) != want:
            wrong.append(f"{name}: {have}, the floor is {floor}")
    print("\n".join(wrong) or f"at the floors: {', '.join(f'{n} {f}' for n, f in floors().items())}")
    return 1 if wrong else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        raise SystemExit(check())
    print("\n".join(f"{name}=={floor}" for name, floor in floors().items()))
