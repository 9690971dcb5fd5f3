"""The decoder-only LM: embedding, N pre-norm blocks (attention + dense or MoE MLP), final norm,
output layer. `Decoder(cfg, rngs=...)(tokens_BxL) -> (logits_BxLxV float32, aux_loss)`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from tpujob_trainer.config.model import ModelConfig
from tpujob_trainer.models.layers import MLP, Attention, RMSNorm, init_param
from tpujob_trainer.models.moe import MoE
from tpujob_trainer.sharding import shard

RESOLVED_REMAT = ("none", "minimal", "full")


def remat_policy(name: str):
    """The jax.checkpoint policy of a remat setting (None for full: save nothing)."""
    if name == "minimal":
        # Keep the matmul outputs (projections), recompute norms, activations and attention.
        return jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    if name == "full":
        return None
    raise ValueError(f"no checkpoint policy for remat {name!r}")


class Block(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, moe: bool, rngs: nnx.Rngs):
        dt, pdt = jnp.dtype(cfg.dtype), jnp.dtype(cfg.param_dtype)
        self.attn_norm = RMSNorm(cfg.d_model, eps=cfg.norm_eps, dtype=dt, param_dtype=pdt)
        self.attn = Attention(cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim,
                              rope_theta=cfg.rope_theta, dtype=dt, param_dtype=pdt, rngs=rngs)
        self.mlp_norm = RMSNorm(cfg.d_model, eps=cfg.norm_eps, dtype=dt, param_dtype=pdt)
        self.mlp = (MoE(cfg.d_model, cfg.mlp_dim, cfg.moe, dtype=dt, param_dtype=pdt, rngs=rngs) if moe
                    else MLP(cfg.d_model, cfg.mlp_dim, dtype=dt, param_dtype=pdt, rngs=rngs))
        self.is_moe = moe

    def __call__(self, x_BxLxD: jax.Array) -> tuple[jax.Array, jax.Array]:
        x_BxLxD = x_BxLxD + self.attn(self.attn_norm(x_BxLxD))
        x_BxLxD = shard(x_BxLxD, ("batch", "length", None))
        h_BxLxD = self.mlp_norm(x_BxLxD)
        if self.is_moe:
            y_BxLxD, aux = self.mlp(h_BxLxD)
        else:
            y_BxLxD, aux = self.mlp(h_BxLxD), jnp.zeros((), jnp.float32)
        return shard(x_BxLxD + y_BxLxD, ("batch", "length", None)), aux


def _apply_block(block: Block, x_BxLxD: jax.Array) -> tuple[jax.Array, jax.Array]:
    return block(x_BxLxD)


def _runs(blocks) -> list[list[Block]]:
    """Consecutive blocks of the same kind (dense or MoE): each run is one scan."""
    runs: list[list[Block]] = []
    for block in blocks:
        if runs and runs[-1][0].is_moe == block.is_moe:
            runs[-1].append(block)
        else:
            runs.append([block])
    return runs


# Parameters used in float32 whatever the compute dtype (norm scales, the MoE router).
_KEEP_DTYPE = ("scale", "router_DxE")


def _scan_blocks(run: list[Block], x_BxLxD: jax.Array, remat: str) -> tuple[jax.Array, jax.Array]:
    """Apply a run of same-kind blocks by `jax.lax.scan` over their parameters, stacked here on a
    leading layer axis (the stored parameters keep one entry per block); remat is per layer.

    The weight matrices are cast to the compute dtype once, before the scan, rather than in
    each layer where remat would cast them again in the backward pass (the layers' own casts
    are then no-ops: the same values reach the matmuls)."""
    graphdef, _ = nnx.split(run[0])
    dt = x_BxLxD.dtype

    def stack(path, *ws):
        w = jnp.stack(ws)
        name = str(getattr(path[-1], "key", path[-1]))
        return w if name in _KEEP_DTYPE else w.astype(dt)

    stacked = jax.tree.map_with_path(stack, *[nnx.to_pure_dict(nnx.split(b)[1]) for b in run])

    def layer(x, params):
        return nnx.merge(graphdef, params)(x)

    if remat != "none":
        # Inside a scan the recomputation cannot be CSE'd with the forward pass: no barrier needed.
        layer = jax.checkpoint(layer, policy=remat_policy(remat), prevent_cse=False)
    x_BxLxD, aux_N = jax.lax.scan(layer, x_BxLxD, stacked)
    return x_BxLxD, jnp.sum(aux_N)


class Decoder(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        if cfg.remat not in RESOLVED_REMAT:
            raise ValueError(f"model.remat {cfg.remat!r} must be resolved to one of {RESOLVED_REMAT} "
                             "before building the model (see tpujob_trainer.remat.resolve_remat)")
        pdt = jnp.dtype(cfg.param_dtype)
        self.dtype = jnp.dtype(cfg.dtype)
        self.embed_VxD = init_param(rngs, (cfg.vocab_size, cfg.d_model), 1, pdt, ("vocab", "embed"),
                                    stddev=1.0)
        shape = cfg.to_shape()
        self.blocks = nnx.List([Block(cfg, moe=shape.is_moe_layer(i), rngs=rngs)
                                for i in range(cfg.n_layers)])
        self.final_norm = RMSNorm(cfg.d_model, eps=cfg.norm_eps, dtype=self.dtype, param_dtype=pdt)
        self.head_DxV = (None if cfg.tie_embeddings else
                         init_param(rngs, (cfg.d_model, cfg.vocab_size), cfg.d_model, pdt, ("embed", "vocab"),
                                    stddev=1.0 / cfg.d_model))
        self.remat = cfg.remat
        self.scan_layers = cfg.scan_layers

    def __call__(self, tokens_BxL: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Logits (float32) for every position, and the summed MoE load-balancing loss."""
        x_BxLxD = jnp.take(self.embed_VxD[...], tokens_BxL, axis=0).astype(self.dtype)
        x_BxLxD = shard(x_BxLxD, ("batch", "length", None))
        aux = jnp.zeros((), jnp.float32)
        if self.scan_layers:
            for run in _runs(self.blocks):
                x_BxLxD, run_aux = _scan_blocks(run, x_BxLxD, self.remat)
                aux = aux + run_aux
        else:
            apply = _apply_block
            if self.remat != "none":
                apply = nnx.remat(_apply_block, policy=remat_policy(self.remat), prevent_cse=True)
            for block in self.blocks:
                x_BxLxD, block_aux = apply(block, x_BxLxD)
                aux = aux + block_aux
        x_BxLxD = self.final_norm(x_BxLxD)
        if self.head_DxV is None:
            logits_BxLxV = jnp.einsum("bld,vd->blv", x_BxLxD, self.embed_VxD[...].astype(self.dtype))
        else:
            logits_BxLxV = jnp.einsum("bld,dv->blv", x_BxLxD, self.head_DxV[...].astype(self.dtype))
        return shard(logits_BxLxV, ("batch", "length", "vocab")).astype(jnp.float32), aux
