"""A small Kubernetes API client over HTTP (requests): list, get, create, patch, replace,
delete and watch, against a server named by URL or by a kubeconfig file (whose token, client
certificate and CA it uses, through the `kubernetes` package's loader)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests

MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Resource:
    """A namespaced resource: group/version and plural name."""

    group: str
    version: str
    plural: str

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name)}"
        if subresource:
            base += f"/{subresource}"
        return base


JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets")
JOBS = Resource("batch", "v1", "jobs")
PODS = Resource("", "v1", "pods")
SERVICES = Resource("", "v1", "services")
CONFIGMAPS = Resource("", "v1", "configmaps")
SECRETS = Resource("", "v1", "secrets")
EVENTS = Resource("", "v1", "events")


class ApiError(Exception):
    """A request the API server refused."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class KubeApi:
    """HTTP access to one API server. Thread-safe for requests from several threads as long as
    each watch uses its own `KubeApi.session_copy()`."""

    def __init__(self, server: str | os.PathLike, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.session = requests.Session()
        text = str(server)
        if text.startswith(("http://", "https://")):
            self.base_url = text.rstrip("/")
        else:
            self.base_url = self._configure_from_kubeconfig(Path(text))
        self.session.headers["User-Agent"] = "tpujob-local-executor"

    def _configure_from_kubeconfig(self, path: Path) -> str:
        from kubernetes import client, config
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(path), client_configuration=configuration)
        keys = configuration.api_key or {}
        token = keys.get("authorization") or keys.get("BearerToken")
        if token:
            self.session.headers["Authorization"] = \
                token if token.lower().startswith("bearer ") else f"Bearer {token}"
        if configuration.cert_file and configuration.key_file:
            self.session.cert = (configuration.cert_file, configuration.key_file)
        self.session.verify = configuration.ssl_ca_cert or configuration.verify_ssl
        return configuration.host.rstrip("/")

    def session_copy(self) -> KubeApi:
        """A client with the same server and credentials and its own connection pool."""
        other = KubeApi.__new__(KubeApi)
        other.timeout, other.base_url = self.timeout, self.base_url
        other.session = requests.Session()
        other.session.headers.update(self.session.headers)
        other.session.cert, other.session.verify = self.session.cert, self.session.verify
        return other

    def close(self) -> None:
        self.session.close()

    # -- requests ----------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json", **params: Any) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        # verify named on each request: requests lets $REQUESTS_CA_BUNDLE override a session's
        # own CA otherwise (psf/requests#3829), and the local control plane has its own CA.
        response = self.session.request(method, self.base_url + path, data=data,
                                        headers=headers, timeout=self.timeout,
                                        verify=self.session.verify,
                                        params={k: v for k, v in params.items() if v is not None})
        if response.status_code >= 400:
            try:
                status = response.json()
            except ValueError:
                status = {}
            raise ApiError(response.status_code, status.get("reason", response.reason or ""),
                           status.get("message", response.text[:500]))
        return response.json() if response.content else {}

    def list(self, resource: Resource, namespace: str | None = None,
             label_selector: str | None = None) -> tuple[list[dict[str, Any]], str]:
        """The objects and the list's resourceVersion."""
        body = self.request("GET", resource.path(namespace), labelSelector=label_selector)
        kind = body.get("kind", "").removesuffix("List")
        api_version = body.get("apiVersion")
        items = body.get("items") or []
        for item in items:  # lists omit these on their items
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", api_version)
        return items, (body.get("metadata") or {}).get("resourceVersion", "")

    def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", resource.path(namespace, name))
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def create(self, resource: Resource, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", resource.path(namespace), body)

    def replace(self, resource: Resource, obj: dict[str, Any],
                subresource: str | None = None) -> dict[str, Any]:
        meta = obj["metadata"]
        return self.request("PUT", resource.path(meta.get("namespace"), meta["name"],
                                                 subresource),
                            obj)

    def patch(self, resource: Resource, namespace: str, name: str, body: dict[str, Any],
              subresource: str | None = None) -> dict[str, Any]:
        return self.request("PATCH", resource.path(namespace, name, subresource), body,
                            content_type=MERGE_PATCH)

    def delete(self, resource: Resource, namespace: str, name: str,
               propagation: str | None = None, uid: str | None = None,
               grace_period_s: int | None = None) -> bool:
        """Delete; False when it was already gone."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation:
            body["propagationPolicy"] = propagation
        if grace_period_s is not None:
            body["gracePeriodSeconds"] = grace_period_s
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self.request("DELETE", resource.path(namespace, name), body)
        except ApiError as err:
            if err.status in (404, 409):  # gone, or replaced by a newer object of that name
                return False
            raise
        return True

    def watch(self, resource: Resource, namespace: str | None, resource_version: str,
              label_selector: str | None = None, timeout_s: int = 30
              ) -> Iterator[dict[str, Any]]:
        """Watch events from `resource_version` until the server ends the watch."""
        params = {"watch": "true", "resourceVersion": resource_version,
                  "timeoutSeconds": str(timeout_s), "allowWatchBookmarks": "true",
                  "labelSelector": label_selector}
        with self.session.get(self.base_url + resource.path(namespace),
                              params={k: v for k, v in params.items() if v is not None},
                              stream=True, timeout=(self.timeout, timeout_s + 10),
                              verify=self.session.verify) as response:
            if response.status_code >= 400:
                raise ApiError(response.status_code, response.reason or "", response.text[:500])
            self._watch_response = response
            for line in response.iter_lines():
                if line:
                    yield json.loads(line)
