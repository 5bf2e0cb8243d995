"""`leviathan preflight`: what a SLURM cluster must offer before a study is queued.

Each check is one `Check` (ok or FAIL, and the fix). The checks read the cluster through its own
commands, whose outputs the parsers here turn into facts (tested on the outputs as strings):

    account      `sacctmgr -n -P show associations user=<you> format=account` has the profile's
                 default-resources slurm_account (a `<placeholder>` is refused before asking)
    partition    `sinfo -h -o %P` has its slurm_partition
    gpu models   `sinfo -h -o %G` (gres such as gpu:h100:4) spells every resources.<scale>.gpu_model
    disk         free space in the working directory against the study's peak (the caller's figure:
                 `leviathan preflight` passes leviathan.cost.disk.study_disk's)
    compute node one `srun` of NODE_PROBE on the profile's account and partition: the Hub reachable
                 or the evaluation datasets fetched into data/eval/ (else the data-transfer-node
                 recipe of docs/slurm.md), one line per dataset the node cannot see, and torch /
                 CUDA against the tested pin (workflow/envs/leviathan.constraints.txt)
"""

from __future__ import annotations

import getpass
import json
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leviathan.cells import config_cells
from leviathan.data.eval_data import fill_command, needs
from leviathan.layout import repo_root
from leviathan.study.cluster import scale_resources
from leviathan.values import load_yaml, split_assignment

PLACEHOLDER = re.compile(r"^<[^>]*>$")
CONSTRAINTS = "workflow/envs/leviathan.constraints.txt"
HUB = ("huggingface.co", 443)
TRANSFER_FIX = (
    "no internet and no Hub cache on compute nodes: run the data rules on a login or transfer "
    "node (`snakemake all_data --profile profiles/local`), then train with the SLURM profile "
    "(docs/slurm.md, the data-transfer-node recipe)"
)
# Run on a compute node by `srun python -c`: one JSON line of what the node offers.
NODE_PROBE = (
    """
import json, os, socket
HUB = HUB_ADDRESS
EVAL_DATA = []
r = {}
try:
    import torch
    r["torch"] = torch.__version__.split("+")[0]
    r["cuda"] = torch.version.cuda
    r["cuda_available"] = torch.cuda.is_available()
except ImportError:
    r["torch"] = None
try:
    socket.create_connection(HUB, timeout=5).close()
    r["internet"] = True
except OSError:
    r["internet"] = False
home = os.environ.get("HF_HUB_CACHE") or os.path.join(
    os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface"), "hub")
r["hub_cache"] = home if os.path.isdir(home) and os.listdir(home) else None
r["eval_data_missing"] = [p for p in EVAL_DATA if not os.path.isfile(p)]
print(json.dumps(r))
"""
).replace("HUB_ADDRESS", repr(HUB))


def node_probe(eval_data: list[str] | None = None) -> str:
    """NODE_PROBE, asked also which of `eval_data` (absolute paths) the node cannot see."""
    return NODE_PROBE.replace("EVAL_DATA = []", f"EVAL_DATA = {list(eval_data or [])!r}", 1)


Runner = Callable[[list[str]], "str | None"]


@dataclass(frozen=True)
class Check:
    """One pre-flight check: its name, whether it passed, what was found, and the fix."""

    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        head = f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"
        return head if self.ok or not self.fix else f"{head}; fix: {self.fix}"


def run_command(cmd: list[str]) -> str | None:
    """The command's stdout, or None where it is not on PATH or fails."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def profile_resources(profile: str | Path) -> dict[str, Any]:
    """The profile's default-resources (a profile directory or its config.yaml): a mapping, or
    Snakemake's list of `NAME=VALUE`. A profile that is none of these is one line naming it."""
    path = Path(profile)
    path = path / "config.yaml" if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no SLURM profile here (pass --profile profiles/slurm)")
    doc = load_yaml(path.read_text(), str(path)) or {}
    fix = "see profiles/slurm/config.yaml"
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a Snakemake profile (a mapping of options): {fix}")
    resources = doc.get("default-resources") or {}
    if isinstance(resources, list):
        where = f"{path}: default-resources"
        items = [split_assignment(str(i), where, "NAME=VALUE items") for i in resources]
        resources = {name: load_yaml(value, where) for name, value in items}
    if not isinstance(resources, dict):
        raise ValueError(
            f"{path}: default-resources is {resources!r}: give NAME: VALUE pairs ({fix})"
        )
    return dict(resources)


def parse_lines(out: str) -> set[str]:
    """One name a line (sacctmgr -n -P, sinfo -h -o %P): stripped, sinfo's default mark '*' off."""
    return {line.strip().rstrip("*") for line in out.splitlines() if line.strip()}


def parse_gres_models(out: str) -> set[str]:
    """GPU model names of `sinfo -h -o %G` lines (gpu:<model>:<n>[(S:..)], comma-separated)."""
    models = set()
    for entry in re.split(r"[,\s]+", out):
        parts = re.sub(r"\(.*?\)", "", entry).split(":")
        if len(parts) >= 3 and parts[0] == "gpu":
            models.add(parts[1])
    return models


def check_named(what: str, key: str, value: Any, known: set[str] | None, tool: str) -> Check:
    """Is the profile's `key` (`what`: an account or partition) set and known to the cluster?"""
    name = f"{what} {value}"
    fix = f"set default-resources.{key} to your {what} in the profile's config.yaml"
    if not value or PLACEHOLDER.match(str(value)):
        return Check(name, False, "still the profile's placeholder", fix)
    if known is None:
        return Check(name, False, f"`{tool}` gave no answer", "run on the cluster's login node")
    if str(value) not in known:
        listed = ", ".join(sorted(known)[:8]) or "none"
        return Check(name, False, f"unknown to `{tool}` (it lists {listed})", fix)
    return Check(name, True, f"known to `{tool}`")


def check_gpu_models(config: Mapping[str, Any], models: set[str] | None) -> list[Check]:
    """Every resources.<scale>.gpu_model the studies ask for, as the site's gres spells it."""

    wanted = {c.scale: scale_resources(config, c.scale)["gpu_model"] for c in config_cells(config)}
    checks = []
    for scale, model in sorted(wanted.items()):
        name = f"gpu model of {scale}"
        if not model:
            checks.append(Check(name, True, "none asked for (any GPU of the partition)"))
        elif models is None:
            checks.append(
                Check(name, False, "`sinfo -o %G` gave no answer", "run on the login node")
            )
        elif model not in models:
            fix = f"set resources.{scale}.gpu_model to one of {', '.join(sorted(models)) or '(none: no typed gres)'}"
            checks.append(Check(name, False, f"{model!r} is not a gres type here", fix))
        else:
            checks.append(Check(name, True, f"{model!r} is a gres type here"))
    return checks


def check_disk(needed: int, free: int, where: str) -> Check:
    """Free space in `where` against the plan's peak."""
    detail = f"{free / 1e9:.1f} GB free in {where}, the plan's peak is {needed / 1e9:.1f} GB"
    if free >= needed:
        return Check("disk", True, detail)
    return Check(
        "disk",
        False,
        detail,
        "free space, or run in a larger file system (`leviathan config show` gives the plan)",
    )


def tested_pin(package: str, constraints: Path) -> str | None:
    """The version `constraints` pins `package` to (None where it pins none)."""
    if not constraints.is_file():
        return None
    for line in constraints.read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep and name.strip().lower() == package:
            return version.split(";")[0].strip()
    return None


def parse_node_report(out: str | None) -> dict[str, Any] | None:
    """NODE_PROBE's JSON line (the last line that parses; None where there is none)."""
    for line in reversed((out or "").splitlines()):
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if isinstance(report, dict):
            return report
    return None


def check_node(
    report: Mapping[str, Any] | None, torch_pin: str | None, eval_data: int = 0
) -> list[Check]:
    """The compute node's Hub access, or what stands in for it (every one of the `eval_data`
    evaluation datasets fetched, or a Hub cache), and its torch / CUDA build."""
    if report is None:
        fix = "check the profile's account and partition; `srun -A <account> -p <partition> python -V` must work"
        return [Check("compute node", False, "the srun probe gave no report", fix)]
    if report.get("internet"):
        hub = Check("hub on a compute node", True, f"{HUB[0]} reachable")
    elif eval_data and not report.get("eval_data_missing"):
        detail = f"no internet; the {eval_data} evaluation dataset(s) fetched by the data step"
        hub = Check("hub on a compute node", True, detail)
    elif report.get("hub_cache"):
        hub = Check(
            "hub on a compute node", True, f"no internet; a Hub cache at {report['hub_cache']}"
        )
    else:
        hub = Check(
            "hub on a compute node", False, f"{HUB[0]} unreachable and no Hub cache", TRANSFER_FIX
        )
    torch = report.get("torch")
    if torch is None:
        versions = Check(
            "torch",
            False,
            "not importable on the compute node",
            "create the environment there (docs/gpu.md)",
        )
    else:
        cuda = f"CUDA {report.get('cuda')}, GPU {'seen' if report.get('cuda_available') else 'not seen'}"
        tested = torch_pin is None or torch == torch_pin
        detail = f"torch {torch} ({cuda}); tested: torch {torch_pin or 'unpinned'}"
        fix = f"install torch=={torch_pin} (the CUDA build for the site's driver)"
        versions = Check(
            "torch",
            tested and bool(report.get("cuda_available")),
            detail,
            fix
            if not tested
            else "install torch's CUDA build there, on a GPU partition (docs/gpu.md)",
        )
    return [hub, versions]


def check_eval_data(
    report: Mapping[str, Any] | None, needs: list[Any], config_files: list[str] | None = None
) -> list[Check]:
    """Each evaluation dataset (leviathan.data.eval_data.Need) the compute node cannot see:
    one line each, naming the command that fetches it (a FAIL where the node has no internet;
    with internet the workflow's fetch_eval_data job downloads it there)."""

    if report is None or not needs:
        return []
    missing = {Path(p).resolve() for p in report.get("eval_data_missing") or []}
    lost = [n for n in needs if Path(n.source).resolve() in missing]
    if not lost:
        return [Check("evaluation data", True, f"{len(needs)} dataset(s) in data/eval/")]
    online = bool(report.get("internet"))
    fix = f"run `{fill_command(config_files)}` where the Hub is reachable (docs/slurm.md)"
    return [
        Check(
            f"evaluation data {n.key}",
            online,
            f"{n.source} is not on the compute node"
            + ("; it has internet: the workflow fetches it there" if online else ""),
            fix,
        )
        for n in lost
    ]


def srun_probe(
    resources: Mapping[str, Any], python: str, eval_data: list[str] | None = None
) -> list[str]:
    """The srun command that runs NODE_PROBE on one GPU of the profile's account and partition
    (`eval_data`: absolute paths of the evaluation datasets it looks for)."""
    cmd = ["srun", "-n", "1", "-t", "10", "--gpus=1"]
    for flag, key in (("-A", "slurm_account"), ("-p", "slurm_partition")):
        if resources.get(key):
            cmd += [flag, str(resources[key])]
    return [*cmd, python, "-c", node_probe(eval_data)]


def cluster_checks(
    resources: Mapping[str, Any], config: Mapping[str, Any], run: Runner
) -> list[Check]:
    """Account, partition and GPU models, each from the cluster's own command."""

    accounts = run(
        [
            "sacctmgr",
            "-n",
            "-P",
            "show",
            "associations",
            f"user={getpass.getuser()}",
            "format=account",
        ]
    )
    partitions = run(["sinfo", "-h", "-o", "%P"])
    gres = run(["sinfo", "-h", "-o", "%G"])
    return [
        check_named(
            "account",
            "slurm_account",
            resources.get("slurm_account"),
            None if accounts is None else parse_lines(accounts),
            "sacctmgr",
        ),
        check_named(
            "partition",
            "slurm_partition",
            resources.get("slurm_partition"),
            None if partitions is None else parse_lines(partitions),
            "sinfo",
        ),
        *check_gpu_models(config, None if gres is None else parse_gres_models(gres)),
    ]


def preflight(
    profile: str | Path,
    config: Mapping[str, Any],
    disk_need: int,
    run: Runner = run_command,
    python: str = "python",
    config_files: list[str] | None = None,
) -> list[Check]:
    """Every check, in order; the compute-node probe only once account and partition pass
    (`disk_need`: the bytes the study needs on disk at its peak; `config_files`: the study's,
    named in the fix of missing evaluation data)."""

    resources = profile_resources(profile)
    checks = cluster_checks(resources, config, run)
    checks.append(check_disk(disk_need, shutil.disk_usage(Path.cwd()).free, str(Path.cwd())))
    if all(c.ok for c in checks[:2]):
        wanted = needs(config)
        paths = [str(Path(n.source).resolve()) for n in wanted]
        report = parse_node_report(run(srun_probe(resources, python, paths)))
        checks += check_node(report, tested_pin("torch", repo_root() / CONSTRAINTS), len(wanted))
        checks += check_eval_data(report, wanted, config_files)
    else:
        checks.append(
            Check(
                "compute node",
                False,
                "not probed: the account or partition failed",
                "fix those first",
            )
        )
    return checks
