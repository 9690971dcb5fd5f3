"""How many chunks of its hidden width a dense layer's MLP takes its backward pass in (pure
arithmetic).

Compiled for a TPU with remat `full`, the trainer computes a dense layer's SwiGLU MLP backward a
chunk of the hidden columns at a time (`tpujob_trainer.models.mlp_chunked`), so that the layer's
backward holds the MLP-wide values (gate, up, the SwiGLU output and their gradients) of one chunk
rather than of every column: those values are the largest of the layer's backward pass, and on
the larger models the step's peak is there. The HBM estimate counts the same chunk
(`tpujob_plan.memory`). Both read the count from here; the chunks' widths are whole lanes
(`vocab_chunks.chunk_bounds`).

Measured with the TPU compiler (benchmarks/tpu_compile.py, results/tpu_compile.md), the 1.14B
model (MLP 8192) at 32 x 2048 tokens on a v6e-8, 128 MiB per MLP-wide value per device: 4.37
GiB per device unchunked, 4.10 in 2 chunks of columns (bytes accessed 27.9 -> 30.0 GB: the
input and its gradient read once per chunk); in 2 chunks of positions instead, 4.03 GiB but
32.2 GB (each chunk reads the weights and sums their gradients again), more than MaxText's
31.2 GB.

Not where the mesh's `data` axis splits the batch (data parallelism, as across slices): there the
trainer's `auto` splits the optimizer's state over `data` too (`mesh.optimizer_sharding`), which
freed more than the chunks do, and the chunks' traffic is what took the step over MaxText's.
The 1.14B model on two v6e-8 slices (64 x 2048, the optimizer's state over `data`), compiled in
one window: 3.95 GiB per device and 37.8 GB accessed in 2 chunks, 4.16 GiB and 35.6 GB
unchunked (MaxText's step: 4.82 GiB, 37.7 GB). With the optimizer's state kept as the weights
(`as_params`) the chunks would save 0.15 GiB there (4.82 -> 4.67); auto does not chunk either
way, a count in `model.mlp_chunks` does.
"""

from __future__ import annotations

import math

from tpujob_plan.vocab_chunks import LANE

# Chunked where one device's MLP-wide value (its tokens x the MLP columns it holds x the compute
# dtype's bytes) passes CHUNKED_FROM_BYTES, in the fewest chunks (at least 2) of at most
# CHUNK_BYTES each, at most MAX_CHUNKS.
CHUNKED_FROM_BYTES = 64 * 2**20
CHUNK_BYTES = 128 * 2**20
MAX_CHUNKS = 8


def mlp_chunks(local_tokens: float, mlp_width: float, itemsize: int, *, platform: str = "tpu",
               remat: str = "full", data: int = 1) -> int:
    """How many chunks of its hidden width a dense MLP's backward takes: 1 (the plain path) off
    a TPU, under remat other than `full` (the other policies keep the MLP's values for the
    backward by choice), where the mesh's `data` axis splits the batch (`data` > 1), or where
    one device's MLP-wide value is no more than
    `CHUNKED_FROM_BYTES`; otherwise the fewest chunks, at least 2, that bring one chunk's value
    under `CHUNK_BYTES`, at most `MAX_CHUNKS` and none narrower than a lane."""
    if platform != "tpu" or remat != "full" or data > 1:
        return 1
    value = local_tokens * mlp_width * itemsize
    if value <= CHUNKED_FROM_BYTES:
        return 1
    chunks = min(max(2, math.ceil(value / CHUNK_BYTES)), MAX_CHUNKS)
    return max(1, min(chunks, int(mlp_width // LANE)))
