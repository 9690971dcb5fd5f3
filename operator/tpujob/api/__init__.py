"""The TpuTrainingJob API (group tpujob.dev, version v1alpha1): pydantic models of the spec and
status, the loader that names bad fields, and the CRD generated from them (`tpujob.api.crd`)."""

from tpujob.api.base import format_errors
from tpujob.api.env_vars import (
    ConfigMapKeySelector,
    EnvVar,
    EnvVarSource,
    ObjectFieldSelector,
    ResourceFieldSelector,
    SecretKeySelector,
)
from tpujob.api.parallelism import MeshAxis, Parallelism
from tpujob.api.recovery import RestartPolicy, StallAction
from tpujob.api.resource import (
    API_VERSION,
    CRD_NAME,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    VERSION,
    InvalidJobError,
    TpuTrainingJob,
    load_job,
    load_spec,
)
from tpujob.api.spec import Resources, Scheduling, TpuTrainingJobSpec
from tpujob.api.status import (
    Condition,
    ConditionStatus,
    ConditionType,
    Failure,
    FailureReason,
    Phase,
    Progress,
    SliceStatus,
    TpuTrainingJobStatus,
    build_conditions,
    find_condition,
)
from tpujob.api.trainer_spec import (
    DataKind,
    DataSpec,
    SecretKeyRef,
    TrainerSpec,
    WandbMode,
    WandbSpec,
)

__all__ = [
    "API_VERSION", "CRD_NAME", "GROUP", "KIND", "PLURAL", "SHORT_NAMES", "VERSION",
    "Condition", "ConditionStatus", "ConditionType", "ConfigMapKeySelector", "DataKind",
    "DataSpec", "EnvVar", "EnvVarSource", "Failure", "FailureReason", "InvalidJobError",
    "MeshAxis", "ObjectFieldSelector", "Parallelism", "Phase", "Progress",
    "ResourceFieldSelector", "Resources", "RestartPolicy", "Scheduling", "SecretKeyRef",
    "SecretKeySelector", "SliceStatus", "StallAction", "TpuTrainingJob", "TpuTrainingJobSpec",
    "TpuTrainingJobStatus", "TrainerSpec", "WandbMode", "WandbSpec", "build_conditions",
    "find_condition", "format_errors", "load_job", "load_spec",
]
