"""Status models: serialization as Kubernetes writes it, phases, and the condition helper."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from tpujob.api import (
    Condition,
    ConditionStatus,
    Failure,
    FailureReason,
    Phase,
    Progress,
    SliceStatus,
    TpuTrainingJobStatus,
    build_conditions,
    find_condition,
    format_errors,
)
from tpujob.api.status import Badput, Goodput, HostScoreStatus, HostsStatus, display_of

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 21, 4, 0, 0, tzinfo=UTC)


def sample_status() -> TpuTrainingJobStatus:
    """A running job's status with every printer-column field set."""
    return TpuTrainingJobStatus(
        phase=Phase.RUNNING, observed_generation=1,
        conditions=[Condition(type="Valid", status=ConditionStatus.TRUE, reason="Planned",
                              message="4 hosts", last_transition_time=T0,
                              observed_generation=1)],
        slice=SliceStatus(topology="4x4", machine_type="ct6e-standard-4t", hosts=4, chips=16,
                          devices=16, processes=4),
        restarts=1,
        progress=Progress(step=120, total_steps=1000, loss=2.75, step_time_seconds=0.5,
                          tokens_per_second_per_device=8192.0, tflops_per_device=410.5,
                          mfu=0.447, last_checkpoint_step=100, last_update_time=T0, last_step_time=T0,
                          display=display_of(2.75, 8192.0, 0.447, 410.5)),
        failure=Failure(reason=FailureReason.PREEMPTED, message="node pool upgraded"),
        reason="Preempted",
        goodput=Goodput(percent=91.5, display="91.5%", productive_seconds=915.0,
                        wall_seconds=1000.0,
                        badput=Badput(program_startup=40.0, other=45.0)),
        hosts=HostsStatus(reporting=4, scored=4, slow_host="slice-0/host-3",
                          display="slice-0/host-3 0.81", message="host slice-0/host-3 at 0.81",
                          slowest=[HostScoreStatus(host="slice-0/host-3", score=0.81,
                                                   vs_fastest=0.81, vs_own_best=1.0,
                                                   busy_seconds=0.12, step_seconds=0.5, steps=40,
                                                   flagged=True)]),
        start_time=T0)


def test_status_serializes_camel_case_with_kubernetes_times():
    d = sample_status().to_dict()
    assert d["phase"] == "Running"
    assert d["slice"] == {"topology": "4x4", "machineType": "ct6e-standard-4t", "hosts": 4,
                          "chips": 16, "devices": 16, "processes": 4}
    assert d["progress"]["tokensPerSecondPerDevice"] == 8192.0
    assert d["progress"]["lastUpdateTime"] == "2026-11-21T04:00:00Z"
    assert d["conditions"][0]["lastTransitionTime"] == "2026-11-21T04:00:00Z"
    assert "completionTime" not in d


def test_times_are_converted_to_utc_seconds():
    east = timezone(timedelta(hours=2))
    p = Progress(step=1, last_update_time=datetime(2026, 1, 1, 2, 0, 0, 123456, tzinfo=east))
    assert p.to_dict()["lastUpdateTime"] == "2026-01-01T00:00:00Z"


def test_status_round_trips():
    d = sample_status().to_dict()
    assert TpuTrainingJobStatus.model_validate(d).to_dict() == d


def test_empty_status_defaults():
    assert TpuTrainingJobStatus().to_dict() == {"phase": "Pending", "conditions": [],
                                                "restarts": 0, "stallRestarts": 0,
                                                "jobsetRestarts": 0}


@pytest.mark.parametrize("phase, terminal", [
    (Phase.PENDING, False), (Phase.RUNNING, False), (Phase.RESTARTING, False),
    (Phase.SUSPENDED, False), (Phase.SUCCEEDED, True), (Phase.FAILED, True),
    (Phase.INVALID, True),
])
def test_terminal_phases(phase, terminal):
    assert phase.is_terminal is terminal


@pytest.mark.parametrize("data, field", [
    ({"phase": "Exploded"}, "phase"),
    ({"restarts": -1}, "restarts"),
    ({"progress": {"step": -5}}, "progress.step"),
    ({"progress": {"mfu": -0.1}}, "progress.mfu"),
    ({"failure": {"reason": "Gremlins"}}, "failure.reason"),
    ({"conditions": [{"type": "Valid", "status": "Maybe", "reason": "X",
                      "lastTransitionTime": "2026-01-01T00:00:00Z"}]}, "conditions[0].status"),
    ({"conditions": [{"type": "Valid", "status": "True", "reason": "has space",
                      "lastTransitionTime": "2026-01-01T00:00:00Z"}]}, "conditions[0].reason"),
])
def test_invalid_status_names_field(data, field):
    with pytest.raises(ValidationError) as err:
        TpuTrainingJobStatus.model_validate(data)
    lines = format_errors(err.value, prefix="status")
    assert any(line.startswith(f"status.{field}:") for line in lines), lines


def _cond(type_, status, at, reason="R"):
    return Condition(type=type_, status=status, reason=reason, last_transition_time=at)


def test_build_conditions_appends_new_type():
    out = build_conditions([_cond("Valid", ConditionStatus.TRUE, T0)],
                           _cond("Running", ConditionStatus.TRUE, T0))
    assert [c.type for c in out] == ["Valid", "Running"]


def test_build_conditions_keeps_transition_time_when_status_unchanged():
    later = T0 + timedelta(minutes=5)
    out = build_conditions([_cond("Running", ConditionStatus.TRUE, T0, reason="A")],
                           _cond("Running", ConditionStatus.TRUE, later, reason="B"))
    assert len(out) == 1
    assert out[0].last_transition_time == T0
    assert out[0].reason == "B"


def test_build_conditions_moves_transition_time_when_status_changes():
    later = T0 + timedelta(minutes=5)
    out = build_conditions([_cond("Valid", ConditionStatus.TRUE, T0),
                            _cond("Running", ConditionStatus.TRUE, T0)],
                           _cond("Running", ConditionStatus.FALSE, later))
    assert [c.type for c in out] == ["Valid", "Running"]
    assert out[1].last_transition_time == later
    assert out[1].status == ConditionStatus.FALSE
    assert find_condition(out, "Running") is out[1]
    assert find_condition(out, "Stalled") is None


@pytest.mark.parametrize("tflops, shown", [
    (0.010008215474622838, "0.0100"), (197.3456, "197"), (41.04, "41.0"), (5.4321, "5.43"),
    (1234.5, "1234"), (0.0, "0"), (None, None)])
def test_tflops_print_with_three_significant_digits(tflops, shown):
    assert display_of(2.0, 100.0, None, tflops).tflops_per_device == shown


def test_mfu_prints_only_against_a_known_peak():
    assert display_of(2.0, 100.0, 0.447, 410.5).mfu == "44.7%"
    assert display_of(2.0, 100.0, 2.2e-05, 0.02).mfu == "0.0022%"
    # No peak (a CPU, or a trainer that does not say): a dash, not a figure.
    assert display_of(2.0, 100.0, None, 0.02).mfu == "-"
