"""Checkpoints: Orbax, async, every N steps and at the end, keep last K, local or `gs://`, with
an optional node-local tier beside them.

- `checkpointer.py`: `Checkpointer` (save, restore with fallback, bounded writes) and
  `restore_params` (another run's parameters only);
- `steps.py`: `StepDirs`, which step folders exist and which are complete;
- `errors.py`: what goes wrong, as the loop tells the cases apart;
- `collectives.py`: what the processes agree on while checkpointing;
- `local.py` and `tiered.py`: the node-local tier and the checkpointer over both tiers.
"""

from tpujob_trainer.checkpoint.checkpointer import (
    Checkpointer,
    describe_params_mismatch,
    restore_params,
)
from tpujob_trainer.checkpoint.errors import (
    CheckpointError,
    CheckpointMismatchError,
    CheckpointReadError,
    CheckpointSaveError,
)
from tpujob_trainer.checkpoint.steps import StepDirs
from tpujob_trainer.config.checkpoint import CheckpointConfig

__all__ = ["CheckpointConfig", "CheckpointError", "CheckpointMismatchError", "CheckpointReadError",
           "CheckpointSaveError", "Checkpointer", "StepDirs", "describe_params_mismatch",
           "restore_params"]
