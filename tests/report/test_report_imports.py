"""The report's modules import in one direction: no circle among them, counting the imports inside
functions too (an import moved into a function to break a circle still is one)."""

from __future__ import annotations

import ast
from pathlib import Path

import leviathan.report

PACKAGE = "leviathan.report"
ROOT = Path(leviathan.report.__file__).parent


def _imports(path: Path) -> set[str]:
    """The report modules `path` imports, anywhere in it."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE + "."):
            out.add(str(node.module).split(".")[2])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[2] for a in node.names if a.name.startswith(PACKAGE + ".")}
    return out - {path.stem}


def _circle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of `graph` (its modules in import order, the first repeated last), [] if none."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str]:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return []
        for imported in sorted(graph.get(module, ())):
            found = visit(imported, [*path, module])
            if found:
                return found
        done.add(module)
        return []

    for module in sorted(graph):
        found = visit(module, [])
        if found:
            return found
    return []


def test_the_report_modules_import_in_one_direction() -> None:
    graph = {p.stem: _imports(p) for p in ROOT.glob("*.py")}
    assert graph["throughput"] >= {"cellmap", "context", "table"}  # the walk sees the imports
    assert _circle(graph) == [], " -> ".join(_circle(graph))


def test_a_circle_is_found() -> None:
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) == []
