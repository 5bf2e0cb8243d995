"""The resolved workflow config: a study's file is complete on its own (no leaks from the
offline default), `leviathan config show` prints what Snakemake uses, and the plan."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.utils import validate
from workflow_helpers import BIN, ROOT, snakemake, tool_env, workflow_copy

from leviathan.study.actions import tokenize_options
from leviathan.study.config import STAND_IN_DIR, resolve, stand_in_files
from leviathan.study.corpus_size import corpus_bytes, fetch_max_bytes

PAPER = ROOT / "config" / "paper.yaml"
DEFAULT = ROOT / "config" / "config.yaml"
TASKS = {"hellaswag", "arc_easy", "arc_challenge", "piqa", "winogrande", "lambada_openai"}


def _strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return [node] if isinstance(node, str) else []


def test_paper_config_is_the_paper_file_alone() -> None:
    """Resolved = the paper file + the schema's defaults: no key of config/config.yaml leaks."""
    alone = yaml.safe_load(PAPER.read_text())
    validate(alone, str(ROOT / "workflow/schemas/config.schema.yaml"))
    assert resolve([PAPER], root=ROOT) == alone


def test_paper_config_names_the_real_datasets() -> None:
    config = resolve([PAPER], root=ROOT)
    assert stand_in_files(config) == {}
    assert not [s for s in _strings(config) if "resources/smoke" in s]
    assert config["corpus"]["kind"] == "pile"
    wikitext = config["evaluate"]["wikitext"]
    assert wikitext["dataset"] == "EleutherAI/wikitext_document_level"
    assert wikitext["name"] == "wikitext-103-raw-v1"
    assert not wikitext.get("data_files")
    lm_eval = config["evaluate"]["lm_eval"]
    assert set(lm_eval["tasks"]) == TASKS
    assert not lm_eval.get("data")
    assert lm_eval.get("bootstrap_iters") is None  # lm-eval's own default, not the smoke run's 0
    assert config["tokenize"]["threads"] != 2


def test_default_config_is_offline_and_says_so() -> None:
    config = resolve(root=ROOT)
    assert config["corpus"]["kind"] == "embedded"
    stand_ins = stand_in_files(config)
    assert set(stand_ins) == {"wikitext", "lm_eval"}
    assert len(stand_ins["lm_eval"]) == len(TASKS)
    assert all(
        (ROOT / f).is_file() and f.startswith(STAND_IN_DIR)
        for files in stand_ins.values()
        for f in files
    )


def test_a_leaking_key_is_caught(tmp_path: Path) -> None:
    """A study file that leaves `evaluate` out gets the schema's default (off), not the stand-ins."""
    study = tmp_path / "study.yaml"
    study.write_text(
        yaml.safe_dump(
            {"studies": {"main": {"scales": ["micro"], "vocabs": ["gpt2"], "variants": ["tied"]}}}
        )
    )
    config = resolve([study], root=ROOT)
    assert config["evaluate"]["wikitext"] is None
    assert config["evaluate"]["lm_eval"] is None
    assert stand_in_files(config) == {}
    assert list(config["studies"]) == ["main"]
    # and what Snakemake itself would have done before (extend the default): the stand-ins leak
    extended = resolve([DEFAULT, study], root=ROOT)
    assert stand_in_files(extended) != {}


@pytest.mark.parametrize("configfile", [None, "config/paper.yaml"])
def test_config_show_prints_what_snakemake_uses(tmp_path: Path, configfile: str | None) -> None:
    """Real Snakemake parses the workflow and dumps its `config`; `config show --json` agrees."""
    work = workflow_copy(tmp_path)
    with open(work / "Snakefile", "a") as fh:  # the copy only: dump the config Snakemake resolved
        fh.write(
            '\nimport json as _json\nopen("snakemake_config.json", "w").write(_json.dumps(config))\n'
        )
    extra = ["--configfile", configfile] if configfile else []
    out = snakemake(work, "-n", "--profile", "profiles/local", "all", *extra)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "is extended" not in out.stdout + out.stderr
    theirs = json.loads((work / "snakemake_config.json").read_text())
    shown = subprocess.run(
        [str(BIN / "leviathan"), "config", "show", "--json", *extra],
        cwd=work,
        env=tool_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(shown.stdout) == theirs


def test_config_show_prints_a_cell_and_the_plan() -> None:
    leviathan = [
        sys.executable,
        "-m",
        "leviathan.cli",
        "config",
        "show",
        "--configfile",
        str(PAPER),
    ]
    cell = subprocess.run(
        [*leviathan, "--cell", "1.2b/o200k_base/leviathan/seed0", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(cell.stdout)
    assert got["train"]["total_tokens"] == 24_100_000_000
    assert got["train"]["micro_batch"] == 16
    assert got["runtime"]["compile"] is True
    assert got["runtime"]["restart_on_mismatch"] is True
    assert got["resources"]["gpu"] == 8
    # GPU-hours: FLOPs over (peak x MFU), with the paper's 1.2B: about 6 x 1.12e9 params x 24.1e9
    # tokens; the MFU the roofline's, compiled (runtime.compile), between its eager one and 70%
    plan_ = got["plan"]
    assert plan_["mfu_source"] == "compiled"
    assert plan_["mfu"] == plan_["mfu_compiled"]
    assert plan_["mfu_eager"] < plan_["mfu_compiled"] < 0.7
    approx = 6 * 1.12e9 * 24.1e9 / (989e12 * plan_["mfu"]) / 3600
    assert 0.8 * approx < plan_["gpu_hours"] < 1.5 * approx
    # the training job's traced memory fits the H100's 80 GB
    assert plan_["train_gpu_memory"] < plan_["train_gpu_memory_of"] == 80 * 2**30
    plan = subprocess.run(
        [*leviathan, "--no-memory"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "plan: 18 cells" in plan  # 14, and the 200m main cells' seeds 1 and 2
    assert "the real datasets (no offline stand-ins)" in plan
    assert "fetch limit (corpus.max_bytes='auto')" in plan
    bad = subprocess.run(
        [*leviathan, "--cell", "micro/gpt2/tied/seed0"], cwd=ROOT, capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert "not a cell of the configured studies" in bad.stderr


def test_the_paper_download_is_sized_from_the_largest_budget() -> None:
    config = resolve([PAPER], root=ROOT)
    need = corpus_bytes(config)
    assert set(need) == {"gpt2", "cl100k_base", "o200k_base"}
    o200k = need["o200k_base"]  # 1.2B's 24.1B tokens (rounded up to whole steps) x 5 bytes x 1.1
    assert 24.1e9 * 5.0 * 1.1 <= o200k < (24.1e9 + 262_144) * 5.0 * 1.1 + 1
    assert math.isclose(need["gpt2"], need["cl100k_base"])
    assert need["gpt2"] < o200k
    assert fetch_max_bytes(config) == o200k
    assert fetch_max_bytes(resolve(root=ROOT)) is None  # the embedded corpus: all of it
    # each vocabulary tokenizes only its own share: gpt2 and cl100k the 200m budget's text
    for vocab in need:
        assert tokenize_options(config, vocab)["max_bytes"] == need[vocab]
    assert tokenize_options(resolve(root=ROOT), "gpt2")["max_bytes"] is None  # default: whole


def test_target_eval_prints_paths_a_rule_produces(tmp_path: Path) -> None:
    work = workflow_copy(tmp_path)
    args = ["--scale", "micro", "--vocab", "gpt2", "--variant", "leviathan", "--eval"]
    shown = subprocess.run(
        [str(BIN / "leviathan"), "target", *args],
        cwd=work,
        env=tool_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    targets = shown.stdout.split()
    assert [Path(t).name for t in targets] == ["val.json", "wikitext.json", "lm_eval.json"]
    out = snakemake(work, "-n", "--profile", "profiles/local", *targets)
    assert out.returncode == 0, out.stderr[-2000:]


def _schema_names(node: Any, out: list[str]) -> list[str]:
    """Every string the schema matches a value or key against: enums, consts, patterns."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "enum":
                out += [str(v) for v in value]
            elif key in ("const", "pattern"):
                out.append(str(value))
            else:
                _schema_names(value, out)
    elif isinstance(node, list):
        for item in node:
            _schema_names(item, out)
    return out


def test_the_schema_carries_no_copy_of_the_codes_registries() -> None:
    """Scale, vocabulary and variant names and the training keys live in the code only
    (checked by check_names); the schema neither lists nor pattern-matches them, and it holds
    no training or runtime defaults (the scale records and RuntimeConfig do)."""
    from dataclasses import fields

    from leviathan.layout import CONFIG_SCHEMA as SCHEMA
    from leviathan.model.variants import VARIANTS
    from leviathan.scales import SCALES
    from leviathan.train.config import TrainConfig
    from leviathan.vocab import ALIASES, VOCABS

    schema = yaml.safe_load((ROOT / SCHEMA).read_text())
    matched = _schema_names(schema, [])
    assert matched, "the walk finds the schema's own enums (corpus.kind, export.dtype)"
    names = {*SCALES, *VOCABS, *ALIASES, *VARIANTS, *(f.name for f in fields(TrainConfig))}
    for name in sorted(names):
        copies = [m for m in matched if name == m or name in m or re.escape(name) in m]
        assert not copies, f"the schema repeats the code's name {name!r}: {copies}"
    for section in ("train", "runtime"):
        spec = schema["properties"][section]
        assert spec["default"] == {}
        assert "default" not in json.dumps(spec.get("properties", {}))
        assert "default" not in json.dumps(spec.get("additionalProperties", {}))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"studies": {"x": {"scales": ["huge"], "vocabs": ["gpt2"], "variants": ["tied"]}}},
            r"studies\.x\.scales: unknown scale 'huge': use one of micro, tiny, 200m, 400m, 1\.2b",
        ),
        (
            {"studies": {"x": {"scales": ["micro"], "vocabs": ["o200k"], "variants": ["tied"]}}},
            r"studies\.x\.vocabs: unknown vocabulary 'o200k': use one of gpt2, cl100k_base",
        ),
        (
            {"studies": {"x": {"scales": ["micro"], "vocabs": ["gpt2"], "variants": ["lev"]}}},
            r"studies\.x\.variants: unknown variant 'lev': use one of tied, untied, albert",
        ),
        ({"train": {"2b": {"lr": 1.0}}}, r"train\.2b: unknown scale '2b'"),
        ({"train": {"micro": {"learning_rate": 1.0}}}, r"unknown training key 'learning_rate'"),
        ({"train": {"micro": {"seed": 3}}}, r"train\.micro: unknown training key 'seed'"),
        ({"train": {"micro/gpt2": {"lr": 1.0}}}, r"train\.micro/gpt2: not a scale or a cell key"),
        (
            {"train": {"micro/gpt2/nope/seed0": {"lr": 1.0}}},
            r"train\.micro/gpt2/nope/seed0: unknown variant 'nope'",
        ),
        ({"train": {"micro/gpt2/tied/s0": {"lr": 1.0}}}, r"'s0' is not seed<k>"),
        ({"resources": {"1.2B": {"gpus": 8}}}, r"resources: unknown scale '1\.2B'"),
    ],
)
def test_bad_names_are_caught_against_the_codes_registries(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    study = tmp_path / "study.yaml"
    config = {"studies": {"main": {"scales": ["micro"], "vocabs": ["gpt2"], "variants": ["tied"]}}}
    study.write_text(yaml.safe_dump({**config, **change}))
    with pytest.raises(ValueError, match=message):
        resolve([study], root=ROOT)
    good = {"micro": {"lr": 1.0}, "micro/gpt2/tied/seed0": {"warmup_steps": 2}}
    study.write_text(yaml.safe_dump({**config, "train": good}))
    assert resolve([study], root=ROOT)["train"] == good
