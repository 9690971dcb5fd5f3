"""Secrets proven by use: a job whose W&B key and another credential come from a Secret runs
the real trainer in local mode; the values reach the trainer processes' environment, and appear
nowhere else: not in the job's status, any Event, the operator's log, the trainer's logs or any
file it wrote, the ConfigMap, the JobSet or the pods as stored."""

from __future__ import annotations

import json
import logging
import secrets

import pytest

from tests.e2e.conftest import TINY, unique
from tests.support.apiserver import wait_for
from tpujob.local.executor.client import Resource

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CONFIGMAPS = Resource("", "v1", "configmaps")
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets")
PODS = Resource("", "v1", "pods")


def _environ(pid: int) -> dict[str, str]:
    """The process's environment. Empty while the kernel is between loading a new program and
    laying out its stack (the exec is past its close-on-exec step, which is what lets the
    parent's Popen return, before the environment is in place), and for a process that ended."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
    return {k.decode(): v.decode(errors="replace") for k, v in pairs}


def _environ_in_place(pid: int) -> dict[str, str]:
    """The environment once the exec has laid it out (a container's environment is never
    empty: the kubelet sets HOSTNAME and the rest)."""
    return wait_for(lambda: _environ(pid), timeout=30,
                    message=f"process {pid}'s environment in place")


def test_secret_values_reach_the_trainer_and_nothing_else(local, caplog):
    caplog.set_level(logging.DEBUG)  # every record of the operator (a thread of this process)
    name = unique("secret")
    wandb_key = f"wandb-{secrets.token_hex(16)}"
    hf_token = f"hf_{secrets.token_hex(16)}"
    local.cluster.apply([{
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "creds", "namespace": local.namespace},
        "stringData": {"wandb": wandb_key, "hf": hf_token}}])
    config = TINY | {"train": TINY["train"] | {"steps": 30}}
    local.apply(name, {
        "slice": "v6e-8", "image": "trainer:1", "output": f"gs://tpujob-e2e/{name}",
        "trainer": {"config": config}, "parallelism": {"ici": {"fsdp": -1}},
        "restartPolicy": {"maxRestarts": 0},
        "wandb": {"project": "tpujob-e2e", "mode": "offline",
                  "apiKeySecret": {"name": "creds", "key": "wandb"}},
        "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds",
                                                                     "key": "hf"}}},
                {"name": "WANDB_SILENT", "value": "false"}]})

    # Used: both trainer processes have both values (read while they start: JAX's import and
    # compile take seconds).
    processes = wait_for(lambda: len(local.processes(name)) == 2 and local.processes(name),
                         timeout=60, message="both trainer processes")
    for process in processes:
        env = _environ_in_place(process["pid"])
        assert (env.get("WANDB_API_KEY"), env.get("HF_TOKEN")) == (wandb_key, hf_token)
    job = local.wait_phase(name, "Succeeded", "Failed", timeout=180)
    assert job["status"]["phase"] == "Succeeded", job["status"]

    values = (wandb_key, hf_token)
    api = local.cluster.api
    stored = {
        "job": job,
        "events": local.cluster.events(local.namespace),
        "configmaps": api.list(CONFIGMAPS, local.namespace)[0],
        "jobset": api.get(JOBSETS, local.namespace, name),
        "pods": local.pods(name),
    }
    assert stored["configmaps"] and stored["jobset"] and len(stored["pods"]) == 2
    for what, obj in stored.items():
        text = json.dumps(obj)
        assert not [v for v in values if v in text], what
    # The references are there, as references.
    assert "secretKeyRef" in json.dumps(stored["jobset"])

    operator_lines = [r.getMessage() for r in caplog.records]
    assert [r for r in caplog.records if r.name.startswith("tpujob")], "no operator log seen"
    assert not [line for line in operator_lines if any(v in line for v in values)]

    # Every file of the job's pods (the trainer's logs, W&B's offline run) and of its output.
    pods_dir = local.cluster.workdir / "pods" / local.namespace
    files = [p for p in pods_dir.glob(f"{name}-*/**/*") if p.is_file()]
    logs = local.logs(name)
    assert logs and set(logs) <= set(files), files[:5]
    assert [p for p in files if p.suffix == ".wandb"], "no W&B offline run was written"
    outputs = [p for p in (local.cluster.workdir / "gcs").rglob("*")
               if p.is_file() and name in str(p)]
    assert outputs, "the run wrote nothing to its output"
    leaked = [str(p) for p in files + outputs
              if any(v.encode() in p.read_bytes() for v in values)]
    assert leaked == []
