"""The optimizer: AdamW, or Muon for weight matrices with AdamW for the rest; warmup + cosine
(or constant) schedule; global-norm clipping. Built from `OptimizerConfig` as one optax chain.

Parameters are told apart by their names (`embed_VxD`, `head_DxV`, `router_DxE`, `scale`):
norm scales and embeddings get no weight decay unless `decay_norms_and_embeddings`; under Muon
the embedding, output layer, router and norm scales stay with AdamW (Muon is for hidden matrices).
"""

from __future__ import annotations

import jax
import optax
from optax.contrib import MuonDimensionNumbers, scale_by_muon

from tpujob_trainer.config.optimizer import OptimizerConfig

# Input (reduction) and output axes of each hidden weight of one layer, for Muon's
# orthogonalization; the other axes (gate/up pair, experts) are independent matrices. Layers
# are stored stacked on a leading axis, which is one more independent axis (`muon_dims`).
MUON_DIMS: dict[str, MuonDimensionNumbers] = {
    "wq_DxNxH": MuonDimensionNumbers(0, (1, 2)),
    "wk_DxKxH": MuonDimensionNumbers(0, (1, 2)),
    "wv_DxKxH": MuonDimensionNumbers(0, (1, 2)),
    "wo_NxHxD": MuonDimensionNumbers((0, 1), 2),
    "w_in_Dx2xF": MuonDimensionNumbers(0, 2),
    "w_out_FxD": MuonDimensionNumbers(0, 1),
    "w_in_ExDx2xF": MuonDimensionNumbers(1, 3),
    "w_out_ExFxD": MuonDimensionNumbers(1, 2),
}
# How many axes one layer's weight has: its name's shape letters (`wq_DxNxH`: 3).
_LAYER_NDIM = {name: len(name.rsplit("_", 1)[1].split("x")) for name in MUON_DIMS}
_NO_DECAY = ("embed_VxD", "head_DxV", "scale")


def _name(path) -> str:
    last = path[-1]
    return str(getattr(last, "key", getattr(last, "name", last)))


def build_schedule(cfg: OptimizerConfig, total_steps: int, peak: float) -> optax.Schedule:
    warmup = min(cfg.warmup_steps, total_steps)
    if cfg.schedule == "cosine" and total_steps > warmup:
        return optax.warmup_cosine_decay_schedule(
            init_value=0.0, peak_value=peak, warmup_steps=warmup, decay_steps=total_steps,
            end_value=peak * cfg.min_lr_ratio)
    return optax.join_schedules(
        [optax.linear_schedule(0.0, peak, max(warmup, 1)), optax.constant_schedule(peak)],
        [warmup])


def decay_mask(cfg: OptimizerConfig, params):
    """True where AdamW applies weight decay."""
    def one(path, leaf):
        if cfg.decay_norms_and_embeddings:
            return True
        return leaf.ndim >= 2 and _name(path) not in _NO_DECAY
    return jax.tree.map_with_path(one, params)


def muon_dims(path, leaf) -> MuonDimensionNumbers:
    """Muon's axes for a hidden weight, shifted past the leading layer axes of a stacked one."""
    name = _name(path)
    dims, extra = MUON_DIMS[name], leaf.ndim - _LAYER_NDIM[name]
    if extra < 0:
        raise ValueError(f"{name} has {leaf.ndim} axes, fewer than its name's {_LAYER_NDIM[name]}")

    def shift(axes):
        return tuple(a + extra for a in axes) if isinstance(axes, tuple) else axes + extra
    return MuonDimensionNumbers(shift(dims.reduction_axis), shift(dims.output_axis))


def muon_labels(params):
    return jax.tree.map_with_path(lambda p, _: "muon" if _name(p) in MUON_DIMS else "adamw", params)


def build_optimizer(cfg: OptimizerConfig, total_steps: int) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """The optax transformation and the (AdamW) learning-rate schedule the metrics report."""
    schedule = build_schedule(cfg, total_steps, cfg.lr)
    adamw = optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay,
                        mask=lambda p: decay_mask(cfg, p))
    if cfg.kind == "adamw":
        tx = adamw
    else:
        muon = optax.chain(
            scale_by_muon(beta=cfg.muon_momentum, nesterov=True,
                          weight_dimension_numbers=lambda p: jax.tree.map_with_path(muon_dims, p)),
            optax.add_decayed_weights(cfg.muon_weight_decay),
            optax.scale_by_learning_rate(build_schedule(cfg, total_steps, cfg.muon_lr)))
        tx = optax.multi_transform({"muon": muon, "adamw": adamw}, muon_labels)
    if cfg.clip_norm is not None:
        tx = optax.chain(optax.clip_by_global_norm(cfg.clip_norm), tx)
    return tx, schedule
