"""Dropless routing of the MoE layer (`model.moe.routing: dropless`): every token reaches each of
its k experts, none is dropped for capacity, and each expert multiplies only the rows routed to
it, as MaxText routes on a TPU (its megablox grouped matmul).

Per device, in a `shard_map` over the axes that split the tokens (batch and sequence): the
(token, choice) rows are sorted by expert, the experts' three matmuls are grouped matmuls over
those rows (`group_sizes`: each expert's row count), and the rows go back to token order and
are summed with the routing weights. Compiled for a TPU the grouped matmul is the Pallas kernel
MaxText uses (`jax.experimental.pallas.ops.tpu.megablox.gmm`); elsewhere XLA's
`jax.lax.ragged_dot`, the same arithmetic. The experts' weights are gathered whole onto each
device (over `fsdp` and `expert`: dropless routing has no expert parallelism); their MLP columns
stay split over `tensor`, and the output is summed over it.

Capacity routing (`routing: capacity`, models/moe.py) does the same arithmetic for the tokens it
keeps, with dispatch and combine as one-hot einsums over experts x capacity slots: with many
experts (DeepSeek's 64, top 6) those einsums cost as much as the experts' matmuls.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from tpujob_trainer.models.layers import swiglu_pair
from tpujob_trainer.sharding import LOGICAL_RULES, active_mesh, target_platform

# The grouped matmul's tile along each dimension (rows, contraction, columns), at most; the
# kernel takes a ragged last tile along the contraction and the columns.
TILE = 512


def grouped_dot(x_MxK: jax.Array, w_GxKxN: jax.Array, sizes_G: jax.Array, platform: str, *,
                interpret: bool = False) -> jax.Array:
    """Rows of `x_MxK` sorted by group, row block g times `w_GxKxN[g]` (the first sizes_G[0]
    rows by group 0's matrix, and so on), in x's dtype. `interpret`: the TPU kernel run by
    Pallas's interpreter (any platform; for tests)."""
    if platform == "tpu":
        from jax.experimental.pallas.ops.tpu.megablox import ops as megablox

        M, K = x_MxK.shape
        tiling = (math.gcd(M, TILE), min(K, TILE), min(w_GxKxN.shape[-1], TILE))
        return megablox.gmm(x_MxK, w_GxKxN, sizes_G, x_MxK.dtype, tiling, None, None, False,
                            interpret)
    return jax.lax.ragged_dot(x_MxK, w_GxKxN, sizes_G, preferred_element_type=x_MxK.dtype)


def experts_local(x_TxD, top_i_Txk, weights_Txk, w_gate_ExDxF, w_up_ExDxF, w_out_ExFxD, *,
                  platform: str, tensor_axes: tuple[str, ...] = ()) -> jax.Array:
    """One device's tokens through their k experts each: [T, D] in x's dtype."""
    T, k = top_i_Txk.shape
    E = w_gate_ExDxF.shape[0]
    expert_R = top_i_Txk.reshape(T * k)
    order_R = jnp.argsort(expert_R, stable=True)           # rows grouped by expert
    x_RxD = jnp.take(x_TxD, order_R // k, axis=0)
    sizes_E = jnp.bincount(expert_R, length=E).astype(jnp.int32)
    gate_RxF = grouped_dot(x_RxD, w_gate_ExDxF, sizes_E, platform)
    up_RxF = grouped_dot(x_RxD, w_up_ExDxF, sizes_E, platform)
    h_RxF = swiglu_pair(gate_RxF, up_RxF).astype(x_TxD.dtype)
    out_RxD = grouped_dot(h_RxF, w_out_ExFxD, sizes_E, platform)
    if tensor_axes:
        out_RxD = jax.lax.psum(out_RxD, tensor_axes)
    back_RxD = jnp.take(out_RxD, jnp.argsort(order_R), axis=0)   # token order again
    y_TxD = jnp.einsum("tkd,tk->td", back_RxD.reshape(T, k, -1).astype(jnp.float32),
                       weights_Txk.astype(jnp.float32))
    return y_TxD.astype(x_TxD.dtype)


def dropless(x_BxLxD, top_i_BxLxk, weights_BxLxk, w_gate_ExDxF, w_up_ExDxF, w_out_ExFxD) -> jax.Array:
    """The routed experts' output [B, L, D] for every token, on the active mesh (or none)."""
    platform = target_platform()
    B, L, D = x_BxLxD.shape
    k = top_i_BxLxk.shape[-1]

    def local(x, top_i, weights, w_gate, w_up, w_out, tensor_axes=()):
        b, n, _ = x.shape
        y = experts_local(x.reshape(b * n, D), top_i.reshape(b * n, k), weights.reshape(b * n, k),
                          w_gate, w_up, w_out, platform=platform, tensor_axes=tensor_axes)
        return y.reshape(b, n, D)

    mesh = active_mesh()
    if mesh is None or mesh.size == 1:
        return local(x_BxLxD, top_i_BxLxk, weights_BxLxk, w_gate_ExDxF, w_up_ExDxF, w_out_ExFxD)
    shape = dict(mesh.shape)

    def split(logical: str, size: int) -> tuple[str, ...]:
        axes = tuple(a for a in LOGICAL_RULES[logical] if shape.get(a, 1) > 1)
        return axes if axes and size % math.prod(shape[a] for a in axes) == 0 else ()

    batch, length = split("batch", B), split("length", L)
    tensor = split("mlp", w_gate_ExDxF.shape[-1])
    tokens = PartitionSpec(batch or None, length or None, None)
    return jax.shard_map(
        lambda *a: local(*a, tensor_axes=tensor), mesh=mesh,
        in_specs=(tokens, tokens, tokens, PartitionSpec(None, None, tensor or None),
                  PartitionSpec(None, None, tensor or None), PartitionSpec(None, tensor or None, None)),
        out_specs=tokens, check_vma=False)(
            x_BxLxD, top_i_BxLxk, weights_BxLxk, w_gate_ExDxF, w_up_ExDxF, w_out_ExFxD)
