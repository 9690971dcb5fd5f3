"""The real Kubernetes control plane on this machine: etcd, kube-apiserver (TLS, RBAC,
service-account tokens), kube-controller-manager (Job controller, garbage collector, namespace
controller, ...), kube-scheduler, the JobSet controller with its admission webhooks, and the
operator installed with the real `helm install` of `charts/tpujob`, whose ServiceAccount's
token is what the operator then calls the API with.

    with RealControlPlane(workdir) as cp:
        cp.admin_kubeconfig        # system:masters, for kubectl and the local kubelets
        cp.operator_kubeconfig     # the chart's ServiceAccount: RBAC decides what it may do

The operator itself and the nodes' kubelets are started by `LocalCluster`, which uses this in
place of the embedded API server when asked to (`tpujob local up --control-plane real`).
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

import requests
import yaml

from tpujob.local.apiserver.embedded import bundled_crd_paths
from tpujob.local.apiserver.kubeconfig import write_kubeconfig
from tpujob.local.executor.client import JOBSETS, ApiError, KubeApi, Resource

from . import build, components, kueue_setup
from .pki import Pki, build_pki
from .processes import Component, ComponentError, free_port, is_tls_listening

log = logging.getLogger(__name__)

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts")
DEPLOYMENTS = Resource("apps", "v1", "deployments")
WEBHOOKS = {"Mutating": Resource("admissionregistration.k8s.io", "v1",
                                 "mutatingwebhookconfigurations"),
            "Validating": Resource("admissionregistration.k8s.io", "v1",
                                   "validatingwebhookconfigurations")}
TPUJOBS = Resource("tpujob.dev", "v1alpha1", "tputrainingjobs")
KUEUE_KINDS = tuple(Resource("kueue.x-k8s.io", "v1beta2", plural) for plural in (
    "clusterqueues", "localqueues", "resourceflavors", "workloads"))
PROVISIONING_REQUESTS = Resource("autoscaling.x-k8s.io", "v1", "provisioningrequests")
PROVISIONING_CRD = "autoscaling.x-k8s.io_provisioningrequests.yaml"
RELEASE, RELEASE_NAMESPACE = "tpujob", "tpujob-system"
CHART = Path(__file__).resolve().parents[4] / "charts" / "tpujob"
START_TIMEOUT_S = 120.0


class RealControlPlane:
    """The programs of a real control plane over `workdir/control-plane`; `start()` returns
    once each answers and the operator's identity exists; `stop()` stops them all."""

    def __init__(self, workdir: Path, chart: Path = CHART,
                 queue_slices: int = kueue_setup.SLICES_PER_SHAPE) -> None:
        self.root = Path(workdir).resolve() / "control-plane"
        self.chart = chart
        self.queue_slices = queue_slices   # cluster-queue's quota, in slices of each shape
        self.components: list[Component] = []
        self.pki: Pki | None = None
        self.ports: components.Ports | None = None
        self.admin_kubeconfig = self.root / "admin.kubeconfig"   # written by start()
        self.kubelet_kubeconfig = self.root / "kubelet.kubeconfig"
        self.operator_kubeconfig = self.root / "operator.kubeconfig"
        self.timings: dict[str, float] = {}
        self._api: KubeApi | None = None

    @property
    def url(self) -> str:
        assert self.ports is not None, "not started"
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def api(self) -> KubeApi:
        assert self._api is not None, "not started"
        return self._api

    def start(self) -> RealControlPlane:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        t0 = time.monotonic()
        programs = build.ensure_built()
        if not self.chart.joinpath("Chart.yaml").exists():
            raise ComponentError(f"the operator is installed from its Helm chart, and "
                                 f"{self.chart} has none: use a checkout of tpujob")
        self.root.mkdir(parents=True, exist_ok=True)
        logs = self.root / "logs"
        self.pki = pki = build_pki(self.root / "pki")
        self.ports = ports = components.Ports(*(free_port() for _ in range(5)))
        self._mark("build and certificates", t0)

        etcd = self._run("etcd", [str(programs["etcd"]), *components.build_etcd_args(
            self.root / "etcd", ports)], logs)
        etcd.wait_ready(lambda: requests.get(f"http://127.0.0.1:{ports.etcd}/health",
                                             timeout=1).json().get("health") == "true",
                        START_TIMEOUT_S)
        self._mark("etcd", t0)

        apiserver = self._run("kube-apiserver", [str(programs["kube-apiserver"]),
                                                 *components.build_apiserver_args(pki, ports)],
                              logs)
        # One kubeconfig per client identity (pki.CLIENTS names who each one is).
        kubeconfigs = {}
        for name in ("admin", "controller-manager", "scheduler", "jobset", "kueue", "kubelet"):
            cert, key = pki.client(name)
            kubeconfigs[name] = write_kubeconfig(
                self.root / f"{name}.kubeconfig", self.url,
                user={"client-certificate": str(cert), "client-key": str(key)}, ca_file=pki.ca)
        self.kubelet_kubeconfig = kubeconfigs["kubelet"]
        self._api = KubeApi(self.admin_kubeconfig)
        session = self.api.session
        apiserver.wait_ready(lambda: session.get(self.url + "/readyz", timeout=2,
                                                 verify=session.verify).status_code == 200,
                             START_TIMEOUT_S)
        self._mark("kube-apiserver", t0)

        self._run("kube-scheduler", [str(programs["kube-scheduler"]),
                                     *components.build_scheduler_args(kubeconfigs["scheduler"])],
                  logs)
        # JobSet: its CRD (the release it is built from), its webhooks, the controller.
        self._create_crds(bundled_crd_paths())
        # Its controller gives up on a kind not served yet and looks again only 10 s later.
        self._wait_until_served(JOBSETS)
        self._place_webhook_cert(pki.folder / "jobset-webhook")
        config = self.root / "jobset-config.yaml"
        config.write_text(components.build_jobset_config(pki, ports))
        jobset = self._run("jobset-controller", [
            str(programs["jobset"]), *components.build_jobset_args(config, kubeconfigs["jobset"])],
            logs)
        ca_bundle = base64.b64encode(pki.ca.read_bytes()).decode()
        self._create_webhooks(components.build_webhook_configurations(
            "jobset", components.JOBSET_WEBHOOKS, ports.jobset_webhook, ca_bundle))
        jobset.wait_ready(lambda: is_tls_listening(ports.jobset_webhook), START_TIMEOUT_S)
        self._mark("jobset controller", t0)
        self._start_kueue(programs["kueue"], kubeconfigs, ca_bundle, logs)
        self._mark("kueue", t0)
        self._install_operator(programs["helm"])
        self._mark("helm install", t0)

        # The controller manager comes last, once every CRD is served: its garbage collector
        # takes the kinds it watches from discovery when it starts, and looks again only every
        # 30 s (garbageCollectorController.Run in cmd/kube-controller-manager/app/core.go), so
        # the children of a kind served after it started would outlive their deleted owner for
        # up to 30 s. It is ready when its service-account controller made `default`.
        kcm = self._run("kube-controller-manager", [
            str(programs["kube-controller-manager"]),
            *components.build_controller_manager_args(pki, kubeconfigs["controller-manager"])],
            logs)
        kcm.wait_ready(lambda: self.api.get(SERVICE_ACCOUNTS, "default", "default") is not None,
                       START_TIMEOUT_S)
        self._mark("kube-controller-manager", t0)

    def _install_operator(self, helm: Path) -> None:
        """`helm install` of the chart, as a user installs it; the Deployment's pod cannot run
        here (no container runtime), so it is scaled to 0 and the operator runs in this
        process with a token of the chart's ServiceAccount, the identity that pod would have."""
        proc = subprocess.run(
            [str(helm), "install", RELEASE, str(self.chart), "--namespace", RELEASE_NAMESPACE,
             "--create-namespace", "--kubeconfig", str(self.admin_kubeconfig),
             "--set", "logFormat=text"],
            capture_output=True, text=True, env=_helm_env(self.root))
        (self.root / "logs" / "helm-install.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode:
            raise ComponentError(f"helm install of {self.chart} failed "
                                 f"(exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}")
        self.api.patch(DEPLOYMENTS, RELEASE_NAMESPACE, RELEASE, {"spec": {"replicas": 0}})
        self._wait_until_served(TPUJOBS)
        token = self.api.request(
            "POST", SERVICE_ACCOUNTS.path(RELEASE_NAMESPACE, RELEASE, "token"),
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": 7 * 24 * 3600}})["status"]["token"]
        assert self.pki is not None
        write_kubeconfig(self.operator_kubeconfig, self.url, user={"token": token},
                         ca_file=self.pki.ca)

    def _start_kueue(self, program: Path, kubeconfigs: dict[str, Path], ca_bundle: str,
                     logs: Path) -> None:
        """Kueue: its CRDs, the controller, and its webhooks (JobSet's and its own kinds').
        The ProvisioningRequest kind (GKE's cluster autoscaler serves it on a cluster) is made
        first: Kueue sets up its provisioning admission check only when the kind is served at
        its start (`ServerSupportsProvisioningRequest` in its cmd/kueue/main.go); local mode's
        stand-in provisioner answers the requests (tpujob.local.executor.provisioner)."""
        assert self.pki is not None and self.ports is not None
        self._create_crds(sorted(build.shared("kueue", "bases").glob("*.yaml")))
        self._create_crds([build.shared("provisioning", PROVISIONING_CRD)])
        for resource in (*KUEUE_KINDS, PROVISIONING_REQUESTS):
            self._wait_until_served(resource)
        self._place_webhook_cert(self.pki.folder / "kueue-webhook")
        config = self.root / "kueue-config.yaml"
        config.write_text(components.build_kueue_config(self.pki, self.ports))
        upper, work = self.root / "kueue-etc" / "upper", self.root / "kueue-etc" / "work"
        self._place_webhook_cert(upper / components.KUEUE_METRICS_CERTS)
        work.mkdir(parents=True, exist_ok=True)
        kueue = self._run("kueue", components.build_etc_overlay_argv(
            [str(program), *components.build_kueue_args(config, kubeconfigs["kueue"])],
            upper, work), logs)
        manifests = [d for d in yaml.safe_load_all(
            build.shared("kueue", "manifests.yaml").read_text()) if d]
        self._create_webhooks(components.build_kueue_webhooks(
            manifests, self.ports.kueue_webhook, ca_bundle))
        kueue.wait_ready(lambda: is_tls_listening(self.ports.kueue_webhook), START_TIMEOUT_S)
        self._create_queues()

    def _create_queues(self) -> None:
        """xpk's queues and priority classes for local mode's node pools (kueue_setup), made
        where missing; after Kueue's webhooks, which default and check them. The LocalQueue's
        namespace `default` is kube-apiserver's own (its bootstrap controller makes it), so it
        needs no controller manager: it is created here if it is not there yet."""
        for body in kueue_setup.build_kueue_objects(self.queue_slices):
            self._create(kueue_setup.RESOURCES[body["kind"]], body["metadata"].get("namespace"),
                         body)

    def _create_crds(self, paths: list[Path]) -> None:
        for path in paths:
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    self._create(CRDS, None, doc)

    def _create_webhooks(self, configurations: list[dict]) -> None:
        for doc in configurations:
            self._create(WEBHOOKS[doc["kind"].removesuffix("WebhookConfiguration")], None, doc)

    def _place_webhook_cert(self, folder: Path) -> None:
        """The local CA's serving certificate for 127.0.0.1 as `tls.crt` and `tls.key` in
        `folder`, where controller-runtime programs read theirs."""
        assert self.pki is not None
        folder.mkdir(parents=True, exist_ok=True)
        cert, key = self.pki.serving("webhooks")
        shutil.copy(cert, folder / "tls.crt")
        shutil.copy(key, folder / "tls.key")

    def _wait_until_served(self, resource: Resource) -> None:
        """A custom resource is served once discovery names it (what controllers map kinds
        with) and a list of it answers: not 404 (the CRD not yet established) nor 429
        ("storage is (re)initializing")."""
        deadline = time.monotonic() + START_TIMEOUT_S
        discovery = f"/apis/{resource.group}/{resource.version}"
        while True:
            try:
                names = {r["name"] for r in self.api.request("GET", discovery)["resources"]}
                if resource.plural in names:
                    self.api.list(resource)
                    return
            except ApiError as err:
                if err.status not in (404, 429):
                    raise
            except requests.ConnectionError:
                pass  # the API server closed the connection (seen while a new CRD is taken up)
            if time.monotonic() > deadline:
                raise ComponentError(f"{resource.plural}.{resource.group} not served after "
                                     f"{START_TIMEOUT_S:.0f} s")
            time.sleep(0.1)

    def _run(self, name: str, argv: list[str], logs: Path) -> Component:
        component = Component(name, argv, logs).start()
        self.components.append(component)
        return component

    def _create(self, resource: Resource, namespace: str | None, body: dict) -> None:
        try:
            self.api.create(resource, namespace, body)
        except ApiError as err:
            if err.status != 409:
                raise

    def _mark(self, what: str, t0: float) -> None:
        self.timings[what] = round(time.monotonic() - t0, 2)
        log.info("control plane: %s ready after %.1f s", what, self.timings[what])

    def stop(self) -> None:
        """Stop every program, the last started first."""
        for component in reversed(self.components):
            try:
                component.stop()
            except Exception as err:  # keep stopping the others
                log.warning("stopping %s failed: %s", component.name, err)
        self.components.clear()
        if self._api is not None:
            self._api.close()
            self._api = None

    def __enter__(self) -> RealControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _helm_env(root: Path) -> dict[str, str]:
    """Helm's caches and config under the work directory, not the user's home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    for key, sub in (("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"),
                     ("HELM_DATA_HOME", "data")):
        env[key] = str(root / "helm" / sub)
    return env
