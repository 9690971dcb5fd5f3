"""Probe: what scanning the layers would save the trainer's step, before changing the model.

    .venv/bin/python benchmarks/scan_layers_probe.py DTYPE MODE    # DTYPE bfloat16|float32, MODE scan|unrolled

The anchor model (trainer_throughput.ANCHOR, remat full) built from the trainer's own Block,
embedding, final norm and cross-entropy, its 8 blocks' parameters stacked on a leading axis and
applied either by `jax.lax.scan` over that axis or by a Python loop over it (the trainer's
Decoder scans by default, and loops with `model.scan_layers: false`); remat full
(jax.checkpoint of one block) and AdamW in both. Prints this
process's CPU seconds per step (median of 4 after 2), the first step's time (compile + 1 step)
and the loss after 6 steps, which must be the same in both modes.
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import trainer_throughput as tt
from tpujob_trainer.models import Decoder
from tpujob_trainer.step import cross_entropy


def main(dtype: str, mode: str) -> None:
    cfg = tt.anchor_config(dtype, "full", 10, checkpoint={"enabled": False},
                           output="unused").model
    model = Decoder(cfg, rngs=nnx.Rngs(0))
    gd_block, _ = nnx.split(model.blocks[0])
    gd_norm, _ = nnx.split(model.final_norm)
    block_params = [nnx.to_pure_dict(nnx.split(b)[1]) for b in model.blocks]
    rest = nnx.to_pure_dict(nnx.split(model)[1])
    params = {"embed": rest["embed_VxD"], "head": rest["head_DxV"], "norm": rest["final_norm"],
              "blocks": jax.tree.map(lambda *xs: jnp.stack(xs), *block_params)}
    dt = jnp.dtype(cfg.dtype)

    def block(x, layer_params):
        return nnx.merge(gd_block, layer_params)(x)

    block_remat = jax.checkpoint(block, prevent_cse=(mode != "scan"))

    def loss(p, tokens):
        x = jnp.take(p["embed"], tokens[:, :-1], axis=0).astype(dt)
        if mode == "scan":
            x, _ = jax.lax.scan(block_remat, x, p["blocks"])
        else:
            for i in range(cfg.n_layers):
                x, _ = block_remat(x, jax.tree.map(lambda a, i=i: a[i], p["blocks"]))
        x = nnx.merge(gd_norm, p["norm"])(x)
        logits = jnp.einsum("bld,dv->blv", x, p["head"].astype(dt)).astype(jnp.float32)
        return cross_entropy(logits, tokens[:, 1:])

    tx = optax.adamw(1e-3, weight_decay=0.1)

    @jax.jit
    def step(p, opt_state, tokens):
        value, grads = jax.value_and_grad(loss)(p, tokens)
        updates, opt_state = tx.update(grads, opt_state, p)
        return optax.apply_updates(p, updates), opt_state, value

    opt_state = tx.init(params)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size, (8, 257)), jnp.int32)
    t0 = time.perf_counter()
    params, opt_state, value = step(params, opt_state, tokens)
    jax.block_until_ready(value)
    first = time.perf_counter() - t0
    params, opt_state, value = step(params, opt_state, tokens)
    jax.block_until_ready(value)
    c0 = time.process_time()
    for _ in range(4):
        params, opt_state, value = step(params, opt_state, tokens)
    jax.block_until_ready(value)
    cpu = (time.process_time() - c0) / 4
    print(f"{mode} {dtype}: {cpu:.3f} CPU s/step, first step {first:.1f} s, "
          f"loss after 6 steps {float(value):.4f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
