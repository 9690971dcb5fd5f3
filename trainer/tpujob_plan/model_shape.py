"""The shape of a decoder-only language model, as far as counting parameters, FLOPs and memory
needs it. The trainer's `ModelConfig.to_shape()` produces one; presets name well-known sizes."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ModelShape:
    """Dimensions of a decoder-only LM (dense, or mixture-of-experts when num_experts > 0)."""

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    mlp_dim: int
    tie_embeddings: bool = False
    num_experts: int = 0
    experts_per_token: int = 0
    num_shared_experts: int = 0
    moe_mlp_dim: int = 0
    moe_every: int = 1
    first_dense_layers: int = 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def is_moe_layer(self, layer: int) -> bool:
        """Layer `layer` (0-based) is a MoE layer: after the first dense ones, every `moe_every`."""
        if not self.is_moe or layer < self.first_dense_layers:
            return False
        return (layer - self.first_dense_layers) % self.moe_every == 0

    @property
    def n_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.n_layers))

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers

    # Parameter counts. ------------------------------------------------------------------------
    @property
    def attention_params(self) -> int:
        """Per layer: Q, K, V and output projections."""
        d, hd = self.d_model, self.head_dim
        return d * (self.n_heads + 2 * self.n_kv_heads) * hd + self.n_heads * hd * d

    @property
    def dense_mlp_params(self) -> int:
        """Per dense layer: SwiGLU gate, up and down projections."""
        return 3 * self.d_model * self.mlp_dim

    @property
    def expert_params(self) -> int:
        """One routed or shared expert (SwiGLU)."""
        return 3 * self.d_model * (self.moe_mlp_dim or self.mlp_dim)

    @property
    def moe_mlp_params(self) -> int:
        """Per MoE layer: router, routed experts and shared experts."""
        experts = self.num_experts + self.num_shared_experts
        return self.d_model * self.num_experts + experts * self.expert_params

    @property
    def embedding_params(self) -> int:
        untied_output = 0 if self.tie_embeddings else self.vocab_size * self.d_model
        return self.vocab_size * self.d_model + untied_output

    @property
    def norm_params(self) -> int:
        return (2 * self.n_layers + 1) * self.d_model

    @property
    def total_params(self) -> int:
        layers = self.n_layers * self.attention_params
        layers += self.n_dense_layers * self.dense_mlp_params
        layers += self.n_moe_layers * self.moe_mlp_params
        return layers + self.embedding_params + self.norm_params

    @property
    def expert_weight_params(self) -> int:
        """Parameters of the routed experts (sharded over the expert axis)."""
        return self.n_moe_layers * self.num_experts * self.expert_params

    @property
    def active_params(self) -> int:
        """Parameters one token passes through (routed experts counted top-k times)."""
        if not self.is_moe:
            return self.total_params
        routed = self.n_moe_layers * self.num_experts * self.expert_params
        active_routed = self.n_moe_layers * self.experts_per_token * self.expert_params
        return self.total_params - routed + active_routed


def _llama(vocab: int, d: int, layers: int, heads: int, kv: int, mlp: int) -> ModelShape:
    return ModelShape(vocab_size=vocab, d_model=d, n_layers=layers, n_heads=heads,
                      n_kv_heads=kv, head_dim=d // heads, mlp_dim=mlp)


# Well-known shapes, for `tpujob plan --model NAME`. Dimensions from the models' published configs.
PRESETS: dict[str, ModelShape] = {
    "tiny": ModelShape(vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
                       head_dim=16, mlp_dim=256),
    "anchor-12m": _llama(8192, 256, 8, 4, 4, 1024),
    "llama2-7b": _llama(32000, 4096, 32, 32, 32, 11008),
    "llama3-8b": _llama(128256, 4096, 32, 32, 8, 14336),
    "llama3-70b": _llama(128256, 8192, 80, 64, 8, 28672),
    "llama3-405b": _llama(128256, 16384, 126, 128, 8, 53248),
    "mixtral-8x7b": replace(_llama(32000, 4096, 32, 32, 8, 14336), num_experts=8,
                            experts_per_token=2, moe_mlp_dim=14336),
    "mixtral-8x22b": replace(_llama(32768, 6144, 56, 48, 8, 16384), num_experts=8,
                             experts_per_token=2, moe_mlp_dim=16384),
    "qwen3-30b-a3b": ModelShape(vocab_size=151936, d_model=2048, n_layers=48, n_heads=32,
                                n_kv_heads=4, head_dim=128, mlp_dim=6144, num_experts=128,
                                experts_per_token=8, moe_mlp_dim=768),
}
