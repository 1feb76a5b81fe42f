"""A kind is one module and one `KINDS` entry (STYLE habit 20): no module compares a kind's name
except the module of its own family (and the table that declares it). Checked on the source, so a
`kind == "..."` that slips into the scorer, the loader, inspect or another family fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from scorecli.kinds import HEADS, KINDS, POOLINGS

ROOT = Path(__file__).resolve().parents[1] / "scorecli"
TABLE = ROOT / "kinds" / "__init__.py"


def _owner(kind: str) -> Path:
    module = KINDS[kind].family.split(":")[0]
    return ROOT.parent / (module.replace(".", "/") + ".py")


def _compared_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, string) of every string constant an `==`, `!=`, `in` or `not in` compares, alone or
    in a tuple, list or set, and of every `case "..."` pattern."""
    found = []
    for node in ast.walk(tree):
        operands: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        for operand in operands:
            elements = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
            found += [(e.lineno, e.value) for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if isinstance(node, ast.MatchValue) and isinstance(node.value, ast.Constant):
            found.append((node.value.lineno, node.value.value))
    return found


def violations(root: Path = ROOT) -> list[str]:
    """'file:line: kind' for every comparison with a kind's name outside that kind's own module."""
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for line, text in _compared_names(tree):
            if text in KINDS and path not in (_owner(text), TABLE):
                out.append(f"{path.relative_to(root.parent)}:{line}: {text!r}")
    return out


def test_no_kind_name_is_compared_outside_its_own_module():
    assert violations() == []


def test_the_check_finds_a_comparison_outside_the_owner(tmp_path):
    """The scan sees a kind's name compared in another module (`==`, `in` a tuple, a `case`), and
    not in the kind's own module."""
    package = tmp_path / "scorecli"
    (package / "kinds").mkdir(parents=True)
    (package / "scorer.py").write_text(
        'def f(kind):\n    if kind == "embedding":\n        return 1\n    return kind in ("x", "causal-lm")\n'
        'def g(kind):\n    match kind:\n        case "cross-encoder":\n            return 2\n'
    )
    found = violations(package)
    assert [v.split(": ")[1] for v in found] == ["'embedding'", "'causal-lm'", "'cross-encoder'"], found


def test_every_kind_declares_a_known_pooling_and_head_and_a_family_with_the_hooks():
    from scorecli.kinds import FamilyDefaults, family_class

    for kind, info in KINDS.items():
        assert info.pooling in POOLINGS and info.head in HEADS and info.help, kind
        family = family_class(kind)
        assert issubclass(family, FamilyDefaults), kind
        for hook in ("detects", "resolve", "inspect_lines"):
            assert getattr(family, hook).__func__ is not getattr(FamilyDefaults, hook).__func__, (kind, hook)


def test_kind_help_lists_every_kind():
    from scorecli.options import FLAGS

    assert all(kind in FLAGS["--kind"][2] for kind in KINDS)


def test_every_family_and_backend_is_held_to_its_protocol():
    """mypy checks the families and backends that kinds/conformance.py and attention/conformance.py
    name against `Family` and `AttentionBackend`: each names every entry of its table."""
    from scorecli.attention.backends import BACKENDS

    families = (ROOT / "kinds" / "conformance.py").read_text()
    assert all(info.family.split(":")[1] in families for info in KINDS.values())
    backends = (ROOT / "attention" / "conformance.py").read_text()
    assert all(entry.factory.split(":")[1] in backends for entry in BACKENDS.values())
