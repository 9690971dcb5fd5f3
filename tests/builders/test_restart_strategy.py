"""spec.restartPolicy.strategy: what each builds into the JobSet's failure policy, and RestartJob
refused for a single slice, by the model and by the CRD's CEL rule, naming the field."""

from __future__ import annotations

import re

import pytest

from tests.api import k8s_schema as k8s
from tpujob.api.crd import build_crd
from tpujob.api.resource import InvalidJobError, load_job
from tpujob.builders.jobset import build_jobset
from tpujob_plan.slice_plan import plan_slice

pytestmark = pytest.mark.unit


def _job(slices: int, **restart) -> dict:
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "llm", "namespace": "default", "uid": "u-1"},
            "spec": {"slice": "v6e-16", "slices": slices, "image": "trainer:1",
                     "output": "gs://bucket/run", "restartPolicy": restart}}


def _policy(slices: int, **restart) -> dict:
    job = _job(slices, **restart)
    js = build_jobset(job, load_job(job).spec, plan_slice("v6e-16", slices=slices))
    return js["spec"]["failurePolicy"]


@pytest.mark.parametrize("slices, restart, strategy, actions", [
    (1, {}, "Recreate", ["RestartJobSetAndIgnoreMaxRestarts", "FailJobSet"]),
    (1, {"strategy": "InPlaceRestart"}, "InPlaceRestart",
     ["RestartJobSetAndIgnoreMaxRestarts", "FailJobSet"]),
    (2, {"strategy": "RestartJob"}, "Recreate",
     ["RestartJobAndIgnoreMaxRestarts", "FailJobSet", "RestartJob"]),
    (2, {"strategy": "RestartJob", "disruptionsCountTowardsMax": True}, "Recreate",
     ["RestartJob", "FailJobSet", "RestartJob"]),
])
def test_each_strategy_builds_its_failure_policy(slices, restart, strategy, actions):
    policy = _policy(slices, **restart)
    assert policy["restartStrategy"] == strategy
    assert [r["action"] for r in policy["rules"]] == actions


# JobSet's webhook (pkg/webhooks/jobset_webhook.go, v0.12.0) refuses any other rule name, and
# with it the whole JobSet: the real controller refused "fatal-exit" on every job.
JOBSET_RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")


@pytest.mark.parametrize("slices, restart", [
    (1, {}), (1, {"strategy": "InPlaceRestart"}), (2, {"strategy": "RestartJob"})])
def test_rule_names_are_ones_jobsets_webhook_accepts(slices, restart):
    names = [r["name"] for r in _policy(slices, **restart)["rules"]]
    assert all(JOBSET_RULE_NAME.match(n) and len(n) <= 128 for n in names), names
    assert len(set(names)) == len(names)


def test_restart_job_on_one_slice_is_refused_naming_the_field():
    with pytest.raises(InvalidJobError, match=r"restartPolicy.*RestartJob.*spec.slices > 1"):
        load_job(_job(1, strategy="RestartJob"))


def test_the_crd_refuses_restart_job_on_one_slice():
    [version] = build_crd()["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    one = _job(1, strategy="RestartJob")
    errors = k8s.validate_object(schema, one)
    assert any("RestartJob restarts only the failed slice" in e for e in errors), errors
    assert k8s.validate_object(schema, _job(2, strategy="RestartJob")) == []
    assert k8s.validate_object(schema, _job(1, strategy="InPlaceRestart")) == []


def _job_template(slices: int, **restart) -> dict:
    job = _job(slices, **restart)
    js = build_jobset(job, load_job(job).spec, plan_slice("v6e-16", slices=slices))
    [rjob] = js["spec"]["replicatedJobs"]
    return rjob["template"]


def test_in_place_restart_meets_jobsets_webhook_and_restarts_containers_in_their_pods():
    # JobSet v0.12's webhook refuses an InPlaceRestart JobSet unless every replicated job has
    # backoffLimit MaxInt32, podReplacementPolicy Failed and completions == parallelism
    # (pkg/webhooks/jobset_webhook.go); the real controller refused backoffLimit 0.
    template = _job_template(1, strategy="InPlaceRestart", retryableExitCodes=[42, 7])
    spec = template["spec"]
    assert (spec["backoffLimit"], spec["podReplacementPolicy"]) == (2**31 - 1, "Failed")
    assert spec["completions"] == spec["parallelism"] == 4
    # A retryable exit restarts the container in place (KEP-5307 restart rules); any other
    # exit fails the pod, for the pod failure policy to judge.
    for container in spec["template"]["spec"]["containers"]:
        assert container["restartPolicy"] == "Never"
        [rule] = container["restartPolicyRules"]
        assert rule["action"] == "Restart" and rule["exitCodes"]["operator"] == "In"
        assert rule["exitCodes"]["values"] == [7, 42, *range(129, 256)]
        assert len(rule["exitCodes"]["values"]) <= 255  # the API's limit
    assert spec["template"]["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize("restart", [{}, {"strategy": "RestartJob"}])
def test_other_strategies_leave_pod_failures_to_the_job(restart):
    spec = _job_template(2, **restart)["spec"]
    assert spec["backoffLimit"] == 0 and "podReplacementPolicy" not in spec
    assert all("restartPolicyRules" not in c and "restartPolicy" not in c
               for c in spec["template"]["spec"]["containers"])
