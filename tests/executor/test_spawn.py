"""Container processes go with the process that started them, even a SIGKILLed one, and not
with the thread that asked for them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tests.executor.conftest import is_alive
from tests.support.apiserver import wait_for
from tpujob.local.executor.spawn import popen_tied

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux prctl")

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_children_die_with_a_sigkilled_parent(tmp_path):
    script = textwrap.dedent(f"""
        import subprocess, sys, time
        from tpujob.local.executor.spawn import popen_tied
        procs = [popen_tied({SLEEPER!r}, start_new_session=True) for _ in range(2)]
        print(" ".join(str(p.pid) for p in procs), flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and all(is_alive(p) for p in pids)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        wait_for(lambda: not any(is_alive(p) for p in pids), timeout=10,
                 message="the children to go with their parent")
    finally:
        parent.kill()
        for pid in pids if "pids" in locals() else []:
            if is_alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_child_outlives_the_thread_that_asked_for_it():
    started: list[subprocess.Popen] = []
    thread = threading.Thread(target=lambda: started.append(
        popen_tied(SLEEPER, start_new_session=True)))
    thread.start()
    thread.join()
    (proc,) = started
    try:
        time.sleep(0.5)  # a parent-death signal tied to the asking thread would have come
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_program_that_cannot_start_raises_as_popen_does(tmp_path):
    with pytest.raises(FileNotFoundError):
        popen_tied([str(tmp_path / "missing")])
