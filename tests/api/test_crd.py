"""The generated CRD: identity, structural schema, defaults that agree with the models, CEL rules
that compile and do what their messages say, printer columns, and the committed file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, Field

from tests.api import k8s_schema as k8s
from tpujob.api import crd as crd_module
from tpujob.api import load_spec
from tpujob.api.crd import build_crd, render_crd_yaml
from tpujob.api.reference import BEGIN, END, build_reference, replace_region
from tpujob.api.schema import SchemaError, build_structural_schema

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "manifests" / "crd.yaml"
DOCS_FILE = REPO / "docs" / "api.md"
MINIMAL_SPEC = {"slice": "v6e-16", "image": "trainer:1", "output": "gs://bucket/run"}


@pytest.fixture(scope="module")
def crd():
    return build_crd()


@pytest.fixture(scope="module")
def version(crd):
    return crd["spec"]["versions"][0]


@pytest.fixture(scope="module")
def root_schema(version):
    return version["schema"]["openAPIV3Schema"]


@pytest.fixture(scope="module")
def spec_schema(root_schema):
    return root_schema["properties"]["spec"]


def test_identity(crd, version):
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == "tputrainingjobs.tpujob.dev"
    spec = crd["spec"]
    assert spec["group"] == "tpujob.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["plural"] == "tputrainingjobs"
    assert spec["names"]["kind"] == "TpuTrainingJob"
    assert spec["names"]["shortNames"] == ["tpujob", "tpujobs", "tj"]
    assert [v["name"] for v in spec["versions"]] == ["v1alpha1"]
    assert version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}


def test_schema_is_structural(root_schema):
    assert k8s.structural_problems(root_schema) == []


@pytest.mark.parametrize("bad, problem", [
    ({"type": "object", "properties": {"a": {"description": "untyped"}}}, ".a: no type"),
    ({"type": "object", "properties": {"a": {"$ref": "#/x", "type": "string"}}}, "$ref"),
    ({"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
     "properties and additionalProperties together"),
    ({"type": "string", "anyOf": [{"type": "string"}, {"type": "integer"}]},
     "anyOf branch sets type"),
    ({"type": "object", "additionalProperties": True}, "must be a schema"),
    ({"type": "string", "default": None}, "default of null"),
    ({"type": "array"}, "array needs items"),
    ({"type": "number", "exclusiveMinimum": 0}, "must be a boolean"),
    ({"type": "object", "propertyNames": {"enum": ["a"]}}, "unknown keyword 'propertyNames'"),
])
def test_structural_checker_catches(bad, problem):
    problems = k8s.structural_problems(bad)
    assert any(problem in p for p in problems), problems


def test_top_level_shape(root_schema):
    assert root_schema["required"] == ["spec"]
    assert set(root_schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert set(root_schema["properties"]["spec"]["required"]) == {"slice", "image", "output"}
    trainer_config = root_schema["properties"]["spec"]["properties"]["trainer"]["properties"][
        "config"]
    assert trainer_config == {**trainer_config, "type": "object", k8s.PRESERVE: True}
    assert {"model", "train", "checkpoint", "output"} <= set(trainer_config["properties"])


# (trainer.config, an error naming this field, or None when the CRD lets it through)
TRAINER_CONFIGS = [
    ({"train": {"steps": -1}}, "spec.trainer.config.train.steps"),
    ({"train": {"steps": "many"}}, "spec.trainer.config.train.steps"),
    ({"model": {"rope_theta": 0}}, "spec.trainer.config.model.rope_theta"),
    ({"model": {"remat": "sometimes"}}, "spec.trainer.config.model.remat"),
    ({"checkpoint": {"every": 0}}, "spec.trainer.config.checkpoint.every"),
    ({"train": {"steps": 10}, "model": {"moe": {"mlp_dim": None}}}, None),
    # Unknown keys reach the operator, which names them with the trainer's own schema.
    ({"train": {"stepz": 10}, "extra_section": {"a": 1}}, None),
    # Cross-field rules are the trainer schema's alone (checked by the operator).
    ({"model": {"n_heads": 4, "n_kv_heads": 3}}, None),
]


@pytest.mark.parametrize("config, field", TRAINER_CONFIGS)
def test_trainer_config_known_keys_checked_unknown_kept(root_schema, config, field):
    job = _job({**MINIMAL_SPEC, "trainer": {"config": config}})
    errors = k8s.validate_object(root_schema, job)
    if field is None:
        assert errors == []
        stored = k8s.apply_defaults(root_schema, job)
        assert stored["spec"]["trainer"]["config"] == config, "no defaults inside the config"
    else:
        assert any(e.startswith(f"{field}:") for e in errors), errors


@pytest.mark.parametrize("path, key, expected", [
    (".slice", "pattern", r"^((v4|v5e|v5litepod|v5p|v6e|tpu7x)-"),
    (".slices", "default", 1),
    (".slices", "minimum", 1),
    (".stallTimeoutSeconds", "default", 1800),
    (".suspend", "default", False),
    (".restartPolicy.maxRestarts", "default", 3),
    (".restartPolicy.retryableExitCodes", "maxItems", 64),  # its default is the launcher's
    (".restartPolicy.onStall", "enum", ["Restart", "Fail", "Ignore"]),
    (".data.kind", "enum", ["synthetic", "text", "jsonl", "tokens"]),
    (".wandb.mode", "enum", ["online", "offline"]),
    (".parallelism.ici", "maxProperties", 5),
    (".env", "x-kubernetes-list-type", "map"),
])
def test_spec_schema_details(spec_schema, path, key, expected):
    node = k8s.schema_at(spec_schema, path)
    assert node is not None, path
    if key == "pattern":
        assert node[key].startswith(expected)
    else:
        assert node[key] == expected


def test_status_schema(root_schema):
    status = root_schema["properties"]["status"]
    assert status["properties"]["phase"]["enum"] == [
        "Pending", "Queued", "Starting", "Running", "Restarting", "Succeeded", "Failed",
        "Invalid", "Suspended"]
    conditions = status["properties"]["conditions"]
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(conditions["items"]["required"]) == {"type", "status", "reason",
                                                    "lastTransitionTime"}
    assert conditions["items"]["properties"]["lastTransitionTime"]["format"] == "date-time"
    progress = set(status["properties"]["progress"]["properties"])
    assert progress == {"step", "totalSteps", "loss", "stepTimeSeconds",
                        "tokensPerSecondPerDevice", "tflopsPerDevice", "mfu",
                        "lastCheckpointStep", "lastUpdateTime", "lastStepTime", "display",
                        "trainerPhase"}
    assert {"hosts", "chips", "devices"} <= set(status["properties"]["slice"]["properties"])


def test_descriptions_everywhere(spec_schema):
    def undocumented(node, path):
        missing = [] if node.get("description") else [path]
        for name, child in node.get("properties", {}).items():
            missing += undocumented(child, f"{path}.{name}")
        return missing
    assert undocumented(spec_schema, "spec") == []


@pytest.mark.parametrize("spec", [
    MINIMAL_SPEC,
    {**MINIMAL_SPEC, "restartPolicy": {"maxRestarts": 7}, "data": {"kind": "text", "path": "/d"}},
    {**MINIMAL_SPEC, "wandb": {"project": "p", "mode": "offline"}},
])
def test_crd_defaults_equal_model_defaults(spec_schema, spec):
    assert k8s.apply_defaults(spec_schema, spec) == load_spec(spec).to_dict()


def test_every_cel_rule_compiles(root_schema):
    rules = k8s.all_rules(root_schema)
    assert len(rules) >= 12
    for path, entry in rules:
        assert entry["message"], path
        k8s.cel_program(entry["rule"])


def test_immutable_fields_have_transition_rules(spec_schema):
    rules = {path: entry["rule"] for path, entry in k8s.all_rules(spec_schema)
             if k8s.is_transition_rule(entry["rule"])}
    assert rules[".slice"] == "self == oldSelf"
    assert rules[".slices"] == "self == oldSelf"
    assert "machineType" in rules[""]


def _job(spec):
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "j"}, "spec": spec}


# (change to a valid spec, the message that refuses it, or None when allowed)
UPDATES = [
    ({"slice": "v6e-32"}, "spec.slice is immutable"),
    ({"slices": 2}, "spec.slices is immutable"),
    ({"machineType": "ct6e-standard-8t"}, "spec.machineType is immutable"),
    ({"suspend": True}, None),
    ({"image": "trainer:2"}, None),
    ({"restartPolicy": {"maxRestarts": 9}}, None),
]


@pytest.mark.parametrize("change, message", UPDATES)
def test_update_rules(root_schema, change, message):
    old = _job(MINIMAL_SPEC)
    new = _job({**MINIMAL_SPEC, **change})
    assert k8s.validate_object(root_schema, new) == []
    errors = k8s.validate_object(root_schema, new, old=old)
    if message is None:
        assert errors == []
    else:
        assert any(message in e for e in errors), errors


def test_removing_machine_type_is_refused(root_schema):
    old = _job({**MINIMAL_SPEC, "machineType": "ct6e-standard-4t"})
    errors = k8s.validate_object(root_schema, _job(MINIMAL_SPEC), old=old)
    assert any("spec.machineType is immutable" in e for e in errors), errors


def test_printer_columns(version):
    columns = version["additionalPrinterColumns"]
    default = [c for c in columns if not c.get("priority")]
    # kubectl adds NAME itself and upper-cases the rest.
    assert ["NAME"] + [c["name"].upper() for c in default] == [
        "NAME", "SLICE", "HOSTS", "PHASE", "STEP", "LAST STEP", "LOSS", "TOK/S/DEV", "MFU",
        "RESTARTS",
        "REASON", "GOODPUT", "AGE"]


def test_printer_columns_resolve(version, root_schema):
    from tests.api.test_status_models import sample_status

    obj = _job(MINIMAL_SPEC)
    obj["metadata"]["creationTimestamp"] = "2026-11-21T04:00:00Z"
    obj["status"] = sample_status().to_dict()
    obj = k8s.apply_defaults(root_schema, obj)   # as read back from the apiserver
    python_type = {"integer": int, "number": (int, float), "string": str, "date": str}
    for column in version["additionalPrinterColumns"]:
        path = column["jsonPath"]
        value = k8s.resolve_json_path(obj, path)
        assert value is not None, f"{column['name']}: {path} resolves to nothing"
        assert isinstance(value, python_type[column["type"]]), (column, value)
        if not path.startswith(".metadata."):
            node = k8s.schema_at(root_schema, path)
            assert node is not None, path
            assert node["type"] == {"date": "string"}.get(column["type"], column["type"])


def test_committed_file_is_current():
    assert CRD_FILE.exists(), "manifests/crd.yaml is missing: run `python -m tpujob.api.crd`"
    assert CRD_FILE.read_text() == render_crd_yaml(), (
        "manifests/crd.yaml differs from the API models: run `python -m tpujob.api.crd` from "
        "the repository root and commit the result")


def test_rendered_yaml_round_trips():
    assert yaml.safe_load(render_crd_yaml()) == build_crd()


def test_committed_docs_reference_is_current():
    text = DOCS_FILE.read_text()
    assert text == crd_module.render_docs(text), (
        "docs/api.md's field reference differs from the API models: run "
        "`python -m tpujob.api.crd` from the repository root and commit the result")


def test_docs_reference_lists_every_spec_field(root_schema):
    reference = build_reference(root_schema)
    for path in ("spec.slice", "spec.parallelism.ici", "spec.restartPolicy.maxRestarts",
                 "spec.wandb.apiKeySecret.key", "spec.env[].valueFrom", "status.progress.mfu"):
        assert f"| `{path}` |" in reference, path
    assert "&lt;generation&gt;-&lt;size&gt;" in reference
    with pytest.raises(ValueError, match="markers"):
        replace_region("no markers here", reference)


def test_generator_writes_and_checks(tmp_path, capsys):
    out = tmp_path / "crd.yaml"
    docs = tmp_path / "api.md"
    docs.write_text(f"intro\n{BEGIN}\nstale\n{END}\noutro\n")
    args = ["--output", str(out), "--docs", str(docs)]
    assert crd_module.main(["--check", *args]) == 1
    err = capsys.readouterr().err
    assert f"{out} is out of date: run `python -m tpujob.api.crd`" in err
    assert f"{docs} is out of date" in err
    assert crd_module.main(args) == 0
    assert out.read_text() == render_crd_yaml()
    assert docs.read_text().startswith("intro\n") and docs.read_text().endswith("outro\n")
    assert "| `spec.slice` |" in docs.read_text() and "stale" not in docs.read_text()
    assert crd_module.main(["--check", *args]) == 0
    out.write_text(out.read_text().replace("tpujob.dev", "example.com"))
    assert crd_module.main(["--check", *args]) == 1


class _Union(BaseModel):
    value: int | str = Field(..., description="an untagged union")


class _Nested(BaseModel):
    inner: dict[str, list[_Union]] = Field(default_factory=dict)


@pytest.mark.parametrize("model, where", [(_Union, "_Union.value"),
                                          (_Nested, "_Nested.inner.*[].value")])
def test_converter_refuses_non_structural_models(model, where):
    with pytest.raises(SchemaError, match=re.escape(f"{where}: anyOf")):
        build_structural_schema(model)
