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
