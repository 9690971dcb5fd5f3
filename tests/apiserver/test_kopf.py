"""A real kopf operator against the server: it sees a create event, patches status (through
the status subresource) and posts a Kubernetes event."""

from __future__ import annotations

import kopf
import pytest
from kopf.testing import KopfRunner

from tests.apiserver.crds import GROUP, widget
from tests.support.apiserver import Kube, unique_name, wait_for

pytestmark = pytest.mark.integration


def _connection_info(kube: Kube) -> kopf.ConnectionInfo:
    from kubernetes import client, config
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kube.kubeconfig),
                            client_configuration=configuration)
    token = (configuration.api_key or {}).get("authorization", "")
    return kopf.ConnectionInfo(
        server=configuration.host, ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl, scheme="Bearer" if token else None,
        token=token.split(" ", 1)[-1] if token else None,
        certificate_path=configuration.cert_file, private_key_path=configuration.key_file,
        default_namespace=kube.namespace)


def test_kopf_operator_handles_create_and_patches_status(kube: Kube, widgets: str) -> None:
    registry = kopf.OperatorRegistry()
    handled: list[str] = []

    @kopf.on.login(registry=registry)
    def login(**_):
        return _connection_info(kube)

    # Only widgets of this test: the namespace holds other tests' widgets too.
    @kopf.on.create(GROUP, "v1", "widgets", labels={"contract-test": "kopf"}, registry=registry)
    def created(body, name, spec, patch, **_):
        handled.append(name)
        patch.status["phase"] = f"Seen-{spec['replicas']}"
        kopf.info(body, reason="Seen", message="the widget was seen")

    settings = kopf.OperatorSettings()
    settings.watching.server_timeout = 10
    settings.watching.client_timeout = 15
    settings.watching.connect_timeout = 5
    name = unique_name("kopf")
    with KopfRunner(["run", "--standalone", f"--namespace={kube.namespace}"],
                    registry=registry, settings=settings, timeout=30) as runner:
        body = widget(name, replicas=2)
        body["metadata"]["labels"] = {"contract-test": "kopf"}
        created_response = kube.request("POST", widgets, json=body)
        assert created_response.status_code == 201
        phase = wait_for(lambda: (kube.get(f"{widgets}/{name}").json().get("status") or {})
                         .get("phase"), timeout=30, message="kopf to patch the status")
        events = f"/api/v1/namespaces/{kube.namespace}/events"
        wait_for(lambda: [e for e in kube.get(events).json()["items"]
                          if e["involvedObject"].get("name") == name and
                          e["reason"] == "Seen"],
                 timeout=30, message="kopf to post an event")
    assert runner.exception is None
    assert runner.exit_code == 0
    assert phase == "Seen-2"
    assert handled == [name]
