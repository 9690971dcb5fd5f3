"""The loss: `step.cross_entropy` is the mean next-token cross-entropy in value and gradient
(checked against autodiff of the textbook form, in float32 and bf16), and compiled for a TPU it
holds no float32 copy of the logits (the textbook form's autodiff does: the largest buffer of a
small model's step)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tpujob_trainer import step as step_mod
from tpujob_trainer.step import cross_entropy

pytestmark = pytest.mark.integration


def textbook(logits, targets):
    logits = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(logits, axis=-1)
    return jnp.mean(lse - jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0])


@pytest.mark.parametrize("dtype,scale", [(jnp.float32, 1.0), (jnp.float32, 30.0),
                                         (jnp.bfloat16, 3.0)])
def test_value_and_gradient_are_the_textbook_forms(dtype, scale):
    logits = (jax.random.normal(jax.random.key(0), (3, 7, 50)) * scale).astype(dtype)
    targets = jax.random.randint(jax.random.key(1), (3, 7), 0, 50)
    assert float(cross_entropy(logits, targets)) == pytest.approx(
        float(textbook(logits, targets)), rel=1e-6)
    got = jax.grad(cross_entropy)(logits, targets)
    want = jax.grad(textbook)(logits, targets)
    assert got.dtype == logits.dtype
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                               rtol=1e-5, atol=1e-7)
    # Scaled by the upstream gradient too (the loss is weighted in the step).
    got3 = jax.grad(lambda lg: 3.0 * cross_entropy(lg, targets))(logits)
    np.testing.assert_allclose(np.asarray(got3, np.float32), 3 * np.asarray(got, np.float32),
                               rtol=1e-2 if dtype == jnp.bfloat16 else 1e-5, atol=1e-8)


def _temp_bytes_on_v6e(monkeypatch, ce) -> int:
    from tpujob_trainer import aot
    from tpujob_trainer.config.root import TrainerConfig

    monkeypatch.setattr(step_mod, "cross_entropy", ce)
    cfg = TrainerConfig.from_dict({
        "model": {"vocab_size": 32768, "d_model": 128, "n_layers": 1, "n_heads": 1,
                  "n_kv_heads": 1, "head_dim": 128, "mlp_dim": 256, "remat": "full"},
        "train": {"global_batch": 16, "seq_len": 512}})
    return aot.compile_step(cfg, "v6e-8").temp_bytes


def test_compiled_for_a_tpu_the_step_holds_no_float32_logits(monkeypatch):
    ours = _temp_bytes_on_v6e(monkeypatch, cross_entropy)
    theirs = _temp_bytes_on_v6e(monkeypatch, textbook)
    f32_logits = 2 * 512 * 32768 * 4   # one device's 2 sequences, in float32
    assert ours < f32_logits / 4 < theirs, (ours, theirs)
