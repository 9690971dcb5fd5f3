"""The real trainer preempted by the real Kueue: a low-priority training job is evicted for a
higher-priority one (its pods stopped with SIGTERM: the trainer saves a checkpoint), waits in
its queue, is admitted again when the quota frees, resumes from its checkpoint, and every step
after the resume has the loss of an uninterrupted run; the time it spent queued and the steps it
lost are in status.goodput."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import TINY, resumed_steps, stand_in, steps, unique
from tests.e2e.test_kueue_queues import Queues, event, namespace  # noqa: F401 (fixture)
from tests.support.apiserver import wait_for
from tpujob_trainer.checkpoint import StepDirs

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
CONTROL_PLANES = ("real",)
TOTAL = TINY["train"]["steps"]


def trainer_job(output: str, **scheduling) -> dict:
    job = {"slice": "v6e-8", "image": "trainer:1", "output": output,
           "trainer": {"config": TINY}, "parallelism": {"ici": {"fsdp": -1}},
           "data": {"kind": "synthetic"}, "restartPolicy": {"maxRestarts": 0}}
    return job | ({"scheduling": scheduling} if scheduling else {})


def test_a_preempted_training_job_resumes_from_its_checkpoint_with_an_uninterrupted_runs_losses(
        local, namespace, gcs_env):  # noqa: F811 (the fixture imported above)
    queues = Queues(local)
    try:
        flavor = queues.flavor("2x4")
        lq = queues.queue({flavor: 8})
        low, high = queues.priority("low", 100), queues.priority("high", 1000)

        reference = unique("ref")
        local.apply(reference, trainer_job(f"gs://tpujob-e2e/{reference}", queueName=lq,
                                           priority=low))
        done = local.wait_phase(reference, "Succeeded", "Failed", timeout=180)
        assert done["status"]["phase"] == "Succeeded", done["status"]
        [ref_log] = local.logs(reference)
        uninterrupted = steps(ref_log)

        name = unique("victim")
        output = f"gs://tpujob-e2e/{name}"
        local.apply(name, trainer_job(output, queueName=lq, priority=low))
        checkpoints = StepDirs(f"{output}/checkpoints")
        wait_for(lambda: checkpoints.complete_steps(quiet=True), timeout=120, interval=0.2,
                 message="a complete checkpoint")
        urgent = unique("urgent")
        local.apply(urgent, stand_in("import time; time.sleep(3)",
                                     scheduling={"queueName": lq, "priority": high}))
        local.wait(name, lambda s: (s.get("queue") or {}).get("state") == "Preempted",
                   timeout=90, message="the preemption")
        assert local.wait_phase(urgent, "Succeeded", "Failed", timeout=120)["status"][
            "phase"] == "Succeeded"
        job = local.wait_phase(name, "Succeeded", "Failed", timeout=180)
        status = job["status"]
        assert status["phase"] == "Succeeded", status
        assert status["queue"]["evictions"] == 1 and status["queue"]["state"] == "Admitted"
        assert status["progress"]["step"] == TOTAL

        # Host 0 ran twice: up to the preemption, then from the checkpoint it left.
        before, after, resume_from = resumed_steps(local, name)
        assert resume_from <= max(before) < TOTAL
        assert sorted(after) == list(range(resume_from + 1, TOTAL + 1))
        assert after == {s: uninterrupted[s] for s in after}
        assert before == {s: uninterrupted[s] for s in before}

        goodput = status["goodput"]
        assert goodput["attempts"] == 2
        if resume_from == max(before):
            # The trainer saved at SIGTERM: nothing was lost.
            assert goodput["lostSteps"] == 0, goodput
        else:
            # Its save at SIGTERM was cut short by the pods' grace period (local mode's e2e
            # executor gives 2 s; a loaded machine can take longer): the exit record that
            # counts the steps past the checkpoint was not written either, so the count can
            # only fall short, never exceed what was lost.
            assert 0 <= goodput["lostSteps"] <= max(before) - resume_from, goodput
        assert goodput["queuedSeconds"] > 0
        assert event(local, name, "Preempted")["type"] == "Warning"
        admitted = [e for e in local.events(name) if e["reason"] == "Admitted"]
        assert len(admitted) >= 1
    finally:
        queues.delete()
