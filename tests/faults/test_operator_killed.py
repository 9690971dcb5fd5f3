"""The operator process killed with SIGKILL in the middle of a burst (no clean-up of any kind:
requests cut half-way, a JobSet created but its status never written) and started again: the
new process finishes every job exactly once: one JobSet and one ConfigMap each, created once,
at most one Created and one Starting Event each."""

from __future__ import annotations

import signal

import pytest

from tests.faults.conftest import (
    assert_every_job_ended_right,
    count,
    create_jobs,
    phases,
    spawn_operator,
    wait_until_ended,
)
from tests.operator.conftest import JOBSETS
from tests.support.apiserver import wait_for

pytestmark = pytest.mark.integration
VALID = [f"kill-{i:02d}" for i in range(40)]
INVALID = ["kill-bad"]


def test_an_operator_killed_mid_burst_finishes_every_job_exactly_once(cluster, tmp_path):
    create_jobs(cluster, VALID, INVALID)
    log = tmp_path / "operator.log"
    first = spawn_operator(cluster, log, workers=4)
    try:
        def starting() -> int:
            return list(phases(cluster).values()).count("Starting")
        wait_for(lambda: starting() >= 4 or first.poll() is not None, timeout=60,
                 interval=0.02, message="the first jobs to start")
        # From now on the status writes hang: the jobs being worked on get their children but
        # no status, the state a kill between the two leaves behind.
        cluster.server.set_faults(timeout_rate=1.0, timeout_hold_s=30, verbs={"patch"},
                                  resources={"tputrainingjobs/status"},
                                  user_agent="OpenAPI-Generator")
        wait_for(lambda: count(cluster, JOBSETS) > starting() or first.poll() is not None,
                 timeout=30, interval=0.02, message="a JobSet whose status is not written")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        assert first.returncode == -signal.SIGKILL, log.read_text()[-3000:]
        made, started = count(cluster, JOBSETS), starting()
    finally:
        if first.poll() is None:
            first.kill()
        cluster.server.set_faults()
    # Some jobs done, some with children and no status, some not begun.
    assert 0 < started < made < len(VALID), (started, made)
    second = spawn_operator(cluster, log)
    try:
        wait_until_ended(cluster, VALID, INVALID, timeout=60)
    finally:
        second.terminate()
        second.wait(15)
    assert_every_job_ended_right(cluster, VALID, INVALID)
