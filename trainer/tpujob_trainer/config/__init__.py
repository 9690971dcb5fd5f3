"""The trainer's typed config (pure pydantic, importable without JAX).

`TrainerConfig.load(path, ["train.steps=10", ...])` reads YAML and applies `a.b=c` overrides; any
bad value or unknown key raises one `ConfigError` listing every problem by dotted field name.
"""

from tpujob_trainer.config.checkpoint import CheckpointConfig
from tpujob_trainer.config.data import DataConfig
from tpujob_trainer.config.mesh import MESH_AXES, MeshConfig
from tpujob_trainer.config.metrics import MetricsConfig, WandbConfig
from tpujob_trainer.config.model import ModelConfig, MoEConfig
from tpujob_trainer.config.optimizer import OptimizerConfig
from tpujob_trainer.config.root import ConfigError, TrainerConfig
from tpujob_trainer.config.train import TrainConfig

__all__ = [
    "MESH_AXES", "CheckpointConfig", "ConfigError", "DataConfig", "MeshConfig", "MetricsConfig",
    "ModelConfig", "MoEConfig", "OptimizerConfig", "TrainConfig", "TrainerConfig", "WandbConfig",
]
