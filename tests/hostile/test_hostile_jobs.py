"""Hostile TpuTrainingJobs on the operator's pure path (`validate_job`, then `build_children` for a
valid verdict, as `tpujob render` and the operator call them): valid jobs with hostile text,
near-valid jobs with one field broken, junk.

Properties: validation never raises; an invalid verdict names its field; a valid one renders
objects Kubernetes can take, in the job's namespace; a secret value written where a key would go
is refused without being echoed; a secret reference stays in the job's namespace.

The table-driven tests at the end pin the bugs these properties found, now fixed."""

from __future__ import annotations

import argparse
import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.hostile.strategies import (
    TINY_CONFIG,
    any_job,
    near_valid_jobs,
    secret_token,
    valid_jobs,
)
from tpujob.builders.jobset import build_children
from tpujob.validation import validate_job

pytestmark = pytest.mark.unit

# Bounded: the whole file stays well under 30 s on a loaded 2-core machine.
PURE = settings(max_examples=150, deadline=2000, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NAMESPACE = "hostile"
UID = "0f0e0d0c-0000-4000-a000-000000000001"
REFERENCE_KINDS = ("secretKeyRef", "configMapKeyRef", "secretRef", "configMapRef")
PLANTED_LITERAL = "tpujob-planted-literal"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

validate_job({})  # import the trainer's config schema before any deadline counts


def _as_operator_sees_it(obj: Any) -> Any:
    """`obj` with the namespace and uid the API server (or `tpujob render`) gives it."""
    obj = copy.deepcopy(obj)
    if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
        obj["metadata"].setdefault("namespace", NAMESPACE)
        obj["metadata"].setdefault("uid", UID)
    return obj


def _walk(value: Any) -> Iterator[tuple[Any, Any]]:
    """Every (key, value) pair of every mapping inside `value`."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


def _containers(children: list[dict]) -> list[dict]:
    return [c for _, value in _walk(children) if isinstance(value, dict)
            for c in value.get("containers") or [] if isinstance(c, dict)]


def _check(obj: Any) -> None:
    """The properties of the pure path for one object."""
    doc = _as_operator_sees_it(obj)
    verdict = validate_job(doc)
    if not verdict.valid:
        event(f"refused: {verdict.reason}")
        assert isinstance(verdict.field, str) and verdict.field, verdict
        assert verdict.field in verdict.message, verdict
        assert re.fullmatch(r"[A-Z][A-Za-z]+", verdict.reason), verdict
        return
    event("valid")
    assert verdict.job is not None and verdict.plan is not None
    children = build_children(doc, verdict.job.spec, verdict.plan)
    json.dumps(children, allow_nan=False)  # sendable to an API server
    yaml.safe_dump_all(children)  # printable by `tpujob render`
    for child in children:
        meta = child["metadata"]
        assert meta["namespace"] == NAMESPACE
        assert isinstance(meta["name"], str) and DNS_LABEL.match(meta["name"])
        assert [r["uid"] for r in meta["ownerReferences"]] == [UID]
    for key, value in _walk(children):
        if key in REFERENCE_KINDS and isinstance(value, dict):
            assert "namespace" not in value
    for container in _containers(children):
        names = [e["name"] for e in container["env"]]
        assert len(names) == len(set(names)), names


@PURE
@given(any_job)
def test_validation_never_raises_and_every_refusal_names_its_field(obj: Any) -> None:
    _check(obj)


@PURE
@given(near_valid_jobs())
def test_near_valid_jobs_are_refused_by_field_or_rendered_cleanly(obj: Any) -> None:
    _check(obj)


def _base_job() -> dict[str, Any]:
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "j", "namespace": NAMESPACE, "uid": UID},
            "spec": {"slice": "v6e-8", "image": "trainer:1", "output": "gs://bucket/run",
                     "trainer": {"config": copy.deepcopy(TINY_CONFIG)}}}


def _plant(where: str, token: str) -> dict[str, Any]:
    """A job with `token` written where a secret value would go, `where`."""
    job = _base_job()
    spec, config = job["spec"], job["spec"]["trainer"]["config"]
    wandb = {"project": "p", "apiKeySecret": {"name": "wandb", "key": "api-key"}}
    if where == "env WANDB_API_KEY value":
        spec["env"] = [{"name": "WANDB_API_KEY", "value": token}]
    elif where.startswith("env ") and where.endswith(" literal"):
        spec["env"] = [{"name": where.split()[1], "value": token}]
    elif where == "env WANDB_API_KEY value and valueFrom":
        spec["env"] = [{"name": "WANDB_API_KEY", "value": token, "valueFrom": {
            "secretKeyRef": {"name": "wandb", "key": "api-key"}}}]
    elif where.startswith("trainer config "):
        config["metrics"] = {"wandb": {"project": "p", where.rsplit(" ", 1)[1]: token}}
    elif where.startswith("override "):
        spec["trainer"]["overrides"] = [f"{where.rsplit(' ', 1)[1]}={token}"]
    elif where.startswith("wandb "):
        spec["wandb"] = wandb | {where.rsplit(" ", 1)[1]: token}
    elif where.startswith("apiKeySecret "):
        spec["wandb"] = wandb
        wandb["apiKeySecret"] = wandb["apiKeySecret"] | {where.rsplit(" ", 1)[1]: token}
    return job


PLANTED = ("env WANDB_API_KEY value", "env WANDB_API_KEY value and valueFrom",
           "trainer config api_key", "trainer config apiKey", "trainer config key",
           "override metrics.wandb.api_key", "override metrics.wandb.key", "override api_key",
           "wandb apiKey", "wandb key", "wandb token", "apiKeySecret value",
           "apiKeySecret data", "apiKeySecret stringData", "env HF_TOKEN literal",
           "env OPENAI_API_KEY literal", "env AWS_SECRET_ACCESS_KEY literal",
           "env DB_PASSWORD literal")


@PURE
@given(st.sampled_from(PLANTED), secret_token)
def test_a_secret_written_into_the_job_is_refused_and_never_echoed(where: str,
                                                                   token: str) -> None:
    verdict = validate_job(_plant(where, token))
    assert not verdict.valid, where
    assert verdict.field and verdict.field in verdict.message
    # The message goes into the job's status and Events, which anyone who can read the job
    # can read.
    assert token not in verdict.message and token not in (verdict.field or "")


@PURE
@given(valid_jobs(), secret_token)
def test_secret_references_render_as_references_only(obj: dict, token: str) -> None:
    obj = _as_operator_sees_it(obj)
    obj["spec"]["wandb"] = {"project": "p", "apiKeySecret": {"name": "wandb", "key": "api-key"}}
    obj["spec"]["env"] = [e for e in obj["spec"]["env"] if "valueFrom" not in e]
    # The secret's value reaches the operator with the job wherever the API lets the job carry
    # free text that is not the spec: `kubectl apply` keeps the applied object (here one that
    # once held the key) in an annotation, and a status written by anything. None of it may be
    # copied into a child.
    leaked = json.dumps({"spec": {"env": [{"name": "WANDB_API_KEY", "value": token}]}})
    obj["metadata"].setdefault("annotations", {})[LAST_APPLIED] = leaked
    obj["status"] = {"phase": "Running", "conditions": [{
        "type": "Ready", "status": "True", "reason": "Up", "message": token,
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    verdict = validate_job(obj)
    if not verdict.valid:
        return
    children = build_children(obj, verdict.job.spec, verdict.plan)
    for container in _containers(children):
        keys = [e for e in container["env"] if e["name"] == "WANDB_API_KEY"]
        assert keys == [{"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {
            "name": "wandb", "key": "api-key"}}}]
    config_maps = [c for c in children if c["kind"] == "ConfigMap"]
    for config_map in config_maps:
        assert "api_key" not in config_map["data"]["trainer.yaml"]
    assert token not in json.dumps(children)


@pytest.mark.parametrize("secret_ref", [
    {"name": "wandb", "key": "api-key", "namespace": "kube-system"},
])
def test_the_wandb_key_secret_cannot_be_in_another_namespace(secret_ref: dict) -> None:
    job = _base_job()
    job["spec"]["wandb"] = {"project": "p", "apiKeySecret": secret_ref}
    verdict = validate_job(job)
    assert not verdict.valid
    assert verdict.field == "spec.wandb.apiKeySecret.namespace"


# -- bugs found by the tests above, in code these tests do not own ------------------------------

@pytest.mark.parametrize("value", ["2001-02-30", "9" * 5000, "!!bool x", "!!timestamp x",
                                   "!!int x", "[" * 1000])
def test_override_values_yaml_cannot_read_are_refused(value: str) -> None:
    job = _base_job()
    job["spec"]["trainer"]["overrides"] = [f"train.steps={value}"]
    verdict = validate_job(job)
    assert not verdict.valid and verdict.field == "spec.trainer.overrides[0]"


@pytest.mark.parametrize("name", ["(no metadata)", "(no name)", None, 5, "", "ジョブ", "a b",
                                  "UPPER", "a;rm -rf /", "-x"])
def test_job_names_kubernetes_refuses_are_refused(name: Any) -> None:
    job = _base_job()
    if name == "(no metadata)":
        del job["metadata"]
    elif name == "(no name)":
        del job["metadata"]["name"]
    else:
        job["metadata"]["name"] = name
    verdict = validate_job(job)
    if verdict.valid:
        build_children(job, verdict.job.spec, verdict.plan)
    assert not verdict.valid and verdict.field == "metadata.name"


@pytest.mark.parametrize("left_out", ["apiVersion", "kind"])
def test_a_job_without_api_version_or_kind_is_refused_or_rendered(left_out: str) -> None:
    job = _base_job()
    del job[left_out]
    verdict = validate_job(job)
    if verdict.valid:
        children = build_children(job, verdict.job.spec, verdict.plan)
        assert children[-1]["metadata"]["ownerReferences"][0][left_out]
    else:
        assert verdict.field == left_out


@pytest.mark.parametrize("value_from", [
    {"secretKeyRef": {"name": "s", "key": "k", "namespace": "kube-system"}},
    {"configMapKeyRef": {"name": "c", "key": "k", "namespace": "kube-system"}},
    {"secretKeyRef": {"name": "s", "key": "k"}, "value": PLANTED_LITERAL},
])
def test_env_value_from_cannot_leave_the_namespace_or_carry_literals(value_from: dict) -> None:
    job = _base_job()
    job["spec"]["env"] = [{"name": "FROM_SECRET", "valueFrom": value_from}]
    verdict = validate_job(job)
    if verdict.valid:
        rendered = json.dumps(build_children(job, verdict.job.spec, verdict.plan))
        assert "kube-system" not in rendered and PLANTED_LITERAL not in rendered
    else:
        assert verdict.field.startswith("spec.env[0].valueFrom")


@pytest.mark.parametrize("name, slices, wandb", [
    ("MEGASCALE_NUM_SLICES", 2, False), ("MEGASCALE_COORDINATOR_ADDRESS", 2, False),
    ("WANDB_API_KEY", 1, True),
])
def test_user_env_cannot_shadow_what_the_operator_sets(name: str, slices: int,
                                                       wandb: bool) -> None:
    job = _base_job()
    job["spec"]["slices"] = slices
    job["spec"]["env"] = [{"name": name, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    if wandb:
        job["spec"]["wandb"] = {"project": "p", "apiKeySecret": {"name": "w", "key": "k"}}
    verdict = validate_job(job)
    if verdict.valid:
        for container in _containers(build_children(job, verdict.job.spec, verdict.plan)):
            names = [e["name"] for e in container["env"]]
            assert len(names) == len(set(names)), names


@pytest.mark.parametrize("quantity", ["-1", "-16Gi", "-500m"])
def test_negative_quantities_are_refused(quantity: str) -> None:
    job = _base_job()
    job["spec"]["resources"] = {"requests": {"memory": quantity}}
    verdict = validate_job(job)
    assert not verdict.valid and verdict.field.startswith("spec.resources.requests")


@pytest.mark.parametrize("metadata", [None, [], "x"])
def test_render_refuses_metadata_that_is_not_a_mapping(tmp_path, metadata: Any) -> None:
    from tpujob.cli import render_cmd

    job = _base_job()
    job["metadata"] = metadata
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert render_cmd.run(argparse.Namespace(file=str(path), namespace=None)) == 1
