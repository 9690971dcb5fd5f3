"""What to do about a job found stalled: the sentence for the Stalled condition and Event (with
the hosts behind the others, from their heartbeats), and whether to ignore it, restart every
host, or stop: `restartPolicy.onStall`, the restart limit, and the budget of restarts that wrote
no newer checkpoint (`hangs.judge_restart_budget`: after 3 in a row the job fails instead of
restarting again). Pure: the spec, the status as decided so far and the hosts in; a judgement
out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from tpujob.api.recovery import StallAction
from tpujob.api.spec import TpuTrainingJobSpec
from tpujob.controller.hangs import (
    DEFAULT_TIMEOUT_S,
    HangVerdict,
    HostPhase,
    attribute_stall,
    judge_hang,
    judge_restart_budget,
)
from tpujob.controller.host_watch import HostsView

NO_CHECKPOINT = -1   # in status.restartCheckpoints: no checkpoint yet at that restart


class StallOutcome(StrEnum):
    IGNORE = "Ignore"     # the condition and one Event only
    RESTART = "Restart"   # stacks first, then every host starts again
    STOP = "Stop"         # stacks first, then the job fails (its JobSet suspended)


@dataclass(frozen=True)
class StallJudgement:
    outcome: StallOutcome
    message: str                        # for the condition, the Event and a failure
    behind: tuple[str, ...]             # the hosts behind the others, in host order
    checkpoints: tuple[int, ...]        # status.restartCheckpoints after this decision


def hang_before_the_deadline(hosts: HostsView | None, now: datetime) -> HangVerdict | None:
    """A hang found from the hosts' own history, before the stall timeout: every host in its
    steady steps, and none moved (or one silent) for longer than 5x the longest step this
    attempt has seen (120 s at least: `HostsView.step_timeout_s`), once it has seen enough
    steps to know. None otherwise."""
    if hosts is None or not hosts.beats or hosts.step_timeout_s is None or \
            any(b.phase is not HostPhase.STEP for b in hosts.beats):
        return None
    verdict = judge_hang(hosts.beats, now, {**DEFAULT_TIMEOUT_S,
                                            HostPhase.STEP: hosts.step_timeout_s})
    return verdict if verdict.hung else None


def judge_stall(spec: TpuTrainingJobSpec, *, deadline: datetime | None, now: datetime,
                step: int | None, checkpoint_step: int | None, restarts: int,
                checkpoints: tuple[int, ...], hosts: HostsView | None,
                hang: HangVerdict | None = None) -> StallJudgement:
    """`deadline`: the stall deadline that passed, or None when `hang` (a hang found before
    it) is the cause; `step`, `checkpoint_step`: the last step and checkpoint the status has;
    `restarts`: the job's restarts so far; `checkpoints`: the newest checkpoint step at each
    earlier stall restart (NO_CHECKPOINT for none)."""
    behind: tuple[str, ...] = ()
    if deadline is None and hang is not None:
        message = (f"{hang.message} (5x the longest step seen, 120 s at least; before "
                   f"stallTimeoutSeconds {spec.stall_timeout_seconds})")
        behind = hang.behind
    else:
        message = (f"no training step completed since {deadline:%Y-%m-%dT%H:%M:%SZ} "
                   f"(last step {step if step is not None else 'none'}; "
                   f"stallTimeoutSeconds {spec.stall_timeout_seconds}, "
                   f"firstStepTimeoutSeconds {spec.first_step_timeout_seconds})")
        if hosts is not None and hosts.beats:
            behind, where = attribute_stall(hosts.beats, now)
            message += f"; {where}"
    action = spec.restart_policy.on_stall
    if action == StallAction.IGNORE:
        return StallJudgement(StallOutcome.IGNORE, message, behind, checkpoints)
    if action == StallAction.FAIL:
        return StallJudgement(StallOutcome.STOP, message, behind, checkpoints)
    if restarts >= spec.restart_policy.max_restarts:
        return StallJudgement(StallOutcome.STOP, message + f"; restart limit "
                              f"{spec.restart_policy.max_restarts} reached", behind, checkpoints)
    budget = judge_restart_budget([None if c == NO_CHECKPOINT else c for c in checkpoints],
                                  checkpoint_step)
    if budget.give_up:
        return StallJudgement(StallOutcome.STOP, f"{message}; {budget.message}", behind,
                              checkpoints)
    now_at = NO_CHECKPOINT if checkpoint_step is None else checkpoint_step
    return StallJudgement(StallOutcome.RESTART, message, behind, (*checkpoints, now_at))
