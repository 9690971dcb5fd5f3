"""A process's stacks on request (`GET /stacks`): every thread, the main one first, answered
while the main thread is blocked; written to stderr between markers and to
`<output>/stacks/<label>/<host>.txt`; a label that is not a short name refused; an output that
cannot be written still answers with the stacks; the endpoint without a dumper has no /stacks."""

from __future__ import annotations

import io
import json
import threading
import urllib.error
import urllib.request

import pytest

from tpujob_trainer.env import ProcessEnv
from tpujob_trainer.telemetry.server import Progress, ProgressServer
from tpujob_trainer.telemetry.stacks import BEGIN, END, StackDumper, format_stacks

pytestmark = pytest.mark.unit
BIND = "127.0.0.2"


def waiting_here(started: threading.Event, release: threading.Event) -> None:
    started.set()
    release.wait(30)


def test_every_thread_with_its_name_the_main_thread_first():
    started, release = threading.Event(), threading.Event()
    worker = threading.Thread(target=waiting_here, args=(started, release), name="a-worker")
    worker.start()
    started.wait(10)
    try:
        text = format_stacks()
    finally:
        release.set()
        worker.join()
    assert text.startswith(f'Thread "MainThread" ({threading.main_thread().ident}) (main):')
    assert 'Thread "a-worker"' in text and "in waiting_here" in text
    assert "in test_every_thread_with_its_name_the_main_thread_first" in text


def test_the_stacks_go_to_stderr_and_the_output_and_back(tmp_path):
    err = io.StringIO()
    dump = StackDumper("slice-0/host-1", str(tmp_path / "out") + "/", err=err,
                       clock=lambda: 12.3456, format_=lambda: "the stacks\n")
    answer = dump("restart-1")
    dump.saving.join(10)
    saved = tmp_path / "out" / "stacks" / "restart-1" / "slice-0-host-1.txt"
    assert answer == {"host": "slice-0/host-1", "time": 12.346, "stacks": "the stacks\n",
                      "saved": str(saved)}
    assert saved.read_text() == "the stacks\n"
    assert err.getvalue() == f"{BEGIN.format('restart-1')}\nthe stacks\n{END}\n"
    # Without a label, nothing is saved; the log says it was on request.
    answer = dump(None)
    assert answer["saved"] is None and BEGIN.format("on request") in err.getvalue()


def test_no_output_or_an_unwritable_one_still_answers(tmp_path):
    assert StackDumper("h", None, err=io.StringIO())("x")["saved"] is None
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    err = io.StringIO()
    dump = StackDumper("h", str(blocked), err=err, format_=lambda: "s")
    answer = dump("x")
    dump.saving.join(10)
    assert answer["stacks"] == "s"
    assert f"tpujob: the stacks were not saved to {blocked}/stacks/x/h.txt: " in err.getvalue()


def test_a_failed_save_is_said_in_one_bounded_line(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    err = io.StringIO()
    dump = StackDumper("h" * 700, str(blocked), err=err, format_=lambda: "s")
    dump("x")
    dump.saving.join(10)
    [line] = err.getvalue().splitlines()[-1:]
    assert len(line) == 599 and err.getvalue().endswith("\n")   # 600 with the newline


@pytest.mark.parametrize("label", ["", "../etc", "a/b", "x" * 64, "-lead"])
def test_a_label_that_is_not_a_short_name_is_refused(label):
    with pytest.raises(ValueError, match="must be 1 to 63 letters"):
        StackDumper("h", None, err=io.StringIO())(label)


def test_the_endpoint_answers_while_the_main_thread_is_blocked(tmp_path):
    dump = StackDumper(ProcessEnv(process_id=1, process_count=2, host_index=1,
                                  coordinator_address="h:1").host_name, str(tmp_path),
                       err=io.StringIO())
    server = ProgressServer(Progress(), 0, host=BIND, stacks=dump)
    answers: list[dict] = []

    def ask(query: str) -> None:
        url = f"http://{BIND}:{server.port}/stacks{query}"
        with urllib.request.urlopen(url, timeout=10) as r:
            answers.append(json.loads(r.read()))

    try:
        asker = threading.Thread(target=ask, args=("?label=hang-1",))
        asker.start()
        asker.join(30)   # this (main) thread blocks in join while the server answers
        assert answers[0]["host"] == "slice-0/host-1"
        assert "in test_the_endpoint_answers_while_the_main_thread_is_blocked" in \
            answers[0]["stacks"]
        dump.saving.join(10)
        assert (tmp_path / "stacks" / "hang-1" / "slice-0-host-1.txt").exists()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://{BIND}:{server.port}/stacks?label=a/b", timeout=10)
        assert refused.value.code == 400
    finally:
        server.close()
    bare = ProgressServer(Progress(), 0, host=BIND)
    try:
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://{BIND}:{bare.port}/stacks", timeout=10)
        assert missing.value.code == 404
    finally:
        bare.close()


@pytest.mark.parametrize("env, want", [
    ({}, "slice-0/host-0"),
    ({"TPUJOB_PROCESS_ID": "3", "TPUJOB_PROCESS_COUNT": "8", "TPUJOB_COORDINATOR_ADDRESS": "h:1",
      "TPUJOB_CONTAINERS_PER_HOST": "2", "TPUJOB_NUM_SLICES": "2", "TPUJOB_SLICE_ID": "1"},
     "slice-1/host-1/container-1"),
])
def test_the_host_is_named_as_the_operator_names_it(env, want):
    assert ProcessEnv.from_env(env).host_name == want
