"""Validation guarantees mutation testing (tools/mutation.py) found unpinned, and the issue's
examples: HBM is per device (tpu7x has 2 devices per chip), the figures in a refusal are in GiB,
and exits 3-7 (the trainer's deterministic failures) fail a job at once by default."""

from __future__ import annotations

import re

import pytest

from tpujob.api.resource import load_job
from tpujob.builders.jobset import build_jobset
from tpujob.validation import validate_job
from tpujob_plan.memory import estimate_memory
from tpujob_plan.slice_plan import plan_slice

pytestmark = pytest.mark.unit
LLAMA_70B = {"model": {"vocab_size": 128256, "d_model": 8192, "n_layers": 80, "n_heads": 64,
                       "n_kv_heads": 8, "head_dim": 128, "mlp_dim": 28672},
             "train": {"global_batch": 8, "seq_len": 8192}}


def _job(slice_name: str, config: dict) -> dict:
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
            "spec": {"slice": slice_name, "image": "trainer:1", "output": "gs://bucket/run",
                     "trainer": {"config": config}}}


def test_tpu7x_memory_is_checked_per_device_not_per_chip():
    # A tpu7x chip has 192 GiB of HBM over its 2 TensorCores: 96 GiB per JAX device. This model
    # needs about 183 GiB per device: it would fit in a chip's HBM, not a device's.
    plan = plan_slice("tpu7x-8")
    assert plan.slice_type.devices == 2 * plan.slice_type.chips
    verdict = validate_job(_job("tpu7x-8", LLAMA_70B))
    assert (verdict.reason, verdict.field) == ("OutOfMemory", "spec.trainer.config.model")
    needs = float(re.search(r"needs about ([0-9.]+) GiB per device", verdict.message)[1])
    usable = float(re.search(r"has ([0-9.]+) GiB usable", verdict.message)[1])
    assert usable < 96 < needs < 192
    # 95% of the device's 96 GiB, shown in GiB (2**30 bytes).
    assert usable == pytest.approx(96 * 0.95, abs=0.05)


def test_a_refusal_shows_the_biggest_parts_in_gib():
    verdict = validate_job(_job("v6e-4", LLAMA_70B))
    parts = dict((k, float(v)) for k, v in re.findall(r"(\w+) ([0-9.]+) GiB", verdict.message))
    # 70.6e9 parameters in float32 over 4 devices: 65.7 GiB each; Adam's two moments twice that.
    assert parts["params"] == pytest.approx(65.7, abs=0.1)
    assert parts["optimizer"] == pytest.approx(2 * parts["params"], abs=0.1)


@pytest.mark.parametrize("code", [1, 2, 3, 4, 5, 6, 7, 41, 43, 127, 128])
def test_by_default_deterministic_exits_fail_the_job_at_once(code):
    # 3 config, 4 out of memory, 5 data, 6 NaN loss, 7 mesh mismatch: the same again on a
    # restart, so FailJob; 42 (a lost peer) and signals restart.
    job = _job("v6e-16", {"train": {"steps": 10}})
    jobset = build_jobset(job, load_job(job).spec, plan_slice("v6e-16"))
    rules = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"]
    for rule in (r for r in rules if "onExitCodes" in r):
        assert rule["action"] == "FailJob" and rule["onExitCodes"]["operator"] == "NotIn"
        assert code not in rule["onExitCodes"]["values"]
        assert 42 in rule["onExitCodes"]["values"] and 143 in rule["onExitCodes"]["values"]


@pytest.mark.parametrize("length, valid", [(53, True), (54, False)])
def test_a_name_is_refused_exactly_when_a_pod_host_name_would_pass_63_characters(length, valid):
    # v6e-16 has 4 hosts: the last pod's host name is <name>-slice-0-3, 10 characters more.
    job = _job("v6e-16", {"train": {"steps": 10, "global_batch": 16}})
    job["metadata"]["name"] = "a" * length
    verdict = validate_job(job)
    assert verdict.valid is valid, verdict.message
    if not valid:
        assert verdict.field == "metadata.name" and "at most 53 characters" in verdict.message
        assert f"host names like '{'a' * length}-slice-0-3' must be at most 63" in \
            verdict.message


@pytest.mark.parametrize("ici, train, shards, micro", [
    ({"fsdp": 4, "expert": 4}, {"global_batch": 8}, 16, 8),
    ({"fsdp": -1}, {"global_batch": 16, "grad_accum": 2}, 16, 8),
    ({"data": 4, "fsdp": 4}, {"global_batch": 24}, 16, 24),
])
def test_a_micro_batch_must_split_over_data_fsdp_and_expert(ici, train, shards, micro):
    config = {"model": LLAMA_70B["model"] | {"vocab_size": 256, "d_model": 64, "n_layers": 2,
                                              "n_heads": 4, "n_kv_heads": 2, "head_dim": 16,
                                              "mlp_dim": 128},
              "train": {"seq_len": 64} | train}
    job = _job("v6e-16", config)
    job["spec"]["parallelism"] = {"ici": ici}
    verdict = validate_job(job)
    assert verdict.field == "spec.trainer.config.train.global_batch", verdict.message
    assert f"a batch of {micro} sequences" in verdict.message
    assert f"over the {shards} batch shards" in verdict.message


@pytest.mark.parametrize("length, valid", [(53, True), (54, False)])
def test_the_host_name_limit_counts_the_last_slices_index(length, valid):
    # 10 slices of v6e-16: the last pod is <name>-slice-9-3 (10 characters more), not -10-.
    job = _job("v6e-16", {"train": {"steps": 10, "global_batch": 160}})
    job["spec"]["slices"] = 10
    job["metadata"]["name"] = "a" * length
    verdict = validate_job(job)
    assert verdict.valid is valid, verdict.message


@pytest.mark.parametrize("length, shown", [(126, "a" * 126 + "'"), (127, "a" * 63 + "'...")])
def test_a_long_invalid_name_is_shown_whole_up_to_126_characters(length, shown):
    job = _job("v6e-16", {"train": {"steps": 10, "global_batch": 16}})
    job["metadata"]["name"] = "a" * length
    verdict = validate_job(job)
    assert verdict.field == "metadata.name"
    assert f"'{shown} is not a valid name" in verdict.message


def test_a_verdict_cannot_be_changed_once_made():
    # The operator keeps one verdict per job generation and hands it to every pass.
    import dataclasses

    verdict = validate_job(_job("v6e-16", {"train": {"steps": 10, "global_batch": 16}}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.valid = False


def test_a_mesh_refusal_names_its_field_once():
    job = _job("v6e-16", {"train": {"steps": 10, "global_batch": 16}})
    job["spec"]["parallelism"] = {"ici": {"fsdp": 8}}
    verdict = validate_job(job)
    assert verdict.field == "spec.parallelism.ici"
    assert verdict.message.startswith("spec.parallelism.ici: axes multiply to 8 but there "), \
        verdict.message


@pytest.mark.parametrize("remat, hint", [("full", False), ("none", True), ("auto", False)])
def test_an_out_of_memory_refusal_suggests_full_remat_only_when_not_already_full(remat, hint):
    config = {"model": LLAMA_70B["model"] | {"remat": remat}, "train": LLAMA_70B["train"]}
    verdict = validate_job(_job("v6e-4", config))
    assert verdict.reason == "OutOfMemory"
    assert verdict.message.endswith("a smaller batch or model.remat=full" if hint
                                    else "a smaller batch"), verdict.message


@pytest.mark.parametrize("param_dtype, dtype, param_bytes, compute_bytes", [
    ("float32", "bfloat16", 4, 2),
    ("float32", "float32", 4, 4),
    ("bfloat16", "bfloat16", 2, 2),
    ("bfloat16", "float32", 2, 4),
])
def test_the_memory_check_counts_the_bytes_of_the_configured_dtypes(
        param_dtype, dtype, param_bytes, compute_bytes):
    # The refusal's figure is the plan's estimate for exactly the dtypes the config names.
    from tpujob_trainer.config import TrainerConfig

    config = {"model": LLAMA_70B["model"] | {"param_dtype": param_dtype, "dtype": dtype,
                                             "remat": "none"},
              "train": LLAMA_70B["train"]}
    verdict = validate_job(_job("v6e-4", config))
    assert verdict.reason == "OutOfMemory"
    needs = float(re.search(r"needs about ([0-9.]+) GiB per device", verdict.message)[1])
    cfg = TrainerConfig.from_dict(config)
    expected = estimate_memory(
        cfg.model.to_shape(), global_batch=8, seq_len=8192, mesh=verdict.mesh.axes,
        remat="none", param_bytes=param_bytes, compute_bytes=compute_bytes,
        hbm_bytes=plan_slice("v6e-4").hbm_bytes_per_device, generation="v6e")
    assert needs == pytest.approx(expected.per_device_bytes / 2**30, abs=0.05)


def test_a_refused_maxtext_mesh_quotes_the_settings_it_read():
    job = _job("tpu7x-64", {})
    job["spec"]["trainer"] = {"command": ["python3", "-m", "maxtext.trainers.pre_train.train"],
                              "args": ["base.yml", "ici_fsdp_parallelism=8", "steps=5",
                                       "ici_tensor_parallelism=4", "ici_context_parallelism=2"]}
    verdict = validate_job(job)
    assert verdict.reason == "InvalidMesh"
    assert verdict.message.startswith(
        "spec.trainer.args: MaxText's ici_fsdp_parallelism=8 ici_tensor_parallelism=4 "
        "ici_context_parallelism=2: ici context=2 cannot be placed"), verdict.message


@pytest.mark.parametrize("length, says", [
    (63, "too long for this slice: pod host names like"),  # a DNS label, but no room left
    (64, "is not a valid name"),                            # not a DNS label at all
])
def test_a_name_at_the_dns_label_limit_is_refused_for_its_host_names_not_as_a_label(length, says):
    job = _job("v6e-16", {})
    job["metadata"]["name"] = "a" * length
    verdict = validate_job(job)
    assert (verdict.valid, verdict.field) == (False, "metadata.name")
    assert says in verdict.message, verdict.message
