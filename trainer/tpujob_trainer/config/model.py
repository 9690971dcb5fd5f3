"""The model section of the trainer config: a decoder-only LM, dense or mixture-of-experts."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from tpujob_plan.model_shape import ModelShape

Remat = Literal["auto", "none", "minimal", "full"]
AttentionKernel = Literal["auto", "xla", "splash", "cudnn"]
# The platform a named attention kernel runs on (auto and xla run on any).
KERNEL_PLATFORM = {"splash": "tpu", "cudnn": "gpu"}
# What cuDNN's fused attention takes (cuDNN takes heads up to 256 on Hopper, 128 everywhere).
CUDNN_DTYPES = ("bfloat16", "float16")
CUDNN_MAX_HEAD_DIM = 128


def cudnn_problem(dtype: str, head_dim: int) -> str | None:
    """Why cuDNN's fused attention cannot take activations of `dtype` and heads of `head_dim`,
    or None where it can."""
    if dtype not in CUDNN_DTYPES:
        return f"it takes bfloat16 or float16 activations, not {dtype}"
    if head_dim > CUDNN_MAX_HEAD_DIM or head_dim % 8:
        return (f"it takes a model.head_dim of at most {CUDNN_MAX_HEAD_DIM}, a multiple of 8, "
                f"not {head_dim}")
    return None


def attention_platform_problem(kernel: str, platform: str) -> str | None:
    """Why `model.attention: kernel` cannot run on `platform` (tpu, gpu, cpu), or None."""
    need = KERNEL_PLATFORM.get(kernel)
    if need is None or need == platform:
        return None
    return (f"model.attention {kernel} runs on a {need.upper()} only, and this step runs on a "
            f"{platform.upper()}: use auto (it picks {kernel} on a {need.upper()}) or xla")
# A count or "auto"; in the CRD an int-or-string (Kubernetes' only union of types).
ChunkCount = Annotated[int | Literal["auto"], WithJsonSchema({
    "x-kubernetes-int-or-string": True,
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": "^auto$",
})]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MoEConfig(_Frozen):
    """Mixture-of-experts layers. `num_experts: 0` keeps every layer dense."""

    num_experts: int = Field(0, ge=0, description="Routed experts per MoE layer; 0 = dense model.")
    experts_per_token: int = Field(2, ge=1, description="Top-k: routed experts each token uses.")
    num_shared_experts: int = Field(0, ge=0, description="Experts every token passes through.")
    mlp_dim: int | None = Field(None, ge=1, description="Hidden size of one expert; default: model.mlp_dim.")
    every: int = Field(1, ge=1, description="Every k-th layer (after the first dense ones) is MoE.")
    first_dense_layers: int = Field(0, ge=0, description="Leading layers kept dense.")
    capacity_factor: float = Field(1.25, gt=0, description="Expert capacity as a multiple of the even share of tokens (routing capacity).")
    routing: Literal["capacity", "dropless"] = Field(
        "capacity", description="capacity: each expert takes at most its capacity of a sequence's tokens, by one-hot "
        "dispatch and combine (the experts split over the expert mesh axis); dropless: every token reaches its "
        "experts, by grouped matmuls over the rows routed to each expert (the experts gathered whole on each "
        "device; on a TPU the megablox kernel, as MaxText).")
    load_balance_weight: float = Field(0.01, ge=0, description="Weight of the load-balancing loss.")

    @model_validator(mode="after")
    def _top_k_fits(self) -> MoEConfig:
        if self.num_experts and self.experts_per_token > self.num_experts:
            raise ValueError(
                f"moe.experts_per_token ({self.experts_per_token}) must be <= moe.num_experts "
                f"({self.num_experts})")
        return self


class ModelConfig(_Frozen):
    """A decoder-only LM: RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, optional MoE."""

    vocab_size: int = Field(512, ge=1, description="Vocabulary size; at least 257 with the built-in byte tokenizer (256 bytes + EOS).")
    d_model: int = Field(256, ge=1, description="Embedding (model) width.")
    n_layers: int = Field(4, ge=1, description="Decoder layers.")
    n_heads: int = Field(4, ge=1, description="Query heads.")
    n_kv_heads: int = Field(4, ge=1, description="Key/value heads (grouped-query attention); divides n_heads.")
    head_dim: int = Field(64, ge=1, description="Width of one attention head.")
    mlp_dim: int = Field(1024, ge=1, description="SwiGLU hidden size of a dense layer.")
    tie_embeddings: bool = Field(False, description="Share the input embedding with the output layer.")
    rope_theta: float = Field(10000.0, gt=0, description="RoPE base frequency.")
    norm_eps: float = Field(1e-6, gt=0, description="RMSNorm epsilon.")
    moe: MoEConfig = Field(default_factory=MoEConfig, description="Mixture-of-experts layers.")
    remat: Remat = Field("auto", description="Rematerialization: none, minimal, full, or auto "
                         "(the least recomputation that fits device memory).")
    scan_layers: bool = Field(True, description="Apply consecutive layers of the same kind by one "
                              "scan over their parameters (one compiled layer; faster to compile "
                              "and to run) instead of one by one.")
    attention: AttentionKernel = Field(
        "auto", description="The causal attention kernel: auto (splash on a TPU, cuDNN's fused "
        "attention on a GPU for bfloat16 or float16 activations with heads of at most 128, "
        "else XLA's), xla (XLA's dot_product_attention by causal query chunks), splash (TPU "
        "only) or cudnn (GPU only).")
    vocab_chunks: ChunkCount = Field(
        "auto", description="The output layer and the loss a chunk of the vocabulary at a time, so "
        "that one device holds one chunk's logits, not all of them (for one more output-layer "
        "matmul): a count (1: off), or auto: on a TPU, once one device's logits pass 256 MiB, "
        "at least 2 chunks of at most 512 MiB each (not on v5p, nor where the batch is split "
        "over data); elsewhere 1.")
    mlp_chunks: ChunkCount = Field(
        "auto", description="A dense layer's MLP backward a chunk of its hidden width at a time, "
        "so that the layer's backward holds one chunk's MLP-wide values, not all of them (no "
        "extra FLOPs under remat full; the input read once more per chunk): a count (1: off), or "
        "auto: on a TPU under remat full, once one device's MLP-wide value passes 64 MiB, at "
        "least 2 chunks of at most 128 MiB each (not where the batch is split over data); "
        "elsewhere 1.")
    dtype: Literal["bfloat16", "float32"] = Field("bfloat16", description="Activation (compute) dtype.")
    param_dtype: Literal["float32", "bfloat16"] = Field("float32", description="Parameter dtype.")

    @model_validator(mode="after")
    def _heads_group(self) -> ModelConfig:
        if self.vocab_chunks != "auto" and not 1 <= self.vocab_chunks <= self.vocab_size:
            raise ValueError(
                f"model.vocab_chunks ({self.vocab_chunks}) must be auto or a count from 1 to "
                f"model.vocab_size ({self.vocab_size})")
        if self.mlp_chunks != "auto" and self.mlp_chunks < 1:
            raise ValueError(f"model.mlp_chunks ({self.mlp_chunks}) must be auto or a count of "
                             "at least 1")
        why = cudnn_problem(self.dtype, self.head_dim) if self.attention == "cudnn" else None
        if why:
            raise ValueError(f"model.attention cudnn cannot run this model: {why}; use auto or xla")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"model.n_kv_heads ({self.n_kv_heads}) must divide model.n_heads ({self.n_heads})")
        if self.moe.first_dense_layers > self.n_layers:
            raise ValueError(
                f"model.moe.first_dense_layers ({self.moe.first_dense_layers}) must be <= "
                f"model.n_layers ({self.n_layers})")
        return self

    def to_shape(self) -> ModelShape:
        """The dimensions the planner counts parameters, FLOPs and memory from."""
        return ModelShape(
            vocab_size=self.vocab_size, d_model=self.d_model, n_layers=self.n_layers,
            n_heads=self.n_heads, n_kv_heads=self.n_kv_heads, head_dim=self.head_dim,
            mlp_dim=self.mlp_dim, tie_embeddings=self.tie_embeddings,
            num_experts=self.moe.num_experts,
            experts_per_token=self.moe.experts_per_token if self.moe.num_experts else 0,
            num_shared_experts=self.moe.num_shared_experts,
            moe_mlp_dim=self.moe.mlp_dim or self.mlp_dim, moe_every=self.moe.every,
            first_dense_layers=self.moe.first_dense_layers)
