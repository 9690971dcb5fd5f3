"""The next batch read ahead in a thread (`data/prefetch.py`): against the same source read inline,
the same batches in the same order, the same position after each one (what a checkpoint saves),
the same end of the data and the same errors at the same call, and a restore that drops the
batch read ahead."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.trainer_io.test_data import configs, ramp_tokens, source, write_corpus
from tpujob_trainer.config.data import DataConfig
from tpujob_trainer.data import DataError, DataExhausted
from tpujob_trainer.data.prefetch import Prefetched

pytestmark = pytest.mark.unit


def run(src, calls: int) -> list[tuple[str, object, dict]]:
    """(what each call gave: "batch" and its rows, or the error's type and text; the position
    after it) for `calls` calls."""
    out = []
    for _ in range(calls):
        try:
            out.append(("batch", src.next_batch().tolist(), src.state()))
        except (DataExhausted, DataError) as e:
            out.append((type(e).__name__, str(e), src.state()))
    return out


@pytest.mark.parametrize("kind", ["synthetic", "text", "jsonl", "tokens_npy", "tokens_multi"])
@pytest.mark.parametrize("processes", [1, 2])
def test_the_same_batches_and_positions_as_the_source_read_inline(tmp_path, kind, processes):
    write_corpus(tmp_path)
    cfg = configs(tmp_path)[kind]
    for p in range(processes):
        inline = run(source(cfg, p=p, n=processes), 12)
        ahead = run(Prefetched(source(cfg, p=p, n=processes)), 12)
        assert ahead == inline
        assert [s["step"] for _, _, s in ahead] == list(range(1, 13))  # never the one read ahead


def test_the_end_of_the_data_comes_at_the_same_call_and_stays(tmp_path):
    cfg = DataConfig(kind="tokens", path=ramp_tokens(tmp_path, 43), on_exhausted="stop")
    inline = run(source(cfg, batch=8, vocab=1000), 8)
    ahead = run(Prefetched(source(cfg, batch=8, vocab=1000)), 8)
    assert ahead == inline
    assert [what for what, _, _ in ahead] == ["batch"] * 5 + ["DataExhausted"] * 3
    assert ahead[-1][2]["step"] == 5


def test_a_bad_token_fails_at_its_own_batch_not_at_the_one_before(tmp_path):
    tokens = (np.arange(8 * 40 + 1) % 251).astype(np.uint16)
    tokens[8 * 3 + 2] = 300  # window 3: the fourth batch of one window each
    np.save(tmp_path / "t.npy", tokens)
    cfg = DataConfig(kind="tokens", path=str(tmp_path / "t.npy"), shuffle=False)
    inline = run(source(cfg, batch=1, vocab=256), 5)
    ahead = run(Prefetched(source(cfg, batch=1, vocab=256)), 5)
    assert ahead == inline
    assert [what for what, _, _ in ahead][:4] == ["batch", "batch", "batch", "DataError"]


def test_a_restore_drops_the_batch_read_ahead(tmp_path):
    cfg = configs(tmp_path)["synthetic"]
    ahead = Prefetched(source(cfg))
    first = [ahead.next_batch().tolist() for _ in range(3)]
    position = ahead.state()
    later = [ahead.next_batch().tolist() for _ in range(2)]
    ahead.restore(position)
    assert ahead.state() == position
    assert [ahead.next_batch().tolist() for _ in range(2)] == later
    ahead.restore({**position, "step": 0})
    assert [ahead.next_batch().tolist() for _ in range(3)] == first


class Slow:
    """A source whose reads each wait for the test's leave (`allow()`), recording which thread
    read and whether it was a daemon."""

    def __init__(self):
        self.step, self.leave, self.readers = 0, threading.Semaphore(0), []
        self.done = [threading.Event() for _ in range(8)]   # read i has moved the source on

    def allow(self, reads: int = 1) -> None:
        for _ in range(reads):
            self.leave.release()

    def next_batch(self):
        me = threading.current_thread()
        self.readers.append((me.name, me.daemon))
        assert self.leave.acquire(timeout=10)
        self.step += 1
        self.done[len(self.readers) - 1].set()
        return np.full((1, 2), self.step, np.int32)

    def state(self):
        return {"step": self.step}

    def restore(self, state):
        self.step = state["step"]


def test_the_next_batch_is_read_in_a_thread_while_the_caller_goes_on():
    src = Slow()
    src.allow()
    ahead = Prefetched(src)
    assert ahead.next_batch().tolist() == [[1, 1]]    # the first is read in the caller's thread
    # The second is being read elsewhere, held until allowed: the caller is back already, and
    # the position is the one after the first batch.
    assert ahead.state() == {"step": 1}
    src.allow()
    assert ahead.next_batch().tolist() == [[2, 2]]
    # The caller's own thread, then the read-ahead thread: a daemon, so that a read stuck on
    # storage cannot keep a finished run's process alive.
    assert src.readers[0] == (threading.current_thread().name, threading.current_thread().daemon)
    assert src.readers[1] == ("tpujob-data-prefetch", True)


def test_a_restore_waits_for_the_read_under_way_before_it_moves_the_source():
    src = Slow()
    src.allow()
    ahead = Prefetched(src)
    ahead.next_batch()                      # batch 1 handed out; read 2 held in the thread
    restorer = threading.Thread(target=ahead.restore, args=({"step": 0},))
    restorer.start()
    restorer.join(timeout=0.5)              # it waits for the held read...
    src.allow()
    restorer.join()
    assert src.done[1].wait(10)             # ...so once that read is done, the source is where
    assert ahead.state() == {"step": 0}     # the restore put it (not moved on after it)
    src.allow()
    assert ahead.next_batch().tolist() == [[1, 1]]
