"""Code version and environment facts recorded with every artifact."""

from __future__ import annotations

import platform
import subprocess
from functools import cache
from typing import Any

from leviathan import __version__
from leviathan.paper import repo_root


@cache
def code_version() -> dict[str, Any]:
    """git commit of the checkout and whether it had uncommitted changes (None outside git)."""
    root = repo_root()

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip()

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "leviathan": __version__,
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
    }


def environment() -> dict[str, Any]:
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "host": platform.node(),
        "cuda": torch.version.cuda,
    }
