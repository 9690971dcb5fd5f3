"""What a relist does to the operator's caches: the deletions and changes no watch reported,
and nothing for objects the listing is too old to know about."""

from __future__ import annotations

import pytest
from kubernetes import client

from tpujob.builders import names
from tpujob.controller.operator import Operator
from tpujob.controller.settings import OperatorSettings


def _job(name: str, rv: int, uid: str | None = None, ns: str = "a") -> dict:
    return {"metadata": {"namespace": ns, "name": name, "uid": uid or f"uid-{name}",
                         "resourceVersion": str(rv)}}


def _jobset(owner: str, rv: int, uid: str | None = None, ns: str = "a") -> dict:
    return {"metadata": {"namespace": ns, "name": owner, "uid": uid or f"js-{owner}",
                         "resourceVersion": str(rv), "labels": {names.LABEL_JOB: owner}},
            "spec": {"replicatedJobs": []}, "status": {}}


def _operator(jobs=(), jobsets=()) -> Operator:
    op = Operator(OperatorSettings(http_port=None), client.Configuration())
    for job in jobs:
        op.on_job_event({"type": "ADDED", "object": job})
    for js in jobsets:
        op.on_jobset_event({"type": "ADDED", "object": js})
    return op


@pytest.mark.parametrize("cached, listed, list_rv, expect_rv, changes", [
    # gone before the list was taken: dropped
    (_job("j", 5), [], "10", None, 1),
    # created after the list was taken (the watch was faster): kept
    (_job("j", 12), [], "10", "12", 0),
    # the listing is newer: taken
    (_job("j", 5), [_job("j", 8)], "10", "8", 1),
    # the cache is newer (the operator's own status write): kept
    (_job("j", 9), [_job("j", 8)], "10", "9", 0),
    # the same version: nothing to do
    (_job("j", 8), [_job("j", 8)], "10", "8", 0),
    # deleted and made again under the same name: the old one goes, the new one comes
    (_job("j", 5), [_job("j", 9, uid="other")], "10", "9", 2),
    # a list version that cannot be compared: nothing is dropped
    (_job("j", 5), [], "", "5", 0),
])
def test_jobs(cached, listed, list_rv, expect_rv, changes):
    op = _operator(jobs=[cached])
    assert op.apply_listing("a", listed, list_rv, [], "10") == changes
    held = op.jobs.get(("a", "j"))
    assert (held["metadata"]["resourceVersion"] if held else None) == expect_rv


def test_a_namespaced_listing_touches_only_its_namespace():
    op = _operator(jobs=[_job("j", 5, ns="a"), _job("k", 5, ns="b")])
    assert op.apply_listing("a", [], "10", [], "10") == 1
    assert sorted(op.jobs) == [("b", "k")]
    assert op.apply_listing(None, [], "10", [], "10") == 1  # cluster-wide: every namespace
    assert op.jobs == {}


def test_jobsets_are_dropped_and_taken_by_their_job():
    op = _operator(jobs=[_job("j", 5), _job("k", 5)],
                   jobsets=[_jobset("j", 6), _jobset("k", 6)])
    changes = op.apply_listing("a", [_job("j", 5), _job("k", 5)], "10",
                               [_jobset("k", 9)], "10")
    assert changes == 2
    assert sorted(op.jobsets) == [("a", "k")]
    assert op.jobsets[("a", "k")]["metadata"]["resourceVersion"] == "9"
    # A JobSet of something else (no job label) is not the operator's.
    stray = _jobset("x", 7)
    stray["metadata"]["labels"] = {}
    assert op.apply_listing("a", [_job("j", 5), _job("k", 5)], "10", [stray], "10") == 1
    assert op.jobsets == {}


class _Queue:
    def __init__(self) -> None:
        self.added: list = []

    def add(self, key) -> None:
        self.added.append(key)

    def forget(self, key) -> None:
        pass


def test_an_echo_of_the_operators_own_write_is_not_queued_again():
    op = _operator()
    op.queue = _Queue()
    op.on_job_event({"type": "ADDED", "object": _job("j", 5)})
    op.jobs[("a", "j")] = _job("j", 6)  # the reply of the operator's status write
    op.on_job_event({"type": "MODIFIED", "object": _job("j", 6)})  # ...its watch event
    op.on_job_event({"type": "MODIFIED", "object": _job("j", 7)})  # someone else's change
    assert op.queue.added == [("a", "j"), ("a", "j")]
    op.jobsets[("a", "j")] = _jobset("j", 8)  # the JobSet as created
    op.on_jobset_event({"type": "ADDED", "object": _jobset("j", 8)})
    op.on_jobset_event({"type": "MODIFIED", "object": _jobset("j", 9)})  # its status moved
    assert op.queue.added == [("a", "j")] * 3


def test_cached_jobs_leave_out_managed_fields():
    job = _job("j", 5)
    job["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    job["spec"] = {"slice": "v6e-16"}
    op = _operator(jobs=[job])
    cached = op.jobs[("a", "j")]
    assert "managedFields" not in cached["metadata"] and cached["spec"] == {"slice": "v6e-16"}
    assert "managedFields" in job["metadata"]  # the event's own object is left as it was
