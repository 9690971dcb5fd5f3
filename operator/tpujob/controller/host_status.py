"""The slow-host part of a running job's status, decided from the hosts as last read: the
`status.hosts` figures, the SlowHost condition and its Events. Pure: the previous status's
hosts and the new view in, the new figures, the condition to set (or none) and the Events out.

The condition appears once hosts are scored: True naming the flagged hosts, False saying how
close the slowest host is. A Warning Event goes out when the set of flagged hosts changes to one
that is not empty (a new host flagged, not every poll that flags the same one); a Normal Event
when the last flagged host recovers.
"""

from __future__ import annotations

from typing import NamedTuple

from tpujob.api.status import HostScoreStatus, HostsStatus
from tpujob.controller.host_watch import HostsView
from tpujob.controller.stragglers import HostScore

SLOWEST_KEPT = 8
SLOW_HOST_REASON, NO_SLOW_HOST_REASON, RECOVERED_REASON = "SlowHost", "NoSlowHost", \
    "SlowHostRecovered"


class HostCondition(NamedTuple):
    status: bool
    reason: str
    message: str


class HostDecision(NamedTuple):
    hosts: HostsStatus | None
    condition: HostCondition | None          # SlowHost, when there is something to say
    events: tuple[tuple[str, str, str], ...]  # (type, reason, message)


def _figure(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.3g}")


def _score_status(s: HostScore) -> HostScoreStatus:
    return HostScoreStatus(host=s.host, score=round(min(s.vs_fastest, s.vs_own_best), 2),
                           vs_fastest=round(s.vs_fastest, 2),
                           vs_own_best=round(s.vs_own_best, 2), busy_seconds=_figure(s.busy_s),
                           step_seconds=_figure(s.step_s), steps=s.samples, flagged=s.flagged)


def decide_hosts(prev: HostsStatus | None, view: HostsView | None) -> HostDecision:
    """The new `status.hosts`, the SlowHost condition and the Events; `view` None: not read
    this pass (the previous figures stand)."""
    if view is None:
        return HostDecision(prev, None, ())
    flagged = view.flagged
    scored = sorted((s for s in view.scores if s.vs_fastest is not None),
                    key=lambda s: min(s.vs_fastest, s.vs_own_best))
    slow = flagged[0] if flagged else None
    hosts = HostsStatus(
        reporting=len(view.beats), scored=view.scored,
        slow_host=slow.host if slow else None,
        display=(f"{slow.host} {min(slow.vs_fastest, slow.vs_own_best):.2f}"
                 + (f" +{len(flagged) - 1}" if len(flagged) > 1 else "")) if slow else None,
        message=view.message[:4096],
        slowest=[_score_status(s) for s in (list(flagged) + [s for s in scored
                                                              if not s.flagged])[:SLOWEST_KEPT]],
        behind=list(prev.behind) if prev is not None else [])
    if not view.scored:
        return HostDecision(hosts, None, ())
    before = {h.host for h in prev.slowest if h.flagged} if prev is not None else set()
    now = {s.host for s in flagged}
    events: list[tuple[str, str, str]] = []
    if now and now != before:
        events.append(("Warning", SLOW_HOST_REASON, hosts.message[:1024]))
    elif before and not now:
        events.append(("Normal", RECOVERED_REASON,
                       f"{', '.join(sorted(before))} no longer slow: {hosts.message}"[:1024]))
    condition = (HostCondition(True, SLOW_HOST_REASON, hosts.message) if now else
                 HostCondition(False, NO_SLOW_HOST_REASON, hosts.message))
    return HostDecision(hosts, condition, tuple(events))
