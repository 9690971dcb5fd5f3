"""Fault injection: a share of requests answered with an error `Status` (500, 503, 429 or 504,
with Retry-After where kube-apiserver sends one), held and then dropped without an answer, or,
for watches, cut off after a while. Pure configuration and decisions here; the HTTP layer
carries them out. Decisions come from one seeded random generator, so a run that sends the same
requests in the same order meets the same faults."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from .errors import ApiError
from .requestlog import RequestInfo

ERROR_CODES = (429, 500, 503, 504)
WATCH_DROP_MODES = ("reset", "end")


@dataclass(frozen=True)
class Faults:
    """What goes wrong, and for which requests.

    A matching request is answered with an error with probability `error_rate` (its code drawn
    from `error_codes`), or held for `timeout_hold_s` and then has its connection closed without
    an answer with probability `timeout_rate`. With `timeout_after_commit` the held request is
    carried out first (a write is stored, only its answer is lost), as when a real server times
    out after etcd committed. A matching watch is cut off after `watch_drop_after_s` seconds
    (a number, or a (low, high) range drawn uniformly per watch): `reset` closes the connection
    mid-stream, `end` ends the stream cleanly as a server-side timeout does.

    A request matches when its RBAC verb is in `verbs` and its resource (`plural` or
    `plural/subresource`) is in `resources` (empty: any) and its User-Agent contains
    `user_agent`. Only resource requests are affected, never discovery, /version or /openapi.
    """

    error_rate: float = 0.0
    error_codes: tuple[int, ...] = (500, 503, 429)
    retry_after_s: int = 1
    timeout_rate: float = 0.0
    timeout_hold_s: float = 1.0
    timeout_after_commit: bool = False
    watch_drop_after_s: float | tuple[float, float] | None = None
    watch_drop_mode: str = "reset"
    verbs: frozenset[str] = field(default_factory=frozenset)
    resources: frozenset[str] = field(default_factory=frozenset)
    user_agent: str = ""
    seed: int | None = None

    def __post_init__(self) -> None:
        # Accept lists and sets from callers; keep the frozen object hashable and immutable.
        object.__setattr__(self, "error_codes", tuple(self.error_codes))
        object.__setattr__(self, "verbs", frozenset(self.verbs))
        object.__setattr__(self, "resources", frozenset(self.resources))
        if isinstance(self.watch_drop_after_s, list):
            object.__setattr__(self, "watch_drop_after_s", tuple(self.watch_drop_after_s))
        problems = []
        for name in ("error_rate", "timeout_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                problems.append(f"{name} must be between 0 and 1, got {getattr(self, name)}")
        if self.error_rate + self.timeout_rate > 1.0:
            problems.append("error_rate + timeout_rate must be at most 1")
        if not self.error_codes or any(c not in ERROR_CODES for c in self.error_codes):
            problems.append(f"error_codes must be some of {ERROR_CODES}, got "
                            f"{self.error_codes}")
        if self.retry_after_s < 0 or self.timeout_hold_s < 0:
            problems.append("retry_after_s and timeout_hold_s must not be negative")
        drop = self.watch_drop_after_s
        if drop is not None:
            low, high = drop if isinstance(drop, tuple) else (drop, drop)
            if not 0 <= low <= high:
                problems.append(f"watch_drop_after_s must be a number >= 0 or a range (low, "
                                f"high) with 0 <= low <= high, got {drop}")
        if self.watch_drop_mode not in WATCH_DROP_MODES:
            problems.append(f"watch_drop_mode must be one of {WATCH_DROP_MODES}, got "
                            f"{self.watch_drop_mode!r}")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def active(self) -> bool:
        return bool(self.error_rate or self.timeout_rate or self.watch_drop_after_s is not None)

    def matches(self, info: RequestInfo, user_agent: str) -> bool:
        return info.is_resource and (not self.verbs or info.verb in self.verbs) and \
            (not self.resources or info.resource in self.resources) and \
            self.user_agent in user_agent


NO_FAULTS = Faults()


@dataclass(frozen=True)
class Decision:
    """The fault one request meets: `error` (with `code`), `timeout`, or none; for a watch,
    when to cut it off."""

    kind: str | None = None
    code: int = 0
    watch_drop_after_s: float | None = None


class FaultInjector:
    """Draws the fault each request meets. Runs on the server's loop thread only."""

    def __init__(self, faults: Faults = NO_FAULTS) -> None:
        self.configure(faults)

    def configure(self, faults: Faults) -> None:
        self.faults = faults
        self.random = random.Random(faults.seed)

    def decide(self, info: RequestInfo, user_agent: str) -> Decision:
        faults = self.faults
        if not faults.active or not faults.matches(info, user_agent):
            return Decision()
        draw = self.random.random()
        if draw < faults.error_rate:
            return Decision("error", code=self.random.choice(faults.error_codes))
        if draw < faults.error_rate + faults.timeout_rate:
            return Decision("timeout")
        drop = faults.watch_drop_after_s
        if info.verb == "watch" and drop is not None:
            low, high = drop if isinstance(drop, tuple) else (drop, drop)
            return Decision(watch_drop_after_s=self.random.uniform(low, high))
        return Decision()


def fault_error(code: int, retry_after_s: int, info: RequestInfo) -> ApiError:
    """The error kube-apiserver sends with `code`, as a Status (and its Retry-After, which the
    HTTP layer copies into the header)."""
    what = info.resource + (f' "{info.name}"' if info.name else "")
    details: dict[str, Any] = {"group": info.group, "kind": info.resource.split("/")[0]}
    if info.name:
        details["name"] = info.name
    if code == 429:
        return ApiError(429, "TooManyRequests", "Too many requests, please try again later.",
                        {**details, "retryAfterSeconds": retry_after_s})
    if code == 503:
        return ApiError(503, "ServiceUnavailable",
                        "the server is currently unable to handle the request",
                        {**details, "retryAfterSeconds": retry_after_s})
    if code == 504:
        return ApiError(504, "Timeout", f"the server was unable to return a response in the "
                        f"time allotted, but may still be processing the request ({what})",
                        {**details, "retryAfterSeconds": retry_after_s})
    return ApiError(500, "InternalError",
                    f"Internal error occurred: injected fault ({info.verb} {what})",
                    {**details, "causes": [{"message": "injected fault"}]})


def retry_after_header(error: ApiError) -> dict[str, str]:
    seconds = (error.details or {}).get("retryAfterSeconds")
    return {} if seconds is None else {"Retry-After": str(seconds)}
