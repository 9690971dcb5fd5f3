"""The environment variables the operator sets for every trainer process (the only place they are named).

| variable                          | meaning                                                              |
|-----------------------------------|----------------------------------------------------------------------|
| TPUJOB_COORDINATOR_ADDRESS        | `host:port` of process 0's JAX coordinator (multi-process runs)      |
| TPUJOB_COORDINATOR_HOST           | process 0's host name alone (for programs that add their own port)  |
| TPUJOB_PROCESS_ID                 | this process's index, 0 .. count-1 (or derived from the four below)  |
| TPUJOB_HOST_INDEX                 | this pod's host index within its slice (the Indexed Job's index)     |
| TPUJOB_HOSTS_PER_SLICE            | hosts (pods) per slice                                               |
| TPUJOB_CONTAINER_INDEX            | this container's index on its host (tpu7x runs 2 per host)           |
| TPUJOB_CONTAINERS_PER_HOST        | trainer containers per host                                          |
| TPUJOB_PROCESS_COUNT              | JAX processes the job starts (all slices together)                   |
| TPUJOB_EXPECTED_DEVICES           | global JAX device count the job expects (all processes)              |
| TPUJOB_SLICE_ID                   | this process's slice, 0 .. slices-1 (multi-slice)                    |
| TPUJOB_NUM_SLICES                 | slices of the job (default 1)                                        |
| TPUJOB_INIT_TIMEOUT_S             | seconds to wait for every process to join (default 300)              |
| TPUJOB_CPU_DEVICES                | CPU only: JAX devices per process (like --xla_force_host_platform_device_count) |
| TPUJOB_PEAK_TFLOPS_PER_DEVICE     | a TPU's peak TFLOP/s per device, for MFU (ignored on CPU; default: the catalog, or measured on a CPU without it) |
| TPUJOB_TERMINATION_LOG            | file for the one-line JSON exit reason (default /dev/termination-log) |
| TPUJOB_BIND_ADDRESS               | IP address this process listens on: its HTTP endpoint (/metrics, /progress) and, on process 0, the JAX coordinator service (on the port of TPUJOB_COORDINATOR_ADDRESS) and the lifeline (a free port); default: all interfaces |
| WANDB_API_KEY                     | Weights & Biases key (from a Kubernetes Secret); never in the config |

Set by a person (in the job's env) or a test, never by the operator:

| variable                          | meaning                                                              |
|-----------------------------------|----------------------------------------------------------------------|
| TPUJOB_HOST_REPORTS               | `0`, `false` or `off`: no host report lines (default: on)            |
| TPUJOB_HOST_REPORT_INTERVAL_S     | seconds between two heartbeats of the host report (default 10)       |
| TPUJOB_FAULT_STEP_SLEEP_S         | fault injection: this process sleeps so long in each step's host work (a straggler) |
| TPUJOB_FAULT_STEP_SLOWDOWN        | fault injection: this process sleeps this fraction of its recent step time in each step's host work (`0.2`: every step of the job 20% longer) |
| TPUJOB_FAULT_PROCESSES            | the process indices the faults above apply to, comma-separated (default: every process) |

Unset or empty variables mean "not given". A malformed value is a config error.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

COORDINATOR_ADDRESS = "TPUJOB_COORDINATOR_ADDRESS"
COORDINATOR_HOST = "TPUJOB_COORDINATOR_HOST"  # set by the operator; the trainer does not read it
PROCESS_ID = "TPUJOB_PROCESS_ID"
PROCESS_COUNT = "TPUJOB_PROCESS_COUNT"
EXPECTED_DEVICES = "TPUJOB_EXPECTED_DEVICES"
SLICE_ID = "TPUJOB_SLICE_ID"
HOST_INDEX = "TPUJOB_HOST_INDEX"
HOSTS_PER_SLICE = "TPUJOB_HOSTS_PER_SLICE"
CONTAINER_INDEX = "TPUJOB_CONTAINER_INDEX"
CONTAINERS_PER_HOST = "TPUJOB_CONTAINERS_PER_HOST"
NUM_SLICES = "TPUJOB_NUM_SLICES"
INIT_TIMEOUT_S = "TPUJOB_INIT_TIMEOUT_S"
CPU_DEVICES = "TPUJOB_CPU_DEVICES"
PEAK_TFLOPS_PER_DEVICE = "TPUJOB_PEAK_TFLOPS_PER_DEVICE"
TERMINATION_LOG = "TPUJOB_TERMINATION_LOG"
BIND_ADDRESS = "TPUJOB_BIND_ADDRESS"
WANDB_API_KEY = "WANDB_API_KEY"
HOST_REPORTS = "TPUJOB_HOST_REPORTS"
HOST_REPORT_INTERVAL_S = "TPUJOB_HOST_REPORT_INTERVAL_S"
FAULT_STEP_SLEEP_S = "TPUJOB_FAULT_STEP_SLEEP_S"
FAULT_STEP_SLOWDOWN = "TPUJOB_FAULT_STEP_SLOWDOWN"
FAULT_PROCESSES = "TPUJOB_FAULT_PROCESSES"
DEFAULT_HOST_REPORT_INTERVAL_S = 10.0
# The TPUJOB_* variables a person may set in the job's env (the operator sets the others).
PERSON_SET = (HOST_REPORTS, HOST_REPORT_INTERVAL_S, FAULT_STEP_SLEEP_S, FAULT_STEP_SLOWDOWN,
              FAULT_PROCESSES)

ALL = (COORDINATOR_ADDRESS, PROCESS_ID, PROCESS_COUNT, EXPECTED_DEVICES, SLICE_ID, NUM_SLICES,
       HOST_INDEX, HOSTS_PER_SLICE, CONTAINER_INDEX, CONTAINERS_PER_HOST,
       INIT_TIMEOUT_S, CPU_DEVICES, PEAK_TFLOPS_PER_DEVICE, TERMINATION_LOG, BIND_ADDRESS)


class EnvError(ValueError):
    """A malformed TPUJOB_* variable."""


def _get(env: dict[str, str], name: str) -> str | None:
    v = env.get(name, "").strip()
    return v or None


def _int(env: dict[str, str], name: str, *, minimum: int = 0) -> int | None:
    v = _get(env, name)
    if v is None:
        return None
    try:
        n = int(v)
    except ValueError:
        raise EnvError(f"{name}={v!r} is not an integer") from None
    if n < minimum:
        raise EnvError(f"{name}={n} must be >= {minimum}")
    return n


def _switch(env: dict[str, str], name: str) -> bool:
    v = _get(env, name)
    if v is None or v.lower() in ("1", "true", "on"):
        return True
    if v.lower() in ("0", "false", "off"):
        return False
    raise EnvError(f"{name}={v!r} must be one of 1, true, on, 0, false, off")


def _float(env: dict[str, str], name: str) -> float | None:
    v = _get(env, name)
    if v is None:
        return None
    try:
        x = float(v)
    except ValueError:
        raise EnvError(f"{name}={v!r} is not a number") from None
    if not x > 0:
        raise EnvError(f"{name}={x} must be > 0")
    return x


def _indices(env: dict[str, str], name: str) -> frozenset[int] | None:
    v = _get(env, name)
    if v is None:
        return None
    try:
        found = frozenset(int(part) for part in v.split(",") if part.strip())
    except ValueError:
        raise EnvError(f"{name}={v!r} is not a comma-separated list of process indices") \
            from None
    if not found or min(found) < 0:
        raise EnvError(f"{name}={v!r} must name process indices >= 0")
    return found


def _faults(env: dict[str, str], process_id: int) -> dict[str, float]:
    """The injected faults that apply to this process (none where TPUJOB_FAULT_PROCESSES leaves
    it out)."""
    faults = {"fault_step_sleep_s": _float(env, FAULT_STEP_SLEEP_S) or 0.0,
              "fault_step_slowdown": _float(env, FAULT_STEP_SLOWDOWN) or 0.0}
    targets = _indices(env, FAULT_PROCESSES)
    if targets is not None and process_id not in targets:
        return dict.fromkeys(faults, 0.0)
    return faults


@dataclass(frozen=True)
class ProcessEnv:
    """What the operator told this process about the job it belongs to."""

    coordinator_address: str | None = None
    process_id: int = 0
    process_count: int = 1
    expected_devices: int | None = None
    slice_id: int = 0
    num_slices: int = 1
    init_timeout_s: int = 300
    cpu_devices: int | None = None
    peak_tflops_per_device: float | None = None
    termination_log: str | None = None
    bind_address: str | None = None     # an IP address; None = all interfaces
    host_index: int = 0                 # this pod's host within its slice
    container_index: int = 0            # this container on its host
    containers_per_host: int = 1
    host_reports: bool = True
    host_report_interval_s: float = DEFAULT_HOST_REPORT_INTERVAL_S
    fault_step_sleep_s: float = 0.0
    fault_step_slowdown: float = 0.0    # a fraction of the recent step time

    @property
    def host_name(self) -> str:
        """slice-S/host-H (/container-C where a host runs several), as the operator names it."""
        name = f"slice-{self.slice_id}/host-{self.host_index}"
        return f"{name}/container-{self.container_index}" if self.containers_per_host > 1 \
            else name

    @property
    def is_multiprocess(self) -> bool:
        return self.process_count > 1

    @property
    def coordinator_bind_address(self) -> str | None:
        """`ip:port` for process 0's coordinator service (None: JAX's default, all interfaces)."""
        if self.bind_address is None or self.coordinator_address is None:
            return None
        port = self.coordinator_address.rsplit(":", 1)[1]
        host = f"[{self.bind_address}]" if ":" in self.bind_address else self.bind_address
        return f"{host}:{port}"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> ProcessEnv:
        env = dict(os.environ if env is None else env)
        count = _int(env, PROCESS_COUNT, minimum=1) or 1
        pid = _int(env, PROCESS_ID)
        if pid is None:
            pid = _derived_process_id(env)
        if pid >= count:
            raise EnvError(f"{PROCESS_ID}={pid} must be < {PROCESS_COUNT}={count}")
        coord = _get(env, COORDINATOR_ADDRESS)
        if count > 1 and coord is None:
            raise EnvError(f"{PROCESS_COUNT}={count} needs {COORDINATOR_ADDRESS} (host:port)")
        if coord is not None and (":" not in coord or not coord.rsplit(":", 1)[1].isdigit()):
            raise EnvError(f"{COORDINATOR_ADDRESS}={coord!r} must be host:port")
        slices = _int(env, NUM_SLICES, minimum=1) or 1
        slice_id = _int(env, SLICE_ID) or 0
        if slice_id >= slices:
            raise EnvError(f"{SLICE_ID}={slice_id} must be < {NUM_SLICES}={slices}")
        containers = _int(env, CONTAINERS_PER_HOST, minimum=1) or 1
        hosts = _int(env, HOSTS_PER_SLICE, minimum=1) or max(1, count // (slices * containers))
        host = _int(env, HOST_INDEX)
        container = _int(env, CONTAINER_INDEX)
        return cls(
            host_index=(pid // containers) % hosts if host is None else host,
            container_index=pid % containers if container is None else container,
            containers_per_host=containers, host_reports=_switch(env, HOST_REPORTS),
            host_report_interval_s=(_float(env, HOST_REPORT_INTERVAL_S)
                                    or DEFAULT_HOST_REPORT_INTERVAL_S),
            **_faults(env, pid),
            coordinator_address=coord, process_id=pid, process_count=count,
            expected_devices=_int(env, EXPECTED_DEVICES, minimum=1), slice_id=slice_id,
            num_slices=slices, init_timeout_s=_int(env, INIT_TIMEOUT_S, minimum=1) or 300,
            cpu_devices=_int(env, CPU_DEVICES, minimum=1),
            peak_tflops_per_device=_float(env, PEAK_TFLOPS_PER_DEVICE),
            termination_log=_get(env, TERMINATION_LOG), bind_address=_ip(env, BIND_ADDRESS))


def _ip(env: dict[str, str], name: str) -> str | None:
    v = _get(env, name)
    if v is None:
        return None
    try:
        return str(ipaddress.ip_address(v.strip("[]")))
    except ValueError:
        raise EnvError(f"{name}={v!r} is not an IP address (e.g. 127.0.0.2 or ::1)") from None


def _derived_process_id(env: dict[str, str]) -> int:
    """process_id = (slice * hosts per slice + host) * containers per host + container: the
    operator cannot do arithmetic in a pod spec, so it passes the pieces (0 when absent)."""
    host = _int(env, HOST_INDEX) or 0
    hosts = _int(env, HOSTS_PER_SLICE, minimum=1) or 1
    container = _int(env, CONTAINER_INDEX) or 0
    containers = _int(env, CONTAINERS_PER_HOST, minimum=1) or 1
    if host >= hosts:
        raise EnvError(f"{HOST_INDEX}={host} must be < {HOSTS_PER_SLICE}={hosts}")
    if container >= containers:
        raise EnvError(f"{CONTAINER_INDEX}={container} must be < {CONTAINERS_PER_HOST}={containers}")
    slice_id = _int(env, SLICE_ID) or 0
    return (slice_id * hosts + host) * containers + container
