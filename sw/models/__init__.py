"""Model configurations (YAML presets) shared by the golden model, MARS and the cluster model."""
from .config import ModelConfig, load_model, preset_names

__all__ = ["ModelConfig", "load_model", "preset_names"]
