"""Mixture-of-experts feed-forward layer: top-k routing with capacity, shared experts, and the
load-balancing loss (Switch/GShard style: E * sum_e fraction_e * mean_prob_e, 1.0 when balanced).

Capacity routing (the default): tokens are routed within each sequence (the group): every
expert takes at most C tokens of a group, C = ceil(k * L / E * capacity_factor); tokens over
capacity skip that expert (the residual path carries them). Dispatch and combine are one-hot
einsums, which shard over the `expert` mesh axis without custom collectives. Dropless routing
(`moe.routing: dropless`): models/moe_dropless.py.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from tpujob_trainer.config.model import MoEConfig
from tpujob_trainer.models.layers import MLP, dot, init_param, swiglu_pair
from tpujob_trainer.models.moe_dropless import dropless


class MoE(nnx.Module):
    def __init__(self, d: int, default_f: int, cfg: MoEConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        e, f = cfg.num_experts, cfg.mlp_dim or default_f
        self.router_DxE = init_param(rngs, (d, e), d, jnp.float32, ("embed", None))
        self.w_in_ExDx2xF = init_param(rngs, (e, d, 2, f), d, param_dtype, ("experts", "embed", None, "mlp"))
        self.w_out_ExFxD = init_param(rngs, (e, f, d), f, param_dtype, ("experts", "mlp", "embed"))
        self.shared = (MLP(d, f * cfg.num_shared_experts, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
                       if cfg.num_shared_experts else None)
        self.num_experts, self.top_k = e, cfg.experts_per_token
        self.capacity_factor, self.routing = cfg.capacity_factor, cfg.routing
        self.dtype = dtype

    def capacity(self, length: int) -> int:
        return min(length, math.ceil(self.top_k * length / self.num_experts * self.capacity_factor))

    def __call__(self, x_BxLxD: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Returns the layer output and its load-balancing loss (a scalar)."""
        dt, E, k = self.dtype, self.num_experts, self.top_k
        B, L, _ = x_BxLxD.shape
        C = self.capacity(L)
        logits_BxLxE = jnp.einsum("bld,de->ble", x_BxLxD.astype(jnp.float32), self.router_DxE[...])
        probs_BxLxE = jax.nn.softmax(logits_BxLxE, axis=-1)
        top_p_BxLxk, top_i_BxLxk = jax.lax.top_k(probs_BxLxE, k)
        weights_BxLxk = top_p_BxLxk / jnp.sum(top_p_BxLxk, axis=-1, keepdims=True)

        choice_BxLxkxE = jax.nn.one_hot(top_i_BxLxk, E, dtype=jnp.int32)
        aux = self._balance(jnp.sum(choice_BxLxkxE, axis=2), probs_BxLxE)
        if self.routing == "dropless":
            w_in_ExDx2xF = self.w_in_ExDx2xF[...].astype(dt)
            y_BxLxD = dropless(x_BxLxD.astype(dt), top_i_BxLxk, weights_BxLxk, w_in_ExDx2xF[:, :, 0],
                               w_in_ExDx2xF[:, :, 1], self.w_out_ExFxD[...].astype(dt))
            return self._with_shared(y_BxLxD, x_BxLxD), aux

        # Slot of each (choice, token) in its expert's buffer: first choices are served first.
        choice_BxkxLxE = choice_BxLxkxE.transpose(0, 2, 1, 3)
        order_BxkLxE = choice_BxkxLxE.reshape(B, k * L, E)
        slot_BxkLxE = jnp.cumsum(order_BxkLxE, axis=1) - 1
        kept_BxkLxE = order_BxkLxE * (slot_BxkLxE < C)
        slot_BxkxL = jnp.sum(slot_BxkLxE * kept_BxkLxE, axis=-1).reshape(B, k, L)
        kept_BxkxLxE = kept_BxkLxE.reshape(B, k, L, E)
        # dispatch[b, l, e, c] = 1 when token l of group b sits in slot c of expert e; combine
        # holds the token's routing weight there. Each is built choice by choice straight into
        # the compute dtype: never a [B, k, L, E, C] value.
        slot_BxkxLxC = jax.nn.one_hot(slot_BxkxL, C, dtype=dt)
        dispatch_BxLxExC = sum(kept_BxkxLxE[:, j, :, :, None].astype(dt) * slot_BxkxLxC[:, j, :, None, :]
                               for j in range(k))
        combine_BxLxExC = sum((kept_BxkxLxE[:, j, :, :, None] * weights_BxLxk[:, :, j, None, None]).astype(dt)
                              * slot_BxkxLxC[:, j, :, None, :] for j in range(k))

        # Matmuls as the dense layers do them (layers.dot); gate and up as two matmuls (a
        # stacked [.., 2, F] value would be sliced into copies and its gradient stacked again).
        # (The tokens first: XLA:CPU runs no bf16 x bf16 -> f32 matmul of the other order.)
        xin_ExBxCxD = dot("bld,blec->ebcd", x_BxLxD, dispatch_BxLxExC).astype(dt)
        w_in_ExDx2xF = self.w_in_ExDx2xF[...].astype(dt)
        gate_ExBxCxF = dot("ebcd,edf->ebcf", xin_ExBxCxD, w_in_ExDx2xF[:, :, 0])
        up_ExBxCxF = dot("ebcd,edf->ebcf", xin_ExBxCxD, w_in_ExDx2xF[:, :, 1])
        h_ExBxCxF = swiglu_pair(gate_ExBxCxF, up_ExBxCxF).astype(dt)
        out_ExBxCxD = dot("ebcf,efd->ebcd", h_ExBxCxF, self.w_out_ExFxD[...].astype(dt)).astype(dt)
        y_BxLxD = dot("blec,ebcd->bld", combine_BxLxExC, out_ExBxCxD).astype(dt)
        return self._with_shared(y_BxLxD, x_BxLxD), aux

    def _with_shared(self, y_BxLxD: jax.Array, x_BxLxD: jax.Array) -> jax.Array:
        return y_BxLxD if self.shared is None else y_BxLxD + self.shared(x_BxLxD)

    def _balance(self, choice_BxLxE: jax.Array, probs_BxLxE: jax.Array) -> jax.Array:
        """Load balance: fraction of routed choices per expert x mean router probability per
        expert (`choice_BxLxE`: how many of a token's k choices went to each expert)."""
        frac_E = jnp.mean(choice_BxLxE, axis=(0, 1)).astype(jnp.float32) / self.top_k
        mean_prob_E = jnp.mean(probs_BxLxE, axis=(0, 1))
        return self.num_experts * jnp.sum(frac_E * mean_prob_E)
