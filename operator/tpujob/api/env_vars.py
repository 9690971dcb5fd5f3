"""Environment variables for every trainer container (Kubernetes EnvVar and its sources, in the
job's own namespace), and the names the operator keeps for itself."""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from tpujob.api.base import ApiModel, Quantity, SparseApiModel, pattern_string
from tpujob.api.patterns import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, SECRET_KEY_PATTERN
from tpujob.api.schema import cel_extra, cel_rule
from tpujob_trainer.env import PERSON_SET

ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
# The pod fields Kubernetes offers environment variables through the downward API.
FIELD_PATH_PATTERN = (r"^(metadata\.(name|namespace|uid)|metadata\.(labels|annotations)"
                      r"\['[-._/a-zA-Z0-9]+'\]|spec\.(nodeName|serviceAccountName)|"
                      r"status\.(hostIPs?|podIPs?))$")
RESOURCE_FIELD_PATTERN = (r"^(limits|requests)\."
                          r"(cpu|memory|ephemeral-storage|hugepages-[-.a-zA-Z0-9]+)$")

FieldPath = pattern_string(
    FIELD_PATH_PATTERN, "use metadata.name, metadata.namespace, metadata.uid, "
    "metadata.labels['<key>'], metadata.annotations['<key>'], spec.nodeName, "
    "spec.serviceAccountName, status.hostIP, status.hostIPs, status.podIP or status.podIPs")
PodApiVersion = pattern_string(r"^v1$", "the pod's fields are written in version v1")
ResourceField = pattern_string(
    RESOURCE_FIELD_PATTERN, "use limits.<resource> or requests.<resource>, resource one of cpu, "
    "memory, ephemeral-storage, hugepages-<size>")

# The operator sets these itself to wire the JAX processes (TPUJOB_*) and, on multislice jobs,
# the slices over DCN (MEGASCALE_*) together; a user value would break it.
RESERVED_ENV_PREFIXES = ("TPUJOB_", "MEGASCALE_")
RESERVED_ENV_NAMES = ("TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES")
# ... except the trainer's own switches, which are a person's to set (docs/trainer.md).
ALLOWED_ENV_NAMES = PERSON_SET
RESERVED_ENV_DOC = (f"{', '.join(p + '*' for p in RESERVED_ENV_PREFIXES)} (all but "
                    f"{', '.join(ALLOWED_ENV_NAMES)}), {' and '.join(RESERVED_ENV_NAMES)}")
# Set by the operator from wandb.apiKeySecret, when that is given.
WANDB_KEY_ENV = "WANDB_API_KEY"


class SecretKeySelector(SparseApiModel):
    """A key of a Secret in the job's own namespace (a Kubernetes SecretKeySelector)."""

    name: str = Field(..., min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN,
                      description="Name of the Secret (same namespace as the job).")
    key: str = Field(..., min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN,
                     description="Key inside the Secret.")
    optional: bool | None = Field(
        None, description="Start the container even when the Secret or its key is missing.")


class ConfigMapKeySelector(SparseApiModel):
    """A key of a ConfigMap in the job's own namespace (a Kubernetes ConfigMapKeySelector)."""

    name: str = Field(..., min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN,
                      description="Name of the ConfigMap (same namespace as the job).")
    key: str = Field(..., min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN,
                     description="Key inside the ConfigMap.")
    optional: bool | None = Field(
        None, description="Start the container even when the ConfigMap or its key is missing.")


class ObjectFieldSelector(SparseApiModel):
    """A field of the pod, through the downward API (a Kubernetes ObjectFieldSelector)."""

    field_path: FieldPath = Field(
        ..., description="metadata.name, metadata.namespace, metadata.uid, "
                         "metadata.labels['<key>'], metadata.annotations['<key>'], "
                         "spec.nodeName, spec.serviceAccountName, status.hostIP, "
                         "status.hostIPs, status.podIP or status.podIPs.")
    api_version: PodApiVersion | None = Field(
        None, description="Version of the schema fieldPath is written in: v1 (the default).")


class ResourceFieldSelector(SparseApiModel):
    """A request or limit of a container (a Kubernetes ResourceFieldSelector)."""

    resource: ResourceField = Field(
        ..., description="limits.cpu, limits.memory, limits.ephemeral-storage, requests.cpu, "
                    "requests.memory, requests.ephemeral-storage (or a hugepages-<size>).")
    container_name: str | None = Field(
        None, min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN,
        description="Container whose resources to read; default: the variable's own.")
    divisor: Quantity | None = Field(
        None, description="Unit the value is expressed in (e.g. 1m, 1Mi); default: 1.")


ENV_SOURCES = ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")


class EnvVarSource(SparseApiModel):
    """Where a variable's value comes from (a Kubernetes EnvVarSource): exactly one source, in
    the job's own namespace."""

    model_config = ConfigDict(json_schema_extra=cel_extra(cel_rule(
        f"[{', '.join(f'has(self.{s})' for s in ENV_SOURCES)}].exists_one(x, x)",
        f"set exactly one of {', '.join(ENV_SOURCES)}")))

    secret_key_ref: SecretKeySelector | None = Field(
        None, description="A key of a Secret in the job's namespace.")
    config_map_key_ref: ConfigMapKeySelector | None = Field(
        None, description="A key of a ConfigMap in the job's namespace.")
    field_ref: ObjectFieldSelector | None = Field(
        None, description="A field of the pod (downward API).")
    resource_field_ref: ResourceFieldSelector | None = Field(
        None, description="A resource request or limit of a container.")

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvVarSource:
        written = list(self.to_dict())
        if len(written) != 1:
            raise ValueError(f"set exactly one of {', '.join(ENV_SOURCES)}"
                             + (f"; got {' and '.join(written)}" if written else ""))
        return self


class EnvVar(ApiModel):
    """An environment variable for every trainer container (a Kubernetes EnvVar)."""

    model_config = ConfigDict(json_schema_extra=cel_extra(
        cel_rule("!(has(self.value) && has(self.valueFrom))", "set value or valueFrom, not both"),
        cel_rule(f"self.name in [{', '.join(repr(n) for n in ALLOWED_ENV_NAMES)}] || ("
                 + " && ".join([*(f"!self.name.startsWith('{p}')" for p in RESERVED_ENV_PREFIXES),
                                f"!(self.name in [{', '.join(repr(n) for n in RESERVED_ENV_NAMES)}])"])
                 + ")", f"the operator sets {RESERVED_ENV_DOC} itself", ".name"),
        cel_rule(f"self.name != '{WANDB_KEY_ENV}' || !has(self.value)",
                 "a secret must not be written in the job: use wandb.apiKeySecret or "
                 "valueFrom.secretKeyRef", ".value"),
    ))

    name: str = Field(..., min_length=1, max_length=253, pattern=ENV_NAME_PATTERN,
                      description="Variable name.")
    value: str | None = Field(None, description="Literal value.")
    value_from: EnvVarSource | None = Field(
        None, description="Where the value comes from, exactly one of: a key of a Secret or "
                          "ConfigMap in the job's namespace (secretKeyRef, configMapKeyRef), a "
                          "field of the pod (fieldRef), a resource of a container "
                          "(resourceFieldRef).")

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError(f"env {self.name}: set value or valueFrom, not both")
        if self.name not in ALLOWED_ENV_NAMES and (self.name.startswith(RESERVED_ENV_PREFIXES)
                                                   or self.name in RESERVED_ENV_NAMES):
            raise ValueError(f"env {self.name}: the operator sets {RESERVED_ENV_DOC} itself")
        if self.name == WANDB_KEY_ENV and self.value is not None:
            raise ValueError(f"env {WANDB_KEY_ENV}: a secret must not be written in the job; use "
                             "wandb.apiKeySecret or valueFrom.secretKeyRef")
        return self
