"""The rules' conda env (workflow/envs/leviathan.yaml). Creating it needs conda and a network
(neither is on the test machines, see README); what is tested here is what decides whether it
works once created elsewhere: its pip section resolves the package and its pins through
${LEVIATHAN_ROOT} (which the Snakefile sets to the workflow directory), from any directory,
and every dependency of pyproject.toml is pinned."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ENV = ROOT / "workflow" / "envs" / "leviathan.yaml"
PINS = ROOT / "workflow" / "envs" / "leviathan.constraints.txt"


def pip_section() -> list[str]:
    deps = yaml.safe_load(ENV.read_text())["dependencies"]
    (pip,) = [d["pip"] for d in deps if isinstance(d, dict)]
    return pip


def test_env_file_names_no_path_relative_to_where_it_lies() -> None:
    for line in pip_section():
        assert "${LEVIATHAN_ROOT}" in line, (
            f"{line!r}: a path that breaks when the env file is copied elsewhere"
        )
    assert "os.environ.update(LEVIATHAN_ROOT=workflow.basedir)" in (ROOT / "Snakefile").read_text()


def test_pip_resolves_the_package_from_a_copy_of_the_env_file_elsewhere(tmp_path: Path) -> None:
    """What conda does with the pip section: a requirements file beside (a copy of) the env file,
    `pip install -r` run there. Dry run, offline: the editable package and its pins resolve."""
    copy = tmp_path / "conda-prefix" / "a1b2c3"
    copy.mkdir(parents=True)
    (copy / "condaenv.requirements.txt").write_text("\n".join(pip_section()) + "\n")
    env = {**os.environ, "LEVIATHAN_ROOT": str(ROOT), "PIP_NO_INPUT": "1"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "-r",
            "condaenv.requirements.txt",
        ],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert re.search(r"Would install leviathan-\d", out.stdout), out.stdout[-2000:]


def test_every_dependency_is_pinned() -> None:
    pins = {}
    for line in PINS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"{line!r}: not an exact, platform-free pin"
            assert "+" not in version, f"{line!r}: not an exact, platform-free pin"
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for req in project["dependencies"]:
        name = re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0]).lower()
        assert name in pins, f"{name} (pyproject.toml) has no pin in {PINS.name}: run make env-pins"
