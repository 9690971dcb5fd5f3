"""A renewed webhook certificate: the server keeps the one it loaded, so /healthz fails and the
kubelet restarts the pod, which then loads the new one."""

from __future__ import annotations

import asyncio
import os
import socket
from types import SimpleNamespace

import requests
from kubernetes import client

from tpujob.controller.health import HealthServer
from tpujob.controller.operator import Operator
from tpujob.controller.settings import OperatorSettings


def _write(path, text: str) -> None:
    """As a Secret volume updates: a new file put in place atomically."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def _operator(tmp_path, **settings) -> Operator:
    return Operator(OperatorSettings(http_port=None, webhook=True,
                                     webhook_cert_dir=str(tmp_path), **settings),
                    client.Configuration())


def test_a_renewed_certificate_or_key_is_noticed(tmp_path):
    _write(tmp_path / "tls.crt", "cert one")
    _write(tmp_path / "tls.key", "key one")
    op = _operator(tmp_path)
    assert not op.webhook_cert_changed()
    _write(tmp_path / "tls.key", "key two")
    assert op.webhook_cert_changed()
    assert not _operator(tmp_path).webhook_cert_changed()  # a restarted operator is content


def test_without_the_webhook_or_with_it_insecure_nothing_is_watched(tmp_path):
    for op in (Operator(OperatorSettings(http_port=None), client.Configuration()),
               _operator(tmp_path, webhook_insecure=True)):
        _write(tmp_path / "tls.crt", os.urandom(8).hex())
        assert not op.webhook_cert_changed()


def test_healthz_fails_once_the_certificate_changed():
    changed = {"now": False}
    stub = SimpleNamespace(queue=SimpleNamespace(alive=True), ready=True,
                           webhook_cert_changed=lambda: changed["now"])

    async def probe() -> list[tuple[int, str]]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = HealthServer(stub, "127.0.0.1", port)
        await server.start()
        try:
            answers = []
            for flag in (False, True):
                changed["now"] = flag
                r = await asyncio.to_thread(requests.get, f"http://127.0.0.1:{port}/healthz",
                                            timeout=5)
                answers.append((r.status_code, r.text))
            return answers
        finally:
            await server.stop()

    (ok, ok_text), (bad, bad_text) = asyncio.run(probe())
    assert (ok, ok_text) == (200, "ok\n")
    assert bad == 503 and "webhook certificate changed" in bad_text
