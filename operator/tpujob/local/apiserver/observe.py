"""The request log and injected faults: every request passes through `observe` first, which
records it (when its answer goes out, or when its connection closes first) and carries out
the fault the injector draws for it (an error, a held and dropped connection, a watch cut)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from aiohttp import web

from .codec import respond
from .faults import FaultInjector, fault_error, retry_after_header
from .requestlog import RequestInfo, RequestLog, build_record, request_info


@dataclass
class Seen:
    """What the request log and the fault injector know about a request being served."""

    info: RequestInfo
    arrived: float
    fault: str | None = None
    watch_drop_after_s: float | None = None
    recorded: bool = False


SEEN = web.RequestKey("tpujob_seen", Seen)


class ObserveMixin:
    """The ApiHandler's middleware for the request log and the faults."""

    request_log: RequestLog
    faults: FaultInjector
    in_flight: dict[int, web.Request]


    @web.middleware
    async def observe(self, request: web.Request, handler) -> web.StreamResponse:
        arrived = time.monotonic()
        info = request_info(request.method, request.path, request.query)
        decision = self.faults.decide(info, request.headers.get("User-Agent", ""))
        seen = Seen(info, arrived, decision.kind or
                     ("watch-drop" if decision.watch_drop_after_s is not None else None),
                     decision.watch_drop_after_s)
        request[SEEN] = seen
        self.in_flight[id(request)] = request
        response: web.StreamResponse | None = None
        try:
            if decision.kind == "error":
                err = fault_error(decision.code, self.faults.faults.retry_after_s, info)
                response = respond(err.status(), err.code, retry_after_header(err))
            elif decision.kind == "timeout":
                response = await self._time_out(request, handler, info.verb == "watch")
            else:
                response = await handler(request)
            return response
        finally:
            self.in_flight.pop(id(request), None)
            # Streamed answers (watches) are recorded when their headers go out; 0: the
            # connection closed before any answer.
            if not seen.recorded:
                self._record(request, response.status if response is not None else 0)

    async def _on_response_prepare(self, request: web.Request,
                                   response: web.StreamResponse) -> None:
        seen = request.get(SEEN)
        if seen is None or not seen.recorded:
            self._record(request, response.status)

    def _record(self, request: web.Request, status: int) -> None:
        seen = request.get(SEEN)
        if seen is None:  # answered before the middleware ran (e.g. a malformed request)
            seen = Seen(request_info(request.method, request.path, request.query),
                         time.monotonic())
            request[SEEN] = seen
        seen.recorded = True
        self.request_log.add(build_record(
            seen.info, status, request.headers.get("User-Agent", ""), request.method,
            request.path_qs, seen.fault, seen.arrived))

    async def _time_out(self, request: web.Request, handler, is_watch: bool
                        ) -> web.StreamResponse:
        faults = self.faults.faults
        if faults.timeout_after_commit and not is_watch:
            try:
                await handler(request)  # carried out; only the answer is lost
            except Exception:  # noqa: BLE001 - the answer, error or not, is never sent
                pass
        await asyncio.sleep(faults.timeout_hold_s)
        if request.transport is not None:
            request.transport.abort()
        # Losing the connection cancels this handler (handler_cancellation); wait for it.
        await asyncio.sleep(30)
        raise ConnectionResetError("connection dropped by an injected timeout")
