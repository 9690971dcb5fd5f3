"""The train state and the pure train step.

`state` is a plain pytree of global arrays: {"params": pure dict, "opt_state": optax state,
"step": int32}. `train_step(state, batch) -> (state, metrics)` has no side effects; the loop
does the rest. `batch` is {"tokens": int32 [B, L+1], "stop": int32 [B]}: the model reads
tokens[:, :-1] and predicts tokens[:, 1:]; `stop` carries each process's stop request (SIGTERM)
through the step so that every process learns "someone stops" at the same step.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from tpujob_trainer.config.model import ModelConfig
from tpujob_trainer.models import Decoder
from tpujob_trainer.models.output_loss import chunks_for, output_loss
from tpujob_trainer.sharding import shard

State = dict[str, Any]


@jax.custom_vjp
def cross_entropy(logits_BxLxV: jax.Array, targets_BxL: jax.Array) -> jax.Array:
    """Mean next-token cross-entropy, computed in float32 from logits of any dtype.

    Its gradient is written out, (softmax - one-hot) / tokens, in one pass over the logits that
    yields the gradient in the logits' dtype: autodiff would hold a float32 copy of the logits
    (and of their gradient), the largest buffers of the step: 2 GiB per device for 16K tokens of
    a 32K vocabulary, measured with the TPU compiler (benchmarks/tpu_compile.py)."""
    return _cross_entropy_fwd(logits_BxLxV, targets_BxL)[0]


def _cross_entropy_fwd(logits_BxLxV, targets_BxL):
    # The max and the target's logit are exact in the logits' own dtype; only the sum of
    # exponentials is taken in float32, each element widened inside that one reduction.
    max_BxL = jnp.max(logits_BxLxV, axis=-1).astype(jnp.float32)
    sum_BxL = jnp.sum(jnp.exp(logits_BxLxV.astype(jnp.float32) - max_BxL[..., None]), axis=-1)
    lse_BxL = max_BxL + jnp.log(sum_BxL)
    target_BxL = jnp.take_along_axis(logits_BxLxV, targets_BxL[..., None], axis=-1)[..., 0]
    return jnp.mean(lse_BxL - target_BxL.astype(jnp.float32)), (logits_BxLxV, targets_BxL, lse_BxL)


def _cross_entropy_bwd(res, g):
    logits_BxLxV, targets_BxL, lse_BxL = res
    vocab = jnp.arange(logits_BxLxV.shape[-1], dtype=targets_BxL.dtype)
    p = jnp.exp(logits_BxLxV.astype(jnp.float32) - lse_BxL[..., None])
    hot = (targets_BxL[..., None] == vocab).astype(jnp.float32)
    d = ((p - hot) * (g / lse_BxL.size)).astype(logits_BxLxV.dtype)
    return d, None


cross_entropy.defvjp(_cross_entropy_fwd, _cross_entropy_bwd)


def loss_fn(params, graphdef: nnx.GraphDef, tokens_BxL1: jax.Array, aux_weight: float):
    model = nnx.merge(graphdef, params)
    x_BxLxD, aux = model.features(tokens_BxL1[:, :-1])
    targets_BxL = tokens_BxL1[:, 1:]
    chunks = chunks_for(x_BxLxD, model.embed_VxD.shape[0], model.vocab_chunks)
    if chunks > 1:
        # The output layer and the loss by vocabulary chunks (auto: on a TPU, large logits).
        ce = output_loss(x_BxLxD, model.output_weight(), targets_BxL, chunks)
    else:
        ce = cross_entropy(model.logits(x_BxLxD), targets_BxL)
    return ce + aux_weight * aux, (ce, aux)


def _grads(params, graphdef, tokens_BxL1, aux_weight: float, accum: int):
    """Mean loss and gradients over `accum` micro-batches (a scan; one micro-batch: no scan)."""
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    if accum == 1:
        (_, (ce, aux)), grads = grad_fn(params, graphdef, tokens_BxL1, aux_weight)
        return ce, aux, grads
    B, L1 = tokens_BxL1.shape
    # Micro-batch i takes rows i, i+accum, ...: every device keeps contributing rows to each one.
    micro_AxMxL1 = tokens_BxL1.reshape(B // accum, accum, L1).swapaxes(0, 1)

    def body(carry, micro_MxL1):
        ce_sum, aux_sum, g_sum = carry
        micro_MxL1 = shard(micro_MxL1, ("batch", None))
        (_, (ce, aux)), g = grad_fn(params, graphdef, micro_MxL1, aux_weight)
        g_sum = jax.tree.map(lambda a, b: a + b.astype(jnp.float32), g_sum, g)
        return (ce_sum + ce, aux_sum + aux, g_sum), None

    zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
    (ce, aux, grads), _ = jax.lax.scan(body, (jnp.zeros(()), jnp.zeros(()), zeros), micro_AxMxL1)
    grads = jax.tree.map(lambda g, p: (g / accum).astype(p.dtype), grads, params)
    return ce / accum, aux / accum, grads


def train_step(state: State, batch: dict[str, jax.Array], *, graphdef: nnx.GraphDef,
               tx: optax.GradientTransformation, schedule: optax.Schedule, aux_weight: float,
               grad_accum: int) -> tuple[State, dict[str, jax.Array]]:
    params = state["params"]
    ce, aux, grads = _grads(params, graphdef, batch["tokens"], aux_weight, grad_accum)
    updates, opt_state = tx.update(grads, state["opt_state"], params)
    new_state = {"params": optax.apply_updates(params, updates), "opt_state": opt_state,
                 "step": state["step"] + 1}
    metrics = {"loss": ce, "aux_loss": aux, "grad_norm": optax.tree.norm(grads),
               "lr": schedule(state["step"]), "stop": jnp.max(batch["stop"])}
    return new_state, metrics


def abstract_model(cfg: ModelConfig, seed: int = 0) -> tuple[nnx.GraphDef, nnx.State]:
    """The graph and the abstract (shape-only) parameters, with their `axes` metadata."""
    model = nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(seed)))
    return nnx.split(model)


def init_state(cfg: ModelConfig, tx: optax.GradientTransformation, seed: int) -> State:
    """Fresh parameters and optimizer state (call under jit with out_shardings to shard)."""
    _, params = nnx.split(Decoder(cfg, rngs=nnx.Rngs(seed)))
    params = nnx.to_pure_dict(params)
    return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32)}


@dataclass
class StepFns:
    """What the loop needs from the model side: the jitted init and step, and their shardings."""

    graphdef: nnx.GraphDef
    init: Any           # () -> state (sharded)
    step: Any           # (state, batch) -> (state, metrics)
    state_shardings: Any
    abstract_state: Any  # pytree of jax.ShapeDtypeStruct with shardings


def build_step_fns(cfg: ModelConfig, tx, schedule, *, seed: int, grad_accum: int, mesh,
                   batch_shardings: dict[str, Any], optimizer_over_data: bool = False) -> StepFns:
    """Jit init and step with explicit shardings: the state never exists unsharded.
    `optimizer_over_data`: the optimizer's state split over `data` too (ZeRO-1)."""
    from tpujob_trainer.sharding import param_shardings

    graphdef, abs_params = abstract_model(cfg, seed)
    p_shard = param_shardings(abs_params, mesh)
    abs_state = jax.eval_shape(lambda: init_state(cfg, tx, seed))
    state_shardings = _state_shardings(abs_state, p_shard, mesh, optimizer_over_data)
    init = jax.jit(lambda: init_state(cfg, tx, seed), out_shardings=state_shardings)
    step = jax.jit(
        functools.partial(train_step, graphdef=graphdef, tx=tx, schedule=schedule,
                          aux_weight=cfg.moe.load_balance_weight if cfg.moe.num_experts else 0.0,
                          grad_accum=grad_accum),
        in_shardings=(state_shardings, batch_shardings),
        out_shardings=(state_shardings, None), donate_argnums=(0,))
    abstract = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                            abs_state, state_shardings)
    return StepFns(graphdef, init, step, state_shardings, abstract)


def step_program(cfg, mesh, model_cfg: ModelConfig) -> tuple[StepFns, dict[str, Any]]:
    """The jitted init and step of `cfg` (a TrainerConfig) on `mesh`, with `model_cfg` (its model,
    remat resolved), and the batch the step takes (shape-only, sharded): what a run, and a
    compile for a TPU topology (`tpujob_trainer.aot`), lower and compile. Call inside
    `sharding.activate(mesh)`."""
    from tpujob_trainer.optim import build_optimizer
    from tpujob_trainer.sharding import named_sharding, optimizer_over_data

    B, L = cfg.train.global_batch, cfg.train.seq_len
    tx, schedule = build_optimizer(cfg.optimizer, cfg.train.steps)
    tokens = named_sharding(("batch", None), (B, L + 1), mesh)
    stop = named_sharding(("batch",), (B,), mesh)
    fns = build_step_fns(model_cfg, tx, schedule, seed=cfg.train.seed,
                         grad_accum=cfg.train.grad_accum, mesh=mesh,
                         batch_shardings={"tokens": tokens, "stop": stop},
                         optimizer_over_data=optimizer_over_data(cfg.mesh.optimizer_sharding,
                                                                 mesh))
    batch = {"tokens": jax.ShapeDtypeStruct((B, L + 1), jnp.int32, sharding=tokens),
             "stop": jax.ShapeDtypeStruct((B,), jnp.int32, sharding=stop)}
    return fns, batch


def _state_shardings(abs_state: State, p_shard, mesh, over_data: bool = False):
    """Optimizer-state leaves that mirror a parameter (same path suffix and shape) share its
    sharding, split over `data` as well where `over_data` (each data-parallel replica then
    keeps and updates its part, and the step gathers the updated weights); everything else
    (counts, scalars) is replicated."""
    from tpujob_trainer.sharding import also_over

    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    by_path = {}
    for path, s in jax.tree_util.tree_flatten_with_path(p_shard)[0]:
        by_path[_keys(path)] = s
    shapes = {k: v for k, v in (
        (_keys(p), a.shape) for p, a in jax.tree_util.tree_flatten_with_path(abs_state["params"])[0])}

    def one(path, leaf):
        keys = _keys(path)
        for i in range(len(keys)):
            suffix = keys[i:]
            if suffix in by_path and shapes[suffix] == leaf.shape:
                return (also_over(by_path[suffix], leaf.shape, "data") if over_data
                        else by_path[suffix])
        return replicated

    return {"params": p_shard,
            "opt_state": jax.tree.map_with_path(one, abs_state["opt_state"]),
            "step": replicated}


def _keys(path) -> tuple:
    return tuple(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))) for k in path)
