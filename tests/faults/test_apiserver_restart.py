"""The API server restarted in the middle of a burst (every connection dropped, connections
refused for a second, every object kept): every job still ends right, each child created once."""

from __future__ import annotations

import time

import pytest

from tests.faults.conftest import (
    assert_every_job_ended_right,
    count,
    create_jobs,
    operator_requests,
    wait_until_ended,
)
from tests.operator.conftest import JOBSETS, start_operator
from tests.support.apiserver import wait_for

pytestmark = pytest.mark.integration
VALID = [f"rs-{i:02d}" for i in range(40)]
INVALID = ["rs-bad"]


def test_every_job_ends_right_when_the_api_server_restarts_mid_burst(cluster):
    create_jobs(cluster, VALID, INVALID)  # all there when the operator starts: one burst
    op = start_operator(cluster, workers=1)
    try:
        wait_for(lambda: count(cluster, JOBSETS) >= 3, timeout=30, interval=0.02,
                 message="the first JobSets")
        restarted_at = time.monotonic()
        cluster.server.restart(down_s=1.0)
        done_at_restart = count(cluster, JOBSETS)
        assert done_at_restart < len(VALID), "the burst was over before the restart"
        wait_until_ended(cluster, VALID, INVALID, timeout=45)
        # Both watches are opened again (kopf backs off between attempts, so this may come
        # after the burst is over: the jobs were already in the operator's caches).
        wait_for(lambda: {r.resource for r in operator_requests(cluster)
                          if r.at > restarted_at and r.verb == "watch" and r.status == 200}
                 >= {"tputrainingjobs", "jobsets"}, timeout=30,
                 message="both watches to be opened again")
    finally:
        op.stop()
    assert_every_job_ended_right(cluster, VALID, INVALID)
    # The burst went on across the restart.
    after = [r for r in operator_requests(cluster) if r.at > restarted_at]
    assert any(r.verb == "create" and r.resource == "jobsets" for r in after)
