"""The optimizer section of the trainer config: AdamW or Muon+AdamW, schedule, clipping."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class OptimizerConfig(BaseModel):
    """Optimizer, learning-rate schedule (linear warmup, then cosine or constant) and clipping."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["adamw", "muon"] = Field(
        "adamw", description="adamw, or muon (Muon for 2-D weight matrices, AdamW for the rest).")
    lr: float = Field(3e-4, gt=0, description="Peak learning rate (of AdamW; of the AdamW part under muon).")
    warmup_steps: int = Field(10, ge=0, description="Linear warmup from 0 to the peak learning rate.")
    schedule: Literal["cosine", "constant"] = Field(
        "cosine", description="After warmup: cosine decay to lr * min_lr_ratio at train.steps, or constant.")
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="Final learning rate as a fraction of the peak.")
    b1: float = Field(0.9, ge=0, lt=1, description="Adam beta1.")
    b2: float = Field(0.95, ge=0, lt=1, description="Adam beta2.")
    eps: float = Field(1e-8, gt=0, description="Adam epsilon.")
    weight_decay: float = Field(0.1, ge=0, description="Decoupled weight decay of the AdamW-updated parameters.")
    decay_norms_and_embeddings: bool = Field(
        False, description="Also apply weight decay to norm scales, biases and embeddings.")
    clip_norm: float | None = Field(1.0, gt=0, description="Global gradient-norm clipping threshold; null = off.")
    muon_lr: float = Field(0.02, gt=0, description="muon: peak learning rate of the Muon-updated matrices.")
    muon_momentum: float = Field(0.95, ge=0, lt=1, description="muon: momentum (beta) of Muon.")
    muon_weight_decay: float = Field(0.0, ge=0, description="muon: decoupled weight decay of the Muon-updated matrices.")

    @model_validator(mode="after")
    def _b1_b2(self) -> OptimizerConfig:
        if self.b2 < self.b1 and self.b2 != 0:
            # Not wrong in principle, but almost always a swapped pair.
            raise ValueError(f"optimizer.b2 ({self.b2}) is smaller than optimizer.b1 ({self.b1}); "
                             "did you swap them?")
        return self
