"""A pass-through HTTP proxy that can be switched to answer every request with 503, or to stop
answering at all: storage trouble between a client (gcsfs, tensorstore) and the GCS emulator,
and back to healthy."""

from __future__ import annotations

import contextlib
import http.client
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
               "proxy-connection", "content-length"}


class FaultyProxy:
    """Forwards to `upstream` while healthy; after `fail("503")` answers 503 to everything,
    after `fail("stall")` holds every request unanswered, until `heal()`."""

    FAULTS = ("503", "stall")

    def __init__(self, upstream: str):
        self.upstream = urlsplit(upstream)
        self.fault: str | None = None
        self.faulted = 0          # requests answered 503 or held
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def fail(self, fault: str = "503") -> None:
        assert fault in self.FAULTS, fault
        self.fault = fault

    def heal(self) -> None:
        self.fault = None

    def close(self) -> None:
        self.heal()
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    chunks = []
                    while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in _HOP_BY_HOP:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _forward(self) -> None:
                body = self._body()
                if proxy.fault == "stall":
                    proxy.faulted += 1
                    while proxy.fault == "stall":
                        time.sleep(0.05)
                    self.close_connection = True  # never answered
                    return
                if proxy.fault == "503":
                    proxy.faulted += 1
                    self._reply(503, [("Content-Type", "application/json")],
                                b'{"error": {"code": 503, "message": "injected outage"}}')
                    return
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port,
                                                  timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in _HOP_BY_HOP and k.lower() != "host"}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    self._reply(resp.status, resp.getheaders(), resp.read())
                finally:
                    conn.close()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward

        return Handler


@contextlib.contextmanager
def faulty_proxy(upstream: str) -> Iterator[FaultyProxy]:
    proxy = FaultyProxy(upstream)
    try:
        yield proxy
    finally:
        proxy.close()
