"""The decoder-only LM: embedding, N pre-norm blocks (attention + dense or MoE MLP), final norm,
output layer. `Decoder(cfg, rngs=...)(tokens_BxL) -> (logits_BxLxV, aux_loss)`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from tpujob_trainer.config.model import ModelConfig
from tpujob_trainer.models.layers import MLP, Attention, RMSNorm, dot, init_param
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
                              rope_theta=cfg.rope_theta, dtype=dt, param_dtype=pdt, rngs=rngs,
                              kernel=cfg.attention)
        self.mlp_norm = RMSNorm(cfg.d_model, eps=cfg.norm_eps, dtype=dt, param_dtype=pdt)
        self.mlp = (MoE(cfg.d_model, cfg.mlp_dim, cfg.moe, dtype=dt, param_dtype=pdt, rngs=rngs) if moe
                    else MLP(cfg.d_model, cfg.mlp_dim, dtype=dt, param_dtype=pdt, rngs=rngs,
                             remat=cfg.remat, chunks=cfg.mlp_chunks))
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


def _runs(kinds: list[bool]) -> list[tuple[bool, int]]:
    """Consecutive layers of the same kind (dense or MoE) as (is_moe, count): each run's layers
    are stored stacked and applied by one scan."""
    runs: list[tuple[bool, int]] = []
    for is_moe in kinds:
        if runs and runs[-1][0] == is_moe:
            runs[-1] = (is_moe, runs[-1][1] + 1)
        else:
            runs.append((is_moe, 1))
    return runs


def stack_blocks(blocks: list[Block]) -> Block:
    """One Block whose parameters hold these same-kind blocks' parameters on a new leading axis
    (logical axis `layers`, never sharded), as MaxText stores scanned layers. Stored stacked, the
    step neither stacks the weights nor splits their gradients and optimizer state, and the
    optimizer updates one array per weight kind rather than one per layer."""
    graphdef, state = nnx.split(blocks[0])
    stacked = jax.tree.map(lambda *ws: jnp.stack(ws),
                           *[nnx.to_pure_dict(nnx.split(b)[1]) for b in blocks])
    nnx.replace_by_pure_dict(state, stacked)
    block = nnx.merge(graphdef, state)
    for _, v in nnx.iter_graph(block):
        if isinstance(v, nnx.Param):
            axes = v.get_metadata().get("axes") or (None,) * (v.get_value().ndim - 1)
            v.set_metadata("axes", ("layers", *axes))
    return block


# Parameters used in float32 whatever the compute dtype (norm scales, the MoE router).
_KEEP_DTYPE = ("scale", "router_DxE")


def _apply_stack(stack: Block, x_BxLxD: jax.Array, remat: str, scan: bool
                 ) -> tuple[jax.Array, jax.Array]:
    """Apply a stack of same-kind layers in order: one `jax.lax.scan` over the stacked
    parameters, or (scan off) one layer after another; remat is per layer either way."""
    graphdef, state = nnx.split(stack)
    params = nnx.to_pure_dict(state)

    def layer(x, p):
        return nnx.merge(graphdef, p)(x)

    if scan:
        # The weight matrices are cast to the compute dtype once, before the scan, rather than
        # in each layer where remat would cast them again in the backward pass (the layers'
        # own casts are then no-ops: the same values reach the matmuls).
        dt = x_BxLxD.dtype
        params = jax.tree.map_with_path(
            lambda path, w: w if str(getattr(path[-1], "key", path[-1])) in _KEEP_DTYPE
            else w.astype(dt), params)
        if remat != "none":
            # Inside a scan the recomputation cannot be CSE'd with the forward pass: no barrier.
            layer = jax.checkpoint(layer, policy=remat_policy(remat), prevent_cse=False)
        x_BxLxD, aux_N = jax.lax.scan(layer, x_BxLxD, params)
        return x_BxLxD, jnp.sum(aux_N)
    if remat != "none":
        layer = jax.checkpoint(layer, policy=remat_policy(remat), prevent_cse=True)
    aux = jnp.zeros((), jnp.float32)
    for i in range(jax.tree.leaves(params)[0].shape[0]):
        x_BxLxD, layer_aux = layer(x_BxLxD, jax.tree.map(lambda w, i=i: w[i], params))
        aux = aux + layer_aux
    return x_BxLxD, aux


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
        # Built layer by layer (the same random draws whatever the storage), then stored as one
        # stack per run of same-kind layers: `layers[r]` holds run r's parameters on axis 0.
        blocks = [Block(cfg, moe=shape.is_moe_layer(i), rngs=rngs) for i in range(cfg.n_layers)]
        self.layers = nnx.List([])
        start = 0
        for _, count in _runs([b.is_moe for b in blocks]):
            self.layers.append(stack_blocks(blocks[start:start + count]))
            start += count
        self.final_norm = RMSNorm(cfg.d_model, eps=cfg.norm_eps, dtype=self.dtype, param_dtype=pdt)
        self.head_DxV = (None if cfg.tie_embeddings else
                         init_param(rngs, (cfg.d_model, cfg.vocab_size), cfg.d_model, pdt, ("embed", "vocab"),
                                    stddev=1.0 / cfg.d_model))
        self.remat = cfg.remat
        self.scan_layers = cfg.scan_layers
        self.vocab_chunks = cfg.vocab_chunks

    def features(self, tokens_BxL: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The final-normed hidden states [B, L, D] that the output layer reads, and the summed
        MoE load-balancing loss."""
        x_BxLxD = jnp.take(self.embed_VxD[...], tokens_BxL, axis=0).astype(self.dtype)
        x_BxLxD = shard(x_BxLxD, ("batch", "length", None))
        aux = jnp.zeros((), jnp.float32)
        for stack in self.layers:
            x_BxLxD, run_aux = _apply_stack(stack, x_BxLxD, self.remat, self.scan_layers)
            aux = aux + run_aux
        return self.final_norm(x_BxLxD), aux

    def output_weight(self) -> jax.Array:
        """The output layer's [D, V] weights in the compute dtype (the embedding's, transposed,
        where they are tied)."""
        if self.head_DxV is None:
            return self.embed_VxD[...].astype(self.dtype).T
        return self.head_DxV[...].astype(self.dtype)

    def __call__(self, tokens_BxL: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Logits for every position (float32 on CPU, the compute dtype compiled for a TPU: see
        `layers.dot`), and the summed MoE load-balancing loss."""
        x_BxLxD, aux = self.features(tokens_BxL)
        logits_BxLxV = self.logits(x_BxLxD)
        return logits_BxLxV, aux

    def logits(self, x_BxLxD: jax.Array) -> jax.Array:
        """The output layer on hidden states from `features`."""
        if self.head_DxV is None:
            logits_BxLxV = dot("bld,vd->blv", x_BxLxD, self.embed_VxD[...].astype(self.dtype))
        else:
            logits_BxLxV = dot("bld,dv->blv", x_BxLxD, self.head_DxV[...].astype(self.dtype))
        return shard(logits_BxLxV, ("batch", "length", "vocab"))
