"""The README's map of concepts to files names files that exist, and its links resolve."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _map_section() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Where things are")
    return readme[start : readme.index("\n## ", start + 1)]


def test_readme_map_names_existing_files() -> None:
    named = [p for p in re.findall(r"`([^`\s]+)`", _map_section()) if "/" in p and "<" not in p]
    assert len(named) > 10
    missing = [
        p
        for p in named
        if not any((base / p.rstrip("/")).exists() for base in (ROOT, ROOT / "src" / "leviathan"))
        and not any(ROOT.glob(p))
    ]
    assert not missing, f"README's map names files that do not exist: {missing}"


def test_readme_links_to_docs_resolve() -> None:
    links = re.findall(r"\]\((docs/[^)]+)\)", (ROOT / "README.md").read_text())
    assert {"docs/dvc.md", "docs/slurm.md", "docs/gpu.md"} <= set(links)
    assert all((ROOT / link).is_file() for link in links)
