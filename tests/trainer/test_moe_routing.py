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
    C, k = moe.capacity(L), moe.top_k

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


def _moe(shared: int, capacity_factor: float, dtype) -> MoE:
    cfg = MoEConfig(num_experts=4, experts_per_token=2, num_shared_experts=shared,
                    capacity_factor=capacity_factor)
    return MoE(32, 48, cfg, dtype=dtype, param_dtype=jnp.float32, rngs=nnx.Rngs(3))


@pytest.mark.parametrize("shared,capacity_factor", [(0, 2.0), (1, 2.0), (0, 0.5), (1, 0.75)])
def test_the_layer_is_the_per_token_reference(shared, capacity_factor):
    moe = _moe(shared, capacity_factor, jnp.float32)
    x = jax.random.normal(jax.random.key(1), (2, 12, 32))
    y, _ = run(moe, x)
    np.testing.assert_allclose(np.asarray(y), reference(moe, np.asarray(x)), rtol=1e-4, atol=1e-5)


def test_in_bf16_the_layer_is_the_reference_within_bf16_rounding():
    moe = _moe(1, 0.75, jnp.bfloat16)
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


def test_the_gradient_is_the_references():
    """Through the expert weights and the routing weights (the router's gradient)."""
    moe = _moe(1, 0.75, jnp.float32)
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
