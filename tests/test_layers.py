"""Imports show the layers (STYLE habit 22): the table under "Layers" in docs/ARCHITECTURE.md says
which modules form each layer, top first; a module imports only from its own layer and the layers
below it, nothing imports in a circle (counting imports under `if TYPE_CHECKING:` and inside
functions), and an import inside a function is of a scorecli module that loads a heavy or
optional package (torch, transformers, pyarrow, ray, onnx, flashinfer, ...) that the importing
module does not load already.
Read from the source with `ast` (no module is imported), so it runs in `make lint`."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "scorecli"
# what an import inside a function may put off: packages that take long to import, or that a run
# may not have installed
HEAVY = {
    "torch",
    "transformers",
    "tokenizers",
    "sentence_transformers",
    "pyarrow",
    "ray",
    "onnx",
    "onnxruntime",
    "flashinfer",
    "huggingface_hub",
    "gguf",
    "accelerate",
}
# the modules that `config` (and so `scorecli --help`) imports must not load these
TORCH = {"torch", "transformers", "tokenizers", "sentence_transformers"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _exports(module: str) -> dict[str, str]:
    """A package's names loaded on first use (`_EXPORTS = {"name": "submodule"}` and a module
    `__getattr__`, as `scorecli.attention` has): name -> the module that defines it."""
    tree = ast.parse(MODULES[module].read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["_EXPORTS"]:
            table = ast.literal_eval(node.value)
            return {name: f"{module}.{sub}" for name, sub in table.items()}
    return {}


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """What an import statement of `module` imports: scorecli modules by name, others by their
    top-level package."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    out = []
    for alias in node.names:
        full = f"{base}.{alias.name}"
        out.append(full if full in MODULES else _exports(base).get(alias.name, base) if base in MODULES else base)
    return out


def _owner(name: str) -> str:
    """The scorecli module `name` (a dotted name it imports) is in, or its top-level package."""
    if not name.startswith("scorecli"):
        return name.split(".")[0]
    while name not in MODULES:
        name = name.rsplit(".", 1)[0]
    return name


def _statements(module: str) -> list[tuple[str, str, int]]:
    """(imported: a scorecli module, or another top-level package; where; line) of every import in
    `module`, `where` being `top`, `type` (under `if TYPE_CHECKING:`), `lazy` (a package's names
    loaded on first use by its module `__getattr__`, PEP 562) or `function`."""
    tree = ast.parse(MODULES[module].read_text())
    found: list[tuple[str, str, int]] = []

    def walk(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, ast.FunctionDef) and child.name == "__getattr__" and node is tree:
                inner = "lazy"
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inner = "function"
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test) and where == "top":
                inner = "type"
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend((t, inner, child.lineno) for t in map(_owner, _targets(module, child)) if t != module)
            walk(child, inner)

    walk(tree, "top")
    return found


@cache
def imports() -> dict[str, dict[str, str]]:
    """module -> {what it imports: where, the first of `top`, `type`, `lazy`, `function` that holds}."""
    rank = ("top", "type", "lazy", "function")
    graph: dict[str, dict[str, str]] = {}
    for module in MODULES:
        found: dict[str, str] = {}
        for target, where, _ in _statements(module):
            if target not in found or rank.index(where) < rank.index(found[target]):
                found[target] = where
        graph[module] = found
    return graph


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


@cache
def layers() -> list[tuple[str, list[str]]]:
    """(layer, its modules as the page writes them: `cli.py`, `engine/`, `kinds/__init__.py`),
    top first, from the table under "## Layers" in docs/ARCHITECTURE.md."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [_cells(line) for line in section.splitlines() if line.startswith("|")][2:]  # after the head and rule
    return [(row[0], re.findall(r"`([^`]+)`", row[1])) for row in rows]


def _named(written: str) -> str:
    """A module or package as the page writes it -> a dotted name (a package ends in `.`)."""
    if written.endswith("/"):
        return "scorecli." + written.rstrip("/").replace("/", ".") + "."
    return ".".join(["scorecli", *written.removesuffix(".py").split("/")]).removesuffix(".__init__")


def layer_of(module: str) -> int:
    """The index (0: top) of the layer that names `module` most closely: the module itself, else
    the innermost package that holds it."""
    best: tuple[int, int] | None = None  # (how closely, layer)
    for index, (_, written) in enumerate(layers()):
        for name in map(_named, written):
            closeness = 1000 if name == module else len(name) if module.startswith(name) else -1
            if closeness >= 0 and (best is None or closeness > best[0]):
                best = (closeness, index)
    if best is None:
        raise AssertionError(f"{module} is in no layer of docs/ARCHITECTURE.md")
    return best[1]


def _ours(graph: dict[str, dict[str, str]]) -> dict[str, set[str]]:
    return {m: {t for t in targets if t in MODULES} for m, targets in graph.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_module_is_in_a_layer():
    names = [layer for layer, _ in layers()]
    assert len(names) == len(set(names)) >= 5, names
    for module in MODULES:
        layer_of(module)
    for _, written in layers():
        for name in map(_named, written):
            assert name in MODULES or any(m.startswith(name) for m in MODULES), (
                f"no module {name} (docs/ARCHITECTURE.md)"
            )


def test_no_import_circles_counting_type_only_and_function_imports():
    found = cycles(_ours(imports()))
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_imports_go_down_the_layers():
    wrong = []
    for module, targets in _ours(imports()).items():
        for target in targets:
            if layer_of(target) < layer_of(module):
                where = imports()[module][target]
                above, below = layers()[layer_of(target)][0], layers()[layer_of(module)][0]
                wrong.append(f"{module} imports {target} ({where}): {above} is above {below}")
    assert not wrong, "\n".join(sorted(wrong))


@cache
def loads(module: str) -> frozenset[str]:
    """The packages other than scorecli that importing `module` loads (its top-level imports and
    theirs)."""
    seen, todo, found = {module}, [module], set()
    while todo:
        for target, where in imports()[todo.pop()].items():
            if where != "top":
                continue
            if target in MODULES:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
            else:
                found.add(target)
    return frozenset(found)


def test_an_import_inside_a_function_puts_off_a_heavy_package():
    wrong = [
        f"{module}:{line} imports {target} inside a function, and it loads no heavy package"
        for module in MODULES
        for target, where, line in _statements(module)
        if where == "function" and target in MODULES and not (loads(target) - loads(module)) & HEAVY
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_config_and_the_tables_it_imports_know_nothing_of_torch():
    assert loads("scorecli.config") & TORCH == set()
    assert loads("scorecli.cli") & (TORCH | {"pyarrow"}) == set()  # `scorecli --help` stays instant


def test_a_circle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
