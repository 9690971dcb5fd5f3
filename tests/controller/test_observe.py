"""Reading the cluster: JobSet status, failed containers and their reasons, process 0's address
and the trainer's progress document."""

import json

import pytest

from tpujob.api.status import FailureReason
from tpujob.controller.observe import (
    TRAINER_REASONS,
    ContainerExit,
    JobSetState,
    ProgressReading,
    explain_failure,
    find_process_zero,
    read_container_exits,
)

pytestmark = pytest.mark.unit


def trainer_says(reason: str, message: str = "details") -> str:
    return json.dumps({"reason": reason, "message": message}) + "\n"


@pytest.mark.parametrize("exit_, reason, says", [
    (ContainerExit("p", "trainer", 4, "Error", trainer_says("OutOfMemory", "40 GiB")),
     FailureReason.OUT_OF_MEMORY, "40 GiB"),
    (ContainerExit("p", "trainer", 3, "Error", trainer_says("ConfigError", "train.steps")),
     FailureReason.CONFIG_ERROR, "train.steps"),
    (ContainerExit("p", "trainer", 6, "Error", trainer_says("NaNLoss")), FailureReason.NAN_LOSS,
     "NaNLoss"),
    (ContainerExit("p", "trainer", 7, "Error", trainer_says("MeshMismatch")),
     FailureReason.MESH_MISMATCH, "MeshMismatch"),
    (ContainerExit("p", "trainer", 5, "Error", trainer_says("DataError")),
     FailureReason.DATA_ERROR, "DataError"),
    (ContainerExit("p", "trainer", 42, "Error", trainer_says("PeerLost")),
     FailureReason.PREEMPTED, "PeerLost"),
    (ContainerExit("p", "trainer", 42, "Error", trainer_says("CheckpointError", "gs://b/c/10")),
     FailureReason.CHECKPOINT_ERROR, "gs://b/c/10"),
    (ContainerExit("p", "trainer", 137, "OOMKilled"), FailureReason.OUT_OF_MEMORY, "OOMKilled"),
    (ContainerExit("p", "trainer", 143, "Error", disrupted=True), FailureReason.PREEMPTED,
     "disrupted"),
    (ContainerExit("p", "trainer", 137, "Error"), FailureReason.PREEMPTED, "signal 9"),
    (ContainerExit("p", "trainer", 1, "Error", "Traceback ...\nValueError: boom"),
     FailureReason.ERROR, "ValueError: boom"),
    (ContainerExit("p", "trainer", None, "CreateContainerConfigError",
                   'secret "wandb" not found'), FailureReason.CONFIG_ERROR, "wandb"),
    (ContainerExit("p", "trainer", None, "ImagePullBackOff", "not found"),
     FailureReason.CONFIG_ERROR, "ImagePullBackOff"),
])
def test_classify(exit_, reason, says):
    got, message = exit_.classify()
    assert got == reason and says in message and "pod p, container trainer" in message


def test_every_reason_the_trainer_fails_with_has_a_status_reason():
    from tpujob_trainer.exits import Reason
    assert set(TRAINER_REASONS) == {r.value for r in Reason} - {Reason.COMPLETED.value}


def test_the_specific_cause_beats_its_consequences():
    exits = [ContainerExit("a", "trainer", 42, "Error", trainer_says("PeerLost")),
             ContainerExit("b", "trainer", 4, "Error", trainer_says("OutOfMemory")),
             ContainerExit("c", "trainer", 143, "Error")]
    assert explain_failure(exits)[0] == FailureReason.OUT_OF_MEMORY
    assert explain_failure([]) is None


def _pod(name, *, attempt=0, job_index="0", index="0", phase="Running", ip="10.0.0.5",
         statuses=(), disrupted=False):
    return {"metadata": {"name": name,
                         "labels": {"jobset.sigs.k8s.io/restart-attempt": str(attempt),
                                    "jobset.sigs.k8s.io/job-index": job_index},
                         "annotations": {"batch.kubernetes.io/job-completion-index": index}},
            "spec": {"containers": [{"name": "trainer", "ports": [
                {"name": "metrics", "containerPort": 9431}]}]},
            "status": {"phase": phase, "podIP": ip, "containerStatuses": list(statuses),
                       "conditions": [{"type": "DisruptionTarget", "status": "True"}]
                       if disrupted else []}}


def _terminated(code, reason="Error", message=""):
    return {"name": "trainer", "state": {"terminated": {"exitCode": code, "reason": reason,
                                                       "message": message}}}


def test_read_container_exits_takes_the_newest_attempt_first():
    pods = [_pod("old", attempt=0, statuses=[_terminated(4, message=trainer_says("OutOfMemory"))]),
            _pod("new", attempt=1, statuses=[_terminated(143)], disrupted=True),
            _pod("ok", attempt=1, statuses=[_terminated(0)]),
            _pod("stuck", attempt=1, statuses=[{"name": "trainer", "state": {"waiting": {
                "reason": "ContainerCreating"}}}])]
    exits = read_container_exits(pods)
    assert [e.pod for e in exits] == ["new", "old"]
    assert explain_failure(exits)[0] == FailureReason.PREEMPTED


@pytest.mark.parametrize("pods, expected", [
    ([_pod("p0")], ("10.0.0.5", 9431)),
    ([_pod("p1", index="1"), _pod("p0", ip="10.0.0.9")], ("10.0.0.9", 9431)),
    ([_pod("s1", job_index="1")], None),
    ([_pod("p0", phase="Pending")], None),
    ([_pod("p0", ip="")], None),
])
def test_find_process_zero(pods, expected):
    assert find_process_zero(pods) == expected


@pytest.mark.parametrize("doc, step, training", [
    ({"step": 5, "phase": "training", "loss": 2.0}, 5, True),
    ({"step": 0, "phase": "compiling"}, 0, False),
    ({"step": 3}, 3, True),
    ({"step": "x"}, None, None),
    ({"loss": 1.0}, None, None),
    ([1, 2], None, None),
])
def test_progress_document(doc, step, training):
    reading = ProgressReading.from_document(doc)
    if step is None:
        assert reading is None
    else:
        assert (reading.step, reading.training) == (step, training)


def test_progress_drops_non_finite_numbers():
    r = ProgressReading.from_document({"step": 1, "loss": float("nan"), "mfu": float("inf"),
                                       "total_steps": -3, "step_time_s": True})
    assert (r.loss, r.mfu, r.total_steps, r.step_time_s) == (None, None, None, None)


def test_jobset_state():
    js = JobSetState.from_object({
        "metadata": {"uid": "js", "ownerReferences": [{"uid": "u", "controller": True}],
                     "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"suspend": True, "replicatedJobs": [{"name": "slice", "replicas": 2}]},
        "status": {"restarts": 3, "replicatedJobsStatus": [{"name": "slice", "ready": 2}],
                   "conditions": [{"type": "Failed", "status": "True", "message": "boom"}]}})
    assert (js.owner_uid, js.suspended, js.restarts, js.failed, js.message, js.all_ready,
            js.queue_name) == ("u", True, 3, True, "boom", True, "q")
    assert not JobSetState.from_object(None).exists
