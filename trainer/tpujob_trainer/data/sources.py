"""Data sources: each yields this process's rows of every global batch, deterministically.

A global batch at step `k` is a fixed function of (data, seed, k); process `p` of `P` returns rows
`[p * B/P, (p+1) * B/P)` of it, so the union over processes is the same batch whatever `P` is,
and the position is just `k` (saved with each checkpoint, restored on resume).
"""

from __future__ import annotations

import logging

import numpy as np

from tpujob_trainer.data.errors import DataError, DataExhausted
from tpujob_trainer.data.files import TokenFiles

log = logging.getLogger(__name__)


class _Rows:
    """What every source shares: the batch geometry, this process's rows, and the step."""

    kind = ""

    def __init__(self, *, seq_len: int, global_batch: int, process_index: int,
                 process_count: int, seed: int):
        if seq_len < 1 or global_batch < 1:
            raise DataError(f"seq_len ({seq_len}) and global batch ({global_batch}) must be >= 1")
        if not 0 <= process_index < process_count:
            raise DataError(f"process_index {process_index} is outside 0..{process_count - 1}")
        if global_batch % process_count:
            raise DataError(
                f"the global batch ({global_batch}) must be a multiple of the number of "
                f"processes ({process_count}): each process reads an equal share of rows")
        self.seq_len, self.global_batch, self.seed = seq_len, global_batch, seed
        self.local_batch = global_batch // process_count
        self.row0 = process_index * self.local_batch
        self.step = 0

    def _fingerprint(self) -> dict:
        return {"kind": self.kind, "seq_len": self.seq_len, "global_batch": self.global_batch,
                "seed": self.seed}

    def state(self) -> dict:
        """The position (batches consumed) and what it is relative to; the same on every process."""
        return {**self._fingerprint(), "step": self.step}

    def restore(self, state: dict) -> None:
        expected = self._fingerprint()
        changed = {k: (state.get(k), v) for k, v in expected.items() if state.get(k) != v}
        if changed:
            what = ", ".join(f"{k}: checkpoint {a!r}, now {b!r}" for k, (a, b) in changed.items())
            raise DataError(
                f"the checkpoint's data position belongs to different data ({what}); resuming "
                "would not give the batches the run would have seen. Restore the data config, "
                "or start a new output directory")
        step = state.get("step")
        if not isinstance(step, int) or step < 0:
            raise DataError(f"the checkpoint's data position has no valid step: {state!r}")
        self.step = step


class SyntheticSource(_Rows):
    """Tokens generated from (seed, step, row): free to make, identical on every run."""

    kind = "synthetic"

    def __init__(self, *, vocab_size: int, pattern: str = "random", **kw):
        super().__init__(**kw)
        self.vocab_size, self.pattern = vocab_size, pattern

    def _fingerprint(self) -> dict:
        return {**super()._fingerprint(), "vocab_size": self.vocab_size, "pattern": self.pattern}

    def _row(self, step: int, row: int) -> np.ndarray:
        rng = np.random.Generator(np.random.Philox(key=[self.seed & (2**64 - 1), step * self.global_batch + row]))
        n = self.seq_len + 1
        if self.pattern == "ramp":
            start, stride = rng.integers(0, self.vocab_size), rng.integers(1, 8)
            return ((start + stride * np.arange(n, dtype=np.int64)) % self.vocab_size).astype(np.int32)
        return rng.integers(0, self.vocab_size, size=n, dtype=np.int32)

    def next_batch(self) -> np.ndarray:
        out = np.stack([self._row(self.step, self.row0 + r) for r in range(self.local_batch)])
        self.step += 1
        return out


class WindowSource(_Rows):
    """A token stream cut into windows of `seq_len + 1` tokens, shuffled anew each epoch.

    Window `i` is tokens `[i * seq_len, i * seq_len + seq_len + 1)`: neighbours share one token, so
    every token but the first is a prediction target exactly once per epoch. An epoch is
    `windows // global_batch` batches (the remainder windows are skipped that epoch; with
    shuffling, different ones each epoch).
    """

    def __init__(self, stream, *, kind: str, vocab_size: int, shuffle: bool, on_exhausted: str,
                 describe: str, **kw):
        super().__init__(**kw)
        self.kind, self._stream, self.vocab_size = kind, stream, vocab_size
        self.shuffle, self.on_exhausted, self._describe = shuffle, on_exhausted, describe
        self.windows = (len(stream) - 1) // self.seq_len if len(stream) > 1 else 0
        if self.windows < self.global_batch:
            raise DataError(
                f"data.path: {describe} holds {len(stream)} tokens = {self.windows} windows of "
                f"seq_len+1 = {self.seq_len + 1} tokens, fewer than one global batch "
                f"({self.global_batch} rows); add data or shrink the batch or seq_len")
        self.batches_per_epoch = self.windows // self.global_batch
        self._perm_epoch, self._perm = -1, None

    def _fingerprint(self) -> dict:
        return {**super()._fingerprint(), "windows": self.windows, "shuffle": self.shuffle}

    def _order(self, epoch: int) -> np.ndarray:
        if self._perm_epoch != epoch:
            if self.shuffle:
                rng = np.random.Generator(np.random.Philox(key=[self.seed & (2**64 - 1), epoch]))
                self._perm = rng.permutation(self.windows).astype(
                    np.uint32 if self.windows < 2**32 else np.int64)
            else:
                self._perm = np.arange(self.windows)
            self._perm_epoch = epoch
        return self._perm

    @property
    def epoch(self) -> int:
        return self.step // self.batches_per_epoch

    def next_batch(self) -> np.ndarray:
        epoch, k = divmod(self.step, self.batches_per_epoch)
        if epoch > 0 and k == 0 and self.on_exhausted == "stop":
            raise DataExhausted(
                f"data ran out after {self.step} batches: one epoch of {self.windows} windows "
                f"from {self._describe} (data.on_exhausted: stop)")
        if epoch > 0 and k == 0:
            log.info("data: epoch %d done after %d batches; starting epoch %d", epoch - 1,
                     self.step, epoch)
        first = k * self.global_batch + self.row0
        windows = self._order(epoch)[first:first + self.local_batch]
        L = self.seq_len
        rows = self._stream.read_many([(int(w) * L, int(w) * L + L + 1) for w in windows])
        out = np.stack(rows)
        lo, hi = int(out.min()), int(out.max())
        if lo < 0 or hi >= self.vocab_size:
            raise DataError(
                f"data.path: {self._describe} holds token id {hi if hi >= self.vocab_size else lo}, "
                f"outside 0..{self.vocab_size - 1} (model.vocab_size {self.vocab_size}); check "
                "data.token_dtype, or the tokenizer the files were made with")
        self.step += 1
        return out


class ArrayStream:
    """An in-memory token stream (text and JSONL documents, tokenized at start)."""

    def __init__(self, tokens: np.ndarray):
        self._tokens = tokens

    def __len__(self) -> int:
        return len(self._tokens)

    def read_many(self, ranges):
        return [self._tokens[a:b] for a, b in ranges]


def pack_documents(docs: list[np.ndarray], eos_id: int) -> np.ndarray:
    """Documents joined into one stream, each followed by EOS."""
    if not docs:
        return np.zeros(0, np.int32)
    eos = np.array([eos_id], np.int32)
    return np.concatenate([part for d in docs for part in (d.astype(np.int32), eos)])


__all__ = ["ArrayStream", "SyntheticSource", "TokenFiles", "WindowSource", "pack_documents"]
