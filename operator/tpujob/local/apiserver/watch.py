"""Watch streams: replay from a resourceVersion (or initial ADDED events), live events filtered
by namespace and selectors, bookmarks, timeouts, and the 410 Expired error event."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from . import errors
from .resources import ResourceType
from .store import Event, Store

DEFAULT_TIMEOUT_S = 1800.0  # kube-apiserver's --min-request-timeout


@dataclass(frozen=True)
class WatchRequest:
    """What one watch asks for."""

    rtype: ResourceType
    namespace: str | None
    matches: Callable[[dict[str, Any]], bool]
    resource_version: str
    timeout_s: float | None
    bookmarks: bool
    send_initial_events: bool
    # Turns each event's object into what the client asked for (a Table row); None: as is.
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None


def _line(event_type: str, obj: dict[str, Any]) -> bytes:
    return (json.dumps({"type": event_type, "object": obj}, separators=(",", ":")) + "\n").encode()


def _in_scope(request: WatchRequest, obj: dict[str, Any]) -> bool:
    return request.namespace is None or obj["metadata"].get("namespace") == request.namespace


def _translate(request: WatchRequest, event: Event) -> tuple[str, dict] | None:
    """The event as this watcher sees it: selector transitions become ADDED/DELETED."""
    obj = event.obj
    if not _in_scope(request, obj):
        return None
    now = request.matches(obj)
    if event.type == "MODIFIED" and event.old is not None:
        before = request.matches(event.old)
        if before and not now:
            # The cacher's convertToWatchEvent: the object as the watcher last matched it, at
            # the event's resourceVersion.
            old = {**event.old, "metadata": {**event.old["metadata"],
                                             "resourceVersion": obj["metadata"]["resourceVersion"]}}
            return "DELETED", old
        if now and not before:
            return "ADDED", obj
    return (event.type, obj) if now else None


def _versioned(request: WatchRequest, obj: dict[str, Any]) -> dict[str, Any]:
    versioned = {**obj, "apiVersion": request.rtype.api_version}
    return request.transform(versioned) if request.transform is not None else versioned


async def stream(http_request: web.Request, store: Store, request: WatchRequest,
                 bookmark_interval_s: float) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={
        "Content-Type": "application/json", "Cache-Control": "no-cache, private"})
    response.enable_chunked_encoding()
    await response.prepare(http_request)
    queue: asyncio.Queue = asyncio.Queue()
    key = request.rtype.key
    store.subscribe(key, queue)
    try:
        initial: list[tuple[str, dict]] = []
        rv = request.resource_version
        if rv in ("", "0") or request.send_initial_events:
            initial = [("ADDED", o) for o in store.list(request.rtype, request.namespace)
                       if request.matches(o)]
        else:
            try:
                since = store.events_since(request.rtype, int(rv))
            except errors.ApiError as err:
                await response.write(_line("ERROR", err.status()))
                return response
            initial = [t for t in (_translate(request, e) for e in since) if t]
        for event_type, obj in initial:
            await response.write(_line(event_type, _versioned(request, obj)))
        if request.send_initial_events and request.bookmarks:
            await response.write(_line("BOOKMARK", _bookmark(request, store, initial_end=True)))
        await _follow(response, store, request, queue, bookmark_interval_s)
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        store.unsubscribe(key, queue)
    return response


def _bookmark(request: WatchRequest, store: Store, initial_end: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": str(store.rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"kind": request.rtype.kind, "apiVersion": request.rtype.api_version, "metadata": meta}


async def _follow(response: web.StreamResponse, store: Store, request: WatchRequest,
                  queue: asyncio.Queue, bookmark_interval_s: float) -> None:
    timeout = request.timeout_s
    if timeout is None:
        timeout = DEFAULT_TIMEOUT_S * (1 + random.random())
    deadline = time.monotonic() + timeout

    def next_bookmark(now: float) -> float | None:
        # Periodically, and once right before the timeout, as kube-apiserver's watch cache does.
        if not request.bookmarks:
            return None
        when = min(now + bookmark_interval_s, deadline - 2.0)
        return when if when > now else None

    bookmark_at = next_bookmark(time.monotonic())
    while True:
        now = time.monotonic()
        if now >= deadline:
            return
        wake = deadline if bookmark_at is None else min(deadline, bookmark_at)
        try:
            event = await asyncio.wait_for(queue.get(), timeout=max(0.0, wake - now))
        except TimeoutError:
            if bookmark_at is not None and time.monotonic() >= bookmark_at:
                await response.write(_line("BOOKMARK", _bookmark(request, store)))
                bookmark_at = next_bookmark(time.monotonic())
            continue
        if event is None:  # the kind stopped being served
            return
        translated = _translate(request, event)
        if translated:
            await response.write(_line(translated[0], _versioned(request, translated[1])))
