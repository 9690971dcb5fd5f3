"""Where and how a job may run: the Kueue queue and priorities, the kind of GKE capacity its
slices run on (reservation, Spot, on-demand, flex-start), and Kueue's topology-aware placement.

Every field here is optional and, left out, writes nothing: a job without them builds the same
JobSet as before they existed. What each field writes, and the sources of the names, are in
docs/queueing.md; the builders are in tpujob.builders.scheduling."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from tpujob.api.base import ApiModel, SparseApiModel, pattern_string
from tpujob.api.patterns import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN
from tpujob.api.schema import cel_extra, cel_rule

# A Compute Engine resource name (reservations, blocks, sub-blocks): RFC 1035, at most 63.
GCE_NAME_PATTERN = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
# A Google Cloud project ID: 6 to 30 lowercase letters, digits and hyphens, starting with a letter.
PROJECT_ID_PATTERN = r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$"
# A Kubernetes label key (optional DNS-subdomain prefix, then a name of at most 63 characters):
# what Kueue's webhook asks of a topology annotation's value (metavalidation.ValidateLabelName).
LABEL_KEY_PATTERN = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                     r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
GceName = pattern_string(
    GCE_NAME_PATTERN, "use a Compute Engine name: lowercase letters, digits and '-', starting "
    "with a letter, not ending with '-', at most 63 characters", max_length=63)
ProjectId = pattern_string(
    PROJECT_ID_PATTERN, "use a Google Cloud project ID: 6 to 30 lowercase letters, digits and "
    "'-', starting with a letter")
LabelKey = pattern_string(
    LABEL_KEY_PATTERN, "use a node label key, e.g. cloud.google.com/gce-topology-block "
    "(an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_', '.')",
    max_length=316)
WorkloadPriorityClassName = pattern_string(
    DNS_SUBDOMAIN_PATTERN, "use the name of a Kueue WorkloadPriorityClass: lowercase letters, "
    "digits, '-' and '.', at most 63 characters (it is a label value)", max_length=63)
# GKE flex-start VMs run for at most seven days.
MAX_RUN_DURATION_SECONDS = 7 * 24 * 3600

NEEDS_QUEUE = ("Kueue reads it only for a job in a queue: set spec.scheduling.queueName to a "
               "LocalQueue of the job's namespace")
FLEX_NEEDS_QUEUE = ("flex-start capacity is obtained for every host of the job at once only "
                    "through Kueue: set spec.scheduling.queueName to a LocalQueue whose "
                    "ClusterQueue has flex-start capacity")


class CapacityType(StrEnum):
    ON_DEMAND = "OnDemand"
    SPOT = "Spot"
    RESERVATION = "Reservation"
    FLEX_START = "FlexStart"


class Reservation(SparseApiModel):
    """A Compute Engine reservation the slices consume. Without a name: any reservation."""

    model_config = ApiModel.model_config | {"json_schema_extra": cel_extra(
        cel_rule("has(self.name) || (!has(self.project) && !has(self.block))",
                 "spec.scheduling.capacity.reservation: project and block belong to a named "
                 "reservation; set name too, or leave them out to consume any reservation"),
        cel_rule("!has(self.subBlock) || has(self.block)",
                 "spec.scheduling.capacity.reservation.subBlock is a part of a block; set "
                 "block too", ".subBlock"))}

    name: GceName | None = Field(
        None,
        description="The reservation's name (a Compute Engine name: lowercase letters, digits "
                    "and '-', starting with a letter, at most 63 characters); left out: any "
                    "reservation the cluster's node pools consume.")
    project: ProjectId | None = Field(
        None,
        description="Project that owns a shared reservation; default: the cluster's project.")
    block: GceName | None = Field(None, description="A block of the reservation to run in.")
    sub_block: GceName | None = Field(None, description="A sub-block of that block to run in.")

    @field_validator("project", "block")
    @classmethod
    def _parts_need_a_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("name") is None:
            raise ValueError("belongs to a named reservation; set name too, or leave project "
                             "and block out to consume any reservation")
        return value

    @field_validator("sub_block")
    @classmethod
    def _sub_block_needs_a_block(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("block") is None:
            raise ValueError("is a part of a block; set block too")
        return value


class FlexStart(SparseApiModel):
    """GKE flex-start (Dynamic Workload Scheduler) capacity."""

    model_config = ApiModel.model_config | {"json_schema_extra": cel_extra(
        cel_rule("!has(self.maxRunDurationSeconds) || "
                 "(has(self.queuedProvisioning) && self.queuedProvisioning)",
                 "spec.scheduling.capacity.flexStart.maxRunDurationSeconds is passed to GKE "
                 "through the ProvisioningRequest, so it needs queuedProvisioning: true",
                 ".maxRunDurationSeconds"))}

    queued_provisioning: bool = Field(
        False,
        description="true: the nodes are booked for the whole job through a ProvisioningRequest "
                    "(class queued-provisioning.gke.io) that Kueue's ProvisioningRequest "
                    "admission check creates; the job's ClusterQueue must have that check and "
                    "the node pools --enable-queued-provisioning. false (default): flex-start "
                    "node pools scaled up by the cluster autoscaler, as xpk's --flex does for "
                    "TPUs.")
    max_run_duration_seconds: int | None = Field(
        None, ge=1, le=MAX_RUN_DURATION_SECONDS,
        description="Longest the booked nodes are kept (at most 7 days), passed to the "
                    "ProvisioningRequest; needs queuedProvisioning.")

    @field_validator("max_run_duration_seconds")
    @classmethod
    def _duration_needs_queued(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and not info.data.get("queued_provisioning"):
            raise ValueError(
                "is passed to GKE through the ProvisioningRequest, so it needs "
                "queuedProvisioning: true; without it, the node pool's --max-run-duration "
                "decides")
        return value


class Capacity(SparseApiModel):
    """The kind of GKE capacity the slices run on."""

    model_config = ApiModel.model_config | {"json_schema_extra": cel_extra(
        cel_rule("!has(self.reservation) || self.type == 'Reservation'",
                 "spec.scheduling.capacity.reservation needs type: Reservation", ".reservation"),
        cel_rule("!has(self.flexStart) || self.type == 'FlexStart'",
                 "spec.scheduling.capacity.flexStart needs type: FlexStart", ".flexStart"))}

    type: CapacityType = Field(
        ..., description="OnDemand (never on Spot or flex-start nodes), Spot, Reservation or "
                         "FlexStart.")
    reservation: Reservation | None = Field(
        None, description="With type Reservation: which reservation; default: any.")
    flex_start: FlexStart | None = Field(
        None, description="With type FlexStart: how the capacity is obtained.")

    @field_validator("reservation", "flex_start")
    @classmethod
    def _member_matches_type(cls, value: Any, info: ValidationInfo) -> Any:
        wanted = {"reservation": CapacityType.RESERVATION,
                  "flex_start": CapacityType.FLEX_START}[info.field_name or ""]
        kind = info.data.get("type")
        if value is not None and kind is not None and kind != wanted:
            raise ValueError(f"needs type: {wanted.value} (type is {kind.value}); remove it, or "
                             f"set type: {wanted.value}")
        return value


_MODE_NEEDS_LEVEL = ("Preferred applies to level (each slice's sliceLevel is always required); "
                     "set level, or leave mode out")


class TopologyMode(StrEnum):
    REQUIRED = "Required"
    PREFERRED = "Preferred"


class Topology(SparseApiModel):
    """Kueue topology-aware scheduling: which domains of the cluster's Kueue Topology the hosts
    must (or should) share. The levels are node labels of that Topology, e.g.
    cloud.google.com/gce-topology-block, cloud.google.com/gce-topology-subblock,
    cloud.google.com/gke-nodepool, cloud.google.com/gke-tpu-slice-4x4-id (v6e)."""

    model_config = ApiModel.model_config | {"json_schema_extra": cel_extra(
        cel_rule("has(self.level) || has(self.sliceLevel)",
                 "spec.scheduling.topology: set level, sliceLevel or both"),
        cel_rule("has(self.level) || !has(self.mode) || self.mode == 'Required'",
                 f"spec.scheduling.topology.mode: {_MODE_NEEDS_LEVEL}", ".mode"))}

    level: LabelKey | None = Field(
        None,
        description="Node label whose one value every host of the job shares (all slices "
                    "together).")
    mode: TopologyMode = Field(
        TopologyMode.REQUIRED,
        description="Required (default): admitted only where one domain of level holds the "
                    "whole job. Preferred: Kueue tries one domain, then spreads.")
    slice_level: LabelKey | None = Field(
        None,
        description="Node label whose one value every host of one slice shares; each slice "
                    "is placed on its own.")

    @model_validator(mode="after")
    def _some_level(self) -> Topology:
        if self.level is None and self.slice_level is None:
            raise ValueError("set level, sliceLevel or both")
        if self.level is None and self.mode == TopologyMode.PREFERRED:
            raise ValueError(f"mode: {_MODE_NEEDS_LEVEL}")
        return self


# Fields added after the first version: left out of every dump while unset, so that a job
# without them hashes (tpujob.builders.fingerprint) exactly as before they existed.
_ADDED_FIELDS = ("priority", "capacity", "topology", "unscheduled_warning_seconds",
                 "max_run_seconds")
DEFAULT_UNSCHEDULED_WARNING_SECONDS = 600


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


class Scheduling(ApiModel):
    """Queueing, priority, capacity and placement."""

    model_config = ApiModel.model_config | {"json_schema_extra": cel_extra(
        cel_rule("!has(self.priority) || has(self.queueName)",
                 f"spec.scheduling.priority: {NEEDS_QUEUE}", ".priority"),
        cel_rule("!has(self.topology) || has(self.queueName)",
                 f"spec.scheduling.topology: {NEEDS_QUEUE}", ".topology"),
        cel_rule("!has(self.maxRunSeconds) || has(self.queueName)",
                 f"spec.scheduling.maxRunSeconds: {NEEDS_QUEUE}", ".maxRunSeconds"),
        cel_rule("!has(self.capacity) || self.capacity.type != 'FlexStart' || "
                 "has(self.queueName)", f"spec.scheduling.capacity: {FLEX_NEEDS_QUEUE}",
                 ".capacity"))}

    queue_name: str | None = Field(
        None, min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN,
        description="Kueue LocalQueue to submit to; the JobSet is created suspended and Kueue "
                    "admits it when quota allows.")
    priority_class_name: str | None = Field(
        None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN,
        description="PriorityClass of the pods.")
    priority: WorkloadPriorityClassName | None = Field(
        None,
        description="Kueue WorkloadPriorityClass: the job's place in its queue and whom it may "
                    "preempt. May change while the job is queued. Needs queueName.")
    capacity: Capacity | None = Field(
        None, description="GKE capacity the slices run on; default: whatever the queue's flavor "
                          "and the node pools give.")
    topology: Topology | None = Field(
        None, description="Kueue topology-aware placement of the hosts; needs queueName.")
    max_run_seconds: int | None = Field(
        None, ge=1, le=2**31 - 1,
        description="Kueue's maximum execution time: seconds the job may run admitted, all "
                    "admissions together; then Kueue deactivates its Workload, the pods are "
                    "stopped and the job is not admitted again. Needs queueName.")
    unscheduled_warning_seconds: int | None = Field(
        None, ge=0, le=MAX_RUN_DURATION_SECONDS,
        description="Once the job may run (admitted by Kueue, or not queued), pods still not "
                    "scheduled after this many seconds are flagged: reason Unschedulable, a "
                    "PodsScheduled condition and a Warning Event with the scheduler's words. "
                    "Default 600; 0 turns the flag off. May change at any time.")

    @property
    def unscheduled_warning_s(self) -> int:
        """The bound in effect: the field, or its default when left out (0: off)."""
        return (DEFAULT_UNSCHEDULED_WARNING_SECONDS if self.unscheduled_warning_seconds is None
                else self.unscheduled_warning_seconds)

    @field_validator("priority", "topology", "max_run_seconds")
    @classmethod
    def _kueue_fields_need_a_queue(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and info.data.get("queue_name") is None:
            raise ValueError(NEEDS_QUEUE)
        return value

    @field_validator("capacity")
    @classmethod
    def _flex_start_needs_a_queue(cls, value: Capacity | None, info: ValidationInfo
                                  ) -> Capacity | None:
        if (value is not None and value.type == CapacityType.FLEX_START
                and info.data.get("queue_name") is None):
            raise ValueError(FLEX_NEEDS_QUEUE)
        return value

    @model_serializer(mode="wrap")
    def _without_unset_additions(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        for name in _ADDED_FIELDS:
            for key in (name, _camel(name)):
                if key in out and out[key] is None:
                    del out[key]
        return out
