"""GPU jobs through the path a user takes (`validate_job`, then the JobSet the operator builds):
each machine type's pod beside the JobSet xpk renders for it (`xpk workload create --dry-run
--device-type TYPE --num-nodes 2`, xpk commit 367c838, in xpk_gpu/), the launchers' command lines
and wiring, and the refusals of the misconfigurations that make a multi-node GPU job train as
something else (two 8-GPU machines configured as one of 16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tpujob.builders.jobset import build_jobset
from tpujob.controller.decide import _slice_status
from tpujob.validation import validate_job
from tpujob_plan.gpu_catalog import GPU_MACHINES

pytestmark = pytest.mark.unit

XPK = Path(__file__).resolve().parent / "xpk_gpu"
TINY = {"model": {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4,
                  "n_kv_heads": 2, "head_dim": 16, "mlp_dim": 128},
        "train": {"steps": 10, "global_batch": 16, "seq_len": 64}}
MASTER = "run-slice-0-0.run"
MASTER_PORT = 29500  # torchrun's and accelerate's default


def _job(**spec) -> dict:
    base = {"slice": "a3-megagpu-8g", "nodes": 2, "image": "trainer:1",
            "output": "gs://bucket/run",
            "trainer": {"launcher": "torchrun", "command": ["python3", "train.py"]}}
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "run", "namespace": "ns", "uid": "u"}, "spec": base | spec}


def _jobset(job: dict) -> dict:
    verdict = validate_job(job)
    assert verdict.valid, verdict.message
    return build_jobset(job, verdict.job.spec, verdict.plan)


def _pod_template(jobset: dict) -> dict:
    return jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


def _xpk_template(device_type: str) -> dict:
    return _pod_template(yaml.safe_load((XPK / f"{device_type}.yaml").read_text()))


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _by_name(items: list[dict]) -> dict:
    return {i["name"]: i for i in items or []}


@pytest.mark.parametrize("machine", GPU_MACHINES, ids=[m.name for m in GPU_MACHINES])
def test_the_pod_carries_every_network_piece_xpk_renders(machine):
    ours = _pod_template(_jobset(_job(slice=machine.name, trainer={
        "command": ["python3", "train.py"]})))
    theirs = _xpk_template(machine.device_type)
    pod, xpk_pod = ours["spec"], theirs["spec"]
    trainer, xpk_trainer = pod["containers"][0], xpk_pod["containers"][0]
    # The same sidecars, byte for byte but for imagePullPolicy (the image's tag is pinned).
    sidecars = [{k: v for k, v in c.items() if k != "imagePullPolicy"}
                for c in xpk_pod.get("initContainers") or []]
    assert pod.get("initContainers", []) == sidecars
    # The same host folders, under the same volume names (the shared-memory size aside).
    host = {v["name"]: v["hostPath"] for v in xpk_pod["volumes"] if "hostPath" in v}
    assert {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v} == host
    # Every mount xpk gives its container, the trainer has.
    mounts = {(m["name"], m["mountPath"]) for m in trainer["volumeMounts"]}
    assert {(m["name"], m["mountPath"]) for m in xpk_trainer["volumeMounts"]} <= mounts
    # Every variable of xpk's network stack, with its value.
    for name in ("USE_GPUDIRECT", "LD_LIBRARY_PATH", "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY",
                 "NNODES", "GPUS_PER_NODE"):
        assert _env(trainer).get(name) == _env(xpk_trainer).get(name), name
    assert _env(trainer)["NODE_RANK"] == _env(xpk_trainer)["NODE_RANK"]
    # The sidecar's devices annotation, and the default interface.
    annotations, xpk_annotations = ours["metadata"]["annotations"], theirs["metadata"][
        "annotations"]
    for key, value in xpk_annotations.items():
        if key.startswith("devices.gke.io/") or key.endswith("default-interface"):
            assert annotations[key] == value, key
    # Tolerations: xpk's two (GPU taint, xpk's user-workload taint), effect spelt out.
    for toleration in xpk_pod["tolerations"]:
        assert any({k: v for k, v in t.items() if k in toleration} == toleration
                   for t in pod["tolerations"]), toleration
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == str(
        xpk_trainer["resources"]["limits"]["nvidia.com/gpu"])
    # Differences on purpose: the node's accelerator is selected (xpk leaves it to Kueue's
    # flavor), the trainer is not privileged, no host network (as xpk).
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator":
                                   machine.accelerator_label}
    assert "securityContext" not in trainer and xpk_trainer["securityContext"] == {
        "privileged": True}
    assert pod["hostNetwork"] is False and "hostNetwork" not in xpk_pod


def test_tcpx_interfaces_are_xpks_and_the_others_name_the_gke_networks():
    tcpx = _pod_template(_jobset(_job(slice="a3-highgpu-8g")))["metadata"]["annotations"]
    xpk = _xpk_template("h100-80gb-8")["metadata"]["annotations"]
    key = "networking.gke.io/interfaces"
    assert json.loads(tcpx[key]) == json.loads(xpk[key])
    rdma = _pod_template(_jobset(_job(slice="a4-highgpu-8g")))["metadata"]["annotations"]
    assert [i["network"] for i in json.loads(rdma[key])] == [
        "default", *(f"rdma-{i}" for i in range(8))]
    own = _pod_template(_jobset(_job(slice="a3-megagpu-8g", gpuNetworks=[
        f"gpu-net-{i}" for i in range(8)])))["metadata"]["annotations"]
    assert [i["interfaceName"] for i in json.loads(own[key])] == [f"eth{i}" for i in range(9)]
    assert json.loads(own[key])[8]["network"] == "gpu-net-7"


def test_gpu_pods_tolerate_the_gpu_taints_and_their_capacity_not_a_tpus():
    pod = _pod_template(_jobset(_job(scheduling={"capacity": {"type": "Spot"}})))["spec"]
    keys = [t["key"] for t in pod["tolerations"]]
    assert keys[:2] == ["nvidia.com/gpu", "user-workload"]
    assert "cloud.google.com/gke-spot" in keys and "google.com/tpu" not in keys
    assert pod["nodeSelector"]["cloud.google.com/gke-spot"] == "true"


@pytest.mark.parametrize("command", [["python3"], ["python3", "-m"], ["/opt/app/run"],
                                     ["python3", "launch.py", "accelerate"],
                                     ["/opt/app/run", "-m", "torchrun"]])
def test_commands_that_start_no_launcher_pass(command):
    verdict = validate_job(_job(trainer={"command": command}))
    assert verdict.valid, verdict.message


def test_one_job_of_one_pod_per_node_not_exclusive_to_a_node_pool():
    jobset = _jobset(_job(nodes=3))
    replicated = jobset["spec"]["replicatedJobs"][0]
    assert (replicated["replicas"], replicated["template"]["spec"]["parallelism"],
            replicated["template"]["spec"]["completions"]) == (1, 3, 3)
    assert "alpha.jobset.sigs.k8s.io/exclusive-topology" not in jobset["metadata"]["annotations"]
    tpu = _jobset(_job(slice="v6e-16", nodes=None, trainer={"command": ["python3", "t.py"]}))
    assert tpu["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"]
    assert _pod_template(tpu)["spec"]["hostNetwork"] is True


@pytest.mark.parametrize("trainer, command", [
    ({"launcher": "torchrun", "command": ["python3", "train.py", "--lr", "1e-4"]},
     ["torchrun", "--nnodes=2", "--nproc_per_node=8", "--node_rank=$(NODE_RANK)",
      f"--master_addr={MASTER}", f"--master_port={MASTER_PORT}", "train.py", "--lr", "1e-4"]),
    ({"launcher": "torchrun", "command": ["/opt/venv/bin/python3.12", "-u", "-m", "pkg.train"],
      "launcherArgs": ["--max-restarts=0"]},
     ["torchrun", "--nnodes=2", "--nproc_per_node=8", "--node_rank=$(NODE_RANK)",
      f"--master_addr={MASTER}", f"--master_port={MASTER_PORT}", "--max-restarts=0", "-m",
      "pkg.train"]),
    ({"launcher": "torchrun", "command": ["./train.sh"]},
     ["torchrun", "--nnodes=2", "--nproc_per_node=8", "--node_rank=$(NODE_RANK)",
      f"--master_addr={MASTER}", f"--master_port={MASTER_PORT}", "--no_python", "./train.sh"]),
    ({"launcher": "accelerate", "command": ["python", "train.py"],
      "launcherArgs": ["--config_file", "/cfg/ds_zero3.yaml"]},
     ["accelerate", "launch", "--num_machines", "2", "--num_processes", "16",
      "--machine_rank", "$(NODE_RANK)", "--main_process_ip", MASTER, "--main_process_port",
      str(MASTER_PORT), "--config_file", "/cfg/ds_zero3.yaml", "train.py"]),
    ({"command": ["python3", "-m", "my_jax_trainer"]}, ["python3", "-m", "my_jax_trainer"]),
])
def test_the_launcher_is_written_from_the_job(trainer, command):
    container = _pod_template(_jobset(_job(trainer=trainer)))["spec"]["containers"][0]
    assert container["command"] == command


def test_the_world_every_process_reads():
    torch = _env(_pod_template(_jobset(_job()))["spec"]["containers"][0])
    assert (torch["MASTER_ADDR"], torch["MASTER_PORT"], torch["WORLD_SIZE"], torch["NNODES"],
            torch["GPUS_PER_NODE"]) == (MASTER, str(MASTER_PORT), "16", "2", "8")
    rank = {"fieldRef": {"fieldPath":
                         "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert torch["NODE_RANK"] == rank
    assert "JAX_NUM_PROCESSES" not in torch
    jax = _env(_pod_template(_jobset(_job(trainer={"command": ["python3", "t.py"]})))[
        "spec"]["containers"][0])
    assert (jax["JAX_NUM_PROCESSES"], jax["TPUJOB_EXPECTED_DEVICES"], jax["NNODES"],
            jax["TPUJOB_NUM_SLICES"]) == (
        "2", "16", "2", "2")
    assert jax["JAX_PROCESS_ID"] == rank
    assert jax["JAX_COORDINATOR_ADDRESS"] == f"{MASTER}:8482"
    assert "WORLD_SIZE" not in jax


def test_the_built_in_trainer_runs_on_gpu_nodes_with_its_memory_checked():
    job = _job(slice="a3-ultragpu-8g", trainer={"config": TINY})
    verdict = validate_job(job)
    assert verdict.valid, verdict.message
    assert verdict.checked.startswith("slice, mesh, trainer config and memory")
    status_slice = _slice_status(verdict)
    assert (status_slice.topology, status_slice.machine_type, status_slice.hosts,
            status_slice.chips, status_slice.processes) == ("2x8", "a3-ultragpu-8g", 2, 16, 2)
    [container] = _pod_template(build_jobset(job, verdict.job.spec, verdict.plan))["spec"][
        "containers"]
    assert container["command"] == ["tpujob-train"]
    assert container["args"][:2] == ["--config", "/etc/tpujob/trainer.yaml"]
    # A model that needs more than an H200's memory per GPU is refused, naming the machine.
    big = {"model": {**TINY["model"], "vocab_size": 32000, "d_model": 8192, "n_layers": 80,
                     "n_heads": 64, "n_kv_heads": 8, "head_dim": 128, "mlp_dim": 28672},
           "train": {**TINY["train"], "seq_len": 8192}}
    refused = validate_job(_job(slice="a3-ultragpu-8g", trainer={"config": big}))
    assert (refused.reason, refused.field) == ("OutOfMemory", "spec.trainer.config.model")
    assert "but a a3-ultragpu-8g device has 133.4 GiB usable" in refused.message
    # TPU's splash kernel named for a GPU job; cuDNN's named for float32 activations.
    model = {**TINY["model"], "head_dim": 64}
    splash = validate_job(_job(trainer={"config": {**TINY, "model": {**model,
                                                                     "attention": "splash"}}}))
    assert (splash.reason, splash.field) == ("ConfigError", "spec.trainer.config.model.attention")
    assert "splash runs on a TPU only, and this step runs on a GPU" in splash.message
    f32 = validate_job(_job(trainer={"config": {**TINY, "model": {
        **model, "attention": "cudnn", "dtype": "float32"}}}))
    assert (f32.reason, f32.field) == ("ConfigError", "spec.trainer.config")
    assert "model.attention cudnn cannot run this model: it takes bfloat16" in f32.message
    assert validate_job(_job(trainer={"config": {**TINY, "model": {
        **model, "attention": "cudnn"}}})).valid
    batch = validate_job(_job(trainer={"config": {**TINY, "train": {**TINY["train"],
                                                                    "global_batch": 12}}}))
    assert (batch.reason, batch.field) == ("InvalidBatch", "spec.trainer.config.train.global_batch")


@pytest.mark.parametrize("spec, field, says", [
    # The seed system: an Accelerate config for one machine of 16 processes on two nodes of 8.
    (dict(trainer={"launcher": "accelerate", "command": ["python3", "train.py"],
                   "launcherArgs": ["--num_machines", "1", "--num_processes", "16"]}),
     "spec.trainer.launcherArgs[0]", "--num_machines is set by the operator from the job "
                                     "(2 node(s) x 8 GPUs: 16 GPUs"),
    (dict(trainer={"command": ["accelerate", "launch", "--num_processes", "16", "train.py"]}),
     "spec.trainer.command", "starts accelerate itself, so each of the 2 node(s) would launch "
                             "the world its own options say; set spec.trainer.launcher: "
                             "accelerate"),
    (dict(trainer={"launcher": "torchrun", "command": ["torchrun", "--nproc_per_node=8",
                                                       "train.py"]}),
     "spec.trainer.command", "set spec.trainer.launcher: torchrun and give only the script"),
    (dict(trainer={"command": ["python3", "-m", "torch.distributed.run", "train.py"]}),
     "spec.trainer.command", "spec.trainer.launcher: torchrun"),
    (dict(trainer={"command": ["python", "-m", "accelerate.commands.launch", "t.py"]}),
     "spec.trainer.command", "starts accelerate.commands.launch itself"),
    (dict(trainer={"command": ["deepspeed", "--num_gpus", "8", "train.py"]}),
     "spec.trainer.command", "the deepspeed launcher reaches the other nodes over ssh"),
    (dict(trainer={"launcher": "torchrun", "command": ["python3", "train.py"],
                   "launcherArgs": ["--nnodes=1"]}),
     "spec.trainer.launcherArgs[0]", "--nnodes is set by the operator"),
    (dict(trainer={"launcher": "torchrun", "command": ["python3", "train.py"],
                   "launcherArgs": ["--max-restarts=3", "--nproc_per_node", "16"]}),
     "spec.trainer.launcherArgs[1]", "--nproc_per_node is set by the operator"),
    (dict(env=[{"name": "WORLD_SIZE", "value": "8"}]), "spec.env[0]",
     "WORLD_SIZE=8 is set by the operator for each process of the job (2 node(s) x 8 GPUs: "
     "16 GPUs, 16 processes in all)"),
    (dict(gpuNetworks=["vpc1", "vpc2"]), "spec.gpuNetworks",
     "a a3-megagpu-8g node has 8 GPU NICs, one network each; got 2"),
    (dict(slice="v6e-16", nodes=None, gpuNetworks=["vpc1"],
          trainer={"command": ["python3", "t.py"]}), "spec.gpuNetworks", "is a TPU slice"),
    (dict(slice="v6e-16", nodes=2, trainer={"command": ["python3", "t.py"]}), "spec.nodes",
     "a TPU slice's hosts follow from its size"),
    (dict(slice="v6e-16", nodes=None), "spec.trainer.launcher",
     "a TPU slice runs JAX processes (launcher: jax)"),
    (dict(slices=2), "spec.slices", "count its nodes with nodes, not slices"),
    (dict(nodes=0), "spec.nodes", "greater than or equal to 1"),
    (dict(trainer={"launcher": "torchrun"}), "spec.trainer",
     "starts a script of the job's own: set command"),
    (dict(trainer={"command": ["python3", "t.py"], "launcherArgs": ["--max-restarts=1"]}),
     "spec.trainer", "launcherArgs are options for torchrun or accelerate"),
    (dict(trainer={"launcher": "mpirun", "command": ["t"]}), "spec.trainer.launcher",
     "'jax', 'torchrun' or 'accelerate'"),
    # The seed system's model under plain DDP: its model states cannot fit an H100.
    (dict(trainer={"launcher": "accelerate", "command": ["python3", "train.py"],
                   "zero": {"stage": 0, "parameters": 8_030_261_248}}), "spec.trainer.zero",
     "ZeRO stage 0 (no offload) keeps 119.7 GiB of model states on each GPU for 8,030,261,248 "
     "parameters over 16 GPUs (2 node(s) x 8), more than the 79.6 GiB of each a3-megagpu-8g "
     "(H100 80GB) GPU before any activation; would fit: stage: 1"),
    (dict(trainer={"launcher": "torchrun", "command": ["python3", "train.py"],
                   "zero": {"stage": 2, "parameters": 8_000_000_000, "offload": "parameters"}}),
     "spec.trainer.zero", "offload parameters needs ZeRO stage 3"),
    (dict(trainer={"command": ["python3", "train.py"],
                   "zero": {"stage": 3, "parameters": 8_000_000_000}}),
     "spec.trainer", "zero describes a PyTorch program's model states"),
    (dict(trainer={"launcher": "torchrun", "command": ["python3", "train.py"],
                   "zero": {"stage": 4, "parameters": 8_000_000_000}}),
     "spec.trainer.zero.stage", "less than or equal to 3"),
])
def test_refusals(spec, field, says):
    verdict = validate_job(_job(**spec))
    assert not verdict.valid
    assert verdict.field == field, verdict.message
    assert says in verdict.message, verdict.message


def _retryable(jobset: dict) -> list[int]:
    """The exit codes that restart the job: those the pod failure policy does not fail on."""
    rules = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"]
    [codes] = [r["onExitCodes"]["values"] for r in rules if "onExitCodes" in r]
    return [c for c in codes if c < 128]


@pytest.mark.parametrize("launcher, policy, codes", [
    # torchrun and accelerate exit 1 when a peer is lost: 1 restarts the job by default.
    ("torchrun", {}, [1, 42]),
    ("accelerate", {}, [1, 42]),
    ("jax", {}, [42]),
    # Written out, the job's own codes win, under any launcher.
    ("torchrun", {"retryableExitCodes": [42]}, [42]),
    ("jax", {"retryableExitCodes": [1, 3]}, [1, 3]),
])
def test_a_lost_peer_restarts_a_torch_launchers_job_by_default(launcher, policy, codes):
    job = _job(trainer={"launcher": launcher, "command": ["python3", "train.py"]},
               restartPolicy=policy)
    assert _retryable(_jobset(job)) == codes


@pytest.mark.parametrize("zero", [
    {"stage": 1, "parameters": 8_030_261_248},
    {"stage": 3, "parameters": 70_553_706_496, "largestLayerParameters": 1_050_673_152},
    {"stage": 2, "parameters": 30_000_000_000, "offload": "optimizer"},
])
def test_model_states_that_fit_pass(zero):
    verdict = validate_job(_job(trainer={"launcher": "accelerate",
                                         "command": ["python3", "train.py"], "zero": zero}))
    assert verdict.valid, verdict.message
    # What the Valid condition says was checked: the launcher's world, and these states.
    assert verdict.checked == (f"nodes and accelerate's world checked; model states under ZeRO "
                               f"stage {zero['stage']} checked; activations not checked")


def test_a_torch_job_without_zero_says_its_memory_was_not_checked():
    verdict = validate_job(_job())
    assert verdict.valid, verdict.message
    assert verdict.checked == ("nodes and torchrun's world checked; model states not checked "
                               "(set spec.trainer.zero); activations not checked")

