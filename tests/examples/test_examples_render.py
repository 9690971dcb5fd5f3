"""Every example in manifests/examples renders with `tpujob render FILE`: the operator's
pre-flight checks pass, and the ConfigMap and JobSet it prints are valid objects, sized as the
slice plan says, with the example's W&B, Kueue and workload-policy settings carried through."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.api import k8s_schema
from tests.chart.k8s_objects import validation_errors
from tpujob.api import load_job
from tpujob.cli.main import main as tpujob
from tpujob_plan.hardware import plan_hardware

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "manifests" / "examples").glob("*.yaml"))
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@pytest.fixture(scope="module")
def jobset_schema() -> dict:
    from tpujob.local.apiserver import bundled_crd_paths, load_crds

    crd = next(c for c in load_crds(bundled_crd_paths())
               if c["spec"]["names"]["kind"] == "JobSet")
    return next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"
                )["schema"]["openAPIV3Schema"]


def _render(path: Path, capsys) -> tuple[list[dict], str]:
    code = tpujob(["render", str(path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    return [d for d in yaml.safe_load_all(out) if d], err


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_renders(path: Path, capsys, jobset_schema):
    example = yaml.safe_load(path.read_text())
    spec = load_job(example).spec
    plan = plan_hardware(spec.slice, slices=spec.slices, nodes=spec.nodes,
                         machine_type=spec.machine_type,
                         containers_per_host=spec.containers_per_host,
                         launcher=spec.trainer.launcher)
    docs, err = _render(path, capsys)
    by_kind = {d["kind"]: d for d in docs}
    # A trainer of the job's own takes no trainer config, so no ConfigMap.
    kinds = ["JobSet"] if spec.is_custom_trainer else ["ConfigMap", "JobSet"]
    assert sorted(by_kind) == kinds and len(docs) == len(kinds)

    if not spec.is_custom_trainer:
        assert validation_errors(by_kind["ConfigMap"]) == []
    jobset = by_kind["JobSet"]
    assert k8s_schema.validate_object(jobset_schema, jobset) == []
    assert jobset["metadata"]["name"] == example["metadata"]["name"]
    (replicated,) = jobset["spec"]["replicatedJobs"]
    assert replicated["replicas"] == spec.slices
    job = replicated["template"]["spec"]
    assert job["parallelism"] == job["completions"] == plan.hosts
    pod = job["template"]["spec"]
    assert len(pod["containers"]) == plan.containers_per_host
    assert pod["nodeSelector"] == plan.node_selector

    queue = spec.scheduling.queue_name
    assert jobset["metadata"]["labels"].get(KUEUE_LABEL) == queue
    assert jobset["spec"]["suspend"] is bool(queue or spec.suspend)
    keys = [e for c in pod["containers"] for e in c["env"] if e["name"] == "WANDB_API_KEY"]
    if spec.wandb is not None and spec.wandb.api_key_secret is not None:
        ref = spec.wandb.api_key_secret
        assert keys and all(e == {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {
            "name": ref.name, "key": ref.key}}} for e in keys)
    else:
        assert keys == []
    if plan.workload_policy:
        assert plan.workload_policy in err
    else:
        assert "workload policy" not in err


def test_variants_cover_wandb_online_and_kueue():
    specs = {p.name: load_job(yaml.safe_load(p.read_text())).spec for p in EXAMPLES}
    online = [n for n, s in specs.items()
              if s.wandb is not None and s.wandb.mode == "online" and s.wandb.api_key_secret]
    queued = [n for n, s in specs.items() if s.scheduling.queue_name]
    assert "wandb-online.yaml" in online and "kueue-v6e-16.yaml" in queued
    assert specs["wandb-online.yaml"].scheduling.queue_name is None  # one feature each
    assert specs["kueue-v6e-16.yaml"].wandb is None


def test_tpujob_render_command(tmp_path):
    # The installed console script, as a user runs it.
    script = Path(sys.executable).parent / "tpujob"
    result = subprocess.run([str(script), "render", str(ROOT / "manifests" / "examples" /
                                                      "tpu7x-64.yaml")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert [d["kind"] for d in yaml.safe_load_all(result.stdout) if d] == ["ConfigMap",
                                                                           "JobSet"]
    assert "tpu7x-64-2x4x4-placement-policy" in result.stderr
    broken = tmp_path / "job.yaml"
    broken.write_text((ROOT / "manifests" / "examples" / "tpu7x-64.yaml").read_text()
                      .replace("slice: tpu7x-64", "slice: tpu7x-65"))
    result = subprocess.run([str(script), "render", str(broken)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1 and "tpu7x-65" in result.stderr


def test_maxtext_tpu7x_example_renders_one_container_per_host():
    """`tpujob render` of the MaxText tpu7x-64 example: 8 hosts, one trainer container each
    with all 4 chips (xpk 1.16's default layout), MaxText's command and args as written, and
    the standard variables it reads."""
    script = Path(sys.executable).parent / "tpujob"
    path = ROOT / "manifests" / "examples" / "maxtext-tpu7x-64.yaml"
    result = subprocess.run([str(script), "render", str(path)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    [jobset] = [d for d in yaml.safe_load_all(result.stdout) if d]
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["parallelism"] == 8
    [container] = job["template"]["spec"]["containers"]
    assert container["name"] == "trainer"
    assert container["resources"]["limits"]["google.com/tpu"] == "4"
    assert container["command"][:3] == ["python3", "-m", "maxtext.trainers.pre_train.train"]
    assert {"ici_fsdp_parallelism=16", "ici_tensor_parallelism=4", "opt_type=muon",
            "remat_policy=full", "per_device_batch_size=1", "max_target_length=4096"} <= \
        set(container["args"])
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["JAX_COORDINATOR_ADDRESS"].endswith(":8482") and env["JAX_NUM_PROCESSES"] == "8"
    assert "TPU_VISIBLE_CHIPS" not in env


def test_bring_your_own_examples_are_checked_as_far_as_they_can_be():
    maxtext = load_job(yaml.safe_load((ROOT / "manifests" / "examples" /
                                       "maxtext-tpu7x-64.yaml").read_text()))
    tunix = load_job(yaml.safe_load((ROOT / "manifests" / "examples" /
                                     "tunix-grpo-v6e-16.yaml").read_text()))
    from tpujob.validation import validate_job
    verdicts = [validate_job({**j.to_dict(), "metadata": {**j.metadata, "namespace": "ns"}})
                for j in (maxtext, tunix)]
    assert all(v.valid for v in verdicts), [v.message for v in verdicts]
    assert "MaxText's mesh and batch (from args) checked" in verdicts[0].checked
    assert "mesh, batch and memory not checked" in verdicts[1].checked
