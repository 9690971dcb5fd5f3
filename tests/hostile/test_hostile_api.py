"""Hostile TpuTrainingJobs through the embedded API server, as JSON (NaN and Infinity included,
as a careless client sends them) and as YAML: every one is answered 201 or with a 4xx `Status`,
never a 5xx, and the server keeps serving."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.hostile.strategies import INJECTIONS, any_job

pytestmark = pytest.mark.integration

SETTINGS = settings(max_examples=80, deadline=2000, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CRD_FILE = Path(__file__).resolve().parents[2] / "manifests" / "crd.yaml"
NAMESPACE = "hostile"


@pytest.fixture(scope="module")
def job_collection() -> Iterator[tuple[Any, requests.Session, str]]:
    """A server of these tests alone, with the TpuTrainingJob CRD; its session and the
    collection URL of TpuTrainingJobs."""
    from tpujob.local.apiserver import ApiServer, load_crds

    with ApiServer(crds=load_crds([CRD_FILE])) as server:
        with requests.Session() as session:
            created = session.post(server.url + "/api/v1/namespaces", timeout=10, json={
                "metadata": {"name": NAMESPACE}})
            assert created.status_code == 201
            yield server, session, \
                f"{server.url}/apis/tpujob.dev/v1alpha1/namespaces/{NAMESPACE}/tputrainingjobs"


@SETTINGS
@given(st.one_of(any_job, st.builds(lambda spec: {
    "apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob", "metadata": {"name": "junk"},
    "spec": spec}, st.dictionaries(st.sampled_from(("slice", "image", "output", "trainer",
                                                    "env", "slices", "wandb")),
                                   st.sampled_from(INJECTIONS) | st.integers(), max_size=7))),
    st.sampled_from(("application/json", "application/yaml")))
def test_the_api_server_answers_hostile_jobs_with_201_or_a_4xx_status(job_collection, obj: Any,
                                                                     content_type: str) -> None:
    server, session, url = job_collection
    if content_type == "application/json":
        body = json.dumps(obj)  # NaN and Infinity included, as a careless client sends them
    else:
        try:
            body = yaml.safe_dump(obj)
        except yaml.YAMLError:
            return
    response = session.post(url, data=body.encode("utf-8", "surrogatepass"), timeout=30,
                            headers={"Content-Type": content_type})
    event(f"HTTP {response.status_code}")
    assert response.status_code == 201 or 400 <= response.status_code < 500, response.text
    if response.status_code == 201:
        name = response.json()["metadata"]["name"]
        assert session.delete(f"{url}/{name}", timeout=30).status_code == 200
    else:
        status = response.json()
        assert status["kind"] == "Status" and status["code"] == response.status_code
        assert status["status"] == "Failure" and status["reason"] and status["message"]
    assert session.get(server.url + "/readyz", timeout=10).status_code == 200


def test_no_hostile_job_made_the_server_answer_5xx(job_collection) -> None:
    server, _, _ = job_collection
    assert not [r for r in server.requests() if r.status >= 500 or r.status == 0]
