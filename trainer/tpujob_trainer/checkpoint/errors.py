"""What goes wrong with checkpoints, as the loop tells the cases apart: nothing usable to resume
from, checkpoints that cannot be read (worth a restart), a checkpoint of another model (no
restart helps), and a save that failed or ran late."""

from __future__ import annotations


class CheckpointError(Exception):
    """No usable checkpoint where one was asked for, or a state that cannot be saved."""


class CheckpointReadError(CheckpointError):
    """Checkpoints exist but none could be read: storage trouble (the usual cause, so the run
    is worth restarting) or every one of them damaged."""


class CheckpointMismatchError(CheckpointError):
    """The newest checkpoint holds parameters of other names or shapes than the model this
    config builds: a config (or version) change, not storage trouble, so no restart can help."""


class CheckpointSaveError(CheckpointError):
    """A save that failed on storage or did not finish within `checkpoint.save_timeout_s`; the
    step it wrote is incomplete and is skipped on the next start. Once raised, the checkpointer
    writes nothing more and `close()` no longer waits."""
