"""Training FLOPs per step, counted the way MaxText counts them, so that TFLOP/s and MFU
compare with MaxText's figures: 3x the forward matmuls (forward + backward), causal attention
counted at half the full score matrix, the output embedding included, the input lookup not."""

from __future__ import annotations

from tpujob_plan.model_shape import ModelShape


def train_flops_per_step(shape: ModelShape, global_batch: int, seq_len: int) -> float:
    """FLOPs of one optimizer step over `global_batch` sequences of `seq_len` tokens."""
    tokens = global_batch * seq_len
    d, hd = shape.d_model, shape.head_dim
    qkv = 2 * tokens * d * (shape.n_heads + 2 * shape.n_kv_heads) * hd
    projection = 2 * tokens * d * shape.n_heads * hd
    dense_ffn = 2 * tokens * 3 * d * shape.mlp_dim  # SwiGLU: gate, up, down
    moe_ffn = 0.0
    if shape.is_moe:
        expert_ffn = 2 * tokens * 3 * d * (shape.moe_mlp_dim or shape.mlp_dim)
        router = 2 * tokens * d * shape.num_experts
        moe_ffn = router + (shape.experts_per_token + shape.num_shared_experts) * expert_ffn
    layers = shape.n_layers * (qkv + projection)
    layers += shape.n_dense_layers * dense_ffn + shape.n_moe_layers * moe_ffn
    embedding = 2 * tokens * d * shape.vocab_size
    causal_attention = 4 * global_batch * seq_len**2 * shape.n_heads * hd / 2
    return 3 * (layers + embedding) + 3 * causal_attention * shape.n_layers


def flops_per_token(shape: ModelShape, seq_len: int) -> float:
    return train_flops_per_step(shape, 1, seq_len) / seq_len
