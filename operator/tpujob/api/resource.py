"""The TpuTrainingJob resource as a whole: its Kubernetes identity (group, version, names) and
the model of a full object, with a loader whose errors name each field as written in YAML."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from tpujob.api.base import ApiModel, format_errors
from tpujob.api.spec import TpuTrainingJobSpec
from tpujob.api.status import TpuTrainingJobStatus

GROUP = "tpujob.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TpuTrainingJob"
LIST_KIND = "TpuTrainingJobList"
PLURAL = "tputrainingjobs"
SINGULAR = "tputrainingjob"
SHORT_NAMES = ("tpujob", "tpujobs", "tj")
CRD_NAME = f"{PLURAL}.{GROUP}"


class TpuTrainingJob(ApiModel):
    """A JAX training run on Cloud TPU slices, supervised by the tpujob operator."""

    # Required, not defaulted: the API server always sets both, so only a hand-written file can
    # leave one out, and the owner reference of every child repeats them.
    api_version: Literal["tpujob.dev/v1alpha1"] = Field(..., description="API version.")
    kind: Literal["TpuTrainingJob"] = Field(..., description="Kind.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Object metadata.")
    spec: TpuTrainingJobSpec = Field(..., description="What to train and where.")
    status: TpuTrainingJobStatus | None = Field(None, description="Set by the operator.")

    @model_validator(mode="before")
    @classmethod
    def _identity_as_null(cls, data: Any) -> Any:
        # A left-out apiVersion or kind goes on as null, so that the check below answers it
        # with the value to write rather than pydantic's bare "Field required".
        if not isinstance(data, dict):
            return data
        missing = {alias: None for name, (alias, _) in _IDENTITY.items()
                   if alias not in data and name not in data}
        return {**missing, **data}

    @field_validator("api_version", "kind", mode="before")
    @classmethod
    def _identity_written(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            key, expected = _IDENTITY[info.field_name or ""]
            raise ValueError(f"required: add `{key}: {expected}` to the manifest")
        return value


_IDENTITY = {"api_version": ("apiVersion", API_VERSION), "kind": ("kind", KIND)}


class InvalidJobError(ValueError):
    """A TpuTrainingJob that does not parse; `problems` has one line per field."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid TpuTrainingJob:\n  " + "\n  ".join(problems))


def _plain(value: Any) -> Any:
    # kopf hands handlers read-only Mapping views, not dicts; models want plain JSON values.
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def load_job(obj: Mapping[str, Any]) -> TpuTrainingJob:
    """Parse a TpuTrainingJob object (as read from YAML or the API server)."""
    try:
        return TpuTrainingJob.model_validate(_plain(obj))
    except ValidationError as err:
        raise InvalidJobError(format_errors(err, model=TpuTrainingJob)) from None


def load_spec(spec: Mapping[str, Any]) -> TpuTrainingJobSpec:
    """Parse just a spec (what a kopf handler receives), naming fields from `spec.`."""
    try:
        return TpuTrainingJobSpec.model_validate(_plain(spec))
    except ValidationError as err:
        raise InvalidJobError(format_errors(err, prefix="spec",
                                            model=TpuTrainingJobSpec)) from None
