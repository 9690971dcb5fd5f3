"""Local mode's stand-in provisioner: what it answers a ProvisioningRequest, per its script."""

from datetime import UTC, datetime

import pytest

from tpujob.local.executor.provisioner import attempt_of, decide, outcome_for

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 26, 20, 0, tzinfo=UTC)


def request(name="jobset-j-1a2b3-dws-prov-1", *conditions):
    return {"metadata": {"name": name, "namespace": "ns", "generation": 1},
            "status": {"conditions": [{"type": t, "status": s} for t, s in conditions]}}


@pytest.mark.parametrize("name, attempt", [
    ("jobset-j-1a2b3-dws-prov-1", 1), ("jobset-j-1a2b3-dws-prov-12", 12), ("odd-name-x", 1)])
def test_the_attempt_is_the_number_kueue_puts_at_the_end(name, attempt):
    assert attempt_of(name) == attempt


@pytest.mark.parametrize("script, attempt, outcome", [
    (None, 1, "Provisioned"), ("", 3, "Provisioned"),
    ("Failed,Provisioned", 1, "Failed"), ("Failed,Provisioned", 2, "Provisioned"),
    ("Failed,Provisioned", 7, "Provisioned"), ("BookingExpired", 4, "BookingExpired"),
    (" Failed , Pending ", 2, "Pending")])
def test_each_attempt_takes_its_entry_and_the_last_repeats(script, attempt, outcome):
    assert outcome_for(script, attempt) == outcome


def test_an_unknown_outcome_is_named():
    with pytest.raises(ValueError, match="'Provision' is not one of Provisioned, Failed"):
        outcome_for("Provision", 1)


def kinds(status):
    return {c["type"]: c["status"] for c in status["conditions"]}


def test_a_provisioned_request_names_itself_for_the_pods_node_selector():
    status = decide(request(), "Provisioned", NOW)
    assert kinds(status) == {"Accepted": "True", "Provisioned": "True"}
    assert status["provisioningClassDetails"] == {"ResizeRequestName": "jobset-j-1a2b3-dws-prov-1"}
    assert {c["lastTransitionTime"] for c in status["conditions"]} == {"2026-11-26T20:00:00Z"}


def test_failed_and_expired_requests_say_so_in_kueues_conditions():
    failed = decide(request(), "Failed", NOW)
    assert kinds(failed) == {"Accepted": "True", "Failed": "True"}
    assert "fails attempt 1" in failed["conditions"][1]["message"]
    expired = decide(request(), "BookingExpired", NOW)
    assert kinds(expired) == {"Accepted": "True", "Provisioned": "True", "BookingExpired": "True"}


def test_a_pending_request_is_accepted_once_and_a_finished_one_left_alone():
    pending = decide(request(), "Pending", NOW)
    assert kinds(pending) == {"Accepted": "True", "Provisioned": "False"}
    assert decide(request("r-1", ("Accepted", "True")), "Pending", NOW) is None
    for final in ("Provisioned", "Failed", "BookingExpired", "CapacityRevoked"):
        assert decide(request("r-1", (final, "True")), "Failed", NOW) is None
    assert decide(request("r-1", ("Provisioned", "False")), "Provisioned", NOW) is not None


class FakeApi:
    """The calls the provisioner makes, answered from a dict of objects; patches recorded."""

    def __init__(self, objects, patch_error=None):
        self.objects, self.patches, self.patch_error = objects, [], patch_error

    def session_copy(self):
        return self

    def get(self, resource, namespace, name):
        return self.objects.get((resource.plural, namespace, name))

    def patch(self, resource, namespace, name, body, subresource=None):
        if self.patch_error is not None:
            raise self.patch_error
        self.patches.append((resource.plural, namespace, name, subresource, body))


def owned(name, kind, owner):
    return {"metadata": {"name": name, "namespace": "ns",
                         "ownerReferences": [{"kind": "Other", "name": "x"},
                                             {"kind": kind, "name": owner}]}}


SCRIPTED = {("workloads", "ns", "jobset-j-1a2b3"): owned("jobset-j-1a2b3", "JobSet", "j"),
            ("configmaps", "ns", "tpujob-local-provisioning"): {"data": {"j": "Failed",
                                                                         "k": "Pending"}}}


def answer(objects, pr, patch_error=None):
    from tpujob.local.executor.provisioner import Provisioner

    api = FakeApi(objects, patch_error)
    Provisioner(api)._answer(pr)
    return api.patches


def test_the_script_is_found_through_the_requests_workload_and_its_job():
    pr = owned("jobset-j-1a2b3-dws-prov-1", "Workload", "jobset-j-1a2b3") | {"status": {}}
    [(plural, ns, name, sub, body)] = answer(SCRIPTED, pr)
    assert (plural, ns, name, sub) == ("provisioningrequests", "ns",
                                       "jobset-j-1a2b3-dws-prov-1", "status")
    assert kinds(body["status"]) == {"Accepted": "True", "Failed": "True"}


@pytest.mark.parametrize("objects, pr", [
    ({}, owned("jobset-j-1a2b3-dws-prov-1", "Workload", "jobset-j-1a2b3")),   # no Workload
    (SCRIPTED, {"metadata": {"name": "orphan-1", "namespace": "ns"}}),           # no owner
    ({k: v for k, v in SCRIPTED.items() if k[0] == "workloads"},                 # no script
     owned("jobset-j-1a2b3-dws-prov-1", "Workload", "jobset-j-1a2b3")),
    ({**SCRIPTED, ("configmaps", "ns", "tpujob-local-provisioning"): {"data": {"j": "Nope"}}},
     owned("jobset-j-1a2b3-dws-prov-1", "Workload", "jobset-j-1a2b3")),         # bad script
])
def test_without_a_script_for_the_job_the_request_is_provisioned(objects, pr):
    [(*_, body)] = answer(objects, pr)
    assert kinds(body["status"]) == {"Accepted": "True", "Provisioned": "True"}


def test_a_request_already_answered_is_left_and_one_gone_is_no_error():
    from tpujob.local.executor.client import ApiError

    done = owned("jobset-j-1a2b3-dws-prov-1", "Workload", "jobset-j-1a2b3") | {
        "status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    assert answer(SCRIPTED, done) == []
    fresh = owned("jobset-j-1a2b3-dws-prov-2", "Workload", "jobset-j-1a2b3")
    assert answer(SCRIPTED, fresh, ApiError(404, "NotFound", "gone")) == []
    with pytest.raises(ApiError):
        answer(SCRIPTED, fresh, ApiError(500, "Internal", "boom"))


def test_the_loop_answers_listed_and_watched_requests_and_not_deleted_ones():
    from tpujob.local.executor.provisioner import Provisioner

    listed = owned("jobset-j-1a2b3-dws-prov-1", "Workload", "jobset-j-1a2b3")
    added = owned("jobset-k-1a2b3-dws-prov-1", "Workload", "jobset-k-1a2b3")
    gone = owned("jobset-m-1a2b3-dws-prov-1", "Workload", "jobset-m-1a2b3")

    class LoopApi(FakeApi):
        def list(self, resource, namespace=None, label_selector=None):
            assert resource.plural == "provisioningrequests" and namespace is None
            return [listed], "7"

        def watch(self, resource, namespace, version, timeout_s=30):
            assert version == "7"
            yield {"type": "DELETED", "object": gone}
            yield {"type": "ADDED", "object": added}
            provisioner._stop.set()
            yield {"type": "MODIFIED", "object": gone}

    api = LoopApi(SCRIPTED)
    provisioner = Provisioner(api)
    provisioner._run()
    assert [p[2] for p in api.patches] == ["jobset-j-1a2b3-dws-prov-1",
                                           "jobset-k-1a2b3-dws-prov-1"]
