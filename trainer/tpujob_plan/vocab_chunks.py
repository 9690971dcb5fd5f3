"""How many chunks the output layer takes the vocabulary in (pure arithmetic).

Compiled for a TPU, the trainer computes the output layer and the loss a chunk of the
vocabulary at a time (`tpujob_trainer.models.output_loss`), so that one device holds one
chunk's logits rather than all of them; the HBM estimate counts the same chunk
(`tpujob_plan.memory`). Both read the count from here.
"""

from __future__ import annotations

import math

# Chunked where one device's logits pass CHUNKED_FROM_BYTES, in the fewest chunks (at least 2)
# of at most CHUNK_BYTES each. Measured with the TPU compiler (benchmarks/tpu_compile.py,
# results/tpu_compile.md): the 1.14B model's step on a tpu7x-8 (500 MiB of logits per device)
# holds 5.42 -> 4.38 GiB per device in 2 chunks; Llama 3 8B's layers at 8 x 8192 tokens on a
# v6e-8 (2 GiB) 9.04 -> 6.78 GiB in 4 chunks, but 7.78 GiB in 8 (more chunks, more of them
# live at once, and more bytes moved). Not where the batch is split over `data` (data
# parallelism, as across slices): on two v6e-8 slices the chunked step held more, 4.82 -> 5.26
# GiB.
CHUNKED_FROM_BYTES = 256 * 2**20
CHUNK_BYTES = 512 * 2**20
# Generations whose compiled step peaks in the layers' backward pass whatever the logits, so
# that chunks only add the recomputation: v5p (the 1.14B model at 32 x 2048 on a v5p-8 holds
# 8.43 GiB per device either way, and the cost model's time goes 0.0446 -> 0.0507 s).
UNCHUNKED_GENERATIONS = frozenset({"v5p"})
MAX_CHUNKS = 16
# A chunk's width is a multiple of the MXU's 128 lanes (the last chunk takes the rest).
LANE = 128


def vocab_chunks(vocab: int, local_tokens: float, itemsize: int, *, platform: str = "tpu",
                 vocab_split: int = 1, data: int = 1, generation: str | None = None) -> int:
    """How many chunks the vocabulary is taken in: 1 (the plain path) off a TPU, on a
    generation in `UNCHUNKED_GENERATIONS`, where the vocabulary is split over the mesh already
    (`vocab_split` > 1: each device holds only its part), where the mesh's `data` axis splits
    the batch (`data` > 1), or where one device's logits are no more than `CHUNKED_FROM_BYTES`;
    otherwise the fewest chunks, at least 2, that bring one chunk under `CHUNK_BYTES`, at most
    `MAX_CHUNKS` and none narrower than `LANE`."""
    if (platform != "tpu" or generation in UNCHUNKED_GENERATIONS or vocab_split > 1
            or data > 1):
        return 1
    logits = local_tokens * vocab * itemsize
    if logits <= CHUNKED_FROM_BYTES:
        return 1
    chunks = max(2, math.ceil(logits / CHUNK_BYTES))
    # Widths are whole lanes: a vocabulary of few lanes takes fewer chunks (`chunk_bounds`).
    return len(chunk_bounds(vocab, min(chunks, MAX_CHUNKS)))


def chunk_bounds(vocab: int, chunks: int) -> list[tuple[int, int]]:
    """[start, end) of each chunk: widths a whole number of lanes (but the last's), covering
    `vocab`; as many chunks as those widths give (at most `chunks`)."""
    if chunks <= 1:
        return [(0, vocab)]
    width = math.ceil(vocab / chunks / LANE) * LANE
    return [(s, min(vocab, s + width)) for s in range(0, vocab, width)]
