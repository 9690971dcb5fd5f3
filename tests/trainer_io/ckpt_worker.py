"""Checkpoint scenarios that need 4 CPU devices; the tests run them as a subprocess.

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python -m tests.trainer_io.ckpt_worker sharded DIR
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python -m tests.trainer_io.ckpt_worker replicated DIR
"""

from __future__ import annotations

import json
import sys

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpujob_trainer.checkpoint import Checkpointer, restore_params
from tpujob_trainer.config.checkpoint import CheckpointConfig


def make_state(mesh, step: int, specs: dict):
    """A train-state-like pytree of global arrays; `specs` gives each leaf's PartitionSpec."""
    def arr(shape, spec, offset):
        s = NamedSharding(mesh, spec)
        full = (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + offset)
        return jax.make_array_from_callback(shape, s, lambda idx: full[idx])
    return {
        "params": {"w": arr((8, 16), specs["w"], step), "b": arr((16,), specs["b"], 10 * step)},
        "opt_state": {"mu": arr((8, 16), specs["w"], -step)},
        "step": jax.make_array_from_callback((), NamedSharding(mesh, P()),
                                             lambda idx: np.array(step, np.int32)),
    }


def abstract(state):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)


def check_equal(got, want) -> dict:
    """Values equal, shardings as asked, and every local shard only its slice (no full copies)."""
    report = {}
    for (path, g), w in zip(jax.tree_util.tree_flatten_with_path(got)[0],
                            jax.tree.leaves(want), strict=True):
        name = jax.tree_util.keystr(path)
        assert g.sharding == w.sharding, (name, g.sharding, w.sharding)
        for gs, ws in zip(g.addressable_shards, w.addressable_shards, strict=True):
            assert gs.data.shape == ws.data.shape, (name, gs.data.shape, ws.data.shape)
            np.testing.assert_array_equal(np.asarray(gs.data), np.asarray(ws.data))
        report[name] = [list(s.data.shape) for s in g.addressable_shards]
    return report


def run_sharded(directory: str) -> dict:
    mesh = jax.make_mesh((2, 2), ("data", "model"))
    saved_specs = {"w": P("data", "model"), "b": P("model")}
    ckpt = Checkpointer(CheckpointConfig(every=1, keep=2), directory)
    ckpt.save(1, make_state(mesh, 1, saved_specs), {"step": 1})
    ckpt.save(2, make_state(mesh, 2, saved_specs), {"step": 2})
    ckpt.close()
    out = {}
    # the same shardings, and a different layout (resharding on restore)
    for label, specs in [("same", saved_specs), ("resharded", {"w": P("model", None), "b": P()})]:
        want = make_state(mesh, 2, specs)
        ckpt = Checkpointer(CheckpointConfig(every=1, keep=2), directory)
        got, data, step = ckpt.restore(abstract(want))
        ckpt.close()
        assert step == 2 and data == {"step": 2}, (step, data)
        out[label] = check_equal(got, want)
    want = make_state(mesh, 2, {"w": P(None, "data"), "b": P("data")})
    params, step = restore_params(directory, abstract(want["params"]))
    out["params_only"] = check_equal(params, want["params"])
    return out


def run_replicated(directory: str) -> dict:
    """Arrays held whole by all 4 devices, one of 1 MiB a replica (4 MiB in all) and smaller
    ones, saved and read back; which of them Orbax cut into per-replica slices on the devices."""
    from orbax.checkpoint._src.serialization import replica_slices

    sliced: list[list[int]] = []
    original = replica_slices.ReplicaSlice.data

    def data(self):
        if self.slice_args is not None:
            sliced.append(list(self.unsliced_data.shape))
        return original(self)

    replica_slices.ReplicaSlice.data = data
    mesh = jax.make_mesh((4,), ("data",))
    whole = NamedSharding(mesh, P())
    shapes = {"large": (1024, 1024), "below": (1024, 1020), "small": (16, 16)}
    state = {k: jax.make_array_from_callback(
        shape, whole, lambda idx, shape=shape: np.ones(shape, np.float32)[idx])
        for k, shape in shapes.items()}
    ckpt = Checkpointer(CheckpointConfig(every=1, keep=1), directory)
    ckpt.save(1, state, {"step": 1})
    ckpt.close()
    ckpt = Checkpointer(CheckpointConfig(every=1, keep=1), directory)
    got, _, step = ckpt.restore(abstract(state))
    ckpt.close()
    assert step == 1
    check_equal(got, state)
    return {"sliced": sorted(sliced)}


if __name__ == "__main__":
    scenario = {"sharded": run_sharded, "replicated": run_replicated}[sys.argv[1]]
    print("RESULT " + json.dumps(scenario(sys.argv[2])), flush=True)
