"""The node-local checkpoint tier: each process writes only its own shards, often, to storage
on its node (an emptyDir, a RAM disk, a hostPath), with no collective and no remote round trip.

Layout of `<directory>/process-<index>/<step>/`: `shards.bin` (every distinct shard this process
holds, back to back) and `manifest.json` (written last: the step, who wrote it, the output it
belongs to, the persistent checkpoint it builds on, each leaf's shape and dtype and each shard's
index, device, offset, length and CRC-32, and this process's data position). A step is written
into a hidden temporary folder and renamed into place, so a folder named by a step is complete
unless its bytes were damaged since, which the CRCs catch on load.

The tier is useful only to a process that comes back on the same node with the same devices
(a container restart, a pod recreated on its node): a pod on another node finds nothing, or
finds another process's folder, and `load()` refuses anything that does not match exactly. The
caller (`tiered.py`) makes every process agree before any of them uses the tier.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shutil
import threading
import time
import zlib
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from tpujob_trainer.config.checkpoint import LocalCheckpointConfig

log = logging.getLogger(__name__)

FORMAT = 1
MANIFEST, SHARDS = "manifest.json", "shards.bin"


class LocalTierError(Exception):
    """A local checkpoint that cannot be used here (missing, damaged, or not this process's)."""


def _index(index: tuple[slice, ...], shape: tuple[int, ...]) -> list[list[int]]:
    return [list(s.indices(n)[:2]) for s, n in zip(index, shape, strict=True)]


def _leaves(tree) -> list[tuple[str, Any]]:
    return [(jax.tree_util.keystr(p), leaf)
            for p, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]]


class _Layout(NamedTuple):
    """Where a state's shards go in `shards.bin`: the manifest's leaves (CRCs not yet filled)
    and, in offset order, (leaf, addressable shard) of each distinct shard to copy. The same for
    every save of a state of the same structure, shapes, dtypes and shardings."""

    leaves: list[dict]
    picks: list[tuple[int, int]]


def _layout(state) -> _Layout:
    leaves, picks, offset = [], [], 0
    for i, (path, leaf) in enumerate(_leaves(state)):
        shape = tuple(leaf.shape)
        shards, seen = [], {}
        for j, shard in enumerate(leaf.addressable_shards):
            index = _index(shard.index, shape)
            key = json.dumps(index)
            if key not in seen:
                local = tuple(shard.data.shape)
                nbytes = int(np.prod(local, dtype=np.int64)) * leaf.dtype.itemsize
                seen[key] = {"index": index, "offset": offset, "nbytes": nbytes,
                             "shape": list(local)}
                picks.append((i, j))
                offset += nbytes
            shards.append({**seen[key], "device": shard.device.id})
        leaves.append({"path": path, "shape": list(shape), "dtype": str(leaf.dtype),
                       "shards": shards})
    return _Layout(leaves, picks)


class LocalTier:
    """Saves and loads this process's shards of (train state, data position) under
    `<cfg.directory>/process-<process_index>`. Not collective: every method is local."""

    def __init__(self, cfg: LocalCheckpointConfig, *, output: str, process_index: int,
                 process_count: int):
        if cfg.directory is None:
            raise ValueError("checkpoint.local.directory is not set")
        self.cfg, self.output = cfg, output.rstrip("/")
        self.process_index, self.process_count = process_index, process_count
        self.root = Path(cfg.directory) / f"process-{process_index}"
        # One writer thread for the tier's life (started at the first save): handing a save to
        # it is a put on its queue, where starting a thread per save waited for the new thread
        # to be scheduled, which a busy host stretches.
        self._writer: threading.Thread | None = None
        self._queue: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self.last_save_blocking_s: float | None = None
        self._kept: tuple[Any, _Layout] | None = None   # (what it was made for, the layout)

    def should_save(self, step: int) -> bool:
        return step > 0 and step % self.cfg.every == 0

    # -- writing ---------------------------------------------------------------------------

    def save(self, step: int, state, data_state: dict, *, base_step: int | None) -> None:
        """Copy this process's shards off the devices (blocking), then checksum and write them
        in the background. `base_step`: the newest persistent checkpoint started so far (None if
        none); a restore refuses this local one if the persistent tier has gone back behind it."""
        t0 = time.perf_counter()
        self.wait()
        arrays, treedef = jax.tree_util.tree_flatten(state)
        made_for = (treedef, tuple((a.shape, a.dtype, a.sharding) for a in arrays))
        if self._kept is None or self._kept[0] != made_for:
            self._kept = (made_for, _layout(state))
        layout = self._kept[1]
        # Only the copies off the devices happen here, every save: the layout is kept, and the
        # CRC-32s are the writer's to compute, off the training path. (ascontiguousarray would
        # make a 0-d array 1-d; reshape + view gives the bytes of any dtype, bfloat16 too.)
        chunks = [np.array(arrays[i].addressable_shards[j].data, order="C").reshape(-1)
                  .view(np.uint8) for i, j in layout.picks]
        manifest = {"format": FORMAT, "step": step, "process_index": self.process_index,
                    "process_count": self.process_count, "output": self.output,
                    "base_step": base_step, "leaves": layout.leaves,
                    "data": json.loads(json.dumps(data_state)), "written_at": time.time()}
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_queued, daemon=True,
                                            name=f"tpujob-local-checkpoint-{self.process_index}")
            self._writer.start()
        self._queue.put((step, manifest, chunks))
        self.last_save_blocking_s = time.perf_counter() - t0

    def _write_queued(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                self._write(*job)
            finally:
                self._queue.task_done()

    def _write(self, step: int, manifest: dict, chunks: list[np.ndarray]) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            # Anything newer than this step comes from a timeline that was abandoned (a restore
            # from an older checkpoint), and a leftover temporary folder from a killed write.
            for name, s in self._entries():
                if s is None or s >= step:
                    shutil.rmtree(self.root / name, ignore_errors=True)
            tmp = self.root / f".{step}.tmp"
            tmp.mkdir()
            crcs, offset = {}, 0
            with open(tmp / SHARDS, "wb") as f:
                # No fsync: a killed process loses nothing the kernel has, and a node that
                # crashes takes the node-local tier with it (what survives is CRC-checked).
                for chunk in chunks:
                    crcs[offset] = zlib.crc32(chunk)
                    offset += chunk.nbytes
                    f.write(chunk.data)
            # The layout's leaves are kept for the next save: the CRCs go into copies.
            leaves = [{**leaf, "shards": [{**shard, "crc32": crcs[shard["offset"]]}
                                          for shard in leaf["shards"]]}
                      for leaf in manifest["leaves"]]
            (tmp / MANIFEST).write_text(json.dumps({**manifest, "leaves": leaves}))
            os.rename(tmp, self.root / str(step))
            for s in self.steps()[:-self.cfg.keep]:
                shutil.rmtree(self.root / str(s), ignore_errors=True)
        except BaseException as e:  # reported by wait()/check(); the tier is best effort
            self._error = e

    def wait(self) -> None:
        """Until the background write (if any) is done; a failed write is logged, not raised:
        the persistent tier still holds the run."""
        self._queue.join()
        if self._error is not None:
            log.warning("local checkpoint write failed in %s: %s", self.root, self._error)
            self._error = None

    # -- reading ---------------------------------------------------------------------------

    def _entries(self) -> list[tuple[str, int | None]]:
        if not self.root.is_dir():
            return []
        return [(p.name, int(p.name) if p.name.isdigit() else None) for p in self.root.iterdir()]

    def steps(self) -> list[int]:
        """Steps of the folders in place (renamed into place = written whole), oldest first."""
        return sorted(s for _, s in self._entries() if s is not None)

    def usable_steps(self, persistent_latest: int | None) -> list[int]:
        """Steps whose manifest is this process's, of this output, newer than `persistent_latest`
        and built on a persistent checkpoint that still exists; oldest first."""
        usable = []
        for step in self.steps():
            why = self.why_unusable(step, persistent_latest)
            if why is None:
                usable.append(step)
            else:
                log.info("local checkpoint %s/%d not used: %s", self.root, step, why)
        return usable

    def why_unusable(self, step: int, persistent_latest: int | None) -> str | None:
        try:
            m = self._manifest(step)
        except LocalTierError as e:
            return str(e)
        expected = {"format": FORMAT, "step": step, "process_index": self.process_index,
                    "process_count": self.process_count, "output": self.output}
        wrong = [f"{k}={m.get(k)!r} (expected {v!r})" for k, v in expected.items()
                 if m.get(k) != v]
        if wrong:
            return "written by another run or process: " + ", ".join(wrong)
        if persistent_latest is not None and step <= persistent_latest:
            return f"not newer than the persistent checkpoint {persistent_latest}"
        base = m.get("base_step")
        if base is not None and (persistent_latest is None or persistent_latest < base):
            return (f"it builds on persistent checkpoint {base}, which the output no longer has "
                    f"(newest there: {persistent_latest})")
        return None

    def _manifest(self, step: int) -> dict:
        try:
            return json.loads((self.root / str(step) / MANIFEST).read_text())
        except (OSError, ValueError) as e:
            raise LocalTierError(f"manifest unreadable ({e})") from e

    def load(self, step: int, abstract_state) -> tuple[Any, dict]:
        """(state, data position) of local checkpoint `step`, built on the devices the abstract
        state's shardings name; raises LocalTierError on any mismatch or damaged byte."""
        m = self._manifest(step)
        saved = m.get("leaves") or []
        targets = _leaves(abstract_state)
        if [leaf["path"] for leaf in saved] != [p for p, _ in targets]:
            raise LocalTierError("the state's structure differs from the saved one")
        try:
            blob = np.memmap(self.root / str(step) / SHARDS, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as e:
            raise LocalTierError(f"{SHARDS} unreadable ({e})") from e
        arrays = []
        for entry, (path, target) in zip(saved, targets, strict=True):
            shape = tuple(target.shape)
            if tuple(entry["shape"]) != shape or entry["dtype"] != str(target.dtype):
                raise LocalTierError(f"{path}: saved {entry['shape']} {entry['dtype']}, "
                                     f"expected {list(shape)} {target.dtype}")
            by_device = {s["device"]: s for s in entry["shards"]}
            pieces = []
            for device, index in target.sharding.addressable_devices_indices_map(shape).items():
                shard = by_device.get(device.id)
                if shard is None or shard["index"] != _index(index, shape):
                    raise LocalTierError(f"{path}: no saved shard for device {device.id} at "
                                         f"{_index(index, shape)} (another layout or node)")
                raw = blob[shard["offset"]:shard["offset"] + shard["nbytes"]]
                if raw.size != shard["nbytes"] or zlib.crc32(raw) != shard["crc32"]:
                    raise LocalTierError(f"{path}: shard for device {device.id} is damaged "
                                         "(CRC-32 mismatch or truncated)")
                host = np.frombuffer(raw.tobytes(), target.dtype).reshape(tuple(shard["shape"]))
                pieces.append(jax.device_put(host, device))
            arrays.append(jax.make_array_from_single_device_arrays(shape, target.sharding, pieces))
        treedef = jax.tree_util.tree_structure(abstract_state)
        return jax.tree_util.tree_unflatten(treedef, arrays), dict(m.get("data") or {})

    def discard_after(self, step: int) -> None:
        """Remove this process's local checkpoints newer than `step` (the run goes on from
        `step`, so they belong to a timeline it left) and any leftover temporary folder."""
        self.wait()
        for name, s in self._entries():
            if s is None or s > step:
                shutil.rmtree(self.root / name, ignore_errors=True)

    def close(self) -> None:
        self.wait()
        if self._writer is not None:
            self._queue.put(None)
            self._writer.join()
            self._writer = None
