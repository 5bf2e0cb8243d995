"""`leviathan preflight` logic on the cluster commands' outputs given as strings (sinfo,
sacctmgr, the compute-node probe); the real cluster run is in tests/slurm/test_slurm_workflow.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from leviathan.cost.disk import study_disk
from leviathan.study import preflight as pf
from leviathan.study.config import resolve

ROOT = Path(__file__).resolve().parents[2]
SINFO_P = "debug*\ngpu\nlong\n"
SINFO_G = "gpu:h100:4(S:0-1)\ngpu:a100_80g:8,craynetwork:4\n(null)\ngpu:2\n"
SACCT = "proj1\nproj2\n"


def test_parsers_read_the_commands_outputs() -> None:
    assert pf.parse_lines(SINFO_P) == {"debug", "gpu", "long"}
    assert pf.parse_lines(SACCT) == {"proj1", "proj2"}
    assert pf.parse_gres_models(SINFO_G) == {"h100", "a100_80g"}
    assert pf.parse_gres_models("(null)\n") == set()


def test_placeholders_and_unknown_names_are_refused_with_the_fix() -> None:
    placeholder = pf.check_named(
        "account", "slurm_account", "<your-account>", {"proj1"}, "sacctmgr"
    )
    assert not placeholder.ok and "placeholder" in placeholder.line()
    assert "fix: set default-resources.slurm_account" in placeholder.line()
    unknown = pf.check_named("partition", "slurm_partition", "gpus", {"debug", "gpu"}, "sinfo")
    assert not unknown.ok and "unknown to `sinfo` (it lists debug, gpu)" in unknown.line()
    assert pf.check_named("partition", "slurm_partition", "gpu", {"debug", "gpu"}, "sinfo").ok
    assert not pf.check_named("account", "slurm_account", "p", None, "sacctmgr").ok


def test_gpu_models_are_checked_as_the_site_spells_them() -> None:
    config = resolve(root=ROOT)
    scale = config["studies"]["main"]["scales"][0]
    config["resources"] = {scale: {"gpu_model": "H100"}}
    (bad,) = pf.check_gpu_models(config, pf.parse_gres_models(SINFO_G))
    assert not bad.ok and f"resources.{scale}.gpu_model to one of a100_80g, h100" in bad.line()
    config["resources"][scale]["gpu_model"] = "h100"
    assert all(c.ok for c in pf.check_gpu_models(config, pf.parse_gres_models(SINFO_G)))


def test_disk_and_the_node_report() -> None:
    assert pf.check_disk(10, 11, "/x").ok and not pf.check_disk(11, 10, "/x").ok
    report = {"torch": "2.13.0", "cuda": "12.8", "cuda_available": True, "internet": False}
    out = "srun: job 7 queued\n" + json.dumps({**report, "hub_cache": None}) + "\n"
    hub, torch = pf.check_node(pf.parse_node_report(out), "2.13.0")
    assert not hub.ok and "transfer node" in hub.line() and torch.ok
    cached = pf.check_node({**report, "hub_cache": "/scratch/hub"}, "2.13.0")[0]
    assert cached.ok and "/scratch/hub" in cached.line()
    older = pf.check_node({**report, "torch": "2.4.1"}, "2.13.0")[1]
    assert not older.ok and "torch==2.13.0" in older.line()
    assert not pf.check_node(pf.parse_node_report("srun: error: no such partition\n"), None)[0].ok


def test_the_probe_runs_here_and_reports_this_interpreter() -> None:
    """NODE_PROBE is real Python: run locally, it reports this interpreter's torch."""
    import torch

    out = subprocess.run([sys.executable, "-c", pf.NODE_PROBE], capture_output=True, text=True)
    report = pf.parse_node_report(out.stdout)
    assert report is not None and report["torch"] == torch.__version__.split("+")[0]
    assert isinstance(report["internet"], bool)


def test_preflight_runs_every_check_on_given_outputs(tmp_path: Path) -> None:
    profile = tmp_path / "config.yaml"
    resources = {"slurm_account": "proj1", "slurm_partition": "gpu", "mem_mb": 8000}
    profile.write_text(yaml.safe_dump({"default-resources": resources}))
    node = json.dumps({"torch": "0.1", "cuda": None, "cuda_available": False, "internet": True})
    answers = {
        "sacctmgr": SACCT,
        "sinfo -h -o %P": SINFO_P,
        "sinfo -h -o %G": SINFO_G,
        "srun": node,
    }
    asked: list[list[str]] = []

    def run(cmd: list[str]) -> str | None:
        asked.append(cmd)
        return next(v for k, v in answers.items() if " ".join(cmd).startswith(k))

    config = resolve(root=ROOT)
    checks = pf.preflight(tmp_path, config, study_disk(config).total, run)
    lines = [c.line() for c in checks]
    assert lines[0].startswith("ok   account proj1") and lines[1].startswith("ok   partition gpu")
    assert any(line.startswith("ok   hub on a compute node") for line in lines)
    assert any(line.startswith("FAIL torch: torch 0.1") for line in lines)
    srun = asked[-1]
    assert (
        srun[:2] == ["srun", "-n"]
        and ["-A", "proj1"] == srun[srun.index("-A") : srun.index("-A") + 2]
    )


def test_the_command_refuses_the_shipped_placeholders(capsys: pytest.CaptureFixture[str]) -> None:
    from leviathan.cli import main

    assert main(["preflight", "--profile", str(ROOT / "profiles" / "slurm")]) == 1
    out = capsys.readouterr().out
    assert "FAIL account <your-account>: still the profile's placeholder" in out
    assert out.rstrip().endswith("check(s) failed")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("default-resources: {slurm_account: [\n", "not valid YAML (line 2"),
        ("- executor: slurm\n", "not a Snakemake profile (a mapping of options)"),
        ("default-resources: 5\n", "default-resources is 5: give NAME: VALUE pairs"),
        ("default-resources: [slurm_account]\n", "default-resources: expected NAME=VALUE items"),
    ],
)
def test_a_malformed_profile_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    from leviathan.cli import main

    profile = tmp_path / "config.yaml"
    profile.write_text(content)
    assert main(["preflight", "--profile", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"leviathan preflight: error: {profile}: ")
    assert message in err[0]


def test_default_resources_as_snakemake_lists_them(tmp_path: Path) -> None:
    profile = tmp_path / "config.yaml"
    profile.write_text("default-resources: [slurm_account=proj1, 'mem_mb=8000']\n")
    assert pf.profile_resources(tmp_path) == {"slurm_account": "proj1", "mem_mb": 8000}


def test_evaluation_data_missing_on_the_node_is_one_line_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe (real Python, run here as on a compute node) looks for each evaluation dataset
    of the paper's study in data/eval/: one FAIL per missing one naming the command that fetches
    it, then ok once every one is there (the node needs no internet then)."""
    from leviathan.data.eval_data import needs

    config = resolve([ROOT / "config" / "paper.yaml"], root=ROOT)
    wanted = needs(config)
    monkeypatch.chdir(tmp_path)
    for need in wanted[1:]:
        need.source.parent.mkdir(parents=True)
        need.source.write_text("{}")
    paths = [str(Path(n.source).resolve()) for n in wanted]

    def probe() -> dict[str, object]:
        out = subprocess.run(
            # torch kept out (its import is most of the probe's time; tested above)
            [
                sys.executable,
                "-c",
                'import sys; sys.modules["torch"] = None\n' + pf.node_probe(paths),
            ],
            capture_output=True,
            text=True,
        )
        report = pf.parse_node_report(out.stdout)
        assert report is not None, out.stderr
        return {**report, "internet": False}  # as on a compute node without internet

    files = ["config/paper.yaml"]
    report = probe()
    (missing,) = pf.check_eval_data(report, wanted, files)
    assert not missing.ok and missing.name == f"evaluation data {wanted[0].key}"
    fix = "fix: run `snakemake all_data --profile profiles/local --configfile config/paper.yaml`"
    assert fix in missing.line()
    assert not pf.check_node({**report, "hub_cache": None}, None, len(wanted))[0].ok
    wanted[0].source.parent.mkdir(parents=True)
    wanted[0].source.write_text("{}")
    report = probe()
    (present,) = pf.check_eval_data(report, wanted, files)
    assert present.ok and f"{len(wanted)} dataset(s)" in present.line()
    hub = pf.check_node({**report, "hub_cache": None}, None, len(wanted))[0]
    assert hub.ok and "fetched by the data step" in hub.line()
