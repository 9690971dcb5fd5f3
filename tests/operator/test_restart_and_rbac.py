"""An operator stopped mid-burst (a clean stop of its thread: handlers are cancelled between
calls; tests/faults/test_operator_killed.py kills a process with SIGKILL) and started again
finishes every job exactly once; every request the operator sends is one its RBAC rules
(permissions.py) grant."""

from __future__ import annotations

import pytest

from tests.operator.conftest import Cluster, start_operator
from tests.support.apiserver import wait_for
from tpujob.controller.permissions import allowed

pytestmark = pytest.mark.integration
N_JOBS = 24


def _operator_requests(cluster: Cluster):
    return [r for r in cluster.server.requests() if not r.user_agent.startswith("python-requests")]


def test_operator_stopped_mid_burst_and_restarted_creates_every_jobset_exactly_once(fresh):
    names = [f"burst-{i:02d}" for i in range(N_JOBS)]
    first = start_operator(fresh, workers=2)
    for n in names:
        fresh.create_job(n)
    wait_for(lambda: sum(fresh.jobset(n) is not None for n in names) >= N_JOBS // 4,
             timeout=30, message="some JobSets created")
    first.stop()
    second = start_operator(fresh)
    try:
        for n in names:
            fresh.wait_phase(n, "Starting", timeout=30)
    finally:
        second.stop()
    # A create's path carries no name: N_JOBS successful creates and exactly the N_JOBS names
    # listed (none deleted: a JobSet created twice would be one create too many).
    creates = [r for r in fresh.server.requests()
               if r.verb == "create" and r.resource == "jobsets" and r.status == 201]
    assert len(creates) == N_JOBS, [r.path for r in creates]
    assert not [r for r in fresh.server.requests()
                if r.verb == "delete" and r.resource == "jobsets"]
    listing = fresh.request("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets")
    assert sorted(js["metadata"]["name"] for js in listing.json()["items"]) == sorted(names)
    for n in names:
        created_events = [e for e in fresh.events(n) if e["reason"] == "Created"]
        assert len(created_events) <= 1, n


def test_every_operator_request_is_granted_by_its_rbac_rules(fresh):
    op = start_operator(fresh)
    try:
        fresh.create_job("rbac-ok")
        fresh.create_job("rbac-bad", slice="v6e-12")
        fresh.wait_phase("rbac-ok", "Starting")
        fresh.wait_phase("rbac-bad", "Invalid")
        fresh.patch("/apis/tpujob.dev/v1alpha1/namespaces/{ns}/tputrainingjobs/rbac-ok",
                    {"spec": {"suspend": True}})
        fresh.wait_phase("rbac-ok", "Suspended")
    finally:
        op.stop()
    seen = {r.rule for r in _operator_requests(fresh) if r.is_resource}
    assert seen, "no operator requests were recorded"
    refused = sorted(rule for rule in seen if not allowed(*rule))
    assert refused == [], f"requests no RBAC rule grants: {refused}"
    namespaced = sorted(rule for rule in seen
                        if not allowed(*rule, cluster_wide=False) and rule[1] not in
                        ("customresourcedefinitions", "namespaces"))
    assert namespaced == []


def test_a_namespaced_operator_asks_for_nothing_outside_its_namespace(fresh):
    op = start_operator(fresh, namespaces=(fresh.namespace,), relist_interval_s=0.5)
    try:
        fresh.create_job("ns-ok")
        fresh.wait_phase("ns-ok", "Starting")
        started = len(fresh.server.requests())

        def relists() -> int:  # the periodic relist lists jobs and JobSets, watches do not
            return sum(r.verb == "list" and r.resource == "jobsets" and
                       not r.user_agent.startswith("python-requests")
                       for r in fresh.server.requests()[started:])
        wait_for(lambda: relists() >= 2, timeout=30, message="two relists")
    finally:
        op.stop()
    requests = [r for r in _operator_requests(fresh) if r.is_resource]
    outside = sorted({(r.rule, r.path) for r in requests
                      if not allowed(*r.rule, cluster_wide=False)
                      or f"/namespaces/{fresh.namespace}/" not in r.path})
    assert requests and outside == []
