"""The environment that wires every JAX process of a job to the others.

The operator knows every number, so it does not rely on GKE's injected TPU_WORKER_* variables
alone: each container gets the coordinator address, the process count, the expected devices and
the pieces of its own process index (slice, host and container index), from which the trainer
computes `process_id = (slice * hosts + host) * containers_per_host + container`. The host index
is the Indexed Job's completion index and the slice index the JobSet's job-index label, both read
through the downward API. Multi-slice jobs also get the MEGASCALE_* variables JAX's TPU runtime
reads for DCN.

A program other than the built-in trainer gets the same facts under the names it already reads:
JAX's own, xpk's CPU and GPU names (which MaxText reads), and, for two containers per host, the
TPU runtime's per-process variables. docs/bring-your-own.md lists each one with its source.
Kubernetes expands `$(NAME)` in a value from the variables defined before it, which is how a
value that depends on the pod's slice (a host name) is written once for every pod.
"""

from __future__ import annotations

from tpujob.builders.launchers import build_launcher_env
from tpujob.builders.names import (
    COORDINATOR_PORT,
    JOB_COMPLETION_INDEX_ANNOTATION,
    JOBSET_LABEL_JOB_INDEX,
    MEGASCALE_PORT,
    REPLICATED_JOB,
    TPU_PROCESS_PORT,
    host_fqdn,
)
from tpujob_plan.gpu_plan import Launcher
from tpujob_plan.hardware import HardwarePlan
from tpujob_plan.slice_plan import SlicePlan
from tpujob_trainer import env as trainer_env
from tpujob_trainer.env import CONTAINER_INDEX, CONTAINERS_PER_HOST, HOST_INDEX, HOSTS_PER_SLICE

SLICE_INDEX_FIELD = f"metadata.labels['{JOBSET_LABEL_JOB_INDEX}']"
HOST_INDEX_FIELD = f"metadata.annotations['{JOB_COMPLETION_INDEX_ANNOTATION}']"
XPK_CPU_COORDINATOR_PORT = 1234  # the port MaxText's CPU path adds to a bare host, as xpk's does
JOB_INDEX_ENV = "JOB_INDEX"  # the slice index, as xpk names it


def _value(name: str, value: object) -> dict:
    return {"name": name, "value": str(value)}


def _field(name: str, path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def build_process_env(jobset_name: str, plan: HardwarePlan, container_index: int
                      ) -> list[dict]:
    """Env of one trainer container (the same for every pod; indexes come from the pod)."""
    if plan.is_gpu and plan.launcher is not Launcher.JAX:
        # torchrun or accelerate wires its own processes; the pod says which node it is.
        return [_field("JOB_COMPLETION_INDEX", HOST_INDEX_FIELD),
                _field("NODE_RANK", HOST_INDEX_FIELD), _value("NNODES", plan.hosts),
                *build_launcher_env(plan, jobset_name)]
    coordinator = host_fqdn(jobset_name, 0, 0)
    env = [
        _value(trainer_env.COORDINATOR_ADDRESS, f"{coordinator}:{COORDINATOR_PORT}"),
        _value(trainer_env.PROCESS_COUNT, plan.processes),
        _value(trainer_env.EXPECTED_DEVICES, plan.devices),
        # The mesh's DCN granules: slices on TPUs, nodes on GPUs (JAX sees no slice there).
        _value(trainer_env.NUM_SLICES, plan.mesh_granules),
        _field(trainer_env.SLICE_ID, SLICE_INDEX_FIELD),
        _field(HOST_INDEX, HOST_INDEX_FIELD),
        _value(HOSTS_PER_SLICE, plan.hosts),
        _value(CONTAINER_INDEX, container_index),
        _value(CONTAINERS_PER_HOST, plan.containers_per_host),
        _value(trainer_env.PEAK_TFLOPS_PER_DEVICE, f"{plan.peak_tflops_per_device:g}"),
    ]
    env += build_standard_env(jobset_name, plan)
    if plan.is_gpu:
        env += build_launcher_env(plan, jobset_name)
    if plan.containers_per_host > 1:
        env += build_tpu_process_env(jobset_name, plan, container_index)
    return env


def process_id_from_pod(plan: HardwarePlan) -> bool:
    """Whether a process's global index is the pod's completion index alone (one slice, one
    container per host): the downward API gives no arithmetic, so only then can JAX_PROCESS_ID
    be a plain field of the pod."""
    return plan.slices == 1 and plan.containers_per_host == 1


def build_standard_env(jobset_name: str, plan: HardwarePlan) -> list[dict]:
    """The names other programs read: JAX's, xpk's (CPU and GPU paths) and MEGASCALE_*."""
    coordinator = host_fqdn(jobset_name, 0, 0)
    env = [
        _field(JOB_INDEX_ENV, SLICE_INDEX_FIELD),
        _field("JOB_COMPLETION_INDEX", HOST_INDEX_FIELD),
        _value(trainer_env.COORDINATOR_HOST, coordinator),
        _value("JAX_COORDINATOR_ADDRESS", f"{coordinator}:{COORDINATOR_PORT}"),
        _value("JAX_COORDINATOR_PORT", COORDINATOR_PORT),
        _value("JAX_NUM_PROCESSES", plan.processes),
        _value("JAX_PROCESS_COUNT", plan.processes),
        _value("PROCESSES_IN_JOB", plan.hosts),
        _value("NNODES", plan.hosts * plan.slices),
    ]
    if process_id_from_pod(plan):
        env += [_field("JAX_PROCESS_ID", HOST_INDEX_FIELD), _field("NODE_RANK", HOST_INDEX_FIELD)]
    if plan.slices > 1:
        env += [
            _value("MEGASCALE_COORDINATOR_ADDRESS", coordinator),
            _value("MEGASCALE_PORT", MEGASCALE_PORT),
            _value("MEGASCALE_NUM_SLICES", plan.slices),
            _field("MEGASCALE_SLICE_ID", SLICE_INDEX_FIELD),
        ]
    return env


def _bounds(dims: tuple[int, ...]) -> str:
    return ",".join(str(d) for d in (*dims, 1, 1)[:3])


def build_tpu_process_env(jobset_name: str, plan: SlicePlan, container_index: int
                          ) -> list[dict]:
    """The TPU runtime's variables for several processes on one host (each container its own
    chips and port, every process of the slice listed). The chips of a host form a 2x2 grid;
    each of 2 containers takes one row of 2 (`1,2,1` chips per process). Unconfirmed against
    GKE's own injection for parallel containers (see docs/bring-your-own.md): opt-in only."""
    chips = plan.chips_per_container
    first = container_index * chips
    topology = [int(d) for d in plan.slice_type.topology.split("x")]
    process_grid = (1, 2, 1) if chips == 2 else (1, 1, 1)
    process_bounds = tuple(t // p for t, p in zip((*topology, 1, 1)[:3], process_grid,
                                                 strict=True))
    slice_host = f"{jobset_name}-{REPLICATED_JOB}-$({JOB_INDEX_ENV})"
    addresses = ",".join(f"{slice_host}-{h}.{jobset_name}:{TPU_PROCESS_PORT + c}"
                         for h in range(plan.hosts) for c in range(plan.containers_per_host))
    return [
        _value("TPU_VISIBLE_CHIPS", ",".join(str(first + i) for i in range(chips))),
        _value("TPU_CHIPS_PER_PROCESS_BOUNDS", _bounds(process_grid)),
        _value("TPU_PROCESS_BOUNDS", _bounds(process_bounds)),
        _value("TPU_PROCESS_PORT", TPU_PROCESS_PORT + container_index),
        _value("TPU_PROCESS_ADDRESSES", addresses),
    ]


def merge_env(operator_env: list[dict], user_env: list[dict]) -> list[dict]:
    """The operator's variables, less any the job's spec.env sets itself (the user's value
    wins: e.g. MaxText on CPU wants JAX_COORDINATOR_ADDRESS as a bare host name), then the
    user's, in order. Reserved names (TPUJOB_*, MEGASCALE_*, ...) never reach here.

    A bare host name in the job's JAX_COORDINATOR_ADDRESS is xpk's CPU form, to which the
    program adds xpk's port itself (MaxText's `initialize_jax_for_cpu`: port 1234), so process
    0's coordinator listens there: JAX_COORDINATOR_PORT says so (unless the job sets it), and
    the local executor binds the coordinator on it."""
    mine = {e["name"]: e for e in user_env}
    address = mine.get("JAX_COORDINATOR_ADDRESS", {})
    bare_host = "value" in address and ":" not in str(address["value"])
    merged = []
    for e in operator_env:
        if e["name"] in mine:
            continue
        if e["name"] == "JAX_COORDINATOR_PORT" and bare_host:
            e = _value("JAX_COORDINATOR_PORT", XPK_CPU_COORDINATOR_PORT)
        merged.append(e)
    return merged + list(user_env)
