"""The TpuTrainingJob resource as a whole: its Kubernetes identity (group, version, names) and
the model of a full object, with a loader whose errors name each field as written in YAML."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationError

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

    api_version: Literal["tpujob.dev/v1alpha1"] = Field(API_VERSION, description="API version.")
    kind: Literal["TpuTrainingJob"] = Field(KIND, description="Kind.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Object metadata.")
    spec: TpuTrainingJobSpec = Field(..., description="What to train and where.")
    status: TpuTrainingJobStatus | None = Field(None, description="Set by the operator.")


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
        raise InvalidJobError(format_errors(err)) from None


def load_spec(spec: Mapping[str, Any]) -> TpuTrainingJobSpec:
    """Parse just a spec (what a kopf handler receives), naming fields from `spec.`."""
    try:
        return TpuTrainingJobSpec.model_validate(_plain(spec))
    except ValidationError as err:
        raise InvalidJobError(format_errors(err, prefix="spec")) from None
