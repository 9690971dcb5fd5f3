"""A container start's processes found by the marker they inherit, and killed, in its process
group or not; other starts' processes, and processes without the marker, left alone."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from tests.executor.conftest import is_alive
from tests.support.apiserver import wait_for
from tpujob.local.executor import leftovers

pytestmark = pytest.mark.unit

# Starts a sleeper in a session of its own (as torchrun starts its workers), prints its pid,
# and exits: the sleeper is what the container leaves behind.
DETACH = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
          "'import time; time.sleep(600)'], start_new_session=True, "
          "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid, flush=True)")


def _leave_behind(marker: str | None) -> int:
    """The pid of a detached sleeper started by a process that carried `marker` (None: no
    marker at all), that process already gone."""
    env = {k: v for k, v in os.environ.items() if k != leftovers.MARKER}
    if marker is not None:
        env[leftovers.MARKER] = marker
    out = subprocess.run([sys.executable, "-c", DETACH], env=env, capture_output=True,
                         text=True, check=True).stdout
    pid = int(out)
    assert is_alive(pid)
    return pid


@pytest.fixture
def sleepers():
    pids: list[int] = []
    yield pids
    for pid in pids:  # whatever a failed test left
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def test_what_a_start_left_running_is_killed_and_nothing_else(sleepers):
    pod, other = str(uuid.uuid4()), str(uuid.uuid4())
    mine = leftovers.marker_value(pod, "trainer", 0)
    left = _leave_behind(mine)
    restarted = _leave_behind(leftovers.marker_value(pod, "trainer", 1))
    other_pod = _leave_behind(leftovers.marker_value(other, "trainer", 0))
    unmarked = _leave_behind(None)
    sleepers.extend([left, restarted, other_pod, unmarked])
    assert list(leftovers.marked(mine)) == [left]
    assert leftovers.kill_marked(mine) == [left]
    wait_for(lambda: not is_alive(left), timeout=10, interval=0.01,
             message="the left-behind process to die")
    assert all(is_alive(pid) for pid in (restarted, other_pod, unmarked))
    assert leftovers.kill_marked(mine) == []


def test_a_marker_is_matched_whole():
    assert leftovers.marker_value("u", "c", 3) == "u/c/3"
    pid = os.getpid()
    # This process is never its own leftover, whatever its environment says.
    assert pid not in leftovers.marked(os.environ.get(leftovers.MARKER, "none"))


def test_a_prefix_of_a_marker_is_not_the_marker(sleepers):
    pod = str(uuid.uuid4())
    longer = _leave_behind(leftovers.marker_value(pod, "trainer", 10))
    sleepers.append(longer)
    assert leftovers.kill_marked(leftovers.marker_value(pod, "trainer", 1)) == []
    assert is_alive(longer)
