"""Kernels by platform: the splash kernel (TPU) agrees with XLA's attention in value and
gradient (run here in Pallas's interpreter), the choice of kernel follows the mesh's devices and
layout, and matmuls keep the compute dtype when compiled for a TPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

from tpujob_trainer.models import attention as attn
from tpujob_trainer.sharding import activate


def _qkv(L: int, n: int, k: int, h: int = 128, b: int = 2):
    keys = jax.random.split(jax.random.key(0), 3)
    return (jax.random.normal(keys[0], (b, L, n, h)), jax.random.normal(keys[1], (b, L, k, h)),
            jax.random.normal(keys[2], (b, L, k, h)))


def _mesh(**axes):
    names = ("data", "fsdp", "context", "tensor", "expert")
    shape = tuple(axes.get(a, 1) for a in names)
    return Mesh(np.array(jax.devices()[:1]).reshape(shape), names)


@pytest.mark.parametrize("L,n,k", [(256, 4, 2), (256, 4, 4), (384, 2, 1)])
def test_splash_kernel_is_causal_attention_in_value_and_gradient(L, n, k):
    q, kk, v = _qkv(L, n, k)
    mesh = _mesh()
    layout = attn.splash_layout(mesh, L, n, k)
    assert layout == ((), ())

    def splash(q, kk, v):
        return attn.splash_attention(q, kk, v, mesh, layout, interpret=True)

    want = attn.causal_attention(q, kk, v, chunks=1)
    np.testing.assert_allclose(np.asarray(splash(q, kk, v)), np.asarray(want), rtol=2e-5, atol=2e-5)
    g = jax.random.normal(jax.random.key(9), want.shape)
    got_grads = jax.vjp(splash, q, kk, v)[1](g)
    want_grads = jax.vjp(lambda *a: attn.causal_attention(*a, chunks=1), q, kk, v)[1](g)
    for a, b in zip(got_grads, want_grads, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("axes,L,n,k,want", [
    ({}, 2048, 16, 8, ((), ())),
    ({"fsdp": 8}, 2048, 16, 8, (("fsdp",), ())),
    ({"data": 2, "fsdp": 4}, 8192, 32, 8, (("data", "fsdp"), ())),
    ({"fsdp": 2, "tensor": 4}, 2048, 16, 8, (("fsdp",), ("tensor",))),
    ({"fsdp": 2, "tensor": 4}, 2048, 16, 2, None),   # kv heads do not divide over tensor
    ({"context": 2}, 2048, 16, 8, None),              # the sequence is split: XLA
    ({}, 2000, 16, 8, None),                          # no 128-token block tiles the length
])
def test_splash_layout(axes, L, n, k, want):
    class FakeMesh:
        shape = {"data": 1, "fsdp": 1, "context": 1, "tensor": 1, "expert": 1, **axes}

    assert attn.splash_layout(FakeMesh(), L, n, k) == want


def test_splash_block_divides_the_length():
    assert [attn._block(L) for L in (128, 384, 2048, 8192)] == [128, 128, 512, 512]


def test_on_cpu_the_attention_is_xlas(monkeypatch):
    called = []
    monkeypatch.setattr(attn, "splash_attention", lambda *a, **k: called.append(a))
    q, kk, v = _qkv(256, 4, 2)
    with activate(_mesh()):
        out = attn.attention(q, kk, v)
    assert called == [] and out.shape == q.shape


def test_compiled_for_a_tpu_the_attention_is_splash(monkeypatch):
    called = []
    monkeypatch.setattr(attn, "target_platform", lambda: "tpu")
    monkeypatch.setattr(attn, "splash_attention", lambda q, *a, **k: called.append(a) or q)
    q, kk, v = _qkv(256, 4, 2)
    with activate(_mesh()):
        attn.attention(q, kk, v)
    assert len(called) == 1
    q, kk, v = _qkv(200, 4, 2)  # no block tiles 200: XLA's, even for a TPU
    with activate(_mesh()):
        attn.attention(q, kk, v)
    assert len(called) == 1


def test_target_platform_is_the_meshs():
    from tpujob_trainer.sharding import target_platform

    class Dev:
        platform = "tpu"

    class M:
        devices = np.array([Dev()])

    import tpujob_trainer.sharding as sh
    assert target_platform() == jax.default_backend()
    previous, sh._active_mesh = sh._active_mesh, M()
    try:
        assert target_platform() == "tpu"
    finally:
        sh._active_mesh = previous


@pytest.mark.parametrize("platform,bf16_instructions,want", [
    ("cpu", True, jnp.float32), ("cpu", False, jnp.bfloat16),
    ("tpu", False, jnp.bfloat16), ("tpu", True, jnp.bfloat16),
    ("gpu", True, jnp.bfloat16)])
def test_matmul_result_dtype_by_platform(monkeypatch, platform, bf16_instructions, want):
    from tpujob_trainer.models import layers

    monkeypatch.setattr(layers, "target_platform", lambda: platform)
    monkeypatch.setattr(layers, "bf16_matmul_here", lambda: bf16_instructions)
    x = jnp.ones((2, 3, 8), jnp.bfloat16)
    w = jnp.ones((8, 4), jnp.bfloat16)
    out = layers.dot("bld,df->blf", x, w)
    assert out.dtype == want
    np.testing.assert_allclose(np.asarray(out, np.float32), 8.0)
    dx, dw = jax.grad(lambda x, w: layers.dot("bld,df->blf", x, w).astype(jnp.float32).sum(),
                      argnums=(0, 1))(x, w)
    assert (dx.dtype, dw.dtype) == (jnp.bfloat16, jnp.bfloat16)
    assert layers.dot("bld,df->blf", x.astype(jnp.float32), w.astype(jnp.float32)).dtype == jnp.float32


BF16, F32 = jnp.bfloat16, jnp.float32


@pytest.mark.parametrize("requested,platform,dtype,head_dim,splash_ok,want", [
    ("auto", "tpu", BF16, 128, True, "splash"),
    ("auto", "tpu", BF16, 128, False, "xla"),
    ("auto", "gpu", BF16, 128, False, "cudnn"),
    ("auto", "gpu", jnp.float16, 64, False, "cudnn"),
    ("auto", "gpu", F32, 128, False, "xla"),          # cuDNN's fused attention is 16-bit only
    ("auto", "gpu", BF16, 256, False, "xla"),         # heads over 128
    ("auto", "gpu", BF16, 100, False, "xla"),         # not a multiple of 8
    ("auto", "cpu", BF16, 128, True, "xla"),
    ("xla", "tpu", BF16, 128, True, "xla"),
    ("xla", "gpu", BF16, 128, False, "xla"),
    ("splash", "tpu", BF16, 128, True, "splash"),
    ("cudnn", "gpu", BF16, 128, False, "cudnn"),
])
def test_the_attention_kernel_by_request_and_platform(requested, platform, dtype, head_dim,
                                                       splash_ok, want):
    assert attn.choose_kernel(requested, platform, dtype=dtype, head_dim=head_dim,
                              splash_ok=splash_ok) == want


@pytest.mark.parametrize("requested,platform,dtype,head_dim,splash_ok,says", [
    ("splash", "gpu", BF16, 128, True, "runs on a TPU only, and this step runs on a GPU"),
    ("splash", "cpu", BF16, 128, True, "runs on a TPU only, and this step runs on a CPU"),
    ("splash", "tpu", BF16, 128, False, "cannot take this layout"),
    ("cudnn", "tpu", BF16, 128, False, "runs on a GPU only, and this step runs on a TPU"),
    ("cudnn", "gpu", F32, 128, False, "bfloat16 or float16 activations, not float32"),
    ("cudnn", "gpu", BF16, 192, False, "head_dim of at most 128, a multiple of 8, not 192"),
    ("flash", "gpu", BF16, 128, False, "must be one of auto, xla, splash, cudnn"),
])
def test_a_named_kernel_that_cannot_run_is_refused_with_what_would(requested, platform, dtype,
                                                                   head_dim, splash_ok, says):
    with pytest.raises(ValueError, match="model.attention") as err:
        attn.choose_kernel(requested, platform, dtype=dtype, head_dim=head_dim,
                           splash_ok=splash_ok)
    assert says in str(err.value) and ("use auto" in str(err.value) or "one of" in says)


def test_compiled_for_a_gpu_the_attention_is_cudnns_causal_kernel(monkeypatch):
    calls = []
    real = jax.nn.dot_product_attention

    def record(q, k, v, **kw):
        calls.append(kw)
        return real(q, k, v, **{**kw, "implementation": None})  # cuDNN needs a GPU

    monkeypatch.setattr(attn, "target_platform", lambda: "gpu")
    monkeypatch.setattr(jax.nn, "dot_product_attention", record)
    q, kk, v = (x.astype(BF16) for x in _qkv(64, 4, 2))
    out = attn.attention(q, kk, v)
    assert calls == [{"is_causal": True, "implementation": "cudnn"}]
    want = attn.causal_attention(q, kk, v, chunks=1)
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(want, np.float32),
                               atol=2e-2)
    calls.clear()
    attn.attention(q, kk, v, "xla")  # named: XLA's, by causal chunks, on a GPU too
    assert calls and all("implementation" not in c for c in calls)
