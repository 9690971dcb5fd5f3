"""The JobSet builder, table-driven per slice type, and every built JobSet validated strictly
against the real JobSet v0.12.0 CRD schema."""

import json
from pathlib import Path

import pytest
import yaml

from tests.api.k8s_schema import schema_errors, strict_schema
from tpujob.api.resource import load_job
from tpujob.builders.jobset import build_children, build_jobset
from tpujob_plan.slice_plan import plan_slice
from tpujob_trainer.env import CONTAINER_INDEX, CONTAINERS_PER_HOST, HOSTS_PER_SLICE

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
JOBSET_CRD = ROOT / "operator" / "tpujob" / "local" / "crds" / "jobset.x-k8s.io_jobsets.yaml"


def _job(slice_name: str, slices: int = 1, **spec) -> dict:
    return {
        "apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
        "metadata": {"name": "llm", "namespace": "team-a", "uid": "u-1"},
        "spec": {"slice": slice_name, "slices": slices, "image": "trainer:1",
                 "output": "gs://bucket/run", **spec},
    }


def _build(slice_name: str, slices: int = 1, **spec) -> dict:
    job = _job(slice_name, slices, **spec)
    parsed = load_job(job)
    return build_jobset(job, parsed.spec, plan_slice(
        slice_name, slices=slices, containers_per_host=parsed.spec.containers_per_host))


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize(
    "slice_name, slices, hosts, containers, tpu, selector_topology, policy, layout",
    [
        ("v4-8", 1, 1, ["trainer"], "4", "2x2x1", None, 1),
        ("v5litepod-16", 1, 4, ["trainer"], "4", "4x4", None, 1),
        ("v5p-128", 1, 16, ["trainer"], "4", "4x4x4", None, 1),
        ("v6e-16", 1, 4, ["trainer"], "4", "4x4", None, 1),
        # tpu7x: one container with all 4 chips by default (xpk 1.16), two of 2 as an opt-in.
        ("tpu7x-8", 1, 1, ["trainer"], "4", "2x2x1", None, 1),
        ("tpu7x-8", 1, 1, ["trainer-1", "trainer-2"], "2", "2x2x1", None, 2),
        ("tpu7x-64", 1, 8, ["trainer"], "4", "2x4x4", "tpu7x-64-2x4x4-placement-policy", 1),
        ("tpu7x-64", 1, 8, ["trainer-1", "trainer-2"], "2", "2x4x4",
         "tpu7x-64-2x4x4-placement-policy", 2),
        ("v6e-16", 2, 4, ["trainer"], "4", "4x4", None, 1),
    ],
)
def test_shape_per_slice(slice_name, slices, hosts, containers, tpu, selector_topology, policy,
                         layout):
    js = _build(slice_name, slices, containersPerHost=layout)
    (rjob,) = js["spec"]["replicatedJobs"]
    assert (rjob["name"], rjob["replicas"]) == ("slice", slices)
    job_spec = rjob["template"]["spec"]
    assert (job_spec["parallelism"], job_spec["completions"]) == (hosts, hosts)
    assert (job_spec["completionMode"], job_spec["backoffLimit"]) == ("Indexed", 0)
    pod = job_spec["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == containers
    for c in pod["containers"]:
        assert c["resources"]["requests"]["google.com/tpu"] == tpu
        assert c["resources"]["limits"]["google.com/tpu"] == tpu
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == selector_topology
    assert pod["nodeSelector"].get("cloud.google.com/placement-policy-name") == policy
    assert (pod["hostNetwork"], pod["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    assert {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"} in \
        pod["tolerations"]
    annotations = dict(js["metadata"]["annotations"])
    assert set(json.loads(annotations.pop("tpujob.dev/spec-fingerprint"))) >= {
        "slice", "image", "trainer", "parallelism", "restartPolicy"}
    assert annotations == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}


@pytest.mark.parametrize(
    "slice_name, slices, processes, devices, per_host, containers_per_host",
    [
        ("v6e-16", 1, 4, 16, 4, 1),
        ("tpu7x-64", 1, 8, 64, 8, 1),
        ("tpu7x-64", 1, 16, 64, 8, 2),
        ("v6e-16", 2, 8, 32, 4, 1),
        ("v5p-128", 1, 16, 64, 16, 1),
    ],
)
def test_process_wiring(slice_name, slices, processes, devices, per_host, containers_per_host):
    js = _build(slice_name, slices, containersPerHost=containers_per_host)
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    for index, container in enumerate(pod["containers"]):
        env = _env(container)
        assert env["TPUJOB_COORDINATOR_ADDRESS"] == "llm-slice-0-0.llm:8482"
        assert env["TPUJOB_PROCESS_COUNT"] == str(processes)
        assert env["TPUJOB_EXPECTED_DEVICES"] == str(devices)
        assert env["TPUJOB_NUM_SLICES"] == str(slices)
        assert env[HOSTS_PER_SLICE] == str(per_host)
        assert env[CONTAINER_INDEX] == str(index)
        assert env[CONTAINERS_PER_HOST] == str(containers_per_host)
        assert env["TPUJOB_SLICE_ID"] == {"fieldRef": {
            "fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}}
        assert env["TPUJOB_HOST_INDEX"] == {"fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
        assert ("MEGASCALE_NUM_SLICES" in env) == (slices > 1)
        if slices > 1:
            assert env["MEGASCALE_NUM_SLICES"] == str(slices)
            assert env["MEGASCALE_COORDINATOR_ADDRESS"] == "llm-slice-0-0.llm"
    # Two processes on one host network need two metrics ports.
    ports = [c["ports"][0]["containerPort"] for c in pod["containers"]]
    assert len(set(ports)) == len(ports)


def test_failure_policies():
    js = _build("v6e-16", restartPolicy={"maxRestarts": 5, "retryableExitCodes": [42, 75]})
    fp = js["spec"]["failurePolicy"]
    assert fp["maxRestarts"] == 5
    assert [r["action"] for r in fp["rules"]] == ["RestartJobSetAndIgnoreMaxRestarts",
                                                  "FailJobSet"]
    pfp = js["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"]
    assert pfp[0] == {"action": "FailJob",
                      "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    codes = pfp[1]["onExitCodes"]
    assert codes["operator"] == "NotIn" and codes["containerName"] == "trainer"
    assert {42, 75, 143} <= set(codes["values"]) and 1 not in codes["values"]
    assert 0 not in codes["values"] and len(codes["values"]) <= 255
    no_signals = _build("v6e-16", restartPolicy={"retryOnSignal": False})
    rule = no_signals["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]
    assert rule["rules"][1]["onExitCodes"]["values"] == [42]
    counted = _build("v6e-16", restartPolicy={"disruptionsCountTowardsMax": True})
    assert counted["spec"]["failurePolicy"]["rules"][0]["action"] == "RestartJobSet"


def test_owner_labels_queue_and_suspend():
    js = _build("v6e-16", scheduling={"queueName": "team-a-queue",
                                      "priorityClassName": "high"})
    assert js["metadata"]["ownerReferences"] == [{
        "apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob", "name": "llm",
        "uid": "u-1", "controller": True, "blockOwnerDeletion": True}]
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a-queue"
    assert js["spec"]["suspend"] is True  # Kueue admits it
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "high"
    assert _build("v6e-16")["spec"]["suspend"] is False
    assert _build("v6e-16", suspend=True)["spec"]["suspend"] is True


def test_secrets_only_by_reference():
    js = _build("v6e-16", wandb={"project": "p", "apiKeySecret": {"name": "wandb", "key": "k"}},
                env=[{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf",
                                                                         "key": "t"}}}])
    env = _env(js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
               ["containers"][0])
    assert env["WANDB_API_KEY"] == {"secretKeyRef": {"name": "wandb", "key": "k"}}
    assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf", "key": "t"}}


def test_builtin_trainer_gets_its_config_and_overrides():
    job = _job("v6e-8", trainer={"config": {"train": {"steps": 40}},
                                 "overrides": ["train.steps=50"]},
               parallelism={"ici": {"fsdp": -1}}, data={"kind": "synthetic"})
    config_map, js = build_children(job, load_job(job).spec, plan_slice("v6e-8"))
    assert config_map["kind"] == "ConfigMap" and config_map["metadata"]["name"] == "llm-trainer"
    config = yaml.safe_load(config_map["data"]["trainer.yaml"])
    assert config["output"] == "gs://bucket/run"
    assert config["mesh"]["ici"] == {"fsdp": -1}
    assert config["train"]["steps"] == 40 and config["data"]["kind"] == "synthetic"
    container = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]
    assert container["command"] == ["tpujob-train"]
    assert container["args"] == ["--config", "/etc/tpujob/trainer.yaml", "train.steps=50",
                                 "metrics.port=9431"]


def test_custom_trainer_has_no_config_map():
    job = _job("v6e-16", trainer={"command": ["python", "-m", "maxtext.train"],
                                  "args": ["base.yml"]})
    children = build_children(job, load_job(job).spec, plan_slice("v6e-16"))
    assert [c["kind"] for c in children] == ["JobSet"]
    container = children[0]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"]["containers"][0]
    assert (container["command"], container["args"]) == (["python", "-m", "maxtext.train"],
                                                         ["base.yml"])


@pytest.fixture(scope="module")
def jobset_schema() -> dict:
    crd = yaml.safe_load(JOBSET_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    return strict_schema(version["schema"]["openAPIV3Schema"])


@pytest.mark.parametrize("slice_name, slices", [("v4-8", 1), ("v5litepod-16", 1),
                                                ("v5p-128", 1), ("v6e-16", 1), ("tpu7x-8", 1),
                                                ("tpu7x-64", 1), ("v6e-16", 2)])
def test_built_jobsets_validate_against_the_jobset_crd(jobset_schema, slice_name, slices):
    js = _build(slice_name, slices, wandb={"project": "p", "mode": "offline"},
                scheduling={"queueName": "q"}, resources={"requests": {"memory": "100Gi"}})
    assert schema_errors(jobset_schema, js) == []


@pytest.mark.parametrize("slice_name, slices", [("tpu7x-64", 1), ("v6e-16", 2), ("v5p-128", 1)])
def test_every_process_gets_a_distinct_id_from_the_pod_env(slice_name, slices):
    """Resolve the downward-API fields as Kubernetes would for every pod and container, then
    parse the env as the trainer does: ids are exactly 0 .. processes-1."""
    from tpujob_trainer.env import ProcessEnv

    plan = plan_slice(slice_name, slices=slices)
    js = _build(slice_name, slices)
    containers = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"]
    ids = []
    for slice_index in range(slices):
        for host in range(plan.hosts):
            fields = {"metadata.labels['jobset.sigs.k8s.io/job-index']": str(slice_index),
                      "metadata.annotations['batch.kubernetes.io/job-completion-index']":
                          str(host)}
            for container in containers:
                env = {}
                for e in container["env"]:
                    if "value" in e:
                        env[e["name"]] = e["value"]
                    elif "fieldRef" in e["valueFrom"]:
                        env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
                ids.append(ProcessEnv.from_env(env).process_id)
    assert sorted(ids) == list(range(plan.processes))
