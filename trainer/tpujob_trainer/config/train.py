"""The train section of the trainer config: steps, batch, sequence length, accumulation, seed."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TrainConfig(BaseModel):
    """How long and on how many tokens per step to train."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = Field(100, ge=1, description="Total optimizer steps of the run (a resumed run continues to it).")
    global_batch: int = Field(8, ge=1, description="Sequences per optimizer step, over all devices and processes.")
    seq_len: int = Field(256, ge=1, description="Tokens per sequence (the model sees seq_len, predicts the next).")
    grad_accum: int = Field(1, ge=1, description="Micro-batches per optimizer step; divides global_batch.")
    seed: int = Field(0, description="Seed of parameter initialization (and of the data unless data.seed is set).")

    @model_validator(mode="after")
    def _accum_divides(self) -> TrainConfig:
        if self.global_batch % self.grad_accum:
            raise ValueError(f"train.grad_accum ({self.grad_accum}) must divide train.global_batch "
                             f"({self.global_batch})")
        return self
