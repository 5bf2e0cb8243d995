"""The evaluations' datasets, fetched by the data step so that evaluation jobs need no Hub.

WikiText-103 and each lm-eval task read a dataset on the Hugging Face Hub. Compute nodes of
many clusters have no internet, so the data step (`snakemake all_data`, rule fetch_eval_data,
run where the Hub is reachable) saves each one under `data/eval/<key>/` on the shared file
system (`key`: `wikitext`, or `lm_eval/<task>`):

    <split>.parquet   each split the evaluation reads, rows and features as the Hub serves them
    .fetched.json     the splits fetched so far (a killed fetch resumes after the last one)
    source.json       what the folder holds: dataset, config name, revision, each split's
                      file, rows, bytes and sha256 (written last: the rule's output)

Only the splits the evaluation reads are fetched (streamed: WikiText-103's 0.5 GB training
split is never downloaded). An evaluation finds its dataset here (leviathan.eval.fetched) and
reads the files as lm-eval's task pointed at local files (the task definition unchanged);
without a fetched copy it loads the dataset from the Hub as lm-eval does. A config that gives
`data_files` itself (the default's stand-ins) fetches nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from leviathan import layout
from leviathan.eval.config import WikitextConfig, enabled_evals, eval_config

WIKITEXT = "wikitext"


@dataclass(frozen=True)
class Need:
    """One dataset an enabled evaluation reads from the Hub (no `data_files` in the config)."""

    evaluation: str  # "wikitext" or "lm_eval"
    task: str  # the lm-eval task that reads it (WikiText: lm-eval's `wikitext`)
    num_fewshot: int = 0  # lm_eval: > 0 also needs the split the examples come from
    # wikitext: the configured dataset, config name, revision and split (lm_eval: lm-eval's)
    dataset: str | None = None
    name: str | None = None
    revision: str | None = None
    split: str | None = None

    @property
    def key(self) -> str:
        return WIKITEXT if self.evaluation == WIKITEXT else f"lm_eval/{self.task}"

    @property
    def source(self) -> Path:
        return layout.eval_data_source(self.key)


def needs(config: Mapping[str, Any]) -> list[Need]:
    """The datasets the config's enabled evaluations read from the Hub, in order."""

    cfg = eval_config(config)
    enabled = enabled_evals(config)
    out = []
    if WIKITEXT in enabled and not cfg.wikitext.data_files:
        w = cfg.wikitext
        out.append(Need(WIKITEXT, WIKITEXT, 0, w.dataset, w.name, w.revision, w.split))
    if "lm_eval" in enabled:
        lm = cfg.lm_eval
        out += [Need("lm_eval", t, lm.num_fewshot) for t in lm.tasks if t not in lm.data]
    return out


def need_of(key: str, config: Mapping[str, Any]) -> Need:
    """The Need of a data/eval/ folder `key`, as the config states it (the rule's wildcard)."""
    for need in needs(config):
        if need.key == key:
            return need
    raise ValueError(f"{layout.eval_data_dir(key)}: no enabled evaluation of the config reads it")


def fill_command(config_files: list[str] | None = None) -> str:
    """The command that fills data/eval/ (on a node where the Hub is reachable)."""
    files = " ".join(f"--configfile {f}" for f in config_files or [])
    return f"snakemake all_data --profile profiles/local {files}".rstrip()


def task_config(need: Need) -> dict[str, Any]:
    """lm-eval's own config of the need's task, as the evaluation runs it (WikiText: its
    dataset changed to the configured one, as leviathan.eval.wikitext.task_overrides does)."""
    from leviathan.eval.lm_eval_tasks import official_config, task_manager

    cfg = official_config(task_manager([need.task]), need.task)
    if need.evaluation == WIKITEXT:
        from leviathan.eval.wikitext import task_overrides

        w = WikitextConfig(
            dataset=str(need.dataset), name=need.name, revision=need.revision, split=str(need.split)
        )
        cfg.update(task_overrides(w)[WIKITEXT])
    return cfg


def splits_read(cfg: Mapping[str, Any], num_fewshot: int) -> list[str]:
    """The splits lm-eval reads of a task: the scored one, and with few-shot examples the one
    they come from (fewshot_split, else training, else validation, as lm-eval picks)."""
    from leviathan.eval.lm_eval_tasks import scored_split

    out = [scored_split(dict(cfg))]
    if num_fewshot > 0:
        fs = cfg.get("fewshot_config") or {}
        for key in ("fewshot_split", "training_split", "validation_split"):
            if cfg.get(key):
                out.append(str(cfg[key]))
                break
        if isinstance(fs, dict) and fs.get("split"):
            out.append(str(fs["split"]))
    return list(dict.fromkeys(out))


def identity(cfg: Mapping[str, Any], num_fewshot: int) -> dict[str, Any]:
    """What a fetched folder must match to be read: the dataset, its config name, the loading
    options lm-eval passes (revision among them), the splits, lm-eval's version."""
    from leviathan.eval.lm_eval_tasks import lm_eval_version

    kwargs = dict(cfg.get("dataset_kwargs") or {})
    return {
        "task": cfg["task"],
        "dataset": cfg.get("dataset_path"),
        "name": cfg.get("dataset_name"),
        "dataset_kwargs": kwargs,
        "splits_read": splits_read(cfg, num_fewshot),
        "lm_eval_version": lm_eval_version(),
    }


def read_source(key: str) -> dict[str, Any] | None:
    """A fetched folder's source.json (None where it is not there or unreadable)."""
    path = layout.eval_data_source(key)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


# ---------------------------------------------------------------- the plan's sizes
# Approximate bytes of the splits the paper's evaluations read, saved as parquet (rows in
# brackets): stated from the datasets' sizes, not measured here. The plan shows these until a
# fetch has run, then source.json's measured bytes.
STATED_BYTES: dict[str, int] = {
    WIKITEXT: 720_000,  # EleutherAI/wikitext_document_level 103 raw, test (62 articles)
    "lm_eval/hellaswag": 6_100_000,  # Rowan/hellaswag, validation (10,042)
    "lm_eval/arc_easy": 340_000,  # allenai/ai2_arc ARC-Easy, test (2,376)
    "lm_eval/arc_challenge": 200_000,  # allenai/ai2_arc ARC-Challenge, test (1,172)
    "lm_eval/piqa": 320_000,  # baber/piqa, validation (1,838)
    "lm_eval/winogrande": 120_000,  # allenai/winogrande winogrande_xl, validation (1,267)
    "lm_eval/lambada_openai": 1_200_000,  # EleutherAI/lambada_openai, test (5,153)
}
STATED_DEFAULT_WIKITEXT = ("EleutherAI/wikitext_document_level", "wikitext-103-raw-v1", "test")


def need_bytes(need: Need) -> tuple[int | None, str]:
    """A need's bytes on disk and where the figure comes from (measured, stated, unknown)."""
    src = read_source(need.key)
    if src is not None:
        return sum(int(s["bytes"]) for s in src["splits"].values()), "measured"
    if need.num_fewshot > 0:
        return None, "unknown (few-shot split)"
    if need.evaluation == WIKITEXT:
        if (need.dataset, need.name, need.split) != STATED_DEFAULT_WIKITEXT:
            return None, "unknown (not the paper's WikiText-103 test split)"
    stated = STATED_BYTES.get(need.key)
    return (stated, "stated, approximate") if stated else (None, "unknown (not a paper task)")


def fetch_bytes(config: Mapping[str, Any]) -> int:
    """Bytes the data step fetches for the evaluations (those of unknown size left out)."""
    return sum(b for b, _ in (need_bytes(n) for n in needs(config)) if b is not None)


def plan_lines(config: Mapping[str, Any]) -> list[str]:
    """The plan's lines on the evaluation data: what the data step fetches, its size, where."""
    wanted = needs(config)
    if not wanted:
        return [
            "evaluation datasets: none fetched (every enabled evaluation reads the config's data_files)"
        ]
    sizes = {n.key: need_bytes(n) for n in wanted}
    known = sum(b for b, _ in sizes.values() if b is not None)
    missing = [k for k, (b, _) in sizes.items() if b is None]
    lines = [
        f"evaluation datasets: {len(wanted)} from the Hub into {layout.EVAL_DATA_ROOT}/ "
        f"by the data step (`{fill_command()}`, where the Hub is reachable), "
        f"{known / 1e6:,.1f} MB"
        + (f" + {len(missing)} of unknown size" if missing else "")
        + "; evaluation jobs read them without the Hub"
    ]
    for key, (size, how) in sizes.items():
        shown = f"{size / 1e6:,.2f} MB" if size is not None else "?"
        lines.append(f"  {key:<24} {shown:>10}  {how}")
    return lines


def need_record(need: Need) -> dict[str, Any]:
    """A Need as plain values (the fetch rule's params: a change refetches)."""
    return asdict(need)
