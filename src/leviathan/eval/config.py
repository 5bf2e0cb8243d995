"""Evaluation settings: every value a field with its default, validated, with clear errors.

A config file (YAML) or the workflow's `eval:` section may hold three sections:

    val:        # validation loss / perplexity / bits per byte / frequency buckets
      context: null          # null: the checkpoint's training context
      batch_size: 16
      max_windows: null      # the first windows of the split only (null: all of them)
      quantile_bins: 10
      max_decade: 6          # log10 bins up to ">= 10^6"
      persist_seconds: 60    # running sums saved this often (a killed job continues)
    wikitext:   # WikiText-103 zero-shot perplexity through HF `datasets`
      dataset: Salesforce/wikitext
      name: wikitext-103-raw-v1
      split: test
      data_files: null       # local override, e.g. {test: data/wikitext/test.parquet}
      stride: null           # null: the context (disjoint windows)
    lm_eval:    # lm-evaluation-harness zero-shot tasks
      tasks: [hellaswag, arc_easy, arc_challenge, piqa, winogrande, lambada_openai]
      data:                  # optional, per task: local files in the official schema
        hellaswag: {data_files: {validation: data/lm_eval/hellaswag/validation.jsonl}}
      num_fewshot: 0
      limit: null
      batch_size: 16
      bootstrap_iters: 1000
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from leviathan.eval.errors import EvalInputError

PAPER_TASKS: tuple[str, ...] = (
    "hellaswag",
    "arc_easy",
    "arc_challenge",
    "piqa",
    "winogrande",
    "lambada_openai",
)

# how often an evaluation's running sums are saved: a kill loses at most this much work, and
# the save (2 x V x 8 bytes plus 4 bytes per kept token loss) stays a small share of the time
PERSIST_SECONDS = 60.0

BUILDERS = {
    ".json": "json",
    ".jsonl": "json",
    ".parquet": "parquet",
    ".csv": "csv",
    ".txt": "text",
    ".arrow": "arrow",
}


def _from_dict(cls: Any, d: dict[str, Any] | None, where: str) -> Any:
    d = dict(d or {})
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise EvalInputError(f"unknown {where} key(s) {unknown}: valid keys are {sorted(known)}")
    return cls(**d)


def _positive(where: str, **values: Any) -> None:
    for name, value in values.items():
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise EvalInputError(f"{where}.{name}={value!r} must be a positive integer or null")


def normalise_data_files(data_files: Any, where: str) -> dict[str, list[str]]:
    """{split: [files]} from a mapping (split -> file or files); files must exist."""
    if not isinstance(data_files, dict) or not data_files:
        raise EvalInputError(
            f"{where}.data_files must map split names to files, e.g. {{test: path/test.jsonl}}"
        )
    out: dict[str, list[str]] = {}
    for split, files in data_files.items():
        paths = [files] if isinstance(files, (str, Path)) else list(files)
        for p in paths:
            if not Path(p).is_file():
                raise FileNotFoundError(f"{where}.data_files.{split}: {p} does not exist")
        out[str(split)] = [str(Path(p).resolve()) for p in paths]
    return out


def infer_builder(files: dict[str, list[str]], builder: str | None, where: str) -> str:
    if builder:
        return builder
    exts = {Path(f).suffix.lower() for fs in files.values() for f in fs}
    builders = {BUILDERS.get(e) for e in exts}
    if len(builders) != 1 or None in builders:
        raise EvalInputError(
            f"{where}: cannot infer the file format from extension(s) {sorted(exts)}: set "
            f"{where}.builder to one of {sorted(set(BUILDERS.values()))}"
        )
    return str(builders.pop())


@dataclass(frozen=True)
class ValConfig:
    context: int | None = None
    batch_size: int = 16
    max_windows: int | None = None
    quantile_bins: int = 10
    max_decade: int = 6
    persist_seconds: float = PERSIST_SECONDS

    def __post_init__(self) -> None:
        if not isinstance(self.persist_seconds, (int, float)) or self.persist_seconds < 0:
            raise EvalInputError(
                f"val.persist_seconds={self.persist_seconds!r} must be a number >= 0"
            )
        _positive(
            "val",
            context=self.context,
            batch_size=self.batch_size,
            max_windows=self.max_windows,
            quantile_bins=self.quantile_bins,
            max_decade=self.max_decade,
        )


@dataclass(frozen=True)
class WikitextConfig:
    """lm-eval's `wikitext` task on WikiText-103 (leviathan.eval.wikitext): the dataset in the
    document-level schema (one `page` per article), the rolling-window length (`context`,
    default the training context) and, for the secondary stream figure, its `stride`."""

    dataset: str = "EleutherAI/wikitext_document_level"
    name: str | None = "wikitext-103-raw-v1"
    split: str = "test"
    revision: str | None = None
    data_files: dict[str, Any] | None = None
    builder: str | None = None
    context: int | None = None
    stride: int | None = None
    batch_size: int = 16

    def __post_init__(self) -> None:
        _positive("wikitext", context=self.context, stride=self.stride, batch_size=self.batch_size)


@dataclass(frozen=True)
class LocalTaskData:
    """Local files of one lm-eval task, in the schema of its official Hub dataset."""

    data_files: dict[str, Any]
    builder: str | None = None


@dataclass(frozen=True)
class LmEvalConfig:
    tasks: tuple[str, ...] = PAPER_TASKS
    data: dict[str, LocalTaskData] = field(default_factory=dict)
    num_fewshot: int = 0
    limit: int | None = None
    batch_size: int = 16
    max_length: int | None = None
    max_gen_toks: int = 256
    bootstrap_iters: int = 1000
    seed: int = 0

    def __post_init__(self) -> None:
        _positive(
            "lm_eval",
            limit=self.limit,
            batch_size=self.batch_size,
            max_length=self.max_length,
            max_gen_toks=self.max_gen_toks,
        )
        if isinstance(self.tasks, str):
            object.__setattr__(self, "tasks", (self.tasks,))
        object.__setattr__(self, "tasks", tuple(self.tasks))
        if not self.tasks:
            raise EvalInputError("lm_eval.tasks is empty: name at least one task")
        data = {}
        for task, spec in (self.data or {}).items():
            if isinstance(spec, LocalTaskData):
                data[task] = spec
            elif isinstance(spec, dict):
                data[task] = _from_dict(LocalTaskData, spec, f"lm_eval.data.{task}")
            else:
                raise EvalInputError(
                    f"lm_eval.data.{task} must be a mapping with data_files (and builder)"
                )
        object.__setattr__(self, "data", data)
        unknown_data = sorted(set(data) - set(self.tasks))
        if unknown_data:
            raise EvalInputError(
                f"lm_eval.data names task(s) {unknown_data} that are not in lm_eval.tasks {list(self.tasks)}"
            )
        if self.num_fewshot < 0 or self.bootstrap_iters < 0:
            raise EvalInputError("lm_eval.num_fewshot and lm_eval.bootstrap_iters must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tasks"] = list(self.tasks)
        return d


@dataclass(frozen=True)
class EvalConfig:
    val: ValConfig = field(default_factory=ValConfig)
    wikitext: WikitextConfig = field(default_factory=WikitextConfig)
    lm_eval: LmEvalConfig = field(default_factory=LmEvalConfig)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> EvalConfig:
        d = dict(d or {})
        unknown = sorted(set(d) - {"val", "wikitext", "lm_eval"})
        if unknown:
            raise EvalInputError(
                f"unknown eval section(s) {unknown}: use val, wikitext and lm_eval"
            )
        return cls(
            val=_from_dict(ValConfig, d.get("val"), "val"),
            wikitext=_from_dict(WikitextConfig, d.get("wikitext"), "wikitext"),
            lm_eval=_from_dict(LmEvalConfig, d.get("lm_eval"), "lm_eval"),
        )

    @classmethod
    def from_file(cls, path: str | Path | None) -> EvalConfig:
        if path is None:
            return cls()
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"{p}: eval config file not found")
        data = yaml.safe_load(p.read_text()) or {}
        if "eval" in data and isinstance(data["eval"], dict) and set(data) == {"eval"}:
            data = data["eval"]
        return cls.from_dict(data)


# The evaluations of one trained checkpoint: each is a rule (eval_<evaluation>), a section of
# config.evaluate (<evaluation>) and a leviathan.eval config (EvalConfig.<evaluation>).
CHECKPOINT_EVALS = ("val", "wikitext", "lm_eval")


def eval_sections(config: Mapping[str, Any]) -> dict[str, Any]:
    """config.evaluate: which evaluations run (a null section is off) and their settings."""
    return dict(config.get("evaluate") or {})


def eval_config(config: Mapping[str, Any]) -> EvalConfig:
    """The `leviathan.eval` config of the workflow (raises on a bad key, before any job)."""
    sections = eval_sections(config)
    return EvalConfig.from_dict({k: sections.get(k) or {} for k in CHECKPOINT_EVALS})


def enabled_evals(config: Mapping[str, Any]) -> list[str]:
    """The checkpoint evaluations the config runs: `val` always, the others unless null."""
    sections = eval_sections(config)
    return [k for k in CHECKPOINT_EVALS if k == "val" or sections.get(k) is not None]
