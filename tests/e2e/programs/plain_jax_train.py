"""A plain JAX training program that knows nothing of tpujob: `jax.distributed.initialize()`
with no arguments, a data-parallel linear regression over every device of every process, one
JSON line per step on stdout."""

import json

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec

STEPS = 8

jax.distributed.initialize()
mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))
rows = NamedSharding(mesh, PartitionSpec("data"))
print(json.dumps({"event": "start", "process": jax.process_index(),
                  "processes": jax.process_count(), "devices": jax.device_count()}), flush=True)

rng = np.random.default_rng(jax.process_index())
true_w = np.arange(1.0, 5.0, dtype=np.float32)
local_x = rng.normal(size=(16 * jax.local_device_count(), 4)).astype(np.float32)
x = jax.make_array_from_process_local_data(rows, local_x)
y = jax.make_array_from_process_local_data(rows, local_x @ true_w)


@jax.jit
def step(w, x, y):
    loss, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
    return w - 0.1 * grad, loss


w = jnp.zeros(4)
for i in range(1, STEPS + 1):
    w, loss = step(w, x, y)
    print(json.dumps({"step": i, "loss": float(loss)}), flush=True)
jax.distributed.shutdown()
