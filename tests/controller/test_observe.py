"""Reading the cluster: JobSet status, failed containers and their reasons, process 0's address
and the trainer's progress document."""

import json
from datetime import UTC, datetime

import pytest

from tpujob.api.status import FailureReason
from tpujob.controller.observe import (
    TRAINER_REASONS,
    ContainerExit,
    JobSetState,
    Unscheduled,
    explain_failure,
    find_process_zero,
    read_container_exits,
    read_unscheduled,
)
from tpujob.controller.trainer_reports import ProgressReading

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
    assert explain_failure(exits)[:4] == (FailureReason.OUT_OF_MEMORY, exits[1].classify()[1],
                                          "b", "trainer")
    assert explain_failure([]) is None


@pytest.mark.parametrize("exits, expected", [
    # A crash on one host, and its peers stopped by the JobSet's restart (SIGTERM): the crash.
    ([ContainerExit("a", "trainer", 42, "Error", trainer_says("Preempted")),
      ContainerExit("b", "trainer", 1, "Error", trainer_says("InternalError")),
      ContainerExit("c", "trainer", 143, "Error")], FailureReason.ERROR),
    ([ContainerExit("a", "trainer", 143, "Error"),
      ContainerExit("b", "trainer", 1, "Error", "Traceback ...")], FailureReason.ERROR),
    ([ContainerExit("a", "trainer", 42, "Error", trainer_says("PeerLost")),
      ContainerExit("b", "trainer", 1, "Error", trainer_says("InternalError"))],
     FailureReason.ERROR),
    # The cluster says it disrupted a host: that is the cause, and its peers' errors follow.
    ([ContainerExit("a", "trainer", 1, "Error", trainer_says("InternalError")),
      ContainerExit("b", "trainer", 143, "Error", disrupted=True)], FailureReason.PREEMPTED),
    # A specific trainer reason still beats everything undisrupted.
    ([ContainerExit("a", "trainer", 1, "Error", trainer_says("InternalError")),
      ContainerExit("b", "trainer", 6, "Error", trainer_says("NaNLoss"))],
     FailureReason.NAN_LOSS),
    # Only signals: a preemption.
    ([ContainerExit("a", "trainer", 143, "Error"),
      ContainerExit("b", "trainer", 42, "Error", trainer_says("PeerLost"))],
     FailureReason.PREEMPTED),
])
def test_a_crash_beats_the_sigterms_of_the_restart_it_caused(exits, expected):
    assert explain_failure(exits)[0] == expected


GLOO_PEER_LOST = ("[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:561] "
                  "Connection closed by peer [10.0.0.7]:53940. This is typically caused by a "
                  "remote worker crashing.\n")


@pytest.mark.parametrize("exits, pod", [
    # torchrun on the surviving node exits 1 with gloo's words; the killed node is the cause.
    ([ContainerExit("survivor", "trainer", 1, "Error", GLOO_PEER_LOST),
      ContainerExit("killed", "trainer", 137, "Error")], "killed"),
    ([ContainerExit("killed", "trainer", 137, "Error"),
      ContainerExit("survivor", "trainer", 1, "Error", GLOO_PEER_LOST)], "killed"),
    # The built-in trainer's PeerLost is a consequence in the same way.
    ([ContainerExit("survivor", "trainer", 42, "Error", trainer_says("PeerLost")),
      ContainerExit("killed", "trainer", 143, "Error")], "killed"),
    # A plain crash still beats both.
    ([ContainerExit("survivor", "trainer", 1, "Error", GLOO_PEER_LOST),
      ContainerExit("crashed", "trainer", 1, "Error", "ValueError: boom")], "crashed"),
])
def test_a_lost_peer_is_explained_by_the_peer_that_stopped(exits, pod):
    cause = explain_failure(exits)
    assert cause.pod == pod, cause


def test_a_lost_peer_alone_reads_as_one_whose_node_went_away():
    # The node died: its pod is not failed yet, the survivor's exit is all there is.
    survivor = ContainerExit("survivor", "trainer", 1, "Error", "step 7\n" + GLOO_PEER_LOST)
    assert survivor.lost_peer
    reason, message = explain_failure([survivor])[:2]
    assert reason == FailureReason.PREEMPTED, message
    assert "exited 1: lost a peer (another process or node stopped)" in message
    assert not ContainerExit("p", "trainer", 1, "Error", "ValueError: boom").lost_peer


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
    # The attempt that ended, its pod being deleted (its process may still answer): not it.
    ([{**_pod("old", ip="10.0.0.1"), "metadata": {
        **_pod("old")["metadata"], "deletionTimestamp": "2026-11-27T12:00:00Z"}},
      _pod("new", ip="10.0.0.2")], ("10.0.0.2", 9431)),
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


def test_a_slice_restarted_alone_counts_as_a_restart():
    # RestartJob (JobSet v0.12): the failed Job's own count, not status.restarts, goes up.
    js = JobSetState.from_object({
        "spec": {"replicatedJobs": [{"name": "slice", "replicas": 3}]},
        "status": {"restarts": 1, "replicatedJobsStatus": [
            {"name": "slice", "jobRestarts": [0, 2, 1], "jobRestartsCountTowardsMax": [0, 1, 1]}]}})
    assert js.restarts == 4


def test_views_built_without_the_optional_facts_say_what_an_empty_object_says():
    """The defaults a view is built with are what the reader makes of an object that says
    nothing more: a JobSet with no spec or status, a pod of the first attempt, a progress
    document with a step only."""
    assert JobSetState.from_object({"kind": "JobSet"}) == JobSetState(exists=True)
    missing = JobSetState.missing()
    assert not (missing.exists or missing.suspended or missing.completed or missing.failed
                or missing.deleting or missing.all_ready)
    assert (missing.restarts, missing.ready_jobs, missing.jobs) == (0, 0, 0)
    pod = {"metadata": {"name": "p"}, "status": {"containerStatuses": [_terminated(1)]}}
    assert read_container_exits([pod]) == [ContainerExit("p", "trainer", 1, "Error")]
    assert ProgressReading.from_document({"step": 3}) == ProgressReading(step=3)


@pytest.mark.parametrize("jobs, ready, all_ready", [
    (0, 0, False),   # no Job at all is not a running JobSet
    (1, 0, False),
    (1, 1, True),
    (2, 1, False),   # every slice, not some
    (2, 2, True),
])
def test_all_ready_means_every_slice(jobs, ready, all_ready):
    assert JobSetState(exists=True, jobs=jobs, ready_jobs=ready).all_ready is all_ready


def test_jobset_fields_left_out_take_the_jobset_apis_defaults():
    # replicas defaults to 1 (JobSet API); a status entry with no ready count has none ready.
    js = JobSetState.from_object({
        "metadata": {"uid": "js"},
        "spec": {"replicatedJobs": [{"name": "slice"}]},
        "status": {"replicatedJobsStatus": [{"name": "slice", "active": 1}]}})
    assert (js.exists, js.jobs, js.ready_jobs, js.restarts, js.all_ready) == (True, 1, 0, 0, False)


@pytest.mark.parametrize("code, reason, says", [
    (128, FailureReason.ERROR, "exited 128"),      # 128 + 0: no signal is 0
    (129, FailureReason.PREEMPTED, "signal 1"),
    (143, FailureReason.PREEMPTED, "signal 15"),
])
def test_exit_codes_above_128_are_signals(code, reason, says):
    got, message = ContainerExit("p", "trainer", code, "Error").classify()
    assert got == reason and says in message


def test_the_reason_is_read_from_the_last_line_of_the_message():
    """A wrapper may print before the trainer writes its one JSON line: that line is last."""
    message = "wrapper: starting\n" + trainer_says("OutOfMemory", "40 GiB").strip() + "\n"
    e = ContainerExit("p", "trainer", 4, "Error", message)
    assert (e.trainer_reason, e.trainer_message) == ("OutOfMemory", "40 GiB")
    assert e.classify()[0] == FailureReason.OUT_OF_MEMORY


@pytest.mark.parametrize("status, reason, says", [
    # The reader keeps the kubelet's reason (OOMKilled) ...
    (_terminated(137, reason="OOMKilled"), FailureReason.OUT_OF_MEMORY, "OOMKilled"),
    # ... the trainer's own message ...
    (_terminated(3, message=trainer_says("ConfigError", "train.steps: not a number")),
     FailureReason.CONFIG_ERROR, "train.steps: not a number"),
    # ... and why a container cannot start.
    ({"name": "trainer", "state": {"waiting": {"reason": "CreateContainerConfigError",
                                               "message": 'secret "wandb" not found'}}},
     FailureReason.CONFIG_ERROR, 'secret "wandb" not found'),
    # A container that ran before and is waiting to start again: its last exit counts.
    ({"name": "trainer", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
      "lastState": {"terminated": {"exitCode": 6, "message": trainer_says("NaNLoss")}}},
     FailureReason.NAN_LOSS, "NaNLoss"),
])
def test_what_a_pod_says_reaches_the_explanation(status, reason, says):
    got = explain_failure(read_container_exits([_pod("p", statuses=[status])]))
    assert got.reason == reason and says in got.message
    assert (got.pod, got.container) == ("p", status["name"])


@pytest.mark.parametrize("labels, attempt", [
    ({}, 0),                                              # no label: the first attempt
    ({"jobset.sigs.k8s.io/restart-attempt": ""}, 0),
    ({"jobset.sigs.k8s.io/restart-attempt": "2"}, 2),
])
def test_restart_attempt_of_a_pod(labels, attempt):
    pod = {"metadata": {"name": "p", "labels": labels},
           "status": {"containerStatuses": [_terminated(1)]}}
    assert read_container_exits([pod])[0].restart_attempt == attempt


def test_an_unlabelled_pod_is_older_than_a_restarted_one():
    first = {"metadata": {"name": "first"},
             "status": {"containerStatuses": [_terminated(4, message=trainer_says("OutOfMemory"))]}}
    newer = _pod("newer", attempt=1, statuses=[_terminated(143)], disrupted=True)
    assert explain_failure(read_container_exits([first, newer]))[0] == FailureReason.PREEMPTED


def test_a_terminated_state_without_an_exit_code_is_no_failure():
    # exitCode is required by the API; a status read half-written must not count as a crash.
    pod = _pod("p", statuses=[{"name": "trainer", "state": {"terminated": {"reason": "Error"}}}])
    assert read_container_exits([pod]) == []


def test_a_checkpoint_at_step_zero_is_a_checkpoint():
    r = ProgressReading.from_document({"step": 0, "last_checkpoint_step": 0, "total_steps": 0})
    assert (r.last_checkpoint_step, r.total_steps) == (0, 0)


def test_a_long_phase_word_is_cut_to_what_the_status_holds():
    from tpujob.api.status import Progress

    phase = "restoring-checkpoint-" + "x" * 80
    reading = ProgressReading.from_document({"step": 1, "phase": phase})
    assert phase.startswith(reading.trainer_phase)
    Progress(step=1, trainer_phase=reading.trainer_phase)  # within the field's maxLength
    assert len(reading.trainer_phase) == Progress.model_fields["trainer_phase"].metadata[0].max_length


@pytest.mark.parametrize("view, field", [
    (JobSetState.missing(), "exists"),
    (ContainerExit("p", "trainer", 1), "exit_code"),
    (ProgressReading(step=1), "step"),
    (Unscheduled(1, 2, datetime(2026, 1, 1, tzinfo=UTC), "p", "m"), "pods"),
])
def test_the_views_cannot_be_changed_in_place(view, field):
    """The reconciler reads them once and hands them to `decide` and `act` alike."""
    from dataclasses import FrozenInstanceError

    with pytest.raises(FrozenInstanceError):
        setattr(view, field, None)


def _timeline_message(step: int, productive: float, **more) -> str:
    return json.dumps({"reason": "Preempted", "message": "SIGTERM", "goodput": {
        "attempt": "a1", "step": step, "steps": step, "seconds": {"productive": productive},
        **more}})


def test_final_timelines_are_read_where_the_kubelet_keeps_them():
    from tpujob.controller.trainer_reports import read_final_timelines

    # Process 0 restarted in place: its last exit is in lastState, after a line of its own.
    zero = {"name": "trainer", "state": {"running": {}}, "lastState": {"terminated": {
        "exitCode": 42, "message": "flushing\n" + _timeline_message(30, 20.0, process_index=0)}}}
    # A timeline that does not say whose it is: never taken for process 0's seconds.
    anonymous = _terminated(42, message=_timeline_message(31, 99.0))
    finals = read_final_timelines([_pod("a", statuses=[anonymous]), _pod("b", statuses=[zero])])
    assert [(f.step, f.seconds.productive if f.seconds else None) for f in finals] == \
        [(30, 20.0), (31, None)]


def _waiting(name: str, created: str | None) -> dict:
    meta = {"name": name, **({"creationTimestamp": created} if created else {})}
    return {"metadata": meta, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "message": f"no node for {name}"}]}}


def test_the_oldest_unscheduled_pod_speaks_and_one_without_a_date_comes_last():
    found = read_unscheduled([_waiting("b-undated", None), _waiting("c", "2026-01-01T10:00:00Z"),
                              _waiting("d", "2026-01-01T09:00:00Z")])
    assert (found.pods, found.of, found.pod, found.message) == (3, 3, "d", "no node for d")
    assert found.since == datetime(2026, 1, 1, 9, tzinfo=UTC)
    undated = read_unscheduled([_waiting("z", None), _waiting("a", None)])
    assert undated.pod == "a"   # by name among equals


def test_a_crash_message_keeps_its_last_500_characters():
    message = "x" * 100 + "y" * 500
    reason, says = ContainerExit("p", "trainer", 1, message=message).classify()
    assert reason == FailureReason.ERROR
    assert says == "pod p, container trainer exited 1: " + "y" * 500
