"""spec.localCheckpoints: the node-local tier's volume (hostPath per job, or an emptyDir), its
mount and variable in every trainer container, the built-in trainer's checkpoint.local, and
refusals that name the field."""

from __future__ import annotations

import pytest
import yaml

from tests.api import k8s_schema as k8s
from tpujob.api.crd import build_crd
from tpujob.api.resource import InvalidJobError, load_job
from tpujob.builders.jobset import build_children, build_jobset
from tpujob.builders.names import CONFIG_FILE
from tpujob_plan.slice_plan import plan_slice

pytestmark = pytest.mark.unit

MOUNT, ENV = "/tpujob/local-checkpoints", "TPUJOB_LOCAL_CHECKPOINT_DIR"


def _job(local: dict | None, *, slice_name: str = "v6e-16", **spec) -> dict:
    body = {"slice": slice_name, "image": "trainer:1", "output": "gs://bucket/run", **spec}
    if local is not None:
        body["localCheckpoints"] = local
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "llm", "namespace": "team-a", "uid": "u-1"}, "spec": body}


def _pod(job: dict) -> dict:
    spec = load_job(job).spec
    plan = plan_slice(spec.slice, slices=spec.slices, containers_per_host=spec.containers_per_host)
    js = build_jobset(job, spec, plan)
    return js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def _config_map(job: dict) -> dict:
    spec = load_job(job).spec
    plan = plan_slice(spec.slice, slices=spec.slices, containers_per_host=spec.containers_per_host)
    [cm] = [c for c in build_children(job, spec, plan) if c["kind"] == "ConfigMap"]
    return cm


def _volume(pod: dict) -> dict | None:
    found = [v for v in pod["volumes"] if v["name"] == "local-checkpoints"]
    assert len(found) <= 1
    return found[0] if found else None


@pytest.mark.parametrize("local, volume", [
    ({"everySteps": 10}, {"hostPath": {"path": "/var/lib/tpujob/local-checkpoints/team-a/llm",
                                       "type": "DirectoryOrCreate"}}),
    ({"everySteps": 10, "hostPath": "/mnt/stateful_partition/ckpt"},
     {"hostPath": {"path": "/mnt/stateful_partition/ckpt/team-a/llm",
                   "type": "DirectoryOrCreate"}}),
    ({"everySteps": 10, "medium": "Disk"}, {"emptyDir": {}}),
    ({"everySteps": 10, "medium": "Disk", "sizeLimit": "50Gi"}, {"emptyDir": {"sizeLimit": "50Gi"}}),
    ({"everySteps": 10, "medium": "Memory", "sizeLimit": "64Gi"},
     {"emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}),
])
def test_each_medium_builds_its_volume_mounted_in_every_container(local, volume):
    for slice_name, per_host in (("v6e-16", 1), ("tpu7x-16", 2)):
        pod = _pod(_job(local, slice_name=slice_name, containersPerHost=per_host))
        assert _volume(pod) == {"name": "local-checkpoints", **volume}
        assert len(pod["containers"]) == per_host
        # One metrics port per process of a host (host networking): 9431, 9432.
        assert [c["ports"][0]["containerPort"] for c in pod["containers"]] == \
            [9431 + i for i in range(per_host)]
        for c in pod["containers"]:
            assert {"name": "local-checkpoints", "mountPath": MOUNT} in c["volumeMounts"]
            assert [e for e in c["env"] if e["name"] == ENV] == [{"name": ENV, "value": MOUNT}]


def test_off_by_default_nothing_is_mounted():
    pod = _pod(_job(None))
    assert _volume(pod) is None
    for c in pod["containers"]:
        assert all(m["mountPath"] != MOUNT for m in c["volumeMounts"])
        assert all(e["name"] != ENV for e in c["env"])


def test_the_built_in_trainer_gets_the_directory_on_its_command_line_before_user_overrides():
    job = _job({"everySteps": 5}, trainer={"overrides": ["checkpoint.local.keep=4"]})
    [c] = _pod(job)["containers"]
    assert c["args"][2:4] == [f"checkpoint.local.directory={MOUNT}", "checkpoint.local.keep=4"]
    [plain] = _pod(_job(None))["containers"]
    assert not [a for a in plain["args"] if a.startswith("checkpoint.local")]


def test_a_trainer_of_ones_own_gets_the_mount_and_the_variable():
    pod = _pod(_job({"everySteps": 5}, trainer={"command": ["python", "train.py"]}))
    [c] = pod["containers"]
    assert {"name": "local-checkpoints", "mountPath": MOUNT} in c["volumeMounts"]
    assert {"name": ENV, "value": MOUNT} in c["env"]


def test_the_built_in_trainer_config_gets_checkpoint_local_beside_the_users_checkpoint_section():
    job = _job({"everySteps": 7, "keep": 3},
               trainer={"config": {"checkpoint": {"every": 100, "keep": 5}}})
    cm = _config_map(job)
    checkpoint = yaml.safe_load(cm["data"][CONFIG_FILE])["checkpoint"]
    assert checkpoint == {"every": 100, "keep": 5,
                          "local": {"every": 7, "keep": 3}}
    plain = _config_map(_job(None))
    assert "checkpoint" not in yaml.safe_load(plain["data"][CONFIG_FILE])


@pytest.mark.parametrize("local, field", [
    ({}, "localCheckpoints.everySteps"),
    ({"everySteps": 0}, "localCheckpoints.everySteps"),
    ({"everySteps": 5, "keep": 0}, "localCheckpoints.keep"),
    ({"everySteps": 5, "medium": "Tape"}, "localCheckpoints.medium"),
    ({"everySteps": 5, "hostPath": "relative/dir"}, "localCheckpoints.hostPath"),
    ({"everySteps": 5, "hostPath": "/trailing/"}, "localCheckpoints.hostPath"),
])
def test_invalid_settings_are_refused_naming_the_field(local, field):
    with pytest.raises(InvalidJobError, match=field.replace(".", r"\.")):
        load_job(_job(local))


def test_the_crd_accepts_and_refuses_the_same_settings():
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    good = _job({"everySteps": 5, "medium": "Memory", "sizeLimit": "8Gi"})
    assert k8s.validate_object(schema, good) == []
    errors = k8s.validate_object(schema, _job({"everySteps": 0, "medium": "Tape"}))
    assert any("localCheckpoints.everySteps" in e for e in errors), errors
    assert any("localCheckpoints.medium" in e for e in errors), errors
