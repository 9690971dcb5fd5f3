"""`pods/log`: a container's output, as kube-apiserver serves it from the pod's kubelet.

The API server checks the pod and the container name (`LogLocation` in kube-apiserver's pod
registry) and the options (`ValidatePodLogOptions`); where the output lives is the business of
a `PodLogSource`, the kubelet's part, which in local mode is the executor's kubelet. The source
names the log file of the container start asked for, or says why there is none, in the
kubelet's words. Without a source (the server alone) a pod's log is empty, as for a pod that
no node runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from tpujob.local import containerlog

from . import errors
from .errors import ApiError, FieldError

FOLLOW_POLL_S = 0.2


class LogUnavailable(Exception):  # noqa: N818 - the kubelet's refusal, not a failure here
    """The kubelet cannot serve this log; the message is its answer (a 400 from the server)."""


@dataclass(frozen=True)
class ContainerLog:
    """One container start's log file, and whether more output may still come to it."""

    path: Path
    running: Callable[[], bool]


class PodLogSource(Protocol):
    def container_log(self, namespace: str, pod: str, uid: str, container: str,
                      previous: bool) -> ContainerLog | None:
        """The log of the container's current start (or the one before, `previous`); None
        when this source does not run the pod; raises LogUnavailable as the kubelet refuses."""


@dataclass(frozen=True)
class LogOptions:
    """The query parameters of a `pods/log` request (core/v1 PodLogOptions)."""

    container: str = ""
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    since_seconds: int | None = None
    since_time: datetime | None = None
    limit_bytes: int | None = None


def _bool(query, key: str) -> bool:
    value = query.get(key)
    if value is None or value == "":
        return False
    if value.lower() in ("1", "true", "t"):
        return True
    if value.lower() in ("0", "false", "f"):
        return False
    raise errors.bad_request(f'strconv.ParseBool: parsing "{value}": invalid syntax')


def _int(query, key: str) -> int | None:
    value = query.get(key)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise errors.bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax') from None


def parse_options(query, name: str) -> LogOptions:
    """The options of a request, validated as kube-apiserver validates them (422 naming the
    field)."""
    since_time = None
    if query.get("sinceTime"):
        try:
            since_time = datetime.strptime(query["sinceTime"], "%Y-%m-%dT%H:%M:%SZ").replace(
                tzinfo=UTC)
        except ValueError:
            raise errors.bad_request(f'parsing time "{query["sinceTime"]}" as '
                                     '"2006-01-02T15:04:05Z07:00": cannot parse') from None
    options = LogOptions(container=query.get("container", ""), follow=_bool(query, "follow"),
                         previous=_bool(query, "previous"),
                         timestamps=_bool(query, "timestamps"),
                         tail_lines=_int(query, "tailLines"),
                         since_seconds=_int(query, "sinceSeconds"), since_time=since_time,
                         limit_bytes=_int(query, "limitBytes"))
    found = []
    if options.tail_lines is not None and options.tail_lines < 0:
        found.append(FieldError("Invalid", "tailLines", options.tail_lines,
                                "must be greater than or equal to 0"))
    if options.limit_bytes is not None and options.limit_bytes < 1:
        found.append(FieldError("Invalid", "limitBytes", options.limit_bytes,
                                "must be greater than 0"))
    if options.since_seconds is not None and options.since_time is not None:
        found.append(FieldError("Forbidden", "", detail="at most one of `sinceTime` or "
                                "`sinceSeconds` may be specified"))
    elif options.since_seconds is not None and options.since_seconds < 1:
        found.append(FieldError("Invalid", "sinceSeconds", options.since_seconds,
                                "must be greater than 0"))
    if found:
        raise errors.invalid("PodLogOptions", "", name, found)
    return options


def container_name(pod: dict[str, Any], asked: str) -> str:
    """The container a request means: the one named (it must be in the pod), or the pod's only
    one (kube-apiserver's LogLocation, with its messages)."""
    spec = pod.get("spec") or {}
    name = pod["metadata"]["name"]
    containers = [c.get("name") for c in spec.get("containers") or []]
    others = [c.get("name") for key in ("initContainers", "ephemeralContainers")
              for c in spec.get(key) or []]
    if not asked:
        if len(containers) == 1:
            return containers[0]
        if not containers:
            raise errors.bad_request(f"a container name must be specified for pod {name}")
        message = (f"a container name must be specified for pod {name}, choose one of: "
                   f"[{' '.join(containers)}]")
        init = [c.get("name") for c in spec.get("initContainers") or []]
        if init:
            message += f" or one of the init containers: [{' '.join(init)}]"
        raise errors.bad_request(message)
    if asked not in containers + others:
        raise errors.bad_request(f"container {asked} is not valid for pod {name}")
    return asked


def since_ns(options: LogOptions, now_ns: int) -> int | None:
    if options.since_seconds is not None:
        return now_ns - options.since_seconds * 1_000_000_000
    if options.since_time is not None:
        return int(options.since_time.timestamp()) * 1_000_000_000
    return None


def select(lines: list[tuple[str, bytes]], options: LogOptions, since: int | None
           ) -> list[tuple[str, bytes]]:
    """The lines a request gets: the last `tailLines`, of those the ones that came at or
    after `since` (the kubelet's order: it seeks back to the tail, then skips by time)."""
    if options.tail_lines is not None:
        lines = lines[max(0, len(lines) - options.tail_lines):]
    if since is not None:
        lines = [(t, line) for t, line in lines if _stamp_ns(t) >= since]
    return lines


def render(lines: list[tuple[str, bytes]], timestamps: bool) -> bytes:
    if not timestamps:
        return b"".join(line for _, line in lines)
    return b"".join(t.encode() + b" " + line for t, line in lines)


def _stamp_ns(stamp: str) -> int:
    whole, _, rest = stamp.partition(".")
    seconds = int(datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp())
    return seconds * 1_000_000_000 + int(rest.rstrip("Z") or 0)


async def serve(request: web.Request, pod: dict[str, Any], source: PodLogSource | None,
                container: str | None = None) -> web.StreamResponse:
    """Answer a `pods/log` request for `pod` (already read from the store); `container`: the
    one a kubelet's `/containerLogs/<ns>/<pod>/<container>` names in its path."""
    meta = pod["metadata"]
    options = parse_options(request.query, meta["name"])
    container = container_name(pod, container or options.container)
    loop = asyncio.get_running_loop()
    log = None
    if source is not None:
        try:
            # In a thread: the source may take its own locks (the executor's kubelet).
            log = await loop.run_in_executor(None, source.container_log, meta.get("namespace"),
                                             meta["name"], meta.get("uid", ""), container,
                                             options.previous)
        except LogUnavailable as err:
            raise ApiError(400, "BadRequest", str(err)) from None
    response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
    if log is None:
        await response.prepare(request)
        await response.write_eof()
        return response
    since = since_ns(options, time.time_ns())
    if not options.follow:
        lines = await loop.run_in_executor(None, containerlog.read_rest, log.path, 0)
        await response.prepare(request)
        await _send(response, select(lines, options, since), options.timestamps,
                    options.limit_bytes)
        await response.write_eof()
        return response
    lines, offset = await loop.run_in_executor(None, containerlog.read_lines, log.path, 0)
    response.enable_chunked_encoding()
    await response.prepare(request)
    budget = await _send(response, select(lines, options, since), options.timestamps,
                         options.limit_bytes)
    await _follow(response, log, offset, options, since, budget, loop)
    await response.write_eof()
    return response


async def _send(response: web.StreamResponse, lines: list[tuple[str, bytes]], timestamps: bool,
                budget: int | None) -> int | None:
    data = render(lines, timestamps)
    if budget is not None:
        data = data[:budget]
        budget -= len(data)
    if data:
        await response.write(data)
    return budget


async def _follow(response: web.StreamResponse, log: ContainerLog, offset: int,
                  options: LogOptions, since: int | None, budget: int | None, loop) -> None:
    """Send what the container writes until it stops (or the client goes away)."""
    no_filter = LogOptions()
    while budget != 0:
        running = await loop.run_in_executor(None, log.running)
        lines, offset = await loop.run_in_executor(None, containerlog.read_lines, log.path,
                                                   offset)
        if not running:
            lines += await loop.run_in_executor(None, containerlog.read_rest, log.path, offset)
        budget = await _send(response, select(lines, no_filter, since), options.timestamps,
                             budget)
        if not running:
            return
        await asyncio.sleep(FOLLOW_POLL_S)
