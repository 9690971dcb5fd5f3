"""A plain JAX training program that knows nothing of tpujob but prints the host report lines
docs/trainer.md describes (every process, from a thread of its own, `waiting` while it waits on
the step's result), and whose process 1 gets
stuck in its own work at step HANG_AT on its first start: the other process then waits in the
step's collective. `sys.argv[1]`: a folder both processes see, where the first start leaves a
mark so that the start after the restart trains to the end."""

import json
import os
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec

STEPS, HANG_AT, INTERVAL_S = 60, 25, 0.5
mark = os.path.join(sys.argv[1], "hung-once")

jax.distributed.initialize()
me = jax.process_index()
state = {"step": 0, "moved_at": time.time(), "steps": [], "waiting": False}
lock = threading.Lock()


def report() -> None:
    with lock:
        doc = {"event": "host_report", "time": time.time(), "process": me, "slice": 0,
               "host": me, "phase": "step", "step": state["step"],
               "moved_at": state["moved_at"], "interval_s": INTERVAL_S,
               "waiting": state["waiting"], "steps": state["steps"]}
        state["steps"] = []
    print(json.dumps(doc, separators=(",", ":")), flush=True)


def beat() -> None:
    while True:
        time.sleep(INTERVAL_S)
        report()


threading.Thread(target=beat, daemon=True).start()
mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))
rows = NamedSharding(mesh, PartitionSpec("data"))
rng = np.random.default_rng(me)
local_x = rng.normal(size=(16 * jax.local_device_count(), 4)).astype(np.float32)
x = jax.make_array_from_process_local_data(rows, local_x)
y = jax.make_array_from_process_local_data(rows, local_x @ np.arange(1.0, 5.0, dtype=np.float32))


@jax.jit
def step(w, x, y):
    loss, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
    return w - 0.01 * grad, loss


w = jnp.zeros(4)
for i in range(1, STEPS + 1):
    t0 = time.time()
    if me == 1 and i == HANG_AT and not os.path.exists(mark):
        open(mark, "w").close()
        threading.Event().wait()          # stuck in its own work, for good
    time.sleep(0.05)                      # the step's host work
    busy = time.time() - t0
    state["waiting"] = True               # on the step's result: the others' part in it
    w, loss = step(w, x, y)
    loss = float(loss)
    with lock:
        state["step"], state["moved_at"], state["waiting"] = i, time.time(), False
        state["steps"].append([i, round(busy, 6), round(time.time() - t0 - busy, 6), 0])
    if me == 0:
        print(json.dumps({"step": i, "loss": loss}), flush=True)
report()
jax.distributed.shutdown()
