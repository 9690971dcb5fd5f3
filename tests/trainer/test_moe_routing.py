"""The MoE layer against a per-token reference written from its definition: top-k routing
within each sequence, first choices served before second ones, at most C tokens per expert
(later ones skip it), each kept choice weighted by its renormalized router probability, shared
experts on every token. In value and in gradient, float32 and bf16."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tpujob_trainer.config.model import MoEConfig
from tpujob_trainer.models.moe import MoE

pytestmark = pytest.mark.integration


def reference(moe: MoE, x_BxLxD: np.ndarray) -> np.ndarray:
    x = np.asarray(x_BxLxD, np.float64)
    B, L, _ = x.shape
    router = np.asarray(moe.router_DxE[...], np.float64)
    w_in = np.asarray(moe.w_in_ExDx2xF[...], np.float64)
    w_out = np.asarray(moe.w_out_ExFxD[...], np.float64)
    C, k = (moe.capacity(L) if moe.routing == "capacity" else L), moe.top_k

    def silu(v):
        return v / (1 + np.exp(-v))

    def expert(e, v):
        return (silu(v @ w_in[e, :, 0]) * (v @ w_in[e, :, 1])) @ w_out[e]

    y = np.zeros_like(x)
    for b in range(B):
        logits = x[b] @ router
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        top = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
        weights = np.take_along_axis(probs, top, -1)
        weights /= weights.sum(-1, keepdims=True)
        used = np.zeros(moe.num_experts, int)
        for j in range(k):                      # every first choice before any second one
            for pos in range(L):
                e = top[pos, j]
                if used[e] < C:
                    used[e] += 1
                    y[b, pos] += weights[pos, j] * expert(e, x[b, pos])
    if moe.shared is not None:
        sw_in = np.asarray(moe.shared.w_in_Dx2xF[...], np.float64)
        sw_out = np.asarray(moe.shared.w_out_FxD[...], np.float64)
        y += (silu(x @ sw_in[:, 0]) * (x @ sw_in[:, 1])) @ sw_out
    return y


def run(moe: MoE, x):
    """The layer jitted, as the step runs it (XLA:CPU runs a bf16 x bf16 -> f32 matmul only
    compiled)."""
    graphdef, params = nnx.split(moe)
    return jax.jit(lambda p, x: nnx.merge(graphdef, p)(x))(params, x)


def _moe(shared: int, capacity_factor: float, dtype, routing: str = "capacity") -> MoE:
    cfg = MoEConfig(num_experts=4, experts_per_token=2, num_shared_experts=shared,
                    capacity_factor=capacity_factor, routing=routing)
    return MoE(32, 48, cfg, dtype=dtype, param_dtype=jnp.float32, rngs=nnx.Rngs(3))


@pytest.mark.parametrize("shared,capacity_factor,routing", [
    (0, 2.0, "capacity"), (1, 2.0, "capacity"), (0, 0.5, "capacity"), (1, 0.75, "capacity"),
    (0, 0.5, "dropless"), (1, 0.75, "dropless")])   # dropless: the capacity does not count
def test_the_layer_is_the_per_token_reference(shared, capacity_factor, routing):
    moe = _moe(shared, capacity_factor, jnp.float32, routing)
    x = jax.random.normal(jax.random.key(1), (2, 12, 32))
    y, aux = run(moe, x)
    np.testing.assert_allclose(np.asarray(y), reference(moe, np.asarray(x)), rtol=1e-4, atol=1e-5)
    # The load-balancing loss counts the choices made, whatever capacity kept.
    _, aux_capacity = run(_moe(shared, capacity_factor, jnp.float32), x)
    assert float(aux) == pytest.approx(float(aux_capacity), rel=1e-6)


def test_dropless_keeps_what_capacity_drops():
    x = jax.random.normal(jax.random.key(1), (2, 12, 32))
    tight, dropless = (run(_moe(0, 0.5, jnp.float32, r), x)[0] for r in ("capacity", "dropless"))
    loose = run(_moe(0, 4.0, jnp.float32), x)[0]   # capacity for every token: nothing dropped
    assert not np.allclose(np.asarray(tight), np.asarray(dropless), atol=1e-3)
    np.testing.assert_allclose(np.asarray(dropless), np.asarray(loose), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("M,K,N,sizes", [(128, 256, 384, (0, 100, 28, 0)), (96, 64, 640, (96, 0, 0, 0))])
def test_the_tpu_grouped_matmul_is_xlas_ragged_dot(M, K, N, sizes):
    """The megablox kernel (run by Pallas's interpreter here) and `jax.lax.ragged_dot` multiply
    each group's rows by its own matrix, empty groups and ragged tiles included."""
    from tpujob_trainer.models.moe_dropless import grouped_dot

    x = jax.random.normal(jax.random.key(0), (M, K))
    w = jax.random.normal(jax.random.key(1), (len(sizes), K, N))
    group = jnp.asarray(sizes, jnp.int32)
    want = np.concatenate([np.asarray(x[a:a + n] @ w[g]) for g, (a, n) in
                           enumerate(zip(np.cumsum((0, *sizes[:-1])), sizes, strict=True))])
    for platform in ("cpu", "tpu"):
        got = grouped_dot(x, w, group, platform, interpret=platform == "tpu")
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("routing", ["capacity", "dropless"])
def test_in_bf16_the_layer_is_the_reference_within_bf16_rounding(routing):
    moe = _moe(1, 0.75, jnp.bfloat16, routing)
    x = jax.random.normal(jax.random.key(2), (2, 12, 32)).astype(jnp.bfloat16)
    y, _ = run(moe, x)
    want = reference(moe, np.asarray(x, np.float32))
    assert y.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(y, np.float32), want, rtol=5e-2, atol=5e-2)
    # And its backward pass runs (XLA:CPU compiles no bf16 x bf16 -> f32 matmul of some
    # operand orders: the dispatch's once failed here, forward and back).
    graphdef, params = nnx.split(moe)
    grads = jax.jit(jax.grad(lambda p: jnp.sum(nnx.merge(graphdef, p)(x)[0].astype(jnp.float32))))(
        params)
    assert all(np.isfinite(np.asarray(g, np.float32)).all() for g in jax.tree.leaves(grads))


@pytest.mark.parametrize("routing", ["capacity", "dropless"])
def test_the_gradient_is_the_references(routing):
    """Through the expert weights and the routing weights (the router's gradient)."""
    moe = _moe(1, 0.75, jnp.float32, routing)
    graphdef, params = nnx.split(moe)
    x = jax.random.normal(jax.random.key(4), (2, 12, 32))
    g = np.asarray(jax.random.normal(jax.random.key(5), (2, 12, 32)))

    def loss(params):
        y, _ = nnx.merge(graphdef, params)(x)
        return jnp.sum(y * g)

    grads = jax.grad(loss)(params)
    eps = 1e-3
    for name in ("router_DxE", "w_out_ExFxD"):
        w = np.asarray(getattr(moe, name)[...])
        idx = np.unravel_index(np.argmax(np.abs(np.asarray(grads[name][...]))), w.shape)

        def ref_loss(delta, name=name, w=w, idx=idx):
            bumped = w.copy()
            bumped[idx] += delta
            getattr(moe, name)[...] = jnp.asarray(bumped)
            out = float(np.sum(reference(moe, np.asarray(x)) * g))
            getattr(moe, name)[...] = jnp.asarray(w)
            return out

        numeric = (ref_loss(eps) - ref_loss(-eps)) / (2 * eps)
        assert float(grads[name][...][idx]) == pytest.approx(numeric, rel=2e-2, abs=1e-3)


_SHARDED = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec
from tpujob_trainer.config.model import MoEConfig
from tpujob_trainer.config.mesh import MeshConfig
from tpujob_trainer.mesh import build_mesh
from tpujob_trainer.models.moe import MoE
from tpujob_trainer.sharding import activate, batch_sharding

moe = MoE(32, 64, MoEConfig(num_experts=4, experts_per_token=2, num_shared_experts=1,
                            mlp_dim=42, routing="dropless"),
          dtype=jnp.float32, param_dtype=jnp.float32, rngs=nnx.Rngs(3))
graphdef, params = nnx.split(moe)
x = jax.random.normal(jax.random.key(1), (8, 16, 32))
g = jax.random.normal(jax.random.key(2), (8, 16, 32))

def loss(p, x):
    y, aux = nnx.merge(graphdef, p)(x)
    return jnp.sum(y * g) + aux

def value_and_grads(mesh):
    with activate(mesh):
        if mesh is not None:
            x_in = jax.device_put(x, NamedSharding(mesh, PartitionSpec(*batch_sharding(mesh, 3).spec)))
        else:
            x_in = x
        lowered = jax.jit(jax.value_and_grad(loss)).lower(params, x_in)
        cost = lowered.compile().cost_analysis()
        flops = (cost[0] if isinstance(cost, list) else cost)["flops"]
        v, gr = jax.jit(jax.value_and_grad(loss))(params, x_in)
    return float(v), [np.asarray(a) for a in jax.tree.leaves(gr)], lowered.as_text(), flops

want_v, want_g, _, want_flops = value_and_grads(None)
out = {}
for ici in json.loads(sys.argv[1]):
    mesh, _ = build_mesh(MeshConfig(ici=ici))
    v, gr, text, flops = value_and_grads(mesh)
    out[json.dumps(ici)] = {
        "shard_map": "shard_map" in text or "sdy.manual_computation" in text,
        "flops_per_device": flops / want_flops,
        "value": abs(v - want_v) / abs(want_v),
        "grads": max(float(np.max(np.abs(a - b))) / (float(np.max(np.abs(b))) + 1e-12)
                     for a, b in zip(gr, want_g)),
    }
print(json.dumps(out))
"""


def test_dropless_on_a_mesh_of_eight_devices_is_the_single_device_layer():
    """Tokens split over data/fsdp/context and the experts' columns over tensor (the output
    summed over it): in value and in every gradient the same layer as on one device."""
    import json
    import os
    import subprocess
    import sys

    # Each device's share of the work: its tokens (over data, fsdp and context) times its
    # share of the experts' 42 columns (over tensor=2; not over tensor=4: they do not divide).
    shares = {'{"fsdp": 8}': 1 / 8, '{"fsdp": 4, "tensor": 2}': 1 / 8,
              '{"data": 2, "fsdp": 2, "context": 2}': 1 / 8, '{"fsdp": 2, "tensor": 4}': 1 / 2}
    meshes = [json.loads(m) for m in shares]
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    proc = subprocess.run([sys.executable, "-c", _SHARDED, json.dumps(meshes)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got.keys() == shares.keys()
    for ici, r in got.items():
        assert r["shard_map"], ici
        # Each device computes its share, not all the tokens or every column.
        assert r["flops_per_device"] < 1.2 * shares[ici], (ici, r)
        assert r["value"] < 1e-5 and r["grads"] < 1e-4, (ici, r)
