"""The environment that wires every JAX process of a job to the others.

The operator knows every number, so it does not rely on GKE's injected TPU_WORKER_* variables
alone: each container gets the coordinator address, the process count, the expected devices and
the pieces of its own process index (slice, host and container index), from which the trainer
computes `process_id = (slice * hosts + host) * containers_per_host + container`. The host index
is the Indexed Job's completion index and the slice index the JobSet's job-index label, both read
through the downward API. Multi-slice jobs also get the MEGASCALE_* variables JAX's TPU runtime
reads for DCN.
"""

from __future__ import annotations

from tpujob.builders.names import (
    COORDINATOR_PORT,
    JOB_COMPLETION_INDEX_ANNOTATION,
    JOBSET_LABEL_JOB_INDEX,
    host_fqdn,
)
from tpujob_plan.slice_plan import SlicePlan
from tpujob_trainer import env as trainer_env
from tpujob_trainer.env import CONTAINER_INDEX, CONTAINERS_PER_HOST, HOST_INDEX, HOSTS_PER_SLICE


def _value(name: str, value: object) -> dict:
    return {"name": name, "value": str(value)}


def _field(name: str, path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def build_process_env(jobset_name: str, plan: SlicePlan, container_index: int) -> list[dict]:
    """Env of one trainer container (the same for every pod; indexes come from the pod)."""
    coordinator = host_fqdn(jobset_name, 0, 0)
    env = [
        _value(trainer_env.COORDINATOR_ADDRESS, f"{coordinator}:{COORDINATOR_PORT}"),
        _value(trainer_env.PROCESS_COUNT, plan.processes),
        _value(trainer_env.EXPECTED_DEVICES, plan.devices),
        _value(trainer_env.NUM_SLICES, plan.slices),
        _field(trainer_env.SLICE_ID, f"metadata.labels['{JOBSET_LABEL_JOB_INDEX}']"),
        _field(HOST_INDEX, f"metadata.annotations['{JOB_COMPLETION_INDEX_ANNOTATION}']"),
        _value(HOSTS_PER_SLICE, plan.hosts),
        _value(CONTAINER_INDEX, container_index),
        _value(CONTAINERS_PER_HOST, plan.containers_per_host),
        _value(trainer_env.PEAK_TFLOPS_PER_DEVICE, f"{plan.peak_tflops_per_device:g}"),
    ]
    if plan.slices > 1:
        env += [
            _value("MEGASCALE_COORDINATOR_ADDRESS", coordinator),
            _value("MEGASCALE_NUM_SLICES", plan.slices),
            _field("MEGASCALE_SLICE_ID", f"metadata.labels['{JOBSET_LABEL_JOB_INDEX}']"),
        ]
    return env
