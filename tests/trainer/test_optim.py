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
from tpujob_trainer.optim import MUON_DIMS, build_optimizer, build_schedule, decay_mask, muon_labels
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


@pytest.mark.parametrize("warmup", [10, 25])
def test_a_warmup_as_long_as_the_run_or_longer_ramps_over_the_run(warmup):
    """Cosine with no steps left after the warmup (a short trial run of a long config): the
    warmup takes the run's steps, then the peak; no cosine of zero steps (optax refuses one)."""
    s = build_schedule(OptimizerConfig(lr=1.0, warmup_steps=warmup, min_lr_ratio=0.1), 10, 1.0)
    assert [round(float(s(i)), 3) for i in (0, 5, 10, 20)] == [0.0, 0.5, 1.0, 1.0]


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


@pytest.mark.parametrize("name,shape,decays", [
    ("w_out_FxD", (6, 8), True),            # one layer's matrix, unstacked
    ("w_out_FxD", (2, 6, 8), True),         # stacked over layers
    ("scale", (8,), False), ("scale", (2, 8), False),
    ("embed_VxD", (16, 8), False), ("head_DxV", (8, 16), False), ("bias", (8,), False)])
def test_weight_decay_goes_to_matrices_not_to_vectors_norms_or_embeddings(name, shape, decays):
    mask = decay_mask(OptimizerConfig(), {name: jnp.zeros(shape)})
    assert mask[name] is decays


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


def _as_matrices(name: str, w: np.ndarray) -> list[np.ndarray]:
    """The (input features x output features) matrices a layer weight multiplies by, read from its
    name's axis letters as the model's einsums use them: the attention's and the MLP's output
    projections (`wo`, `w_out`) map to D, the others map D to their other axes; E (experts) and
    2 (the gate/up pair) index independent matrices."""
    letters = name.rsplit("_", 1)[1].split("x")
    independent = [i for i, a in enumerate(letters) if a in ("E", "2")]
    into_d = name.startswith(("wo_", "w_out_"))
    output = [i for i, a in enumerate(letters)
              if i not in independent and (a == "D") == into_d]
    inputs = [i for i in range(len(letters)) if i not in independent and i not in output]
    moved = np.transpose(w, independent + inputs + output)
    n_in = int(np.prod([w.shape[i] for i in inputs]))
    n_out = int(np.prod([w.shape[i] for i in output]))
    return list(moved.reshape(-1, n_in, n_out))


_SIZES = {"D": 8, "N": 2, "K": 1, "H": 4, "F": 6, "E": 3, "2": 2}


@pytest.mark.parametrize("name", sorted(MUON_DIMS))
def test_muon_orthogonalizes_the_matrix_each_weight_multiplies_by(name):
    """Muon's update of every hidden weight is Muon's update of the plain (input x output)
    matrix its matmul uses: each weight's reduction and output axes are the right ones."""
    from optax.contrib import MuonDimensionNumbers, scale_by_muon

    from tpujob_trainer.optim import muon_dims

    shape = tuple(_SIZES[a] for a in name.rsplit("_", 1)[1].split("x"))
    rng = np.random.default_rng(1)
    weight = jnp.asarray(rng.normal(size=shape), jnp.float32)
    grad = np.asarray(rng.normal(size=shape), np.float32)
    tx = scale_by_muon(weight_dimension_numbers=lambda p: jax.tree.map_with_path(muon_dims, p))
    got, _ = tx.update({name: jnp.asarray(grad)}, tx.init({name: weight}), {name: weight})
    plain = scale_by_muon(weight_dimension_numbers=lambda p: jax.tree.map(
        lambda _: MuonDimensionNumbers(0, 1), p))
    for got_m, grad_m in zip(_as_matrices(name, np.asarray(got[name])), _as_matrices(name, grad),
                             strict=True):
        g = jnp.asarray(grad_m)
        want, _ = plain.update({"w": g}, plain.init({"w": g}), {"w": g})
        np.testing.assert_allclose(got_m, np.asarray(want["w"]), rtol=1e-4, atol=1e-5)


def test_muon_steps_with_nesterov_momentum():
    """Muon as its authors run it: Nesterov momentum (the first step alone cannot tell: one
    gradient orthogonalized is the same at any scale; the second can)."""
    from optax.contrib import scale_by_muon

    from tpujob_trainer.optim import muon_dims

    rng = np.random.default_rng(2)
    w = {"w_out_FxD": jnp.asarray(rng.normal(size=(2, 6, 8)), jnp.float32)}
    grads = [{"w_out_FxD": jnp.asarray(rng.normal(size=(2, 6, 8)), jnp.float32)}
             for _ in range(2)]
    cfg = OptimizerConfig(kind="muon", muon_lr=1.0, muon_momentum=0.9, warmup_steps=0,
                          schedule="constant", clip_norm=None)
    tx, _ = build_optimizer(cfg, 10)
    outcomes = {}
    for nesterov in (True, False):
        ref = scale_by_muon(beta=0.9, nesterov=nesterov,
                            weight_dimension_numbers=lambda p: jax.tree.map_with_path(muon_dims, p))
        state = ref.init(w)
        for g in grads:
            outcomes[nesterov], state = ref.update(g, state, w)
    state = tx.init(w)
    for g in grads:
        got, state = tx.update(g, state, w)
    np.testing.assert_allclose(-np.asarray(got["w_out_FxD"]),
                               np.asarray(outcomes[True]["w_out_FxD"]), rtol=1e-4, atol=1e-5)
    assert not np.allclose(outcomes[True]["w_out_FxD"], outcomes[False]["w_out_FxD"], atol=1e-3)
