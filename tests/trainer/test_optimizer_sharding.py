"""The optimizer's state split over `data` as well as its weight's own axes (ZeRO-1,
`mesh.optimizer_sharding`): where it is split, when `auto` splits it, and that the training it
gives is the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import pytest
from jax.sharding import AbstractMesh, NamedSharding
from jax.sharding import PartitionSpec as P

from tests.trainer.helpers import TINY_MODEL
from tpujob_trainer.config.root import ConfigError, TrainerConfig
from tpujob_trainer.sharding import also_over

MESH = AbstractMesh((2, 4, 2), ("data", "fsdp", "tensor"))


@pytest.mark.parametrize("spec, shape, want", [
    (P("fsdp"), (8, 6), P(("fsdp", "data"))),              # inside each device's own part
    (P(None, "fsdp"), (6, 16), P(None, ("fsdp", "data"))),  # the split dimension first
    (P("fsdp"), (4, 6), P("fsdp", "data")),                 # 4 / (4 x 2) is not even: the next
    (P(), (3, 10), P(None, "data")),                        # nothing split: the first that divides
    (P(("fsdp", "tensor")), (16,), P(("fsdp", "tensor", "data"))),
    (P("fsdp"), (4, 3), P("fsdp")),                         # no dimension divides: as it was
    (P(("data", "fsdp")), (16,), P(("data", "fsdp"))),      # over data already
    (P(), (), P()),                                         # a scalar (a count)
])
def test_also_over_data(spec, shape, want):
    got = also_over(NamedSharding(MESH, spec), shape, "data")
    assert got.spec == want


def test_an_axis_of_size_one_changes_nothing():
    mesh = AbstractMesh((1, 8), ("data", "fsdp"))
    s = NamedSharding(mesh, P("fsdp"))
    assert also_over(s, (16, 4), "data") is s


def test_a_bad_setting_names_the_field_and_the_choices():
    with pytest.raises(ConfigError, match=r"mesh\.optimizer_sharding.*'auto'.*'as_params'"):
        TrainerConfig.from_dict({"mesh": {"optimizer_sharding": "zero1"}})


def _opt_shardings(setting: str, devices, ici: dict, dcn: dict | None = None):
    from tpujob_trainer.mesh import build_mesh
    from tpujob_trainer.sharding import activate
    from tpujob_trainer.step import step_program

    cfg = TrainerConfig.from_dict({"model": TINY_MODEL | {"d_model": 64, "vocab_size": 256},
                                   "train": {"global_batch": 16, "seq_len": 32},
                                   "mesh": {"ici": ici, "dcn": dcn or {},
                                            "optimizer_sharding": setting}})
    slices = 2 if dcn else 1
    mesh, _ = build_mesh(cfg.mesh, num_slices=slices, devices=devices)
    with activate(mesh):
        fns, _ = step_program(cfg, mesh, cfg.model)
    over = [s for s in jax.tree.leaves(fns.state_shardings["opt_state"])
            if any("data" in (n if isinstance(n, tuple) else (n,)) for n in s.spec if n)]
    params_over = [s for s in jax.tree.leaves(fns.state_shardings["params"])
                   if "data" in str(s.spec)]
    return len(over), params_over


@pytest.mark.parametrize("setting, split", [("auto", True), ("over_data", True),
                                            ("as_params", False)])
def test_on_two_tpu_slices_auto_splits_the_optimizer_over_data(setting, split):
    from tpujob_trainer.aot import topology_devices

    over, params_over = _opt_shardings(setting, topology_devices("v6e-8", 2),
                                       {"fsdp": -1}, {"data": -1})
    assert (over > 0) == split and params_over == []   # the weights stay whole on each replica


_CPU = """
import json, sys
import jax, numpy as np
from tests.trainer.test_optimizer_sharding import _opt_shardings, _losses
setting = sys.argv[1]
over, _ = _opt_shardings(setting, jax.devices(), {"data": 2, "fsdp": 4})
print(json.dumps({"over": over, "losses": _losses(setting)}))
"""


def _losses(setting: str) -> list[float]:
    """Three steps of the tiny model on the 8 CPU devices of the calling process, data=2 x
    fsdp=4, and the final parameters' sum of squares."""
    import numpy as np

    from tpujob_trainer.mesh import build_mesh
    from tpujob_trainer.sharding import activate
    from tpujob_trainer.step import step_program

    cfg = TrainerConfig.from_dict({"model": TINY_MODEL | {"vocab_size": 256},
                                   "train": {"global_batch": 16, "seq_len": 32},
                                   "mesh": {"ici": {"data": 2, "fsdp": 4},
                                            "optimizer_sharding": setting}})
    mesh, _ = build_mesh(cfg.mesh)
    tokens = np.random.default_rng(0).integers(0, 256, (16, 33), dtype=np.int32)
    out = []
    with activate(mesh):
        fns, batch = step_program(cfg, mesh, cfg.model)
        state = fns.init()
        feed = {"tokens": jax.device_put(tokens, batch["tokens"].sharding),
                "stop": jax.device_put(np.zeros(16, np.int32), batch["stop"].sharding)}
        for _ in range(3):
            state, metrics = fns.step(state, feed)
            out.append(float(metrics["loss"]))
        out.append(float(sum(np.sum(np.asarray(a, np.float64) ** 2)
                             for a in jax.tree.leaves(state["params"]))))
    return out


def test_over_data_trains_as_the_weights_sharding_does_and_auto_leaves_a_cpu_alone():
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    got = {}
    for setting in ("as_params", "over_data", "auto"):
        proc = subprocess.run([sys.executable, "-c", _CPU, setting], env=env, text=True,
                              capture_output=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got[setting] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["over_data"]["over"] > 0 and got["as_params"]["over"] == got["auto"]["over"] == 0
    assert got["over_data"]["losses"] == pytest.approx(got["as_params"]["losses"], rel=1e-6)
    assert got["auto"]["losses"] == got["as_params"]["losses"]
