"""Parameter counts, FLOPs per step and the per-device memory estimate."""

import pytest

from tpujob_plan.flops import train_flops_per_step
from tpujob_plan.memory import REMAT_POLICIES, choose_remat, estimate_memory
from tpujob_plan.model_shape import PRESETS
from tpujob_trainer.config.model import ModelConfig, MoEConfig

pytestmark = pytest.mark.unit
GIB = 2**30


@pytest.mark.parametrize(
    "preset, total_b, active_b",
    [
        # Published parameter counts of these models.
        ("llama2-7b", 6.74, 6.74),
        ("llama3-8b", 8.03, 8.03),
        ("llama3-70b", 70.55, 70.55),
        ("llama3-405b", 405.85, 405.85),
        ("mixtral-8x7b", 46.70, 12.88),
        ("qwen3-30b-a3b", 30.53, 3.35),
        ("anchor-12m", 0.01259, 0.01259),
    ],
)
def test_parameter_counts(preset, total_b, active_b):
    shape = PRESETS[preset]
    assert shape.total_params / 1e9 == pytest.approx(total_b, rel=2e-3)
    assert shape.active_params / 1e9 == pytest.approx(active_b, rel=2e-3)


def test_flops_match_maxtext_count_for_the_anchor_config():
    # MaxText counts 0.1353 TFLOP per step for this config (reference facts, section 7).
    assert train_flops_per_step(PRESETS["anchor-12m"], 8, 256) / 1e12 == pytest.approx(0.1353,
                                                                                        abs=1e-4)


def test_moe_flops_count_only_active_experts():
    dense = ModelConfig(n_layers=4).to_shape()
    moe = ModelConfig(n_layers=4, moe=MoEConfig(num_experts=8, experts_per_token=2)).to_shape()
    more_experts = ModelConfig(n_layers=4, moe=MoEConfig(num_experts=64, experts_per_token=2))
    f_dense, f_moe = train_flops_per_step(dense, 8, 128), train_flops_per_step(moe, 8, 128)
    assert f_moe > f_dense  # two experts per token instead of one MLP
    # More experts at the same top-k add parameters and router work, almost no FLOPs.
    assert train_flops_per_step(more_experts.to_shape(), 8, 128) / f_moe < 1.01
    assert more_experts.to_shape().total_params > 5 * moe.total_params / 2


def _llama8b(remat="full", **kw):
    args = dict(global_batch=16, seq_len=8192, mesh={"fsdp": 16}, remat=remat, hbm_bytes=32e9)
    args.update(kw)
    return estimate_memory(PRESETS["llama3-8b"], **args)


def test_model_state_is_sharded_over_every_axis_but_data():
    one = _llama8b(mesh={"fsdp": 16})
    replicated = _llama8b(mesh={"data": 16}, global_batch=16)
    # AdamW: params + grads (fp32) + 2 moments = 16 bytes per parameter.
    state = sum(one.breakdown[k] for k in ("params", "gradients", "optimizer"))
    assert state == pytest.approx(16 * PRESETS["llama3-8b"].total_params / 16)
    assert replicated.breakdown["params"] == pytest.approx(16 * one.breakdown["params"])


def test_remat_policies_order_activation_memory():
    sizes = [_llama8b(remat=r).breakdown["activations"] for r in REMAT_POLICIES]
    assert sizes[0] > sizes[1] > sizes[2] > 0


def test_activations_scale_with_tokens_per_device():
    a = _llama8b(global_batch=16).breakdown["activations"]
    b = _llama8b(global_batch=32).breakdown["activations"]
    assert b == pytest.approx(2 * a)
    c = _llama8b(mesh={"fsdp": 4, "tensor": 4}).breakdown["activations"]
    assert c == pytest.approx(a)  # 4x more tokens per device, 4x fewer channels


def test_verdict_and_auto_remat():
    assert _llama8b(remat="full").fits is True
    assert _llama8b(remat="none").fits is False
    kw = dict(global_batch=16, seq_len=8192, mesh={"fsdp": 16})
    assert choose_remat(PRESETS["llama3-8b"], hbm_bytes=32e9, **kw) == "full"
    assert choose_remat(PRESETS["llama3-8b"], hbm_bytes=48 * GIB, **kw) == "minimal"
    assert choose_remat(PRESETS["llama3-8b"], hbm_bytes=1e12, **kw) == "none"
    # Without a device size there is no verdict.
    assert estimate_memory(PRESETS["tiny"], global_batch=2, seq_len=16, mesh={}).fits is None


def test_big_moe_does_not_fit_a_small_mesh():
    # Mixtral 8x7B with AdamW on 4 tpu7x devices needs ~180 GiB per device.
    e = estimate_memory(PRESETS["mixtral-8x7b"], global_batch=4, seq_len=8192,
                        mesh={"fsdp": 4}, remat="full", hbm_bytes=96 * GIB)
    assert e.fits is False
    assert e.per_device_bytes > 170 * GIB
    assert max(e.breakdown, key=e.breakdown.get) == "optimizer"


def test_uneven_batch_is_noted():
    e = _llama8b(global_batch=8)
    assert any("does not split evenly" in n for n in e.notes)


def test_grad_accumulation_trades_activations_for_an_accumulator():
    plain, accum = _llama8b(global_batch=32), _llama8b(global_batch=32, grad_accum=2)
    assert accum.breakdown["activations"] == pytest.approx(plain.breakdown["activations"] / 2)
    assert "gradientAccumulator" in accum.breakdown


@pytest.mark.parametrize("bad", [dict(remat="some"), dict(optimizer="sgd")])
def test_bad_options(bad):
    with pytest.raises(ValueError):
        _llama8b(**bad)


def test_flops_by_hand_for_a_small_dense_and_a_small_moe_shape():
    from tpujob_plan.flops import flops_per_token
    from tpujob_plan.model_shape import ModelShape

    # d=8, 2 heads of 4 (1 KV head), mlp 16, vocab 32, 2 layers; batch 2 x 4 tokens = 8 tokens.
    dense = ModelShape(vocab_size=32, d_model=8, n_layers=2, n_heads=2, n_kv_heads=1,
                       head_dim=4, mlp_dim=16)
    qkv = 2 * 8 * 8 * (2 + 2 * 1) * 4            # 2048
    proj = 2 * 8 * 8 * 2 * 4                     # 1024
    ffn = 2 * 8 * 3 * 8 * 16                     # 6144
    emb = 2 * 8 * 8 * 32                         # 4096
    attn = 4 * 2 * 4**2 * 2 * 4 / 2              # 512 per layer
    want = 3 * (2 * (qkv + proj + ffn) + emb) + 3 * attn * 2
    assert train_flops_per_step(dense, 2, 4) == want == 70656
    assert flops_per_token(dense, 4) == train_flops_per_step(dense, 1, 4) / 4 == 8832

    # The same with 4 experts (2 active, 1 shared, expert mlp 8) on every layer after the first.
    moe = ModelShape(vocab_size=32, d_model=8, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=4,
                     mlp_dim=16, num_experts=4, experts_per_token=2, num_shared_experts=1,
                     moe_mlp_dim=8, first_dense_layers=1)
    expert = 2 * 8 * 3 * 8 * 8                   # 3072
    router = 2 * 8 * 8 * 4                       # 512
    want = 3 * (2 * (qkv + proj) + ffn + router + 3 * expert + emb) + 3 * attn * 2
    assert train_flops_per_step(moe, 2, 4) == want == 81408


SMALL = dict(vocab_size=32, d_model=8, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=4,
             mlp_dim=16)


@pytest.mark.parametrize("remat, act_per_layer, recompute_per_layer", [
    # none: 6d + 3q + 3kv + 4 mlp + heads x seq (dot-product scores) = 48+24+12+64+16
    ("none", 164, 0),
    # minimal: 3d + 2q + 2kv + 2 mlp = 24+16+8+32; the workspace recomputes one layer's "none"
    ("minimal", 80, 164),
    ("full", 8, 164),
])
def test_memory_terms_by_hand_for_a_small_dense_shape(remat, act_per_layer, recompute_per_layer):
    from tpujob_plan.memory import estimate_memory
    from tpujob_plan.model_shape import ModelShape

    shape = ModelShape(**SMALL)
    p = shape.total_params
    # fsdp 2 x tensor 2: state in 4 shards; batch over fsdp: 2 shards; 2 micro-batches of 4.
    est = estimate_memory(shape, global_batch=8, seq_len=8, mesh={"fsdp": 2, "tensor": 2},
                          remat=remat, grad_accum=2, attention="dot_product", hbm_bytes=1e9)
    tokens = 4 * 8 / 2
    act_scale = tokens * 2 / 2                       # bf16 activations over tensor=2
    largest = shape.attention_params + shape.dense_mlp_params
    assert est.tokens_per_device == tokens and est.notes == []
    assert est.breakdown == pytest.approx({
        "params": p * 4 / 4, "gradients": p * 4 / 4, "optimizer": 2 * 4 * p / 4,
        "gradientAccumulator": p * 4 / 4,
        "activations": 2 * act_per_layer * act_scale,
        "workspace": recompute_per_layer * act_scale + largest * 2 / 2,
        "logits": tokens * 32 * (2 + 4) / 2,
    })
    assert est.per_device_bytes == pytest.approx(sum(est.breakdown.values()))


def test_memory_of_muon_moe_and_the_fit_boundary_by_hand():
    from tpujob_plan.memory import USABLE_HBM_FRACTION, estimate_memory
    from tpujob_plan.model_shape import ModelShape

    moe = ModelShape(**SMALL, num_experts=4, experts_per_token=2, num_shared_experts=1,
                     moe_mlp_dim=8, first_dense_layers=1)
    est = estimate_memory(moe, global_batch=4, seq_len=8, mesh={"expert": 2}, remat="none",
                          optimizer="muon", attention="flash", capacity_factor=1.5)
    p, others = moe.total_params, moe.embedding_params + moe.norm_params
    tokens = 4 * 8 / 2                               # batch over expert=2
    dense_layer = 48 + 24 + 12 + 4 * 16              # flash: no scores term
    moe_layer = 48 + 24 + 12 + 4 * ((2 * 1.5 + 1) * 8) + 2 * 4
    assert est.breakdown["optimizer"] == pytest.approx((4 * (p - others) + 8 * others) / 2)
    assert est.breakdown["activations"] == pytest.approx((dense_layer + moe_layer) * tokens * 2)
    largest = moe.attention_params + max(moe.dense_mlp_params, moe.moe_mlp_params / 2)
    assert est.breakdown["workspace"] == pytest.approx(largest * 2)  # remat none: no recompute
    full = estimate_memory(moe, global_batch=4, seq_len=8, mesh={"expert": 2}, remat="full",
                           optimizer="muon", capacity_factor=1.5)
    assert full.breakdown["workspace"] == pytest.approx(max(dense_layer, moe_layer) * tokens * 2
                                                        + largest * 2)
    assert "gradientAccumulator" not in est.breakdown
    # Fits up to the usable fraction of HBM (95%), not beyond.
    need = est.per_device_bytes
    at = estimate_memory(moe, global_batch=4, seq_len=8, mesh={"expert": 2}, remat="none",
                         optimizer="muon", capacity_factor=1.5,
                         hbm_bytes=need / USABLE_HBM_FRACTION * 1.000001)
    assert at.fits is True and at.usable_bytes == pytest.approx(need)
    below = estimate_memory(moe, global_batch=4, seq_len=8, mesh={"expert": 2}, remat="none",
                            optimizer="muon", capacity_factor=1.5,
                            hbm_bytes=need / USABLE_HBM_FRACTION * 0.999)
    assert below.fits is False
    assert est.fits is None and est.to_dict()["usableGiB"] is None
    assert at.to_dict()["perDeviceGiB"] == round(need / 1024**3, 3)


@pytest.mark.parametrize("batch, accum, seq, mesh, says", [
    (3, 1, 8, {"fsdp": 2}, "a (micro)batch of 3 sequences does not split evenly over the 2"),
    (2, 2, 8, {"fsdp": 2}, "a (micro)batch of 1 sequences"),
    (4, 1, 9, {"context": 2}, "seq_len 9 does not split evenly over context=2"),
    (4, 1, 8, {"fsdp": 2, "context": 2}, None),
])
def test_memory_notes_say_what_does_not_split(batch, accum, seq, mesh, says):
    from tpujob_plan.memory import estimate_memory
    from tpujob_plan.model_shape import ModelShape

    est = estimate_memory(ModelShape(**SMALL), global_batch=batch, seq_len=seq, mesh=mesh,
                          grad_accum=accum)
    if says is None:
        assert est.notes == []
    else:
        assert [n for n in est.notes if says in n], est.notes


@pytest.mark.parametrize("preset, total, active", [
    # Published parameter counts (the models' released checkpoints).
    ("llama2-7b", 6_738_415_616, 6_738_415_616),
    ("llama3-8b", 8_030_261_248, 8_030_261_248),
    ("llama3-70b", 70_553_706_496, 70_553_706_496),
    ("llama3-405b", 405_853_388_800, 405_853_388_800),
    ("mixtral-8x7b", 46_702_792_704, 12_879_925_248),
    # Qwen3-30B-A3B's checkpoint has 30,532,122,624; the shape leaves out its per-head q/k
    # norm weights (48 layers x 2 x 128), which no memory or FLOP figure notices.
    ("qwen3-30b-a3b", 30_532_122_624 - 48 * 2 * 128, None),
    ("anchor-12m", 12_587_264, 12_587_264),  # MaxText's own count of the same model
])
def test_preset_parameter_counts_match_the_published_models(preset, total, active):
    from tpujob_plan.model_shape import PRESETS

    shape = PRESETS[preset]
    shape = shape if hasattr(shape, "total_params") else shape.to_shape()
    assert shape.total_params == total
    if active is not None:
        assert shape.active_params == active


@pytest.mark.parametrize("first_dense, every, layers, moe", [
    (0, 1, 4, [0, 1, 2, 3]),
    (1, 1, 4, [1, 2, 3]),
    (0, 2, 5, [0, 2, 4]),
    (1, 2, 6, [1, 3, 5]),
    (3, 1, 3, []),
    (1, 3, 8, [1, 4, 7]),
])
def test_which_layers_are_moe(first_dense, every, layers, moe):
    from tpujob_plan.model_shape import ModelShape

    shape = ModelShape(**{**SMALL, "n_layers": layers}, num_experts=4, experts_per_token=1,
                       moe_every=every, first_dense_layers=first_dense)
    assert [i for i in range(layers) if shape.is_moe_layer(i)] == moe
    assert (shape.n_moe_layers, shape.n_dense_layers) == (len(moe), layers - len(moe))
    dense = ModelShape(**{**SMALL, "n_layers": layers})
    assert not any(dense.is_moe_layer(i) for i in range(layers)) and not dense.is_moe


def test_parameter_terms_by_hand():
    from tpujob_plan.model_shape import ModelShape

    s = ModelShape(**SMALL, num_experts=4, experts_per_token=2, num_shared_experts=1,
                   moe_mlp_dim=8)
    assert s.attention_params == 8 * (2 + 2 * 1) * 4 + 2 * 4 * 8 == 192
    assert s.dense_mlp_params == 3 * 8 * 16
    assert s.expert_params == 3 * 8 * 8
    assert s.moe_mlp_params == 8 * 4 + (4 + 1) * 3 * 8 * 8
    assert s.embedding_params == 2 * 32 * 8
    assert ModelShape(**SMALL, tie_embeddings=True).embedding_params == 32 * 8
    assert s.norm_params == (2 * 2 + 1) * 8
    assert ModelShape(**SMALL, num_experts=4, experts_per_token=1).expert_params == 3 * 8 * 16


def test_tiny_preset_and_expert_terms_by_hand():
    from dataclasses import FrozenInstanceError

    from tpujob_plan.model_shape import PRESETS, ModelShape

    # tiny: attention 64*(4+2*2)*16 + 4*16*64, SwiGLU 3*64*256, embeddings 2*256*64, 5 norms.
    assert PRESETS["tiny"].total_params == 2 * (12288 + 49152) + 32768 + 5 * 64 == 155_968
    one = ModelShape(**SMALL, num_experts=1, experts_per_token=1)
    assert one.is_moe and one.n_moe_layers == 2
    moe = ModelShape(**SMALL, num_experts=4, experts_per_token=2, moe_mlp_dim=8)
    assert moe.expert_weight_params == 2 * 4 * (3 * 8 * 8)
    assert moe.active_params == moe.total_params - 2 * 4 * 192 + 2 * 2 * 192
    with pytest.raises(FrozenInstanceError):
        moe.d_model = 16


def test_memory_context_axis_defaults_and_the_remat_choice():
    from dataclasses import FrozenInstanceError

    from tpujob_plan.memory import choose_remat, estimate_memory
    from tpujob_plan.model_shape import PRESETS, ModelShape

    shape = ModelShape(**SMALL)
    p = shape.total_params
    # context=2 shards the state and the tokens (not the batch).
    ctx = estimate_memory(shape, global_batch=2, seq_len=8, mesh={"fsdp": 2, "context": 2})
    assert ctx.breakdown["params"] == p * 4 / 4 and ctx.tokens_per_device == 2 * 8 / (2 * 2)
    assert ctx.notes == []                         # a batch of 2 over 2 shards splits evenly
    # grad_accum 0 counts as 1; the default capacity factor is 1.25.
    zero = estimate_memory(shape, global_batch=4, seq_len=8, mesh={}, grad_accum=0)
    assert zero.tokens_per_device == 32 and "gradientAccumulator" not in zero.breakdown
    moe = ModelShape(**SMALL, num_experts=4, experts_per_token=2, moe_mlp_dim=8)
    default = estimate_memory(moe, global_batch=1, seq_len=8, mesh={}, remat="minimal")
    # minimal: 3d + 2q + 2kv + 2 x hidden + router, hidden = (2 x 1.25) x 8 experts' mlp
    per_layer = 24 + 16 + 8 + 2 * (2 * 1.25 * 8) + 2 * 4
    assert default.breakdown["activations"] == pytest.approx(2 * per_layer * 8 * 2)
    with pytest.raises(FrozenInstanceError):
        default.remat = "none"
    # Nothing fits in 1 byte: the most recomputation is the answer; everything fits in 1 TB.
    assert choose_remat(shape, global_batch=4, seq_len=8, mesh={}, hbm_bytes=1) == "full"
    assert choose_remat(shape, global_batch=4, seq_len=8, mesh={}, hbm_bytes=1e12) == "none"
    # to_dict in GiB to 3 decimals.
    big = estimate_memory(PRESETS["llama3-8b"], global_batch=8, seq_len=4096, mesh={"fsdp": 8})
    assert big.to_dict()["perDeviceGiB"] == round(big.per_device_bytes / 1024**3, 3)
    assert big.to_dict()["breakdown"]["params"] == round(big.breakdown["params"] / 1024**3, 3)
