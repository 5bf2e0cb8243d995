"""The provenance chain walk: from one file back to its data and code, re-verifying every hash.

The chain, each link checked against the hash its consumer recorded:

    evaluation JSON      it records the checkpoint's weights and state sha256 and its data inputs
      -> checkpoint      model.safetensors.json: weights, optim.pt, rng.pt, state.json sha256,
                         train/val shards, the checkpoint its run resumed from (if any)
        -> token shards  train.bin.json: shard sha256, raw corpus, vocabulary file
          -> raw corpus        train.jsonl.zst.json
          -> vocabulary file   the BPE file's sha256 (checked where it is in the cache here)

An export (`leviathan export`, results/export/<study>/<cell>/) is walked the same way from its
manifest model.safetensors.json: every file of the directory, then the checkpoint it came
from and on down the chain. Every recorded git commit must exist in this checkout's history;
a dirty run's saved uncommitted changes (`code.git_diff`, leviathan.provenance) must still have
the sha256 recorded.
Each check leaves a `Finding`; the walk never stops at the first failure.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from leviathan import layout
from leviathan.anchor import EVALUATION_MANIFEST, evaluation_fix, is_evaluation
from leviathan.checkpoint.files import (
    CHECKPOINT_KIND,
    STATE,
    final_dir,
    state_file,
    weights_file,
)
from leviathan.io import read_json, read_json_object, sha256_file
from leviathan.layout import METRICS, manifest_path
from leviathan.provenance import git
from leviathan.report.cellmap import DocumentCache
from leviathan.report.claims import claims_problems
from leviathan.train.log_anchor import (
    LOG_MANIFEST,
    PREFIX_FIELD,
    final_records,
    final_val_problem,
    prefix_problem,
)


class Status(enum.Enum):
    OK = "ok  "
    FAIL = "FAIL"
    UNVERIFIED = "n/v "  # nothing wrong found, but it could not be checked here


@dataclass(frozen=True)
class Finding:
    status: Status
    depth: int  # the link's distance from what was audited
    what: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not Status.FAIL

    @property
    def unverified(self) -> bool:
        return self.status is Status.UNVERIFIED

    def line(self) -> str:
        return f"{self.status.value} {'  ' * self.depth}{self.what}" + (
            f"  {self.detail}" if self.detail else ""
        )


@dataclass
class ChainWalker:
    root: Path = field(default_factory=Path.cwd)
    findings: list[Finding] = field(default_factory=list)
    _sha: dict[Path, str] = field(default_factory=dict)
    _walked: set[Path] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.docs = DocumentCache(self.root)  # recorded paths resolve against the audit root

    # ------------------------------------------------------------ findings
    def record(self, status: Status, depth: int, what: str, detail: str = "") -> bool:
        """Add a finding; whether it is not a failure."""
        finding = Finding(status, depth, what, detail)
        self.findings.append(finding)
        return finding.ok

    def passed(self, depth: int, what: str, detail: str = "") -> bool:
        return self.record(Status.OK, depth, what, detail)

    def failed(self, depth: int, what: str, detail: str = "") -> bool:
        return self.record(Status.FAIL, depth, what, detail)

    def unverifiable(self, depth: int, what: str, detail: str = "") -> bool:
        return self.record(Status.UNVERIFIED, depth, what, detail)

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if not f.ok]

    @property
    def unverified(self) -> list[Finding]:
        return [f for f in self.findings if f.unverified]

    # ------------------------------------------------------------ primitives
    def path(self, p: str | os.PathLike[str]) -> Path:
        return self.docs.path(p)

    def show(self, p: str | os.PathLike[str]) -> str:
        """A path as printed: relative to the audit root where it lies inside it."""
        path = self.path(p)
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def sha(self, p: Path) -> str:
        if p not in self._sha:
            self._sha[p] = sha256_file(p)
        return self._sha[p]

    def check_hash(
        self, p: str | os.PathLike[str], recorded: str | None, where: str, depth: int
    ) -> bool:
        """Is the file's content the one `where` recorded?"""
        path, shown = self.path(p), self.show(p)
        if not path.is_file():
            return self.failed(depth, shown, f"missing (recorded in {where})")
        if not recorded:
            return self.failed(depth, shown, f"no sha256 recorded in {where}")
        actual = self.sha(path)
        if actual != recorded:
            return self.failed(
                depth,
                shown,
                f"sha256 {actual[:12]} != {recorded[:12]} recorded in {where}: the file changed",
            )
        return self.passed(depth, shown, f"sha256 {actual[:12]}")

    def check_commit(self, code: Mapping[str, Any] | None, where: str, depth: int) -> None:
        commit = (code or {}).get("git_commit")
        if not commit:
            what, detail = (
                f"code of {where}",
                "no git commit recorded (not run from a git checkout)",
            )
            self.unverifiable(depth, what, detail)
            return
        exists = _commit_exists(commit, self.root)
        what = f"code {commit[:12]}"
        if exists is None:
            self.unverifiable(depth, what, "not verifiable here (no git checkout)")
        elif not exists:
            shallow = _shallow(self.root)
            hint = " (this is a shallow clone: git fetch --unshallow)" if shallow else ""
            self.failed(
                depth, what, f"recorded in {where}: no such commit in this repository{hint}"
            )
        elif (code or {}).get("git_dirty"):
            self.check_changes(code or {}, what, where, depth)
        else:
            self.passed(depth, what, "commit exists")

    def check_changes(self, code: Mapping[str, Any], what: str, where: str, depth: int) -> None:
        """A dirty run's commit: its saved uncommitted changes (`code.git_diff`) re-hashed."""
        diff = code.get("git_diff")
        if not diff:
            self.unverifiable(
                depth, what, "commit exists, but the run had uncommitted changes (none saved)"
            )
            return
        self.passed(depth, what, f"commit exists; uncommitted changes saved in {diff['path']}")
        self.check_hash(diff["path"], diff.get("sha256"), where, depth + 1)

    # ------------------------------------------------------------ the chain
    def walk(self, p: str | os.PathLike[str], depth: int, verified: str | None = None) -> None:
        """Verify what `p` records about its own inputs (`verified`: the sha256 its consumer
        recorded and that was just checked; the file's own manifest must agree with it)."""
        path = self.path(p)
        if path in self._walked:
            return
        self._walked.add(path)
        mpath = manifest_path(path)
        manifest = read_json_object(mpath) if mpath.is_file() else None
        kind = manifest.get("kind") if isinstance(manifest, Mapping) else None
        if kind == EVALUATION_MANIFEST:
            self.walk_anchored_eval(path, manifest, depth, verified)  # type: ignore[arg-type]
        elif isinstance(manifest, Mapping):
            self.walk_manifest(path, manifest, depth, verified)
            if kind == LOG_MANIFEST:
                self.check_log(path, depth + 1)
        elif path.name == STATE:
            self.walk_checkpoint_dir(path.parent, depth)
        elif path.name == METRICS:
            self.unverifiable(
                depth + 1,
                f"{self.show(path)} manifest",
                "none: the run finished before logs were anchored, or stopped before writing it",
            )
            self.check_log(path, depth + 1)
        elif path.suffix == ".json":
            doc = read_json(path)
            if is_evaluation(doc):
                self.failed(
                    depth,
                    self.show(path),
                    f"no manifest {mpath.name}: nothing records what its evaluation wrote; "
                    f"{evaluation_fix(self.show(path))}",
                )
                if "inputs" in doc:
                    self.walk_eval(path, doc, depth)

    def walk_anchored_eval(
        self, path: Path, manifest: Mapping[str, Any], depth: int, verified: str | None
    ) -> None:
        """An evaluation output: the file its manifest records (whatever its consumer recorded:
        a table rebuilt from an edited output records the edit), what it says of itself
        (leviathan.report.claims), then the chain of its inputs."""
        mpath = self.show(manifest_path(path))
        recorded = manifest.get("artifact", {}).get("sha256")
        if verified is None or recorded != verified:
            self.check_hash(path, recorded, f"its manifest {mpath}", depth)
        doc = read_json(path)
        if not is_evaluation(doc):
            self.failed(depth, self.show(path), "its manifest says evaluation, but it is none")
            return
        try:
            problems = claims_problems(doc, self.path)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            problems = [f"not the fields an evaluation writes ({type(exc).__name__}: {exc})"]
        what = f"{self.show(path)} says of itself"
        for problem in problems:
            self.failed(depth + 1, what, f"{problem}: it was edited")
        if not problems and doc.get("kind") in ("val", "sample_efficiency"):
            self.passed(depth + 1, what, "agrees with its own sums and sources")
        if "inputs" in doc:
            self.walk_eval(path, doc, depth)

    def check_log(self, log: Path, depth: int) -> None:
        """A metrics log against the final checkpoint that closes it (leviathan.train.log_anchor):
        the records the final fixed, and its last validation loss against the final's."""
        manifest, state = final_records(log.parent)
        recorded = (manifest or {}).get(PREFIX_FIELD)
        what = f"{self.show(log)} up to the final checkpoint"
        if recorded:
            why = prefix_problem(log, recorded)
            if why:
                self.failed(depth, what, why)
            else:
                self.passed(
                    depth, what, f"its first {recorded['bytes']} bytes as the final recorded"
                )
        else:
            self.unverifiable(depth, what, "the final checkpoint records no log (an older run)")
        if state is not None:
            why = final_val_problem(log, state)
            what = f"{self.show(log)} last validation record"
            if why:
                self.failed(depth, what, why)
            else:
                self.passed(depth, what, "equals the final checkpoint's val_loss")

    def walk_manifest(
        self, path: Path, manifest: Mapping[str, Any], depth: int, verified: str | None = None
    ) -> None:
        mpath = self.show(manifest_path(path))
        recorded = manifest.get("artifact", {}).get("sha256")
        if verified is None or recorded != verified:  # else: the line above already says it
            self.check_hash(path, recorded, f"its manifest {mpath}", depth)
        self.check_commit(manifest.get("code"), mpath, depth + 1)
        # the other files of a directory artifact (a checkpoint's state.json, optim.pt, ...)
        files = dict(manifest.get("files") or {})
        for name, sha in files.items():
            self.check_hash(path.parent / name, sha, f"its manifest {mpath}", depth + 1)
        if manifest.get("resumed_from"):
            self.check_resumed_from(manifest["resumed_from"], mpath, depth + 1)
        if manifest.get("kind") == CHECKPOINT_KIND:
            self.check_checkpoint_records(manifest, mpath, depth + 1)
        vocab = manifest.get("vocab")
        if vocab and vocab.get("bpe_file"):
            self.check_vocab_file(vocab, mpath, depth + 1)
        for inp in manifest.get("inputs", []):
            if self.check_hash(inp["path"], inp.get("sha256"), mpath, depth + 1):
                self.walk(inp["path"], depth + 1, inp.get("sha256"))

    def walk_checkpoint_dir(self, ckpt_dir: Path, depth: int, verified: str | None = None) -> None:
        weights = weights_file(ckpt_dir)
        mpath = manifest_path(weights)
        if not mpath.is_file():
            self.failed(
                depth,
                self.show(weights),
                f"the checkpoint has no manifest {mpath.name}, so nothing records what it was "
                "trained from: retrain the cell to record it",
            )
            return
        manifest = read_json_object(mpath)
        self.walk(weights, depth, verified)  # every file its manifest records, state.json too
        state = state_file(ckpt_dir)  # the configs the tables' params/FLOPs read
        recorded = (manifest.get("files") or {}).get(STATE)
        if (
            state.is_file()
            and self.sha(state) == recorded
            and read_json(state).get("model_config") != manifest.get("model_config")
        ):
            self.failed(depth, self.show(state), f"model_config differs from {self.show(mpath)}")

    def check_checkpoint_records(self, manifest: Mapping[str, Any], where: str, depth: int) -> None:
        """What a checkpoint's manifest records beside its own files: the run's log up to its
        step (leviathan.train.log_anchor) and the kept checkpoints written before it (each
        audited as a checkpoint of its own)."""
        log = manifest.get(PREFIX_FIELD)
        if log:
            what = f"{self.show(log['path'])} up to step {log.get('step')}"
            why = prefix_problem(self.path(log["path"]), log)
            if why:
                self.failed(depth, what, f"{why} (recorded in {where})")
            else:
                self.passed(depth, what, f"sha256 {str(log.get('sha256'))[:12]}")
        for kept in manifest.get("kept") or []:
            weights = weights_file(self.path(kept["path"]))
            if self.check_hash(weights, kept.get("sha256"), where, depth):
                self.walk(weights, depth, kept.get("sha256"))

    def check_resumed_from(self, resumed: Mapping[str, Any], where: str, depth: int) -> None:
        """The checkpoint a run resumed from (verified then, as its manifest recorded it): its
        manifest unchanged where it is still kept, and its chain; retention may have removed it."""
        mpath = manifest_path(weights_file(self.path(resumed["path"])))
        what = f"resumed from {self.show(resumed['path'])} (step {resumed.get('step')})"
        if not mpath.is_file():
            self.unverifiable(depth, what, "no longer kept (retention); verified when resumed")
        elif (sha := self.sha(mpath)) != resumed.get("manifest_sha256"):
            self.failed(
                depth, what, f"its manifest changed since it was verified (recorded in {where})"
            )
        else:
            self.passed(depth, what, f"manifest sha256 {sha[:12]}, as verified when resumed")
            self.walk(weights_file(mpath.parent), depth + 1)

    def walk_eval(self, path: Path, doc: Mapping[str, Any], depth: int) -> None:
        depth, where = depth + 1, self.show(path)
        self.check_commit(doc.get("code"), where, depth)
        ckpt = doc.get("checkpoint")
        if ckpt:
            self.check_evaluated_checkpoint(path, ckpt, depth)
        for inp in doc.get("inputs", []):
            if self.check_hash(inp["path"], inp.get("sha256"), where, depth):
                self.walk(inp["path"], depth, inp.get("sha256"))
            if inp.get(
                "checkpoint_sha256"
            ):  # a run's metrics (sample efficiency): its final checkpoint
                final = final_dir(self.path(inp["path"]).parent)
                if self.check_hash(weights_file(final), inp["checkpoint_sha256"], where, depth):
                    self.walk_checkpoint_dir(final, depth + 1, inp["checkpoint_sha256"])

    def check_evaluated_checkpoint(self, path: Path, ckpt: Mapping[str, Any], depth: int) -> None:
        """The checkpoint an evaluation records: of its cell, its files as recorded, then its chain."""
        where = self.show(path)
        self.check_cell_identity(path, ckpt, depth)
        ckpt_dir = self.path(ckpt["path"])
        self.check_hash(state_file(ckpt_dir), ckpt.get("state_sha256"), where, depth)
        if ckpt.get("manifest"):  # the checkpoint's manifest as it was when evaluated
            if not self.check_hash(ckpt["manifest"], ckpt.get("manifest_sha256"), where, depth):
                self.check_written_again(path, ckpt, depth)
        elif "manifest" in ckpt:
            self.failed(
                depth, self.show(ckpt_dir), f"{where} evaluated a checkpoint without a manifest"
            )
        if self.check_hash(weights_file(ckpt_dir), ckpt.get("sha256"), where, depth):
            self.walk_checkpoint_dir(ckpt_dir, depth, ckpt.get("sha256"))

    def check_written_again(self, path: Path, ckpt: Mapping[str, Any], depth: int) -> None:
        """Of an evaluation whose checkpoint's manifest changed: where the manifest there now
        records the weights evaluated, say what a rerun of its training that wrote the
        checkpoint again (e.g. resumed after a damaged final: `resumed_from`) needs, the
        evaluation's rerun; the hashes alone cannot tell that from an edited manifest."""
        mpath = self.path(ckpt["manifest"])
        now = read_json_object(mpath) if mpath.is_file() else {}
        recorded = (now.get("artifact") or {}).get("sha256")
        if recorded and recorded == ckpt.get("sha256"):
            resumed = (now.get("resumed_from") or {}).get("path")
            self.failed(
                depth + 1,
                f"{self.show(path)} is older than its checkpoint",
                "its manifest changed since, its weights did not: if its training reran and "
                "wrote it again"
                + (f" (resumed from {resumed})" if resumed else "")
                + f", {evaluation_fix(self.show(path))}; if not, the manifest was edited",
            )

    def check_cell_identity(self, path: Path, ckpt: Mapping[str, Any], depth: int) -> None:
        """An evaluation under results/eval/<study>/<scale>/<vocab>/<variant>/seed<k>/ must be of that cell."""
        sits_in = layout.eval_cell_key(path)
        if sits_in is None:
            return
        recorded = layout.record_cell_key(ckpt)
        if sits_in != recorded:
            self.failed(
                depth,
                self.show(path),
                f"evaluates the checkpoint of cell {recorded} "
                f"but sits in {sits_in}'s directory (a copied or swapped evaluation)",
            )

    def check_vocab_file(self, vocab: Mapping[str, Any], where: str, depth: int) -> None:
        from leviathan.data.tokenizers import cache_dir

        bpe = cache_dir() / vocab["bpe_file"]
        what = f"vocabulary {vocab.get('name')} ({vocab['bpe_file']})"
        recorded = str(vocab.get("bpe_sha256"))[:12]
        if not bpe.is_file():
            self.unverifiable(
                depth,
                what,
                f"not in this machine's cache ({bpe.parent}); recorded sha256 {recorded}",
            )
        elif self.sha(bpe) != vocab.get("bpe_sha256"):
            self.failed(
                depth, what, f"{bpe}: sha256 {self.sha(bpe)[:12]} != {recorded} recorded in {where}"
            )
        else:
            self.passed(depth, what, f"sha256 {self.sha(bpe)[:12]}")

    def audit_artifact(self, p: str | os.PathLike[str]) -> None:
        """The chain behind one artifact with a manifest (a directory means its
        model.safetensors: a checkpoint or a `leviathan export` directory)."""
        path = self.path(p)
        if path.is_dir():
            path = weights_file(path)
        if not manifest_path(path).is_file():
            self.failed(
                0,
                self.show(path),
                f"no manifest {manifest_path(path).name}: not a pipeline artifact (or not finished)",
            )
            return
        self.walk(path, 0)


@cache
def _repository(root: Path) -> Path | None:
    """The git checkout a recorded commit is looked up in: the audit root's (the checkout
    that holds the audited results) where it is one, else the workflow's (`checkout()`)."""
    return root if git("rev-parse", "--git-dir", at=root) is not None else None


def _shallow(root: Path) -> bool:
    return git("rev-parse", "--is-shallow-repository", at=_repository(root)) == "true"


@cache
def _commit_exists(commit: str, root: Path) -> bool | None:
    """Whether the checkout's history has `commit` (None: not a git checkout here)."""
    at = _repository(root)
    if git("rev-parse", "--git-dir", at=at) is None:
        return None
    return git("cat-file", "-e", f"{commit}^{{commit}}", at=at) is not None
