"""The loop's loss check: NaN and both infinities end the run as NaNLoss (exit 6), naming the
step, grad norm and learning rate; any finite loss, however large, trains on."""

from __future__ import annotations

import math

import pytest

from tpujob_trainer.exits import EXIT_CODES, Reason
from tpujob_trainer.loop import non_finite_loss

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("loss, shown", [
    (math.nan, "nan"),
    (math.inf, "inf"),
    (-math.inf, "-inf"),
])
def test_a_non_finite_loss_ends_the_run(loss, shown):
    exit_ = non_finite_loss({"loss": loss, "grad_norm": 3.5, "lr": 2e-4}, 17)
    assert exit_ is not None
    assert exit_.reason == Reason.NAN_LOSS and exit_.exit_code == EXIT_CODES[Reason.NAN_LOSS] == 6
    assert str(exit_.message) == f"loss is {shown} at step 17 (grad norm 3.5, lr 0.0002)"


@pytest.mark.parametrize("loss", [0.0, -1.0, 1e-30, 3.4e38, 1.7e308, -1.7e308])
def test_a_finite_loss_trains_on(loss):
    assert non_finite_loss({"loss": loss, "grad_norm": math.inf, "lr": 1e-3}, 3) is None
