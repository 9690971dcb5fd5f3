"""Causal attention, chosen by the platform the step is compiled for (`model.attention: auto`),
or named (`xla`, `splash`, `cudnn`).

On a TPU: the splash-attention Pallas kernel (`jax.experimental.pallas.ops.tpu.splash_attention`,
the kernel MaxText picks on TPU), which never holds the [L, L] scores: blocks of queries and keys
go through VMEM with an online softmax, and fully masked blocks (above the causal diagonal) are
skipped. It runs per device under `shard_map`: the batch split over the batch axes, heads over
`tensor`. Where the layout does not suit it (the sequence split over `context`, heads that do not
divide over `tensor`, a length not a multiple of the kernel's blocks), and on other platforms:
XLA's `jax.nn.dot_product_attention` by causal query chunks (`causal_attention`).

On a GPU: cuDNN's fused flash attention (`jax.nn.dot_product_attention(...,
implementation="cudnn")`, what MaxText's `attention=cudnn_flash_jax` calls), which also never
holds the scores, for 16-bit activations and heads of up to 128 (a multiple of 8; cuDNN takes up
to 256 on Hopper, 128 everywhere). float32 activations go to XLA's.
"""

from __future__ import annotations

import math
import typing

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from tpujob_trainer.config.model import AttentionKernel, attention_platform_problem, cudnn_problem
from tpujob_trainer.sharding import LOGICAL_RULES, active_mesh, target_platform

# Causal attention in this many query chunks, each reading only the keys up to its own end:
# with 2, a quarter of the scores (all of them masked) is never computed.
CAUSAL_CHUNKS = 2
# Splash attention's tiles (queries, keys) in the forward and both backward kernels; MaxText's
# defaults (sa_block_* = 512). A length that is not a multiple of 128 falls back to XLA.
SPLASH_BLOCK = 512
SPLASH_MIN_BLOCK = 128
# `model.attention`: auto picks by platform; the others name a kernel, refused where it cannot run.
KERNELS = typing.get_args(AttentionKernel)


def causal_attention(q_BxLxNxH: jax.Array, k_BxLxKxH: jax.Array, v_BxLxKxH: jax.Array,
                     chunks: int = CAUSAL_CHUNKS) -> jax.Array:
    """Causal attention by query chunks: chunk i reads only the keys up to its own end (the
    masked keys after it would add exp(-inf) = 0 to its softmax). One chunk where the length
    does not divide."""
    L = q_BxLxNxH.shape[1]
    if L % chunks:
        chunks = 1
    c = L // chunks
    outs = []
    for i in range(chunks):
        end = (i + 1) * c
        q = q_BxLxNxH[:, i * c:end]
        mask_cxS = (jnp.arange(end)[None, :] <= (i * c + jnp.arange(c))[:, None])
        outs.append(jax.nn.dot_product_attention(q, k_BxLxKxH[:, :end], v_BxLxKxH[:, :end],
                                                 mask=mask_cxS[None, None]))
    return jnp.concatenate(outs, axis=1) if chunks > 1 else outs[0]


def splash_layout(mesh, L: int, n_heads: int, n_kv_heads: int):
    """The (batch mesh axes, heads mesh axes) the splash kernel runs under on `mesh`, or None
    where it cannot: the sequence split over `context`, or heads that do not divide over
    `tensor`, or a length the kernel's blocks do not tile."""
    if mesh is None or L % SPLASH_MIN_BLOCK:
        return None
    shape = dict(mesh.shape)
    if shape.get("context", 1) > 1:
        return None
    heads = tuple(a for a in LOGICAL_RULES["heads"] if shape.get(a, 1) > 1)
    split = math.prod(shape[a] for a in heads)
    if n_heads % split or n_kv_heads % split:
        return None
    batch = tuple(a for a in LOGICAL_RULES["batch"] if shape.get(a, 1) > 1)
    return batch, heads


def _block(L: int) -> int:
    return math.gcd(L, SPLASH_BLOCK)


def _splash_kernel(L: int, n_heads: int, interpret: bool = False):
    """A kernel made afresh for each trace. Not cached here: the kernel turns its mask tables
    into JAX arrays when it is made, and a kernel kept from an earlier trace would bring them
    into the next one as arrays from outside, which JAX passes as arguments instead of
    constants, so that the same step lowered twice in one process was two programs (another
    key in any cache of compiled programs, and other figures from the TPU compiler). The
    costly part, the mask tables, is cached by JAX (`splash_attention_mask_info._process_mask`)."""
    from jax.experimental.pallas.ops.tpu import splash_attention as sa

    b = _block(L)
    mask = sa.MultiHeadMask([sa.CausalMask((L, L)) for _ in range(n_heads)])
    blocks = sa.BlockSizes(block_q=b, block_kv=b, block_kv_compute=b, block_q_dkv=b,
                           block_kv_dkv=b, block_kv_dkv_compute=b, block_q_dq=b, block_kv_dq=b)
    return sa.make_splash_mha(mask, head_shards=1, q_seq_shards=1, block_sizes=blocks,
                              interpret=interpret)


def splash_attention(q_BxLxNxH: jax.Array, k_BxLxKxH: jax.Array, v_BxLxKxH: jax.Array,
                     mesh, layout, *, interpret: bool = False) -> jax.Array:
    """Causal attention by the splash kernel, per device (`layout` from `splash_layout`).
    `interpret`: run the kernel in Pallas's interpreter (any platform; for tests)."""
    batch, heads = layout
    B, L, N, H = q_BxLxNxH.shape
    n_local = N // math.prod(mesh.shape[a] for a in heads) if heads else N
    kernel = _splash_kernel(L, n_local, interpret)
    scale = H ** -0.5

    def local(q, k, v):  # [b, L, n, H] blocks of one device
        q = (q * jnp.asarray(scale, q.dtype)).transpose(0, 2, 1, 3)
        out = jax.vmap(kernel)(q, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3))
        return out.transpose(0, 2, 1, 3)

    spec = PartitionSpec(batch or None, None, heads or None, None)
    return jax.shard_map(local, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec,
                         check_vma=False)(q_BxLxNxH, k_BxLxKxH, v_BxLxKxH)


def cudnn_fits(dtype, head_dim: int) -> str | None:
    """Why cuDNN's fused attention cannot take these activations, or None where it can."""
    return cudnn_problem(jnp.dtype(dtype).name, head_dim)


def choose_kernel(requested: str, platform: str, *, dtype, head_dim: int,
                  splash_ok: bool) -> str:
    """The kernel `model.attention: requested` runs as, compiled for `platform`: auto picks
    splash on a TPU (where the layout suits it), cuDNN on a GPU (where the activations suit it),
    else XLA. A named kernel that cannot run there is refused with what would be valid."""
    if requested == "auto":
        if platform == "tpu" and splash_ok:
            return "splash"
        if platform == "gpu" and cudnn_fits(dtype, head_dim) is None:
            return "cudnn"
        return "xla"
    if requested not in KERNELS:
        raise ValueError(f"model.attention {requested!r} must be one of {', '.join(KERNELS)}")
    problem = attention_platform_problem(requested, platform)
    if problem:
        raise ValueError(problem)
    if requested == "splash" and not splash_ok:
        raise ValueError("model.attention splash cannot take this layout (the sequence split "
                         "over context, heads that do not divide over tensor, or a length "
                         f"not a multiple of {SPLASH_MIN_BLOCK}): use auto or xla")
    if requested == "cudnn":
        why = cudnn_fits(dtype, head_dim)
        if why:
            raise ValueError(f"model.attention cudnn cannot run here: {why}; use auto or xla")
    return requested


def attention(q_BxLxNxH: jax.Array, k_BxLxKxH: jax.Array, v_BxLxKxH: jax.Array,
              kernel: str = "auto") -> jax.Array:
    """Causal grouped-query attention (softmax(q k^T / sqrt(H)) v), by `kernel` (`model.attention`;
    auto: the one the target platform runs best)."""
    platform = target_platform()
    mesh = active_mesh() if platform == "tpu" else None
    layout = (splash_layout(mesh, q_BxLxNxH.shape[1], q_BxLxNxH.shape[2], k_BxLxKxH.shape[2])
              if mesh is not None else None)
    chosen = choose_kernel(kernel, platform, dtype=q_BxLxNxH.dtype, head_dim=q_BxLxNxH.shape[-1],
                           splash_ok=layout is not None)
    if chosen == "splash":
        return splash_attention(q_BxLxNxH, k_BxLxKxH, v_BxLxKxH, mesh, layout)
    if chosen == "cudnn":
        return jax.nn.dot_product_attention(q_BxLxNxH, k_BxLxKxH, v_BxLxKxH, is_causal=True,
                                            implementation="cudnn")
    return causal_attention(q_BxLxNxH, k_BxLxKxH, v_BxLxKxH)
