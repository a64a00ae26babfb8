"""The house: which package may import which, no import cycles, no reading of another module's
private names, no file over the size a reader can hold.

Read from the source (ast), not by importing: an import inside a function counts like one at
the top. The layers, lowest first (a package imports only from its own layer or below):

    native, readers, data  <  ops  <  kernels, decode  <  plan  <  engine  <  compose, compose3d, eval
    <  presets, loader  <  tools, integrations, torch, __init__, __main__
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "pixelpipe"
LAYER = {
    "native": 0, "readers": 0, "data": 0,
    "ops": 1,
    "kernels": 2, "decode": 2,
    "plan": 3,
    "engine": 4,
    "compose": 5, "compose3d": 5, "eval": 5,
    "presets": 6, "loader": 6,
    "tools": 7, "integrations": 7, "torch": 7, "__init__": 7, "__main__": 7,
}
MAX_LINES = 520  # "no file over ~500 lines"


def _module(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(absolute module imported, names taken from it) for every pixelpipe import in the file
    (those under `if TYPE_CHECKING:` are for type hints alone and are left out)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            node.body = []
    mod = _module(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("pixelpipe"):
                names = [a.name for a in node.names]
                if node.module is None:  # from . import a, b: modules
                    out += [(f"{target}.{n}", []) for n in names]
                else:
                    out.append((target, names))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("pixelpipe")]
    return out


FILES = sorted(SRC.rglob("*.py"))
GRAPH = {_module(p): _imports(p) for p in FILES}


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_top_level_module_has_a_layer():
    assert {_top(m) for m in GRAPH} <= set(LAYER), sorted({_top(m) for m in GRAPH} - set(LAYER))


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_go_down_the_layers(module):
    here = LAYER[_top(module)]
    for target, _ in GRAPH[module]:
        there = LAYER.get(_top(target), 99)
        assert there <= here, f"{module} (layer {here}) imports {target} (layer {there})"


def test_ops_reach_neither_native_nor_kernels():
    for module, imports in GRAPH.items():
        if _top(module) == "ops":
            bad = [t for t, _ in imports if _top(t) in ("native", "kernels", "plan")]
            assert not bad, f"{module} imports {bad}: fast paths are found through the op (pixelpipe.plan.fast)"


def test_no_import_cycles_between_packages_of_different_layers_or_within_one():
    """No cycle among the modules' own imports (a package's __init__ re-exporting its
    modules is not a cycle of code)."""
    edges = defaultdict(set)
    for module, imports in GRAPH.items():
        for target, _ in imports:
            if target in GRAPH and target != module and not target == module.rpartition(".")[0]:
                edges[module].add(target)
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in edges[m]:
            if t.startswith(m + ".") or (FILES and (SRC.parent / t.replace(".", "/") / "__init__.py").exists()
                                         and m.startswith(t + ".")):
                continue  # a package and its own modules
            if state.get(t) == 1:
                cycle = path[path.index(t):] + [t] if t in path else [m, t]
                raise AssertionError(f"import cycle: {' -> '.join(cycle)}")
            if t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [m])


def test_no_module_takes_another_modules_private_names():
    """`from x import _name` across modules: a private name is its module's own (tests may)."""
    for module, imports in GRAPH.items():
        for target, names in imports:
            if target.rpartition(".")[0] == module.rpartition(".")[0] and _top(target) == _top(module):
                continue  # the same package keeps its own helpers
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            assert not private, f"{module} takes {private} from {target}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_files_stay_small(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(SRC)} has {n} lines"
