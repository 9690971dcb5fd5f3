"""How each program of the real control plane is started here: its command line (pure
`build_*_args` functions) and the signal that says it is ready.

Everything listens on 127.0.0.1 only. Webhooks are reached by URL (127.0.0.1), never through a
Service's cluster IP: the service range is a name space here, nothing is sent to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from .pki import Pki

SERVICE_CIDR = "10.96.0.0/16"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True)
class Ports:
    etcd: int
    etcd_peer: int
    apiserver: int
    jobset_webhook: int
    kueue_webhook: int


def build_etcd_args(data_dir: Path, ports: Ports) -> list[str]:
    client = f"http://127.0.0.1:{ports.etcd}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [f"--data-dir={data_dir}", "--name=local",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=local={peer}",
            # A test cluster on one small disk: no fsync (etcd's own flag for this), and
            # little history kept.
            "--unsafe-no-fsync=true", "--quota-backend-bytes=1073741824",
            "--auto-compaction-retention=5m", "--log-level=warn"]


def build_apiserver_args(pki: Pki, ports: Ports) -> list[str]:
    cert, key = pki.serving("apiserver")
    kubelet_cert, kubelet_key = pki.client("apiserver-kubelet-client")
    return [f"--etcd-servers=http://127.0.0.1:{ports.etcd}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={ports.apiserver}",
            f"--tls-cert-file={cert}", f"--tls-private-key-file={key}",
            f"--client-ca-file={pki.ca}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--kubelet-client-certificate={kubelet_cert}",
            f"--kubelet-client-key={kubelet_key}",
            f"--kubelet-certificate-authority={pki.ca}",
            "--kubelet-preferred-address-types=InternalIP",
            "--allow-privileged=true", "--profiling=false",
            "--endpoint-reconciler-type=none", "--v=1"]


def build_controller_manager_args(pki: Pki, kubeconfig: Path) -> list[str]:
    return [f"--kubeconfig={kubeconfig}", "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca}",
            # Cloud and network controllers have nothing to do on this machine; nor have the
            # Endpoints and EndpointSlice controllers: pods here have loopback addresses, which
            # Endpoints refuse (the executor answers the pods' DNS names itself).
            "--controllers=*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle-controller,"
            "-node-route-controller,-persistentvolume-binder-controller,"
            "-persistentvolume-expander-controller,-persistentvolume-attach-detach-controller,"
            "-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller",
            # A new node is tainted not-ready until the node controller's next look sees it
            # Ready: every 5 s by default, every second here.
            "--node-monitor-period=1s",
            "--secure-port=0", "--profiling=false", "--v=1"]


def build_scheduler_args(kubeconfig: Path) -> list[str]:
    return [f"--kubeconfig={kubeconfig}", "--leader-elect=false", "--secure-port=0",
            "--profiling=false", "--v=1"]


def build_jobset_config(pki: Pki, ports: Ports) -> str:
    """JobSet's own Configuration file: no leader election, no cert rotation of its own (the
    local CA signed its serving certificate), the webhook on 127.0.0.1, no metrics server, and
    the alpha feature gates the restart strategies RestartJob and InPlaceRestart need (off by
    default in v0.12.0, pkg/features: a cluster must turn them on for those strategies)."""
    return yaml.safe_dump({
        **_controller_config(pki, "config.jobset.x-k8s.io/v1alpha1", "jobset-webhook",
                             ports.jobset_webhook),
        "featureGates": {"RestartJob": True, "InPlaceRestart": True},
    })


def _controller_config(pki: Pki, api_version: str, cert_folder: str, port: int) -> dict:
    """What JobSet's and Kueue's Configuration files share (both are controller-runtime
    managers): no leader election, no certificate management of their own (the local CA signed
    the webhook's certificate, in `cert_folder` beside the PKI), the webhook server on
    127.0.0.1:port, no metrics or health servers."""
    cert, _ = pki.serving("webhooks")
    return {"apiVersion": api_version, "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": port, "host": "127.0.0.1",
                        "certDir": str(cert.parent / cert_folder)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": "0"}}


def build_jobset_args(config: Path, kubeconfig: Path) -> list[str]:
    return [f"--config={config}", f"--kubeconfig={kubeconfig}", "--zap-log-level=info"]


# The JobSet controller's admission webhooks (kubernetes-sigs/jobset v0.12.0,
# config/components/webhook/manifests.yaml): (kind, name, path, group, resources, operations).
JOBSET_WEBHOOKS = (
    ("Mutating", "mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
     "jobset.x-k8s.io", "v1alpha2", "jobsets", ("CREATE",)),
    ("Mutating", "mpod.kb.io", "/mutate--v1-pod", "", "v1", "pods", ("CREATE",)),
    ("Validating", "vjobset.kb.io", "/validate-jobset-x-k8s-io-v1alpha2-jobset",
     "jobset.x-k8s.io", "v1alpha2", "jobsets", ("CREATE", "UPDATE")),
    ("Validating", "vpod.kb.io", "/validate--v1-pod", "", "v1", "pods", ("CREATE",)),
)


def build_webhook_configurations(prefix: str, webhooks, port: int, ca_bundle: str
                                 ) -> list[dict]:
    """Mutating and Validating webhook configurations that send to https://127.0.0.1:port,
    trusting the local CA (`ca_bundle`: base64 of its PEM)."""
    out = []
    for kind in ("Mutating", "Validating"):
        hooks = [{
            "name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "timeoutSeconds": 10,
            "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle},
            "rules": [{"apiGroups": [group], "apiVersions": [version],
                       "operations": list(operations), "resources": [resource]}],
        } for k, name, path, group, version, resource, operations in webhooks if k == kind]
        if hooks:
            out.append({"apiVersion": "admissionregistration.k8s.io/v1",
                        "kind": f"{kind}WebhookConfiguration",
                        "metadata": {"name": f"{prefix}-{kind.lower()}-webhooks"},
                        "webhooks": hooks})
    return out


def build_kueue_config(pki: Pki, ports: Ports) -> str:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2, as its
    config/components/manager/controller_manager_config.yaml): JobSet the one integration, no
    leader election, no cert rotation of its own, the webhook on 127.0.0.1, no metrics or health
    servers."""
    return yaml.safe_dump({
        **_controller_config(pki, "config.kueue.x-k8s.io/v1beta2", "kueue-webhook",
                             ports.kueue_webhook),
        "integrations": {"frameworks": ["jobset.x-k8s.io/jobset"]},
    })


def build_kueue_args(config: Path, kubeconfig: Path) -> list[str]:
    # The visibility server (pending workloads) would listen on every interface: off for now.
    return [f"--config={config}", f"--kubeconfig={kubeconfig}",
            "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=info"]


KUEUE_METRICS_CERTS = "kueue/metrics/certs"   # under /etc, fixed in Kueue v0.17.0's main.go


def build_etc_overlay_argv(argv: list[str], upper: Path, work: Path) -> list[str]:
    """`argv` run in a mount namespace of its own whose /etc is the machine's with `upper`
    laid over it (overlayfs), so the program finds files at fixed /etc paths that the machine
    does not have, and nothing of the machine changes. Kueue v0.17.0 reads its metrics
    certificate from /etc/kueue/metrics/certs whenever its own certificate management is off,
    and exits without one."""
    mount = (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc"
             ' && exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", mount,
            "sh", *argv]


def is_kueue_webhook_used(path: str) -> bool:
    """The webhooks of Kueue's own kinds and of its JobSet integration; the others belong to
    integrations not enabled here, whose paths its server does not serve."""
    return "-kueue-x-k8s-io-" in path or "-jobset-x-k8s-io-" in path


def build_kueue_webhooks(manifests: list[dict], port: int, ca_bundle: str) -> list[dict]:
    """Kueue's webhook configurations (its config/components/webhook/manifests.yaml), kept to
    the webhooks `is_kueue_webhook_used` names and sent by URL to 127.0.0.1:port."""
    out = []
    for doc in manifests:
        hooks = []
        for hook in doc.get("webhooks") or []:
            path = hook["clientConfig"]["service"]["path"]
            if is_kueue_webhook_used(path):
                hooks.append({**hook, "clientConfig": {
                    "url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}})
        if hooks:
            out.append({**doc, "metadata": {"name": f"kueue-{doc['kind'].lower()}"},
                        "webhooks": hooks})
    return out
