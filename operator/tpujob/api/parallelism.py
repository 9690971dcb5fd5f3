"""How a job's device mesh is split: the logical axes, and their sizes within a slice (ICI) and
across slices (DCN). Whether the sizes fit the slice's topology is the operator's check."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator

from tpujob.api.base import ApiModel
from tpujob.api.schema import cel_extra, cel_rule


class MeshAxis(StrEnum):
    """Logical device-mesh axes, in the order the mesh is laid out (MaxText's names)."""

    DATA = "data"
    FSDP = "fsdp"
    CONTEXT = "context"
    TENSOR = "tensor"
    EXPERT = "expert"


AxisSize = Annotated[int, Field(ge=-1)]


def _check_axes(axes: dict[MeshAxis, int]) -> dict[MeshAxis, int]:
    zero = [a.value for a, s in axes.items() if s == 0]
    if zero:
        raise ValueError(f"axis {', '.join(zero)} has size 0; sizes are >= 1, or -1 for the "
                         "one axis whose size is filled in")
    filled = [a.value for a, s in axes.items() if s == -1]
    if len(filled) > 1:
        raise ValueError(f"at most one axis may be -1, got {', '.join(filled)}")
    return axes


AXES_DOC = ", ".join(a.value for a in MeshAxis)
_AXIS_RULES = cel_extra(
    cel_rule("self.all(k, self[k] != 0)",
             "axis sizes are >= 1, or -1 for the one axis whose size is filled in"),
    cel_rule("self.filter(k, self[k] == -1).size() <= 1", "at most one axis may be -1"),
)


class Parallelism(ApiModel):
    """How the device mesh is split, MaxText-style: ICI axes inside a slice, DCN across slices."""

    ici: dict[MeshAxis, AxisSize] = Field(
        default_factory=dict, max_length=len(MeshAxis), json_schema_extra=_AXIS_RULES,
        description=f"Axis -> size within one slice (axes: {AXES_DOC}). The product must equal "
                    "the JAX devices of one slice; one axis may be -1 to take what is left. "
                    "Empty: all devices on fsdp.")
    dcn: dict[MeshAxis, AxisSize] = Field(
        default_factory=dict, max_length=len(MeshAxis), json_schema_extra=_AXIS_RULES,
        description=f"Axis -> size across slices over the data-center network (axes: "
                    f"{AXES_DOC}). The product must equal spec.slices; one axis may be -1. "
                    "Empty: all slices on data.")

    @field_validator("ici", "dcn")
    @classmethod
    def _sizes(cls, axes: dict[MeshAxis, int]) -> dict[MeshAxis, int]:
        return _check_axes(axes)

    @property
    def ici_sizes(self) -> dict[str, int]:
        """ICI axes as plain names in mesh order, as the planner and the trainer take them."""
        return {a.value: self.ici[a] for a in MeshAxis if a in self.ici}

    @property
    def dcn_sizes(self) -> dict[str, int]:
        """DCN axes as plain names in mesh order."""
        return {a.value: self.dcn[a] for a in MeshAxis if a in self.dcn}
