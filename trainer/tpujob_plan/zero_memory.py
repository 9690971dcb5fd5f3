"""The GPU memory a PyTorch program's model states take under DeepSpeed ZeRO, for the pre-flight
of a GPU job that torchrun or accelerate starts (the operator does not see the program's model:
the job says its size, `spec.trainer.zero`).

Model states are the parameters, their gradients and the Adam optimizer's states in mixed
precision: 16 bytes a parameter in all (a 16-bit weight 2 and gradient 2, an fp32 master weight
4, Adam's two fp32 moments 4 + 4), which the ZeRO stages split over the job's GPUs. The bytes are
DeepSpeed's own estimators, with their offload options:

- stages 1 and 2 (`deepspeed/runtime/zero/stage_1_and_2.py`,
  `estimate_zero2_model_states_mem_needs`, which serves both stages: they share the optimizer):
  `4 P + 16 P / N` on each GPU, or `2 P` with the optimizer offloaded to the CPU;
- stage 3 (`deepspeed/runtime/zero/stage3.py`, `estimate_zero3_model_states_mem_needs`):
  `4 L + 18 P / N`, or `4 L + 2 P / N` with the optimizer offloaded, or `4 L` with the
  parameters offloaded too, where L is the largest layer's parameters (gathered whole for its
  forward and backward);
- stage 0, plain data parallelism (DDP, no ZeRO): `16 P` on every GPU.

P is the parameters, N the GPUs of the job. PyTorch FSDP's FULL_SHARD shards as stage 3 does,
SHARD_GRAD_OP as stage 2. Activations, the CUDA context and NCCL's buffers come on top and are
not modeled: the check refuses only a job whose model states alone do not fit, which no batch
size, activation checkpointing or retry can fix.
"""

from __future__ import annotations

from enum import StrEnum

GIB = 1 << 30
BYTES_PER_PARAMETER = 16   # mixed-precision Adam: 2 + 2 + 4 + 4 + 4
STAGES = (0, 1, 2, 3)
MAX_NODES = 1024   # spec.nodes' limit


class Offload(StrEnum):
    """What DeepSpeed's ZeRO-Offload keeps in CPU memory instead of the GPU's."""

    NONE = "none"
    OPTIMIZER = "optimizer"      # offload_optimizer: stages 1, 2 and 3
    PARAMETERS = "parameters"    # offload_param and offload_optimizer: stage 3 only


OFFLOAD_NEEDS_A_STAGE = ("offload needs a ZeRO stage (1, 2 or 3); stage 0 is plain data "
                         "parallelism")
OFFLOAD_PARAMETERS_NEEDS_STAGE_3 = ("offload parameters needs ZeRO stage 3 (stages 1 and 2 keep "
                                    "every parameter on every GPU); use offload: optimizer, or "
                                    "stage: 3")


def offload_problem(stage: int, offload: Offload) -> str | None:
    """Why this offload does not go with this stage (DeepSpeed refuses it), or None."""
    if offload is not Offload.NONE and stage == 0:
        return OFFLOAD_NEEDS_A_STAGE
    if offload is Offload.PARAMETERS and stage != 3:
        return OFFLOAD_PARAMETERS_NEEDS_STAGE_3
    return None


def model_state_bytes(parameters: int, stage: int, gpus: int, offload: Offload = Offload.NONE,
                      largest_layer: int = 0) -> int:
    """Bytes of model states on each GPU (DeepSpeed's estimate, module docstring)."""
    if stage not in STAGES:
        raise ValueError(f"ZeRO stage {stage}: expected one of {STAGES}")
    problem = offload_problem(stage, offload)
    if problem:
        raise ValueError(problem)
    if stage == 0:
        return BYTES_PER_PARAMETER * parameters
    if stage in (1, 2):
        if offload is Offload.OPTIMIZER:
            return 2 * parameters
        return 4 * parameters + 16 * parameters // gpus
    gathered = 4 * largest_layer
    if offload is Offload.PARAMETERS:
        return gathered
    if offload is Offload.OPTIMIZER:
        return gathered + 2 * parameters // gpus
    return gathered + 18 * parameters // gpus


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def zero_problem(parameters: int, stage: int, offload: Offload, largest_layer: int, *,
                 nodes: int, gpus_per_node: int, gpu_memory_bytes: int, machine: str
                 ) -> str | None:
    """Why the model states do not fit the job's GPUs, with what would fit; None when they do."""
    problem = offload_problem(stage, offload)
    if problem:
        return problem
    if largest_layer > parameters:
        return (f"largestLayerParameters {largest_layer:,} is more than parameters "
                f"{parameters:,}")
    gpus = nodes * gpus_per_node
    need = model_state_bytes(parameters, stage, gpus, offload, largest_layer)
    if need <= gpu_memory_bytes:
        return None
    options = []
    for other in STAGES[stage + 1:]:   # the next stage that fits
        if model_state_bytes(parameters, other, gpus, offload, largest_layer) \
                <= gpu_memory_bytes:
            options.append(f"stage: {other}")
            break
    more = _nodes_that_fit(parameters, stage, offload, largest_layer, gpus_per_node,
                           gpu_memory_bytes)
    if more is not None:   # more than the job has: its own count does not fit
        options.append(f"nodes: {more} at stage {stage}")
    if offload is Offload.NONE and stage > 0:
        fits = model_state_bytes(parameters, stage, gpus, Offload.OPTIMIZER, largest_layer)
        if fits <= gpu_memory_bytes:
            options.append("offload: optimizer")
    advice = "; ".join(options) or \
        f"none of the stages, offloads or node counts up to {MAX_NODES}"
    how = "no offload" if offload is Offload.NONE else f"offload {offload.value}"
    return (f"ZeRO stage {stage} ({how}) keeps {_gib(need)} of model states on each GPU for "
            f"{parameters:,} parameters over {gpus} GPUs ({nodes} node(s) x {gpus_per_node}), more than the "
            f"{_gib(gpu_memory_bytes)} of each {machine} GPU before any activation; would "
            f"fit: {advice}")


def _nodes_that_fit(parameters: int, stage: int, offload: Offload, largest_layer: int,
                    gpus_per_node: int, gpu_memory_bytes: int) -> int | None:
    """The fewest nodes whose GPUs hold the model states at this stage, if any up to
    MAX_NODES."""
    for nodes in range(1, MAX_NODES + 1):
        if model_state_bytes(parameters, stage, nodes * gpus_per_node, offload,
                             largest_layer) <= gpu_memory_bytes:
            return nodes
    return None
