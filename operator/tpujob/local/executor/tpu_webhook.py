"""What GKE's TPU admission webhook adds to a pod on a cluster, added here to a pod the local
executor runs: `TPU_WORKER_ID` (the pod's completion index) and `TPU_WORKER_HOSTNAMES` (the host
names of every pod of its Job, by index), for a pod of an Indexed Job with a subdomain that
requests `google.com/tpu`. A program that reads them (JAX's `GkeTpuCluster`, MaxText's TPU path)
sees what it would see on GKE.

JAX on CPU does not act on them by itself: its GKE TPU cluster is only detected on a Cloud TPU
VM (libtpu loaded and TPU chips present). For a pod with one TPU container (one JAX process per
host, where the webhook's variables are exactly the process wiring), local mode lets JAX take
the path it takes on a cluster: `JAX_FORCE_TPU_INIT=1` makes JAX treat the process as on a TPU VM
for cluster detection only (`JAX_PLATFORMS=cpu` keeps the CPU backend), so
`jax.distributed.initialize()` with no arguments finds the GKE TPU cluster and reads
TPU_WORKER_ID, TPU_WORKER_HOSTNAMES and MEGASCALE_NUM_SLICES / MEGASCALE_SLICE_ID (given here
as 1 / 0 when the job does not set them: on a TPU VM JAX would ask the metadata server's
`tpu-env`, which does not exist here). With two TPU containers per pod the host index is not the
process index, so none of this is added.

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


def build_local_jax_env(pod: dict[str, Any], webhook_env: dict[str, str]) -> dict[str, str]:
    """What lets JAX on CPU take its GKE TPU path with the webhook's variables, for a pod with
    one TPU container; nothing otherwise."""
    tpu_containers = [c for c in (pod.get("spec") or {}).get("containers") or []
                      if _requests_tpu({"spec": {"containers": [c]}})]
    if not webhook_env or len(tpu_containers) != 1:
        return {}
    return {"JAX_FORCE_TPU_INIT": "1", "MEGASCALE_NUM_SLICES": "1", "MEGASCALE_SLICE_ID": "0"}
