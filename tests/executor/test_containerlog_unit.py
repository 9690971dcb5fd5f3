"""A container's log, written from its stdout's and stderr's pipes as a runtime writes CRI
records: line by line, a line of one stream never cut by the other's, each line with its time;
a line over MAX_LINE written in pieces rather than held."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import termios
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.apiserver import wait_for
from tpujob.local import containerlog

pytestmark = pytest.mark.unit

OUT, ERR = "out", "err"
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z")


def _unread(fd: int) -> int:
    """Bytes in a pipe that its reader has not read yet."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]


@contextmanager
def _pumping(log: Path) -> Iterator[tuple[int, int]]:
    """The write ends of a container's stdout and stderr, pumped into `log` until the block
    ends (the streams closed then, and the pump waited for)."""
    (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
    pump = threading.Thread(target=containerlog.pump, args=((out_r, err_r), log))
    pump.start()
    try:
        yield out_w, err_w
    finally:
        os.close(out_w)
        os.close(err_w)
        pump.join()


def _pumped(tmp_path, writes: list[tuple[str, bytes]]) -> tuple[bytes, list[str]]:
    """The log and its times after `writes` (stream, bytes), each read by the pump before the
    next is written (so in that order), then both streams closed."""
    log = tmp_path / "0.log"
    with _pumping(log) as (out_w, err_w):
        for stream, data in writes:
            os.write(out_w if stream == OUT else err_w, data)
            wait_for(lambda: _unread(out_w) == _unread(err_w) == 0, timeout=10,
                     interval=0.001, message="the pump to read the write")
    return log.read_bytes(), containerlog.times_path(log).read_text().splitlines()


@pytest.mark.parametrize(("writes", "expected"), [
    # torchrun's worker under `python -u`: the text, then its newline; the launcher's line
    # written between the two goes before the worker's line, not into it.
    ([(OUT, b'{"step": 20}'), (ERR, b"[W] Received 15 death signal\n"), (OUT, b"\n")],
     b'[W] Received 15 death signal\n{"step": 20}\n'),
    ([(OUT, b"a\nb"), (ERR, b"c\n"), (OUT, b"\nd\n")], b"a\nc\nb\nd\n"),
    ([(OUT, b"one\n"), (OUT, b"two\n")], b"one\ntwo\n"),
    ([(ERR, b"e"), (OUT, b"o"), (ERR, b"1\n"), (OUT, b"1\n")], b"e1\no1\n"),
    # A stream that ends without its newline: the rest of its line as it is, at its end.
    ([(ERR, b"x\n"), (OUT, b"last")], b"x\nlast"),
    ([], b""),
])
def test_lines_of_two_streams_are_never_cut(tmp_path, writes, expected):
    log, times = _pumped(tmp_path, writes)
    assert log == expected
    assert len(times) == len(log.splitlines())
    assert all(STAMP.fullmatch(t) for t in times)


def test_each_line_gets_the_time_it_was_written(tmp_path):
    log, times = _pumped(tmp_path, [(OUT, b"first"), (ERR, b"e1\ne2\n"), (OUT, b"\n")])
    assert log.splitlines() == [b"e1", b"e2", b"first"]
    assert len(times) == 3 and times == sorted(times)
    lines, end = containerlog.read_lines(tmp_path / "0.log")
    assert [line for _, line in lines] == log.splitlines(keepends=True) and end == len(log)
    assert [time for time, _ in lines] == times


@pytest.mark.parametrize("length", [containerlog.MAX_LINE, containerlog.MAX_LINE + 10])
def test_a_line_of_max_line_or_more_is_written_before_it_ends(tmp_path, length):
    log = tmp_path / "0.log"
    with _pumping(log) as (out_w, _):
        os.write(out_w, b"x" * length)
        # Written while the stream is still open and its line unfinished: not held whole.
        wait_for(lambda: log.exists() and log.stat().st_size == length,
                 timeout=10, interval=0.01, message="the long line's first piece")
        os.write(out_w, b"y\n")
    assert log.read_bytes() == b"x" * length + b"y\n"
    assert len(containerlog.times_path(log).read_text().splitlines()) == 1


def test_whole_lines_before_a_short_rest_are_written_and_the_rest_waits(tmp_path):
    long = b"a" * containerlog.MAX_LINE + b"\n"
    log, _ = _pumped(tmp_path, [(OUT, long + b"part"), (ERR, b"e\n"), (OUT, b"\n")])
    assert log == long + b"e\npart\n"


def test_lines_are_in_the_log_while_the_container_runs(tmp_path):
    log = tmp_path / "0.log"
    with _pumping(log) as (out_w, err_w):
        os.write(err_w, b"e1\ne2\n")
        os.write(out_w, b"o1\nunfinished")
        # Each with its own time, written before the line itself.
        wait_for(lambda: len(containerlog.read_lines(log)[0]) == 3, timeout=10, interval=0.01,
                 message="three lines read back")
        assert len(containerlog.times_path(log).read_text().splitlines()) == 3
        assert sorted(line for _, line in containerlog.read_lines(log)[0]) == \
            [b"e1\n", b"e2\n", b"o1\n"]


def test_read_back_without_times_and_with_a_last_line_unfinished(tmp_path):
    log = tmp_path / "0.log"
    log.write_bytes(b"one\ntwo")  # no times file: each line gets the time it is read
    lines = containerlog.read_rest(log)
    assert [line for _, line in lines] == [b"one\n", b"two"]
    assert all(STAMP.fullmatch(t) for t, _ in lines)
    assert [line for _, line in containerlog.read_lines(log)[0]] == [b"one\n"]
    assert containerlog.read_lines(log)[1] == 4
    assert [line for _, line in containerlog.read_rest(log, 4)] == [b"two"]


def test_the_pipes_are_closed_when_the_streams_end(tmp_path):
    (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
    os.close(out_w)
    os.close(err_w)
    containerlog.pump((out_r, err_r), tmp_path / "0.log")
    for fd in (out_r, err_r):
        with pytest.raises(OSError):
            os.fstat(fd)
