"""The trainer's typed config (pure pydantic, importable without JAX)."""

from tpujob_trainer.config.model import ModelConfig, MoEConfig

__all__ = ["ModelConfig", "MoEConfig"]
