"""Data sources: determinism, process sharding, resume, exhaustion, formats, tokenizers, errors."""

from __future__ import annotations

import json
import re

import fsspec
import numpy as np
import pytest

from tpujob_trainer.config.data import DataConfig
from tpujob_trainer.data import (
    ByteTokenizer,
    DataError,
    DataExhausted,
    build_data_source,
    build_tokenizer,
)

SEQ = 8


def source(cfg: DataConfig, *, batch=4, p=0, n=1, seed=0, vocab=257, seq=SEQ):
    return build_data_source(cfg, seq_len=seq, global_batch=batch, vocab_size=vocab,
                             process_index=p, process_count=n, seed=seed)


def batches(src, k):
    return [src.next_batch() for _ in range(k)]


def write_corpus(root, *, docs=40) -> list[str]:
    texts = [f"document {i}: " + "héllo wörld " * (i % 5 + 1) for i in range(docs)]
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "corpus.jsonl", "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t, "id": 1}) + "\n\n")
    tdir = root / "text"
    tdir.mkdir(exist_ok=True)
    for i, t in enumerate(texts):
        (tdir / f"doc{i:03d}.txt").write_text(t)
    tokens = np.concatenate([np.append(ByteTokenizer().encode(t), 256) for t in texts])
    np.save(root / "part0.npy", tokens[:900].astype(np.uint16))
    tokens[900:].astype(np.uint32).tofile(root / "part1.bin")
    return texts


@pytest.fixture
def corpus(tmp_path):
    texts = write_corpus(tmp_path)
    return tmp_path, texts


def configs(root):
    return {
        "synthetic": DataConfig(),
        "text": DataConfig(kind="text", path=str(root / "text")),
        "jsonl": DataConfig(kind="jsonl", path=str(root / "corpus.jsonl")),
        "tokens_npy": DataConfig(kind="tokens", path=str(root / "part0.npy")),
        "tokens_multi": DataConfig(kind="tokens", path=str(root / "part*"), token_dtype="uint32"),
    }


KINDS = ["synthetic", "text", "jsonl", "tokens_npy"]


@pytest.mark.unit
def test_synthetic_is_deterministic_in_range_and_seeded():
    a, b = source(DataConfig()), source(DataConfig())
    x, y = batches(a, 3), batches(b, 3)
    assert all(np.array_equal(u, v) for u, v in zip(x, y, strict=True))
    assert x[0].dtype == np.int32 and x[0].shape == (4, SEQ + 1)
    assert 0 <= min(u.min() for u in x) and max(u.max() for u in x) < 257
    assert not np.array_equal(x[0], x[1])
    assert not np.array_equal(x[0], source(DataConfig(), seed=1).next_batch())
    assert np.array_equal(source(DataConfig(seed=5), seed=0).next_batch(),
                          source(DataConfig(), seed=5).next_batch())


@pytest.mark.unit
def test_synthetic_ramp_is_learnable_pattern():
    x = source(DataConfig(synthetic_pattern="ramp"), vocab=100).next_batch()
    d = np.diff(x.astype(np.int64), axis=1) % 100
    assert (d == d[:, :1]).all() and (d[:, 0] >= 1).all()


@pytest.mark.unit
@pytest.mark.parametrize("kind", KINDS + ["tokens_multi"])
@pytest.mark.parametrize("n", [2, 4])
def test_process_shards_union_is_the_one_process_batch(corpus, kind, n):
    cfg = configs(corpus[0])[kind]
    steps = 12  # crosses epoch boundaries for the file kinds
    whole = batches(source(cfg, batch=8), steps)
    parts = [batches(source(cfg, batch=8, p=p, n=n), steps) for p in range(n)]
    for k in range(steps):
        assert parts[0][k].shape == (8 // n, SEQ + 1)
        assert np.array_equal(np.concatenate([parts[p][k] for p in range(n)]), whole[k])


@pytest.mark.unit
@pytest.mark.parametrize("kind", KINDS)
def test_resume_gives_the_uninterrupted_batches(corpus, kind):
    cfg = configs(corpus[0])[kind]
    straight = batches(source(cfg, p=1, n=2), 14)
    first = source(cfg, p=1, n=2)
    batches(first, 5)
    saved = json.loads(json.dumps(first.state()))
    resumed = source(cfg, p=1, n=2)
    resumed.restore(saved)
    assert all(np.array_equal(a, b) for a, b in zip(batches(resumed, 9), straight[5:], strict=True))
    # the position does not depend on the process: another process resumes from the same state
    other = source(cfg, p=0, n=2)
    other.restore(saved)
    assert np.array_equal(other.next_batch(), batches(source(cfg, p=0, n=2), 6)[5])


@pytest.mark.unit
def test_restore_refuses_a_position_from_different_data(corpus):
    cfg = configs(corpus[0])["text"]
    src = source(cfg)
    src.next_batch()
    with pytest.raises(DataError, match="seq_len"):
        source(cfg, seq=SEQ * 2).restore(src.state())
    with pytest.raises(DataError, match="global_batch"):
        source(cfg, batch=8).restore(src.state())


def ramp_tokens(tmp_path, windows: int) -> str:
    """A token file whose window i starts with token i * SEQ: windows are told apart by it."""
    np.arange(windows * SEQ + 1, dtype=np.uint16).tofile(tmp_path / "ramp.bin")
    return str(tmp_path / "ramp.bin")


@pytest.mark.unit
def test_stop_raises_data_exhausted_after_one_epoch(tmp_path):
    cfg = DataConfig(kind="tokens", path=ramp_tokens(tmp_path, 43), on_exhausted="stop")
    src = source(cfg, batch=8, vocab=1000)
    assert (src.windows, src.batches_per_epoch) == (43, 5)
    seen = batches(src, 5)
    for _ in range(2):  # stays exhausted, and never a StopIteration
        with pytest.raises(DataExhausted, match="on_exhausted: stop"):
            src.next_batch()
    assert src.state()["step"] == 5
    firsts = [int(r[0]) // SEQ for b in seen for r in b]
    assert len(set(firsts)) == 40  # each window at most once, 3 remainder windows skipped
    # a source resumed at the end of the epoch is exhausted too
    again = source(cfg, batch=8, vocab=1000)
    again.restore(src.state())
    with pytest.raises(DataExhausted):
        again.next_batch()


@pytest.mark.unit
def test_repeat_starts_a_reshuffled_epoch_with_the_same_windows(tmp_path):
    cfg = DataConfig(kind="tokens", path=ramp_tokens(tmp_path, 40))
    src = source(cfg, batch=8, vocab=1000)
    e0, e1, e2 = (batches(src, 5) for _ in range(3))
    order = [[int(r[0]) // SEQ for b in e for r in b] for e in (e0, e1, e2)]
    assert all(sorted(o) == list(range(40)) for o in order)
    assert order[0] != order[1] != order[2]
    # the reshuffle is deterministic
    assert order[1] == [int(r[0]) // SEQ for b in batches(source(cfg, batch=8, vocab=1000), 10)[5:]
                        for r in b]


@pytest.mark.unit
def test_windows_pack_documents_with_eos_and_share_one_token(tmp_path):
    (tmp_path / "a.txt").write_text("abcdef")
    (tmp_path / "b.txt").write_text("XYZ")
    src = source(DataConfig(kind="text", path=str(tmp_path / "*.txt"), shuffle=False), batch=2, seq=4)
    b = src.next_batch()
    stream = list(b"abcdef") + [256] + list(b"XYZ") + [256]
    assert b.tolist() == [stream[0:5], stream[4:9]]


@pytest.mark.unit
def test_token_files_span_file_boundaries(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(0, 10, dtype=np.int32))
    np.arange(10, 30, dtype=np.uint16).tofile(tmp_path / "b.bin")
    src = source(DataConfig(kind="tokens", path=str(tmp_path), shuffle=False), batch=3, seq=4, vocab=64)
    assert src.next_batch().tolist() == [list(range(0, 5)), list(range(4, 9)), list(range(8, 13))]


@pytest.mark.unit
def test_errors_name_the_field(tmp_path):
    with pytest.raises(DataError, match=r"data\.path: no such file"):
        source(DataConfig(kind="text", path=str(tmp_path / "missing.txt")))
    with pytest.raises(DataError, match=r"data\.path: the pattern .* matched no files"):
        source(DataConfig(kind="text", path=str(tmp_path / "*.nothing")))
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"body": "x"}\n')
    with pytest.raises(DataError, match=r"data\.text_field: .*bad\.jsonl line 2 has no key 'text'"):
        source(DataConfig(kind="jsonl", path=str(tmp_path / "bad.jsonl")))
    (tmp_path / "small.txt").write_text("tiny")
    with pytest.raises(DataError, match="fewer than one global batch"):
        source(DataConfig(kind="text", path=str(tmp_path / "small.txt")))
    with pytest.raises(DataError, match=r"model\.vocab_size to at least 257"):
        source(DataConfig(kind="text", path=str(tmp_path / "small.txt")), vocab=256)
    np.array([1, 2, 3000] * 20, np.uint16).tofile(tmp_path / "big.bin")
    with pytest.raises(DataError, match="token id 3000"):
        source(DataConfig(kind="tokens", path=str(tmp_path / "big.bin"), shuffle=False), vocab=1000).next_batch()
    with pytest.raises(DataError, match="multiple of the number of processes"):
        source(DataConfig(), batch=6, n=4)
    with pytest.raises(ValueError, match=r"data\.path is required"):
        DataConfig(kind="jsonl")
    with pytest.raises(ValueError, match="extra"):
        DataConfig(kind="synthetic", bogus=1)


@pytest.mark.unit
def test_byte_tokenizer_round_trip():
    tok = build_tokenizer("byte")
    text = "Grüße, 世界! \n\t"
    ids = tok.encode(text)
    assert ids.dtype == np.int32 and ids.max() < 256 and tok.vocab_size == 257
    assert tok.decode(np.append(ids, tok.eos_id)) == text


def _train_hf_tokenizer(texts, path):
    """A small byte-level BPE tokenizer.json, as people train them (exact round trip)."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<pad>", "</s>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.save(str(path))


@pytest.mark.unit
def test_tokenizer_file_round_trip_and_packing(corpus):
    root, texts = corpus
    _train_hf_tokenizer(texts, root / "tokenizer.json")
    tok = build_tokenizer(str(root / "tokenizer.json"))
    assert tok.eos_id == 1 and 258 <= tok.vocab_size <= 300
    for t in texts[:5] + ["Grüße, 世界!"]:
        ids = tok.encode(t)
        assert tok.decode(ids) == t
    assert len(tok.encode(texts[4])) < len(texts[4].encode())  # merges were learned
    cfg = DataConfig(kind="jsonl", path=str(root / "corpus.jsonl"),
                     tokenizer=str(root / "tokenizer.json"), shuffle=False)
    stream = np.concatenate([np.append(tok.encode(t), 1) for t in texts])
    first = source(cfg, vocab=320).next_batch()
    assert first.tolist() == [stream[i * SEQ:i * SEQ + SEQ + 1].tolist() for i in range(4)]
    with pytest.raises(DataError, match=r"model\.vocab_size to at least"):
        source(cfg, vocab=257)
    with pytest.raises(DataError, match=r"data\.eos_token"):
        build_tokenizer(str(root / "tokenizer.json"), eos_token="<|nope|>")
    with pytest.raises(DataError, match=r"data\.tokenizer: no such tokenizer file"):
        build_tokenizer(str(root / "missing.json"))


@pytest.mark.unit
def test_a_tokenizer_that_adds_a_bos_token_and_has_added_tokens(corpus):
    """A tokenizer.json as Llama's are: a post-processor that puts `<s>` before every text, and a
    token added after training. The packed stream holds the documents' own tokens and the
    end-of-document token, no `<s>`; decoding keeps special tokens; the vocabulary counts the
    added token (model.vocab_size must cover its id)."""
    tokenizers = pytest.importorskip("tokenizers")
    root, texts = corpus
    _train_hf_tokenizer(texts, root / "plain.json")
    tok = tokenizers.Tokenizer.from_file(str(root / "plain.json"))
    tok.add_special_tokens(["<s>", "<|extra|>"])
    bos = tok.token_to_id("<s>")
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)])
    tok.save(str(root / "bos.json"))
    plain = build_tokenizer(str(root / "plain.json"))
    with_bos = build_tokenizer(str(root / "bos.json"))
    assert with_bos.vocab_size == tok.token_to_id("<|extra|>") + 1 == plain.vocab_size + 2
    assert with_bos.encode(texts[0]).tolist() == plain.encode(texts[0]).tolist()
    assert [x.tolist() for x in with_bos.encode_batch(texts[:3])] == \
        [plain.encode(t).tolist() for t in texts[:3]]
    assert with_bos.decode([bos, *plain.encode(texts[0])]) == "<s>" + texts[0]
    cfg = DataConfig(kind="jsonl", path=str(root / "corpus.jsonl"), tokenizer=str(root / "bos.json"),
                     shuffle=False)
    stream = np.concatenate([np.append(plain.encode(t), 1) for t in texts])
    first = source(cfg, vocab=320).next_batch()
    assert first.tolist() == [stream[i * SEQ:i * SEQ + SEQ + 1].tolist() for i in range(4)]


@pytest.mark.integration
def test_gcs_sources_equal_local_sources(corpus, gcs_emulator):
    root, texts = corpus
    _train_hf_tokenizer(texts, root / "tokenizer.json")
    prefix = gcs_emulator.fresh_prefix("data")
    fs, _ = fsspec.core.url_to_fs(prefix)
    for p in ["corpus.jsonl", "part0.npy", "part1.bin", "tokenizer.json"]:
        fs.put_file(str(root / p), f"{prefix}/{p}")
    for p in sorted((root / "text").glob("doc00*.txt")):
        fs.put_file(str(p), f"{prefix}/text/{p.name}")
    pairs = [
        (DataConfig(kind="jsonl", path=f"{prefix}/corpus.jsonl"),
         DataConfig(kind="jsonl", path=str(root / "corpus.jsonl"))),
        (DataConfig(kind="jsonl", path=f"{prefix}/corpus.jsonl", tokenizer=f"{prefix}/tokenizer.json"),
         DataConfig(kind="jsonl", path=str(root / "corpus.jsonl"), tokenizer=str(root / "tokenizer.json"))),
        (DataConfig(kind="text", path=f"{prefix}/text"),
         DataConfig(kind="text", path=str(root / "text" / "doc00*.txt"))),
        (DataConfig(kind="tokens", path=f"{prefix}/part*", token_dtype="uint32"),
         DataConfig(kind="tokens", path=str(root / "part*"), token_dtype="uint32")),
    ]
    for remote, local in pairs:
        for p in range(2):
            r, l_ = source(remote, p=p, n=2, vocab=320), source(local, p=p, n=2, vocab=320)
            assert all(np.array_equal(a, b) for a, b in zip(batches(r, 6), batches(l_, 6), strict=True))
    with pytest.raises(DataError, match=r"data\.path: no such file or directory: 'gs://"):
        source(DataConfig(kind="text", path=f"{prefix}/nothing-here"))


def _token_parts(fs, root: str) -> np.ndarray:
    """Three .npy parts and one .bin under `root`, and hidden files a reader must skip."""
    rng = np.random.default_rng(3)
    parts = [rng.integers(0, 300, n).astype(np.uint16) for n in (7, 3, 11)]
    for i, part in enumerate(parts):
        with fs.open(f"{root}/p{i}.npy", "wb") as f:
            np.save(f, part)
    tail = rng.integers(0, 300, 9).astype("<u4")
    with fs.open(f"{root}/p3.bin", "wb") as f:
        f.write(tail.tobytes())
    for hidden in (".p0.npy", "_SUCCESS", "_tmp.npy"):
        with fs.open(f"{root}/{hidden}", "wb") as f:
            f.write(b"not tokens")
    return np.concatenate([*parts, tail]).astype(np.int32)


@pytest.mark.unit
@pytest.mark.parametrize("where", ["local", "memory"])
def test_token_files_read_ranges_across_parts(tmp_path, where):
    """Ranges that span several parts, an empty one, read from local files (memory-mapped) and
    from a remote filesystem (ranged reads, several per call); hidden files skipped."""
    from tpujob_trainer.data.files import TokenFiles, list_files

    root = str(tmp_path) if where == "local" else f"memory://tokens-{tmp_path.name}"
    fs, _ = fsspec.core.url_to_fs(root)
    whole = _token_parts(fs, root)
    fs, files = list_files(root, suffixes=(".npy", ".bin"))
    assert [f.rsplit("/", 1)[-1] for f in files] == ["p0.npy", "p1.npy", "p2.npy", "p3.bin"]
    tokens = TokenFiles(fs, files, "uint32")
    assert len(tokens) == len(whole) == 30
    ranges = [(0, 30), (5, 12), (8, 8), (6, 22), (29, 30)]
    got = tokens.read_many(ranges)
    assert [g.dtype for g in got] == [np.int32] * len(ranges)
    assert [g.tolist() for g in got] == [whole[a:b].tolist() for a, b in ranges]


@pytest.mark.unit
@pytest.mark.parametrize("array", [np.zeros((2, 3), np.int32), np.zeros(4, np.float32)])
def test_a_npy_that_is_not_1d_integers_is_refused_naming_the_file(tmp_path, array):
    np.save(tmp_path / "bad.npy", array)
    with pytest.raises(DataError, match=r"^data\.path: " + re.escape(str(tmp_path / "bad.npy"))
                       + r" holds a \w+ array of shape .*; expected a 1-D integer array"):
        source(DataConfig(kind="tokens", path=str(tmp_path / "bad.npy")))


@pytest.mark.unit
def test_a_file_that_is_not_npy_is_refused_naming_it_as_given(tmp_path):
    (tmp_path / "bad.npy").write_bytes(b"not an array")
    with pytest.raises(DataError, match=r"^data\.path: " + re.escape(str(tmp_path / "bad.npy"))
                       + " is not a .npy file"):
        source(DataConfig(kind="tokens", path=str(tmp_path / "bad.npy")))
