"""The dense MLP's backward by chunks of its hidden width (a TPU target): when
(`tpujob_plan.mlp_chunks`, pure), that it computes the plain MLP's value and gradients
(`models.mlp_chunked`), that the model takes it where the count says so, and that the TPU
compiler's program holds less with it."""

from __future__ import annotations

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.trainer.helpers import TINY_MODEL
from tpujob_plan.mlp_chunks import mlp_chunks
from tpujob_trainer.config import ModelConfig
from tpujob_trainer.models import Decoder, layers
from tpujob_trainer.models import mlp_chunked as mc
from tpujob_trainer.step import loss_fn


@pytest.mark.parametrize("tokens,width,platform,remat,want", [
    (16384, 8192, "cpu", "full", 1),        # off a TPU: the plain path
    (16384, 8192, "tpu", "minimal", 1),     # a policy that keeps the MLP's values
    (16384, 8192, "tpu", "none", 1),
    (4096, 8192, "tpu", "full", 1),         # exactly 64 MiB: one chunk
    (4097, 8192, "tpu", "full", 2),         # a token more: two
    (8192, 8192, "tpu", "full", 2),         # 128 MiB: two of 64 MiB
    (16384, 8192, "tpu", "full", 2),        # 256 MiB (the 1.14B model on a v5p-8): two
    (16385, 8192, "tpu", "full", 3),        # a token more: three
    (8192, 14336, "tpu", "full", 2),        # Llama 3 8B's MLP at 8192 tokens: 224 MiB
    (8192, 7168, "tpu", "full", 2),         # its half (over tensor=2): 112 MiB, two
    (1 << 20, 8192, "tpu", "full", 8),      # at most MAX_CHUNKS
    (1 << 20, 256, "tpu", "full", 2),       # no chunk narrower than a lane (2 of 128)
    (1 << 20, 200, "tpu", "full", 1),       # under two lanes wide: one chunk
    (1 << 20, 64, "tpu", "full", 1),        # under a lane wide: one chunk, never none
])
def test_mlp_chunks(tokens, width, platform, remat, want):
    assert mlp_chunks(tokens, width, 2, platform=platform, remat=remat) == want


@pytest.mark.parametrize("data, want", [(1, 2), (2, 1), (4, 1)])
def test_no_mlp_chunks_where_data_splits_the_batch(data, want):
    """Data parallelism (as across slices): the optimizer's state split over `data` frees more
    than the chunks would, and their traffic costs (tpujob_plan.mlp_chunks)."""
    assert mlp_chunks(8192, 8192, 2, data=data) == want


def _plain_mlp(x, wg, wu, wo):
    h = (jax.nn.silu(jnp.einsum("bld,df->blf", x, wg)) * jnp.einsum("bld,df->blf", x, wu))
    return jnp.einsum("blf,fd->bld", h.astype(x.dtype), wo)


def _mlp_inputs(length, seed, dtype, width=512):
    kx, kg, ku, ko, kd = jax.random.split(jax.random.key(seed), 5)
    x = jax.random.normal(kx, (2, length, 16))
    wg, wu = (jax.random.normal(k, (16, width)) * 0.3 for k in (kg, ku))
    wo = jax.random.normal(ko, (width, 16)) * 0.1
    dy = jax.random.normal(kd, (2, length, 16))
    return [a.astype(dtype) for a in (x, wg, wu, wo, dy)]


@pytest.mark.parametrize("width,chunks,widths", [
    (512, 1, [512]), (512, 2, [256, 256]), (512, 4, [128] * 4),
    (640, 3, [256, 256, 128]),            # uneven: whole lanes, the last takes the rest
    (256, 8, [128, 128]),                 # no chunk narrower than a lane
])
def test_chunked_mlp_value_and_gradients_are_the_plain_ones(width, chunks, widths):
    *args, dy = _mlp_inputs(6, width + chunks, jnp.float32, width)
    seen = []
    real = mc._gate_up
    with pytest.MonkeyPatch.context() as m:
        m.setattr(mc, "_gate_up", lambda x, wg, wu: seen.append(wg.shape[1]) or real(x, wg, wu))
        got, vjp_got = jax.vjp(lambda *a: mc.mlp_chunked(*a, chunks), *args)
        grads_got = vjp_got(dy)
    assert seen == [width] + widths        # the forward whole, the backward by chunks
    want, vjp_want = jax.vjp(_plain_mlp, *args)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    for a, b in zip(grads_got, vjp_want(dy), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def _rel_error(got, ref):
    got = jnp.asarray(got, jnp.float32)
    return float(jnp.linalg.norm(got - ref) / jnp.linalg.norm(ref))


@pytest.mark.parametrize("seed", [0, 1])
def test_in_bf16_the_chunked_gradients_are_as_close_to_float32_as_the_plain_ones(seed):
    """In bf16 both paths round; each gradient of the chunked MLP is as close to the float32
    result as the plain MLP's (the weights' gradients summed over chunks in float32), whatever
    the chunk count."""
    *args, dy = _mlp_inputs(64, seed, jnp.float32)
    ref = jax.vjp(_plain_mlp, *args)[1](dy)
    bf = [a.astype(jnp.bfloat16) for a in (*args, dy)]
    plain = jax.vjp(_plain_mlp, *bf[:4])[1](bf[4])
    for chunks in (2, 4):
        got = jax.vjp(lambda *a, c=chunks: mc.mlp_chunked(*a, c), *bf[:4])[1](bf[4])
        for g, p, r in zip(got, plain, ref, strict=True):
            assert g.dtype == jnp.bfloat16
            assert _rel_error(g, r) <= 1.25 * _rel_error(p, r) + 1e-4, (chunks, _rel_error(g, r),
                                                                         _rel_error(p, r))


def test_in_bf16_the_input_gradient_is_summed_over_chunks_in_float32():
    """Each chunk's part of the input's gradient is added in float32 and rounded to bf16 once at
    the end, as the plain path's one matmul over the hidden width rounds it once (summed in
    bf16, every chunk would round the running sum again); the weights' gradients are each
    chunk's own columns, never summed. Read from the backward's program."""
    *args, dy = _mlp_inputs(8, 0, jnp.bfloat16)
    jaxpr = jax.make_jaxpr(lambda *a: jax.vjp(lambda *b: mc.mlp_chunked(*b, 4), *a)[1](dy))(*args)
    adds = [e.outvars[0].aval for e in _equations(jaxpr.jaxpr) if e.primitive.name == "add"]
    of_x = [a for a in adds if a.shape == (2, 8, 16)]
    assert len(of_x) == 2 * 4                        # two matmuls' parts, four chunks
    assert {a.dtype for a in of_x} == {jnp.dtype(jnp.float32)}
    weight_shapes = {(16, 512), (512, 16), (16, 128), (128, 16)}
    assert not [a for a in adds if a.shape in weight_shapes]


def _equations(jaxpr):
    for e in jaxpr.eqns:
        yield e
        for sub in jax.extend.core.jaxprs_in_params(e.params):
            yield from _equations(sub)


def _model(monkeypatch, platform, chunk_bytes, remat="full"):
    """Loss and gradients of the tiny model (remat `remat`) as compiled for `platform`, MLP
    chunks of at most `chunk_bytes` per MLP-wide value; the counts the layers took."""
    import tpujob_plan.mlp_chunks as plan

    monkeypatch.setattr(layers, "target_platform", lambda: platform)
    monkeypatch.setattr(mc, "target_platform", lambda: platform)
    monkeypatch.setattr(plan, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(plan, "CHUNKED_FROM_BYTES", chunk_bytes)
    calls = []
    real = mc.mlp_chunked
    monkeypatch.setattr(layers, "mlp_chunked", lambda *a: calls.append(a[4]) or real(*a))
    cfg = ModelConfig(**{**TINY_MODEL, "remat": remat, "dtype": "float32", "mlp_dim": 512})
    graphdef, params = nnx.split(Decoder(cfg, rngs=nnx.Rngs(0)))
    toks = jax.random.randint(jax.random.key(1), (2, 17), 0, cfg.vocab_size)
    # Traced (and the chunk counts taken) once per call: a new function each time.
    value, grads = jax.jit(jax.value_and_grad(
        lambda p: loss_fn(p, graphdef, toks, 0.0)[0]))(params)
    return float(value), grads, calls


@pytest.mark.integration
def test_on_a_tpu_target_under_remat_full_the_models_mlp_is_chunked_and_the_same(monkeypatch):
    plain, g_plain, calls = _model(monkeypatch, "tpu", 1 << 30)
    assert calls == []                                   # under the threshold: the plain path
    # 2 x 16 positions x the MLP's 512 columns x 4 bytes; chunks of a quarter: 4 of 128.
    value = 2 * 16 * 512 * 4
    chunked, g_chunked, calls = _model(monkeypatch, "tpu", value // 4)
    assert calls and set(calls) == {4}
    assert chunked == pytest.approx(plain, rel=1e-6)
    for a, b in zip(jax.tree.leaves(g_chunked), jax.tree.leaves(g_plain), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    # Remat minimal keeps the MLP's values by choice, and a CPU target runs the plain path.
    assert _model(monkeypatch, "tpu", value // 4, remat="minimal")[2] == []
    assert _model(monkeypatch, "cpu", value // 4)[2] == []


@pytest.mark.integration
def test_compiled_for_a_tpu_the_chunked_mlp_holds_less(monkeypatch):
    """One MLP layer at 64 x 256 tokens on a v6e-8: 16 MiB per MLP-wide value per device, in 2
    chunks with both thresholds scaled down by 8 (at the real ones, the same holds for 8 x 8192
    tokens of MLP 8192, 128 MiB a value, at half again the compile time); the compiler's
    program holds at least one such value less than with the chunks off."""
    import tpujob_plan.mlp_chunks as plan
    from tpujob_trainer import aot
    from tpujob_trainer.config.root import TrainerConfig

    monkeypatch.setattr(plan, "CHUNKED_FROM_BYTES", plan.CHUNKED_FROM_BYTES // 8)
    monkeypatch.setattr(plan, "CHUNK_BYTES", plan.CHUNK_BYTES // 8)

    def temp(chunks):
        cfg = TrainerConfig.from_dict({
            "model": {"vocab_size": 512, "d_model": 256, "n_layers": 1, "n_heads": 2,
                      "n_kv_heads": 2, "head_dim": 128, "mlp_dim": 4096, "remat": "full",
                      "mlp_chunks": chunks},
            "train": {"global_batch": 64, "seq_len": 256}})
        return aot.compile_step(cfg, "v6e-8").temp_bytes

    value = 64 * 256 // 8 * 4096 * 2
    assert mlp_chunks(64 * 256 // 8, 4096, 2) == 2
    plain, chunked = temp(1), temp("auto")
    assert chunked <= plain - value, (plain, chunked)


@pytest.mark.integration
@pytest.mark.parametrize("axes, shape, want", [
    ({"fsdp": 8}, (16, 2048), 1),                  # 2 x 2048 tokens x 8192 columns: 64 MiB
    ({"fsdp": 4, "context": 2}, (16, 4096), 2),    # 4 x 2048 tokens: 128 MiB
    ({"fsdp": 2, "tensor": 4}, (8, 8192), 2),      # 4 x 8192 tokens x 2048 columns: 128 MiB
    ({"data": 2, "fsdp": 4}, (16, 4096), 1),       # 128 MiB, but the batch split over data
])
def test_auto_chunks_count_what_one_device_holds_on_the_mesh_compiled_for(axes, shape, want):
    """`chunks_for` reads one device's tokens (batch over data x fsdp x expert, sequence over
    context), MLP columns (over tensor) and `data` from the active mesh: the TPU compiler's v6e-8
    devices, no TPU needed; with no mesh (this CPU), the plain path."""
    from jax.sharding import Mesh

    from tpujob_trainer.aot import topology_devices
    from tpujob_trainer.sharding import activate

    devices = topology_devices("v6e-8")
    names = ("data", "fsdp", "context", "tensor", "expert")
    mesh = Mesh(np.array(devices).reshape([axes.get(n, 1) for n in names]), names)
    x = jax.ShapeDtypeStruct((*shape, 64), jnp.bfloat16)
    with activate(mesh):
        assert mc.chunks_for(x, 8192, "full") == want
        assert mc.chunks_for(x, 8192, "minimal") == 1
        assert mc.chunks_for(x, 8192, "full", 3) == 3      # a count is taken as it is
    assert mc.chunks_for(x, 8192, "full") == 1             # no mesh: this CPU, the plain path


@pytest.mark.integration
def test_on_a_gpu_target_the_mlp_is_two_matmuls_never_chunked_and_the_same(monkeypatch):
    cpu, g_cpu, _ = _model(monkeypatch, "cpu", 1 << 30)
    pairs = []
    real = layers.swiglu_pair
    monkeypatch.setattr(layers, "swiglu_pair", lambda *a: pairs.append(a) or real(*a))
    value = 2 * 16 * 512 * 4
    gpu, g_gpu, calls = _model(monkeypatch, "gpu", value // 4)  # chunks would be due on a TPU
    assert pairs and calls == []       # gate and up as two matmuls; no chunks off a TPU
    assert gpu == pytest.approx(cpu, rel=1e-6)
    for a, b in zip(jax.tree.leaves(g_gpu), jax.tree.leaves(g_cpu), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
