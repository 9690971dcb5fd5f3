"""Which containers' logs hold host reports and which endpoints answer for stacks, read from the
pods: the attempt's running pods only (not another attempt's, a finished pod, one being deleted),
trainer containers only (not a sidecar), each named as its host report names it (a host of two
trainer containers: /container-C), with its pod IP and metrics port."""

from __future__ import annotations

import pytest

from tpujob.controller.observe import trainer_containers, trainer_endpoints

pytestmark = pytest.mark.unit


def pod(name: str, *, slice_: int = 0, host: int = 0, attempt: int | None = 0,
        phase: str = "Running", ip: str | None = "10.0.0.1", deleting: bool = False,
        containers=(("trainer", 9431),)) -> dict:
    labels = {"jobset.sigs.k8s.io/job-index": str(slice_)}
    if attempt is not None:
        labels["jobset.sigs.k8s.io/restart-attempt"] = str(attempt)
    meta = {"name": name, "labels": labels,
            "annotations": {"batch.kubernetes.io/job-completion-index": str(host)}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec = {"containers": [{"name": n, **({"ports": [{"name": "metrics" if i == 0 else
                                                       f"metrics-{i}", "containerPort": p}]}
                                           if p else {})}
                           for i, (n, p) in enumerate(containers)]}
    status = {"phase": phase, **({"podIP": ip} if ip else {})}
    return {"metadata": meta, "spec": spec, "status": status}


def test_the_attempts_running_trainer_containers():
    pods = [pod("a", host=0), pod("b", host=1, containers=(("trainer", 9431), ("sidecar", 0))),
            pod("old", host=1, attempt=1), pod("done", phase="Succeeded"),
            pod("going", deleting=True), pod("unlabelled", attempt=None, host=2)]
    assert list(trainer_containers(pods, 0)) == [("a", "trainer"), ("b", "trainer"),
                                                 ("unlabelled", "trainer")]
    assert list(trainer_containers(pods, 1)) == [("old", "trainer"),
                                                 ("unlabelled", "trainer")]


def test_each_endpoint_named_as_its_host_reports_name_it():
    pods = [pod("a", slice_=1, host=3),
            pod("two", host=2, containers=(("trainer-1", 9431), ("trainer-2", 9432))),
            pod("no-ip", host=4, ip=None), pod("no-port", host=5, containers=(("trainer", 0),))]
    assert list(trainer_endpoints(pods, 0)) == [
        ("slice-1/host-3", "10.0.0.1", 9431),
        ("slice-0/host-2/container-0", "10.0.0.1", 9431),
        ("slice-0/host-2/container-1", "10.0.0.1", 9432)]


def test_a_pod_with_only_what_a_pod_must_have_is_host_0_of_slice_0():
    bare = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "trainer", "ports": [{"name": "metrics", "containerPort": 9431}]}]},
        "status": {"phase": "Running", "podIP": "10.0.0.9"}}
    assert list(trainer_endpoints([bare], 0)) == [("slice-0/host-0", "10.0.0.9", 9431)]
    assert list(trainer_endpoints([bare], 1)) == [("slice-0/host-0", "10.0.0.9", 9431)]
    empty_label = pod("e", host=1)
    empty_label["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] = ""
    assert list(trainer_containers([empty_label], 0)) == [("e", "trainer")]
    assert list(trainer_containers([empty_label], 1)) == []
