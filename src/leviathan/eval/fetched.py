"""Evaluations read the datasets the data step fetched (leviathan.data.eval_data), not the Hub.

`use_fetched` points an evaluation's settings at the fetched files of each dataset the config
leaves to the Hub (no `data_files` of its own): lm-eval's task then reads them as local files
in the official schema, its definition unchanged. A dataset not fetched is left to the Hub
(lm-eval's own download, where the Hub is reachable). A fetched folder of another dataset,
split set or lm-eval version is refused in one line that names the command that refetches it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from leviathan import layout
from leviathan.data.eval_data import (
    WIKITEXT,
    Need,
    fill_command,
    identity,
    read_source,
    task_config,
)
from leviathan.eval.config import LmEvalConfig, LocalTaskData, WikitextConfig
from leviathan.eval.errors import EvalInputError


def use_fetched(evaluation: str, settings: Any) -> Any:
    """`settings` (EvalConfig.<evaluation>) with the fetched datasets as its data files."""
    if evaluation == WIKITEXT:
        return _wikitext(settings)
    if evaluation == "lm_eval":
        return _lm_eval(settings)
    return settings


def _wikitext(w: WikitextConfig) -> WikitextConfig:
    if w.data_files:
        return w
    need = Need(WIKITEXT, WIKITEXT, 0, w.dataset, w.name, w.revision, w.split)
    files = fetched_files(need)
    return w if files is None else replace(w, data_files=files, builder="parquet")


def _lm_eval(lm: LmEvalConfig) -> LmEvalConfig:
    data = dict(lm.data)
    for task in lm.tasks:
        if task not in data:
            files = fetched_files(Need("lm_eval", task, lm.num_fewshot))
            if files is not None:
                data[task] = LocalTaskData(files, "parquet")
    return replace(lm, data=data)


def fetched_files(need: Need) -> dict[str, str] | None:
    """{split: file} of the need's fetched folder (None where nothing was fetched); a folder
    that holds another dataset, lacks a split the evaluation reads or was fetched under another
    lm-eval version is refused."""
    src = read_source(need.key)
    if src is None:
        return None
    want = identity(task_config(need), need.num_fewshot)
    held = dict(src.get("splits") or {})
    stale = [
        f"{key} {src.get(key)!r} where the evaluation reads {value!r}"
        for key, value in want.items()
        if key != "splits_read" and src.get(key) != value
    ]
    lacking = [s for s in want["splits_read"] if s not in held]
    if lacking:
        stale.append(f"no split {', '.join(lacking)}")
    if stale:
        raise EvalInputError(
            f"{layout.eval_data_dir(need.key)} holds {'; '.join(stale)}: fetch it again where "
            f"the Hub is reachable (`{fill_command()}` with the study's --configfile)"
        )
    return {s: str(layout.eval_data_split(need.key, s)) for s in want["splits_read"]}
