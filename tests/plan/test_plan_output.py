"""`tpujob plan` in process, as a user calls it: for GPU machine types the table, each machine's
details, the JSON and refusals naming the option; for TPU slices the whole output of one call."""

from __future__ import annotations

import json

import pytest

from tpujob.cli.main import main as tpujob

pytestmark = pytest.mark.unit

FOUR = ["a3-highgpu-8g", "a3-megagpu-8g", "a3-ultragpu-8g", "a4-highgpu-8g"]


def _plan(capsys, *args: str) -> tuple[int, str, str]:
    code = tpujob(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_four_machine_types_for_two_nodes(capsys):
    code, out, err = _plan(capsys, *FOUR, "--nodes", "2")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["MACHINE", "TYPE", "GPU", "NODES", "GPUS", "GPU/NODE",
                                "LAUNCHER", "PROCESSES", "MEM/GPU", "PEAK/GPU", "NETWORK"]
    rows = {line.split()[0]: line.split() for line in lines[1:5]}
    assert rows["a3-highgpu-8g"] == ["a3-highgpu-8g", "H100", "80GB", "2", "16", "8", "jax",
                                     "2", "79.6", "GiB", "989", "TFLOP/s", "TCPX", "x4"]
    assert rows["a3-megagpu-8g"][-2:] == ["TCPXO", "x8"]
    assert rows["a3-ultragpu-8g"][8:10] == ["140.4", "GiB"]
    assert rows["a4-highgpu-8g"][10:12] == ["2250", "TFLOP/s"]
    assert "a3-megagpu-8g x 2 (A3 Mega, H100 80GB; xpk --device-type h100-mega-80gb-8):" in out
    assert ("  processes       jax 2 (one per node)   <- planned, torchrun 16 (one per GPU), "
            "accelerate 16 (one per GPU)") in out
    assert "  node selector   cloud.google.com/gke-accelerator=nvidia-b200" in out
    assert "  resources       nvidia.com/gpu: 8 per node (one container)" in out
    assert ("  network         GPUDirect-TCPX, tcpx-daemon sidecar; GPU NICs on vpc1, vpc2, "
            "vpc3, vpc4") in out
    assert "GPUDirect RDMA, NCCL gIB plugin from the node; GPU NICs on rdma-0" in out


def test_a_launcher_a_mesh_and_a_model(capsys):
    code, out, err = _plan(capsys, "h200-141gb-8", "--nodes", "4", "--launcher", "torchrun",
                           "--ici", "fsdp=8", "--dcn", "data=4", "--params", "8B")
    assert code == 0, err
    assert out.splitlines()[1].split()[:8] == ["a3-ultragpu-8g", "H200", "141GB", "4", "32",
                                               "8", "torchrun", "32"]
    assert "torchrun 32 (one per GPU)   <- planned" in out
    assert "  mesh            valid: ici fsdp=8   dcn data=4   (any layout within a node)" in out
    assert "memory/device" in out and "of 133.38 GiB usable: fits" in out


def test_a_mesh_that_does_not_cover_a_node_is_refused(capsys):
    code, out, _ = _plan(capsys, "a3-megagpu-8g", "--nodes", "2", "--ici", "fsdp=4")
    assert code == 2
    assert "mesh            INVALID:" in out and "8" in out


def test_json(capsys):
    code, out, err = _plan(capsys, "b200-8", "v6e-8", "--nodes", "1", "-o", "json")
    assert code == 1  # v6e-8 takes no --nodes
    assert "error: --nodes: nodes counts GPU nodes" in err
    (plan,) = json.loads(out)
    assert {k: plan[k] for k in ("name", "requested", "xpkDeviceType", "acceleratorLabel",
                                 "nodes", "gpusPerNode", "totalGpus", "processes", "network",
                                 "gpuNics", "launchers")} == {
        "name": "a4-highgpu-8g", "requested": "b200-8", "xpkDeviceType": "b200-8",
        "acceleratorLabel": "nvidia-b200", "nodes": 1, "gpusPerNode": 8, "totalGpus": 8,
        "processes": 1, "network": "rdma", "gpuNics": 8,
        "launchers": {"jax": 1, "torchrun": 8, "accelerate": 8}}
    assert (plan["gpuMemoryPerGpuGiB"], plan["peakTflopsPerGpu"]) == (
        round(183359 / 1024, 3), 2250.0)
    assert plan["resources"] == {"requests": {"nvidia.com/gpu": "8"},
                                 "limits": {"nvidia.com/gpu": "8"}}


@pytest.mark.parametrize("args, says", [
    (["a3-megagpu-8g", "--slices", "2"], "--slices: a3-megagpu-8g is a GPU machine type"),
    (["a3-megagpu-8g", "--nodes", "0"], "--nodes: nodes must be a whole number from 1 to 1024"),
    (["v6e-8", "--launcher", "torchrun"], "--launcher: launcher torchrun starts processes"),
    (["a3-megagpu-8g", "--machine-type", "x"], "--machine-type: a3-megagpu-8g is itself"),
    (["v9z-8"], "error: unknown TPU generation 'v9z' in 'v9z-8'; known: v4, v5litepod, v5e, "
     "v5p, v6e, tpu7x"),
])
def test_refusals_name_the_option(capsys, args, says):
    code, _, err = _plan(capsys, *args)
    assert code == 1
    assert says in err


def test_the_table_is_aligned_numbers_right(capsys):
    code, out, err = _plan(capsys, "a3-highgpu-8g", "a4-highgpu-8g", "--nodes", "12",
                           "--launcher", "accelerate")
    assert code == 0, err
    assert out.splitlines()[:3] == [
        "MACHINE TYPE   GPU         NODES  GPUS  GPU/NODE  LAUNCHER    PROCESSES    MEM/GPU"
        "      PEAK/GPU  NETWORK",
        "a3-highgpu-8g  H100 80GB      12    96         8  accelerate         96   79.6 GiB"
        "   989 TFLOP/s  TCPX x4",
        "a4-highgpu-8g  B200 180GB     12    96         8  accelerate         96  179.1 GiB"
        "  2250 TFLOP/s  RDMA x8"]


@pytest.mark.parametrize("nodes, line", [
    ("1", "  mesh            valid: ici fsdp=8   (any layout within a node)"),
    ("2", "  mesh            valid: ici fsdp=8   dcn data=2   (any layout within a node)")])
def test_dcn_axes_are_shown_across_nodes(capsys, nodes, line):
    code, out, _ = _plan(capsys, "a3-highgpu-8g", "--nodes", nodes, "--ici", "fsdp=8")
    assert code == 0 and line in out.splitlines()


def test_a_slice_plan_reads_as_a_user_sees_it(capsys):
    """The TPU table and details, in process (the console-script tests above run a separate
    interpreter): every column in place, numbers right-aligned, both tpu7x layouts, the model's
    memory lines. A change of layout or of a planned figure shows here, line by line."""
    code, out, err = _plan(capsys, "v6e-16", "tpu7x-64", "--params", "8B", "--ici", "fsdp=-1")
    assert code == 0, err
    assert out.splitlines() == [
    'SLICE     TOPOLOGY  MACHINE TYPE       SLICES  HOSTS  CHIPS  DEVICES  DEV/HOST  PROCESSES   HBM/DEV        PEAK/DEV  WORKLOAD POLICY',
    'v6e-16    4x4       ct6e-standard-4t        1      4     16       16         4          4  29.8 GiB     918 TFLOP/s  -',
    'tpu7x-64  2x4x4     tpu7x-standard-4t       1      8     32       64         8          8  96.0 GiB  1153.5 TFLOP/s  tpu7x-64-2x4x4-placement-policy',
    '',
    'v6e-16 (v6e-4x4):',
    '  node selector   cloud.google.com/gke-tpu-accelerator=tpu-v6e-slice, cloud.google.com/gke-tpu-topology=4x4',
    '  resources       google.com/tpu: 4 per container',
    '  mesh            valid: ici fsdp=16   (physical 4x4x1)',
    '  model           ~8B: 7.94 B params, global batch 16, seq 2048, remat none',
    '  memory/device   20.27 GiB of 28.31 GiB usable: fits',
    '  breakdown       activations 10.65 GiB, optimizer 3.70 GiB, workspace 2.40 GiB, params 1.85 GiB, castWeights 0.89 GiB, outputLayer 0.50 GiB, logits 0.27 GiB',
    '',
    'tpu7x-64 (tpu7x-2x4x4):',
    '  layout          1 container(s) x 4 chips per host: 8 JAX processes (default)   <- planned',
    '  layout          2 container(s) x 2 chips per host: 16 JAX processes (opt-in: containersPerHost 2)',
    '  node selector   cloud.google.com/gke-tpu-accelerator=tpu7x, cloud.google.com/gke-tpu-topology=2x4x4, cloud.google.com/placement-policy-name=tpu7x-64-2x4x4-placement-policy',
    '  resources       google.com/tpu: 4 per container',
    '  mesh            valid: ici fsdp=64   (physical 2x4x4x2)',
    '  model           ~8B: 7.94 B params, global batch 64, seq 2048, remat none',
    '  memory/device   14.23 GiB of 91.20 GiB usable: fits',
    '  breakdown       activations 10.12 GiB, embeddingGradient 0.93 GiB, optimizer 0.92 GiB, workspace 0.83 GiB, outputLayer 0.50 GiB, params 0.46 GiB, logits 0.23 GiB, castWeights 0.22 GiB',
    ]


@pytest.mark.parametrize("n,text", [(7.94e9, "7.94 B"), (1.14e9, "1.14 B"), (1e8, "0.10 B"),
                                    (9.99e7, "99.9 M"), (1.2e7, "12 M"), (818_176, "0.818 M")])
def test_a_parameter_count_reads_in_billions_or_millions(n, text):
    from tpujob.cli.plan_render import params

    assert params(n) == text


def test_a_small_models_count_is_in_millions_on_the_plan(capsys, tmp_path):
    model = tmp_path / "small.yaml"
    model.write_text("model: {vocab_size: 1024, d_model: 256, n_layers: 2, n_heads: 4, "
                     "n_kv_heads: 2, head_dim: 128, mlp_dim: 512}\n")
    code, out, err = _plan(capsys, "v6e-8", "--model", str(model))
    assert code == 0, err
    [line] = [ln for ln in out.splitlines() if ln.startswith("  model ")]
    assert line.startswith("  model           small.yaml: ") and " M params, " in line, line


def test_a_zero_stage_plans_a_pytorch_programs_model_states(capsys):
    # The seed system's mistake in numbers: an 8B model under plain DDP on two A3 Mega nodes.
    code, out, err = _plan(capsys, "a3-megagpu-8g", "--nodes", "2", "--launcher", "accelerate",
                           "--params", "8B", "--zero", "0")
    assert code == 2, err
    lines = out.splitlines()
    assert "  model           ~8B: 7.94 B params, largest layer 135 M" in lines
    assert ("  model states    ZeRO stage 0 (no offload): 118.36 GiB per GPU of 79.65 GiB, "
            "before activations: DOES NOT FIT") in lines
    assert lines[-1] == "  to fit          stage: 1"
    assert "memory/device" not in out   # the built-in trainer's estimate is not this program's
    code, out, err = _plan(capsys, "a3-megagpu-8g", "--nodes", "2", "--launcher", "torchrun",
                           "--params", "8B", "--zero", "3", "--offload", "optimizer",
                           "-o", "json")
    assert code == 0, err
    (plan,) = json.loads(out)
    states = plan["modelStates"]
    assert states == {"zeroStage": 3, "offload": "optimizer", "parameters": states["parameters"],
                      "largestLayerParameters": states["largestLayerParameters"],
                      "perGpuGiB": states["perGpuGiB"], "fits": True}
    # 4 L + 2 P / 16, in GiB
    want = (4 * states["largestLayerParameters"] + 2 * states["parameters"] // 16) / 2**30
    assert states["perGpuGiB"] == round(want, 3) and 7.9e9 < states["parameters"] < 8e9


@pytest.mark.parametrize("args, says", [
    (["a3-megagpu-8g", "--params", "8B", "--zero", "1"], "--zero: a PyTorch program's ZeRO "
     "stage: plan it with --launcher torchrun or accelerate"),
    (["a3-megagpu-8g", "--launcher", "torchrun", "--zero", "1"], "--zero: needs the model's "
     "size: --params N or --model FILE|PRESET"),
    (["a3-megagpu-8g", "--launcher", "torchrun", "--params", "8B", "--offload", "optimizer"],
     "--offload: goes with --zero STAGE"),
    (["a3-megagpu-8g", "--launcher", "torchrun", "--params", "8B", "--zero", "2", "--offload",
      "parameters"], "--offload: offload parameters needs ZeRO stage 3"),
])
def test_zero_refusals_name_the_option(capsys, args, says):
    code, _, err = _plan(capsys, *args)
    assert code == 2
    assert says in err


def test_hbm_per_chip_and_per_device_in_gib(capsys):
    """The generations' HBM as Google's pages give it (tpu7x 192 GiB per chip of 2 devices,
    v5p 95 GiB, v6e 32 GB), in GiB to three places."""
    code, out, err = _plan(capsys, "tpu7x-8", "v5p-8", "v6e-8", "-o", "json")
    assert code == 0, err
    assert out.startswith('[\n  {\n    "name": "tpu7x-8",\n')   # indented by two
    assert [(p["name"], p["hbmPerChipGiB"], p["hbmPerDeviceGiB"]) for p in json.loads(out)] == [
        ("tpu7x-8", 192.0, 96.0), ("v5p-8", 95.0, 95.0),
        ("v6e-8", round(32e9 / 2**30, 3), round(32e9 / 2**30, 3))]


@pytest.mark.parametrize(("args", "mesh"), [
    (["v6e-8"], False),
    (["v6e-8", "--params", "1B"], False),       # planned for the memory, not asked for
    (["v6e-8", "--ici", "fsdp=-1"], True),
    (["v6e-16", "--slices", "2", "--dcn", "data=2"], True),
    (["v6e-8", "--params", "1B", "--ici", "fsdp=8"], True),
])
def test_the_mesh_is_in_the_json_where_one_was_asked_for(capsys, args, mesh):
    code, out, err = _plan(capsys, *args, "-o", "json")
    assert code == 0, err
    (plan,) = json.loads(out)
    assert ("mesh" in plan) == mesh
    assert ("memory" in plan) == ("--params" in args)


# (vocab, d_model, heads, mlp_dim) -> the largest module as DeepSpeed's estimator counts it.
@pytest.mark.parametrize(("vocab", "d_model", "heads", "mlp", "largest"), [
    (32000, 1024, 8, 4096, 32000 * 1024),     # the embedding
    (512, 1024, 8, 4096, 1024 * 4096),        # an MLP projection, wider than the embedding
    (512, 1024, 64, 2048, 1024 * 64 * 128),   # the attention's query projection
])
def test_the_largest_layer_is_the_widest_module(capsys, tmp_path, vocab, d_model, heads, mlp,
                                                largest):
    model = tmp_path / "m.yaml"
    model.write_text(json.dumps({"model": {
        "vocab_size": vocab, "d_model": d_model, "n_layers": 2, "n_heads": heads,
        "n_kv_heads": heads, "head_dim": 128, "mlp_dim": mlp}}))
    code, out, err = _plan(capsys, "a3-megagpu-8g", "--launcher", "torchrun", "--model",
                           str(model), "--zero", "3", "-o", "json")
    assert code == 0, err
    (plan,) = json.loads(out)
    assert plan["modelStates"]["largestLayerParameters"] == largest


@pytest.mark.parametrize(("args", "says"), [
    (["v6e-8", "--ici", "fsdp=x"], "error: --ici: size of 'fsdp' must be a whole number or -1, "
     "got 'x'\n"),
    (["v6e-8", "--dcn", "data"], "error: --dcn: expected AXIS=SIZE, got 'data'\n"),
    (["v6e-8", "--params", "lots"], "error: --params: expected a parameter count such as 8B, "
     "350M or 1.5e9, got 'lots'\n"),
    (["v6e-8", "--compile"], "error: --compile: needs a model to compile (--model FILE|PRESET "
     "or --params N)\n"),
])
def test_a_refused_request_names_its_option_once(capsys, args, says):
    code, _, err = _plan(capsys, *args)
    assert code == 2
    assert err == says
