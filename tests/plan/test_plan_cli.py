"""`tpujob plan` through its real console script, as a user runs it."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REQUIRED_KEYS = {"name", "generation", "acceleratorLabel", "machineType", "topology", "chips",
                 "hosts", "chipsPerHost", "containersPerHost", "chipsPerContainer", "devices",
                 "devicesPerHost", "processes", "hbmPerDeviceGiB", "peakTflopsPerDevice",
                 "workloadPolicy"}


def tpujob(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("tpujob", path=os.path.dirname(sys.executable)) or "tpujob"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)


def test_json_for_three_slices():
    r = tpujob("plan", "v6e-16", "tpu7x-64", "v5p-128", "--output", "json")
    assert r.returncode == 0, r.stderr
    plans = json.loads(r.stdout)
    assert [p["name"] for p in plans] == ["v6e-16", "tpu7x-64", "v5p-128"]
    for p in plans:
        assert REQUIRED_KEYS <= set(p)
        assert "mesh" not in p and "memory" not in p  # only when asked for
    v6e, tpu7x, v5p = plans
    assert (v6e["hosts"], v6e["chips"], v6e["devices"], v6e["processes"]) == (4, 16, 16, 4)
    assert (tpu7x["hosts"], tpu7x["chips"], tpu7x["devices"], tpu7x["processes"]) == (8, 32, 64, 8)
    assert (tpu7x["containersPerHost"], tpu7x["chipsPerContainer"]) == (1, 4)
    # Both layouts, with their process counts: the default and the two-container opt-in.
    assert tpu7x["layouts"] == [
        {"containersPerHost": 1, "chipsPerContainer": 4, "processes": 8},
        {"containersPerHost": 2, "chipsPerContainer": 2, "processes": 16}]
    assert v6e["layouts"] == [{"containersPerHost": 1, "chipsPerContainer": 4, "processes": 4}]
    assert tpu7x["workloadPolicy"] == "tpu7x-64-2x4x4-placement-policy"
    assert tpu7x["hbmPerDeviceGiB"] == 96.0
    assert (v5p["topology"], v5p["hosts"], v5p["workloadPolicy"]) == ("4x4x4", 16, None)


def test_table_shows_both_tpu7x_layouts():
    r = tpujob("plan", "tpu7x-64", "--containers-per-host", "2")
    assert r.returncode == 0, r.stderr
    header, row = r.stdout.splitlines()[:2]
    column = header.index("PROCESSES")
    assert row[column:column + len("PROCESSES")].strip() == "16"
    assert "1 container(s) x 4 chips per host: 8 JAX processes (default)" in r.stdout
    assert ("2 container(s) x 2 chips per host: 16 JAX processes (opt-in: containersPerHost 2)"
            "   <- planned") in r.stdout
    refused = tpujob("plan", "v6e-16", "--containers-per-host", "2")
    assert refused.returncode == 1 and "runs 1 container(s) per host, got 2" in refused.stderr


def test_invalid_mesh_is_explained_with_a_valid_alternative():
    r = tpujob("plan", "tpu7x-64", "--ici", "fsdp=8,tensor=4,context=2")
    assert r.returncode == 2
    assert "INVALID" in r.stdout and "context=2" in r.stdout
    assert "--ici fsdp=16,tensor=4" in r.stdout


def test_valid_mesh_in_json():
    r = tpujob("plan", "tpu7x-64", "--ici", "fsdp=16,tensor=4", "-o", "json")
    assert r.returncode == 0, r.stderr
    mesh = json.loads(r.stdout)[0]["mesh"]
    assert mesh["valid"] is True and mesh["error"] is None
    assert mesh["axes"] == {"data": 1, "fsdp": 16, "context": 1, "tensor": 4, "expert": 1}


def test_invalid_names_exit_nonzero_and_valid_ones_still_print():
    r = tpujob("plan", "v6e-12", "v6e-16", "-o", "json")
    assert r.returncode == 1
    assert [p["name"] for p in json.loads(r.stdout)] == ["v6e-16"]
    assert "v6e-12" in r.stderr and "Valid v6e sizes: v6e-1, v6e-4, v6e-8, v6e-16" in r.stderr


@pytest.mark.parametrize("name", ["v5p-7", "tpu7x-3", "v9-8", "v6e-", ""])
def test_invalid_names_alone(name):
    r = tpujob("plan", name)
    assert r.returncode == 1
    assert r.stderr.startswith("error: ")
    assert "Traceback" not in r.stderr


def test_table_is_aligned_with_units():
    r = tpujob("plan", "v6e-16", "tpu7x-64", "v5e-8")
    assert r.returncode == 0, r.stderr
    header, *rows = r.stdout.split("\n\n")[0].splitlines()
    assert header.split()[:2] == ["SLICE", "TOPOLOGY"] and len(rows) == 3
    # Right-aligned numeric columns end at the same place on every line.
    end = header.index("PROCESSES") + len("PROCESSES")
    assert all(row[end - 1].isdigit() for row in rows)
    assert "GiB" in rows[0] and "TFLOP/s" in rows[0]


def test_model_that_does_not_fit(tmp_path: Path):
    r = tpujob("plan", "tpu7x-8", "--model", "mixtral-8x7b", "--batch", "16", "--seq", "8192",
               "-o", "json")
    assert r.returncode == 2
    memory = json.loads(r.stdout)[0]["memory"]
    assert memory["fits"] is False
    assert memory["perDeviceGiB"] > memory["usableGiB"]
    assert {"params", "optimizer", "activations", "logits", "outputLayer",
            "workspace"} <= set(memory["breakdown"])


def test_model_from_a_trainer_config_file(tmp_path: Path):
    config = tmp_path / "job.yaml"
    config.write_text("model:\n  vocab_size: 32000\n  d_model: 2048\n  n_layers: 16\n"
                      "  n_heads: 16\n  n_kv_heads: 4\n  head_dim: 128\n  mlp_dim: 8192\n"
                      "train:\n  global_batch: 64\n  seq_len: 4096\n")
    r = tpujob("plan", "v6e-16", "--model", str(config), "-o", "json")
    assert r.returncode == 0, r.stderr
    memory = json.loads(r.stdout)[0]["memory"]
    assert memory["fits"] is True
    assert (memory["globalBatch"], memory["seqLen"]) == (64, 4096)


def test_bad_model_file_names_the_field(tmp_path: Path):
    config = tmp_path / "bad.yaml"
    config.write_text("model:\n  d_model: -4\n  n_layerz: 3\n")
    r = tpujob("plan", "v6e-16", "--model", str(config))
    assert r.returncode == 2
    assert "model.d_model" in r.stderr and "model.n_layerz" in r.stderr


def test_params_shorthand():
    r = tpujob("plan", "v5p-128", "--params", "70B", "--seq", "4096", "-o", "json")
    assert r.returncode == 0, r.stderr
    memory = json.loads(r.stdout)[0]["memory"]
    assert 60e9 < memory["params"] < 80e9
    r = tpujob("plan", "v5p-128", "--params", "lots")
    assert r.returncode == 2 and "--params" in r.stderr


def test_multislice():
    r = tpujob("plan", "v6e-16", "--slices", "2", "--ici", "fsdp=-1", "-o", "json")
    p = json.loads(r.stdout)[0]
    assert (p["slices"], p["processes"], p["totalDevices"]) == (2, 8, 32)
    assert p["mesh"]["dcn"]["data"] == 2 and p["mesh"]["axes"]["data"] == 2


def test_a_reader_that_goes_away_ends_it_quietly():
    # `tpujob plan ... | head`: the pipe's reader is gone before anything is written.
    exe = shutil.which("tpujob", path=os.path.dirname(sys.executable)) or "tpujob"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run([exe, "plan", "v6e-16", "tpu7x-64", "v5p-128"], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert result.stderr == ""
    assert result.returncode == 141


def test_plan_and_the_operator_refuse_the_same_batch():
    from tpujob.validation import validate_job
    message = ("a batch of 6 sequences (global_batch / grad_accum) must split evenly over the "
               "16 batch shards (data x fsdp x expert = fsdp=16); use a multiple of 16")
    planned = tpujob("plan", "v6e-16", "--model", "llama3-8b", "--batch", "6", "--seq", "1024")
    assert planned.returncode == 2
    assert f"batch           INVALID: {message}" in planned.stdout
    verdict = validate_job({
        "apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"slice": "v6e-16", "image": "t:1", "output": "gs://bucket/run",
                 "trainer": {"config": {"model": {"vocab_size": 256, "d_model": 64,
                                                  "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                                                  "head_dim": 16, "mlp_dim": 128},
                                        "train": {"steps": 10, "global_batch": 6,
                                                  "seq_len": 64}}}}})
    assert (verdict.reason, verdict.message) == (
        "InvalidBatch", f"spec.trainer.config.train.global_batch: {message}")
    assert tpujob("plan", "v6e-16", "--model", "llama3-8b", "--batch", "16", "--seq",
                  "1024").returncode == 0


@pytest.mark.parametrize("remat, hint", [
    ("full", "more fsdp/tensor sharding, a larger slice, a smaller batch, or gradient "
             "accumulation"),
    ("none", "more fsdp/tensor sharding, a larger slice, remat full, a smaller batch, or "
             "gradient accumulation"),
])
def test_the_fit_hint_leaves_out_what_the_plan_already_uses(remat, hint):
    from tpujob.cli.plan_render import fit_hints
    assert fit_hints(remat) == hint
    planned = tpujob("plan", "v6e-16", "--model", "llama3-8b", "--batch", "128", "--seq", "8192",
                     "--remat", remat)
    assert planned.returncode == 2 and f"  to fit          {hint}" in planned.stdout
