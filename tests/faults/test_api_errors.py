"""The operator through an API server that fails requests: a fifth of every request (kopf's
lists and watches included) answered 500, 503 or 429 with Retry-After; and, separately, replies
lost after the write was stored. Every job still ends in the right phase with its whole status,
and no JobSet or ConfigMap is created twice."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.faults.conftest import (
    assert_every_job_ended_right,
    count,
    operator_requests,
    run_burst_through_faults,
)
from tests.operator.conftest import JOBSETS

pytestmark = pytest.mark.integration
VALID = [f"err-{i:02d}" for i in range(16)]
INVALID = ["err-bad"]


def test_every_job_ends_right_through_20_percent_errors(cluster):
    run_burst_through_faults(cluster, VALID, INVALID, error_rate=0.2,
                             error_codes=(500, 503, 429), retry_after_s=1, seed=7)
    assert_every_job_ended_right(cluster, VALID, INVALID)
    # The faults reached the operator's own writes, with every code (about a fifth of some
    # 90 writes fail; fewer than 5 would mean the faults missed the operator).
    failed = [r for r in operator_requests(cluster) if r.fault == "error"]
    writes = Counter(r.resource for r in failed if r.verb in ("create", "patch"))
    assert sum(writes.values()) >= 5, writes
    assert {r.status for r in failed} == {500, 503, 429}


def test_replies_lost_after_the_write_create_nothing_twice(cluster):
    # Half of the operator's writes are stored but never answered: it must find what it made
    # (a JobSet it already created is adopted, not created again or taken for someone else's).
    run_burst_through_faults(cluster, VALID, INVALID, timeout_rate=0.5, timeout_hold_s=0.1,
                             timeout_after_commit=True, verbs={"create", "patch"},
                             user_agent="OpenAPI-Generator", seed=3)
    # A lost reply leaves no 201 in the log though the object was stored: count objects.
    assert_every_job_ended_right(cluster, VALID, INVALID, creates_logged=False)
    lost = Counter(r.resource for r in operator_requests(cluster) if r.fault == "timeout")
    assert lost["jobsets"] > 0 and lost["tputrainingjobs/status"] > 0, lost
    answered = [r for r in operator_requests(cluster) if r.verb == "create" and
                r.resource == "jobsets" and r.fault is None]
    # Every JobSet create either stored it (201) or found it there (409), never a second one.
    assert {r.status for r in answered} <= {201, 409}
    assert count(cluster, JOBSETS) == len(VALID)
