"""Data sources through `build_data_source`, as the trainer builds them: the batch geometry it
refuses, the synthetic stream as its docstring defines it, windows cut from token files, epochs,
token ids outside the vocabulary, and the data position a checkpoint restores."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

from tpujob_trainer.config.data import DataConfig
from tpujob_trainer.data import DataError, build_data_source
from tpujob_trainer.data.sources import pack_documents

pytestmark = pytest.mark.unit


def _build(cfg: DataConfig, *, seq=8, batch=4, p=0, n=1, vocab=64, seed=0):
    return build_data_source(cfg, seq_len=seq, global_batch=batch, vocab_size=vocab,
                             process_index=p, process_count=n, seed=seed)


def _tokens(tmp_path, tokens) -> DataConfig:
    np.save(tmp_path / "t.npy", np.asarray(tokens, np.int32))
    return DataConfig(kind="tokens", path=str(tmp_path / "t.npy"), shuffle=False)


SYNTHETIC = DataConfig(kind="synthetic")


@pytest.mark.parametrize("geometry, refused", [
    (dict(seq=0), "seq_len (0) and global batch (4) must be >= 1"),
    (dict(batch=0), "seq_len (8) and global batch (0) must be >= 1"),
    (dict(seq=1, batch=1), None),
    (dict(p=2, n=2), "process_index 2 is outside 0..1"),
    (dict(p=-1, n=2), "process_index -1 is outside 0..1"),
    (dict(p=1, n=2), None),
    (dict(batch=6, n=4), "the global batch (6) must be a multiple of the number of processes (4)"),
])
def test_the_batch_geometry_a_source_takes(geometry, refused):
    if refused is None:
        assert _build(SYNTHETIC, **geometry).next_batch().shape[0] >= 1
    else:
        with pytest.raises(DataError, match="^" + re.escape(refused)):
            _build(SYNTHETIC, **geometry)


def _philox(seed: int, key: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(key=[seed, key]))


@pytest.mark.parametrize("pattern", ["random", "ramp"])
def test_synthetic_rows_are_the_documented_function_of_seed_step_and_row(pattern):
    """Row r of step k's global batch comes from Philox keyed (seed, k x global_batch + r):
    `random` draws seq_len+1 ids in [0, vocab); `ramp` starts at an id in [0, vocab) and steps
    by 1 to 7, modulo vocab. A resumed run, on any number of processes, sees the same rows."""
    seq, batch, vocab, seed = 6, 8, 11, 2**40 + 5
    procs = [_build(DataConfig(kind="synthetic", synthetic_pattern=pattern), seq=seq,
                    batch=batch, p=p, n=2, vocab=vocab, seed=seed) for p in range(2)]
    for step in range(25):
        got = np.concatenate([src.next_batch() for src in procs])
        for row in range(batch):
            rng = _philox(seed, step * batch + row)
            if pattern == "random":
                want = rng.integers(0, vocab, size=seq + 1, dtype=np.int32)
            else:
                start, stride = rng.integers(0, vocab), rng.integers(1, 8)
                want = (start + stride * np.arange(seq + 1)) % vocab
            assert got[row].tolist() == want.tolist(), (step, row)


def test_a_seed_of_any_size_is_taken_modulo_2_to_the_64():
    big, small = (_build(DataConfig(kind="synthetic"), seed=seed) for seed in (2**64 + 9, 9))
    assert big.next_batch().tolist() == small.next_batch().tolist()


def test_each_epoch_s_window_order_is_a_permutation_keyed_by_seed_and_epoch(tmp_path):
    """Shuffled, epoch e reads the windows in the order of Philox (seed, e)'s permutation."""
    np.save(tmp_path / "t.npy", np.arange(97, dtype=np.int32) % 50)     # 12 windows of 9
    cfg = DataConfig(kind="tokens", path=str(tmp_path / "t.npy"), shuffle=True)
    seed = 2**64 + 2**40 + 7
    src = _build(cfg, batch=4, seed=seed)
    for epoch in range(3):
        order = _philox(seed % 2**64, epoch).permutation(12)
        for k in range(3):
            starts = [int(row[0]) for row in src.next_batch()]
            assert starts == [int(w) * 8 % 50 for w in order[4 * k:4 * k + 4]], (epoch, k)


@pytest.mark.parametrize("length, windows", [(1, 0), (8, 0), (9, 1), (16, 1), (17, 2), (24, 2)])
def test_a_stream_is_cut_into_windows_of_seq_len_plus_one(tmp_path, length, windows):
    """Window i is tokens [8i, 8i + 9): neighbours share a token; a stream shorter than one
    window for each row of the batch is refused, saying how many it holds."""
    cfg = _tokens(tmp_path, np.arange(length) % 50)
    if windows < 1:
        with pytest.raises(DataError, match=re.escape(
                f"holds {length} tokens = 0 windows of seq_len+1 = 9 tokens, fewer than one "
                "global batch (1 rows)")):
            _build(cfg, batch=1)
        return
    src = _build(cfg, batch=1)
    assert src.windows == windows
    seen = [src.next_batch()[0].tolist() for _ in range(windows)]
    assert seen == [list(range(8 * i, 8 * i + 9)) for i in range(windows)]


def test_epochs_roll_over_and_are_logged_once_each(tmp_path, caplog):
    cfg = _tokens(tmp_path, np.arange(41) % 50)          # 5 windows: 2 batches of 2, 1 spare
    src = _build(cfg, batch=2)
    assert src.batches_per_epoch == 2
    epochs = []
    with caplog.at_level(logging.INFO, logger="tpujob_trainer.data.sources"):
        for _ in range(7):
            epochs.append(src.epoch)
            src.next_batch()
    assert epochs == [0, 0, 1, 1, 2, 2, 3]
    assert [r.getMessage() for r in caplog.records if "epoch" in r.getMessage()] == [
        "data: epoch 0 done after 2 batches; starting epoch 1",
        "data: epoch 1 done after 4 batches; starting epoch 2",
        "data: epoch 2 done after 6 batches; starting epoch 3"]


@pytest.mark.parametrize("bad", [64, 65, -1])
def test_a_token_id_outside_the_vocabulary_is_refused(tmp_path, bad):
    tokens = np.arange(17) % 50
    tokens[3] = bad
    src = _build(_tokens(tmp_path, tokens), batch=1)
    with pytest.raises(DataError, match=re.escape(
            f"holds token id {bad}, outside 0..63 (model.vocab_size 64)")):
        src.next_batch()
    tokens[3] = 63                                        # the largest id the model has
    assert _build(_tokens(tmp_path, tokens), batch=1).next_batch()[0, 3] == 63


@pytest.mark.parametrize("step, valid", [(0, True), (3, True), (-1, False), ("3", False),
                                         (None, False)])
def test_the_data_position_a_checkpoint_restores(step, valid):
    src = _build(SYNTHETIC)
    state = {**src.state(), "step": step}
    if step is None:
        del state["step"]
    fresh = _build(SYNTHETIC)
    if valid:
        fresh.restore(state)
        assert fresh.step == step
        ran_on = _build(SYNTHETIC)                        # the run that saved the position
        for _ in range(step):
            ran_on.next_batch()
        assert fresh.next_batch().tolist() == ran_on.next_batch().tolist()
    else:
        with pytest.raises(DataError, match="the checkpoint's data position has no valid step"):
            fresh.restore(state)


def test_packing_no_documents_is_an_empty_stream():
    assert pack_documents([], eos_id=1).tolist() == []
    assert pack_documents([np.array([5, 6]), np.array([7])], eos_id=1).tolist() == [5, 6, 1, 7, 1]
