"""The model's matmul (`layers.dot`) on a CPU with bf16 dot-product instructions: bf16
operands, float32 accumulation and result, and a backward pass whose matmuls take bf16 operands
too. Checked against autodiff of the float32 einsum, and on the compiled bf16 train step's HLO
(XLA:CPU widens a matmul with a 16-bit result to float32 whole, so a projection written as a
plain bf16 einsum shows up there as f32 x f32). On a CPU without them: the plain einsum.
Which CPU this is is set here, so the tests ask the same of every machine."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.trainer.helpers import TINY_MODEL
from tpujob_trainer.config import ModelConfig
from tpujob_trainer.models import Decoder, layers
from tpujob_trainer.models.layers import dot
from tpujob_trainer.step import loss_fn

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def cpu_with_bf16_matmul(monkeypatch):
    monkeypatch.setattr(layers, "bf16_matmul_here", lambda: True)

EQUATIONS = [  # (equation, x shape, w shape): the model's projections, its head, an expert batch
    ("bld,dnh->blnh", (2, 8, 16), (16, 4, 8)),
    ("blnh,nhd->bld", (2, 8, 4, 8), (4, 8, 16)),
    ("bld,dkf->blkf", (2, 8, 16), (16, 2, 32)),
    ("blf,fd->bld", (2, 8, 32), (32, 16)),
    ("bld,vd->blv", (2, 8, 16), (40, 16)),
    ("ebcd,edkf->ebckf", (3, 2, 4, 16), (3, 16, 2, 8)),
]


def _operands(xs, ws, seed=0):
    kx, kw, kg = jax.random.split(jax.random.key(seed), 3)
    return (jax.random.normal(kx, xs, jnp.float32), jax.random.normal(kw, ws, jnp.float32), kg)


@pytest.mark.parametrize("eq, xs, ws", EQUATIONS)
def test_forward_and_gradients_match_the_float32_einsum(eq, xs, ws):
    x, w, kg = _operands(xs, ws)
    xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
    out = dot(eq, xb, wb)
    assert out.dtype == jnp.float32
    ref = jnp.einsum(eq, xb.astype(jnp.float32), wb.astype(jnp.float32))
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-5, atol=1e-5)

    g = jax.random.normal(kg, out.shape, jnp.float32)
    _, vjp = jax.vjp(lambda a, b: dot(eq, a, b), xb, wb)
    dx, dw = vjp(g)
    assert dx.dtype == jnp.bfloat16 and dw.dtype == jnp.bfloat16
    _, ref_vjp = jax.vjp(lambda a, b: jnp.einsum(eq, a, b), xb.astype(jnp.float32),
                         wb.astype(jnp.float32))
    rdx, rdw = ref_vjp(g)
    # The gradient is rounded to bf16 once before its matmuls: a bf16 rounding's error.
    for got, want in ((dx, rdx), (dw, rdw)):
        got, want = np.asarray(got, np.float32), np.asarray(want)
        assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()


@pytest.mark.parametrize("eq, xs, ws", EQUATIONS[:2])
def test_float32_operands_take_the_plain_einsum(eq, xs, ws):
    x, w, _ = _operands(xs, ws)
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda a, b: dot(eq, a, b).sum()))(x, w))
    assert "custom_vjp" not in jaxpr
    np.testing.assert_array_equal(np.asarray(dot(eq, x, w)), np.asarray(jnp.einsum(eq, x, w)))


@pytest.mark.parametrize("eq, xs, ws", EQUATIONS[:2])
def test_without_bf16_instructions_a_bf16_matmul_is_the_plain_einsum(monkeypatch, eq, xs, ws):
    monkeypatch.setattr(layers, "bf16_matmul_here", lambda: False)
    x, w, _ = _operands(xs, ws)
    xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda a, b: dot(eq, a, b).astype(jnp.float32).sum()))(
        xb, wb))
    assert "custom_vjp" not in jaxpr
    assert dot(eq, xb, wb).dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(dot(eq, xb, wb), np.float32),
                                  np.asarray(jnp.einsum(eq, xb, wb), np.float32))


def _dots(hlo: str) -> list[tuple[list[str], str]]:
    """(operand dtypes, op name) of every dot in an optimized HLO module's fused computations."""
    found = []
    for params, body in re.findall(r"^%\S+ \((.*?)\) -> .*? \{\n(.*?)\n\}", hlo, re.S | re.M):
        for line in body.splitlines():
            m = re.match(r"\s*(?:ROOT )?%(\S+) = \S+ dot\(%(\S+), %(\S+)\)", line)
            if not m:
                continue
            types = dict(re.findall(r"%?(\S+?): (\w+)\[", params))
            types.update(re.findall(r"%(\S+) = (\w+)\[", body))
            name = re.search(r'op_name="([^"]*)"', line)
            found.append(([types.get(m.group(2)), types.get(m.group(3))],
                          name.group(1) if name else ""))
    return found


MOE = {"num_experts": 4, "experts_per_token": 2, "every": 2, "first_dense_layers": 0,
       "capacity_factor": 2.0}


@pytest.mark.parametrize("extra", [{}, {"n_layers": 3, "moe": MOE}], ids=["dense", "moe"])
def test_every_projection_of_the_compiled_bf16_step_is_a_bf16_matmul(extra):
    cfg = ModelConfig(**{**TINY_MODEL, "dtype": "bfloat16", "remat": "full", **extra})
    graphdef, params = nnx.split(Decoder(cfg, rngs=nnx.Rngs(0)))
    params = nnx.to_pure_dict(params)
    toks = jnp.zeros((2, 17), jnp.int32)
    grad = jax.jit(jax.grad(lambda p: loss_fn(p, graphdef, toks, 0.0)[0]))
    dots = _dots(grad.lower(params).compile().as_text())
    # Attention's own two matmuls (scores and the weighted sum) are jax.nn.dot_product_attention's.
    # The MoE router runs in float32 on purpose ("bld,de->ble", "bklec,blk->blec").
    projections = [(types, name) for types, name in dots if "BTNH" not in name
                   and "BNTS" not in name and "->ble" not in name and "->blec/" not in name]
    assert len(projections) >= 5 * 3, projections  # q, k, v, o, in, out, head: fwd and back
    wide = [(types, name) for types, name in projections if "f32" in types]
    assert not wide, f"matmuls on float32 operands in a bf16 step: {wide}"
