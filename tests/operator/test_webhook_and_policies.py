"""The admission webhook served by the running operator (kopf's server, plain HTTP here), and
workload policies ensured through the Compute API stand-in before a tpu7x JobSet is created."""

from __future__ import annotations

import socket
import uuid

import pytest
import requests

from tests.operator.conftest import name, start_operator
from tests.support.apiserver import wait_for
from tpujob.cli.operator_cmd import build_policy_ensurer
from tpujob.gcp import WorkloadPolicySettings
from tpujob.local.compute_standin import ComputeStandIn

pytestmark = pytest.mark.integration
TINY_TPU7X = {"model": {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4,
                        "n_kv_heads": 2, "head_dim": 16, "mlp_dim": 128},
              "train": {"steps": 10, "global_batch": 128, "seq_len": 64}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _review(port: int, obj: dict, old: dict | None = None) -> dict:
    request = {"uid": str(uuid.uuid4()), "operation": "UPDATE" if old else "CREATE",
               "kind": {"group": "tpujob.dev", "version": "v1alpha1", "kind": "TpuTrainingJob"},
               "resource": {"group": "tpujob.dev", "version": "v1alpha1",
                            "resource": "tputrainingjobs"},
               "name": obj["metadata"]["name"], "namespace": "ns",
               "userInfo": {"username": "alice"}, "object": obj, "oldObject": old,
               "dryRun": False}
    r = requests.post(f"http://127.0.0.1:{port}/validate-tputrainingjob", timeout=10,
                      json={"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                            "request": request})
    assert r.status_code == 200, r.text
    return r.json()["response"]


def _job(**spec) -> dict:
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"slice": "v6e-16", "image": "trainer:1", "output": "gs://bucket/run",
                     "trainer": {"config": TINY_TPU7X}} | spec}


def test_webhook_refuses_impossible_jobs_and_running_changes(cluster):
    port = _free_port()
    op = start_operator(cluster, webhook=True, webhook_host="127.0.0.1", webhook_port=port,
                        webhook_insecure=True)
    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0
    try:
        wait_for(listening, timeout=20, message="the webhook server")
        ok = _review(port, _job())
        assert ok["allowed"] is True
        bad = _review(port, _job(slice="v6e-12"))
        assert bad["allowed"] is False
        assert "spec.slice" in bad["status"]["message"] and "v6e-16" in bad["status"]["message"]
        running = dict(_job(), status={"phase": "Running"})
        change = _review(port, _job(image="trainer:2"), old=running)
        assert change["allowed"] is False and "spec.image" in change["status"]["message"]
        assert _review(port, _job(image="trainer:2", suspend=True), old=running)["allowed"]
    finally:
        op.stop()


def test_workload_policy_is_ensured_before_the_jobset(cluster):
    with ComputeStandIn(operation_polls=2) as compute:
        settings = WorkloadPolicySettings(enabled=True, project="my-project", region="us-central1",
                                          base_url=compute.url, auth="none")
        ensure = build_policy_ensurer(settings)
        op = start_operator(cluster, operator_kwargs={"ensure_policy": ensure})
        try:
            n = name()
            cluster.create_job(n, slice="tpu7x-64", trainer={"config": TINY_TPU7X})
            js = wait_for(lambda: cluster.jobset(n), timeout=20, message="JobSet")
            policy = compute.policy("my-project", "us-central1", "tpu7x-64-2x4x4-placement-policy")
            assert policy["workloadPolicy"]["acceleratorTopology"] == "2x4x4"
            selector = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
                "nodeSelector"]
            assert selector["cloud.google.com/placement-policy-name"] == \
                "tpu7x-64-2x4x4-placement-policy"
            # a second job of the same shape shares the policy: no second insert
            n2 = name()
            cluster.create_job(n2, slice="tpu7x-64", trainer={"config": TINY_TPU7X})
            wait_for(lambda: cluster.jobset(n2), timeout=20, message="second JobSet")
            assert compute.count("insert") == 1
        finally:
            op.stop()


def test_workload_policy_refusal_keeps_the_job_pending_and_creates_nothing(cluster):
    with ComputeStandIn() as compute:
        compute.deny("compute.resourcePolicies.create")
        settings = WorkloadPolicySettings(enabled=True, project="my-project", region="us-central1",
                                          base_url=compute.url, auth="none")
        op = start_operator(cluster, operator_kwargs={"ensure_policy": build_policy_ensurer(
            settings)})
        try:
            n = name()
            cluster.create_job(n, slice="tpu7x-128", trainer={"config": TINY_TPU7X})
            job = wait_for(lambda: [c for c in (cluster.job(n).get("status") or {}).get(
                "conditions", []) if c["type"] == "Running" and c["reason"] == "WorkloadPolicy"]
                and cluster.job(n), timeout=20, message="WorkloadPolicy condition")
            assert job["status"]["phase"] == "Pending"
            running = next(c for c in job["status"]["conditions"] if c["type"] == "Running")
            assert "compute.resourcePolicies.create" in running["message"]
            assert cluster.jobset(n) is None
            wait_for(lambda: "WorkloadPolicy" in cluster.event_reasons(n), message="Event")
        finally:
            op.stop()
