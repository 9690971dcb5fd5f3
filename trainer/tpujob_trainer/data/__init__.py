"""Training data: `build_data_source(cfg, ...)` gives this process's rows of each global batch.

Sources are deterministic and resumable: `state()` is the position saved with each checkpoint and
`restore(state)` puts a fresh source back there, so a resumed run sees exactly the batches an
uninterrupted one would have.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from tpujob_trainer.config.data import DataConfig
from tpujob_trainer.data.errors import DataError, DataExhausted
from tpujob_trainer.data.files import (
    TOKEN_SUFFIXES,
    TokenFiles,
    list_files,
    read_jsonl_documents,
    read_text_documents,
)
from tpujob_trainer.data.sources import ArrayStream, SyntheticSource, WindowSource, pack_documents
from tpujob_trainer.data.tokenizer import ByteTokenizer, Tokenizer, build_tokenizer


@runtime_checkable
class DataSource(Protocol):
    def next_batch(self) -> np.ndarray:
        """int32 [global_batch // process_count, seq_len + 1]: this process's rows of the next batch."""
        ...

    def state(self) -> dict:
        """The JSON-serializable position, the same on every process."""
        ...

    def restore(self, state: dict) -> None:
        """Continue from a position `state()` returned (raises DataError if the data changed)."""
        ...


def build_data_source(cfg: DataConfig, *, seq_len: int, global_batch: int, vocab_size: int,
                      process_index: int, process_count: int, seed: int) -> DataSource:
    """The source `cfg` describes, for this process (raises DataError naming the bad field)."""
    rows = dict(seq_len=seq_len, global_batch=global_batch, process_index=process_index,
                process_count=process_count, seed=cfg.seed if cfg.seed is not None else seed)
    if cfg.kind == "synthetic":
        return SyntheticSource(vocab_size=vocab_size, pattern=cfg.synthetic_pattern, **rows)
    assert cfg.path is not None  # the config requires it for file kinds
    common = dict(kind=cfg.kind, vocab_size=vocab_size, shuffle=cfg.shuffle,
                  on_exhausted=cfg.on_exhausted, describe=repr(cfg.path), **rows)
    if cfg.kind == "tokens":
        fs, files = list_files(cfg.path, suffixes=TOKEN_SUFFIXES)
        return WindowSource(TokenFiles(fs, files, cfg.token_dtype), **common)
    tokenizer = build_tokenizer(cfg.tokenizer, eos_token=cfg.eos_token)
    if tokenizer.vocab_size > vocab_size:
        raise DataError(
            f"data.tokenizer {cfg.tokenizer!r} has {tokenizer.vocab_size} token ids but "
            f"model.vocab_size is {vocab_size}; set model.vocab_size to at least "
            f"{tokenizer.vocab_size}")
    fs, files = list_files(cfg.path)
    if cfg.kind == "text":
        docs = read_text_documents(fs, files)
    else:
        docs = read_jsonl_documents(fs, files, cfg.text_field)
    tokens = pack_documents(tokenizer.encode_batch(docs), tokenizer.eos_id)
    return WindowSource(ArrayStream(tokens), **common)


__all__ = [
    "ByteTokenizer", "DataConfig", "DataError", "DataExhausted", "DataSource", "Tokenizer",
    "build_data_source", "build_tokenizer",
]
