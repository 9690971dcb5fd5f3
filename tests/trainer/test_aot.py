"""The trainer's step compiled for TPU slices by the real TPU compiler (libtpu), without a TPU:
the devices are the slice's, the mesh is the run's, the kernels are the TPU's, and the figures
are the compiler's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from tpujob_trainer import aot
from tpujob_trainer.config.root import TrainerConfig

pytestmark = pytest.mark.integration

TINY = {"model": {"vocab_size": 1024, "d_model": 256, "n_layers": 2, "n_heads": 4,
                  "n_kv_heads": 2, "head_dim": 128, "mlp_dim": 512, "remat": "full"},
        "train": {"global_batch": 16, "seq_len": 256}}


def _cfg(**sections) -> TrainerConfig:
    return TrainerConfig.from_dict({**TINY, **sections})


def _abstract_params(cfg: TrainerConfig):
    from tpujob_trainer.step import abstract_model

    return abstract_model(cfg.model)[1]


@pytest.mark.parametrize("slice_name,slices,devices,kind", [
    ("v6e-8", 1, 8, "TPU v6 lite"),
    ("v5p-8", 1, 4, "TPU v5"),
    ("tpu7x-8", 1, 8, "TPU7x"),       # 4 chips, 2 devices (TensorCores) each
    ("v6e-8", 2, 16, "TPU v6 lite"),  # multi-slice: DCN across the two
])
def test_topology_devices_are_the_slices(slice_name, slices, devices, kind):
    got = aot.topology_devices(slice_name, slices)
    assert (len(got), got[0].device_kind, got[0].platform) == (devices, kind, "tpu")
    if slices > 1:
        assert sorted({d.slice_index for d in got}) == list(range(slices))


def test_compile_for_v6e_8_reads_the_compilers_figures():
    # Even a program JAX would cache (any compile time) leaves no entry in the persistent
    # cache (it could not be loaded back without a TPU), and the setting is put back.
    cache = Path(os.environ["JAX_COMPILATION_CACHE_DIR"])
    before = set(cache.iterdir())
    name = "jax_persistent_cache_min_compile_time_secs"
    setting = getattr(jax.config, name)
    jax.config.update(name, 0.0)
    try:
        result = aot.compile_step(_cfg(), "v6e-8")
        assert getattr(jax.config, name) == 0.0
    finally:
        jax.config.update(name, setting)
    assert set(cache.iterdir()) == before
    assert (result.devices, result.device_kind, result.mesh["fsdp"], result.remat) == \
        (8, "TPU v6 lite", 8, "full")
    # The donated state is aliased: arguments and outputs hold it once.
    assert result.argument_bytes > 0 and result.alias_bytes > 0 and result.temp_bytes > 0
    assert result.hbm_bytes == (result.argument_bytes + result.output_bytes - result.alias_bytes
                                + result.temp_bytes)
    assert result.flops > 0 and result.bytes_accessed > 0
    as_dict = result.to_dict()
    assert as_dict["hbm_bytes"] == result.hbm_bytes and as_dict["slice"] == "v6e-8"


def test_two_slices_put_the_dcn_axis_across_them():
    cfg = _cfg(mesh={"ici": {"fsdp": -1}, "dcn": {"data": -1}},
               train={"global_batch": 32, "seq_len": 256})
    result = aot.compile_step(cfg, "v6e-8", slices=2)
    assert (result.devices, result.mesh["data"], result.mesh["fsdp"]) == (16, 2, 8)
    # On a TPU the optimizer's state is split over the slices too (`mesh.optimizer_sharding:
    # auto`): each device's arguments hold half the AdamW moments they hold split as the weights.
    whole = aot.compile_step(_cfg(mesh={**cfg.mesh.model_dump(), "optimizer_sharding": "as_params"},
                                  train=cfg.train.model_dump()), "v6e-8", slices=2)
    params = sum(a.size for a in jax.tree.leaves(_abstract_params(cfg))) * 4 / 8   # f32, over fsdp
    assert whole.argument_bytes - result.argument_bytes == pytest.approx(params, rel=0.02)


@pytest.mark.parametrize("seq,splash", [(256, True), (200, False)])
def test_compiled_for_a_tpu_attention_is_the_splash_kernel(seq, splash):
    """The TPU program calls the Pallas kernel where the length tiles into its blocks, and XLA's
    attention where it does not."""
    from tpujob_trainer.mesh import build_mesh
    from tpujob_trainer.sharding import activate
    from tpujob_trainer.step import step_program

    cfg = _cfg(train={"global_batch": 8, "seq_len": seq})
    devices = aot.topology_devices("v6e-8")
    mesh, _ = build_mesh(cfg.mesh, devices=devices)
    with activate(mesh):
        fns, batch = step_program(cfg, mesh, cfg.model)
        text = fns.step.lower(fns.abstract_state, batch).as_text()
    assert ("splash" in text) == splash


def test_the_same_step_lowered_twice_in_one_process_is_one_program():
    """A splash kernel kept from the first trace brought its mask tables into the second as
    arrays from outside (arguments, not constants): another program, another cache key and
    other figures from the compiler."""
    from tpujob_trainer.mesh import build_mesh
    from tpujob_trainer.sharding import activate
    from tpujob_trainer.step import step_program

    cfg = _cfg(train={"global_batch": 8, "seq_len": 256})
    texts = []
    for _ in range(2):
        mesh, _ = build_mesh(cfg.mesh, devices=aot.topology_devices("v6e-8"))
        with activate(mesh):
            fns, batch = step_program(cfg, mesh, cfg.model)
            texts.append(fns.step.lower(fns.abstract_state, batch).as_text())
    assert "splash" in texts[0] and texts[0] == texts[1]


def test_the_steps_key_is_the_same_from_another_clone_and_another_caller(tmp_path):
    """The splash kernel's Mosaic program carries source locations inside the lowered text; by
    default they named the kernel's file by its full path (in the clone's own environment), so
    a step compiled from one clone missed the entries another had written. Here both JAX (by a
    link) and the trainer (a copy) are imported from another folder."""
    here = aot.step_key(_cfg(), "v6e-8")
    elsewhere = tmp_path / "another-clone"
    shutil.copytree(Path(aot.__file__).parent, elsewhere / "tpujob_trainer")
    (elsewhere / "jax").symlink_to(Path(jax.__file__).parent, target_is_directory=True)
    code = ("import json, sys\n"
            "import jax\n"
            "from tpujob_trainer import aot\n"
            "from tpujob_trainer.config.root import TrainerConfig\n"
            "def a_caller_of_its_own():\n"
            "    return aot.step_key(TrainerConfig.from_dict(json.loads(sys.argv[1])), 'v6e-8')\n"
            "print(aot.__file__, jax.__file__, a_caller_of_its_own())\n")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(TINY)], check=True, text=True,
                         capture_output=True, env={**os.environ, "PYTHONPATH": str(elsewhere)})
    module, jax_module, key = out.stdout.split()
    assert Path(module).is_relative_to(elsewhere) and Path(jax_module).is_relative_to(elsewhere)
    assert key == here


@pytest.mark.parametrize("cost,want", [
    ({"optimal_seconds": 0.25}, (0.25, "valid")),
    ({"optimal_seconds": -42.0}, (None, "invalid")),
    ({"optimal_seconds": 0.0}, (None, "invalid")),
    ({}, (None, "the compiler gave no cost-model time")),
])
def test_cost_model_time_only_when_positive(cost, want):
    t, note = aot.cost_model_time(cost)
    assert (t, note.split(":")[0]) == want


OUT_OF_HBM = ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
              "temporaries (74.45G) exceeds available HBM (31.25G).")


@pytest.mark.parametrize("message,remat,want", [
    (OUT_OF_HBM, "full", "it needs 74.45G of HBM per device where a device has 31.25G"),
    ("RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm.", "minimal",
     "it needs more HBM per device than a device has"),
    ("INTERNAL: Mosaic failed to compile TPU kernel", "full", None),
    ("RESOURCE_EXHAUSTED: too many open files", "none", None),
])
def test_the_compilers_out_of_hbm_refusal_is_read(message, remat, want):
    got = aot.refusal("v6e-8", message, remat)
    if want is None:
        assert got is None
        return
    text = str(got)
    assert want in text and text.startswith("the TPU compiler refuses the step for v6e-8: ")
    assert message.splitlines()[0] in text and "train.grad_accum" in text
    # Remat full is offered only to a step that recomputes less.
    assert ("model.remat full" in text) == (remat != "full")


def test_without_libtpu_the_message_says_what_to_install(monkeypatch):
    from jax.experimental import topologies

    def missing(*a, **k):
        raise RuntimeError("Unable to initialize backend 'tpu': no libtpu")

    monkeypatch.setattr(topologies, "get_topology_desc", missing)
    with pytest.raises(aot.CompilerUnavailable, match=r"pip install 'tpujob\[compile\]'"):
        aot.topology_devices("v6e-8")


def _aot(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tpujob_trainer.aot", *args],
                          capture_output=True, text=True, timeout=300)


def test_module_cli_prints_json_and_refuses_a_bad_slice(tmp_path):
    import yaml

    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    ok = _aot("--slice", "tpu7x-8", "--config", str(path), "--json", "train.global_batch=8")
    assert ok.returncode == 0, ok.stderr[-2000:]
    got = json.loads(ok.stdout.strip().splitlines()[-1])
    assert (got["devices"], got["device_kind"], got["hbm_bytes"] > 0) == (8, "TPU7x", True)
    bad = _aot("--slice", "v6e-12", "--config", str(path), "--json")
    assert bad.returncode == 2
    assert "v6e-12" in json.loads(bad.stdout.strip().splitlines()[-1])["error"]
    # A batch whose share of a v6e device is tens of GiB: the compiler itself refuses it.
    big = _aot("--slice", "v6e-8", "--config", str(path), "--json", "train.global_batch=262144")
    assert big.returncode == 2, big.stderr[-2000:]
    error = json.loads(big.stdout.strip().splitlines()[-1])["error"]
    assert error.startswith("the TPU compiler refuses the step for v6e-8: it needs ")
    assert "where a device has 31.25G" in error and "Traceback" not in big.stderr
