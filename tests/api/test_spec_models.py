"""Spec models, table-driven: defaults, aliases, the -1 axis, and bad values refused with a
message naming the field. Each bad spec is also checked against the generated CRD (schema and
CEL), so `kubectl apply` and the operator refuse the same things."""

from __future__ import annotations

import pytest

from tests.api import k8s_schema as k8s
from tpujob.api import (
    DataKind,
    InvalidJobError,
    MeshAxis,
    StallAction,
    TpuTrainingJobSpec,
    WandbMode,
    load_job,
    load_spec,
)
from tpujob.api.crd import build_crd
from tpujob_trainer.env import PERSON_SET

pytestmark = pytest.mark.unit

BASE = {"slice": "v6e-16", "image": "trainer:1", "output": "gs://bucket/runs/a"}


@pytest.fixture(scope="module")
def root_schema():
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _job(spec):
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "j"}, "spec": spec}


def test_defaults():
    spec = load_spec(BASE)
    assert spec.slices == 1
    assert spec.machine_type is None
    assert spec.trainer.config == {} and spec.trainer.overrides == []
    assert spec.trainer.command is None
    assert spec.parallelism.ici == {} and spec.parallelism.dcn == {}
    assert spec.data is None and spec.wandb is None
    assert spec.env == []
    assert spec.restart_policy.max_restarts == 3
    assert spec.restart_policy.retryable_exit_codes is None  # the launcher's default: [42]
    assert spec.restart_policy.retry_on_signal is True
    assert spec.restart_policy.on_stall is StallAction.RESTART
    assert spec.stall_timeout_seconds == 1800
    assert spec.suspend is False
    assert spec.is_custom_trainer is False


def test_camel_case_in_yaml_snake_case_in_python():
    spec = load_spec({
        **BASE, "machineType": "ct6e-standard-4t",
        "restartPolicy": {"maxRestarts": 5, "retryableExitCodes": [42, 75], "onStall": "Fail"},
        "stallTimeoutSeconds": 60,
        "scheduling": {"queueName": "tpu-queue", "priorityClassName": "high"},
        "wandb": {"project": "p", "runName": "r",
                  "apiKeySecret": {"name": "wandb", "key": "api-key"}},
        "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
    })
    assert spec.machine_type == "ct6e-standard-4t"
    assert spec.restart_policy.retryable_exit_codes == [42, 75]
    assert spec.restart_policy.on_stall is StallAction.FAIL
    assert spec.scheduling.queue_name == "tpu-queue"
    assert spec.wandb.api_key_secret.key == "api-key"
    assert spec.wandb.mode is WandbMode.ONLINE
    assert spec.env[0].value_from.secret_key_ref.key == "k"
    d = spec.to_dict()
    assert d["restartPolicy"]["maxRestarts"] == 5
    assert d["wandb"]["apiKeySecret"] == {"name": "wandb", "key": "api-key"}
    assert d["env"][0]["valueFrom"] == {"secretKeyRef": {"name": "s", "key": "k"}}
    assert load_spec(d) == spec


@pytest.mark.parametrize("ici, dcn, slices", [
    ({"fsdp": -1}, {}, 1),
    ({"fsdp": -1, "tensor": 4}, {}, 1),
    ({"data": 2, "fsdp": 4, "context": 1, "tensor": 2, "expert": 1}, {}, 1),
    ({"fsdp": 16}, {"data": -1}, 4),
    ({"fsdp": -1}, {"data": 2, "fsdp": -1}, 4),
])
def test_valid_parallelism(root_schema, ici, dcn, slices):
    spec_dict = {**BASE, "slices": slices, "parallelism": {"ici": ici, "dcn": dcn}}
    spec = load_spec(spec_dict)
    assert {a.value: s for a, s in spec.parallelism.ici.items()} == ici
    assert all(isinstance(a, MeshAxis) for a in spec.parallelism.dcn)
    assert k8s.validate_object(root_schema, _job(spec_dict)) == []


def test_axis_sizes_in_mesh_order():
    spec = load_spec({**BASE, "slices": 2, "parallelism": {
        "ici": {"tensor": 4, "fsdp": -1}, "dcn": {"fsdp": 1, "data": -1}}})
    assert list(spec.parallelism.ici_sizes.items()) == [("fsdp", -1), ("tensor", 4)]
    assert list(spec.parallelism.dcn_sizes.items()) == [("data", -1), ("fsdp", 1)]


@pytest.mark.parametrize("slice_name", [
    "v6e-16", "v6e-8x16", "v5p-128", "v5p-4x4x4", "tpu7x-64", "tpu7x-4x4x20", "v4-8",
    "v5litepod-16", "v5e-16", "v6e-12",   # v6e-12 is well-formed; the operator refuses it
])
def test_slice_syntax_accepted(root_schema, slice_name):
    assert load_spec({**BASE, "slice": slice_name}).slice == slice_name
    assert k8s.validate_object(root_schema, _job({**BASE, "slice": slice_name})) == []


# (change to BASE, the field the model's error names, a word its message must contain)
INVALID = [
    ({"slice": "v9-8"}, "spec.slice", "v6e-16, tpu7x-64"),
    ({"slice": "v6e-"}, "spec.slice", "v6e-16, tpu7x-64"),
    ({"slice": "v6e-016"}, "spec.slice", "v6e-16, tpu7x-64"),
    ({"slice": "V6E-16"}, "spec.slice", "v6e-16, tpu7x-64"),
    ({"slice": "v5p-4x4x4x4"}, "spec.slice", "v6e-16, tpu7x-64"),
    ({"slice": ""}, "spec.slice", "v6e-16, tpu7x-64"),
    ({"slice": 16}, "spec.slice", "string"),
    ({"slices": 0}, "spec.slices", "greater than or equal to 1"),
    ({"slices": 5000}, "spec.slices", "less than or equal to 1024"),
    ({"slices": "two"}, "spec.slices", "integer"),
    ({"machineType": "CT6E standard"}, "spec.machineType", "pattern"),
    ({"image": ""}, "spec.image", "at least 1"),
    ({"image": "has space:1"}, "spec.image", "pattern"),
    ({"output": "s3://bucket/x"}, "spec.output", "gs://<bucket>"),
    ({"output": "gs://"}, "spec.output", "gs://<bucket>"),
    ({"output": "gs://UPPER/x"}, "spec.output", "gs://<bucket>"),
    ({"parallelism": {"ici": {"fsdp": -1, "tensor": -1}}}, "spec.parallelism.ici",
     "at most one axis may be -1"),
    ({"parallelism": {"ici": {"fsdp": 0}}}, "spec.parallelism.ici", "size 0"),
    ({"parallelism": {"ici": {"fsdp": -2}}}, "spec.parallelism.ici.fsdp", "greater than"),
    ({"parallelism": {"ici": {"pipeline": 2}}}, "spec.parallelism.ici.pipeline", "'fsdp'"),
    ({"parallelism": {"dcn": {"data": -1, "fsdp": -1}}}, "spec.parallelism.dcn",
     "at most one axis"),
    ({"parallelism": {"mesh": {"data": 1}}}, "spec.parallelism.mesh",
     "unknown field; spec.parallelism takes: ici, dcn"),
    ({"trainer": {"overrides": ["no-equals-sign"]}}, "spec.trainer.overrides[0]", "pattern"),
    ({"trainer": {"overrides": ["train.steps=1"], "command": ["python", "x.py"]}},
     "spec.trainer", "with command set"),
    ({"trainer": {"config": {"train": {"steps": 1}}, "command": ["run"]}}, "spec.trainer",
     "with command set"),
    ({"trainer": {"config": "model: {}"}}, "spec.trainer.config", "dictionary"),
    ({"data": {"kind": "text"}}, "spec.data", "path is required"),
    ({"data": {"kind": "synthetic", "path": "gs://bucket/x"}}, "spec.data", "kind is synthetic"),
    ({"data": {"kind": "parquet", "path": "/x"}}, "spec.data.kind", "synthetic"),
    ({"wandb": {"project": "p"}}, "spec.wandb", "apiKeySecret"),
    ({"wandb": {"project": "p", "apiKey": "abc"}}, "spec.wandb.apiKey", "unknown field"),
    ({"wandb": {"project": "p", "apiKeySecret": {"name": "w", "key": "k",
                                                 "namespace": "other"}}},
     "spec.wandb.apiKeySecret.namespace", "unknown field"),
    ({"wandb": {"project": "p", "apiKeySecret": {"name": "Not_A_Name", "key": "k"}}},
     "spec.wandb.apiKeySecret.name", "pattern"),
    ({"env": [{"name": "WANDB_API_KEY", "value": "abc"}]}, "spec.env[0]", "secret"),
    ({"env": [{"name": "TPUJOB_PROCESS_ID", "value": "1"}]}, "spec.env[0]", "operator sets"),
    ({"env": [{"name": "TPUJOB_FAULT_STEP", "value": "1"}]}, "spec.env[0]",
     "all but TPUJOB_HOST_REPORTS, TPUJOB_HOST_REPORT_INTERVAL_S"),
    ({"env": [{"name": "TPU_WORKER_ID", "value": "1"}]}, "spec.env[0]", "operator sets"),
    ({"env": [{"name": "MEGASCALE_NUM_SLICES", "value": "2"}]}, "spec.env[0]", "MEGASCALE_*"),
    ({"env": [{"name": "MEGASCALE_COORDINATOR_ADDRESS", "value": "x"}]}, "spec.env[0]",
     "operator sets"),
    ({"wandb": {"project": "p", "apiKeySecret": {"name": "w", "key": "k"}},
      "env": [{"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
     "spec.env", "from wandb.apiKeySecret"),
    ({"wandb": {"project": "p", "mode": "offline", "apiKeySecret": {"name": "w", "key": "k"}},
      "env": [{"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
     "spec.env", "remove it from env"),
    ({"env": [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.name"}}}]}, "spec.env[0]", "not both"),
    ({"env": [{"name": "A", "valueFrom": {}}]}, "spec.env[0].valueFrom", "exactly one of"),
    ({"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"},
                                          "secretKeyRef": {"name": "s", "key": "k"}}}]},
     "spec.env[0].valueFrom", "exactly one of"),
    ({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k",
                                                           "namespace": "kube-system"}}}]},
     "spec.env[0].valueFrom.secretKeyRef.namespace", "unknown field"),
    ({"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k",
                                                              "namespace": "kube-system"}}}]},
     "spec.env[0].valueFrom.configMapKeyRef.namespace", "unknown field"),
    ({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"},
                                          "value": "literal"}}]},
     "spec.env[0].valueFrom.value", "unknown field"),
    ({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"key": "k"}}}]},
     "spec.env[0].valueFrom.secretKeyRef.name", "Field required"),
    ({"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "Bad_Name", "key": "k"}}}]},
     "spec.env[0].valueFrom.configMapKeyRef.name", "pattern"),
    ({"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.containers"}}}]},
     "spec.env[0].valueFrom.fieldRef.fieldPath", "metadata.labels['<key>']"),
    ({"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name",
                                                       "apiVersion": "v2"}}}]},
     "spec.env[0].valueFrom.fieldRef.apiVersion", "v1"),
    ({"env": [{"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.gpu"}}}]},
     "spec.env[0].valueFrom.resourceFieldRef.resource", "requests.<resource>"),
    ({"env": [{"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu",
                                                               "divisor": "-1m"}}}]},
     "spec.env[0].valueFrom.resourceFieldRef.divisor", "must not be negative"),
    ({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, "spec.env",
     "duplicate"),
    ({"env": [{"name": "1A", "value": "1"}]}, "spec.env[0].name", "pattern"),
    ({"resources": {"limits": {"google.com/tpu": 4}}}, "spec.resources.limits",
     "google.com/tpu"),
    ({"resources": {"requests": {"memory": "lots"}}}, "spec.resources.requests.memory",
     "quantity"),
    ({"resources": {"requests": {"memory": "-16Gi"}}}, "spec.resources.requests.memory",
     "must not be negative"),
    ({"resources": {"limits": {"cpu": "-500m"}}}, "spec.resources.limits.cpu",
     "must not be negative"),
    ({"resources": {"limits": {"cpu": "-1"}}}, "spec.resources.limits.cpu",
     "must not be negative"),
    ({"scheduling": {"queueName": "Bad_Queue"}}, "spec.scheduling.queueName", "pattern"),
    ({"restartPolicy": {"maxRestarts": -1}}, "spec.restartPolicy.maxRestarts",
     "greater than or equal to 0"),
    ({"restartPolicy": {"retryableExitCodes": [0]}}, "spec.restartPolicy.retryableExitCodes[0]",
     "greater than or equal to 1"),
    ({"restartPolicy": {"onStall": "Panic"}}, "spec.restartPolicy.onStall", "Restart"),
    ({"stallTimeoutSeconds": -5}, "spec.stallTimeoutSeconds", "greater than or equal to 0"),
    ({"suspend": "maybe"}, "spec.suspend", "boolean"),
    ({"unknownField": 1}, "spec.unknownField", "unknown field"),
    ({"trainer": {"command": ["python3", "t.py"], "zero": {"stage": 3, "parameters": 8}}},
     "spec.trainer", "zero describes a PyTorch program's model states"),
    ({"trainer": {"launcher": "torchrun", "command": ["python3", "t.py"],
                  "zero": {"stage": 2, "parameters": 8, "offload": "parameters"}}},
     "spec.trainer.zero", "offload parameters needs ZeRO stage 3"),
    ({"trainer": {"launcher": "torchrun", "command": ["python3", "t.py"],
                  "zero": {"stage": 0, "parameters": 8, "offload": "optimizer"}}},
     "spec.trainer.zero", "offload needs a ZeRO stage"),
    ({"trainer": {"launcher": "torchrun", "command": ["python3", "t.py"],
                  "zero": {"stage": 1}}}, "spec.trainer.zero.parameters", "required"),
]


@pytest.mark.parametrize("change, field, words", INVALID)
def test_invalid_spec_names_field(change, field, words):
    with pytest.raises(InvalidJobError) as err:
        load_job(_job({**BASE, **change}))
    matching = [p for p in err.value.problems if p.startswith(f"{field}:")]
    assert matching, err.value.problems
    assert any(words in p for p in matching), matching


def _crd_can_see(change) -> bool:
    # trainer.config is free-form in the CRD by design (the operator validates it with the
    # trainer's schema), so "config together with command" is the model's alone to refuse.
    trainer = change.get("trainer", {})
    return not ("config" in trainer and "command" in trainer)


@pytest.mark.parametrize("change, field, words", [c for c in INVALID if _crd_can_see(c[0])])
def test_crd_refuses_what_the_model_refuses(root_schema, change, field, words):
    errors = k8s.validate_object(root_schema, _job({**BASE, **change}))
    assert errors, f"the CRD accepts {change}"
    crd_field = field.removeprefix("spec.").split("[")[0].split(".")[0]
    assert any(crd_field in e for e in errors), errors


def test_missing_required_fields_are_named():
    with pytest.raises(InvalidJobError) as err:
        load_job(_job({}))
    problems = err.value.problems
    for field in ("spec.slice", "spec.image", "spec.output"):
        assert any(p.startswith(f"{field}: Field required") for p in problems), problems


def test_load_job_checks_kind_and_version():
    bad = {**_job(BASE), "apiVersion": "tpujob.dev/v1", "kind": "Job"}
    with pytest.raises(InvalidJobError) as err:
        load_job(bad)
    assert any(p.startswith("apiVersion:") for p in err.value.problems)
    assert any(p.startswith("kind:") for p in err.value.problems)


@pytest.mark.parametrize("left_out, says", [
    ("apiVersion", "add `apiVersion: tpujob.dev/v1alpha1`"),
    ("kind", "add `kind: TpuTrainingJob`"),
])
def test_load_job_requires_kind_and_version(left_out, says):
    job = _job(BASE)
    del job[left_out]
    with pytest.raises(InvalidJobError) as err:
        load_job(job)
    assert err.value.problems == [f"{left_out}: required: {says} to the manifest"]


@pytest.mark.parametrize("value_from", [
    {"secretKeyRef": {"name": "s", "key": "k"}},
    {"secretKeyRef": {"name": "s.x", "key": "api.key", "optional": True}},
    {"configMapKeyRef": {"name": "c", "key": "k", "optional": False}},
    {"fieldRef": {"fieldPath": "metadata.name"}},
    {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']",
                  "apiVersion": "v1"}},
    {"fieldRef": {"fieldPath": "status.podIP"}},
    {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
    {"resourceFieldRef": {"resource": "requests.cpu", "containerName": "trainer",
                          "divisor": 1}},
])
def test_env_value_from_round_trips_as_written(root_schema, value_from):
    spec_dict = {**BASE, "env": [{"name": "A", "valueFrom": value_from}]}
    spec = load_spec(spec_dict)
    assert spec.to_dict()["env"] == [{"name": "A", "valueFrom": value_from}]
    assert spec.model_dump(by_alias=True, mode="json")["env"][0]["valueFrom"] == value_from
    assert k8s.validate_object(root_schema, _job(spec_dict)) == []


@pytest.mark.parametrize("change", [
    {"env": [{"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
    {"wandb": {"project": "p", "mode": "offline"},
     "env": [{"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
    {"env": [{"name": "MEGASCALE", "value": "1"}, {"name": "XLA_FLAGS", "value": "--x"}]},
    # The trainer's own switches are a person's to set (docs/trainer.md).
    {"env": [{"name": name, "value": "1"} for name in PERSON_SET]},
])
def test_env_the_operator_leaves_alone_is_accepted(root_schema, change):
    assert [e.name for e in load_spec({**BASE, **change}).env] == [
        e["name"] for e in change["env"]]
    assert k8s.validate_object(root_schema, _job({**BASE, **change})) == []


def test_custom_trainer():
    spec = load_spec({**BASE, "trainer": {"command": ["python3", "-m", "MaxText.train"],
                                          "args": ["base.yml", "steps=10"]}})
    assert spec.is_custom_trainer
    assert spec.trainer.args == ["base.yml", "steps=10"]


def test_data_and_quantities():
    spec = load_spec({**BASE, "data": {"kind": "jsonl", "path": "gs://bucket/data/*.jsonl"},
                      "resources": {"requests": {"memory": "16Gi", "cpu": 8},
                                    "limits": {"cpu": "500m"}}})
    assert spec.data.kind is DataKind.JSONL
    assert spec.resources.requests == {"memory": "16Gi", "cpu": 8}
    assert spec.to_dict()["resources"]["limits"] == {"cpu": "500m"}


def test_load_spec_takes_read_only_mappings():
    from types import MappingProxyType

    view = MappingProxyType({**BASE, "parallelism": MappingProxyType(
        {"ici": MappingProxyType({"fsdp": -1})})})
    assert load_spec(view).parallelism.ici_sizes == {"fsdp": -1}


def test_spec_is_frozen():
    spec = load_spec(BASE)
    with pytest.raises(Exception, match="frozen"):
        spec.slices = 2
    assert isinstance(spec, TpuTrainingJobSpec)
