"""Sweeps as config: named variants (`variants:`) and tagged cells (`<variant>@<tag>`, `tags:`)
resolved, refused, fingerprinted and reported; and one real micro study of tied, a named variant
and a tagged cell trained, evaluated and reported by the Snakemake DAG from its config alone."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from workflow_helpers import ROOT, audit, snakemake, workflow_copy

from leviathan import layout
from leviathan.cells import Cell, config_cells
from leviathan.model import build_model
from leviathan.model.config import model_config
from leviathan.scales import get_scale
from leviathan.study.config import check_config
from leviathan.study.launch import cell_args
from leviathan.study.resolve import cell_recipe, cell_train_config
from leviathan.study.sweep import deep_merge
from leviathan.train.config import train_config
from leviathan.train.recipe import format_number, recipe_differences, recipe_text

H4 = {"base": "leviathan", "model": {"lev": {"n_heads": 4}}}
SWEEP = {
    "corpus": {"name": "embedded"},
    "variants": {"lev_h4": H4},
    "tags": {"lr1e-3": {"train": {"lr": "1e-3"}}},  # as Snakemake's YAML 1.1 reader leaves it
    "studies": {
        "sweep": {
            "scales": ["micro"],
            "vocabs": ["gpt2"],
            "variants": ["tied", "leviathan", "lev_h4", "leviathan@lr1e-3"],
            "seeds": [0],
        }
    },
    "train": {"micro": {"total_tokens": 8 * 64 * 4}},
}


def sweep(**changes: Any) -> dict[str, Any]:
    config = copy.deepcopy(SWEEP)
    config.update(copy.deepcopy(changes))
    check_config(config)
    return config


def cell(variant: str) -> Cell:
    return Cell("micro", "gpt2", variant, 0, "embedded")


# ---------------------------------------------------------------- resolution


def test_named_variant_is_its_base_with_the_model_deep_merged() -> None:
    config = sweep()
    tc = cell_train_config(config, cell("lev_h4"))
    assert (tc.variant, tc.variant_name) == ("leviathan", "lev_h4")
    got = tc.model_config()
    # the same model written out by hand: the base's config with only lev.n_heads changed
    fields = get_scale("micro").model_fields()
    lev = {**fields["lev"], "n_heads": 4}
    assert got == model_config("micro", "gpt2", "leviathan", overrides={"lev": lev})
    assert got.lev.n_heads == 4 and got.lev.d_seed == get_scale("micro").lev["d_seed"]
    base = cell_train_config(config, cell("leviathan")).model_config()
    assert base.lev.n_heads != 4 and base.with_(lev=got.lev) == got
    # the model it builds has 4 heads' worth of LEV projections, fewer than the base's
    n = {
        v: sum(p.numel() for p in build_model(m).parameters())
        for v, m in (("h4", got), ("b", base))
    }
    assert n["h4"] != n["b"]


def test_named_variant_merges_over_the_scales_model_overrides_and_under_the_cells() -> None:
    scale_mo = {"model_overrides": {"lev": {"n_knots": 12, "n_heads": 2}}}
    key = "micro/gpt2/lev_h4/seed0"
    config = sweep(
        train={
            "micro": {"total_tokens": 2048, **scale_mo},
            key: {"model_overrides": {"lev": {"rank": 32}}},
        }
    )
    mo = cell_train_config(config, cell("lev_h4")).model_overrides
    assert mo == {"lev": {"n_knots": 12, "n_heads": 4, "rank": 32}}
    assert (
        cell_train_config(config, cell("leviathan")).model_overrides == scale_mo["model_overrides"]
    )
    assert deep_merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}, "d": 4}) == {
        "a": {"b": 1, "c": 3},
        "d": 4,
    }


def test_tag_changes_the_recipe_of_its_cell_only_and_runs_as_the_base_variant() -> None:
    config = sweep()
    tagged = cell_train_config(config, cell("leviathan@lr1e-3"))
    plain = cell_train_config(config, cell("leviathan"))
    assert tagged.lr == 1e-3 and plain.lr == get_scale("micro").lr
    assert tagged.variant == plain.variant == "leviathan"
    assert tagged.with_(lr=plain.lr, variant_name=None) == plain
    args = cell_args(cell("leviathan@lr1e-3"), config, "data/tokens/embedded/gpt2", "run")
    assert "--variant leviathan " in args and "--set lr=0.001" in args
    assert "--set variant_name=leviathan@lr1e-3" in args
    # a tag on a named variant: both apply
    config["studies"]["sweep"]["variants"].append("lev_h4@lr1e-3")
    check_config(config)
    both = cell_train_config(config, cell("lev_h4@lr1e-3"))
    assert both.lr == 1e-3 and both.model_overrides == {"lev": {"n_heads": 4}}


def test_fingerprints_differ_between_cells_and_stay_put_for_plain_cells() -> None:
    config = sweep(tags={"lr1e-3": {"train": {"lr": 1e-3}}, "same": {"train": {}}})
    config["studies"]["sweep"]["variants"].append("leviathan@same")
    check_config(config)
    prints = {c.variant: cell_train_config(config, c).fingerprint() for c in config_cells(config)}
    assert len(set(prints.values())) == len(prints) == 5  # a no-op tag is its own cell too
    # a plain cell's fingerprint is that of its recipe alone (no variant_name)
    plain = train_config("micro", "gpt2", "leviathan", total_tokens=2048)
    assert prints["leviathan"] == plain.fingerprint()
    assert "variant_name" not in json.dumps({k: v for k, v in plain.to_dict().items() if v})


def test_named_variants_and_tags_are_safe_path_components_and_wildcards() -> None:
    config = sweep()
    for c in config_cells(config):
        run = layout.run_dir(c)
        assert run.split("/")[-2] == c.variant and ".." not in run
        assert layout.parse_cell_key(c.key)[2] == c.variant
    # the rules' wildcard constraint (common.smk) matches each name exactly, and nothing longer
    from leviathan.cells import wildcard_pattern

    pattern = wildcard_pattern(c.variant for c in config_cells(config))
    for c in config_cells(config):
        assert re.fullmatch(pattern, c.variant)
    assert not re.fullmatch(pattern, "leviathan@lr1e-4") and not re.fullmatch(pattern, "lev_h")


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"variants": {"lev_h4": {"base": "levi", "model": {}}}},
            "variants.lev_h4.base: unknown variant 'levi'",
        ),
        (
            {"variants": {"lev_h4": {"base": "leviathan", "model": {"lev": {"n_head": 4}}}}},
            "variants.lev_h4.model.lev: unknown key 'n_head'",
        ),
        (
            {"variants": {"lev_h4": {"base": "leviathan", "model": {"n_layer": 4}}}},
            "variants.lev_h4.model: unknown key 'n_layer'",
        ),
        (
            {"variants": {"lev_h4": {"base": "leviathan", "model": {"variant": "tied"}}}},
            "variants.lev_h4.model: variant cannot be set",
        ),
        (
            {"variants": {"lev_h4": {"base": "leviathan", "model": {"lev": {"n_heads": "four"}}}}},
            "variants.lev_h4.model.lev: n_heads='four' is not an integer",
        ),
        ({"variants": {"tied": {"base": "leviathan"}}}, "'tied' is a built-in variant"),
        ({"variants": {"lev@h4": H4}}, "variant name 'lev@h4' is not a plain name"),
        ({"variants": {"lev/h4": H4}}, "variant name 'lev/h4' is not a plain name"),
        ({"tags": {".lr": {"train": {"lr": 1e-3}}}}, "tag name '.lr' is not a plain name"),
        ({"tags": {"lr1e-3": {"train": {"lrr": 1e-3}}}}, "tags.lr1e-3.train: unknown key 'lrr'"),
        (
            {"tags": {"lr1e-3": {"train": {"lr": "fast"}}}},
            "tags.lr1e-3.train: lr='fast' is not a number",
        ),
        (
            {"tags": {"lr1e-3": {"train": {"model_overrides": {}}}}},
            "model_overrides is no recipe change",
        ),
        ({"tags": {}}, "names the tag 'lr1e-3', which config.tags does not define"),
        ({"variants": {}}, "studies.sweep.variants: unknown variant 'lev_h4'"),
        (
            {"variants": {"lev_h4": {"base": "leviathan", "model": {"lev": {"n_heads": 0}}}}},
            "cell micro/gpt2/lev_h4/seed0: lev.n_heads=0 must be a positive integer",
        ),
        (
            {"train": {"micro/gpt2/lev_h4/seed0": {"model_overrides": {"lev": {"heads": 2}}}}},
            "train.micro/gpt2/lev_h4/seed0.model_overrides.lev: unknown key 'heads'",
        ),
    ],
)
def test_refusals_are_one_line_naming_the_key(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as exc:
        sweep(**changes)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_a_tag_naming_no_block_in_a_cell_key_and_a_bad_tag_name_in_a_study() -> None:
    with pytest.raises(ValueError, match="names the tag 'lr3e-4'"):
        sweep(train={"micro/gpt2/leviathan@lr3e-4/seed0": {"lr": 3e-4}})
    bad = copy.deepcopy(SWEEP)
    bad["studies"]["sweep"]["variants"] = ["leviathan@a/b"]
    with pytest.raises(ValueError, match="tag name 'a/b' is not a plain name"):
        check_config(bad)


# ---------------------------------------------------------------- the recipe column


def test_recipe_text_of_each_cell_against_its_scales_default() -> None:
    config = sweep(train={"micro": {"total_tokens": 2048, "warmup_steps": 1}})
    recipes = {c.variant: cell_recipe(config, c) for c in config_cells(config)}
    assert recipes == {
        "tied": "",
        "leviathan": "",
        "lev_h4": "lev.n_heads=4",
        "leviathan@lr1e-3": "lr=1e-3",
    }
    # one cell's own override shows on that cell alone; micro_batch (memory) never does
    key = "micro/gpt2/leviathan/seed0"
    config = sweep(train={"micro": {"total_tokens": 2048}, key: {"lr": 3e-4, "micro_batch": 4}})
    assert cell_recipe(config, cell("leviathan")) == "lr=3e-4"
    assert cell_recipe(config, cell("tied")) == ""


def test_recipe_differences_and_their_text() -> None:
    default = train_config("micro", "gpt2", "leviathan").to_dict()
    changed = train_config(
        "micro",
        "gpt2",
        "leviathan",
        lr=1.5e-3,
        betas=[0.9, 0.95],
        model_overrides={"lev": {"n_heads": 4}, "n_layers": 3},
        variant_name="x",
        micro_batch=2,
    ).to_dict()
    diff = recipe_differences(default, changed)
    assert diff == {"betas": [0.9, 0.95], "lev.n_heads": 4, "lr": 1.5e-3, "n_layers": 3}
    assert recipe_text(diff) == "betas=[0.9,0.95], lev.n_heads=4, lr=0.0015, n_layers=3"
    assert recipe_differences(default, default) == {} and recipe_text({}) == ""
    assert [format_number(v) for v in (1e-3, 3e-4, 0.5, 2.5e-5, 1e9, 100)] == [
        "1e-3",
        "3e-4",
        "0.5",
        "2.5e-5",
        "1e9",
        "100",
    ]


def test_config_show_lists_each_cell_with_its_base_and_recipe() -> None:
    from leviathan.commands.config import cell_settings, cells_section

    config = sweep()
    text = cells_section(config)
    assert re.search(r"^  micro/gpt2/lev_h4 +leviathan +lev\.n_heads=4$", text, re.M)
    assert re.search(r"^  micro/gpt2/leviathan@lr1e-3 +leviathan +lr=1e-3$", text, re.M)
    assert re.search(r"^  micro/gpt2/tied +tied$", text, re.M)
    settings = cell_settings(config, cell("leviathan@lr1e-3"), None, memory=False)
    assert settings["variant"] == {
        "name": "leviathan@lr1e-3",
        "base": "leviathan",
        "recipe": "lr=1e-3",
    }
    assert settings["train"]["lr"] == 1e-3
    assert settings["run_dir"].endswith("/micro/gpt2/leviathan@lr1e-3/seed0")


# ---------------------------------------------------------------- the real DAG


def _study(work: Path) -> Path:
    """A micro study of tied, a named variant and a tagged cell, validation only: 4 steps each."""
    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config = {
        "corpus": base["corpus"],
        "study_name": "sweep",
        "variants": {"lev_h4": H4},
        "tags": {"lr1e-3": {"train": {"lr": 1.0e-3}}},
        "studies": {
            "main": {
                "scales": ["micro"],
                "vocabs": ["gpt2"],
                "variants": ["tied", "lev_h4", "leviathan@lr1e-3"],
                "seeds": [0],
            }
        },
        "tokenize": base["tokenize"],
        "train": {"micro": {"total_tokens": 8 * 64 * 4}},
        "runtime": {
            "validation": {"every": 2, "windows": 2},
            "checkpoint": {"every": 0},
            "threads": 1,
        },
        "evaluate": {"val": {"batch_size": 16, "max_windows": 8}, "word_counts": None},
        # one CPU per job: two jobs at once on two cores
        "resources": {"micro": {**base["resources"]["micro"], "cpus": 1}},
    }
    path = work / "config" / "sweep.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.mark.slow
def test_named_variant_and_tagged_cell_trained_and_reported_from_config_alone(
    tmp_path: Path,
) -> None:
    """The DAG (corpus, tokenize, 3 x train and eval_val, sample efficiency, report: 11 jobs,
    two at a time) and the audit of the main table: 190 s measured on 2 shared cores under a
    load of 5-7 (the jobs' own seconds: about 150 s, training 20 s per cell)."""
    work = workflow_copy(tmp_path)
    configfile = _study(work)
    out = snakemake(
        work, "all", "--profile", "profiles/local", "--cores", "2", "--configfile", str(configfile)
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    runs = work / "results/runs/sweep/micro/gpt2"
    states = {
        v: json.loads((runs / v / "seed0/checkpoints/final/state.json").read_text())
        for v in ("tied", "lev_h4", "leviathan@lr1e-3")
    }
    # each trained what its config says: the named variant LEV with 4 heads, the tag lr 1e-3
    assert states["lev_h4"]["model_config"]["variant"] == "leviathan"
    assert states["lev_h4"]["model_config"]["lev"]["n_heads"] == 4
    assert states["leviathan@lr1e-3"]["train_config"]["lr"] == 1e-3
    assert states["leviathan@lr1e-3"]["model_config"]["lev"]["n_heads"] != 4
    assert len({s["train_fingerprint"] for s in states.values()}) == 3
    # the learning rate the tagged run logged follows its own peak (warm-up, then cosine)
    lrs = [
        json.loads(line)["lr"]
        for line in (runs / "leviathan@lr1e-3/seed0/metrics.jsonl").read_text().splitlines()
        if json.loads(line).get("kind") == "train"
    ]
    assert max(lrs) == pytest.approx(1e-3, rel=1e-6)
    tables = work / "results/report/sweep/tables"
    main = pd.read_csv(tables / "main.csv", keep_default_na=False).set_index("row")
    assert main.loc["micro/gpt2/lev_h4", "recipe"] == "lev.n_heads=4"
    assert main.loc["micro/gpt2/leviathan@lr1e-3", "recipe"] == "lr=1e-3"
    assert main.loc["micro/gpt2/tied", "recipe"] == ""
    for variant in ("lev_h4", "leviathan@lr1e-3"):
        val = json.loads(
            (work / f"results/eval/sweep/micro/gpt2/{variant}/seed0/val.json").read_text()
        )
        assert main.loc[f"micro/gpt2/{variant}", "val_loss"] == val["results"]["overall"]["loss"]
    md = (tables / "main.md").read_text()
    assert re.search(r"\| micro +\| gpt2 +\| leviathan@lr1e-3 .*\| lr=1e-3 +\|", md)
    se = pd.read_csv(tables / "sample_efficiency.csv", keep_default_na=False).set_index("row")
    assert set(se.index) == {"micro/gpt2/lev_h4", "micro/gpt2/leviathan@lr1e-3"}
    assert se.loc["micro/gpt2/leviathan@lr1e-3", "recipe"] == "leviathan@lr1e-3: lr=1e-3"
    cost = pd.read_csv(tables / "cost.csv", keep_default_na=False).set_index("row")
    assert cost.loc["micro/gpt2/lev_h4", "recipe"] == "lev.n_heads=4"
    metrics = json.loads((tables / "metrics.json").read_text())
    assert metrics["micro/gpt2/lev_h4/seed0"]["recipe"] == "lev.n_heads=4"
    # the audit traces every number, the named cells' evaluations to their own checkpoints
    checked = audit(work, str(tables / "main.csv"))
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]


def test_a_named_cells_records_name_its_cell_not_its_base() -> None:
    """An evaluation's checkpoint record names the cell it sits under (the audit's identity check)."""
    record = {"scale": "micro", "vocab": "gpt2", "variant": "leviathan", "seed": 0}
    assert layout.record_cell_key(record) == "micro/gpt2/leviathan/seed0"
    named = {**record, "cell_variant": "lev_h4"}
    assert layout.record_cell_key(named) == "micro/gpt2/lev_h4/seed0"
