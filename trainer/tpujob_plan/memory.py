"""Per-device memory (HBM) estimate of training a decoder LM, before anything is launched.

What is counted, per device, for a mesh where model state is sharded over every axis but
`data` (fsdp, context, tensor, expert) and tokens over data x fsdp x expert (batch) and context
(sequence), as MaxText's logical axis rules do:

- params, gradients (param dtype), optimizer state (AdamW: 2 fp32 moments; Muon: 1 momentum for
  hidden matrices, AdamW moments for the rest), a gradient accumulator when accumulating;
- saved activations per layer under the remat policy: `none` keeps every intermediate,
  `minimal` keeps the matmul outputs, `full` keeps only each layer's input;
- workspace: one layer recomputed in the backward pass plus one layer's gathered weights;
- logits: compute-dtype logits and an fp32 copy for the loss (no vocabulary tiling).

It is an estimate for a verdict (fits / does not fit, and where the bytes go), not a promise
to the byte: XLA's temporary buffers and fragmentation come on top, which is why only
USABLE_HBM_FRACTION of a device's HBM counts as usable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field

from tpujob_plan.model_shape import ModelShape

REMAT_POLICIES: tuple[str, ...] = ("none", "minimal", "full")  # least recomputation first
OPTIMIZERS: tuple[str, ...] = ("adamw", "muon")
USABLE_HBM_FRACTION = 0.95
GIB = 1024**3


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per device, by what holds them, and the verdict against the device's HBM."""

    breakdown: dict[str, float]
    remat: str
    tokens_per_device: float
    hbm_bytes: float | None = None
    notes: list[str] = dataclass_field(default_factory=list)

    @property
    def per_device_bytes(self) -> float:
        return sum(self.breakdown.values())

    @property
    def usable_bytes(self) -> float | None:
        return None if self.hbm_bytes is None else self.hbm_bytes * USABLE_HBM_FRACTION

    @property
    def fits(self) -> bool | None:
        usable = self.usable_bytes
        return None if usable is None else self.per_device_bytes <= usable

    def to_dict(self) -> dict:
        gib = lambda b: None if b is None else round(b / GIB, 3)  # noqa: E731
        return {
            "fits": self.fits,
            "perDeviceGiB": gib(self.per_device_bytes),
            "usableGiB": gib(self.usable_bytes),
            "hbmGiB": gib(self.hbm_bytes),
            "remat": self.remat,
            "tokensPerDevice": self.tokens_per_device,
            "breakdown": {k: gib(v) for k, v in self.breakdown.items()},
            "notes": list(self.notes),
        }


def _axis(mesh: Mapping[str, int], name: str) -> int:
    return int(mesh.get(name, 1))


def _per_token_layer_elements(shape: ModelShape, layer: int, remat: str,
                              capacity_factor: float, attention: str, seq_len: int) -> float:
    """Activation elements one token keeps for one layer's backward pass."""
    d, q, kv = shape.d_model, shape.n_heads * shape.head_dim, shape.n_kv_heads * shape.head_dim
    if shape.is_moe_layer(layer):
        per_expert = shape.moe_mlp_dim or shape.mlp_dim
        hidden = (shape.experts_per_token * capacity_factor + shape.num_shared_experts) * per_expert
        router = 2 * shape.num_experts
    else:
        hidden, router = shape.mlp_dim, 0
    scores = shape.n_heads * seq_len if attention == "dot_product" else 0
    if remat == "full":
        return d
    if remat == "minimal":
        return 3 * d + 2 * q + 2 * kv + 2 * hidden + router
    return 6 * d + 3 * q + 3 * kv + 4 * hidden + router + scores


def _optimizer_bytes(shape: ModelShape, optimizer: str) -> float:
    params = shape.total_params
    if optimizer == "adamw":
        return 2 * 4 * params
    # Muon keeps one momentum for the hidden matrices; embeddings, output layer and norms use
    # AdamW's two moments.
    others = shape.embedding_params + shape.norm_params
    return 4 * (params - others) + 2 * 4 * others


def estimate_memory(shape: ModelShape, *, global_batch: int, seq_len: int,
                    mesh: Mapping[str, int], remat: str = "full", param_bytes: int = 4,
                    compute_bytes: int = 2, optimizer: str = "adamw", grad_accum: int = 1,
                    attention: str = "flash", capacity_factor: float = 1.25,
                    hbm_bytes: float | None = None) -> MemoryEstimate:
    """Estimate the bytes one device holds at the peak of a training step."""
    if remat not in REMAT_POLICIES:
        raise ValueError(f"remat must be one of {', '.join(REMAT_POLICIES)}, got {remat!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    data, fsdp, context = _axis(mesh, "data"), _axis(mesh, "fsdp"), _axis(mesh, "context")
    tensor, expert = _axis(mesh, "tensor"), _axis(mesh, "expert")
    state_shards = fsdp * context * tensor * expert
    batch_shards = data * fsdp * expert
    notes: list[str] = []
    micro_batch = global_batch / max(grad_accum, 1)
    if micro_batch < batch_shards or micro_batch % batch_shards:
        notes.append(f"a (micro)batch of {micro_batch:g} sequences does not split evenly over "
                     f"the {batch_shards} batch shards (data x fsdp x expert)")
    if seq_len % context:
        notes.append(f"seq_len {seq_len} does not split evenly over context={context}")
    tokens = micro_batch * seq_len / (batch_shards * context)

    params = shape.total_params
    breakdown = {
        "params": params * param_bytes / state_shards,
        "gradients": params * param_bytes / state_shards,
        "optimizer": _optimizer_bytes(shape, optimizer) / state_shards,
    }
    if grad_accum > 1:
        breakdown["gradientAccumulator"] = params * 4 / state_shards

    def layers_elements(policy: str) -> list[float]:
        return [_per_token_layer_elements(shape, i, policy, capacity_factor, attention, seq_len)
                for i in range(shape.n_layers)]

    act_scale = tokens * compute_bytes / tensor
    breakdown["activations"] = sum(layers_elements(remat)) * act_scale
    recompute = max(layers_elements("none")) * act_scale if remat != "none" else 0.0
    largest_layer = shape.attention_params + max(
        shape.dense_mlp_params if shape.n_dense_layers else 0,
        shape.moe_mlp_params / expert if shape.n_moe_layers else 0)
    breakdown["workspace"] = recompute + largest_layer * compute_bytes / tensor
    breakdown["logits"] = tokens * shape.vocab_size * (compute_bytes + 4) / tensor
    return MemoryEstimate(breakdown=breakdown, remat=remat, tokens_per_device=tokens,
                          hbm_bytes=hbm_bytes, notes=notes)


DTYPE_BYTES = {"float32": 4, "bfloat16": 2}


@dataclass(frozen=True)
class MemoryRequest:
    """Everything the estimate of one training step needs, built in one place from a trainer
    config (`TrainerConfig.memory_request()`): the trainer resolving `remat: auto`, the operator's
    admission check and `tpujob plan --model` all estimate from it."""

    shape: ModelShape
    global_batch: int
    seq_len: int
    grad_accum: int = 1
    optimizer: str = "adamw"
    param_dtype: str = "float32"
    dtype: str = "bfloat16"
    remat: str = "auto"
    capacity_factor: float = 1.25

    def _kwargs(self, mesh: Mapping[str, int], hbm_bytes: float | None) -> dict:
        return dict(global_batch=self.global_batch, seq_len=self.seq_len, mesh=dict(mesh),
                    optimizer=self.optimizer, grad_accum=self.grad_accum,
                    param_bytes=DTYPE_BYTES[self.param_dtype], compute_bytes=DTYPE_BYTES[self.dtype],
                    capacity_factor=self.capacity_factor, hbm_bytes=hbm_bytes)

    def resolved_remat(self, mesh: Mapping[str, int], hbm_bytes: float | None) -> str:
        """The remat policy: as asked, or for `auto` the least recomputation that fits
        (`none` where the device's memory is unknown)."""
        if self.remat != "auto":
            return self.remat
        if hbm_bytes is None:
            return "none"
        return choose_remat(self.shape, **self._kwargs(mesh, hbm_bytes))

    def estimate(self, mesh: Mapping[str, int], hbm_bytes: float | None) -> MemoryEstimate:
        return estimate_memory(self.shape, remat=self.resolved_remat(mesh, hbm_bytes),
                               **self._kwargs(mesh, hbm_bytes))


def choose_remat(shape: ModelShape, *, global_batch: int, seq_len: int,
                 mesh: Mapping[str, int], hbm_bytes: float, **kwargs) -> str:
    """The least recomputation that fits in `hbm_bytes` per device ("full" if nothing fits)."""
    for policy in REMAT_POLICIES:
        estimate = estimate_memory(shape, global_batch=global_batch, seq_len=seq_len, mesh=mesh,
                                   remat=policy, hbm_bytes=hbm_bytes, **kwargs)
        if estimate.fits:
            return policy
    return REMAT_POLICIES[-1]
