"""A checkpoint's file names are spelled in one module, `leviathan.checkpoint.files`.

Every other module of src/ asks it (its constants or its path functions), so a change to the
file set is a change to one file. Docstrings may describe the format; code may not spell it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from leviathan.checkpoint import files

SRC = Path(__file__).resolve().parents[1] / "src" / "leviathan"
OWNER = SRC / "checkpoint" / "files.py"
# file names, found wherever a string holds them as a word (a path, a message, an f-string)
FILE_NAMES = (files.WEIGHTS, files.STATE, files.OPTIM, files.RNG)
# folder names and format values, found where a string is exactly one of them ("kept",
# "checkpoints" and "optim" are left out: they are also keys of other records)
EXACT = (files.FINAL, files.STEP_PREFIX, files.SHARDED_FORMAT)
_NAME = re.compile("|".join(rf"(?<![\w.-]){re.escape(n)}(?!\w)" for n in FILE_NAMES))


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module, its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(
            node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        ) and (doc := node.body[:1]):
            if isinstance(doc[0], ast.Expr) and isinstance(doc[0].value, ast.Constant):
                out.add(id(doc[0].value))
    return out


def spelled(path: Path) -> list[str]:
    """`path:line: 'literal'` for each string of the module that spells a checkpoint's name."""
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        if id(node) in docs:
            continue
        if _NAME.search(node.value) or node.value in EXACT:
            found.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: {node.value!r}")
    return found


def test_the_names_module_spells_them() -> None:
    assert len(spelled(OWNER)) >= len(FILE_NAMES)  # the check finds what it looks for


def test_no_other_module_spells_a_checkpoints_file_names() -> None:
    found = [hit for p in sorted(SRC.rglob("*.py")) if p != OWNER for hit in spelled(p)]
    assert not found, (
        "a checkpoint's file names belong to leviathan.checkpoint.files: import its names or "
        "path functions instead of spelling them:\n" + "\n".join(found)
    )
