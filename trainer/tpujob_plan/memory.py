"""Per-device memory (HBM) estimate of training a decoder LM, before anything is launched.

Model state is sharded over every mesh axis but `data` (fsdp, context, tensor, expert) and tokens
over data x fsdp x expert (batch) and context (sequence), as MaxText's logical axis rules do. The
terms are what the TPU compiler's program for the trainer's step holds at its peak, read from
XLA's memory-usage report of the compiled step (`benchmarks/hbm_estimate.py` keeps the compiled
figures and the largest buffers in benchmarks/results/hbm_compiled.json):

- `params`, `optimizer` (AdamW: 2 fp32 moments; Muon: 1 momentum for hidden matrices, AdamW
  moments for the rest), and a float32 `gradientAccumulator` when accumulating; `castWeights`:
  the layers' weights cast to a narrower compute dtype once, before the layer scan.
- `activations`: what each layer saves for its backward pass under the remat policy
  (`_saved_bytes_per_token`): `full` its input; `minimal` the outputs of the matmuls without a
  batch dimension; `none` every residual the backward reads, the RMSNorms' float32 values too.
- `logits` and `outputLayer`: in the output layer's backward the step holds the logits and their
  gradient, both in the compute dtype (the loss's float32 values are computed in fusions, never
  stored whole: `step.cross_entropy`), and the output layer's weights gathered for the matmul and
  their gradient before it is reduced. Where the vocabulary is taken in chunks
  (`tpujob_plan.vocab_chunks`: one device's logits over 256 MiB), one chunk's logits and their
  gradient.
- `workspace`: the layers' backward buffers, in units of one layer's matmul values per token
  (`_layer_values_per_token`). The peak is the larger of two moments, counted beyond the logits'
  terms: the logits' (BESIDE_LOGITS_LAYERS units held beside them, many under `none` and
  `minimal`, few under `full`) and a layer's backward pass (LAYER_BACKWARD_LAYERS units under
  `full`, none under the others: its recomputation, the gradients of its values, the attention
  kernel's float32 accumulators; beside them its gathered weights, the scan's stacked gradients
  of every layer's cast weights, as large as `castWeights`, and the parameters' gradients in
  the param dtype that those become). Where a dense MLP's backward is taken by chunks of its
  hidden width (`tpujob_plan.mlp_chunks`), a unit counts MLP_CHUNKED_SHARE of its MLP columns
  divided by the chunks (the compiled saving is about half of dividing them all), and the
  layer's backward holds the input's gradient in float32 beside them (the chunks' sum). Under
  `none` and `minimal` the weights and those gradients set the least the workspace holds: a
  large model on few tokens, where the gradients are the peak.
- `embeddingGradient` (tpu7x): its compiler holds the embedding table's gradient unsharded in
  float32 (EMBEDDING_GRADIENT_COPIES), which the other generations shard.
- GENERATION_ALLOWANCE scales the token terms and LOGITS_COPIES_FULL / _OTHER count the logits
  per generation: the compilers for v5p, v6e and tpu7x lay out the same program differently
  (v5p writes the logits' gradient over them under remat full); where the generation is not
  known, the largest of each.

The counts are fitted to the compiler over the benchmark's grid of small (4-layer) models and
the larger rows of benchmarks/results/tpu_compile.md together, erring above:
benchmarks/results/hbm_estimate.md gives each config's error and the ones still more than 10%
off. It is an estimate for a verdict (fits / does not fit, and where the bytes go), not a
promise to the byte; only USABLE_HBM_FRACTION of a device's HBM counts as usable, and `tpujob
plan --compile` gives the compiler's own figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field

from tpujob_plan.mlp_chunks import mlp_chunks
from tpujob_plan.model_shape import ModelShape
from tpujob_plan.vocab_chunks import chunk_bounds, vocab_chunks

REMAT_POLICIES: tuple[str, ...] = ("none", "minimal", "full")  # least recomputation first
OPTIMIZERS: tuple[str, ...] = ("adamw", "muon")
USABLE_HBM_FRACTION = 0.95
GIB = 1024**3
# The logits and their gradient (compute dtype) in the output layer's backward, in copies of one
# device's logits, per generation, under remat full and under the other policies. Fitted: the
# compiler reuses buffers (v5p's writes the gradient over the logits under full).
LOGITS_COPIES_FULL = {"v5p": 1.15, "v6e": 1.75, "tpu7x": 1.9}
LOGITS_COPIES_OTHER = {"v5p": 2.1, "v6e": 2.25, "tpu7x": 2.0}
# The output layer's weights gathered for the matmul, and their gradient before it is reduced.
OUTPUT_LAYER_COPIES = 2
# The layers' backward buffers, in units of one layer's matmul values per token: held beside
# the logits (every policy; few under full, whose peak is mostly a layer's backward), or in a
# layer's backward pass (remat full: recomputed values, their gradients, the attention kernel's
# float32 accumulators; beside them the stacked gradients of the cast weights, as large as
# `castWeights`, and the parameters' gradients they become, counted apart).
BESIDE_LOGITS_LAYERS = {"none": 3.4, "minimal": 2.35, "full": 0.5}
LAYER_BACKWARD_LAYERS = {"none": 0.0, "minimal": 0.0, "full": 2.05}
# Where a dense MLP's backward is taken by chunks of its hidden width, the share of its columns
# in the backward's units that the chunks divide: the compiled saving is about half of what
# dividing them all would give (the 1.14B model, 2 chunks: v5p-8 -0.54 GiB, v6e-8 -0.27, two
# v6e-8 slices -0.15; 4 chunks there -0.33), so the estimate stays above the compiler.
MLP_CHUNKED_SHARE = 0.5
# The token terms per generation, against v6e's compiler (fitted over the benchmark's grid and
# its larger rows).
GENERATION_ALLOWANCE = {"v5p": 0.9, "v6e": 1.0, "tpu7x": 0.95}
# tpu7x's compiler holds the embedding's gradient unsharded in float32 (its reports show it),
# in copies of the whole table; the other generations shard it.
EMBEDDING_GRADIENT_COPIES = {"v5p": 0.0, "v6e": 0.0, "tpu7x": 1.85}
FLOAT32 = 4
# Remat none: the RMSNorms' float32 values a layer keeps per token, in d_model units (fitted:
# counting both norms' input and normalized values, four, was above the compiler on every row).
NONE_FLOAT32_VALUES = 2


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


def _per_generation(table: Mapping[str, float], generation: str | None) -> float:
    """The generation's entry; where it is not known, the largest."""
    return table.get(generation, max(table.values()))


def _axis(mesh: Mapping[str, int], name: str) -> int:
    return int(mesh.get(name, 1))


def _saved_bytes_per_token(shape: ModelShape, layer: int, remat: str, *, compute_bytes: int,
                           tensor: int, capacity_factor: float, seq_len: int,
                           dropless: bool = False) -> float:
    """Bytes one token's activations of one layer keep for the backward pass. The model dimension
    is replicated over `tensor`, heads and MLP columns split over it."""
    d, cb = shape.d_model, compute_bytes
    q = shape.n_heads * shape.head_dim / tensor
    kv = shape.n_kv_heads * shape.head_dim / tensor
    if remat == "full":
        return d * cb                                       # the layer's input
    moe = shape.is_moe_layer(layer)
    if remat == "minimal":
        # q, k, v and the attention's and the MLP's output projections; a dense MLP's stacked
        # gate/up; a MoE layer's router logits (float32). The expert matmuls carry the expert
        # axis as a batch dimension, which `dots_with_no_batch_dims_saveable` does not save.
        saved = (q + 2 * kv + 2 * d) * cb
        if moe:
            return saved + shape.num_experts * FLOAT32
        return saved + 2 * shape.mlp_dim / tensor * cb
    # none: q, k, v and the attention's output twice (the kernel's layout and the layer's), the
    # two RMSNorms' outputs, and NONE_FLOAT32_VALUES of their float32 values of d_model.
    saved = (3 * q + 2 * kv + 2 * d) * cb + NONE_FLOAT32_VALUES * d * FLOAT32
    if not moe:
        return saved + 3 * shape.mlp_dim / tensor * cb      # gate/up stacked, SwiGLU output
    # MoE: router logits and probabilities (float32); the dispatch and combine one-hots (k x
    # capacity_factor x seq_len slots per token each) and the per-choice one-hots in float32 (k
    # times as many); the routed copies' input and output, and six MLP-wide values each (gate/up,
    # its two halves, the SwiGLU's activation and product: autodiff keeps them all); shared
    # experts as a dense MLP. Dropless routing: no one-hots, k routed rows per token.
    per_expert = (shape.moe_mlp_dim or shape.mlp_dim) / tensor
    k = shape.experts_per_token
    routed = k * (1.0 if dropless else capacity_factor)
    one_hots = 0.0 if dropless else k * routed * seq_len * FLOAT32 + 2 * routed * seq_len * cb
    return (saved + 2 * shape.num_experts * FLOAT32 + one_hots
            + (routed * (2 * d + 6 * per_expert)
               + 3 * shape.num_shared_experts * per_expert) * cb)


def _layer_values_per_token(shape: ModelShape, layer: int, *, compute_bytes: int, tensor: int,
                            capacity_factor: float, mlp_chunks: int) -> float:
    """Bytes of one token's values in one layer's matmuls (compute dtype): q, k, v, the
    attention's output twice, the two norms' outputs, the MLP's gate/up and SwiGLU output (a MoE
    layer: of its routed copies and shared experts; a dense MLP whose backward is taken by
    `mlp_chunks` chunks of its width: MLP_CHUNKED_SHARE of its columns divided by the chunks).
    The unit of the backward's working set."""
    q = shape.n_heads * shape.head_dim / tensor
    kv = shape.n_kv_heads * shape.head_dim / tensor
    if shape.is_moe_layer(layer):
        per_expert = (shape.moe_mlp_dim or shape.mlp_dim) / tensor
        hidden = (shape.experts_per_token * capacity_factor + shape.num_shared_experts) * per_expert
    else:
        hidden = shape.mlp_dim / tensor * (1 - MLP_CHUNKED_SHARE * (1 - 1 / mlp_chunks))
    return (3 * q + 2 * kv + 2 * shape.d_model + 3 * hidden) * compute_bytes


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
                    capacity_factor: float = 1.25, hbm_bytes: float | None = None,
                    generation: str | None = None,
                    output_chunks: int | str = "auto",
                    mlp_chunk_setting: int | str = "auto",
                    moe_routing: str = "capacity",
                    optimizer_sharding: str = "auto") -> MemoryEstimate:
    """Estimate the bytes one device holds at the peak of a training step. `generation` (a
    slice-name prefix: v5p, v6e, tpu7x) picks the compiler's allowance; unknown: the largest.
    `moe_routing` dropless: k routed rows per token (no capacity), no dispatch or combine
    one-hots, and each MoE layer's experts gathered whole (not split over `expert`).
    `optimizer_sharding` (the trainer's `mesh.optimizer_sharding`): over_data, and auto for a
    TPU generation (the trainer's auto splits on TPU devices only), divide the optimizer's
    state over `data` too."""
    if remat not in REMAT_POLICIES:
        raise ValueError(f"remat must be one of {', '.join(REMAT_POLICIES)}, got {remat!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    data, fsdp, context = _axis(mesh, "data"), _axis(mesh, "fsdp"), _axis(mesh, "context")
    tensor, expert = _axis(mesh, "tensor"), _axis(mesh, "expert")
    dropless = moe_routing == "dropless"
    # The trainer's `auto` splits the optimizer's state over data on a TPU only.
    over_data = optimizer_sharding == "over_data" or (optimizer_sharding == "auto"
                                                      and generation is not None)
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
    allowance = _per_generation(GENERATION_ALLOWANCE, generation)
    copies = _per_generation(LOGITS_COPIES_FULL if remat == "full" else LOGITS_COPIES_OTHER,
                             generation)

    params = shape.total_params
    breakdown = {
        "params": params * param_bytes / state_shards,
        "optimizer": _optimizer_bytes(shape, optimizer) / (
            state_shards * (data if over_data else 1)),
    }
    if grad_accum > 1:
        breakdown["gradientAccumulator"] = params * FLOAT32 / state_shards
    if compute_bytes < param_bytes:
        # The layers' weights are cast to the compute dtype once, before the layer scan.
        layer_params = params - shape.embedding_params - shape.norm_params
        breakdown["castWeights"] = layer_params * compute_bytes / state_shards

    def per_token(policy: str) -> list[float]:
        return [_saved_bytes_per_token(shape, i, policy, compute_bytes=compute_bytes,
                                       tensor=tensor, capacity_factor=capacity_factor,
                                       seq_len=seq_len, dropless=dropless)
                for i in range(shape.n_layers)]

    breakdown["activations"] = allowance * tokens * sum(per_token(remat))
    # Compiled for a TPU, the output layer takes the vocabulary in chunks once one device's
    # logits are large: one chunk's logits and their gradient are held at a time.
    vocab = shape.vocab_size / tensor
    chunks = (vocab_chunks(shape.vocab_size, tokens, compute_bytes, vocab_split=tensor, data=data,
                           generation=generation)
              if output_chunks == "auto" else len(chunk_bounds(shape.vocab_size, output_chunks)))
    if chunks > 1:
        vocab = chunk_bounds(shape.vocab_size, chunks)[0][1]
    logits = allowance * copies * tokens * vocab * compute_bytes
    output_layer = OUTPUT_LAYER_COPIES * shape.d_model * shape.vocab_size * compute_bytes / tensor
    largest_layer = shape.attention_params + max(
        shape.dense_mlp_params if shape.n_dense_layers else 0,
        shape.moe_mlp_params / (1 if dropless else expert) if shape.n_moe_layers else 0)
    # Compiled for a TPU under remat full, a dense MLP's backward by chunks of its width.
    mlp_split = (mlp_chunks(tokens, shape.mlp_dim / tensor, compute_bytes, remat=remat,
                            data=data)
                 if mlp_chunk_setting == "auto"
                 else len(chunk_bounds(shape.mlp_dim, mlp_chunk_setting)))
    unit = max(_layer_values_per_token(shape, i, compute_bytes=compute_bytes, tensor=tensor,
                                       capacity_factor=1.0 if dropless else capacity_factor,
                                       mlp_chunks=mlp_split)
               for i in range(shape.n_layers))
    one_layer = allowance * tokens * unit
    beside_logits = BESIDE_LOGITS_LAYERS[remat] * one_layer
    # A layer's backward: its units, its weights, the stacked gradients of the cast weights and
    # the parameters' gradients (param dtype) they become.
    layer_backward = (LAYER_BACKWARD_LAYERS[remat] * one_layer
                      + largest_layer * compute_bytes / tensor
                      + breakdown.get("castWeights", 0.0) + breakdown["params"])
    if mlp_split > 1 and shape.n_dense_layers:
        layer_backward += allowance * tokens * shape.d_model * FLOAT32   # the chunks' sum
    if data > 1 and chunks == 1:
        # With the batch split over `data` the logits' gradient is still held while the last
        # layers' backward runs (the compiler's report for two v6e-8 slices lists it beside
        # the layer's MLP values).
        layer_backward += logits / copies
    breakdown["logits"] = logits
    breakdown["outputLayer"] = output_layer
    breakdown["workspace"] = max(beside_logits, layer_backward - logits - output_layer)
    embedding_gradient = _per_generation(EMBEDDING_GRADIENT_COPIES, generation)
    if embedding_gradient:
        breakdown["embeddingGradient"] = (embedding_gradient * shape.vocab_size * shape.d_model
                                          * FLOAT32)
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
    vocab_chunks: int | str = "auto"
    mlp_chunks: int | str = "auto"
    moe_routing: str = "capacity"
    optimizer_sharding: str = "auto"

    def _kwargs(self, mesh: Mapping[str, int], hbm_bytes: float | None,
                generation: str | None) -> dict:
        return dict(global_batch=self.global_batch, seq_len=self.seq_len, mesh=dict(mesh),
                    optimizer=self.optimizer, grad_accum=self.grad_accum,
                    param_bytes=DTYPE_BYTES[self.param_dtype], compute_bytes=DTYPE_BYTES[self.dtype],
                    capacity_factor=self.capacity_factor, hbm_bytes=hbm_bytes,
                    generation=generation, output_chunks=self.vocab_chunks,
                    mlp_chunk_setting=self.mlp_chunks, moe_routing=self.moe_routing,
                    optimizer_sharding=self.optimizer_sharding)

    def resolved_remat(self, mesh: Mapping[str, int], hbm_bytes: float | None,
                       generation: str | None = None) -> str:
        """The remat policy: as asked, or for `auto` the least recomputation that fits
        (`none` where the device's memory is unknown)."""
        if self.remat != "auto":
            return self.remat
        if hbm_bytes is None:
            return "none"
        return choose_remat(self.shape, **self._kwargs(mesh, hbm_bytes, generation))

    def estimate(self, mesh: Mapping[str, int], hbm_bytes: float | None,
                 generation: str | None = None) -> MemoryEstimate:
        """The estimate on `mesh`, for a device of `hbm_bytes` of generation `generation` (a
        slice-name prefix; None: the largest allowance)."""
        return estimate_memory(self.shape,
                               remat=self.resolved_remat(mesh, hbm_bytes, generation),
                               **self._kwargs(mesh, hbm_bytes, generation))


def choose_remat(shape: ModelShape, *, global_batch: int, seq_len: int,
                 mesh: Mapping[str, int], hbm_bytes: float, **kwargs) -> str:
    """The least recomputation that fits in `hbm_bytes` per device ("full" if nothing fits)."""
    for policy in REMAT_POLICIES:
        estimate = estimate_memory(shape, global_batch=global_batch, seq_len=seq_len, mesh=mesh,
                                   remat=policy, hbm_bytes=hbm_bytes, **kwargs)
        if estimate.fits:
            return policy
    return REMAT_POLICIES[-1]
