"""The output layer and the cross-entropy in one: the mean next-token loss of hidden states
through the output weights, with the vocabulary taken in chunks so that the full [B, L, V]
logits never exist at once.

`output_loss(x_BxLxD, w_DxV, targets_BxL, chunks)`: the forward pass computes each chunk's
logits, folds them into a running log-sum-exp (and picks the target's logit where it falls in
the chunk), and keeps nothing of them; the backward pass computes each chunk's logits again,
turns them into that chunk's gradient ((softmax - one-hot) / tokens) and takes its two matmuls
(into the hidden states' gradient, summed over chunks in float32, and into the chunk's columns
of the weights' gradient). What it costs: the output matmul once more (the recompute), in
exchange for one chunk's logits and their gradient in memory instead of all of them, the
largest buffers of a step with a large vocabulary (2 GiB per device for Llama 3's 128K
vocabulary at 8 x 8192 tokens on a v6e-8, measured with the TPU compiler: see
benchmarks/tpu_compile.py).

MaxText offers the same trade as a setting (`num_vocab_tiling`, off by default). Here it is
chosen per compile target (`tpujob_plan.vocab_chunks`): on a TPU, where HBM is what a job runs
out of, the vocabulary is chunked once one device's logits pass 256 MiB (not on v5p, nor where
`data` splits the batch); elsewhere (XLA:CPU, whose speed the plain path was tuned for) the
plain path, `dot` then `step.cross_entropy`.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from tpujob_plan.generations import generation_for_device_kind
from tpujob_plan.vocab_chunks import chunk_bounds, vocab_chunks
from tpujob_trainer.sharding import active_axis, active_mesh, local_splits, shard, target_platform


def _logits(x_BxLxD, w_DxC):
    return shard(jnp.einsum("bld,dc->blc", x_BxLxD, w_DxC), ("batch", "length", "vocab"))


def output_loss(x_BxLxD: jax.Array, w_DxV: jax.Array, targets_BxL: jax.Array,
                chunks: int) -> jax.Array:
    """Mean cross-entropy of `softmax(x @ w)` against `targets`, the vocabulary in `chunks`.
    The weights are gathered whole (over the batch axes that shard them) once, for the
    forward chunks and their recomputation alike, rather than chunk by chunk twice."""
    return _output_loss(x_BxLxD, shard(w_DxV, (None, "vocab")), targets_BxL, chunks)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _output_loss(x_BxLxD, w_DxV, targets_BxL, chunks):
    return _forward(x_BxLxD, w_DxV, targets_BxL, chunks)[0]


def _forward(x_BxLxD, w_DxV, targets_BxL, chunks):
    B, L, _ = x_BxLxD.shape
    max_BxL = jnp.full((B, L), -jnp.inf, jnp.float32)
    sum_BxL = jnp.zeros((B, L), jnp.float32)
    target_BxL = jnp.zeros((B, L), jnp.float32)
    for start, end in chunk_bounds(w_DxV.shape[1], chunks):
        # One chunk after another: the barrier makes each chunk's matmul wait for the previous
        # chunk's sums, so that XLA does not compute (and hold) every chunk's logits at once.
        x_BxLxD, max_BxL, sum_BxL = jax.lax.optimization_barrier((x_BxLxD, max_BxL, sum_BxL))
        logits_BxLxC = _logits(x_BxLxD, w_DxV[:, start:end])
        # The running log-sum-exp: the sum rescaled to the new maximum.
        new_max = jnp.maximum(max_BxL, jnp.max(logits_BxLxC, axis=-1).astype(jnp.float32))
        sum_BxL = (sum_BxL * jnp.exp(max_BxL - new_max)
                   + jnp.sum(jnp.exp(logits_BxLxC.astype(jnp.float32) - new_max[..., None]), axis=-1))
        max_BxL = new_max
        local_BxL = targets_BxL - start
        inside = (local_BxL >= 0) & (local_BxL < end - start)
        picked = jnp.take_along_axis(logits_BxLxC, jnp.clip(local_BxL, 0, end - start - 1)[..., None],
                                     axis=-1)[..., 0]
        target_BxL = target_BxL + jnp.where(inside, picked.astype(jnp.float32), 0.0)
    lse_BxL = max_BxL + jnp.log(sum_BxL)
    loss = jnp.mean(lse_BxL - target_BxL)
    return loss, (x_BxLxD, w_DxV, targets_BxL, lse_BxL)


def _backward(chunks, res, g):
    x_BxLxD, w_DxV, targets_BxL, lse_BxL = res
    # The logits are computed again, not kept: without the barrier XLA would merge the two
    # computations and hold every chunk's forward logits until here.
    x_BxLxD, w_DxV = jax.lax.optimization_barrier((x_BxLxD, w_DxV))
    scale = g / lse_BxL.size
    dx_BxLxD = jnp.zeros(x_BxLxD.shape, jnp.float32)
    dw_parts = []
    for start, end in chunk_bounds(w_DxV.shape[1], chunks):
        # The next chunk waits for this one's two matmuls (else XLA may put off the weights'
        # gradients to the end and hold every chunk's logits gradient until then).
        x_BxLxD, dx_BxLxD, dw_parts = jax.lax.optimization_barrier((x_BxLxD, dx_BxLxD, dw_parts))
        w_DxC = w_DxV[:, start:end]
        logits_BxLxC = _logits(x_BxLxD, w_DxC)
        p = jnp.exp(logits_BxLxC.astype(jnp.float32) - lse_BxL[..., None])
        cols = jnp.arange(start, end, dtype=targets_BxL.dtype)
        hot = (targets_BxL[..., None] == cols).astype(jnp.float32)
        d_BxLxC = ((p - hot) * scale).astype(x_BxLxD.dtype)
        dx_BxLxD = dx_BxLxD + jnp.einsum("blc,dc->bld", d_BxLxC, w_DxC,
                                         preferred_element_type=jnp.float32)
        dw_parts.append(jnp.einsum("bld,blc->dc", x_BxLxD, d_BxLxC).astype(w_DxV.dtype))
    dw_DxV = dw_parts[0] if len(dw_parts) == 1 else jnp.concatenate(dw_parts, axis=1)
    return dx_BxLxD.astype(x_BxLxD.dtype), dw_DxV, None


_output_loss.defvjp(_forward, _backward)


def chunks_for(x_BxLxD: jax.Array, vocab: int, setting: int | str = "auto") -> int:
    """How many chunks the output layer takes: the model's `vocab_chunks` setting where it is
    a count, else (auto) `vocab_chunks` for these hidden states on the active mesh (the one being
    compiled for)."""
    if setting != "auto":
        return len(chunk_bounds(vocab, int(setting)))
    B, L, _ = x_BxLxD.shape
    splits = local_splits(("batch", "length", "vocab"), (B, L, vocab))
    local = math.ceil(B / splits[0]) * math.ceil(L / splits[1])
    mesh = active_mesh()
    kind = generation_for_device_kind(mesh.devices.flat[0].device_kind) if mesh is not None else None
    generation = kind.prefix if kind else None
    return vocab_chunks(vocab, local, x_BxLxD.dtype.itemsize, platform=target_platform(),
                        vocab_split=splits[2], data=active_axis("data"),
                        generation=generation)
