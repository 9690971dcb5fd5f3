"""The admission review: impossible jobs and changes a running job cannot take are refused
with the field at fault; everything else is admitted."""

import copy

import pytest

from tpujob.controller.admission import review

pytestmark = pytest.mark.unit
TINY = {"model": {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4,
                  "n_kv_heads": 2, "head_dim": 16, "mlp_dim": 128},
        "train": {"steps": 10, "global_batch": 16, "seq_len": 64}}


def job(phase=None, **spec):
    obj = {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
           "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
           "spec": {"slice": "v6e-16", "image": "trainer:1", "output": "gs://bucket/run",
                    "trainer": {"config": TINY}} | spec}
    if phase:
        obj["status"] = {"phase": phase}
    return obj


@pytest.mark.parametrize("new, old, refused_with", [
    (job(), None, None),
    (job(slice="v6e-12"), None, "spec.slice"),
    (job(parallelism={"ici": {"tensor": 3}}), None, "spec.parallelism"),
    (job(image="trainer:2"), job("Running"), "spec.image"),
    (job(image="trainer:2", suspend=True), job("Running"), None),
    (job(image="trainer:2"), job("Running", suspend=True), None),
    (job(image="trainer:2"), job("Pending"), None),
    (job(image="trainer:2"), job("Succeeded"), None),
    (job(stallTimeoutSeconds=5, suspend=False), job("Running"), None),
    (job(restartPolicy={"maxRestarts": 9}), job("Starting"), "spec.restartPolicy"),
    # Kueue's priority: changed on a running job (the operator patches the label), never
    # added to or removed from one (Kueue refuses both).
    (job(scheduling={"queueName": "q", "priority": "high"}),
     job("Running", scheduling={"queueName": "q", "priority": "low"}), None),
    (job(scheduling={"queueName": "q", "priority": "high"}),
     job("Running", scheduling={"queueName": "q"}),
     "spec.scheduling.priority cannot be added while the job is Running (Kueue refuses it for an "
     "admitted job); set spec.suspend to true in the same change"),
    (job(scheduling={"queueName": "q"}),
     job("Running", scheduling={"queueName": "q", "priority": "low"}),
     "spec.scheduling.priority cannot be removed while the job is Running (Kueue refuses it for "
     "an admitted job); set it to another WorkloadPriorityClass"),
    (job(scheduling={"queueName": "q", "priority": "high"}),
     job("Queued", scheduling={"queueName": "q"}), None),
    (job(scheduling={"queueName": "q", "unscheduledWarningSeconds": 60}),
     job("Starting", scheduling={"queueName": "q"}), None),
])
def test_review(new, old, refused_with):
    verdict = review(copy.deepcopy(new), copy.deepcopy(old) if old else None)
    if refused_with is None:
        assert verdict is None
    else:
        assert verdict is not None and refused_with in verdict
