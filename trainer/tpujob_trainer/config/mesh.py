"""The mesh section of the trainer config: ICI (within a slice) and DCN (across slices) parallelism."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tpujob_plan.mesh import MESH_AXES


def _check_axes(name: str, axes: dict[str, int]) -> dict[str, int]:
    unknown = sorted(set(axes) - set(MESH_AXES))
    if unknown:
        raise ValueError(f"unknown mesh axis {', '.join(map(repr, unknown))} in mesh.{name}; "
                         f"valid axes: {', '.join(MESH_AXES)}")
    bad = {k: v for k, v in axes.items() if v != -1 and v < 1}
    if bad:
        raise ValueError(f"mesh.{name} sizes must be >= 1 or -1 (fill in), got {bad}")
    if sum(v == -1 for v in axes.values()) > 1:
        raise ValueError(f"at most one axis of mesh.{name} may be -1, got {axes}")
    return {a: axes[a] for a in MESH_AXES if a in axes}


class MeshConfig(BaseModel):
    """Device mesh over the axes data, fsdp, context, tensor, expert (MaxText's ici_*/dcn_*).

    The product of the ICI sizes is the devices per slice, the product of the DCN sizes the number
    of slices; one axis of each may be -1 to take what is left. Missing axes are 1.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    ici: dict[str, int] = Field(
        default_factory=lambda: {"fsdp": -1},
        description="Axis -> size within a slice (over ICI), e.g. {fsdp: -1, tensor: 4}.")
    dcn: dict[str, int] = Field(
        default_factory=dict,
        description="Axis -> size across slices (over DCN), e.g. {data: -1}; empty for one slice.")

    optimizer_sharding: Literal["auto", "as_params", "over_data"] = Field(
        "auto",
        description="How the optimizer's state is split. as_params: as its weight is (over "
                    "fsdp, tensor, ...), whole on every data-parallel replica. over_data: over "
                    "data as well (ZeRO-1): each replica keeps and updates 1/data of it and the "
                    "step gathers the updated weights over data. auto: over_data where the step "
                    "runs on TPU devices and data > 1, as_params elsewhere (CPU, GPU).")

    @field_validator("ici")
    @classmethod
    def _ici(cls, v: dict[str, int]) -> dict[str, int]:
        return _check_axes("ici", v)

    @field_validator("dcn")
    @classmethod
    def _dcn(cls, v: dict[str, int]) -> dict[str, int]:
        return _check_axes("dcn", v)
