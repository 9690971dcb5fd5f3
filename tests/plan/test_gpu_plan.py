"""GPU node plans: the four GKE GPU machine types as xpk describes them, the processes each
launcher runs, and the refusals of fields that belong to the other kind of hardware."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from tpujob_plan.errors import PlanError
from tpujob_plan.gpu_catalog import GPU_MACHINES, GpuNetwork, is_gpu_name, resolve_gpu
from tpujob_plan.gpu_plan import GPU_RESOURCE, Launcher, plan_gpu
from tpujob_plan.hardware import plan_hardware
from tpujob_plan.slice_plan import SlicePlan

pytestmark = pytest.mark.unit

XPK = Path(__file__).resolve().parents[1] / "builders" / "xpk_gpu"

# machine type, xpk device type, accelerator label, GPUs per node, GPU memory (MiB, as
# nvidia-smi reports its total on each GPU), network,
# GPU NICs (xpk: system_characteristics.py and the workload decorators, commit 367c838), dense
# bf16 TFLOP/s per GPU (NVIDIA's data sheets: H100 and H200 SXM 989, B200 2250).
MACHINES = [
    ("a3-highgpu-8g", "h100-80gb-8", "nvidia-h100-80gb", 8, 81559, GpuNetwork.TCPX, 4, 989),
    ("a3-megagpu-8g", "h100-mega-80gb-8", "nvidia-h100-mega-80gb", 8, 81559, GpuNetwork.TCPXO, 8,
     989),
    ("a3-ultragpu-8g", "h200-141gb-8", "nvidia-h200-141gb", 8, 143771, GpuNetwork.RDMA, 8, 989),
    ("a4-highgpu-8g", "b200-8", "nvidia-b200", 8, 183359, GpuNetwork.RDMA, 8, 2250),
]


@pytest.mark.parametrize("name, device_type, label, gpus, memory_mib, network, nics, peak",
                         MACHINES)
def test_each_machine_type_by_either_name(name, device_type, label, gpus, memory_mib, network,
                                          nics, peak):
    for alias in (name, device_type, f" {device_type.upper()} "):
        machine = resolve_gpu(alias)
        assert machine.name == name
        assert is_gpu_name(alias)
    assert (machine.device_type, machine.accelerator_label, machine.gpus_per_node,
            machine.gpu_memory_bytes, machine.network, machine.gpu_nics,
            machine.peak_bf16_tflops_per_gpu) == (
        device_type, label, gpus, memory_mib << 20, network, nics, peak)
    # Facts and plans are values: nothing downstream can change them.
    with pytest.raises(dataclasses.FrozenInstanceError):
        machine.gpus_per_node = 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan_gpu(name).nodes = 3


@pytest.mark.parametrize("device_type", [m.device_type for m in GPU_MACHINES])
def test_what_xpk_renders_for_the_machine_type_is_what_the_plan_says(device_type):
    """xpk's own dry-run JobSet for 2 nodes: one Job of 2 pods, 8 GPUs a pod, its network."""
    jobset = yaml.safe_load((XPK / f"{device_type}.yaml").read_text())
    plan = plan_gpu(device_type, nodes=2)
    job = jobset["spec"]["replicatedJobs"][0]
    pod = job["template"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert job["replicas"] == plan.slices
    assert job["template"]["spec"]["parallelism"] == plan.hosts
    assert job["template"]["spec"]["completions"] == plan.hosts
    assert str(pod["containers"][0]["resources"]["limits"][GPU_RESOURCE]) == \
        plan.container_resources["limits"][GPU_RESOURCE]
    assert env["NNODES"] == str(plan.nodes)
    assert env["GPUS_PER_NODE"] == str(plan.devices_per_host)
    assert env["USE_GPUDIRECT"] == plan.machine.network.value


@pytest.mark.parametrize("launcher, per_node", [
    (Launcher.JAX, 1), (Launcher.TORCHRUN, 8), (Launcher.ACCELERATE, 8), ("torchrun", 8)])
@pytest.mark.parametrize("nodes", [1, 2, 16, 1024])
def test_processes_per_launcher(launcher, per_node, nodes):
    plan = plan_gpu("a3-megagpu-8g", nodes=nodes, launcher=launcher)
    assert plan.processes_per_node == per_node
    assert plan.processes == nodes * per_node
    assert plan.devices == nodes * 8
    assert plan.devices_per_process == 8 // per_node
    assert (plan.hosts, plan.slices, plan.containers_per_host) == (nodes, 1, 1)
    assert (plan.mesh_granule_devices, plan.mesh_granules) == (8, nodes)
    assert plan.topology == f"{nodes}x8"
    assert plan.workload_policy is None
    assert plan.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}
    assert plan.container_resources == {"requests": {GPU_RESOURCE: "8"},
                                        "limits": {GPU_RESOURCE: "8"}}


def test_peak_and_memory_per_device():
    b200 = plan_gpu("a4-highgpu-8g")
    h100 = plan_gpu("a3-highgpu-8g")
    assert b200.peak_tflops_per_device == 2250.0
    assert h100.peak_tflops_per_device == 989.0
    assert h100.hbm_bytes_per_device == 81559 * 2**20  # nvidia-smi's total
    assert h100.memory_generation is None  # the estimate's largest allowance


@pytest.mark.parametrize("kwargs, field, words", [
    ({"name": "a3-megagpu-16g"}, "slice", "not a GPU machine type"),
    ({"name": "a3-megagpu-8g", "nodes": 0}, "nodes", "from 1 to 1024, got 0"),
    ({"name": "a3-megagpu-8g", "nodes": 1025}, "nodes", "from 1 to 1024"),
    ({"name": "a3-megagpu-8g", "nodes": True}, "nodes", "whole number"),
    ({"name": "a3-megagpu-8g", "launcher": "mpirun"}, "launcher",
     "use one of jax, torchrun, accelerate"),
])
def test_gpu_plan_refusals(kwargs, field, words):
    with pytest.raises(PlanError) as refused:
        plan_gpu(**kwargs)
    assert refused.value.field == field
    assert words in refused.value.message


@pytest.mark.parametrize("kwargs, field, words", [
    ({"name": "a3-megagpu-8g", "slices": 2}, "slices", "count its nodes with nodes"),
    ({"name": "a3-megagpu-8g", "machine_type": "a3-megagpu-8g"}, "machineType",
     "remove machineType"),
    ({"name": "a3-megagpu-8g", "containers_per_host": 2}, "containersPerHost", "must be 1"),
    ({"name": "v6e-16", "nodes": 2}, "nodes", "a TPU slice's hosts follow from its size"),
    ({"name": "v6e-16", "launcher": "torchrun"}, "launcher", "TPU slice runs JAX processes"),
    ({"name": "v6e-16", "launcher": Launcher.ACCELERATE}, "launcher", "launcher accelerate"),
])
def test_fields_of_the_other_kind_are_refused(kwargs, field, words):
    with pytest.raises(PlanError) as refused:
        plan_hardware(**kwargs)
    assert refused.value.field == field
    assert words in refused.value.message


def test_plan_hardware_dispatches_on_the_name():
    assert plan_hardware("a3-ultragpu-8g", nodes=3).is_gpu
    assert plan_hardware("h200-141gb-8").nodes == 1
    tpu = plan_hardware("v6e-16", slices=2, launcher=Launcher.JAX)
    assert isinstance(tpu, SlicePlan) and not tpu.is_gpu
    assert (tpu.mesh_granule_devices, tpu.mesh_granules, tpu.name, tpu.topology) == (
        16, 2, "v6e-16", "4x4")
    assert tpu.memory_generation == "v6e"
