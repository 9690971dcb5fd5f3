"""The output layer and the loss by vocabulary chunks (`models.output_loss`, chosen by
`tpujob_plan.vocab_chunks` when compiled for a TPU): the same loss and gradients as the plain
output layer then `step.cross_entropy`, whatever the chunks (even or not); the model's loss on a
TPU target takes that path and gives the same loss and gradients as on the CPU; compiled for a
TPU, a step with large logits holds one chunk of them, not all; and the MLP's two matmuls on a
TPU target give what the stacked one gives elsewhere."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.trainer.helpers import TINY_MODEL
from tpujob_plan.vocab_chunks import LANE, chunk_bounds, vocab_chunks
from tpujob_trainer.config import ModelConfig
from tpujob_trainer.models import Decoder, layers
from tpujob_trainer.models import output_loss as ol
from tpujob_trainer.step import cross_entropy, loss_fn

pytestmark = pytest.mark.integration


def _plain(x, w, t):
    return cross_entropy(jnp.einsum("bld,dv->blv", x, w), t)


@pytest.mark.parametrize("vocab,chunks,dtype", [
    (640, 1, jnp.float32), (640, 2, jnp.float32), (640, 5, jnp.float32),
    (600, 3, jnp.float32),        # widths 256, 256, 88: the last chunk is narrower
    (1000, 4, jnp.bfloat16),
])
def test_chunked_loss_and_gradients_are_the_plain_ones(vocab, chunks, dtype):
    kx, kw, kt = jax.random.split(jax.random.key(chunks), 3)
    x = jax.random.normal(kx, (2, 6, 16)).astype(dtype)
    w = (jax.random.normal(kw, (16, vocab)) * 0.7).astype(dtype)
    # Targets in every chunk, the first and last columns among them.
    t = jax.random.randint(kt, (2, 6), 0, vocab).at[0, 0].set(0).at[1, 5].set(vocab - 1)
    tol = dict(rtol=2e-2, atol=2e-3) if dtype == jnp.bfloat16 else dict(rtol=1e-5, atol=1e-6)
    got = ol.output_loss(x, w, t, chunks)
    np.testing.assert_allclose(float(got), float(_plain(x, w, t)), **tol)
    for scale in (1.0, 3.0):    # the upstream gradient scales it
        g_got = jax.grad(lambda x, w, s=scale: s * ol.output_loss(x, w, t, chunks),
                         argnums=(0, 1))(x, w)
        g_want = jax.grad(lambda x, w, s=scale: s * _plain(x, w, t), argnums=(0, 1))(x, w)
        for a, b in zip(g_got, g_want, strict=True):
            assert a.dtype == b.dtype == dtype
            np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), **tol)


@pytest.mark.parametrize("vocab,tokens,platform,split,data,want", [
    (32000, 4096, "cpu", 1, 1, 1),                 # off a TPU: the plain path
    (32000, 4096, "tpu", 1, 1, 1),                 # 250 MiB of logits: under one chunk
    (32000, 8192, "tpu", 1, 1, 2),                 # 500 MiB: at least 2 chunks
    (32000, 16384, "tpu", 1, 1, 2),                # 1000 MiB: 2 of <= 512 MiB
    (32000, 16800, "tpu", 1, 1, 3),                # 1025.4 MiB: 3
    (32000, 8192, "tpu", 2, 1, 1),                 # the vocabulary split over the mesh already
    (128256, 8192, "tpu", 1, 1, 4),                # Llama 3's vocabulary: 2 GiB
    (128256, 8192, "tpu", 1, 2, 1),                # the batch split over `data` (slices)
    (128256, 65536, "tpu", 1, 1, 16),              # at most MAX_CHUNKS (16)
    (32768, 4096, "tpu", 1, 1, 1),                 # exactly 256 MiB: one chunk
    (32768, 4097, "tpu", 1, 1, 2),                 # a token more: two
    (32768, 8192, "tpu", 1, 1, 2),                 # exactly 512 MiB: two
    (32768, 16384, "tpu", 1, 1, 2),                # exactly 1 GiB: two of 512 MiB
    (32768, 16385, "tpu", 1, 1, 3),                # a token more: three
    (256, 1 << 20, "tpu", 1, 1, 2),                # no chunk narrower than a lane
    (300, 1 << 20, "tpu", 1, 1, 2),                # 256 and 44: no more than whole lanes
])
def test_vocab_chunks(vocab, tokens, platform, split, data, want):
    assert vocab_chunks(vocab, tokens, 2, platform=platform, vocab_split=split, data=data) == want
    for generation in ("v6e", "tpu7x", "v5litepod", None):
        assert vocab_chunks(vocab, tokens, 2, platform=platform, vocab_split=split, data=data,
                            generation=generation) == want
    # On a v5p the step peaks in the layers whatever the logits: never chunked.
    assert vocab_chunks(vocab, tokens, 2, platform=platform, vocab_split=split, data=data,
                        generation="v5p") == 1


@pytest.mark.parametrize("vocab,chunks", [(32000, 2), (128256, 8), (600, 3), (1000, 4), (50, 1)])
def test_chunk_bounds_cover_the_vocabulary_in_lane_widths(vocab, chunks):
    bounds = chunk_bounds(vocab, chunks)
    assert bounds[0][0] == 0 and bounds[-1][1] == vocab
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    assert all((end - start) % LANE == 0 for start, end in bounds[:-1])
    assert len(bounds) <= chunks
    # No chunk wider than an even share of the vocabulary rounded up to whole lanes.
    assert max(e - s for s, e in bounds) < -(-vocab // chunks) + LANE


def _model_loss(monkeypatch, platform, vocab_chunk_bytes):
    """Loss and gradients of the tiny model with a 1024-word vocabulary, the output layer
    chunked as on `platform`, chunks of at most `vocab_chunk_bytes` of logits."""
    import tpujob_plan.vocab_chunks as vc

    monkeypatch.setattr(ol, "target_platform", lambda: platform)
    monkeypatch.setattr(vc, "CHUNK_BYTES", vocab_chunk_bytes)
    monkeypatch.setattr(vc, "CHUNKED_FROM_BYTES", vocab_chunk_bytes)
    calls = []
    real = ol._output_loss
    monkeypatch.setattr(ol, "_output_loss", lambda *a: calls.append(a[3]) or real(*a))
    cfg = ModelConfig(**{**TINY_MODEL, "vocab_size": 1024})
    graphdef, params = nnx.split(Decoder(cfg, rngs=nnx.Rngs(0)))
    toks = jax.random.randint(jax.random.key(1), (2, 17), 0, 1024)
    # Traced (and the chunk counts taken) once per call: a new function each time.
    value, grads = jax.jit(jax.value_and_grad(
        lambda p: loss_fn(p, graphdef, toks, 0.0)[0]))(params)
    return float(value), grads, calls


def test_on_a_tpu_target_the_models_loss_is_chunked_and_the_same(monkeypatch):
    plain, g_plain, calls = _model_loss(monkeypatch, "cpu", 1)
    assert calls == []
    # 2 x 16 tokens x 1024 words x 4 bytes = 128 KiB of logits: chunks of 32 KiB are 4.
    chunked, g_chunked, calls = _model_loss(monkeypatch, "tpu", 32 * 1024)
    assert calls == [4]
    assert chunked == pytest.approx(plain, rel=1e-6)
    for a, b in zip(jax.tree.leaves(g_chunked), jax.tree.leaves(g_plain), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    # Logits under the cap: one chunk, the plain path even on a TPU.
    _, _, calls = _model_loss(monkeypatch, "tpu", 1 << 30)
    assert calls == []


def test_compiled_for_a_tpu_the_step_holds_one_chunk_of_the_logits(monkeypatch):
    import tpujob_plan.vocab_chunks as vc
    from tpujob_trainer import aot
    from tpujob_trainer.config.root import TrainerConfig

    # 64 x 256 tokens over 8 devices, a 32768-word vocabulary: 128 MiB of bf16 logits per
    # device, taken in 4 chunks of 32 MiB with both thresholds scaled down by 16 (at the real
    # ones, the same holds for 64 x 1024 tokens of a 131072-word vocabulary: 2 GiB a device in
    # 4 chunks of 512 MiB, at nearly twice the compile time). Unchunked, the program holds 2.1
    # times the logits here; at a quarter of them it held 0.16 times (smaller logits are not
    # held whole: too few to tell the paths apart).
    monkeypatch.setattr(vc, "CHUNKED_FROM_BYTES", vc.CHUNKED_FROM_BYTES // 16)
    monkeypatch.setattr(vc, "CHUNK_BYTES", vc.CHUNK_BYTES // 16)
    cfg = TrainerConfig.from_dict({
        "model": {"vocab_size": 32768, "d_model": 128, "n_layers": 1, "n_heads": 1,
                  "n_kv_heads": 1, "head_dim": 128, "mlp_dim": 256, "remat": "full"},
        "train": {"global_batch": 64, "seq_len": 256}})
    logits = 8 * 256 * 32768 * 2
    assert vocab_chunks(32768, 8 * 256, 2) == 4
    temp = aot.compile_step(cfg, "v6e-8").temp_bytes
    # The plain path holds the logits and their gradient, twice the logits; chunked, a few
    # chunks' worth at the peak.
    assert temp < 0.8 * logits, (temp, logits)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_the_mlp_on_a_tpu_target_is_the_stacked_one(monkeypatch, dtype):
    mlp = layers.MLP(16, 32, dtype=dtype, param_dtype=jnp.float32, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (2, 5, 16)).astype(dtype)
    g = jax.random.normal(jax.random.key(2), (2, 5, 16))

    def run(platform):
        monkeypatch.setattr(layers, "target_platform", lambda: platform)
        graphdef, params = nnx.split(mlp)

        def f(params, x):
            return nnx.merge(graphdef, params)(x).astype(jnp.float32)

        out, vjp = jax.vjp(f, params, x)
        return out, vjp(g)

    (out_cpu, grads_cpu), (out_tpu, grads_tpu) = run("cpu"), run("tpu")
    tol = dict(rtol=3e-2, atol=3e-2) if dtype == jnp.bfloat16 else dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out_tpu), np.asarray(out_cpu), **tol)
    for a, b in zip(jax.tree.leaves(grads_tpu), jax.tree.leaves(grads_cpu), strict=True):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), **tol)


def test_the_mlp_on_a_tpu_target_keeps_only_gate_and_up_for_its_backward(monkeypatch):
    # Under remat none the residuals of every layer are held at the peak: SiLU's sigmoid and
    # output kept beside gate and up were 2 of the 5 largest values per layer (2.17 -> 2.54 GiB
    # compiled for a v6e-8, benchmarks/hbm_estimate.py).
    monkeypatch.setattr(layers, "target_platform", lambda: "tpu")
    mlp = layers.MLP(16, 32, dtype=jnp.bfloat16, param_dtype=jnp.float32, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(mlp)
    x = jax.random.normal(jax.random.key(1), (2, 5, 16)).astype(jnp.bfloat16)
    _, vjp = jax.vjp(lambda p, x: nnx.merge(graphdef, p)(x), params, x)
    wide = [leaf.shape for leaf in jax.tree.leaves(vjp) if getattr(leaf, "shape", ())[-1:] == (32,)
            and len(leaf.shape) == 3]
    assert wide == [(2, 5, 32)] * 3  # gate, up, and the product the down projection reads


@pytest.mark.parametrize("slice_name,want", [("v6e-8", 2), ("tpu7x-8", 2), ("v5p-8", 1)])
def test_auto_chunks_follow_the_generation_compiled_for(slice_name, want):
    """`chunks_for` reads the target from the active mesh's devices (the TPU compiler's, no TPU
    needed): 8192 tokens of a 32000-word vocabulary per device, 500 MiB of bf16 logits."""
    from jax.sharding import Mesh

    from tpujob_trainer.aot import topology_devices
    from tpujob_trainer.sharding import activate

    devices = topology_devices(slice_name)
    names = ("data", "fsdp", "context", "tensor", "expert")
    mesh = Mesh(np.array(devices).reshape(1, len(devices), 1, 1, 1), names)
    x = jax.ShapeDtypeStruct((4 * len(devices), 2048, 64), jnp.bfloat16)
    with activate(mesh):
        assert ol.chunks_for(x, 32000) == want
        assert ol.chunks_for(x, 32000, 3) == 3       # a count is taken as it is
    assert ol.chunks_for(x, 32000) == 1               # no mesh: this CPU, the plain path
