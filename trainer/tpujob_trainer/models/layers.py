"""Building blocks: RMSNorm, rotary embeddings, grouped-query causal attention, SwiGLU MLP.

Tensor names carry their shapes: B batch, L length, D model width, N query heads, K key/value
heads, H head width, F MLP hidden width, V vocabulary. Parameters are stored in `param_dtype`
and cast to the compute `dtype` where they are used.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from tpujob_trainer.cpu import bf16_matmul_here
from tpujob_trainer.models.attention import attention
from tpujob_trainer.models.mlp_chunked import chunks_for, mlp_chunked
from tpujob_trainer.sharding import shard, target_platform

# The platforms whose matrix units accumulate a 16-bit matmul in float32 and round once (TPU
# MXU, GPU tensor cores): there matmuls return the compute dtype. On XLA:CPU they return float32
# where the CPU has bf16 dot-product instructions (`cpu.bf16_matmul_here`).
ACCELERATORS = ("tpu", "gpu")


def dot(eq: str, x: jax.Array, w: jax.Array) -> jax.Array:
    """`jnp.einsum(eq, x, w)` of two compute-dtype operands, accumulated and returned in float32,
    and differentiated the same way: the backward matmuls take the output's gradient in the
    operands' dtype and accumulate in float32. Written out because autodiff would run them on the
    float32 gradient, and because XLA:CPU has no matmul with a 16-bit result: it widens such a
    matmul to float32 whole. So on a CPU with bf16 dot-product instructions (`avx512_bf16`,
    `amx_bf16`), which run bf16 x bf16 -> float32 natively, every matmul of a bf16 model takes
    that form, forward and back. On a CPU without them both forms end in a float32 matmul, and
    the plain einsum, whose bf16 result moves half the bytes, is the faster (`cpu.py` has the
    figures). With float32 operands: the plain einsum.

    Compiled for a TPU or a GPU, the plain einsum in the operands' dtype: the MXU and the tensor
    cores accumulate in float32 and round once at the end whatever the result type, so a float32
    result there only doubles the bytes every activation and its gradient move (measured with
    the TPU compiler on a v6e-8: benchmarks/tpu_compile.py; on an H200, with the MLP below, 8%
    less time a step and half the GPU memory in use: benchmarks/gpu_vs_maxtext.py)."""
    if ((x.dtype == jnp.float32 and w.dtype == jnp.float32) or target_platform() in ACCELERATORS
            or not bf16_matmul_here()):
        return jnp.einsum(eq, x, w)
    return _mixed_dot(eq, x, w)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _mixed_dot(eq: str, x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.einsum(eq, x, w, preferred_element_type=jnp.float32)


def _dot_fwd(eq, x, w):
    return _mixed_dot(eq, x, w), (x, w)


def _dot_bwd(eq, res, g):
    x, w = res
    ins, out = eq.split("->")
    xs, ws = ins.split(",")
    g = g.astype(x.dtype)
    dx = jnp.einsum(f"{out},{ws}->{xs}", g, w, preferred_element_type=jnp.float32)
    dw = jnp.einsum(f"{xs},{out}->{ws}", x, g, preferred_element_type=jnp.float32)
    return dx.astype(x.dtype), dw.astype(w.dtype)


_mixed_dot.defvjp(_dot_fwd, _dot_bwd)


def init_param(rngs: nnx.Rngs, shape: tuple[int, ...], fan_in: int, dtype, axes, *,
               stddev: float | None = None) -> nnx.Param:
    """A truncated-normal weight with std 1/sqrt(fan_in) (LeCun), tagged with logical axes."""
    std = stddev if stddev is not None else fan_in ** -0.5
    # Truncated at 2 std, rescaled so that the std is `std`.
    w = jax.random.truncated_normal(rngs.params(), -2.0, 2.0, shape, jnp.float32) * (std / 0.87962566)
    return nnx.Param(w.astype(dtype), axes=axes)


class RMSNorm(nnx.Module):
    def __init__(self, d: int, *, eps: float, dtype, param_dtype):
        self.scale = nnx.Param(jnp.ones((d,), param_dtype), axes=(None,))
        self.eps = eps
        self.dtype = dtype

    def __call__(self, x_BxLxD: jax.Array) -> jax.Array:
        x = x_BxLxD.astype(jnp.float32)
        inv_rms = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return (x * inv_rms * self.scale[...].astype(jnp.float32)).astype(self.dtype)


def rope(x_BxLxNxH: jax.Array, positions_L: jax.Array, theta: float) -> jax.Array:
    """Rotary position embedding (rotate-half form) applied to queries or keys."""
    h = x_BxLxNxH.shape[-1]
    inv_freq_h = 1.0 / (theta ** (jnp.arange(0, h // 2, dtype=jnp.float32) * 2 / h))
    angles_Lxh = positions_L[:, None].astype(jnp.float32) * inv_freq_h[None, :]
    sin = jnp.sin(angles_Lxh)[None, :, None, :].astype(x_BxLxNxH.dtype)
    cos = jnp.cos(angles_Lxh)[None, :, None, :].astype(x_BxLxNxH.dtype)
    x1, x2 = jnp.split(x_BxLxNxH, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


class Attention(nnx.Module):
    """Causal grouped-query attention: K key/value heads shared by N/K query heads each."""

    def __init__(self, d: int, n_heads: int, n_kv_heads: int, head_dim: int, *, rope_theta: float,
                 dtype, param_dtype, rngs: nnx.Rngs, kernel: str = "auto"):
        self.wq_DxNxH = init_param(rngs, (d, n_heads, head_dim), d, param_dtype, ("embed", "heads", None))
        self.wk_DxKxH = init_param(rngs, (d, n_kv_heads, head_dim), d, param_dtype, ("embed", "kv_heads", None))
        self.wv_DxKxH = init_param(rngs, (d, n_kv_heads, head_dim), d, param_dtype, ("embed", "kv_heads", None))
        self.wo_NxHxD = init_param(rngs, (n_heads, head_dim, d), n_heads * head_dim, param_dtype,
                                   ("heads", None, "embed"))
        self.rope_theta = rope_theta
        self.dtype = dtype
        self.kernel = kernel

    def __call__(self, x_BxLxD: jax.Array) -> jax.Array:
        dt = self.dtype
        positions_L = jnp.arange(x_BxLxD.shape[1])
        q_BxLxNxH = dot("bld,dnh->blnh", x_BxLxD, self.wq_DxNxH[...].astype(dt)).astype(dt)
        k_BxLxKxH = dot("bld,dkh->blkh", x_BxLxD, self.wk_DxKxH[...].astype(dt)).astype(dt)
        v_BxLxKxH = dot("bld,dkh->blkh", x_BxLxD, self.wv_DxKxH[...].astype(dt)).astype(dt)
        q_BxLxNxH = shard(rope(q_BxLxNxH, positions_L, self.rope_theta), ("batch", "length", "heads", None))
        k_BxLxKxH = shard(rope(k_BxLxKxH, positions_L, self.rope_theta), ("batch", "length", "kv_heads", None))
        v_BxLxKxH = shard(v_BxLxKxH, ("batch", "length", "kv_heads", None))
        o_BxLxNxH = attention(q_BxLxNxH, k_BxLxKxH, v_BxLxKxH, self.kernel)
        return dot("blnh,nhd->bld", o_BxLxNxH, self.wo_NxHxD[...].astype(dt)).astype(dt)


@jax.custom_vjp
def swiglu(h_BxLx2xF: jax.Array) -> jax.Array:
    """silu(gate) * up of the stacked [gate, up] projection. Its gradient is written as one
    stacked array (autodiff would pad the gate's and the up's gradients to full size and add
    them: an extra pass over the largest activation of the layer)."""
    return jax.nn.silu(h_BxLx2xF[:, :, 0]) * h_BxLx2xF[:, :, 1]


def _swiglu_fwd(h_BxLx2xF):
    return swiglu(h_BxLx2xF), h_BxLx2xF


def _swiglu_bwd(h_BxLx2xF, g_BxLxF):
    d_gate, d_up = _swiglu_grads(h_BxLx2xF[:, :, 0], h_BxLx2xF[:, :, 1], g_BxLxF)
    return (jnp.stack([d_gate, d_up], axis=2),)


swiglu.defvjp(_swiglu_fwd, _swiglu_bwd)


def _swiglu_grads(gate, up, g):
    sig = jax.nn.sigmoid(gate)
    return g * up * sig * (1 + gate * (1 - sig)), g * gate * sig


@jax.custom_vjp
def swiglu_pair(gate_BxLxF: jax.Array, up_BxLxF: jax.Array) -> jax.Array:
    """silu(gate) * up of two separate projections, keeping only gate and up for the backward
    pass (autodiff would also keep the sigmoid and the SiLU: two more values of the layer's
    largest size under remat none)."""
    return jax.nn.silu(gate_BxLxF) * up_BxLxF


def _swiglu_pair_fwd(gate_BxLxF, up_BxLxF):
    return swiglu_pair(gate_BxLxF, up_BxLxF), (gate_BxLxF, up_BxLxF)


def _swiglu_pair_bwd(res, g_BxLxF):
    gate_BxLxF, up_BxLxF = res
    return _swiglu_grads(gate_BxLxF, up_BxLxF, g_BxLxF)


swiglu_pair.defvjp(_swiglu_pair_fwd, _swiglu_pair_bwd)


class MLP(nnx.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)); gate and up are one [D, 2, F] weight (one matmul).
    Compiled for a TPU, its backward pass by chunks of its width where `mlp_chunked.chunks_for`
    says so (`chunks`: the model's `mlp_chunks` setting; `remat`: the layer's policy)."""

    def __init__(self, d: int, f: int, *, dtype, param_dtype, rngs: nnx.Rngs,
                 remat: str = "full", chunks: int | str = "auto"):
        self.w_in_Dx2xF = init_param(rngs, (d, 2, f), d, param_dtype, ("embed", None, "mlp"))
        self.w_out_FxD = init_param(rngs, (f, d), f, param_dtype, ("mlp", "embed"))
        self.dtype = dtype
        self.remat = remat
        self.chunks = chunks

    def __call__(self, x_BxLxD: jax.Array) -> jax.Array:
        dt = self.dtype
        w_Dx2xF = self.w_in_Dx2xF[...].astype(dt)
        if target_platform() in ACCELERATORS:
            # Compiled for a TPU or a GPU: gate and up as two matmuls. The stacked [B, L, 2, F]
            # value is sliced into copies and its gradient stacked again: both the largest
            # values of a layer's backward pass (measured with the TPU compiler:
            # benchmarks/tpu_compile.py; and on an H200: benchmarks/gpu_vs_maxtext.py).
            chunks = chunks_for(x_BxLxD, w_Dx2xF.shape[-1], self.remat, self.chunks)
            if chunks > 1:
                return mlp_chunked(x_BxLxD, w_Dx2xF[:, 0], w_Dx2xF[:, 1],
                                   self.w_out_FxD[...].astype(dt), chunks)
            gate_BxLxF = dot("bld,df->blf", x_BxLxD, w_Dx2xF[:, 0])
            up_BxLxF = dot("bld,df->blf", x_BxLxD, w_Dx2xF[:, 1])
            h_BxLxF = swiglu_pair(gate_BxLxF, up_BxLxF).astype(dt)
        else:
            # Gate and up leave one matmul in float32 (its accumulator), where SiLU and the
            # product are computed; one rounding to the compute dtype after (fewer converts than
            # SiLU in bf16).
            h_BxLx2xF = dot("bld,dkf->blkf", x_BxLxD, w_Dx2xF)
            h_BxLxF = swiglu(h_BxLx2xF).astype(dt)
        h_BxLxF = shard(h_BxLxF, ("batch", "length", "mlp"))
        return dot("blf,fd->bld", h_BxLxF, self.w_out_FxD[...].astype(dt)).astype(dt)
