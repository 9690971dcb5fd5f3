"""Tokenizers: the built-in byte tokenizer and Hugging Face `tokenizer.json` files."""

from __future__ import annotations

from typing import Protocol

import fsspec
import numpy as np

from tpujob_trainer.data.errors import DataError

_EOS_CANDIDATES = ("</s>", "<|endoftext|>", "<eos>", "[SEP]")


class Tokenizer(Protocol):
    vocab_size: int
    eos_id: int

    def encode(self, text: str) -> np.ndarray: ...
    def encode_batch(self, texts: list[str]) -> list[np.ndarray]: ...
    def decode(self, ids) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as ids 0-255, and 256 as the end-of-document (EOS) token: vocab 257."""

    vocab_size = 257
    eos_id = 256

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [self.encode(t) for t in texts]

    def decode(self, ids) -> str:
        ids = np.asarray(ids)
        return bytes(ids[ids < 256].astype(np.uint8).tolist()).decode("utf-8", errors="replace")


class HFTokenizer:
    """A Hugging Face `tokenizer.json` (any model: BPE, WordPiece, Unigram...), no special tokens added."""

    def __init__(self, path: str, eos_token: str | None = None):
        try:
            import tokenizers
        except ImportError as e:  # optional dependency
            raise DataError(
                f"data.tokenizer: {path!r} needs the `tokenizers` package "
                "(pip install tokenizers), or use data.tokenizer: byte") from e
        try:
            with fsspec.open(path, "rt", encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError as e:
            raise DataError(f"data.tokenizer: no such tokenizer file: {path}") from e
        try:
            self._tok = tokenizers.Tokenizer.from_str(text)
        except Exception as e:
            raise DataError(f"data.tokenizer: {path} is not a Hugging Face tokenizer.json: {e}") from e
        names = [eos_token] if eos_token else list(_EOS_CANDIDATES)
        ids = [(n, self._tok.token_to_id(n)) for n in names]
        found = [(n, i) for n, i in ids if i is not None]
        if not found:
            raise DataError(
                f"data.eos_token: the tokenizer {path} has no token "
                f"{' or '.join(repr(n) for n in names)}; set data.eos_token to its end-of-document token")
        self.eos_token, self.eos_id = found[0]
        self.vocab_size = int(self._tok.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._tok.encode(text, add_special_tokens=False).ids, dtype=np.int32)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        encs = self._tok.encode_batch(texts, add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int32) for e in encs]

    def decode(self, ids) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)


def build_tokenizer(name: str, *, eos_token: str | None = None) -> Tokenizer:
    """`byte`, or the path (local or gs://) of a Hugging Face tokenizer.json."""
    if name == "byte":
        return ByteTokenizer()
    return HFTokenizer(name, eos_token=eos_token)
