"""The decoder-only language model (Flax NNX): dense and mixture-of-experts layers."""

from tpujob_trainer.models.decoder import Decoder, remat_policy

__all__ = ["Decoder", "remat_policy"]
