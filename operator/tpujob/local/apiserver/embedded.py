"""Running the API server: in a background thread of the current process (tests, local mode)
or in the foreground (the CLI). The server binds 127.0.0.1 and serves plain HTTP. Tests also
read its request log, inject faults and restart it from here."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from .faults import Faults
from .kubeconfig import write_kubeconfig
from .requestlog import RequestLog, RequestRecord
from .server import ApiHandler

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
BUNDLED_CRDS = Path(__file__).resolve().parent.parent / "crds"


def load_crds(paths: list[str | os.PathLike]) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions in YAML files (multi-document files allowed)."""
    crds = []
    for path in paths:
        for document in yaml.load_all(Path(path).read_text(), Loader=_LOADER):
            if not document:
                continue
            if document.get("kind") != "CustomResourceDefinition":
                raise ValueError(f"{path}: expected a CustomResourceDefinition, found "
                                 f"{document.get('kind')!r}")
            crds.append(document)
    return crds


def bundled_crd_paths() -> list[Path]:
    """The third-party CRDs shipped with tpujob (JobSet)."""
    return sorted(BUNDLED_CRDS.glob("*.yaml"))


class ApiServer:
    """A Kubernetes API server on 127.0.0.1, served from its own event loop thread.

    >>> with ApiServer(crds=load_crds(bundled_crd_paths())) as server:
    ...     server.write_kubeconfig("kubeconfig")

    Every request is recorded (`requests()`, `request_counts()`); `faults` (or `set_faults`
    later) makes some requests fail; `restart()` takes the server down for a moment.
    """

    def __init__(self, port: int = 0, crds: list[dict[str, Any]] = (),
                 bookmark_interval_s: float = 60.0, host: str = "127.0.0.1",
                 faults: Faults | None = None, request_log_size: int = 100_000,
                 watch_history: int = 2000) -> None:
        self.host = host
        self.port = port
        self.crds = list(crds)
        self.bookmark_interval_s = bookmark_interval_s
        self.watch_history = watch_history  # events kept per kind for watches to resume from
        self.request_log = RequestLog(request_log_size)
        self._faults = faults or Faults()
        self.handler: ApiHandler | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._pod_logs = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> str:
        """Start serving; return the server's URL once it accepts connections."""
        self._thread = threading.Thread(target=self._run, name="tpujob-apiserver", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self.url

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as err:  # reported to start()'s caller
            self._error = err
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._shutdown())
        self._loop.close()

    async def _serve(self) -> None:
        self.handler = ApiHandler(self.crds, bookmark_interval_s=self.bookmark_interval_s,
                                  history=self.watch_history, request_log=self.request_log,
                                  faults=self._faults)
        self.handler.pod_logs = self._pod_logs
        await self._listen()
        self.handler.address = f"{self.host}:{self.port}"

    async def _listen(self) -> None:
        assert self.handler is not None
        self._runner = web.AppRunner(self.handler.app(), access_log=None,
                                     handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _shutdown(self) -> None:
        if self.handler is not None:
            self.handler.drop_connections()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _restart(self, down_s: float) -> None:
        await self._shutdown()
        await asyncio.sleep(down_s)
        await self._listen()

    def stop(self) -> None:
        """Stop serving and join the server thread (open watches are closed)."""
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._thread = None

    def restart(self, down_s: float = 0.2) -> None:
        """Go down and come back on the same port, as a restarted kube-apiserver does: every
        open connection (watches included) is closed without an answer, connections are
        refused for `down_s` seconds, and every object is kept (resourceVersions go on from
        where they were, and watches can resume from the last version they saw)."""
        self._require_running()
        asyncio.run_coroutine_threadsafe(self._restart(down_s), self._loop).result(
            timeout=30 + down_s)

    # -- request log ---------------------------------------------------------------------------

    def requests(self) -> list[RequestRecord]:
        """The requests answered so far (oldest first; the newest `request_log_size` are
        kept), each as Kubernetes authorization sees it: RBAC verb, group, resource, namespace,
        name; with its status and User-Agent."""
        return self.request_log.records()

    def request_counts(self) -> Counter[tuple[str, str, str]]:
        """Requests per (verb, group, resource) since the start or the last reset."""
        return self.request_log.counts()

    def reset_requests(self) -> None:
        """Forget the recorded requests and zero the counters."""
        self.request_log.reset()

    # -- faults --------------------------------------------------------------------------------

    @property
    def faults(self) -> Faults:
        return self._faults

    def set_faults(self, faults: Faults | None = None, **fields: Any) -> Faults:
        """Replace the faults in effect: `faults` (default: none) with `fields` of `Faults`
        changed, e.g. `set_faults(error_rate=0.2, seed=1)`; `set_faults()` turns them off.
        The random draws start again from the seed. Returns the faults now in effect."""
        new = dataclasses.replace(faults or Faults(), **fields)
        self._faults = new
        if self.handler is not None and self._loop is not None and self._loop.is_running():
            self.call(self.handler.faults.configure, new)
        return new

    def _require_running(self) -> None:
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            raise RuntimeError("the API server is not running")

    def call(self, fn, *args):
        """Run `fn(*args)` on the server's loop thread and return its result (for direct store
        access from tests and local mode)."""
        async def invoke():
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(invoke(), self._loop).result(timeout=10)

    def set_pod_logs(self, source) -> None:
        """Serve `pods/log` from `source` (a `PodLogSource`: in local mode the executor's
        kubelet); None: every pod's log is empty, as for a pod no node runs."""
        self._pod_logs = source
        if self.handler is not None:
            self.handler.pod_logs = source

    def write_kubeconfig(self, path: str | os.PathLike, namespace: str = "default") -> Path:
        return write_kubeconfig(path, self.url, namespace)

    def __enter__(self) -> ApiServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
