"""The embedded default corpus: English prose that ships with every CPython.

Documents are (a) one per standard-library module: its docstrings and comment blocks in
source order, and (b) one per `pydoc_data.topics` entry (the language reference topics
used by `help()`). About 4 MB of text, no network. The order is deterministic (sorted
module paths, sorted topic names); the content depends on the Python version, which the
source record names together with a hash of the text.
"""

from __future__ import annotations

import ast
import io
import platform
import sys
import sysconfig
import tokenize
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from leviathan.data.corpus import Document
from leviathan.data.workers import worker_pool

# Directories under the stdlib that hold no library prose (or not the stdlib at all).
EXCLUDED_DIRS = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
)
_DOC_NODES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def stdlib_dir() -> Path:
    """The running interpreter's pure-Python standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path | None = None) -> list[Path]:
    """Sorted .py files of the stdlib, tests and third-party packages excluded."""
    base = root or stdlib_dir()
    return sorted(
        p
        for p in base.rglob("*.py")
        if not EXCLUDED_DIRS.intersection(p.relative_to(base).parts[:-1])
    )


def _docstrings(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, _DOC_NODES):
            doc = ast.get_docstring(node, clean=True)
            if doc and doc.strip():
                line = 0 if isinstance(node, ast.Module) else node.lineno
                out.append((line, doc.strip()))
    return out


def _comment_blocks(source: bytes) -> list[tuple[int, str]]:
    """Runs of comments on consecutive lines, '#' stripped, joined into one paragraph."""
    blocks: list[tuple[int, str]] = []
    start = last = -2
    lines: list[str] = []
    for tok in tokenize.tokenize(io.BytesIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        row = tok.start[0]
        text = tok.string.lstrip("#").strip()
        if row <= 2 and (text.startswith("!") or "coding" in text):
            continue  # shebang / encoding declaration
        if row != last + 1 and lines:
            blocks.append((start, "\n".join(lines)))
            lines = []
        if not lines:
            start = row
        if text.strip("-=*#~_ "):
            lines.append(text)
        last = row
    if lines:
        blocks.append((start, "\n".join(lines)))
    return [(row, text) for row, text in blocks if text.strip()]


def module_text(path: Path) -> str:
    """Docstrings and comment blocks of one module in source order, blank-line separated."""
    source = path.read_bytes()
    try:
        pieces = _docstrings(ast.parse(source)) + _comment_blocks(source)
    except (SyntaxError, ValueError, tokenize.TokenError):
        return ""  # a file this interpreter cannot parse contributes nothing
    pieces.sort(key=lambda item: item[0])
    return "\n\n".join(text for _, text in pieces)


def _topic_documents() -> Iterator[Document]:
    from pydoc_data.topics import topics

    for name in sorted(topics):
        yield Document(f"pydoc_data/topics/{name}", topics[name])


def embedded_documents(root: Path | None = None, workers: int | None = None) -> Iterator[Document]:
    """All documents of the embedded corpus, in a fixed order (modules, then topics)."""
    base = root or stdlib_dir()
    files = stdlib_files(base)
    if not files:
        raise FileNotFoundError(f"{base}: no Python standard library sources found")
    n = max(1, min(workers or 2, len(files)))
    if n == 1:
        texts: Iterator[str] = map(module_text, files)
        for path, text in zip(files, texts, strict=True):
            yield Document(f"stdlib/{path.relative_to(base).as_posix()}", text)
    else:
        with worker_pool(n) as pool:  # its workers die with this process
            for path, text in zip(files, pool.map(module_text, files, chunksize=16), strict=True):
                yield Document(f"stdlib/{path.relative_to(base).as_posix()}", text)
    yield from _topic_documents()


def embedded_source(root: Path | None = None) -> dict[str, Any]:
    """The source record of the embedded corpus (what made it, for its manifests)."""
    return {
        "kind": "embedded",
        "description": "CPython stdlib docstrings and comments + pydoc_data topics",
        "python": sys.version,
        "python_version": platform.python_version(),
        "implementation": sys.implementation.name,
        "stdlib": str(root or stdlib_dir()),
    }
