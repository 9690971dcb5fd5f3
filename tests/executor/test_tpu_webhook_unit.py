"""Local mode adds what GKE's TPU webhook injects (TPU_WORKER_ID, TPU_WORKER_HOSTNAMES) to the
pods that would get it on a cluster, and JAX on CPU is not misled by them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tpujob.local.executor.tpu_webhook import build_tpu_webhook_env

TPU = {"resources": {"requests": {"google.com/tpu": "4"}, "limits": {"google.com/tpu": "4"}}}


def _pod(index="2", subdomain="js", container=TPU):
    notes = {} if index is None else {"batch.kubernetes.io/job-completion-index": index}
    return {"metadata": {"namespace": "ns", "annotations": notes},
            "spec": {"hostname": f"js-slice-1-{index}", "subdomain": subdomain,
                     "containers": [{"name": "trainer", **container}]}}


JOB = {"metadata": {"name": "js-slice-1"},
       "spec": {"completionMode": "Indexed", "completions": 4, "parallelism": 4}}


@pytest.mark.unit
@pytest.mark.parametrize("pod, job, expected", [
    (_pod(), JOB, {"TPU_WORKER_ID": "2", "TPU_WORKER_HOSTNAMES":
                   "js-slice-1-0.js,js-slice-1-1.js,js-slice-1-2.js,js-slice-1-3.js"}),
    (_pod(container={}), JOB, {}),                                  # no TPU requested
    (_pod(subdomain=None), JOB, {}),                                # no subdomain: no DNS names
    (_pod(index=None), JOB, {}),                                    # not an indexed pod
    (_pod(), {**JOB, "spec": {"completions": 4}}, {}),              # NonIndexed Job
    (_pod(), None, {}),                                             # owner not found
])
def test_webhook_env(pod, job, expected):
    assert build_tpu_webhook_env(pod, job) == expected


@pytest.mark.integration
def test_jax_on_cpu_ignores_the_tpu_worker_variables():
    """With the webhook's variables set, JAX on CPU detects no GKE TPU cluster, so a program's
    `jax.distributed.initialize()` is not sent to TPU host names."""
    code = ("import jax; from jax._src import clusters; jax.devices();"
            "print([c.__name__ for c in clusters.ClusterEnv._cluster_types"
            " if not c.opt_in_only_method and c.is_env_present()])")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TPU_WORKER_ID": "1",
           "TPU_WORKER_HOSTNAMES": "js-slice-0-0.js,js-slice-0-1.js"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.unit
@pytest.mark.parametrize("containers, webhook, expected", [
    ([TPU], {"TPU_WORKER_ID": "0"}, {"JAX_FORCE_TPU_INIT": "1", "MEGASCALE_NUM_SLICES": "1",
                                     "MEGASCALE_SLICE_ID": "0"}),
    ([TPU, TPU], {"TPU_WORKER_ID": "0"}, {}),   # two processes per host: host index != process
    ([TPU], {}, {}),                            # not a pod the webhook serves
])
def test_local_jax_env(containers, webhook, expected):
    from tpujob.local.executor.tpu_webhook import build_local_jax_env
    pod = {"spec": {"containers": [{"name": f"c{i}", **c} for i, c in enumerate(containers)]}}
    assert build_local_jax_env(pod, webhook) == expected
