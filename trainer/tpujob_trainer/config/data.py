"""The data section of the trainer config: where training tokens come from (pure pydantic)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DataKind = Literal["synthetic", "text", "jsonl", "tokens"]


class DataConfig(BaseModel):
    """Training data: synthetic tokens, or text / JSONL / pre-tokenized files, local or `gs://`.

    Documents are tokenized, joined with an EOS token between them, and cut into windows of
    `seq_len + 1` tokens. Every process reads only its rows of each global batch; the data
    position is saved with each checkpoint so a resumed run sees exactly the same batches.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: DataKind = Field(
        "synthetic",
        description="synthetic (generated from the seed and step), text (plain-text files, one "
        "document per file), jsonl (one JSON object per line, text under `text_field`), or tokens "
        "(pre-tokenized .npy, or raw .bin of `token_dtype` integers).")
    path: str | None = Field(
        None,
        description="A file, a directory, or a glob; local or gs://bucket/prefix. Several files "
        "are read in sorted name order. Required unless kind is synthetic.")
    text_field: str = Field("text", min_length=1, description="JSONL: the key holding each document's text.")
    tokenizer: str = Field(
        "byte",
        description="'byte' (built in: ids 0-255 are bytes, 256 is EOS; vocab 257) or the path of "
        "a Hugging Face tokenizer.json (local or gs://; needs the `tokenizers` package).")
    eos_token: str | None = Field(
        None,
        description="Tokenizer file: the token that separates documents; default: the first of "
        "</s>, <|endoftext|>, <eos>, [SEP] the tokenizer knows.")
    token_dtype: Literal["uint16", "uint32", "int32"] = Field(
        "uint16", description="tokens kind, raw .bin files: the integer type the file holds.")
    shuffle: bool = Field(True, description="Shuffle windows within each epoch (reshuffled each epoch).")
    seed: int | None = Field(
        None, description="Seed for shuffling and synthetic data; default: the training seed.")
    on_exhausted: Literal["repeat", "stop"] = Field(
        "repeat",
        description="When every window of an epoch was used: repeat (another epoch, reshuffled) "
        "or stop (the run ends with reason DataExhausted).")
    synthetic_pattern: Literal["random", "ramp"] = Field(
        "random",
        description="synthetic kind: random (uniform tokens, nothing to learn) or ramp (each row "
        "counts up from a random start by a random stride modulo the vocab: learnable).")

    @model_validator(mode="after")
    def _path_for_files(self) -> DataConfig:
        if self.kind != "synthetic" and not self.path:
            raise ValueError(f"data.path is required when data.kind is {self.kind!r} "
                             "(a file, directory, glob, or gs:// prefix)")
        if self.kind == "synthetic" and self.path:
            raise ValueError("data.path is set but data.kind is 'synthetic'; set data.kind to "
                             "text, jsonl or tokens to read files")
        return self
