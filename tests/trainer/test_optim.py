"""Optimizers: schedule, weight-decay mask, Muon split, clipping, gradient accumulation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.trainer.helpers import TINY_MODEL
from tpujob_trainer.config import ModelConfig, OptimizerConfig
from tpujob_trainer.models import Decoder
from tpujob_trainer.optim import build_optimizer, build_schedule, decay_mask, muon_labels
from tpujob_trainer.step import init_state, train_step

pytestmark = pytest.mark.integration


def tiny_params():
    _, params = nnx.split(Decoder(ModelConfig(**TINY_MODEL), rngs=nnx.Rngs(0)))
    return nnx.to_pure_dict(params)


@pytest.mark.unit
def test_warmup_then_cosine_to_min():
    s = build_schedule(OptimizerConfig(lr=1.0, warmup_steps=10, min_lr_ratio=0.1), 110, 1.0)
    assert float(s(0)) == 0.0
    assert float(s(5)) == pytest.approx(0.5)
    assert float(s(10)) == pytest.approx(1.0)
    assert float(s(60)) == pytest.approx(0.55, abs=1e-3)
    assert float(s(110)) == pytest.approx(0.1)
    c = build_schedule(OptimizerConfig(lr=1.0, warmup_steps=4, schedule="constant"), 100, 1.0)
    assert [round(float(c(i)), 3) for i in (0, 2, 4, 50)] == [0.0, 0.5, 1.0, 1.0]


def test_decay_mask_and_muon_labels():
    params = tiny_params()
    mask = decay_mask(OptimizerConfig(), params)
    assert mask["layers"][0]["attn"]["wq_DxNxH"] is True
    assert mask["layers"][0]["attn_norm"]["scale"] is False
    assert mask["embed_VxD"] is False and mask["head_DxV"] is False
    assert decay_mask(OptimizerConfig(decay_norms_and_embeddings=True), params)["embed_VxD"] is True
    labels = muon_labels(params)
    assert labels["layers"][0]["mlp"]["w_in_Dx2xF"] == "muon"
    assert labels["layers"][0]["attn"]["wo_NxHxD"] == "muon"
    assert labels["embed_VxD"] == "adamw" and labels["final_norm"]["scale"] == "adamw"


def test_weight_decay_skips_norms_and_embeddings():
    params = tiny_params()
    tx, _ = build_optimizer(OptimizerConfig(warmup_steps=0, lr=0.1, weight_decay=0.5,
                                            schedule="constant", clip_norm=None), 10)
    zeros = jax.tree.map(jnp.zeros_like, params)
    updates, _ = tx.update(zeros, tx.init(params), params)
    assert float(jnp.abs(updates["embed_VxD"]).max()) == 0.0
    assert float(jnp.abs(updates["final_norm"]["scale"]).max()) == 0.0
    w = params["layers"][0]["mlp"]["w_out_FxD"]
    np.testing.assert_allclose(updates["layers"][0]["mlp"]["w_out_FxD"], -0.1 * 0.5 * w, rtol=1e-5)


def run_steps(opt: OptimizerConfig, accum: int = 1, steps: int = 3, batch_size: int = 4):
    cfg = ModelConfig(**TINY_MODEL)
    tx, schedule = build_optimizer(opt, 10)
    graphdef = nnx.graphdef(Decoder(cfg, rngs=nnx.Rngs(0)))
    state = init_state(cfg, tx, seed=0)
    step = jax.jit(lambda s, b: train_step(s, b, graphdef=graphdef, tx=tx, schedule=schedule,
                                           aux_weight=0.0, grad_accum=accum))
    rng = np.random.default_rng(0)
    out = []
    for _ in range(steps):
        b = {"tokens": jnp.asarray(rng.integers(0, 257, (batch_size, 33)), jnp.int32),
             "stop": jnp.zeros((batch_size,), jnp.int32)}
        state, m = step(state, b)
        out.append({k: float(v) for k, v in m.items()})
    return state, out


def test_muon_trains():
    _, m = run_steps(OptimizerConfig(kind="muon", warmup_steps=0, lr=3e-3, muon_lr=0.02), steps=4)
    assert all(np.isfinite(x["loss"]) for x in m)
    assert m[-1]["loss"] < m[0]["loss"]


def test_grad_accumulation_matches_one_big_batch():
    # Adam's first steps move each weight by about lr x sign(gradient), so a gradient near zero
    # whose float32 rounding differs between the two sums can move that weight by a whole step
    # (it did by 1.1% of one on an AMD EPYC, 0 on a Xeon). A large eps makes the update
    # proportional to the gradient: the parameters then compare the two gradients element by
    # element, at float32 rounding.
    opt = OptimizerConfig(warmup_steps=0, lr=1e-2, schedule="constant", eps=1.0)
    s1, m1 = run_steps(opt, accum=1, steps=2)
    s2, m2 = run_steps(opt, accum=2, steps=2)
    for a, b in zip(m1, m2, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
    moved = 0.0
    for a, b, p0 in zip(jax.tree.leaves(s1["params"]), jax.tree.leaves(s2["params"]),
                        jax.tree.leaves(run_steps(opt, steps=0)[0]["params"]), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
        moved = max(moved, float(np.abs(np.asarray(a) - np.asarray(p0)).max()))
    assert moved > 1e-5, "the steps did not move the parameters: nothing was compared"


def test_clipping_scales_the_gradient():
    # A large Adam eps makes the update proportional to the (clipped) gradient, so clipping to a
    # tiny norm shrinks the parameter change; the reported grad norm is the unclipped one.
    params = tiny_params()
    grads = jax.tree.map(jnp.ones_like, params)
    deltas = {}
    for clip in (None, 1e-3):
        tx, _ = build_optimizer(OptimizerConfig(warmup_steps=0, lr=1.0, eps=1.0, weight_decay=0.0,
                                                schedule="constant", clip_norm=clip), 10)
        updates, _ = tx.update(grads, tx.init(params), params)
        deltas[clip] = float(jnp.abs(updates["embed_VxD"]).max())
    assert deltas[1e-3] < deltas[None] / 100
    _, m = run_steps(OptimizerConfig(warmup_steps=0, clip_norm=1e-3), steps=1)
    assert m[0]["grad_norm"] > 1e-3


@pytest.mark.parametrize("name,shape", [("wq_DxNxH", (8, 2, 4)), ("wo_NxHxD", (2, 4, 8)),
                                        ("w_in_Dx2xF", (8, 2, 6)), ("w_out_FxD", (6, 8)),
                                        ("w_in_ExDx2xF", (3, 8, 2, 6))])
def test_muon_on_a_stack_of_layers_is_muon_on_each_layer(name, shape):
    """Layers are stored stacked: Muon must orthogonalize each layer's matrix on its own, as it
    would the layers' weights stored apart (the layer axis is one more independent axis)."""
    from optax.contrib import scale_by_muon

    from tpujob_trainer.optim import muon_dims

    rng = np.random.default_rng(0)
    layers = [jnp.asarray(rng.normal(size=shape), jnp.float32) for _ in range(3)]
    grads = [jnp.asarray(rng.normal(size=shape), jnp.float32) for _ in range(3)]
    tx = scale_by_muon(weight_dimension_numbers=lambda p: jax.tree.map_with_path(muon_dims, p))
    apart = {f"l{i}": {name: w} for i, w in enumerate(layers)}
    apart_g = {f"l{i}": {name: g} for i, g in enumerate(grads)}
    want, _ = tx.update(apart_g, tx.init(apart), apart)
    stacked, stacked_g = {name: jnp.stack(layers)}, {name: jnp.stack(grads)}
    got, _ = tx.update(stacked_g, tx.init(stacked), stacked)
    for i in range(3):
        np.testing.assert_allclose(np.asarray(got[name][i]), np.asarray(want[f"l{i}"][name]),
                                   rtol=1e-4, atol=1e-5)
