"""The package's import structure, read from the source with `ast` (every import, at the top of
a module or inside a function): the cost predictions (leviathan.cost) sit above the code that
trains and evaluates, and no module imports itself back through others (no circle)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
COST = "leviathan.cost"
# The rooms above the cost predictions, which print them beside what they predict: only they
# import leviathan.cost. Everything else (model, data, train, eval, the study's rules, gpus,
# layout, scales, io, values, vocab, ...) is what the predictions are about.
ABOVE_COST = ("leviathan.commands", "leviathan.report", "leviathan.compiled")


def _modules() -> dict[str, Path]:
    """Every module of src/leviathan by its dotted name (a package by its own name)."""
    out = {}
    for path in sorted((SRC / "leviathan").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def imports(name: str, modules: dict[str, Path] = MODULES) -> set[str]:
    """The modules of `modules` that `name` imports anywhere in its source (`from pkg import
    mod`: the module where one exists, else the package); relative imports resolved."""
    path = modules[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out |= {full} if full in modules else ({base} if base in modules else set())
    return out - {name}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def path_through(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One import path around a circle: from its first module back to it."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph[v] & members):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                todo.append(w)
    return component


GRAPH = {name: imports(name) for name in MODULES}


def test_the_reader_counts_imports_in_functions_and_resolves_relative_ones(
    tmp_path: Path,
) -> None:
    (tmp_path / "pkg").mkdir()
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "def f():\n    from pkg.b import x\n",
        "pkg/b.py": "from . import c\nimport os\n",
        "pkg/c.py": "from .a import f\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).write_text(text)
    modules = {"pkg": tmp_path / "pkg/__init__.py"}
    modules |= {f"pkg.{m}": tmp_path / f"pkg/{m}.py" for m in "abc"}
    graph = {name: imports(name, modules) for name in modules}
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": {"pkg.a"}}
    assert circles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert path_through(graph, ["pkg.a", "pkg.b", "pkg.c"]) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]


def _in(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_nothing_that_trains_or_evaluates_imports_the_cost_predictions() -> None:
    reaching = sorted(
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        if not _in(name, COST, *ABOVE_COST)
        for target in targets
        if _in(target, COST)
    )
    assert not reaching, (
        "leviathan.cost predicts; the code it predicts must not import it (a caller above, "
        f"a command or the report, passes its figures down): {reaching}"
    )


def test_the_import_graph_has_no_circle() -> None:
    paths = [
        f"{' -> '.join(path_through(GRAPH, c))} (all of: {', '.join(c)})" for c in circles(GRAPH)
    ]
    assert not paths, "import circles (move the shared fact below both):\n" + "\n".join(paths)


def test_a_circle_is_found_and_walked() -> None:
    """The check itself: a three-module circle beside a module that only imports into it."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    path = path_through(graph, ["a", "b", "c"])
    assert path[0] == path[-1] == "a" and set(path) == {"a", "b", "c"}
