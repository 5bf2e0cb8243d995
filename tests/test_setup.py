"""Set-up on a fresh machine: the CPU torch pin, the interpreter finder, the SLURM switch."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
FIND_PYTHON = ROOT / "ci" / "find_python.sh"


def _torch_pin() -> str:
    pins = [
        ln.strip()
        for ln in (ROOT / "constraints-cpu.txt").read_text().splitlines()
        if ln.startswith("torch==")
    ]
    assert len(pins) == 1, pins
    return pins[0].removeprefix("torch==")


def test_cpu_torch_is_pinned_by_its_local_version() -> None:
    """A bare 2.13.0 is a CUDA build on PyPI for Linux: only `+cpu` names the CPU build."""
    assert re.fullmatch(r"\d+\.\d+\.\d+\+cpu", _torch_pin())


def test_the_set_up_installed_the_pinned_cpu_build() -> None:
    if (ROOT / ".venv").resolve() not in Path(sys.prefix).resolve().parents and Path(
        sys.prefix
    ).resolve() != (ROOT / ".venv").resolve():
        pytest.skip(
            "not running in the project's own .venv (make venv): nothing to say about its torch"
        )
    assert torch.__version__ == _torch_pin()
    assert not torch.version.cuda, "a CUDA build of torch was installed on a CPU set-up path"


def _interpreter(version: str) -> str | None:
    """A real CPython `version` binary (not a pyenv shim, which needs pyenv's own PATH)."""
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates = [
        shutil.which(f"python{version}"),
        *sorted(pyenv.glob(f"{version}.*/bin/python{version}")),
    ]
    for found in filter(None, candidates):
        real = subprocess.run(
            [found, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True
        )
        if real.returncode == 0:
            return real.stdout.strip()
    return None


def _find_with_only(tmp_path: Path, versions: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ci/find_python.sh on a PATH that holds just these interpreters (and sh's basics)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for v in versions:
        exe = _interpreter(v)
        if exe is None:
            pytest.skip(f"python{v} is not installed here")
        (bin_dir / f"python{v}").symlink_to(exe)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    return subprocess.run(
        [shutil.which("sh") or "/bin/sh", str(FIND_PYTHON)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_find_python_takes_a_newer_supported_python(tmp_path: Path) -> None:
    out = _find_with_only(tmp_path, ["3.12"])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("python3.12")


def test_find_python_says_what_is_missing(tmp_path: Path) -> None:
    out = _find_with_only(tmp_path, ["3.10"] if _interpreter("3.10") else [])
    assert out.returncode == 1
    assert "needs CPython 3.11 to 3.13" in out.stderr
    assert "make run PYTHON=" in out.stderr


def test_find_python_honours_an_explicit_choice(tmp_path: Path) -> None:
    exe = _interpreter("3.13")
    if exe is None:
        pytest.skip("python3.13 is not installed here")
    out = subprocess.run(
        ["sh", str(FIND_PYTHON)], env={**os.environ, "PYTHON": exe}, capture_output=True, text=True
    )
    assert out.returncode == 0
    assert out.stdout.strip() == exe


def _slurm_tests(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]
        + [str(ROOT / "tests" / "slurm")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_slurm_tests_install_nothing_unless_asked() -> None:
    """`make test` on a workstation (no CI, no switch): no cluster is installed or started."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "LEVIATHAN_SLURM_TESTS")}
    out = _slurm_tests(env)
    assert out.returncode == 0, out.stdout[-2000:]
    assert "not asked for: LEVIATHAN_SLURM_TESTS=1" in out.stdout
    assert int(re.search(r"(\d+) skipped", out.stdout).group(1)) >= 3  # type: ignore[union-attr]


def test_slurm_tests_can_be_switched_off() -> None:
    """`LEVIATHAN_SLURM_TESTS=0 make test` on a workstation: nothing is installed or started."""
    env = {**os.environ, "LEVIATHAN_SLURM_TESTS": "0", "CI": "true"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests" / "slurm"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout[-2000:]
    # every test that needs the cluster is skipped with the switch as its reason (the cluster-free
    # unit tests of the module still run)
    assert "LEVIATHAN_SLURM_TESTS=0: SLURM tests switched off" in out.stdout
    assert int(re.search(r"(\d+) skipped", out.stdout).group(1)) >= 3  # type: ignore[union-attr]
