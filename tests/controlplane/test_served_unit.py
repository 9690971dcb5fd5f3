"""Waiting for a custom resource to be served rides over a connection the API server closes
(seen in CI while the JobSet CRD was being taken up: RemoteDisconnected) instead of failing the
start of the whole control plane."""

from __future__ import annotations

import requests

from tpujob.local.controlplane.cluster import RealControlPlane
from tpujob.local.executor.client import JOBSETS


class _Api:
    def __init__(self):
        self.calls = 0

    def request(self, method, path):
        self.calls += 1
        if self.calls == 1:
            raise requests.ConnectionError("Remote end closed connection without response")
        return {"resources": [{"name": JOBSETS.plural}]}

    def list(self, resource):
        return []


def test_a_closed_connection_is_waited_out():
    plane = RealControlPlane.__new__(RealControlPlane)
    plane._api = _Api()
    plane._wait_until_served(JOBSETS)
    assert plane._api.calls == 2
