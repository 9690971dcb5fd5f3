"""How each program of the real control plane is started: what its command line asks for
(loopback only, the security the issue asks of the apiserver) and the webhooks sent by URL."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tpujob.local.controlplane import components
from tpujob.local.controlplane.pki import Pki

pytestmark = pytest.mark.unit

PKI = Pki(Path("/pki"))
PORTS = components.Ports(etcd=2379, etcd_peer=2380, apiserver=6443, jobset_webhook=9443,
                         kueue_webhook=9444)


def _flags(args: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("--").split("=", 1) for a in args)


def test_the_apiserver_authorizes_with_rbac_over_tls_with_service_account_tokens():
    flags = _flags(components.build_apiserver_args(PKI, PORTS))
    assert flags["authorization-mode"] == "Node,RBAC"
    assert flags["bind-address"] == "127.0.0.1" and flags["secure-port"] == "6443"
    assert flags["tls-cert-file"] == "/pki/apiserver-serving.crt"
    assert flags["client-ca-file"] == "/pki/ca.crt"
    assert flags["service-account-signing-key-file"] == "/pki/sa.key"
    assert flags["service-account-key-file"] == "/pki/sa.pub"
    assert flags["etcd-servers"] == "http://127.0.0.1:2379"
    assert flags["kubelet-certificate-authority"] == "/pki/ca.crt"


def test_etcd_listens_on_loopback_only():
    flags = _flags(components.build_etcd_args(Path("/data"), PORTS))
    for key in ("listen-client-urls", "listen-peer-urls", "advertise-client-urls"):
        assert flags[key].startswith("http://127.0.0.1:"), key


def test_the_controller_manager_runs_the_job_and_garbage_collector_controllers():
    flags = _flags(components.build_controller_manager_args(PKI, Path("/kc")))
    controllers = flags["controllers"].split(",")
    assert controllers[0] == "*"
    assert not {"-job-controller", "-garbage-collector-controller", "-namespace-controller",
                "-nodelifecycle"} & set(controllers)
    assert "-endpointslice-controller" in controllers
    assert flags["use-service-account-credentials"] == "true"
    assert flags["service-account-private-key-file"] == "/pki/sa.key"


def test_jobset_config_turns_on_the_gates_the_restart_strategies_need():
    config = yaml.safe_load(components.build_jobset_config(PKI, PORTS))
    assert config["featureGates"] == {"RestartJob": True, "InPlaceRestart": True}
    assert config["webhook"]["host"] == "127.0.0.1" and config["webhook"]["port"] == 9443
    assert config["internalCertManagement"] == {"enable": False}
    assert config["leaderElection"] == {"leaderElect": False}


def test_jobset_webhooks_are_sent_by_url_to_loopback_with_the_local_ca():
    docs = components.build_webhook_configurations("jobset", components.JOBSET_WEBHOOKS, 9443,
                                                   "Q0E=")
    assert [d["kind"] for d in docs] == ["MutatingWebhookConfiguration",
                                         "ValidatingWebhookConfiguration"]
    assert [[h["name"] for h in d["webhooks"]] for d in docs] == [
        ["mjobset.kb.io", "mpod.kb.io"], ["vjobset.kb.io", "vpod.kb.io"]]
    hooks = [h for d in docs for h in d["webhooks"]]
    assert len(hooks) == 4
    assert {h["clientConfig"]["url"] for h in hooks} == {
        "https://127.0.0.1:9443/mutate-jobset-x-k8s-io-v1alpha2-jobset",
        "https://127.0.0.1:9443/mutate--v1-pod",
        "https://127.0.0.1:9443/validate-jobset-x-k8s-io-v1alpha2-jobset",
        "https://127.0.0.1:9443/validate--v1-pod"}
    assert all(h["clientConfig"]["caBundle"] == "Q0E=" and "service" not in h["clientConfig"]
               for h in hooks)
    validate = next(h for h in hooks if h["name"] == "vjobset.kb.io")
    assert validate["rules"][0]["operations"] == ["CREATE", "UPDATE"]


KUEUE_MANIFESTS = [
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
     "metadata": {"name": "mutating-webhook-configuration"}, "webhooks": [
         {"name": "mpod.kb.io", "clientConfig": {"service": {
             "name": "s", "namespace": "system", "path": "/mutate--v1-pod"}}},
         {"name": "mjobset.kb.io", "failurePolicy": "Fail", "clientConfig": {"service": {
             "name": "s", "namespace": "system",
             "path": "/mutate-jobset-x-k8s-io-v1alpha2-jobset"}}}]},
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
     "metadata": {"name": "validating-webhook-configuration"}, "webhooks": [
         {"name": "vworkload.kb.io", "clientConfig": {"service": {
             "name": "s", "namespace": "system",
             "path": "/validate-kueue-x-k8s-io-v1beta2-workload"}}},
         {"name": "vrayjob.kb.io", "clientConfig": {"service": {
             "name": "s", "namespace": "system", "path": "/validate-ray-io-v1-rayjob"}}}]},
]


def test_kueue_keeps_the_webhooks_of_its_kinds_and_of_jobset_only():
    docs = components.build_kueue_webhooks(KUEUE_MANIFESTS, 9444, "Q0E=")
    names = {d["metadata"]["name"]: [h["name"] for h in d["webhooks"]] for d in docs}
    assert names == {"kueue-mutatingwebhookconfiguration": ["mjobset.kb.io"],
                     "kueue-validatingwebhookconfiguration": ["vworkload.kb.io"]}
    hook = docs[0]["webhooks"][0]
    assert hook["clientConfig"] == {
        "url": "https://127.0.0.1:9444/mutate-jobset-x-k8s-io-v1alpha2-jobset",
        "caBundle": "Q0E="}
    assert hook["failurePolicy"] == "Fail", "the rest of the webhook is kept"


def test_kueue_config_integrates_jobset_alone():
    config = yaml.safe_load(components.build_kueue_config(PKI, PORTS))
    assert config["integrations"] == {"frameworks": ["jobset.x-k8s.io/jobset"]}
    assert config["webhook"]["port"] == 9444 and config["webhook"]["host"] == "127.0.0.1"
    assert "--feature-gates=VisibilityOnDemand=false" in components.build_kueue_args(
        Path("/c"), Path("/k"))


def test_kueue_finds_its_metrics_certificate_under_an_etc_of_its_own():
    argv = components.build_etc_overlay_argv(["/bin/kueue", "--config=c"], Path("/u"),
                                             Path("/w"))
    assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    script = argv[7]
    assert "lowerdir=/etc,upperdir=/u,workdir=/w /etc" in script and 'exec "$@"' in script
    assert argv[-2:] == ["/bin/kueue", "--config=c"]
    assert components.KUEUE_METRICS_CERTS == "kueue/metrics/certs"
