"""Which `<directory>/<step>` checkpoint folders exist and which are complete, from a plain file
listing (local or `gs://`): a step is complete when `_CHECKPOINT_METADATA`, `state/_METADATA`,
`data/metadata` and, on remote storage, `commit_success.txt` exist and the JSON files parse."""

from __future__ import annotations

import json
import logging

import fsspec

log = logging.getLogger(__name__)

STATE, DATA = "state", "data"
_COMMIT_FILE = "commit_success.txt"
_REQUIRED = ("_CHECKPOINT_METADATA", f"{STATE}/_METADATA", f"{DATA}/metadata")


def _is_remote(directory: str) -> bool:
    return "://" in directory and not directory.startswith("file://")


class StepDirs:
    """Which `<directory>/<step>` folders exist and which are complete (a plain file listing)."""

    def __init__(self, directory: str):
        self.directory = directory.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.directory)
        self.remote = _is_remote(directory)

    def refresh(self) -> None:
        # Orbax reaches GCS through etils, which holds its own gcsfs instance (other arguments,
        # so another listing cache): a folder removed here would still "exist" there and
        # Orbax's save would fail removing it again. Forget every instance's listings.
        for fs in {id(f): f for f in [self.fs, *getattr(type(self.fs), "_cache", {}).values()]}.values():
            fs.invalidate_cache()

    def all_steps(self) -> list[int]:
        self.refresh()
        if not self.fs.exists(self.root):
            return []
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.root, detail=False)]
        return sorted(int(n) for n in names if n.isdigit())

    def why_incomplete(self, step: int) -> str | None:
        """None if the step is complete, else the reason it is not."""
        d = f"{self.root}/{step}"
        required = _REQUIRED + ((_COMMIT_FILE,) if self.remote else ())
        missing = [r for r in required if not self.fs.exists(f"{d}/{r}")]
        if missing:
            return f"missing {', '.join(missing)} (the save did not finish)"
        for name in ("_CHECKPOINT_METADATA", f"{DATA}/metadata"):
            try:
                json.loads(self.fs.cat_file(f"{d}/{name}"))
            except (ValueError, OSError) as e:
                return f"{name} is unreadable ({e})"
        return None

    def complete_steps(self, *, quiet: bool = False) -> list[int]:
        steps = []
        for s in self.all_steps():
            why = self.why_incomplete(s)
            if why is None:
                steps.append(s)
            elif not quiet:
                log.warning("checkpoint %s/%d is incomplete: %s; skipping it", self.directory, s, why)
        return steps

    def remove(self, step: int) -> None:
        d = f"{self.root}/{step}"
        self.refresh()
        if self.fs.exists(d):
            self.fs.rm(d, recursive=True)
        self.refresh()
