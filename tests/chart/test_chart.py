"""The Helm chart, rendered offline by Helm's own engine: it lints clean, every object is valid
for its Kubernetes kind, and the Deployment, Services, webhook and ServiceAccount are wired to
each other and to the operator's command line as the operator expects."""

from __future__ import annotations

import copy

import helm_python as helm
import pytest
import yaml
from charts.generate import CHART, CRD_SOURCE

from tests.chart.k8s_objects import validation_errors
from tests.chart.support import VALUE_SETS, operator_container, render

pytestmark = pytest.mark.unit

# The only finding allowed: an informational nudge to add an icon URL, which the project has not.
ALLOWED_LINT = [{"severity": 1, "path": "Chart.yaml", "error": "icon is recommended"}]


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_lints_clean(name):
    report = helm.lint(CHART, VALUE_SETS[name], strict=True, kube_version="v1.30.0")
    assert report["errors"] == [] and report["messages"] == ALLOWED_LINT, report


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_object_is_valid_for_its_kind(name):
    rendered = render(VALUE_SETS[name])
    errors = [e for obj in rendered.objects + rendered.crds for e in validation_errors(obj)]
    assert errors == []


def test_the_validator_refuses_broken_objects():
    # Guards the test above against a validator that accepts anything.
    deployment = render(VALUE_SETS["webhook"]).one("Deployment")
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "one"
    assert any("spec.replicas" in e for e in validation_errors(wrong_type))
    unknown_field = copy.deepcopy(deployment)
    unknown_field["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGett"] = {}
    assert any("httpGett" in e for e in validation_errors(unknown_field))
    certificate = copy.deepcopy(render(VALUE_SETS["webhook"]).of_kind("Certificate")[0])
    certificate["spec"]["privateKey"]["algorithm"] = "DSA"
    assert validation_errors(certificate)


def test_default_install():
    rendered = render()
    assert sorted(o["kind"] for o in rendered.objects) == [
        "ClusterRole", "ClusterRoleBinding", "Deployment", "Service", "ServiceAccount"]
    assert rendered.crds == [yaml.safe_load(CRD_SOURCE.read_text())]
    assert operator_container(rendered)["args"] == [
        "operator", "--http-port=8080", "--log-format=json"]
    assert operator_container(rendered)["image"] == \
        "us-docker.pkg.dev/my-project/tpujob/operator:0.1.0"
    namespaced = [o for o in rendered.objects
                  if o["kind"] not in ("ClusterRole", "ClusterRoleBinding")]
    assert {o["metadata"]["namespace"] for o in namespaced} == {"tpujob-system"}


def test_deployment_is_a_hardened_single_replica():
    deployment = render().one("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = operator_container(render())
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert pod["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"}}
    assert container["securityContext"] == {
        "runAsNonRoot": True, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"},
                                      "limits": {"memory": "512Mi"}}
    assert container["env"] == [{"name": "POD_ID", "valueFrom": {
        "fieldRef": {"fieldPath": "metadata.name"}}}]
    # A read-only root needs somewhere writable for temporary files.
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert pod["serviceAccountName"] == render().one("ServiceAccount")["metadata"]["name"]


@pytest.mark.parametrize("name", ["default", "everything"])
def test_probes_and_metrics_service_use_the_operator_http_port(name):
    rendered = render(VALUE_SETS[name])
    container = operator_container(rendered)
    port = VALUE_SETS[name].get("httpPort", 8080)
    assert f"--http-port={port}" in container["args"]
    assert {"name": "http", "containerPort": port, "protocol": "TCP"} in container["ports"]
    probes = {k: container[k]["httpGet"] for k in ("startupProbe", "livenessProbe",
                                                      "readinessProbe")}
    assert probes == {"startupProbe": {"path": "/healthz", "port": "http"},
                      "livenessProbe": {"path": "/healthz", "port": "http"},
                      "readinessProbe": {"path": "/readyz", "port": "http"}}
    service = next(s for s in rendered.of_kind("Service")
                   if s["metadata"]["name"].endswith("-metrics"))
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    pod_labels = rendered.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_watch_namespaces():
    rendered = render({"watchNamespaces": ["team-a"]})
    args = operator_container(rendered)["args"]
    assert "--namespace=team-a" in args and args.count("--namespace=team-a") == 1
    assert not rendered.of_kind("ClusterRole") and not rendered.of_kind("ClusterRoleBinding")
    assert [o["metadata"]["namespace"] for o in rendered.of_kind("Role")] == ["team-a"]
    assert not any(a.startswith("--namespace") for a in operator_container(render())["args"])


def _webhook_parts(rendered):
    config = rendered.one("ValidatingWebhookConfiguration")
    assert len(config["webhooks"]) == 1
    service = next(s for s in rendered.of_kind("Service")
                   if s["metadata"]["name"].endswith("-webhook"))
    return config, config["webhooks"][0], service


@pytest.mark.parametrize("name", ["webhook", "webhook-secret", "everything"])
def test_webhook_reaches_the_operator(name):
    values = VALUE_SETS[name]["webhook"]
    rendered = render(VALUE_SETS[name])
    _, hook, service = _webhook_parts(rendered)
    container = operator_container(rendered)
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    port, cert_dir = values.get("port", 9443), values.get("certDir", "/etc/tpujob/webhook")
    assert ["--webhook", f"--webhook-port={port}", f"--webhook-cert-dir={cert_dir}"] == [
        a for a in container["args"] if a.startswith("--webhook")]
    assert {"name": "webhook", "containerPort": port, "protocol": "TCP"} in container["ports"]
    assert service["spec"]["ports"] == [{"name": "https-webhook", "port": 443,
                                         "targetPort": "webhook", "protocol": "TCP"}]
    assert service["spec"]["selector"].items() <= \
        rendered.one("Deployment")["spec"]["template"]["metadata"]["labels"].items()
    assert hook["clientConfig"]["service"] == {
        "name": service["metadata"]["name"], "namespace": "tpujob-system",
        "path": "/validate-tputrainingjob", "port": 443}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "webhook-cert")
    assert mount == {"name": "webhook-cert", "mountPath": cert_dir, "readOnly": True}
    assert any(v["name"] == "webhook-cert" and "secret" in v for v in pod["volumes"])
    assert hook["failurePolicy"] == values.get("failurePolicy", "Fail")
    assert hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"]
    # The operator's own writes skip the webhook, so it never waits on itself.
    assert hook["matchConditions"] == [{
        "name": "not-the-operator",
        "expression": "request.userInfo.username != "
                      "'system:serviceaccount:tpujob-system:tpujob'"}]


def test_webhook_rules_match_the_crd():
    crd = yaml.safe_load(CRD_SOURCE.read_text())
    _, hook, _ = _webhook_parts(render(VALUE_SETS["webhook"]))
    assert hook["rules"] == [{
        "apiGroups": [crd["spec"]["group"]],
        "apiVersions": [v["name"] for v in crd["spec"]["versions"] if v["served"]],
        "operations": ["CREATE", "UPDATE"],
        "resources": [crd["spec"]["names"]["plural"]],
        "scope": crd["spec"]["scope"]}]
    assert "namespaceSelector" not in hook


def test_webhook_tls_from_cert_manager():
    rendered = render(VALUE_SETS["webhook"])
    config, hook, service = _webhook_parts(rendered)
    certificates = {c["metadata"]["name"]: c for c in rendered.of_kind("Certificate")}
    issuers = {i["metadata"]["name"]: i for i in rendered.of_kind("Issuer")}
    assert sorted(certificates) == ["tpujob-webhook", "tpujob-webhook-ca"]
    assert sorted(issuers) == ["tpujob-selfsigned", "tpujob-webhook-ca"]
    serving, ca = certificates["tpujob-webhook"], certificates["tpujob-webhook-ca"]
    assert config["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "tpujob-system/tpujob-webhook"}
    assert "caBundle" not in hook["clientConfig"]
    svc = service["metadata"]["name"]
    assert serving["spec"]["dnsNames"] == [f"{svc}.tpujob-system.svc",
                                           f"{svc}.tpujob-system.svc.cluster.local"]
    # self-signed -> the release's CA -> the serving certificate: renewing the serving
    # certificate keeps the CA the webhook trusts.
    ref = {"kind": "Issuer", "group": "cert-manager.io"}
    assert ca["spec"]["isCA"] is True
    assert ca["spec"]["issuerRef"] == {"name": "tpujob-selfsigned", **ref}
    assert issuers["tpujob-selfsigned"]["spec"] == {"selfSigned": {}}
    assert issuers["tpujob-webhook-ca"]["spec"] == {"ca": {"secretName":
                                                           ca["spec"]["secretName"]}}
    assert serving["spec"]["issuerRef"] == {"name": "tpujob-webhook-ca", **ref}
    assert "isCA" not in serving["spec"]
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "webhook-cert")
    assert volume["secret"]["secretName"] == serving["spec"]["secretName"]
    assert serving["spec"]["secretName"] != ca["spec"]["secretName"]


def test_webhook_key_is_readable_by_the_operator_user():
    def mode(values):
        pod = render(values).one("Deployment")["spec"]["template"]["spec"]
        volume = next(v for v in pod["volumes"] if v["name"] == "webhook-cert")
        return volume["secret"]["defaultMode"]
    assert mode(VALUE_SETS["webhook"]) == 0o440  # group 65532 through fsGroup
    assert mode({**VALUE_SETS["webhook"], "podSecurityContext": {"fsGroup": None}}) == 0o444


def test_webhook_tls_from_cert_manager_with_own_issuer():
    rendered = render(VALUE_SETS["everything"])
    assert not rendered.of_kind("Issuer")
    assert rendered.one("Certificate")["spec"]["issuerRef"] == {
        "name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}


def test_webhook_tls_from_an_existing_secret():
    values = VALUE_SETS["webhook-secret"]
    rendered = render(values)
    config, hook, _ = _webhook_parts(rendered)
    assert not rendered.of_kind("Certificate") and not rendered.of_kind("Issuer")
    assert "annotations" not in config["metadata"]
    assert hook["clientConfig"]["caBundle"] == values["webhook"]["caBundle"]
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "webhook-cert")
    assert volume["secret"]["secretName"] == "tpujob-webhook-cert"


def test_webhook_only_covers_watched_namespaces():
    _, hook, _ = _webhook_parts(render(VALUE_SETS["everything"]))
    assert hook["namespaceSelector"] == {"matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "In",
        "values": ["team-a", "team-b"]}]}


def test_no_webhook_objects_when_off():
    rendered = render()
    kinds = {o["kind"] for o in rendered.objects}
    assert not kinds & {"ValidatingWebhookConfiguration", "Certificate", "Issuer"}
    assert "webhook-cert" not in str(rendered.one("Deployment"))


def test_gcp_settings():
    rendered = render(VALUE_SETS["everything"])
    args = operator_container(rendered)["args"]
    assert {"--workload-policies", "--gcp-project=acme-ml", "--gcp-region=us-central1"} <= \
        set(args)
    assert rendered.one("ServiceAccount")["metadata"]["annotations"] == {
        "iam.gke.io/gcp-service-account": "tpujob-operator@acme-ml.iam.gserviceaccount.com"}
    assert "annotations" not in render().one("ServiceAccount")["metadata"]
    assert not any(a.startswith("--gcp") or a == "--workload-policies"
                   for a in operator_container(render())["args"])


def test_existing_service_account():
    rendered = render({"serviceAccount": {"create": False, "name": "ops-tpujob"}})
    assert not rendered.of_kind("ServiceAccount")
    assert rendered.one("Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == \
        "ops-tpujob"
    assert rendered.one("ClusterRoleBinding")["subjects"] == [
        {"kind": "ServiceAccount", "name": "ops-tpujob", "namespace": "tpujob-system"}]


def test_service_monitor_scrapes_only_the_metrics_service():
    rendered = render(VALUE_SETS["everything"])
    monitor = rendered.one("ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = [s for s in rendered.of_kind("Service")
                if selector.items() <= s["metadata"]["labels"].items()]
    assert [s["metadata"]["name"] for s in selected] == ["tpujob-metrics"]
    assert monitor["spec"]["endpoints"][0]["port"] == selected[0]["spec"]["ports"][0]["name"]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert not render().of_kind("ServiceMonitor")


def test_template_guards():
    with pytest.raises(helm.HelmError, match="metrics.service.enabled"):
        render({"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}})


def test_notes_tell_the_next_step():
    notes = render().notes
    assert "kubectl -n tpujob-system rollout status deployment/tpujob" in notes
    assert "kubectl apply -f manifests/examples/quickstart.yaml" in notes
    assert "every namespace" in notes and "Workload policies: off" in notes
    assert "team-a" in render(VALUE_SETS["team-a"]).notes
    assert "get certificate tpujob-webhook" in render(VALUE_SETS["webhook"]).notes
    notes = render(VALUE_SETS["everything"]).notes
    assert "acme-ml" in notes and "tpujob-operator@acme-ml.iam.gserviceaccount.com" in notes
    assert all(p in notes for p in ("compute.resourcePolicies.get",
                                    "compute.resourcePolicies.create",
                                    "compute.regionOperations.get"))


def test_operator_command_line_accepts_the_rendered_args():
    from tpujob.cli.main import COMMANDS, build_parser

    if "operator" not in COMMANDS:
        pytest.skip("the `tpujob operator` command is not in this tree yet")
    values = copy.deepcopy(VALUE_SETS["everything"])
    del values["extraArgs"]
    for args in (operator_container(render(values))["args"],
                 operator_container(render())["args"]):
        parsed = build_parser().parse_args(args)
        assert parsed.command == "operator"
