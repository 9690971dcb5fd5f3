"""Hang detection, pure: timeouts learned per phase (5x the longest seen, the first step of an
attempt left out, the floors) or the defaults without history; a host silent past its phase's
timeout and a job that has not moved, each at and just past the boundary; which hosts are behind
(a step back, silent while others beat, none); and the restart budget after fruitless restarts."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from datetime import UTC, datetime, timedelta

import pytest

from tpujob.controller.hangs import (
    DEFAULT_TIMEOUT_S,
    FLOOR_S,
    BudgetVerdict,
    HangVerdict,
    HostBeat,
    HostPhase,
    judge_hang,
    judge_restart_budget,
)

pytestmark = pytest.mark.unit
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
STARTUP, COMPILE, STEP = HostPhase.STARTUP, HostPhase.COMPILE, HostPhase.STEP
SAVE, RESTORE = HostPhase.CHECKPOINT_SAVE, HostPhase.CHECKPOINT_RESTORE


def test_the_defaults_and_floors():
    assert DEFAULT_TIMEOUT_S == {STARTUP: 600, COMPILE: 1800, STEP: 600, SAVE: 1800,
                                 RESTORE: 1800}
    assert FLOOR_S == {STARTUP: 300, COMPILE: 300, STEP: 120, SAVE: 300, RESTORE: 300}


# Distinct timeouts, so that the phase judged shows in the one used.
T = {STARTUP: 600.0, COMPILE: 1800.0, STEP: 120.0, SAVE: 900.0, RESTORE: 300.0}


def beat(host: int, phase=STEP, step=100, silent=5.0, still=10.0) -> HostBeat:
    """Host `host` of slice 0, its last beat `silent` seconds ago, last moved `still` ago."""
    return HostBeat(f"slice-0/host-{host}", phase, step, NOW - timedelta(seconds=silent),
                    NOW - timedelta(seconds=still))


def hosts(n=4, **changed) -> list[HostBeat]:
    """n healthy hosts; `changed` maps a host index to the beat it has instead."""
    return [changed.get(f"h{i}", beat(i)) for i in range(n)]


@pytest.mark.parametrize("name, beats, want", [
    ("healthy", hosts(),
     (False, STEP, 120.0, (), "not hung: a host moved 10 s ago (step timeout 120 s)")),
    ("a heartbeat exactly at the step timeout: not yet", hosts(h3=beat(3, silent=120.0)),
     (False, STEP, 120.0, (), "not hung: a host moved 10 s ago (step timeout 120 s)")),
    ("a heartbeat past it: that host, silent while the others beat (SIGSTOP)",
     hosts(h3=beat(3, silent=121.0)),
     (True, STEP, 120.0, ("slice-0/host-3",),
      "hung in step: slice-0/host-3 silent for 121 s (step timeout 120 s); behind: "
      "slice-0/host-3 at step 100; the furthest host is at step 100")),
    ("no host moved for exactly the step timeout: not yet",
     [beat(i, still=120.0) for i in range(4)],
     (False, STEP, 120.0, (), "not hung: a host moved 120 s ago (step timeout 120 s)")),
    ("no host moved past it, all at one step and beating: no single host is behind",
     [beat(i, still=121.0) for i in range(4)],
     (True, STEP, 120.0, (),
      "hung in step: no host moved for 121 s (step timeout 120 s); every host at step 100 and "
      "beating: no single host is behind (a collective or a data wait)")),
    ("one host a step behind: it", [beat(i, step=99 if i == 2 else 100, still=121.0)
                                    for i in range(4)],
     (True, STEP, 120.0, ("slice-0/host-2",),
      "hung in step: no host moved for 121 s (step timeout 120 s); behind: slice-0/host-2 at "
      "step 99; the furthest host is at step 100")),
    ("every host silent: no single host is behind", [beat(i, silent=200.0) for i in range(3)],
     (True, STEP, 120.0, (),
      "hung in step: slice-0/host-0, slice-0/host-1, slice-0/host-2 silent for 200 s (step "
      "timeout 120 s); every host silent: no single host is behind (the job or its reporting "
      "stopped)")),
    ("every host silent, one a step back: that one",
     [beat(0, silent=200.0), beat(1, step=99, silent=200.0)],
     (True, STEP, 120.0, ("slice-0/host-1",),
      "hung in step: slice-0/host-0, slice-0/host-1 silent for 200 s (step timeout 120 s); "
      "behind: slice-0/host-1 at step 99; the furthest host is at step 100")),
    ("a host in a checkpoint save: the others wait as long as a save may take",
     [beat(0, still=500.0), beat(1, SAVE, still=500.0), beat(2, still=500.0)],
     (False, SAVE, 900.0, (), "not hung: a host moved 500 s ago (checkpoint_save timeout "
                              "900 s)")),
    ("past the save's timeout: hung in checkpoint_save",
     [beat(0, still=901.0), beat(1, SAVE, still=901.0), beat(2, still=901.0)],
     (True, SAVE, 900.0, (),
      "hung in checkpoint_save: no host moved for 901 s (checkpoint_save timeout 900 s); every "
      "host at step 100 and beating: no single host is behind (a collective or a data wait)")),
    ("silence is judged by each host's own phase: a compiling host may be quiet longer",
     [beat(0, COMPILE, 0, silent=1000.0, still=1000.0), beat(1, COMPILE, 0, still=1000.0)],
     (False, COMPILE, 1800.0, (), "not hung: a host moved 1000 s ago (compile timeout 1800 s)")),
    ("two silent: the phase of the one silent longest",
     [beat(0, silent=200.0), beat(1, RESTORE, silent=400.0), beat(2)],
     (True, RESTORE, 300.0, ("slice-0/host-0", "slice-0/host-1"),
      "hung in checkpoint_restore: slice-0/host-0, slice-0/host-1 silent for 400 s "
      "(checkpoint_restore timeout 300 s); behind: slice-0/host-0 at step 100, slice-0/host-1 "
      "at step 100; the furthest host is at step 100")),
    ("the hosts behind in host order, whatever order they came in",
     [beat(10, step=7, still=130.0), beat(3, step=8, still=130.0), beat(2, step=7, still=130.0)],
     (True, STEP, 120.0, ("slice-0/host-2", "slice-0/host-10"),
      "hung in step: no host moved for 130 s (step timeout 120 s); behind: slice-0/host-2 at "
      "step 7, slice-0/host-10 at step 7; the furthest host is at step 8")),
    ("a tie between phases' timeouts goes to the earlier phase",
     [beat(0, STEP, still=700.0), beat(1, STARTUP, 0, still=700.0)],
     (True, STARTUP, 600.0, ("slice-0/host-1",),
      "hung in startup: no host moved for 700 s (startup timeout 600 s); behind: "
      "slice-0/host-1 at step 0; the furthest host is at step 100")),
])
def test_judge_hang(name, beats, want):
    timeouts = T | {STEP: 600.0} if name.startswith("a tie") else T
    v = judge_hang(beats, NOW, timeouts)
    assert (v.hung, v.phase, v.timeout_s, v.behind, v.message) == want


def test_judge_hang_needs_a_host():
    with pytest.raises(ValueError, match="judge_hang needs a heartbeat per host; none given"):
        judge_hang([], NOW, T)


@pytest.mark.parametrize("restarts, checkpoint, limit, want", [
    ([], 200, None, (False, 0, "0 restarts since checkpoint step 200 with no new checkpoint "
                               "(the job fails at 3)")),
    ([200], 200, None, (False, 1, "1 restart since checkpoint step 200 with no new checkpoint "
                                  "(the job fails at 3)")),
    ([100, 200, 200], 200, None, (False, 2, "2 restarts since checkpoint step 200 with no new "
                                            "checkpoint (the job fails at 3)")),
    ([100, 200, 200, 200], 200, None,
     (True, 3, "3 restarts since checkpoint step 200 with no new checkpoint: giving up")),
    ([200, 200, 200], 300, None, (False, 0, "0 restarts since checkpoint step 300 with no new "
                                            "checkpoint (the job fails at 3)")),
    ([200, 200], 150, None, (False, 2, "2 restarts since checkpoint step 150 with no new "
                                       "checkpoint (the job fails at 3)")),   # went back
    ([100, 200, 200], 200, 2,
     (True, 2, "2 restarts since checkpoint step 200 with no new checkpoint: giving up")),
    ([None, None, None], None, None,
     (True, 3, "3 restarts with no checkpoint written: giving up")),
    ([None, None], 0, None, (False, 0, "0 restarts since checkpoint step 0 with no new "
                                       "checkpoint (the job fails at 3)")),
    ([None, 0, 0], 0, None, (False, 2, "2 restarts since checkpoint step 0 with no new "
                                       "checkpoint (the job fails at 3)")),
])
def test_judge_restart_budget(restarts, checkpoint, limit, want):
    v = (judge_restart_budget(restarts, checkpoint) if limit is None
         else judge_restart_budget(restarts, checkpoint, limit))
    assert (v.give_up, v.fruitless, v.message) == want


@pytest.mark.parametrize("value, field", [
    (beat(0), "step"), (HangVerdict(False, STEP, 1.0, (), ""), "hung"),
    (BudgetVerdict(False, 0, ""), "give_up")])
def test_the_records_are_frozen(value, field):
    with pytest.raises(FrozenInstanceError):
        setattr(value, field, 1)
