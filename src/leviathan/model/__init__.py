"""The model: backbone, the six input/output variants, LEV, and exact accounting."""

from leviathan.model.config import LEVConfig, ModelConfig, digit_base, model_config
from leviathan.model.language_model import LanguageModel, build_model
from leviathan.model.lev import LEV
from leviathan.model.variants import VARIANTS, InputOutput

__all__ = [
    "LEV",
    "LEVConfig",
    "LanguageModel",
    "InputOutput",
    "ModelConfig",
    "VARIANTS",
    "build_model",
    "digit_base",
    "model_config",
]
