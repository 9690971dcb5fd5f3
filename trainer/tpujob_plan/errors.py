"""The one error type planning raises: it names the field at fault and what would be valid."""

from __future__ import annotations


class PlanError(ValueError):
    """A request the slice, mesh or memory planner cannot satisfy.

    `field` is the user-facing field at fault (e.g. `spec.slice`, `--ici`), `valid` a short list
    of valid alternatives when there are some.
    """

    def __init__(self, message: str, *, field: str, valid: list[str] | None = None):
        super().__init__(message)
        self.field = field
        self.message = message
        self.valid = list(valid or [])
