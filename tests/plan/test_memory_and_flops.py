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
    args = dict(global_batch=16, seq_len=8192, mesh={"fsdp": 16}, remat=remat, hbm_bytes=32e9,
                generation="v6e")
    args.update(kw)
    return estimate_memory(PRESETS["llama3-8b"], **args)


def test_model_state_is_sharded_over_every_axis_but_data():
    one = _llama8b(mesh={"fsdp": 16})
    replicated = _llama8b(mesh={"data": 16}, global_batch=16)
    # AdamW: params (fp32) + 2 moments = 12 bytes per parameter; no gradient term (at the peak
    # the layers' gradients are not yet computed).
    state = sum(one.breakdown[k] for k in ("params", "optimizer"))
    assert state == pytest.approx(12 * PRESETS["llama3-8b"].total_params / 16)
    assert "gradients" not in one.breakdown     # the backward's terms hold more than they do
    assert replicated.breakdown["params"] == pytest.approx(16 * one.breakdown["params"])


def test_remat_policies_order_activation_memory():
    sizes = [_llama8b(remat=r).breakdown["activations"] for r in REMAT_POLICIES]
    assert sizes[0] > sizes[1] > sizes[2] > 0


def test_activations_scale_with_tokens_per_device():
    a = _llama8b(global_batch=16).breakdown["activations"]
    b = _llama8b(global_batch=32).breakdown["activations"]
    assert b == pytest.approx(2 * a)
    c = _llama8b(mesh={"fsdp": 4, "tensor": 4}, remat="minimal").breakdown["activations"]
    # 4x more tokens per device; heads and MLP columns split over tensor, d_model replicated.
    shape = PRESETS["llama3-8b"]
    q, kv, f, d = 32 * 128, 8 * 128, shape.mlp_dim, shape.d_model
    per_token = (q / 4 + 2 * kv / 4 + 2 * d + 2 * f / 4) * 2
    assert c == pytest.approx(32 * 16 * 8192 / 4 * per_token)


def test_verdict_and_auto_remat():
    assert _llama8b(remat="full").fits is True
    assert _llama8b(remat="none").fits is False
    kw = dict(global_batch=16, seq_len=8192, mesh={"fsdp": 16}, generation="v6e")
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
    assert e.per_device_bytes > 130 * GIB
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


# Per token and layer of SMALL on tensor=2 (q 8 -> 4, kv 4 -> 2, mlp 16 -> 8 per device, d 8
# replicated), bf16: the saved activations by remat policy, and the workspace unit (the layer's
# matmul values: 3q + 2kv + 2d + 3 mlp).
SMALL_UNIT = (3 * 4 + 2 * 2 + 2 * 8 + 3 * 8) * 2                      # 112 bytes


# SMALL's 1704 parameters in float32 over fsdp 2 x tensor 2: the parameters' gradients a
# layer's backward holds (param dtype), beside one layer's bf16 weights over tensor ((192 + 384)
# x 2 / 2 = 576) and the stacked gradients of the cast weights (1152 x 2 / 4 = 576).
SMALL_GRADIENTS = 1704 * 4 / 4


@pytest.mark.parametrize("remat, saved_per_layer, copies, workspace", [
    # none: 3q + 2kv + 2d (bf16) + two float32 values of d (2 d x 4 bytes) + gate/up and SwiGLU
    # output (3 mlp); 2.25 copies of the logits, 3.4 units beside them.
    ("none", (3 * 4 + 2 * 2 + 2 * 8 + 3 * 8) * 2 + 2 * 8 * 4, 2.25, 3.4 * 16 * SMALL_UNIT),
    # minimal: q + 2kv + the two output projections (2d) + the stacked gate/up (2 mlp); 2.35 units.
    ("minimal", (4 + 2 * 2 + 2 * 8 + 2 * 8) * 2, 2.25, 2.35 * 16 * SMALL_UNIT),
    # full: the layer's input; 1.75 copies of the logits. The peak is the larger of the logits'
    # moment (0.5 units beside them) and a layer's backward (2.05 units + its weights + the
    # stacked gradients + the parameters' gradients), here the layer's: the workspace is what it
    # holds beyond the logits' terms (1.75 x 16 x 16 x 2 = 896, and 512).
    ("full", 8 * 2, 1.75, 2.05 * 16 * SMALL_UNIT + 576 + 576 + SMALL_GRADIENTS - 896 - 512),
])
def test_memory_terms_by_hand_for_a_small_dense_shape(remat, saved_per_layer, copies, workspace):
    from tpujob_plan.memory import estimate_memory
    from tpujob_plan.model_shape import ModelShape

    shape = ModelShape(**SMALL)
    p = shape.total_params
    layers = p - shape.embedding_params - shape.norm_params
    # fsdp 2 x tensor 2: state in 4 shards; batch over fsdp: 2 shards; 2 micro-batches of 4.
    est = estimate_memory(shape, global_batch=8, seq_len=8, mesh={"fsdp": 2, "tensor": 2},
                          remat=remat, grad_accum=2, hbm_bytes=1e9, generation="v6e")
    tokens = 4 * 8 / 2
    assert est.tokens_per_device == tokens and est.notes == []
    assert est.breakdown == pytest.approx({
        "params": p * 4 / 4, "optimizer": 2 * 4 * p / 4, "gradientAccumulator": p * 4 / 4,
        "castWeights": layers * 2 / 4,                # layer weights cast to bf16 before the scan
        "activations": 2 * saved_per_layer * tokens,
        "logits": copies * tokens * 32 * 2 / 2,       # logits + their gradient, bf16, vocab / 2
        "outputLayer": 2 * 8 * 32 * 2 / 2,            # gathered weights + unreduced gradient
        "workspace": workspace,
    })
    assert est.per_device_bytes == pytest.approx(sum(est.breakdown.values()))


@pytest.mark.parametrize("param_bytes", [4, 2])
def test_the_parameters_gradients_are_the_peak_of_a_large_model_on_few_tokens(param_bytes):
    # Llama 3 70B over 8 devices, 128 tokens each: a layer's backward holds every parameter's
    # gradient (param dtype), with f32 weights also their bf16 cast and its stacked bf16
    # gradients (2 + 2 bytes a parameter of the layers), beside the state; the tokens' part is
    # under 1% of it.
    shape = PRESETS["llama3-70b"]
    p, layers = shape.total_params, shape.total_params - shape.embedding_params - shape.norm_params
    est = estimate_memory(shape, global_batch=8, seq_len=128, mesh={"fsdp": 8}, remat="full",
                          param_bytes=param_bytes, generation="v6e")
    state = (param_bytes + 8) * p / 8
    cast = 2 * layers / 8 if param_bytes == 4 else 0
    one_layer = (shape.attention_params + shape.dense_mlp_params) * 2    # gathered, bf16
    held = state + cast + param_bytes * p / 8 + cast + one_layer
    assert held <= est.per_device_bytes <= 1.01 * held
    assert "gradients" not in est.breakdown


def test_remat_full_peaks_at_the_larger_of_the_logits_and_a_layers_backward():
    from tpujob_plan.memory import estimate_memory
    from tpujob_plan.model_shape import ModelShape

    def full(vocab):
        shape = ModelShape(**{**SMALL, "vocab_size": vocab})
        return shape, estimate_memory(shape, global_batch=8, seq_len=8, mesh={"fsdp": 2, "tensor": 2},
                                      remat="full", generation="v6e")

    tokens = 8 * 8 / 2
    # A vocabulary of 2: the layer's backward (2.05 units per token + the layer's weights + the
    # stacked gradients of every layer's cast weights + the parameters' f32 gradients) is
    # the peak; the workspace is what it holds beyond the logits' terms.
    shape, small = full(2)
    weights = (shape.attention_params + shape.dense_mlp_params) * 2 / 2
    cast = (shape.total_params - shape.embedding_params - shape.norm_params) * 2 / 4
    layer = 2.05 * tokens * SMALL_UNIT + weights + cast + shape.total_params * 4 / 4
    logits, output = 1.75 * tokens * 2 * 2 / 2, 2 * 8 * 2 * 2 / 2
    assert small.breakdown["workspace"] == pytest.approx(layer - logits - output)
    assert small.breakdown["logits"] + small.breakdown["outputLayer"] + small.breakdown[
        "workspace"] == pytest.approx(layer)
    # A vocabulary of 4096: the logits' moment is the peak, with 0.5 units beside them.
    _, big = full(4096)
    assert big.breakdown["workspace"] == pytest.approx(0.5 * tokens * SMALL_UNIT)
    assert big.breakdown["logits"] == pytest.approx(1.75 * tokens * 4096 * 2 / 2)


@pytest.mark.parametrize("mesh, setting, width", [
    ({"fsdp": 8}, "auto", 32128),            # 2 GiB of logits per device: 4 chunks of <= 512 MiB
    ({"fsdp": 8}, 1, 128256),                # chunks off: every logit
    ({"fsdp": 8}, 3, 42752),                 # a count: its chunks' width
    ({"fsdp": 4, "tensor": 2}, "auto", 64128),   # the vocabulary split over tensor: no chunks
    ({"fsdp": 4, "data": 2}, "auto", 128256),    # the batch split over data: no chunks
])
def test_the_logits_term_counts_one_chunk_where_the_output_layer_is_chunked(mesh, setting, width):
    """Llama 3's vocabulary at 8 x 8192 tokens over 8 devices, as the trainer compiles it for a
    TPU (`tpujob_plan.vocab_chunks`), through the request the operator and `tpujob plan` use."""
    from tpujob_plan.memory import MemoryRequest
    from tpujob_plan.model_shape import ModelShape

    shape = ModelShape(vocab_size=128256, d_model=64, n_layers=1, n_heads=1, n_kv_heads=1,
                       head_dim=64, mlp_dim=128)
    est = MemoryRequest(shape=shape, global_batch=8, seq_len=8192, remat="full",
                        vocab_chunks=setting).estimate(mesh, None, "v6e")
    tokens = 8 * 8192 / (mesh.get("fsdp", 1) * mesh.get("data", 1))
    assert est.breakdown["logits"] == pytest.approx(1.75 * tokens * width * 2)
    if setting == "auto":   # on a v5p, auto never chunks (allowance 0.9, 1.15 copies)
        v5p = MemoryRequest(shape=shape, global_batch=8, seq_len=8192, remat="full",
                            vocab_chunks=setting).estimate(mesh, None, "v5p")
        full = 128256 / mesh.get("tensor", 1)
        assert v5p.breakdown["logits"] == pytest.approx(0.9 * 1.15 * tokens * full * 2)


@pytest.mark.parametrize("generation, allowance, copies, embedding", [
    ("v6e", 1.0, 2.25, 0), ("v5p", 0.9, 2.1, 0), ("tpu7x", 0.95, 2.0, 1.85),
    (None, 1.0, 2.25, 1.85), ("v5litepod", 1.0, 2.25, 1.85),   # not measured: the largest of each
])
def test_the_generation_allowance_scales_the_token_terms_only(generation, allowance, copies,
                                                              embedding):
    from tpujob_plan.memory import estimate_memory
    from tpujob_plan.model_shape import ModelShape

    def est(gen):
        return estimate_memory(ModelShape(**SMALL), global_batch=8, seq_len=8,
                               mesh={"fsdp": 2, "tensor": 2}, remat="none", generation=gen)

    base, got = est("v6e").breakdown, est(generation).breakdown
    for term in ("activations", "workspace"):
        assert got[term] == pytest.approx(allowance * base[term]), term
    assert got["logits"] == pytest.approx(allowance * copies / 2.25 * base["logits"])
    for term in ("params", "optimizer", "castWeights", "outputLayer"):
        assert got[term] == base[term], term
    # tpu7x's compiler holds the embedding's gradient (32 x 8) unsharded in float32.
    assert got.get("embeddingGradient", 0) == embedding * 32 * 8 * 4


@pytest.mark.parametrize("generation, remat, allowance, copies", [
    ("v6e", "full", 1.0, 1.75), ("v6e", "minimal", 1.0, 2.25),
    ("v5p", "full", 0.9, 1.15), ("v5p", "none", 0.9, 2.1),      # v5p: the gradient over them
    ("tpu7x", "full", 0.95, 1.9), ("tpu7x", "minimal", 0.95, 2.0),
    (None, "full", 1.0, 1.9), (None, "none", 1.0, 2.25),        # not measured: the largest
])
def test_the_logits_are_counted_in_copies_by_generation_and_policy(generation, remat, allowance,
                                                                   copies):
    from tpujob_plan.memory import estimate_memory
    from tpujob_plan.model_shape import ModelShape

    # SMALL on fsdp 2 x tensor 2: 16 tokens per device, a vocabulary of 32 / 2, bf16.
    est = estimate_memory(ModelShape(**SMALL), global_batch=8, seq_len=4,
                          mesh={"fsdp": 2, "tensor": 2}, remat=remat, generation=generation)
    assert est.breakdown["logits"] == pytest.approx(allowance * copies * 16 * 16 * 2)


def test_memory_of_muon_moe_and_the_fit_boundary_by_hand():
    from tpujob_plan.memory import USABLE_HBM_FRACTION, estimate_memory
    from tpujob_plan.model_shape import ModelShape

    moe = ModelShape(**SMALL, num_experts=4, experts_per_token=2, num_shared_experts=1,
                     moe_mlp_dim=8, first_dense_layers=1)
    kw = dict(global_batch=4, seq_len=8, mesh={"expert": 2}, optimizer="muon",
              capacity_factor=1.5, generation="v6e")
    est = estimate_memory(moe, remat="none", **kw)
    p, others = moe.total_params, moe.embedding_params + moe.norm_params
    tokens = 4 * 8 / 2                               # batch over expert=2
    q, kv, d = 8, 4, 8
    attention_norms = (3 * q + 2 * kv + 2 * d) * 2 + 2 * d * 4
    dense_layer = attention_norms + 3 * 16 * 2
    # MoE layer: router logits and probabilities (f32), dispatch and combine (k x cf x seq_len
    # slots each) and the per-choice one-hots in f32 (k = 2 times as many), the routed copies'
    # input, output and six MLP-wide values (k x cf = 3 copies), the shared expert's gate/up and
    # SwiGLU output.
    moe_layer = (attention_norms + 2 * 4 * 4 + 2 * 3 * 8 * 4
                 + (2 * 3 * 8 + 3 * (2 * d + 6 * 8) + 3 * 8) * 2)
    assert est.breakdown["optimizer"] == pytest.approx((4 * (p - others) + 8 * others) / 2)
    assert est.breakdown["activations"] == pytest.approx((dense_layer + moe_layer) * tokens)
    # The workspace unit is the larger layer's: the MoE layer's, with its routed (k x cf = 3)
    # and shared copies of the expert MLP (4 x 8 columns) against the dense layer's 16.
    dense_unit = (3 * q + 2 * kv + 2 * d + 3 * 16) * 2
    moe_unit = (3 * q + 2 * kv + 2 * d + 3 * (3 + 1) * 8) * 2
    assert moe_unit > dense_unit
    assert est.breakdown["workspace"] == pytest.approx(3.4 * tokens * moe_unit)
    minimal = estimate_memory(moe, remat="minimal", **kw)
    # minimal: the expert matmuls carry a batch (expert) dimension and are not saved; the
    # router's logits (f32) are.
    assert minimal.breakdown["activations"] == pytest.approx(
        ((q + 2 * kv + 2 * d) * 2 + 2 * 16 * 2 + (q + 2 * kv + 2 * d) * 2 + 4 * 4) * tokens)
    assert "gradientAccumulator" not in est.breakdown
    # Fits up to the usable fraction of HBM (95%), not beyond.
    need = est.per_device_bytes
    at = estimate_memory(moe, remat="none", hbm_bytes=need / 0.95 * 1.000001, **kw)
    assert at.fits is True and at.usable_bytes == pytest.approx(need, rel=1e-5)
    assert at.usable_bytes == pytest.approx(0.95 * at.hbm_bytes) and USABLE_HBM_FRACTION == 0.95
    below = estimate_memory(moe, remat="none", hbm_bytes=need / 0.95 * 0.999, **kw)
    assert below.fits is False
    assert est.fits is None and est.to_dict()["usableGiB"] is None
    assert at.to_dict()["perDeviceGiB"] == round(need / 1024**3, 3)


@pytest.mark.parametrize("param_dtype_bytes, compute_bytes, cast", [(4, 2, True), (4, 4, False),
                                                                     (2, 2, False)])
def test_weights_cast_to_a_narrower_compute_dtype_are_counted(param_dtype_bytes, compute_bytes,
                                                               cast):
    from tpujob_plan.memory import estimate_memory
    from tpujob_plan.model_shape import ModelShape

    shape = ModelShape(**SMALL)
    est = estimate_memory(shape, global_batch=4, seq_len=8, mesh={"fsdp": 2},
                          param_bytes=param_dtype_bytes, compute_bytes=compute_bytes)
    layers = shape.total_params - shape.embedding_params - shape.norm_params
    assert est.breakdown.get("castWeights") == (layers * compute_bytes / 2 if cast else None)


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
    default = estimate_memory(moe, global_batch=1, seq_len=8, mesh={}, remat="none",
                              generation="v6e")
    # none, MoE layer: the default capacity factor 1.25 sets the routed copies (k x 1.25 = 2.5)
    # and the dispatch/combine slots (2.5 x seq_len each; k = 2 times as many in f32).
    per_layer = (3 * 8 + 2 * 4 + 2 * 8) * 2 + 2 * 8 * 4 + 2 * 4 * 4 + 2 * 2.5 * 8 * 4 + (
        2 * 2.5 * 8 + 2.5 * (2 * 8 + 6 * 8)) * 2
    assert default.breakdown["activations"] == pytest.approx(2 * per_layer * 8)
    with pytest.raises(FrozenInstanceError):
        default.remat = "none"
    # Nothing fits in 1 byte: the most recomputation is the answer; everything fits in 1 TB.
    assert choose_remat(shape, global_batch=4, seq_len=8, mesh={}, hbm_bytes=1) == "full"
    assert choose_remat(shape, global_batch=4, seq_len=8, mesh={}, hbm_bytes=1e12) == "none"
    # to_dict in GiB to 3 decimals.
    big = estimate_memory(PRESETS["llama3-8b"], global_batch=8, seq_len=4096, mesh={"fsdp": 8})
    assert big.to_dict()["perDeviceGiB"] == round(big.per_device_bytes / 1024**3, 3)
    assert big.to_dict()["breakdown"]["params"] == round(big.breakdown["params"] / 1024**3, 3)


@pytest.mark.parametrize("remat, beside, units, copies", [
    ("none", 3.4, 0.0, 2.25), ("minimal", 2.35, 0.0, 2.25), ("full", 0.5, 2.05, 1.75)])
def test_a_layers_weights_can_outweigh_its_tokens_under_every_policy(remat, beside, units, copies):
    from tpujob_plan.memory import estimate_memory
    from tpujob_plan.model_shape import ModelShape

    # One token, a vocabulary of 2: the layer's backward (its bf16 weights, 576 x 2 bytes, the
    # stacked gradients of both layers' cast weights, 1152 x 2, and the parameters' float32
    # gradients, 1224 x 4) is the peak under every policy; with remat full it adds its 2.05
    # units, the others none.
    shape = ModelShape(**{**SMALL, "vocab_size": 2})
    est = estimate_memory(shape, global_batch=1, seq_len=1, mesh={}, remat=remat,
                          generation="v6e")
    unit = (3 * 8 + 2 * 4 + 2 * 8 + 3 * 16) * 2                 # 192 bytes, tensor=1
    logits, output = copies * 1 * 2 * 2, 2 * 8 * 2 * 2
    layer = units * unit + 576 * 2 + 1152 * 2 + 1224 * 4
    assert est.breakdown["workspace"] == pytest.approx(layer - logits - output)
    assert layer - logits - output > beside * unit              # beyond what sits by the logits


def test_moe_residuals_split_over_tensor():
    from tpujob_plan.memory import estimate_memory
    from tpujob_plan.model_shape import ModelShape

    moe = ModelShape(**SMALL, num_experts=4, experts_per_token=2, moe_mlp_dim=8)
    est = estimate_memory(moe, global_batch=8, seq_len=8, mesh={"tensor": 2}, remat="none",
                          capacity_factor=1.0, generation="v6e")
    # tensor=2: q 4, kv 2, expert MLP 4 columns per device; d_model 8 replicated. Routed copies
    # k x cf = 2: dispatch/combine 2 x 8 slots each (2 x 2 x 8 in f32), input/output 2 x d, six
    # MLP-wide values of 4.
    per_layer = ((3 * 4 + 2 * 2 + 2 * 8) * 2 + 2 * 8 * 4 + 2 * 4 * 4 + 2 * 2 * 8 * 4
                 + (2 * 2 * 8 + 2 * (2 * 8 + 6 * 4)) * 2)
    assert est.breakdown["activations"] == pytest.approx(2 * per_layer * 64)
    # The workspace unit splits the same way: 3q + 2kv + 2d + 3 x (2 routed copies x 4 columns).
    assert est.breakdown["workspace"] == pytest.approx(3.4 * 64 * (3 * 4 + 2 * 2 + 2 * 8 + 3 * 8) * 2)


def test_a_moe_layers_gathered_weights_are_its_experts_over_the_expert_axis():
    from tpujob_plan.memory import estimate_memory
    from tpujob_plan.model_shape import ModelShape

    # One token per device, a vocabulary of 2, remat full: the layer's backward is the peak, with
    # the attention's weights and the MoE layer's router and experts over expert=2, in bf16.
    moe = ModelShape(**{**SMALL, "vocab_size": 2}, num_experts=4, experts_per_token=2,
                     moe_mlp_dim=8)
    est = estimate_memory(moe, global_batch=2, seq_len=1, mesh={"expert": 2}, remat="full",
                          capacity_factor=1.0, generation="v6e")
    unit = (3 * 8 + 2 * 4 + 2 * 8 + 3 * 2 * 8) * 2                  # 2 routed copies of 8 columns
    weights = (192 + (8 * 4 + 4 * 3 * 8 * 8) / 2) * 2                # attention + router/experts / 2
    cast = (moe.total_params - moe.embedding_params - moe.norm_params) * 2 / 2
    gradients = moe.total_params * 4 / 2                             # float32, over expert=2
    assert est.breakdown["workspace"] == pytest.approx(
        2.05 * 1 * unit + weights + cast + gradients - 1.75 * 1 * 2 * 2 - 2 * 8 * 2 * 2)


@pytest.mark.parametrize("remat, mesh, setting, chunks", [
    ("full", {"fsdp": 4}, "auto", 2),          # 256 MiB per MLP-wide value: 2 chunks of 128 MiB
    ("full", {"fsdp": 4}, 1, 1),               # chunks off
    ("full", {"fsdp": 4}, 4, 4),               # a count
    ("full", {"fsdp": 2, "context": 2}, "auto", 2),   # tokens split over context alike
    ("full", {"fsdp": 16}, "auto", 1),         # 64 MiB per value: none
    ("full", {"fsdp": 2, "tensor": 2}, "auto", 2),    # half the columns each: 256 MiB, two
    ("minimal", {"fsdp": 4}, "auto", 1),       # a policy that keeps the MLP's values: none
])
def test_the_layer_backward_counts_one_chunk_of_the_mlp_where_it_is_chunked(remat, mesh, setting,
                                                                           chunks):
    """The 1.14B model's MLP (8192 wide) at 32 x 2048 tokens, as the trainer compiles it for a
    TPU (`tpujob_plan.mlp_chunks`), through the request the operator and `tpujob plan` use: the
    layer's backward holds one chunk of the MLP's three MLP-wide values per token."""
    from tpujob_plan.memory import LAYER_BACKWARD_LAYERS, MLP_CHUNKED_SHARE, MemoryRequest
    from tpujob_plan.model_shape import ModelShape

    shape = ModelShape(vocab_size=32000, d_model=2048, n_layers=16, n_heads=16, n_kv_heads=8,
                       head_dim=128, mlp_dim=8192)

    def estimate(mlp_chunks):
        return MemoryRequest(shape=shape, global_batch=32, seq_len=2048, remat=remat,
                             mlp_chunks=mlp_chunks).estimate(mesh, None, "v6e")

    got, plain = estimate(setting), estimate(1)
    tokens = 32 * 2048 / (mesh.get("fsdp", 1) * mesh.get("context", 1))
    columns = 8192 / mesh.get("tensor", 1)
    mlp_part = LAYER_BACKWARD_LAYERS[remat] * tokens * 3 * columns * 2   # bf16, allowance 1 (v6e)
    # The workspace is the layer's backward beyond the logits' moment (full remat, this model);
    # chunked, it also holds the input's gradient in float32 (the chunks' sum).
    dx_sum = tokens * 2048 * 4 if chunks > 1 else 0
    assert plain.breakdown["workspace"] - got.breakdown["workspace"] == pytest.approx(
        mlp_part * MLP_CHUNKED_SHARE * (1 - 1 / chunks) - dx_sum)
    assert got.per_device_bytes <= plain.per_device_bytes


def test_where_data_splits_the_batch_the_layer_backward_holds_the_logits_gradient():
    """Two v6e-8 slices (data=2) against one (data=1) at the same tokens per device, the logits
    and the MLP unchunked on both: the layer's backward also holds one copy of the logits (their
    gradient) where `data` splits the batch, as the compiler's report for two slices shows."""
    from tpujob_plan.memory import MemoryRequest
    from tpujob_plan.model_shape import ModelShape

    shape = ModelShape(vocab_size=32000, d_model=2048, n_layers=16, n_heads=16, n_kv_heads=8,
                       head_dim=128, mlp_dim=8192)

    def estimate(batch, mesh):
        return MemoryRequest(shape=shape, global_batch=batch, seq_len=2048, remat="full",
                             vocab_chunks=1, mlp_chunks=1).estimate(mesh, None, "v6e")

    one, two = estimate(32, {"fsdp": 8}), estimate(64, {"fsdp": 8, "data": 2})
    assert one.tokens_per_device == two.tokens_per_device == 8192
    assert one.breakdown["logits"] == two.breakdown["logits"]
    assert two.breakdown["workspace"] - one.breakdown["workspace"] == pytest.approx(
        one.breakdown["logits"] / 1.75)


def test_where_data_splits_the_batch_auto_counts_the_mlp_unchunked():
    """The estimate takes the trainer's auto MLP chunks: none where `data` splits the batch (two
    v6e-8 slices), two on one slice at the same tokens per device."""
    from tpujob_plan.memory import MemoryRequest
    from tpujob_plan.model_shape import ModelShape

    shape = ModelShape(vocab_size=32000, d_model=2048, n_layers=16, n_heads=16, n_kv_heads=8,
                       head_dim=128, mlp_dim=8192)

    def workspace(batch, mesh, chunks):
        return MemoryRequest(shape=shape, global_batch=batch, seq_len=2048, remat="full",
                             mlp_chunks=chunks).estimate(mesh, None, "v6e").breakdown["workspace"]

    two_slices = {"fsdp": 8, "data": 2}
    assert workspace(64, two_slices, "auto") == workspace(64, two_slices, 1)
    assert workspace(64, two_slices, "auto") > workspace(64, two_slices, 2)
    assert workspace(32, {"fsdp": 8}, "auto") == workspace(32, {"fsdp": 8}, 2)


# The 1.14B model (decoder-1b of benchmarks/tpu_compile.py), remat full, compiled by libtpu
# 0.0.42.1 for these slices with the MLP chunks and the optimizer's sharding as given
# (benchmarks/results/tpu_compile.md; the rows on two slices with the optimizer split as the
# weights, at 1, 2 and 4 MLP chunks, measured before `mesh.optimizer_sharding`, and the split
# at 2 chunks, before auto stopped chunking where `data` > 1, listed there too): GiB per device.
COMPILED_1B = [
    ("v5p", {"fsdp": 4}, 32, 2048, "auto", "auto", 7.83),
    ("v6e", {"fsdp": 8}, 32, 2048, "auto", "auto", 4.10),
    ("v6e", {"fsdp": 8}, 8, 8192, "auto", "auto", 4.11),
    ("v6e", {"fsdp": 8, "data": 2}, 64, 2048, "auto", "auto", 4.16),
    ("v6e", {"fsdp": 8, "data": 2}, 64, 2048, 2, "auto", 3.94),
    ("v6e", {"fsdp": 8, "data": 2}, 64, 2048, 2, "as_params", 4.67),
    ("v6e", {"fsdp": 8, "data": 2}, 64, 2048, 4, "as_params", 4.49),
    ("v6e", {"fsdp": 8, "data": 2}, 64, 2048, 1, "as_params", 4.82),
    # docs/planning.md's `tpujob plan v6e-8 tpu7x-64 ... --compile` example, the tpu7x-64 slice.
    ("tpu7x", {"fsdp": 64}, 64, 2048, "auto", "auto", 1.32),
]


@pytest.mark.parametrize("generation, mesh, batch, seq, mlp_chunks, optimizer_sharding, "
                         "compiled_gib", COMPILED_1B)
def test_with_mlp_chunks_the_estimate_stays_above_the_compiler_within_10_percent(
        generation, mesh, batch, seq, mlp_chunks, optimizer_sharding, compiled_gib):
    from tpujob_plan.memory import GIB, MemoryRequest
    from tpujob_plan.model_shape import ModelShape

    shape = ModelShape(vocab_size=32000, d_model=2048, n_layers=16, n_heads=16, n_kv_heads=8,
                       head_dim=128, mlp_dim=8192)
    est = MemoryRequest(shape=shape, global_batch=batch, seq_len=seq, remat="full",
                        mlp_chunks=mlp_chunks,
                        optimizer_sharding=optimizer_sharding).estimate(mesh, None, generation)
    assert compiled_gib <= est.per_device_bytes / GIB <= 1.10 * compiled_gib
