"""The metrics section of the trainer config: stdout JSON lines, the HTTP endpoint, W&B."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class WandbConfig(BaseModel):
    """Weights & Biases logging. The API key only ever comes from the WANDB_API_KEY env var."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    project: str | None = Field(None, description="W&B project; null = no W&B logging.")
    entity: str | None = Field(None, description="W&B entity (team or user).")
    run_name: str | None = Field(None, description="Run name; default: W&B's choice.")
    mode: Literal["online", "offline"] = Field(
        "online", description="online (needs WANDB_API_KEY in the environment) or offline (local files only).")
    tags: list[str] = Field(default_factory=list, description="Tags of the run.")


class MetricsConfig(BaseModel):
    """What process 0 reports and where."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    log_every: int = Field(1, ge=1, description="Print a JSON line (and log to W&B) every N steps.")
    memory_every: int = Field(100, ge=1, description="Report a memory phase every N steps.")
    port: int | None = Field(
        9431, ge=0, le=65535,
        description="HTTP port for /metrics (Prometheus) and /progress (JSON) on process 0; "
        "0 = any free port; null = no server.")
    measure_peak: bool = Field(
        True, description="When the device's peak TFLOP/s is unknown (a CPU run alone), measure a "
        "large matmul at start for MFU; otherwise MFU is null. A CPU standing in for a TPU slice "
        "(local mode) has no MFU.")
    wandb: WandbConfig = Field(default_factory=WandbConfig, description="Weights & Biases.")
