"""Checkpoints verified before they are resumed, with a fallback: each file of a checkpoint
damaged for real (a byte flipped, the file truncated or deleted, state.json edited) sets that
checkpoint aside with a WARNING naming the file and the restore falls back to the older one;
none left is one line. Retention keeps the checkpoint a message names whatever `keep_last`
says; the audit of a checkpoint folder checks every hash its manifest records."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from test_checkpoint import manager, perturb

from leviathan.checkpoint import store
from leviathan.checkpoint.integrity import DamagedCheckpoint, verify_checkpoint
from leviathan.train import checkpoint as ckpt
from leviathan.train.errors import NoIntactCheckpoint


def with_manifest(m: ckpt.CheckpointManager) -> ckpt.CheckpointManager:
    m.manifest = store.ManifestInfo(inputs=[])
    return m


def flip_byte(path: Path, at: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0x01
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def edit_step(path: Path) -> None:
    state = json.loads(path.read_text())
    state["step"] = 1000  # a resume at the wrong step on these weights
    path.write_text(json.dumps(state))


DAMAGE: dict[str, tuple[str, Callable[[Path], None]]] = {
    "weights byte flipped": ("model.safetensors", flip_byte),
    "weights exponent byte": ("model.safetensors", lambda p: flip_byte(p, 0.999)),
    "weights truncated": ("model.safetensors", truncate),
    "weights deleted": ("model.safetensors", Path.unlink),
    "optim byte flipped": ("optim.pt", flip_byte),
    "optim truncated": ("optim.pt", truncate),
    "optim deleted": ("optim.pt", Path.unlink),
    "rng byte flipped": ("rng.pt", flip_byte),
    "rng deleted": ("rng.pt", Path.unlink),
    "state step edited": ("state.json", edit_step),
    "manifest deleted": ("model.safetensors.json", Path.unlink),
    "manifest truncated": ("model.safetensors.json", truncate),
}


def two_checkpoints(root: Path) -> tuple[ckpt.CheckpointManager, dict[str, torch.Tensor]]:
    """A manager that saved step 1 and, with other weights, step 2; the weights of step 1."""
    m = with_manifest(manager(root))
    m.save_step(1, 0.5)
    at_step_1 = {k: v.clone() for k, v in m.model.state_dict().items()}
    perturb(m)
    m.save_step(2, 0.4)
    m.close()
    return m, at_step_1


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_checkpoint_is_set_aside_and_the_older_one_resumed(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, at_step_1 = two_checkpoints(tmp_path)
    name, damage = DAMAGE[case]
    damage(tmp_path / "step_00000002" / name)
    fresh = with_manifest(manager(tmp_path))
    with caplog.at_level(logging.WARNING, logger="leviathan.train"):
        restored = fresh.restore(restart_on_mismatch=False)
    assert restored.step == 1
    assert restored.path == tmp_path / "step_00000001"
    for k, v in at_step_1.items():
        assert torch.equal(fresh.model.state_dict()[k], v), k
    assert (tmp_path / "step_00000002.damaged-1").is_dir()  # kept, never deleted
    assert not (tmp_path / "step_00000002").exists()
    warning = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert name in warning
    assert "step_00000002.damaged-1" in warning
    assert restored.damaged[0]["file"] == name


def test_the_restored_checkpoint_is_recorded_as_verified(tmp_path: Path) -> None:
    two_checkpoints(tmp_path)
    restored = with_manifest(manager(tmp_path)).restore(restart_on_mismatch=False)
    record = restored.resumed_from()
    assert record is not None
    assert record["step"] == 2
    assert record["verified"] == ["model.safetensors", "optim.pt", "rng.pt", "state.json"]
    assert record["unrecorded"] == []
    manifest = tmp_path / "step_00000002" / "model.safetensors.json"
    from leviathan.io import sha256_file

    assert record["manifest_sha256"] == sha256_file(manifest)


def test_no_intact_checkpoint_left_is_one_line(tmp_path: Path) -> None:
    two_checkpoints(tmp_path)
    for step in (1, 2):
        flip_byte(tmp_path / f"step_0000000{step}" / "optim.pt")
    with pytest.raises(NoIntactCheckpoint, match=r"no intact checkpoint left in .*rerun to start"):
        with_manifest(manager(tmp_path)).restore(restart_on_mismatch=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step_00000001.damaged-1",
        "step_00000002.damaged-1",
    ]
    # the rerun starts afresh: nothing left in the way, nothing deleted
    assert with_manifest(manager(tmp_path)).restore(restart_on_mismatch=False).step == 0


def test_a_damaged_final_falls_back_to_the_newest_step(tmp_path: Path) -> None:
    m, _ = two_checkpoints(tmp_path)
    m.save_final(3, 0.3, None)
    flip_byte(tmp_path / "final" / "model.safetensors")
    restored = with_manifest(manager(tmp_path)).restore(restart_on_mismatch=False)
    assert (restored.step, restored.finished) == (2, False)
    assert (tmp_path / "final.damaged-1").is_dir()


@pytest.mark.parametrize("background", [False, True])
def test_keep_last_zero_keeps_the_checkpoint_it_names(tmp_path: Path, background: bool) -> None:
    m = with_manifest(manager(tmp_path, background=background))
    # keep_last=0, which a config refuses (>= 1), set past that check: retention itself must
    # still keep the checkpoint a message names (the manager's config is its own instance)
    object.__setattr__(m.config, "keep_last", 0)
    first = m.save_step(1, None)
    named = m.save_step(2, None, wait=True)  # the preemption checkpoint: its path is printed
    m.close()
    assert named == tmp_path / "step_00000002"
    assert first != named
    assert [r.path for r in store.list_checkpoints(tmp_path)] == [named]
    assert with_manifest(manager(tmp_path)).restore(restart_on_mismatch=False).step == 2


def test_the_audit_of_a_checkpoint_folder_checks_every_recorded_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from leviathan.report.chain import ChainWalker

    # written from the audit's root, as the workflow writes from its own: a dirty checkout's
    # diff (results/provenance/, relative to the working directory) is then where it is audited
    monkeypatch.chdir(tmp_path)
    two_checkpoints(tmp_path)
    folder = tmp_path / "step_00000002"
    clean = ChainWalker(root=tmp_path)
    clean.audit_artifact(folder)
    checked = {Path(f.what).name for f in clean.findings if f.ok}
    assert {"model.safetensors", "optim.pt", "rng.pt", "state.json"} <= checked
    assert clean.failures == []
    state = json.loads((folder / "state.json").read_text())
    state["train_loss"] = 0.01  # a better number written in by hand
    (folder / "state.json").write_text(json.dumps(state))
    edited = ChainWalker(root=tmp_path)
    edited.audit_artifact(folder)
    assert [Path(f.what).name for f in edited.failures] == ["state.json"]
    assert "the file changed" in edited.failures[0].detail


def test_a_file_saved_unreadable_is_caught_by_its_loader(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """optim.pt cut short before it was hashed (its manifest agrees with it): the hashes pass,
    torch.load fails, the checkpoint is set aside all the same; with the older one damaged too
    none is left."""
    from leviathan.io import sha256_file

    two_checkpoints(tmp_path)
    newest = tmp_path / "step_00000002"
    truncate(newest / "optim.pt")
    manifest = json.loads((newest / "model.safetensors.json").read_text())
    manifest["files"]["optim.pt"] = sha256_file(newest / "optim.pt")
    (newest / "model.safetensors.json").write_text(json.dumps(manifest))
    flip_byte(tmp_path / "step_00000001" / "rng.pt")
    with caplog.at_level(logging.WARNING, logger="leviathan.train"):
        with pytest.raises(NoIntactCheckpoint):
            with_manifest(manager(tmp_path)).restore(restart_on_mismatch=False)
    first = caplog.records[0].getMessage()
    assert "step_00000002 is damaged (optim.pt: unreadable" in first


KEPT_MANIFEST_DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": truncate,
    "a list": lambda p: p.write_text("[]\n"),
    "no artifact": lambda p: p.write_text(json.dumps({"kind": "kept_checkpoint"})),
    "sha256 not hex": lambda p: p.write_text(json.dumps({"artifact": {"sha256": 5}})),
}


@pytest.mark.parametrize("case", list(KEPT_MANIFEST_DAMAGE))
def test_a_damaged_kept_manifest_is_set_aside_and_the_saves_go_on(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    m = with_manifest(manager(tmp_path, keep_at="1,2"))
    for step in (1, 2):
        m.keep_if_due(step)
    kept = tmp_path / "kept"
    KEPT_MANIFEST_DAMAGE[case](kept / "step_00000001" / "model.safetensors.json")
    with caplog.at_level(logging.WARNING, logger="leviathan.train"):
        m.save_step(3, 0.4)
        m.save_final(4, 0.3, None)
    final = json.loads((tmp_path / "final" / "model.safetensors.json").read_text())
    assert [r["step"] for r in final["kept"]] == [2]  # the intact one only
    assert sorted(p.name for p in kept.iterdir()) == ["step_00000001.damaged-1", "step_00000002"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # set aside once, not at every save
    assert "step_00000001 is damaged (model.safetensors.json: unreadable" in warnings[0]
    assert "step_00000001.damaged-1" in warnings[0]


def test_a_manifest_without_its_files_hashes_is_damaged(tmp_path: Path) -> None:
    """Every checkpoint manifest records the hashes of the files beside the weights (`files`):
    one without them cannot vouch for state.json, and a restore sets the checkpoint aside."""
    path = store.save_checkpoint(
        tmp_path,
        "step_00000001",
        model_state={"w": torch.ones(2)},
        optim_state={"state": {}, "param_groups": []},
        state={
            "step": 1,
            "tokens": 8,
            "train_config": {},
            "train_fingerprint": "x",
            "model_config": {},
        },
        manifest=store.ManifestInfo(inputs=[]),
    )
    verify_checkpoint(path)  # whole as written
    manifest = json.loads((path / "model.safetensors.json").read_text())
    del manifest["files"]
    (path / "model.safetensors.json").write_text(json.dumps(manifest))
    with pytest.raises(DamagedCheckpoint, match="model.safetensors.json: unreadable"):
        verify_checkpoint(path)
