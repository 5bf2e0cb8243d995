"""Provenance from the workflow's own checkout: a dirty tree's changes saved beside the manifests
(content-addressed, rebuilt with `git apply`), verified and tamper-detected by `leviathan audit`,
and the Snakefile's refusal of a `leviathan` package imported from another checkout."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from leviathan import layout, provenance
from leviathan.cli import main
from leviathan.manifest import write_manifest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
GIT_ID = {
    f"GIT_{w}_{k}": v
    for w in ("AUTHOR", "COMMITTER")
    for k, v in (("NAME", "CI"), ("EMAIL", "ci@example.org"))
}

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A tiny committed project (src/, config/) as the workflow's checkout, and a work dir."""
    for key, value in GIT_ID.items():
        monkeypatch.setenv(key, value)
    repo = tmp_path / "project"
    (repo / "src" / "pkg").mkdir(parents=True)
    (repo / "config").mkdir()
    (repo / "src" / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (repo / "config" / "config.yaml").write_text("lr: 0.001\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "project")
    monkeypatch.setenv(provenance.CHECKOUT_ENV, str(repo))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    provenance._git_state.cache_clear()
    yield repo
    provenance._git_state.cache_clear()


def artifact_manifest(name: str = "x.bin") -> dict:
    Path(name).write_bytes(b"artifact")
    return write_manifest(name, artifact_type="tokens")


def test_a_clean_checkout_saves_no_diff(checkout: Path) -> None:
    code = artifact_manifest()["code"]
    assert code["git_commit"] == git(checkout, "rev-parse", "HEAD")  # the checkout's, not ours
    assert code["git_commit"] != git(ROOT, "rev-parse", "HEAD")
    assert code["git_dirty"] is False and code["git_diff"] is None
    assert not Path(layout.PROVENANCE_ROOT).exists()


def test_the_saved_diff_rebuilds_the_dirty_tree(checkout: Path, tmp_path: Path) -> None:
    """A tracked edit and an untracked source file: the manifest names one saved file whose
    sha256 is its content's and which `git apply` on the recorded commit turns into the tree
    that ran; an untracked file outside the source directories is not code."""
    (checkout / "src" / "pkg" / "mod.py").write_text("def f():\n    return 2  # edited\n")
    (checkout / "src" / "pkg" / "new.py").write_text("X = 3\n")
    (checkout / "notes.txt").write_text("not code\n")
    code = artifact_manifest()["code"]
    assert code["git_dirty"] is True
    saved = Path(code["git_diff"]["path"])
    assert saved.parent == Path(layout.PROVENANCE_ROOT)
    data = saved.read_bytes()
    assert code["git_diff"]["sha256"] == hashlib.sha256(data).hexdigest() == saved.stem
    new_sha = hashlib.sha256(b"X = 3\n").hexdigest()
    assert f"# {new_sha} 6 src/pkg/new.py" in data.decode()
    # a second artifact of the same state shares the one file
    assert artifact_manifest("y.bin")["code"]["git_diff"] == code["git_diff"]
    assert len(list(saved.parent.iterdir())) == 1
    rebuilt = tmp_path / "rebuilt"
    subprocess.run(["git", "clone", "-q", str(checkout), str(rebuilt)], check=True)
    git(rebuilt, "checkout", "-q", code["git_commit"])
    git(rebuilt, "apply", str(saved.resolve()))
    for rel in ("src/pkg/mod.py", "src/pkg/new.py", "config/config.yaml"):
        assert (rebuilt / rel).read_bytes() == (checkout / rel).read_bytes(), rel
    assert not (rebuilt / "notes.txt").exists()


def test_large_untracked_files_are_listed_not_saved(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(provenance, "UNTRACKED_INLINE_BYTES", 10)
    (checkout / "config" / "big.yaml").write_text("a: 1\n" * 10)
    text = Path(artifact_manifest()["code"]["git_diff"]["path"]).read_text()
    sha = hashlib.sha256(b"a: 1\n" * 10).hexdigest()
    assert f"# {sha} 50 config/big.yaml" in text
    assert "not saved" in text and "a: 1" not in text


def finding(out: str, path: Path) -> str:
    """The audit's line about `path`, indentation removed."""
    (line,) = [ln for ln in out.splitlines() if ln.split()[1:2] == [str(path)]]
    return " ".join(line.split(maxsplit=1))


def test_the_audit_verifies_the_diff_and_reports_a_tampered_one(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (checkout / "src" / "pkg" / "mod.py").write_text("def f():\n    return 2\n")
    saved = Path(artifact_manifest()["code"]["git_diff"]["path"])
    assert main(["audit", "x.bin"]) == 0
    out = capsys.readouterr().out
    assert f"uncommitted changes saved in {saved}" in out
    assert finding(out, saved).startswith(f"ok {saved}  sha256 {saved.stem[:12]}")
    data = bytearray(saved.read_bytes())
    data[-3] ^= 0x01  # one flipped bit in the saved edit
    saved.write_bytes(bytes(data))
    assert main(["audit", "x.bin"]) == 1
    out = capsys.readouterr().out
    assert finding(out, saved).startswith(f"FAIL {saved}  sha256")
    assert finding(out, saved).endswith("the file changed")
    saved.unlink()
    assert main(["audit", "x.bin"]) == 1
    assert finding(capsys.readouterr().out, saved).startswith(f"FAIL {saved}  missing")


def test_the_package_must_be_the_workflow_checkouts_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(provenance.ALLOW_FOREIGN_ENV, raising=False)
    imported = Path(provenance.__file__).resolve().parent
    assert provenance.package_checkout_error(imported.parents[1]) is None
    error = provenance.package_checkout_error(tmp_path)
    assert error is not None and "\n" not in error
    assert str(imported) in error and str(tmp_path / "src" / "leviathan") in error
    assert "pip install -e ." in error and f"PYTHONPATH={tmp_path / 'src'}" in error
    monkeypatch.setenv(provenance.ALLOW_FOREIGN_ENV, "1")
    assert provenance.package_checkout_error(tmp_path) is None


@pytest.mark.slow  # two real `snakemake -n` runs of the default workflow: ~20 s
def test_snakemake_refuses_a_package_from_another_checkout(tmp_path: Path) -> None:
    """A copy of the workflow without its own package refuses to plan, naming both paths; with
    the package under the copy's src/ (here a link to this checkout's) it plans."""
    for name in ("Snakefile", "workflow", "profiles", "config"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    env = {k: v for k, v in os.environ.items() if k != provenance.ALLOW_FOREIGN_ENV}
    env["PATH"] = f"{BIN}:{os.environ['PATH']}"
    env["PYTHONPATH"] = str(Path(provenance.__file__).resolve().parents[1])
    cmd = [str(BIN / "snakemake"), "-n", "--profile", "profiles/local", "all"]

    def plan() -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)

    refused = plan()
    assert refused.returncode != 0
    said = refused.stdout + refused.stderr
    imported = Path(provenance.__file__).resolve().parent
    assert f"the leviathan package is imported from {imported}" in said
    assert f"checkout {tmp_path.resolve() / 'src' / 'leviathan'}" in said
    (tmp_path / "src").symlink_to(imported.parent, target_is_directory=True)
    planned = plan()
    assert planned.returncode == 0, planned.stderr[-3000:]
