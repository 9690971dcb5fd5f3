"""The model states a PyTorch program keeps on each GPU under DeepSpeed ZeRO, beside what
DeepSpeed's own estimators print (`estimate_zero2_model_states_mem_needs_all_cold`,
`estimate_zero3_model_states_mem_needs_all_cold`; their per-GPU column is in GiB, two decimals),
and the refusal with what would fit."""

from __future__ import annotations

import pytest

from tpujob_plan.zero_memory import (
    GIB,
    MAX_NODES,
    OFFLOAD_NEEDS_A_STAGE,
    OFFLOAD_PARAMETERS_NEEDS_STAGE_3,
    Offload,
    model_state_bytes,
    offload_problem,
    zero_problem,
)

pytestmark = pytest.mark.unit

T5_SMALL, T5_SMALL_LARGEST = 60_506_624, 32128 * 512    # 60M total, 16M largest layer
T5_3B = 2_851_598_336                                    # 2851M total
H100 = 81559 << 20


@pytest.mark.parametrize("params, largest, stage, gpus, offload, per_gpu_gib", [
    # DeepSpeed's ZeRO-3 table for t5-small on 1 GPU: 0.06, 0.17 and 1.08 GB per GPU.
    (T5_SMALL, T5_SMALL_LARGEST, 3, 1, Offload.PARAMETERS, 0.06),
    (T5_SMALL, T5_SMALL_LARGEST, 3, 1, Offload.OPTIMIZER, 0.17),
    (T5_SMALL, T5_SMALL_LARGEST, 3, 1, Offload.NONE, 1.08),
    # DeepSpeed's ZeRO-2 table for t5-3b on 1 node of 8 GPUs: 5.31 (offload) and 15.93.
    (T5_3B, 0, 2, 8, Offload.OPTIMIZER, 5.31),
    (T5_3B, 0, 2, 8, Offload.NONE, 15.93),
    # Stage 1 shares stage 2's optimizer and estimator; stage 0 (DDP) holds 16 bytes a parameter.
    (T5_3B, 0, 1, 8, Offload.NONE, 15.93),
    (T5_3B, 0, 0, 8, Offload.NONE, 42.49),
])
def test_deepspeeds_own_estimates(params, largest, stage, gpus, offload, per_gpu_gib):
    got = model_state_bytes(params, stage, gpus, offload, largest)
    assert round(got / GIB, 2) == per_gpu_gib


def test_more_gpus_shard_more_from_stage_1_on():
    eight_b = 8_030_261_248
    by_gpus = {g: [model_state_bytes(eight_b, s, g) for s in (0, 1, 2, 3)] for g in (8, 16)}
    assert by_gpus[8][0] == by_gpus[16][0] == 16 * eight_b
    for stage in (1, 2, 3):
        assert by_gpus[16][stage] < by_gpus[8][stage] <= by_gpus[8][stage - 1]
    assert by_gpus[8][1] == by_gpus[8][2]   # one estimator for both: they share the optimizer
    assert model_state_bytes(eight_b, 3, 16) == 18 * eight_b // 16


@pytest.mark.parametrize("stage, offload, problem", [
    (0, Offload.OPTIMIZER, OFFLOAD_NEEDS_A_STAGE),
    (0, Offload.PARAMETERS, OFFLOAD_NEEDS_A_STAGE),
    (1, Offload.PARAMETERS, OFFLOAD_PARAMETERS_NEEDS_STAGE_3),
    (2, Offload.PARAMETERS, OFFLOAD_PARAMETERS_NEEDS_STAGE_3),
    (3, Offload.PARAMETERS, None), (1, Offload.OPTIMIZER, None), (0, Offload.NONE, None),
])
def test_offloads_that_deepspeed_refuses(stage, offload, problem):
    assert offload_problem(stage, offload) == problem
    if problem:
        with pytest.raises(ValueError, match="offload"):
            model_state_bytes(1000, stage, 8, offload)
    with pytest.raises(ValueError, match="ZeRO stage 4"):
        model_state_bytes(1000, 4, 8)


def _problem(params, stage, nodes, offload=Offload.NONE, largest=0):
    return zero_problem(params, stage, offload, largest, nodes=nodes, gpus_per_node=8,
                        gpu_memory_bytes=H100, machine="a3-megagpu-8g (H100 80GB)")


def test_what_fits_passes_and_what_does_not_says_what_would():
    eight_b = 8_030_261_248
    assert _problem(eight_b, 1, 2) is None          # 4P + 12.. : 37.4 GiB
    # DDP of an 8B model on 2 nodes: 119.7 GiB a GPU; stage 1 fits, no node count does.
    message = _problem(eight_b, 0, 2)
    assert message == (
        "ZeRO stage 0 (no offload) keeps 119.7 GiB of model states on each GPU for "
        "8,030,261,248 parameters over 16 GPUs (2 node(s) x 8), more than the 79.6 GiB of each "
        "a3-megagpu-8g (H100 80GB) GPU before any activation; would fit: stage: 1")
    # 70B at stage 2 (4P alone is 261 GiB): stage 3 fits 2 nodes; no node count saves stage 2.
    message = _problem(70_000_000_000, 2, 2)
    assert message.endswith("would fit: stage: 3"), message
    # 30B at stage 2 on 1 node: 4P + 16P/8 = 167.6 GiB; stage 3 fits, offloading fits, and
    # stage 2 never does (4P is 111.8 GiB on any number of nodes).
    message = _problem(30_000_000_000, 2, 1)
    assert message.endswith("would fit: stage: 3; offload: optimizer"), message
    # 20B at stage 2 on 1 node: 4P + 2P = 111.8 GiB; 4P alone is 74.5 GiB, so the sharded
    # 16P/N must come under 5.1 GiB: 58 GPUs, 8 nodes.
    message = _problem(20_000_000_000, 2, 1)
    assert "would fit: stage: 3; nodes: 8 at stage 2; offload: optimizer" in message, message
    assert _problem(20_000_000_000, 2, 8) is None and _problem(20_000_000_000, 2, 7)
    # A model no stage fits: 1T parameters with its largest layer offloaded still gathered.
    message = _problem(10**12, 3, 1, Offload.PARAMETERS, largest=30 * 10**9)
    assert message.endswith("none of the stages, offloads or node counts up to 1024"), message
    assert _problem(1000, 3, 1, largest=2000).startswith("largestLayerParameters 2,000 is more")
    assert _problem(1000, 0, 1, Offload.OPTIMIZER) == OFFLOAD_NEEDS_A_STAGE


def test_the_limits_are_inclusive():
    """Exactly the GPU's memory fits; a largest layer as large as the whole model is allowed;
    a fit at exactly MAX_NODES nodes is offered, one past it is not."""
    eight_b = 8_030_261_248
    for stage, offload in ((0, Offload.NONE), (2, Offload.NONE), (3, Offload.OPTIMIZER)):
        exact = model_state_bytes(eight_b, stage, 16, offload, 1000)
        assert zero_problem(eight_b, stage, offload, 1000, nodes=2, gpus_per_node=8,
                            gpu_memory_bytes=exact, machine="m") is None
        assert zero_problem(eight_b, stage, offload, 1000, nodes=2, gpus_per_node=8,
                            gpu_memory_bytes=exact - 1, machine="m") is not None
    assert _problem(1000, 3, 1, largest=1000) is None
    # Stage 3: 18 P / (8 n) fits an H100 from exactly n = MAX_NODES on.
    at_limit = H100 * 8 * MAX_NODES // 18
    assert model_state_bytes(at_limit, 3, 8 * MAX_NODES) <= H100 < model_state_bytes(
        at_limit, 3, 8 * (MAX_NODES - 1))
    message = _problem(at_limit, 3, 1)
    assert message.endswith(f"would fit: nodes: {MAX_NODES} at stage 3"), message
    beyond = _problem(at_limit + 1000, 3, 1)
    assert beyond.endswith(f"would fit: none of the stages, offloads or node counts up to "
                           f"{MAX_NODES}"), beyond
    # The fewest nodes offered are those whose GPUs it fills exactly.
    big = 100 * eight_b
    exact = model_state_bytes(big, 3, 8 * 5)
    message = zero_problem(big, 3, Offload.NONE, 0, nodes=1, gpus_per_node=8,
                           gpu_memory_bytes=exact, machine="m")
    assert "would fit: nodes: 5 at stage 3" in message, message
    # The next stage offered is one that fits exactly.
    exact = model_state_bytes(eight_b, 3, 16)
    message = zero_problem(eight_b, 2, Offload.NONE, 0, nodes=2, gpus_per_node=8,
                           gpu_memory_bytes=exact, machine="m")
    assert "would fit: stage: 3" in message, message
    # Offloading the optimizer at exactly the memory it needs is offered.
    exact = model_state_bytes(eight_b, 2, 16, Offload.OPTIMIZER)
    message = zero_problem(eight_b, 2, Offload.NONE, 0, nodes=2, gpus_per_node=8,
                           gpu_memory_bytes=exact, machine="m")
    assert message.endswith("offload: optimizer"), message


def test_stage_1_is_offered_the_optimizers_offload_too():
    # 30B at stage 1 on 1 node: stage 2 holds as much; stage 3 and offloading both fit.
    assert _problem(30_000_000_000, 1, 1).endswith("would fit: stage: 3; offload: optimizer")

