"""What a stall leads to, by table: onStall Ignore / Fail / Restart, the restart limit, the budget
of restarts that wrote no newer checkpoint (3 in a row: the next stall fails the job), the
checkpoint recorded at each restart, and the hosts behind named in the sentence."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from datetime import UTC, datetime, timedelta

import pytest

from tpujob.api import load_spec
from tpujob.controller.hangs import HostBeat, HostPhase
from tpujob.controller.host_watch import HostsView
from tpujob.controller.stall import (
    NO_CHECKPOINT,
    StallOutcome,
    hang_before_the_deadline,
    judge_stall,
)

pytestmark = pytest.mark.unit
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
DEADLINE = NOW - timedelta(seconds=1)
BASE = {"slice": "v6e-8", "image": "trainer:1", "output": "gs://bucket/run"}


def spec(on_stall: str = "Restart", max_restarts: int = 5):
    return load_spec(BASE | {"restartPolicy": {"onStall": on_stall, "maxRestarts": max_restarts}})


def judge(s=None, *, restarts=0, checkpoints=(), checkpoint_step=None, hosts=None,
          hang=None, deadline=DEADLINE):
    return judge_stall(s or spec(), deadline=deadline, now=NOW, step=40,
                       checkpoint_step=checkpoint_step, restarts=restarts,
                       checkpoints=tuple(checkpoints), hosts=hosts, hang=hang)


@pytest.mark.parametrize("name, kw, outcome, checkpoints, says", [
    ("ignore", dict(s=spec("Ignore")), StallOutcome.IGNORE, (), None),
    ("fail", dict(s=spec("Fail")), StallOutcome.STOP, (), None),
    ("restart, no checkpoint yet: -1", {}, StallOutcome.RESTART, (-1,), None),
    ("restart, at checkpoint 20", dict(checkpoint_step=20), StallOutcome.RESTART, (20,), None),
    ("the restart limit", dict(restarts=5), StallOutcome.STOP, (), "restart limit 5 reached"),
    ("one below the limit", dict(restarts=4), StallOutcome.RESTART, (NO_CHECKPOINT,), None),
    ("two fruitless restarts: a third is made",
     dict(checkpoints=(20, 20), checkpoint_step=20), StallOutcome.RESTART, (20, 20, 20), None),
    ("three fruitless restarts: the job fails",
     dict(checkpoints=(20, 20, 20), checkpoint_step=20), StallOutcome.STOP, (20, 20, 20),
     "3 restarts since checkpoint step 20 with no new checkpoint: giving up"),
    ("three without any checkpoint",
     dict(checkpoints=(NO_CHECKPOINT,) * 3), StallOutcome.STOP, (NO_CHECKPOINT,) * 3,
     "3 restarts with no checkpoint written: giving up"),
    ("a newer checkpoint since: the count starts again",
     dict(checkpoints=(20, 20, 20), checkpoint_step=40), StallOutcome.RESTART, (20, 20, 20, 40),
     None),
])
def test_judge_stall(name, kw, outcome, checkpoints, says):
    judged = judge(**kw)
    assert judged.outcome == outcome
    assert judged.checkpoints == checkpoints
    assert judged.message.startswith("no training step completed since 2026-01-01T11:59:59Z "
                                     "(last step 40; stallTimeoutSeconds 1800, "
                                     "firstStepTimeoutSeconds 3600)")
    if says is not None:
        assert judged.message.endswith(says)
    else:
        assert judged.message.endswith("3600)")


def beat(host: str, step: int, silent_s: float, interval_s: float | None = 1.0,
         waiting: bool | None = None) -> HostBeat:
    at = NOW - timedelta(seconds=silent_s)
    return HostBeat(host, HostPhase.STEP, step, at, at, interval_s, waiting)


@pytest.mark.parametrize("beats, behind, where", [
    ((beat("slice-0/host-0", 40, 0.5), beat("slice-0/host-1", 40, 5.5)), ("slice-0/host-1",),
     "behind: slice-0/host-1 at step 40; the furthest host is at step 40"),
    # 3 missed beats of 1 s is under the 5 s floor: not silent yet, nor at exactly 5 s.
    ((beat("slice-0/host-0", 40, 0.5), beat("slice-0/host-1", 40, 5.0)), (),
     "every host at step 40 and beating"),
    ((beat("slice-0/host-0", 40, 0.5), beat("slice-0/host-1", 40, 4.5)), (),
     "every host at step 40 and beating: no single host is behind (a collective or a data "
     "wait)"),
    # 3 missed beats of 10 s: silent after 30 s.
    ((beat("slice-0/host-0", 40, 1, 10.0), beat("slice-0/host-1", 40, 29, 10.0)), (),
     "every host at step 40 and beating"),
    ((beat("slice-0/host-0", 40, 1, 10.0), beat("slice-0/host-1", 40, 31, 10.0)),
     ("slice-0/host-1",), "behind: slice-0/host-1 at step 40"),
    # A host that does not say how often it beats: silent after 60 s.
    ((beat("slice-0/host-0", 40, 1, None), beat("slice-0/host-1", 40, 59, None)), (),
     "every host at step 40"),
    ((beat("slice-0/host-0", 40, 1, None), beat("slice-0/host-1", 40, 61, None)),
     ("slice-0/host-1",), "behind: slice-0/host-1"),
    ((beat("slice-0/host-0", 40, 0.5), beat("slice-0/host-1", 38, 0.5)), ("slice-0/host-1",),
     "behind: slice-0/host-1 at step 38; the furthest host is at step 40"),
    # One step for all, all beating: the host busy in its own work while the others wait.
    ((beat("slice-0/host-0", 40, 0.5, waiting=True), beat("slice-0/host-1", 40, 0.5,
                                                            waiting=False),
      beat("slice-0/host-2", 40, 0.5, waiting=True)), ("slice-0/host-1",),
     "behind: slice-0/host-1 at step 40, busy in its own work while the others wait for the "
     "step's result"),
    ((beat("slice-0/host-0", 40, 0.5, waiting=False), beat("slice-0/host-1", 40, 0.5,
                                                             waiting=False),
      beat("slice-0/host-2", 40, 0.5, waiting=True)), ("slice-0/host-0", "slice-0/host-1"),
     "behind: slice-0/host-0, slice-0/host-1 at step 40, busy in their own work"),
    # Every host waiting (a collective all are in), or one that does not say: no one named.
    ((beat("slice-0/host-0", 40, 0.5, waiting=True), beat("slice-0/host-1", 40, 0.5,
                                                            waiting=True)), (),
     "every host at step 40 and beating"),
    ((beat("slice-0/host-0", 40, 0.5, waiting=True), beat("slice-0/host-1", 40, 0.5)), (),
     "every host at step 40 and beating"),
    ((beat("slice-0/host-0", 40, 0.5, waiting=False), beat("slice-0/host-1", 40, 0.5,
                                                             waiting=False)), (),
     "every host at step 40 and beating"),
    # Every host silent: no one named, whatever they last said.
    ((beat("slice-0/host-0", 40, 70, None, waiting=True), beat("slice-0/host-1", 40, 70, None,
                                                                 waiting=False)), (),
     "every host silent: no single host is behind"),
])
def test_the_hosts_behind_are_named(beats, behind, where):
    judged = judge(hosts=HostsView((), beats, "", 0))
    assert judged.behind == behind
    assert where in judged.message.split("3600); ", 1)[1]


def test_a_passed_deadline_speaks_even_with_a_hang_found():
    hang = hang_before_the_deadline(view_with([moved("a", 9, 151), moved("b", 9, 160)]), NOW)
    assert hang is not None
    assert judge(hang=hang).message.startswith("no training step completed since")


def test_a_judgement_is_frozen():
    with pytest.raises(FrozenInstanceError):
        judge().message = "x"


def test_no_hosts_read_names_none():
    assert judge(hosts=HostsView((), (), "", 0)).behind == ()
    assert judge().behind == ()


def view_with(beats, step_timeout_s=150.0) -> HostsView:
    return HostsView((), tuple(beats), "", 0, step_timeout_s)


def moved(host: str, step: int, moved_s: float, beat_s: float = 0.5,
          phase: HostPhase = HostPhase.STEP) -> HostBeat:
    return HostBeat(host, phase, step, NOW - timedelta(seconds=beat_s),
                    NOW - timedelta(seconds=moved_s), 1.0)


@pytest.mark.parametrize("name, hosts, hung, behind", [
    ("nothing learned yet", view_with([moved("a", 9, 500)], None), False, ()),
    ("no hosts read", None, False, ()),
    ("a host moved within the timeout", view_with([moved("a", 9, 500), moved("b", 9, 149)]),
     False, ()),
    ("no host moved for longer: hung, none behind",
     view_with([moved("a", 9, 151), moved("b", 9, 160)]), True, ()),
    ("one behind the other", view_with([moved("a", 9, 151), moved("b", 8, 170)]), True,
     ("b",)),
    ("a host compiling: its own timeout applies, not the step's",
     view_with([moved("a", 9, 500), moved("b", 9, 500, phase=HostPhase.COMPILE)]), False, ()),
    ("a host silent past the step timeout though another moved",
     view_with([moved("a", 9, 1), moved("b", 9, 1, beat_s=151)]), True, ("b",)),
])
def test_a_hang_before_the_deadline(name, hosts, hung, behind):
    verdict = hang_before_the_deadline(hosts, NOW)
    assert (verdict is not None) == hung
    if verdict is not None:
        assert verdict.behind == behind and verdict.timeout_s == 150.0
        judged = judge(hosts=hosts, hang=verdict, deadline=None)
        assert judged.outcome == StallOutcome.RESTART and judged.behind == behind
        assert judged.message.startswith("hung in step: ")
        assert judged.message.endswith("(5x the longest step seen, 120 s at least; before "
                                       "stallTimeoutSeconds 1800)")
