"""What GKE's TPU admission webhook adds to a pod on a cluster, added here to a pod the local
executor runs: `TPU_WORKER_ID` (the pod's completion index) and `TPU_WORKER_HOSTNAMES` (the host
names of every pod of its Job, by index), for a pod of an Indexed Job with a subdomain that
requests `google.com/tpu`. A program that reads them (JAX's `GkeTpuCluster`, MaxText's TPU path)
sees what it would see on GKE.

JAX on CPU is not misled by them: its GKE TPU cluster is only detected on a Cloud TPU VM (libtpu
loaded and TPU chips present), so `jax.distributed.initialize()` on CPU ignores them.

Pure: a pod and its Job in, variables out.
"""

from __future__ import annotations

from typing import Any

from .keys import JOB_COMPLETION_INDEX
from .objects import annotations

TPU_RESOURCE = "google.com/tpu"


def _requests_tpu(pod: dict[str, Any]) -> bool:
    for c in (pod.get("spec") or {}).get("containers") or []:
        resources = c.get("resources") or {}
        if any(TPU_RESOURCE in (resources.get(k) or {}) for k in ("requests", "limits")):
            return True
    return False


def build_tpu_webhook_env(pod: dict[str, Any], job: dict[str, Any] | None) -> dict[str, str]:
    """TPU_WORKER_ID and TPU_WORKER_HOSTNAMES for a TPU pod of an Indexed Job, else nothing."""
    spec = pod.get("spec") or {}
    index = annotations(pod).get(JOB_COMPLETION_INDEX)
    if job is None or index is None or not spec.get("subdomain") or not _requests_tpu(pod):
        return {}
    job_spec = job.get("spec") or {}
    if job_spec.get("completionMode") != "Indexed":
        return {}
    count = int(job_spec.get("completions") or job_spec.get("parallelism") or 1)
    job_name = (job.get("metadata") or {}).get("name", "")
    hostnames = [f"{job_name}-{i}.{spec['subdomain']}" for i in range(count)]
    return {"TPU_WORKER_ID": str(index), "TPU_WORKER_HOSTNAMES": ",".join(hostnames)}
