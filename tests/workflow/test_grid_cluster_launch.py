import shlex
import sys
from pathlib import Path

import yaml

from leviathan import layout
from leviathan.cells import Cell, cells, wildcard_pattern
from leviathan.cli import build_parser
from leviathan.study.cluster import (
    default_resource,
    resources,
    rule_resources,
    train_slurm_keys,
)
from leviathan.study.launch import train_command
from leviathan.values import parse_assignments

STUDIES = {
    "main": {
        "scales": ["400m", "1.2b"],
        "vocabs": ["o200k_base"],
        "variants": ["tied", "leviathan"],
        "seeds": [0],
    },
    "ablation": {
        "scales": ["400m"],
        "vocabs": ["o200k_base"],
        "variants": ["tied", "untied", "albert", "flat_mlp", "factored_mlp", "leviathan"],
        "seeds": [0],
    },
}


def test_cells_are_the_deduplicated_union_of_studies() -> None:
    got = cells(STUDIES, "embedded")
    assert len(got) == 4 + 6 - 2  # 400m tied/leviathan shared by both studies
    assert len(set(got)) == len(got)
    assert got == sorted(got)
    assert Cell("400m", "o200k_base", "leviathan", 0, "embedded") in got


def test_wildcard_pattern_is_exact_alternatives() -> None:
    import re

    pattern = wildcard_pattern(["1.2b", "400m"])
    assert re.fullmatch(pattern, "1.2b")
    assert re.fullmatch(pattern, "400m")
    assert not re.fullmatch(pattern, "1x2b")


def test_resources_per_scale_in_the_plugins_terms() -> None:
    config = {
        "resources": {
            "400m": {
                "gpus": 4,
                "gpu_model": "h100",
                "cpus_per_gpu": 8,
                "mem_mb": 1000,
                "runtime": 30,
            }
        }
    }
    r = resources(config, "400m")
    assert r == {
        "gpu": 4,
        "gpu_model": "h100",
        "cpus_per_gpu": 8,
        "threads": 32,
        "mem_mb": 1000,
        "runtime": 30,
        # sbatch's --signal=[{R|B}:]<sig_num>[@sig_time]: SIGTERM to the job's steps (no `B:`)
        # 134 s before the limit, docs/slurm.md's grace at 400m (two writes of its largest
        # checkpoint at 200 MB/s plus 60 s)
        "slurm_extra": "--signal=TERM@134",
    }
    cpu = resources({"resources": {"micro": {"cpus": 2}}}, "micro")
    assert cpu["gpu"] == 0
    assert cpu["gpu_model"] == ""
    assert cpu["cpus_per_gpu"] == 0
    assert cpu["threads"] == 2


def test_train_command_uses_torchrun_only_for_several_gpus() -> None:
    cell = Cell("400m", "o200k_base", "leviathan", 1, "embedded")
    config = {
        "resources": {"400m": {"gpus": 4}},
        "train": {"400m": {"lr": 3e-4, "betas": [0.9, 0.95]}},
        "runtime": {"validation": {"every": 500}, "threads": None},
    }
    args = shlex.split(
        train_command(cell, config, "data/tokens/pile/o200k_base", layout.run_dir(cell))
    )
    assert args[:3] == [sys.executable, "-m", "leviathan.torchrun"]  # torchrun, 128+signal
    assert "--nproc-per-node" in args
    assert args[args.index("--nproc-per-node") + 1] == "4"
    # what `leviathan train` reads back from the command: the config's values, as written
    train = build_parser().parse_args(args[args.index("leviathan.cli") + 1 :])
    assert parse_assignments(train.set, "--set") == {"lr": 3e-4, "betas": [0.9, 0.95]}
    runtime = parse_assignments(train.runtime, "--runtime")
    assert runtime["validation.every"] == 500
    assert "threads" not in runtime  # null: RuntimeConfig's own default
    single = shlex.split(train_command(cell, {"resources": {"400m": {"gpus": 1}}}, "t", "r"))
    assert single[:3] == [sys.executable, "-m", "leviathan.cli"]


def test_cell_overrides_apply_after_scale_overrides() -> None:
    from leviathan.study.resolve import train_overrides

    cell = Cell("micro", "gpt2", "leviathan", 0, "embedded")
    config = {
        "train": {
            "micro": {"lr": 1e-3, "total_tokens": 512},
            "micro/gpt2/leviathan/seed0": {"lr": 5e-4},
        }
    }
    assert train_overrides(config, cell) == {"lr": 5e-4, "total_tokens": 512}
    assert train_overrides(config, Cell("micro", "gpt2", "tied", 0, "embedded")) == {
        "lr": 1e-3,
        "total_tokens": 512,
    }


def test_runtime_and_resource_defaults_have_one_home() -> None:
    """The schema names the resources' keys, their defaults live in the code; the runtime's keys,
    types and ranges are RuntimeConfig's alone (the schema says only that it is a mapping)."""
    from leviathan.study.cluster import RESOURCE_DEFAULTS, SLURM_KEYS

    schema = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "workflow/schemas/config.schema.yaml").read_text()
    )
    runtime = schema["properties"]["runtime"]
    assert runtime["type"] == "object" and runtime["default"] == {}
    assert not {"properties", "additionalProperties", "patternProperties"} & set(runtime)
    res = schema["properties"]["resources"]["additionalProperties"]["properties"]
    assert set(res) == set(RESOURCE_DEFAULTS) | set(SLURM_KEYS)
    assert [k for k, v in res.items() if "default" in v] == []


def test_workflow_runtime_defaults_reach_the_training_job() -> None:
    """The workflow's choices (no bars in job logs, restart a changed cell) where config is silent."""
    cell = Cell("micro", "gpt2", "tied", 0, "embedded")
    args = shlex.split(train_command(cell, {}, "t", "r"))
    assert "progress=false" in args
    assert "restart_on_mismatch=true" in args
    args = shlex.split(train_command(cell, {"runtime": {"progress": True}}, "t", "r"))
    assert not any(a.startswith("progress=") for a in args)  # RuntimeConfig's own default


def test_slurm_settings_per_scale_only_where_set() -> None:
    config = {
        "resources": {
            "400m": {
                "gpus": 4,
                "slurm_partition": "h100",
                "constraint": "ib",
                "slurm_extra": "--exclusive",
            },
            "micro": {"cpus": 2},
        }
    }
    assert resources(config, "400m")["slurm_partition"] == "h100"
    assert resources(config, "400m")["constraint"] == "ib"
    assert "slurm_partition" not in resources(config, "micro")
    assert train_slurm_keys(config) == ["slurm_partition", "constraint", "slurm_extra"]
    assert train_slurm_keys({"resources": {"micro": {"cpus": 2}}}) == []


def test_default_resource_reads_snakemakes_default_resources_arguments() -> None:
    args = [
        "tmpdir=system_tmpdir",
        "mem_mb=8000",
        "slurm_partition=debug",
        "slurm_account='<your-account>'",
    ]
    assert default_resource(args, "slurm_partition") == "debug"
    assert default_resource(args, "slurm_account") == "<your-account>"
    assert default_resource(args, "mem_mb") == 8000
    assert default_resource(args, "qos") is None
    assert default_resource(None, "qos") is None


def test_rule_resources_come_from_the_config_without_threads() -> None:
    config = {
        "rule_resources": {
            "tokenize": {"mem_mb": 4000, "runtime": 720, "threads": 8, "qos": "short"}
        }
    }
    assert rule_resources(config, "tokenize") == {"mem_mb": 4000, "runtime": 720, "qos": "short"}
    assert rule_resources(config, "report") == {}


def test_micro_batch_stays_out_of_the_train_rules_params() -> None:
    """The train rule's params (its rerun trigger) are `launcher_args` and `cell_args`: a
    change of train.<scale>.micro_batch leaves both as they were, and reaches the job's
    command (`memory_args`) with the same training fingerprint."""
    from leviathan.study.launch import cell_args, launcher_args, memory_args
    from leviathan.study.resolve import cell_train_config

    cell = Cell("micro", "gpt2", "leviathan", 0, "embedded")
    before = {"train": {"micro": {"lr": 1e-3, "micro_batch": 8}}}
    after = {"train": {"micro": {"lr": 1e-3, "micro_batch": 2}}}
    assert cell_args(cell, before, "t", "r") == cell_args(cell, after, "t", "r")
    assert launcher_args(before, "micro") == launcher_args(after, "micro")
    assert "micro_batch" not in cell_args(cell, after, "t", "r")
    assert shlex.split(memory_args(after, cell)) == ["--set", "micro_batch=2"]
    assert "micro_batch=2" in shlex.split(train_command(cell, after, "t", "r"))
    fingerprints = {cell_train_config(c, cell).fingerprint() for c in (before, after)}
    assert len(fingerprints) == 1
    lr_changed = {"train": {"micro": {"lr": 2e-3, "micro_batch": 8}}}
    assert cell_args(cell, lr_changed, "t", "r") != cell_args(cell, before, "t", "r")
