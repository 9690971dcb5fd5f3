"""What a stall leads to, by table: onStall Ignore / Fail / Restart, the restart limit, the budget
of restarts that wrote no newer checkpoint (3 in a row: the next stall fails the job), the
checkpoint recorded at each restart, and the hosts behind named in the sentence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tpujob.api import load_spec
from tpujob.controller.hangs import HostBeat, HostPhase
from tpujob.controller.host_watch import HostsView
from tpujob.controller.stall import NO_CHECKPOINT, StallOutcome, judge_stall

pytestmark = pytest.mark.unit
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
DEADLINE = NOW - timedelta(seconds=1)
BASE = {"slice": "v6e-8", "image": "trainer:1", "output": "gs://bucket/run"}


def spec(on_stall: str = "Restart", max_restarts: int = 5):
    return load_spec(BASE | {"restartPolicy": {"onStall": on_stall, "maxRestarts": max_restarts}})


def judge(s=None, *, restarts=0, checkpoints=(), checkpoint_step=None, hosts=None):
    return judge_stall(s or spec(), deadline=DEADLINE, now=NOW, step=40,
                       checkpoint_step=checkpoint_step, restarts=restarts,
                       checkpoints=tuple(checkpoints), hosts=hosts)


@pytest.mark.parametrize("name, kw, outcome, checkpoints, says", [
    ("ignore", dict(s=spec("Ignore")), StallOutcome.IGNORE, (), None),
    ("fail", dict(s=spec("Fail")), StallOutcome.STOP, (), None),
    ("restart, no checkpoint yet", {}, StallOutcome.RESTART, (NO_CHECKPOINT,), None),
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
    # 3 missed beats of 1 s is under the 5 s floor: not silent yet.
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


def test_no_hosts_read_names_none():
    assert judge(hosts=HostsView((), (), "", 0)).behind == ()
    assert judge().behind == ()
