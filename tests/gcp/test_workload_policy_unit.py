"""The pure parts: which slices need a workload policy, the body inserted, the settings, and
the shape of the error hierarchy the operator's handlers rely on."""

from __future__ import annotations

import argparse
import re

import pytest

import tpujob.gcp as gcp
from tpujob.gcp import (
    DEFAULT_BASE_URL,
    ComputeError,
    InvalidRequest,
    NoAuth,
    WorkloadPolicySettings,
    WorkloadPolicySettingsError,
    WorkloadPolicySpec,
    build_workload_policy,
    plan_workload_policy,
)
from tpujob_plan.slice_plan import plan_slice

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("slice_name", "expected"), [
    ("tpu7x-64", WorkloadPolicySpec("tpu7x-64-2x4x4-placement-policy", "2x4x4")),
    ("tpu7x-16", WorkloadPolicySpec("tpu7x-16-2x2x2-placement-policy", "2x2x2")),
    ("tpu7x-128", WorkloadPolicySpec("tpu7x-128-4x4x4-placement-policy", "4x4x4")),
    # The topology form names the same slice, so the same (shared) policy.
    ("tpu7x-4x4x4", WorkloadPolicySpec("tpu7x-128-4x4x4-placement-policy", "4x4x4")),
    ("tpu7x-8", None),      # one host: no policy
    ("tpu7x-2", None),
    ("v6e-16", None),       # other generations use compact placement
    ("v5p-128", None),
])
def test_plan_workload_policy(slice_name, expected):
    assert plan_workload_policy(plan_slice(slice_name)) == expected


@pytest.mark.parametrize(("name", "topology", "expected"), [
    ("tpu7x-64-2x4x4-placement-policy", "2x4x4", {
        "name": "tpu7x-64-2x4x4-placement-policy",
        "description": "Placement of TPU slices with topology 2x4x4; managed-by=tpujob; "
                       "shared by jobs and node pools, never deleted by tpujob",
        "workloadPolicy": {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x4x4"},
    }),
    ("tpu7x-18432-16x24x24-placement-policy", "16x24x24", {
        "name": "tpu7x-18432-16x24x24-placement-policy",
        "description": "Placement of TPU slices with topology 16x24x24; managed-by=tpujob; "
                       "shared by jobs and node pools, never deleted by tpujob",
        "workloadPolicy": {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "16x24x24"},
    }),
])
def test_build_workload_policy(name, topology, expected):
    assert build_workload_policy(name, topology) == expected


def test_body_has_only_fields_the_compute_api_knows():
    # ResourcePolicy (compute v1) has no `labels`; the managed-by marker is in the description.
    body = build_workload_policy("tpu7x-64-2x4x4-placement-policy", "2x4x4")
    assert set(body) == {"name", "description", "workloadPolicy"}
    assert "managed-by=tpujob" in body["description"]


@pytest.mark.parametrize(("name", "topology", "fragment"), [
    ("Tpu7x-64-2x4x4-placement-policy", "2x4x4", "not a valid Compute Engine name"),
    ("7x-policy", "2x4x4", "not a valid Compute Engine name"),
    ("policy-", "2x4x4", "not a valid Compute Engine name"),
    ("p" * 64, "2x4x4", "not a valid Compute Engine name"),
    ("tpu7x-64-placement-policy", "2x4", None),    # 2-D topologies are topologies too
    ("tpu7x-64-placement-policy", "2-4-4", "is not a TPU topology"),
    ("tpu7x-64-placement-policy", "0x4x4", "is not a TPU topology"),
    ("tpu7x-64-placement-policy", "", "is not a TPU topology"),
])
def test_build_refuses_bad_names_and_topologies(name, topology, fragment):
    if fragment is None:
        build_workload_policy(name, topology)
        return
    with pytest.raises(InvalidRequest, match=fragment) as info:
        build_workload_policy(name, topology)
    assert info.value.reason == "WorkloadPolicyInvalid" and not info.value.retryable


# --- settings ------------------------------------------------------------------------------

def test_settings_are_off_by_default():
    settings = WorkloadPolicySettings()
    assert settings.enabled is False and settings.base_url == DEFAULT_BASE_URL


@pytest.mark.parametrize(("kwargs", "field", "fragment"), [
    ({"enabled": True, "region": "us-central1"}, "project", "--gcp-project"),
    ({"enabled": True, "project": "tpu-project"}, "region", "--gcp-region"),
    ({"enabled": True}, "project", "--gcp-project"),
    ({"region": "us-central1-a"}, "region", "is a zone.*use --gcp-region us-central1"),
    ({"region": "Central"}, "region", "not a Compute Engine region"),
    ({"project": "My Project"}, "project", "not a Google Cloud project id"),
    ({"auth": "none"}, "auth", "local Compute stand-in"),
    ({"auth": "token"}, "auth", "adc, none"),
    ({"base_url": "http://proxy.internal/compute/v1"}, "base_url", "plain HTTP"),
    ({"base_url": "compute.googleapis.com"}, "base_url", "http:// or https://"),
    ({"max_attempts": 0}, "max_attempts", "at least 1"),
])
def test_settings_errors_name_the_setting(kwargs, field, fragment):
    with pytest.raises(WorkloadPolicySettingsError, match=fragment) as info:
        WorkloadPolicySettings(**kwargs)
    assert info.value.field == field


def test_settings_accept_domain_scoped_projects_and_stand_in_urls():
    WorkloadPolicySettings(enabled=True, project="example.com:tpu-project", region="us-east5")
    settings = WorkloadPolicySettings(enabled=True, project="tpu-project", region="us-central1",
                                      base_url="http://127.0.0.1:8089/compute/v1", auth="none")
    client = settings.build_client()
    assert isinstance(client.auth, NoAuth)
    assert client.base_url == "http://127.0.0.1:8089/compute/v1"


@pytest.mark.parametrize(("argv", "expected"), [
    ([], WorkloadPolicySettings()),
    (["--workload-policies", "--gcp-project", "tpu-project", "--gcp-region", "us-central1"],
     WorkloadPolicySettings(enabled=True, project="tpu-project", region="us-central1")),
    (["--workload-policies", "--gcp-project", "tpu-project", "--gcp-region", "us-central1",
      "--compute-url", "http://127.0.0.1:8089/compute/v1"],
     WorkloadPolicySettings(enabled=True, project="tpu-project", region="us-central1",
                            base_url="http://127.0.0.1:8089/compute/v1", auth="none")),
    (["--no-workload-policies", "--gcp-project", "tpu-project"],
     WorkloadPolicySettings(project="tpu-project")),
])
def test_settings_from_command_line(argv, expected):
    parser = argparse.ArgumentParser()
    WorkloadPolicySettings.add_arguments(parser)
    assert WorkloadPolicySettings.from_args(parser.parse_args(argv)) == expected


def test_command_line_without_region_is_refused():
    parser = argparse.ArgumentParser()
    WorkloadPolicySettings.add_arguments(parser)
    args = parser.parse_args(["--workload-policies", "--gcp-project", "tpu-project"])
    with pytest.raises(WorkloadPolicySettingsError, match="--gcp-region"):
        WorkloadPolicySettings.from_args(args)


# --- the error hierarchy -------------------------------------------------------------------

ERROR_CLASSES = [obj for obj in vars(gcp).values()
                 if isinstance(obj, type) and issubclass(obj, ComputeError)]


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_has_a_camel_case_reason_and_a_retry_verdict(cls):
    assert re.fullmatch(r"[A-Z][a-z]+(?:[A-Z][a-z]+)+", cls.reason)
    assert isinstance(cls.retryable, bool)
    assert (cls.retry_after is not None) == cls.retryable


def test_reasons_tell_classes_apart():
    leaves = [c for c in ERROR_CLASSES if c is not ComputeError
              and c is not gcp.CredentialsRefreshFailed]
    assert len({c.reason for c in leaves}) == len(leaves)


class _CreatingClient:
    """A Compute client whose policy is missing and whose insert is done at once, answering
    with `operation` (what Compute Engine's region operation says when it is DONE)."""

    def __init__(self, operation: dict):
        self.operation = operation

    def get_resource_policy(self, project, region, name):
        return None

    def insert_resource_policy(self, project, region, body, request_id):
        return self.operation

    def wait_region_operation(self, project, region, operation, timeout_s):
        return operation

    def resource_policy_url(self, project, region, name=None):
        return f"https://compute.example/projects/{project}/regions/{region}/resourcePolicies/{name}"


@pytest.mark.parametrize("operation, self_link", [
    # The operation names the policy it made: that link, whatever the client's base URL.
    ({"status": "DONE", "targetLink": "https://www.googleapis.com/compute/v1/projects/p/regions/"
      "r/resourcePolicies/n"},
     "https://www.googleapis.com/compute/v1/projects/p/regions/r/resourcePolicies/n"),
    # An operation without one: the policy's URL as the client would read it.
    ({"status": "DONE"}, "https://compute.example/projects/p/regions/r/resourcePolicies/n"),
])
def test_a_created_policy_s_link_is_the_one_the_operation_names(operation, self_link):
    result = gcp.ensure_workload_policy(_CreatingClient(operation), "p", "r", "n", "2x4x4")
    assert result.created and result.self_link == self_link
