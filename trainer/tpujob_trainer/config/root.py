"""The root `TrainerConfig`: loaded from YAML, overridden with `a.b=c` arguments, frozen.

Every problem is reported at once in one `ConfigError`, each line naming the dotted field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tpujob_trainer.config.checkpoint import CheckpointConfig
from tpujob_trainer.config.compile_cache import CompileCacheConfig
from tpujob_trainer.config.data import DataConfig
from tpujob_trainer.config.keys import keys_taken, unknown_key_message
from tpujob_trainer.config.mesh import MeshConfig
from tpujob_trainer.config.metrics import MetricsConfig
from tpujob_trainer.config.model import ModelConfig
from tpujob_trainer.config.optimizer import OptimizerConfig
from tpujob_trainer.config.train import TrainConfig


class ConfigError(ValueError):
    """A bad trainer config. `problems` holds one line per bad field; the message lists them all."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid trainer config ({len(self.problems)} problem"
                         f"{'s' if len(self.problems) != 1 else ''}):\n{lines}")


class TrainerConfig(BaseModel):
    """Everything one training run needs. Round-trips through YAML (`to_yaml` / `load`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: ModelConfig = Field(default_factory=ModelConfig, description="The language model.")
    train: TrainConfig = Field(default_factory=TrainConfig, description="Steps, batch, sequence length.")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="Optimizer and schedule.")
    mesh: MeshConfig = Field(default_factory=MeshConfig, description="Device mesh (ICI and DCN parallelism).")
    data: DataConfig = Field(default_factory=DataConfig, description="Training data.")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description="Checkpoints and resume.")
    metrics: MetricsConfig = Field(default_factory=MetricsConfig, description="Reporting.")
    compile_cache: CompileCacheConfig = Field(default_factory=CompileCacheConfig,
                                              description="Persistent compilation cache.")
    output: str = Field("out", min_length=1,
                        description="Directory or gs:// prefix for checkpoints and metrics of this run.")

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, overrides: list[str] | tuple[str, ...] = ()) -> TrainerConfig:
        """Validate a plain dict (as parsed from YAML) after applying `a.b=c` overrides."""
        if d is None:
            d = {}
        if not isinstance(d, dict):
            raise ConfigError([f"the config must be a mapping of sections, got {type(d).__name__}"])
        merged = _deepcopy_dict(d)
        problems = [p for o in overrides if (p := _apply_override(merged, o))]
        if problems:
            raise ConfigError(problems)
        try:
            return cls.model_validate(merged)
        except ValidationError as e:
            raise ConfigError(_describe(e, cls)) from None

    @classmethod
    def load(cls, path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> TrainerConfig:
        """Read a YAML file (or start from defaults when `path` is None) and apply overrides."""
        d: Any = {}
        if path is not None:
            try:
                text = Path(path).read_text()
            except OSError as e:
                raise ConfigError([f"cannot read config file {path}: {e.strerror or e}"]) from None
            try:
                d = yaml.safe_load(text)
            except yaml.YAMLError as e:
                raise ConfigError([f"{path} is not valid YAML: {e}"]) from None
        return cls.from_dict(d, overrides)

    def memory_request(self):
        """What the HBM estimate needs from this config (`tpujob_plan.memory.MemoryRequest`)."""
        from tpujob_plan.memory import MemoryRequest

        m = self.model
        return MemoryRequest(
            shape=m.to_shape(), global_batch=self.train.global_batch, seq_len=self.train.seq_len,
            grad_accum=self.train.grad_accum, optimizer=self.optimizer.kind,
            param_dtype=m.param_dtype, dtype=m.dtype, remat=m.remat,
            capacity_factor=m.moe.capacity_factor, vocab_chunks=m.vocab_chunks,
            mlp_chunks=m.mlp_chunks, moe_routing=m.moe.routing,
            optimizer_sharding=self.mesh.optimizer_sharding)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def _deepcopy_dict(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _deepcopy_dict(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_deepcopy_dict(v) for v in d]
    return d


def _apply_override(d: dict[str, Any], override: str) -> str | None:
    """Set `a.b.c=value` (value parsed as YAML) in the nested dict; returns a problem or None."""
    key, sep, raw = override.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        return f"override {override!r} is not of the form section.field=value"
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, KeyError, AttributeError,
            RecursionError):
        # Not YAML, or YAML that cannot be built (an impossible date, an integer past Python's
        # digit limit, a bad !!tag, thousands of nested brackets): keep the text; the schema
        # then names the field.
        value = raw
    parts = key.split(".")
    node = d
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            return f"override {override!r}: {'.'.join(parts[:i + 1])} is not a section"
        node = child
    node[parts[-1]] = value
    return None


def _describe(e: ValidationError, model: type[BaseModel]) -> list[str]:
    problems = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            where = err["loc"][:-1]
            problems.append(f"{loc}: " + unknown_key_message(
                str(err["loc"][-1]), keys_taken(model, where), ".".join(map(str, where))))
        elif err["type"] == "missing":
            problems.append(f"{loc}: required")
        else:
            given = err.get("input")
            shown = "" if isinstance(given, dict) or loc == "" else f" (got {given!r})"
            problems.append(f"{loc or '<root>'}: {msg}{shown}")
    return problems
