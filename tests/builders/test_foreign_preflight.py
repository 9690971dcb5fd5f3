"""Pre-flight for a program of the job's own: MaxText's ici_*/dcn_* parallelism and batch
settings, read from command and args (xpk's one shell string too), checked against the slice
with the built-in trainer's mesh rule and messages; otherwise the verdict says what was not
checked."""

import pytest

from tpujob.maxtext_args import read_maxtext_settings
from tpujob.validation import validate_job

pytestmark = pytest.mark.unit
MAXTEXT = ["python3", "-m", "maxtext.trainers.pre_train.train", "maxtext/configs/base.yml"]


def _job(slice_name="tpu7x-64", command=MAXTEXT, args=(), slices=1) -> dict:
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "mt", "namespace": "ns", "uid": "u"},
            "spec": {"slice": slice_name, "slices": slices, "image": "maxtext:1",
                     "output": "gs://bucket/run",
                     "trainer": {"command": list(command), "args": list(args)}}}


@pytest.mark.parametrize("words, ici, dcn, unchecked, batch, accum", [
    (["ici_fsdp_parallelism=16", "ici_tensor_parallelism=4", "per_device_batch_size=1"],
     {"fsdp": 16, "tensor": 4}, {"data": -1}, {}, 1.0, 1),
    (["bash", "-c", "python3 -m maxtext.train base.yml ici_fsdp_parallelism=-1 "
      "dcn_data_parallelism=2 --per_device_batch_size=0.5 gradient_accumulation_steps=4"],
     {"fsdp": -1}, {"data": 2}, {}, 0.5, 4),
    (["ici_pipeline_parallelism=2", "ici_sequence_parallelism=1"], {"fsdp": -1}, {"data": -1},
     {"ici_pipeline": 2}, None, 1),
    (["python", "train.py", "--lr=3e-4"], {"fsdp": -1}, {"data": -1}, {}, None, 1),
    # Unbalanced quotes (no shell would run it, but the check still reads it word by word).
    (["bash", "-c", "python3 -m maxtext.train ici_fsdp_parallelism=4 run_name=it's"],
     {"fsdp": 4}, {"data": -1}, {}, None, 1),
])
def test_read_settings(words, ici, dcn, unchecked, batch, accum):
    mt = read_maxtext_settings(words)
    assert (mt.ici, mt.dcn, mt.unchecked, mt.per_device_batch_size, mt.grad_accum) == \
        (ici, dcn, unchecked, batch, accum)


@pytest.mark.parametrize("args, reason, says", [
    # The reported tpu7x-64 case: the same rule and message as spec.parallelism gets.
    (["ici_fsdp_parallelism=8", "ici_tensor_parallelism=4", "ici_context_parallelism=2"],
     "InvalidMesh", "ici context=2 cannot be placed on the physical mesh 2x4x4x2"),
    (["ici_fsdp_parallelism=8", "ici_tensor_parallelism=4", "ici_context_parallelism=2"],
     "InvalidMesh", "valid layouts: fsdp=16,tensor=4"),
    (["ici_fsdp_parallelism=16"], "InvalidMesh", "multiply to 16 but there are 64"),
    (["ici_fsdp_parallelism=-1", "ici_tensor_parallelism=-1"], "InvalidMesh", "only one axis"),
    (["per_device_batch_size=0.25"], "InvalidBatch",
     "batch of 16 sequences (per_device_batch_size x devices / gradient_accumulation_steps) "
     "that must split evenly over the 64 batch shards"),
    (["per_device_batch_size=1", "gradient_accumulation_steps=3"], "InvalidBatch",
     "batch of 21.3333"),
    (["per_device_batch_size=lots"], "InvalidMesh", "per_device_batch_size must be a number"),
])
def test_maxtext_settings_refused(args, reason, says):
    verdict = validate_job(_job(args=args))
    assert not verdict.valid
    assert (verdict.reason, verdict.field) == (reason, "spec.trainer.args")
    assert says in verdict.message


@pytest.mark.parametrize("command, args, checked", [
    # The reported run: fsdp=16, tensor=4 on tpu7x-64, per-device batch 1.
    (MAXTEXT, ["ici_fsdp_parallelism=16", "ici_tensor_parallelism=4", "per_device_batch_size=1"],
     "slice, MaxText's mesh and batch (from args) checked; memory not checked"),
    (["bash", "-c", " ".join(MAXTEXT + ["ici_fsdp_parallelism=16", "ici_tensor_parallelism=4"])],
     [], "slice and MaxText's mesh (from args) checked; memory not checked"),
    (["python3", "grpo.py"], ["--lr=1e-6"],
     "mesh, batch and memory not checked: the command and args hold no MaxText"),
    (MAXTEXT, ["ici_pipeline_parallelism=4", "ici_fsdp_parallelism=16"],
     "mesh and batch not checked: ici_pipeline_parallelism=4 is an axis the check does not"),
])
def test_what_was_checked_is_said(command, args, checked):
    verdict = validate_job(_job(command=command, args=args))
    assert verdict.valid, verdict.message
    assert checked in verdict.checked


def test_the_valid_condition_says_what_was_checked():
    from datetime import UTC, datetime

    from tpujob.api.status import TpuTrainingJobStatus, find_condition
    from tpujob.controller.decide import Observation, decide
    from tpujob.controller.observe import JobSetState

    verdict = validate_job(_job(command=["python3", "grpo.py"]))
    d = decide(TpuTrainingJobStatus(), Observation(
        now=datetime(2026, 11, 1, tzinfo=UTC), generation=1, verdict=verdict,
        jobset=JobSetState.missing()))
    valid = find_condition(d.status.conditions, "Valid")
    assert valid.status == "True" and "mesh, batch and memory not checked" in valid.message
