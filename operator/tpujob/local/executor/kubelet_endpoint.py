"""The kubelet's HTTPS endpoint, the part of it kube-apiserver calls for `pods/log`:
`GET /containerLogs/<namespace>/<pod>/<container>?tailLines=..&follow=..&previous=..`, answered
from the executor's kubelet (the same log files and the same options as the embedded server's
`pods/log`).

The nodes the executor registers advertise this endpoint (`status.daemonEndpoints.kubeletEndpoint`
and their InternalIP 127.0.0.1). Like a kubelet it serves TLS with a certificate of the
cluster's CA and takes only clients with a certificate of that CA (the apiserver's
`--kubelet-client-certificate`).
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from pathlib import Path

from aiohttp import web

from tpujob.local.apiserver.errors import ApiError
from tpujob.local.apiserver.podlogs import serve

from .kubelet import Kubelet


class KubeletEndpoint:
    """Serves `/containerLogs` for `kubelet` on 127.0.0.1 from a thread of its own."""

    def __init__(self, kubelet: Kubelet, cert: Path, key: Path, client_ca: Path) -> None:
        self.kubelet = kubelet
        self._ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(client_ca))
        self._ssl.load_cert_chain(str(cert), str(key))
        self._ssl.verify_mode = ssl.CERT_REQUIRED
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Start serving; returns the port."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(self._start())
            except BaseException as err:  # surfaced to start()
                failure.append(err)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=main, name="kubelet-endpoint", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self.port

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._logs)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._ssl)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        ns, name = request.match_info["namespace"], request.match_info["pod"]
        run = self.kubelet.find_run(ns, name)
        if run is None:
            return web.Response(status=404, text=f'pod "{name}" in namespace "{ns}" is not '
                                                 "known to this kubelet")
        try:
            return await serve(request, run.pod, self.kubelet, request.match_info["container"])
        except ApiError as err:
            return web.Response(status=err.code, text=err.message)

    def stop(self) -> None:
        if self._loop is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._loop = None
