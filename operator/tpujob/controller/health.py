"""The operator's HTTP endpoint for probes and Prometheus: `/healthz` (the work loop is alive,
and the webhook still serves the certificate on disk), `/readyz` (started and watching) and
`/metrics`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

if TYPE_CHECKING:
    from tpujob.controller.operator import Operator


class HealthServer:
    def __init__(self, operator: Operator, host: str, port: int):
        self.operator = operator
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def _healthz(self, _: web.Request) -> web.Response:
        queue = self.operator.queue
        if queue is None or not queue.alive:
            return web.Response(status=503, text="work queue stopped\n")
        if self.operator.webhook_cert_changed():
            return web.Response(status=503, text="the webhook certificate changed on disk; "
                                "restart to load it\n")
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        if not self.operator.ready:
            return web.Response(status=503, text="starting\n")
        return web.Response(text="ok\n")

    async def _metrics(self, _: web.Request) -> web.Response:
        body = generate_latest(self.operator.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
