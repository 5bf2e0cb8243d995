"""The model: backbone, the six input/output variants, LEV, and exact accounting.

The names below load their module on first use (PEP 562), so that importing the torch-free
`leviathan.model.config` (what the workflow's parse needs: the variants' names, the config's
checks) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leviathan.model.config import LEVConfig, ModelConfig, model_config
    from leviathan.model.language_model import LanguageModel, build_model
    from leviathan.model.variants import VARIANTS

_HOMES = {
    "LEVConfig": "config",
    "LanguageModel": "language_model",
    "ModelConfig": "config",
    "VARIANTS": "variants",
    "build_model": "language_model",
    "model_config": "config",
}

__all__ = [
    "LEVConfig",
    "LanguageModel",
    "ModelConfig",
    "VARIANTS",
    "build_model",
    "model_config",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
