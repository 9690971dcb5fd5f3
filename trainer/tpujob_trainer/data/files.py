"""Finding and reading data files on a local disk or `gs://` (through fsspec / gcsfs)."""

from __future__ import annotations

import io
import json

import fsspec
import numpy as np

from tpujob_trainer.data.errors import DataError

_GLOB_CHARS = set("*?[")
TOKEN_SUFFIXES = (".npy", ".bin")


def _url(fs, path: str) -> str:
    return fs.unstrip_protocol(path) if _protocol(fs) != "file" else path


def _protocol(fs) -> str:
    p = fs.protocol
    return p if isinstance(p, str) else p[0]


def list_files(path: str, *, suffixes: tuple[str, ...] | None = None) -> tuple[fsspec.AbstractFileSystem, list[str]]:
    """The files `data.path` names, sorted: one file, every file under a directory, or a glob.

    Hidden files (a name starting with '.' or '_') are skipped in directories and globs; with
    `suffixes`, only files with one of them are kept.
    """
    try:
        fs, root = fsspec.core.url_to_fs(path)
    except (ValueError, ImportError) as e:
        raise DataError(f"data.path: cannot open {path!r}: {e}") from e
    try:
        if any(c in root for c in _GLOB_CHARS):
            found = [p for p in fs.glob(root) if fs.isfile(p)]
            if not found:
                raise DataError(f"data.path: the pattern {path!r} matched no files")
        elif fs.isdir(root):
            found = fs.find(root)
            if not found:
                raise DataError(f"data.path: the directory {path!r} holds no files")
        elif fs.isfile(root):
            return fs, [root]
        else:
            raise DataError(f"data.path: no such file or directory: {path!r}")
    except (PermissionError, OSError) as e:
        raise DataError(f"data.path: cannot read {path!r}: {e}") from e
    files = [p for p in found if not p.rsplit("/", 1)[-1].startswith((".", "_"))]
    if suffixes:
        files = [p for p in files if p.endswith(suffixes)]
        if not files:
            raise DataError(f"data.path: no {' or '.join(suffixes)} files under {path!r}")
    return fs, sorted(files)


def read_text_documents(fs, files: list[str]) -> list[str]:
    """kind `text`: each file is one document (gzip and other compressions by suffix)."""
    docs = []
    for p in files:
        with fs.open(p, "rb", compression="infer") as f:
            raw = f.read()
        try:
            docs.append(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise DataError(f"data.path: {_url(fs, p)} is not UTF-8 text ({e})") from e
    return docs


def read_jsonl_documents(fs, files: list[str], text_field: str) -> list[str]:
    """kind `jsonl`: one JSON object per line, its text under `text_field`; blank lines skipped."""
    docs = []
    for p in files:
        with fs.open(p, "rb", compression="infer") as f:
            lines = io.TextIOWrapper(f, encoding="utf-8")
            for n, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"data.path: {_url(fs, p)} line {n} is not JSON: {e}") from e
                if not isinstance(record, dict) or text_field not in record:
                    raise DataError(
                        f"data.text_field: {_url(fs, p)} line {n} has no key {text_field!r}")
                text = record[text_field]
                if not isinstance(text, str):
                    raise DataError(
                        f"data.text_field: {_url(fs, p)} line {n}: {text_field!r} is "
                        f"{type(text).__name__}, not a string")
                docs.append(text)
    return docs


class TokenFiles:
    """Pre-tokenized files seen as one stream of token ids, read by range (nothing read up front).

    `.npy` files hold a 1-D integer array; `.bin` files raw little-endian integers of
    `token_dtype`. Local files are memory-mapped; remote ones are read with ranged requests,
    so a process fetches only the windows it trains on.
    """

    def __init__(self, fs, files: list[str], token_dtype: str):
        self._fs = fs
        self._local = _protocol(fs) == "file"
        self._parts = []  # (path, byte offset of the first token, dtype, token count)
        for p in files:
            if p.endswith(".npy"):
                offset, dtype, count = self._npy_layout(p)
            else:
                dtype = np.dtype(token_dtype).newbyteorder("<")
                size = fs.size(p)
                if size % dtype.itemsize:
                    raise DataError(
                        f"data.token_dtype: {_url(fs, p)} has {size} bytes, not a multiple of "
                        f"{dtype.itemsize} ({token_dtype})")
                offset, count = 0, size // dtype.itemsize
            self._parts.append((p, offset, dtype, count))
        self._starts = np.cumsum([0] + [c for *_, c in self._parts])
        self._maps: dict[int, np.ndarray] = {}

    def _npy_layout(self, p: str) -> tuple[int, np.dtype, int]:
        with self._fs.open(p, "rb") as f:
            try:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                else:
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            except ValueError as e:
                raise DataError(f"data.path: {_url(self._fs, p)} is not a .npy file: {e}") from e
            offset = f.tell()
        if len(shape) != 1 or dtype.kind not in "iu":
            raise DataError(
                f"data.path: {_url(self._fs, p)} holds a {dtype} array of shape {shape}; "
                "expected a 1-D integer array of token ids")
        return offset, dtype, int(shape[0])

    def __len__(self) -> int:
        return int(self._starts[-1])

    def _map(self, i: int) -> np.ndarray:
        if i not in self._maps:
            p, offset, dtype, count = self._parts[i]
            self._maps[i] = np.memmap(p, dtype=dtype, mode="r", offset=offset, shape=(count,))
        return self._maps[i]

    def _pieces(self, start: int, stop: int):
        """(part index, first token, end token) of the parts [start, stop) spans."""
        i = int(np.searchsorted(self._starts, start, side="right")) - 1
        while start < stop:
            end = min(stop, int(self._starts[i + 1]))
            yield i, start - int(self._starts[i]), end - int(self._starts[i])
            start, i = end, i + 1

    def read_many(self, ranges: list[tuple[int, int]]) -> list[np.ndarray]:
        """Tokens [start, stop) for each range, as int32; remote ranges are fetched concurrently."""
        pieces = [list(self._pieces(a, b)) for a, b in ranges]
        if self._local:
            flat = [np.asarray(self._map(i)[a:b]) for ps in pieces for i, a, b in ps]
        else:
            paths, starts, ends = [], [], []
            for ps in pieces:
                for i, a, b in ps:
                    p, offset, dtype, _ = self._parts[i]
                    paths.append(p)
                    starts.append(offset + a * dtype.itemsize)
                    ends.append(offset + b * dtype.itemsize)
            blobs = self._fs.cat_ranges(paths, starts, ends)
            flat, k = [], 0
            for ps in pieces:
                for i, _, _ in ps:
                    flat.append(np.frombuffer(blobs[k], dtype=self._parts[i][2]))
                    k += 1
        out, k = [], 0
        for ps in pieces:
            chunk = flat[k:k + len(ps)]
            k += len(ps)
            out.append(np.concatenate(chunk).astype(np.int32) if chunk else np.zeros(0, np.int32))
        return out
