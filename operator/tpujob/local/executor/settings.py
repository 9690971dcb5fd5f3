"""Settings of the local executor: how fast its emulated controllers act, how it scales a TPU
job down to CPU processes, and what environment the processes start from."""

from __future__ import annotations

from dataclasses import dataclass, field

INHERITED_ENV = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
                 "PYTHONPATH")


@dataclass(frozen=True)
class ExecutorSettings:
    """Tunables of `Executor`; the defaults suit tests and `tpujob local run`."""

    # JAX on CPU: devices per process. None: TPUJOB_EXPECTED_DEVICES / TPUJOB_PROCESS_COUNT
    # (as on the slice). A number N scales the job down: every process gets N CPU devices and
    # TPUJOB_EXPECTED_DEVICES is rewritten to N x TPUJOB_PROCESS_COUNT.
    cpu_devices_per_process: int | None = None
    jax_platforms: str | None = "cpu"  # JAX_PLATFORMS for every container; None: leave as is

    # Time, scaled for local use.
    grace_scale: float = 0.05  # terminationGracePeriodSeconds x this = seconds until SIGKILL
    max_grace_s: float = 10.0
    job_backoff_s: float = 0.5  # the Job controller's pod back-off base (10 s in Kubernetes)
    container_backoff_s: float = 0.5  # the kubelet's restart back-off base (10 s)
    stop_grace_s: float = 3.0  # on stop(): SIGTERM, then SIGKILL after at most this long

    # The loop: it wakes on watch events and process exits, and at least every resync_s.
    resync_s: float = 1.0
    debounce_s: float = 0.03
    watch_timeout_s: int = 30
    request_timeout_s: float = 30.0

    # What every container's environment starts from (a container sees none of the host's
    # variables but these), before its own env.
    inherit_env: tuple[str, ...] = INHERITED_ENV
    extra_env: dict[str, str] = field(default_factory=dict)

    emit_events: bool = True
    # Each container process gets the pod's /etc/hosts (pod DNS names) in a mount namespace of
    # its own, where the machine allows it (pod_dns.py).
    pod_hosts: bool = True
    ip_block: tuple[int, int] | None = None  # 127.A.B.0/24 for pod addresses; None: random

    # Which parts it plays. True: the JobSet and Job controllers and the kubelets of
    # unscheduled pods (the embedded API server). False: only the kubelets of TPU node pools
    # it registers for the real scheduler to bind pods to (the real control plane runs the
    # JobSet and Job controllers, the scheduler and the garbage collector).
    controllers: bool = True
    # With controllers=False: the kubelet endpoint's (serving certificate, key, CA of the
    # clients it takes), for the apiserver's `pods/log`; None: the nodes advertise none.
    kubelet_tls: tuple[str, str, str] | None = None

    def grace_seconds(self, spec_seconds: float | None, default: float = 30) -> float:
        seconds = default if spec_seconds is None else float(spec_seconds)
        return max(0.0, min(seconds * self.grace_scale, self.max_grace_s))
