"""Every example in manifests/examples is a job `kubectl apply` accepts (the CRD's schema and CEL
rules, strict about unknown fields), the models parse, and the operator can plan: the slice
exists, the mesh fits its topology, the trainer config validates and the model fits in HBM."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.api import k8s_schema as k8s
from tpujob.api import load_job
from tpujob.api.crd import build_crd

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"
REQUIRED = ["quickstart.yaml", "v6e-16.yaml", "tpu7x-64.yaml", "v5p-128.yaml",
            "multislice-2x-v6e-16.yaml"]
FILES = sorted(p.name for p in EXAMPLES.glob("*.yaml"))


def _load(name):
    return yaml.safe_load((EXAMPLES / name).read_text())


@pytest.fixture(scope="module")
def root_schema():
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_required_examples_exist():
    assert set(REQUIRED) <= set(FILES), sorted(set(REQUIRED) - set(FILES))


@pytest.mark.parametrize("name", FILES)
def test_example_passes_crd_schema(root_schema, name):
    obj = _load(name)
    assert obj["apiVersion"] == "tpujob.dev/v1alpha1" and obj["kind"] == "TpuTrainingJob"
    assert k8s.validate_object(root_schema, obj) == []


@pytest.mark.parametrize("name", FILES)
def test_example_breaks_when_spec_is_broken(root_schema, name):
    # Guards the test above against a schema that accepts anything.
    obj = _load(name)
    obj["spec"]["slices"] = -1
    obj["spec"]["extraField"] = True
    errors = k8s.validate_object(root_schema, obj)
    assert any(e.startswith("spec.slices") for e in errors), errors
    assert any("extraField" in e for e in errors), errors


@pytest.mark.parametrize("name", FILES)
def test_example_plans(name):
    from tpujob_plan.hardware import plan_hardware
    from tpujob_plan.memory import estimate_memory
    from tpujob_plan.mesh import plan_mesh
    from tpujob_trainer.config.root import TrainerConfig

    spec = load_job(_load(name)).spec
    plan = plan_hardware(spec.slice, slices=spec.slices, nodes=spec.nodes,
                         machine_type=spec.machine_type, launcher=spec.trainer.launcher)
    mesh = plan_mesh(spec.parallelism.ici_sizes, spec.parallelism.dcn_sizes,
                     devices_per_slice=plan.mesh_granule_devices, num_slices=plan.mesh_granules,
                     physical_dims=plan.physical_mesh)
    assert mesh.valid, mesh.error
    if spec.is_custom_trainer:
        # A trainer of its own: the operator checks what it can read from its args
        # (tests/examples/test_examples_render.py); there is no trainer config to estimate.
        return
    config = TrainerConfig.from_dict(spec.trainer.config, spec.trainer.overrides)
    axes = {a: mesh.ici.get(a, 1) * mesh.dcn.get(a, 1) for a in set(mesh.ici) | set(mesh.dcn)}
    memory = estimate_memory(config.model.to_shape(), global_batch=config.train.global_batch,
                             seq_len=config.train.seq_len, mesh=axes, remat="full",
                             hbm_bytes=plan.hbm_bytes_per_device)
    assert memory.fits, memory.to_dict()
    assert memory.notes == [], memory.notes


@pytest.mark.parametrize("name, slices, hosts, devices", [
    ("quickstart.yaml", 1, 2, 8),
    ("v6e-16.yaml", 1, 4, 16),
    ("tpu7x-64.yaml", 1, 8, 64),
    ("v5p-128.yaml", 1, 16, 64),
    ("multislice-2x-v6e-16.yaml", 2, 8, 32),
    ("gpu-jax-a3-ultra.yaml", 1, 4, 32),
    ("gpu-accelerate-deepspeed-a3-mega.yaml", 1, 2, 16),
])
def test_example_sizes(name, slices, hosts, devices):
    from tpujob_plan.hardware import plan_hardware

    spec = load_job(_load(name)).spec
    plan = plan_hardware(spec.slice, slices=spec.slices, nodes=spec.nodes,
                         machine_type=spec.machine_type, launcher=spec.trainer.launcher)
    assert (spec.slices, plan.hosts * plan.slices, plan.devices) == (slices, hosts, devices)


def test_quickstart_is_small_and_multi_host():
    spec = load_job(_load("quickstart.yaml")).spec
    assert spec.output.startswith("gs://tpujob-quickstart/")
    assert spec.trainer.config["train"]["steps"] <= 100
    assert spec.wandb is None, "the quickstart must run without any secret"
