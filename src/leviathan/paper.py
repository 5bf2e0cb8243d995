"""The paper's reported figures (config/paper_reported.yaml, their one home) and the one way to
reach them: `Paper`, with accessors by section and scale and the JSON pointer of each figure
(what a report cell records as its source)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from leviathan.layout import PAPER_REPORTED, repo_root

ENV_VAR = "LEVIATHAN_PAPER_REPORTED"


def reported_path() -> Path:
    return Path(os.environ.get(ENV_VAR) or repo_root() / PAPER_REPORTED)


@cache
def _load(path: Path) -> Mapping[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: the paper's reported figures are missing; run from a checkout of the "
            f"project or set {ENV_VAR} to the path of {PAPER_REPORTED}"
        )
    return yaml.safe_load(path.read_text())


@dataclass(frozen=True)
class Paper:
    """The paper's figures. Sections other than `vocabulary` are keyed by scale (`main`,
    `downstream`, `ablation`, `frequency`, `sample_efficiency`; `cost` beside its
    scale-free claims): `paper.ablation("400m")["leviathan"]["gain"]`."""

    doc: Mapping[str, Any]
    path: str  # as recorded in the sources of report cells

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None) -> Paper:
        p = Path(path) if path is not None else reported_path()
        return cls(_load(p), str(p))

    def scales(self, section: str) -> list[str]:
        """The scales a section reports, in the file's order."""
        return [k for k, v in self.doc.get(section, {}).items() if isinstance(v, Mapping)]

    def _at(self, section: str, scale: str) -> Mapping[str, Any]:
        return self.doc.get(section, {}).get(scale, {})

    def main(self, scale: str) -> Mapping[str, Any]:
        return self._at("main", scale)

    def downstream(self, scale: str) -> Mapping[str, Any]:
        return self._at("downstream", scale)

    def ablation(self, scale: str) -> Mapping[str, Any]:
        return self._at("ablation", scale)

    def cost(self, scale: str | None = None) -> Mapping[str, Any]:
        """The cost claims, or (with a scale) the cost figures of that scale."""
        return self.doc["cost"] if scale is None else self._at("cost", scale)

    def pointer(self, *keys: str | int) -> str | None:
        """The JSON pointer of a reported figure (e.g. "main", "400m", "tied", "val_loss"),
        None where the paper does not report it."""
        node: Any = self.doc
        for k in keys:
            if isinstance(node, Mapping) and k in node:
                node = node[k]
            elif isinstance(node, list) and isinstance(k, int) and k < len(node):
                node = node[k]
            else:
                return None
        return "/" + "/".join(str(k).replace("~", "~0").replace("/", "~1") for k in keys)
