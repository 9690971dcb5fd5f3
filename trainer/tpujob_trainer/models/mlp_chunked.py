"""A dense layer's SwiGLU MLP, down(silu(x @ gate) * (x @ up)), its backward pass by chunks of
the MLP's hidden width (a TPU target; `tpujob_plan.mlp_chunks` says when).

`mlp_chunked(x_BxLxD, w_gate_DxF, w_up_DxF, w_out_FxD, chunks)`: the forward pass keeps nothing
but its inputs. The backward pass takes one chunk of the hidden columns after another: it
computes the chunk's gate and up again, then their gradients, into the chunk's columns of the
weights' gradients (each written once: no sum over chunks) and into the input's gradient
(summed over the chunks in float32, rounded once at the end as the plain path's one matmul
rounds it). So the layer's backward holds the MLP-wide values (gate, up, the SwiGLU output and
their gradients: the largest values of the layer) of one chunk of columns at a time, beside one
float32 value of the input's size. A barrier makes each chunk wait for the previous one
(without it XLA may schedule the chunks together and hold them all).

What it costs: nothing in FLOPs where the layer is rematerialized whole (remat `full`, the only
policy the auto count chunks under): the backward of such a layer computes gate and up again
anyway, and here the recomputed forward's MLP output is dead code. The input and its gradient
are read once per chunk. Chunks of positions instead (each chunk's weight gradients summed in
float32) held about as little but moved more bytes: measured in tpujob_plan.mlp_chunks.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from tpujob_plan.mlp_chunks import mlp_chunks
from tpujob_plan.vocab_chunks import chunk_bounds
from tpujob_trainer.sharding import active_axis, local_splits, shard, target_platform

F32 = jnp.float32


def chunks_for(x_BxLxD: jax.Array, mlp_dim: int, remat: str, setting: int | str = "auto") -> int:
    """How many chunks a dense MLP's backward takes: the model's `mlp_chunks` setting where it
    is a count, else (auto) `mlp_chunks` for these inputs on the active mesh (the one being
    compiled for: its `data` axis too), the remat policy and the compile target."""
    if setting != "auto":
        return len(chunk_bounds(mlp_dim, int(setting)))
    B, L, _ = x_BxLxD.shape
    splits = local_splits(("batch", "length", "mlp"), (B, L, mlp_dim))
    local = math.ceil(B / splits[0]) * math.ceil(L / splits[1])
    return mlp_chunks(local, mlp_dim / splits[2], x_BxLxD.dtype.itemsize,
                      platform=target_platform(), remat=remat, data=active_axis("data"))


def _gate_up(x_BxLxD, w_gate_DxF, w_up_DxF):
    gate = jnp.einsum("bld,df->blf", x_BxLxD, w_gate_DxF)
    up = jnp.einsum("bld,df->blf", x_BxLxD, w_up_DxF)
    return shard(gate, ("batch", "length", "mlp")), shard(up, ("batch", "length", "mlp"))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def mlp_chunked(x_BxLxD: jax.Array, w_gate_DxF: jax.Array, w_up_DxF: jax.Array,
                w_out_FxD: jax.Array, chunks: int) -> jax.Array:
    """The SwiGLU MLP of `x` (compute dtype in, compute dtype out), its backward pass by
    `chunks` chunks of the hidden width."""
    gate, up = _gate_up(x_BxLxD, w_gate_DxF, w_up_DxF)
    h_BxLxF = (jax.nn.silu(gate) * up).astype(x_BxLxD.dtype)
    return jnp.einsum("blf,fd->bld", h_BxLxF, w_out_FxD)


def _fwd(x_BxLxD, w_gate_DxF, w_up_DxF, w_out_FxD, chunks):
    return (mlp_chunked(x_BxLxD, w_gate_DxF, w_up_DxF, w_out_FxD, chunks),
            (x_BxLxD, w_gate_DxF, w_up_DxF, w_out_FxD))


def _bwd(chunks, res, dy_BxLxD):
    x, wg, wu, wo = res
    dt = x.dtype
    # The chunks start once the output's gradient is there, not while the layers above still
    # run their backward (XLA would start the first chunk's gate and up early and hold them).
    x, wg, wu, wo, dy = jax.lax.optimization_barrier((x, wg, wu, wo, dy_BxLxD.astype(dt)))
    dx = jnp.zeros(x.shape, F32)
    dwg, dwu, dwo = [], [], []
    for start, end in chunk_bounds(wg.shape[1], chunks):
        wgc, wuc, woc = wg[:, start:end], wu[:, start:end], wo[start:end]
        gate, up = _gate_up(x, wgc, wuc)
        sig = jax.nn.sigmoid(gate)
        h = (gate * sig * up).astype(dt)
        dh = jnp.einsum("bld,fd->blf", dy, woc)
        d_gate = (dh * up * sig * (1 + gate * (1 - sig))).astype(dt)
        d_up = (dh * gate * sig).astype(dt)
        dx = (dx + jnp.einsum("blf,df->bld", d_gate, wgc, preferred_element_type=F32)
              + jnp.einsum("blf,df->bld", d_up, wuc, preferred_element_type=F32))
        dwo.append(jnp.einsum("blf,bld->fd", h, dy))
        dwg.append(jnp.einsum("bld,blf->df", x, d_gate))
        dwu.append(jnp.einsum("bld,blf->df", x, d_up))
        # The next chunk waits for this one's matmuls: one chunk's values live at a time.
        x, dy, dx, dwg, dwu, dwo = jax.lax.optimization_barrier((x, dy, dx, dwg, dwu, dwo))
    return (dx.astype(dt), jnp.concatenate(dwg, axis=1), jnp.concatenate(dwu, axis=1),
            jnp.concatenate(dwo, axis=0))


mlp_chunked.defvjp(_fwd, _bwd)
