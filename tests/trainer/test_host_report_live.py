"""The host reports of a real 2-process job (the CLI, 2 x 4 CPU devices wired with
jax.distributed): process 1 is slowed by a sleep in each step's host work
(TPUJOB_FAULT_STEP_SLEEP_S); read from both processes' stdout by the operator's reader, it has
the larger busy time, process 0 the larger wait, and the straggler scores name it alone."""

from __future__ import annotations

from statistics import median

import pytest

from tests.trainer.helpers import TINY_YAML, run_two_processes
from tpujob.controller.host_reports import read_host_reports
from tpujob.controller.stragglers import score_hosts

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Enough steps past the warm-up (2) for a score (10); the sleep is many times a tiny step's own
# host work, so the relation holds on a loaded machine.
STEPS = 20
SLEEP_S = "0.1"


def test_a_slowed_process_has_the_larger_busy_time_and_is_the_one_flagged(tmp_path):
    args = ["--config", str(TINY_YAML), f"train.steps={STEPS}", "metrics.measure_peak=false",
            "metrics.port=null", "checkpoint.enabled=false",
            "mesh.ici={data: 2, fsdp: 2, tensor: 2}", f"output={tmp_path}/out"]
    results = run_two_processes(args, tmp_path, env=[
        {"TPUJOB_HOST_REPORT_INTERVAL_S": "1"},
        {"TPUJOB_HOST_REPORT_INTERVAL_S": "1", "TPUJOB_FAULT_STEP_SLEEP_S": SLEEP_S}])
    assert [r[0] for r in results] == [0, 0], results[0][2][-2000:] + results[1][2][-2000:]
    reports = read_host_reports(results[0][1] + results[1][1])
    fast, slow = "slice-0/host-0", "slice-0/host-1"
    assert reports.unreadable == 0 and list(reports.samples) == [fast, slow]
    for host in (fast, slow):
        assert [s.step for s in reports.samples[host]] == list(range(1, STEPS + 1))
        beat = reports.beats[host]
        assert (beat.phase, beat.step) == ("step", STEPS)

    def steady(host, figure):
        return median(figure(s) for s in reports.samples[host][2:])

    busy, wait = (lambda s: s.busy_s), (lambda s: s.total_s - s.busy_s)
    assert steady(slow, busy) > steady(fast, busy)
    assert steady(fast, wait) > steady(slow, wait)
    scores = {s.host: s for s in score_hosts(reports.samples)}
    assert (scores[fast].flagged, scores[slow].flagged) == (False, True), scores
