"""Everything tpujob needs on one machine, started and stopped as one: the embedded Kubernetes
API server (JobSet and TpuTrainingJob CRDs served), a GCS emulator for `gs://` outputs, the
operator (the same code as in a cluster, in a thread) and the local executor (JobSet and Job
controllers, kubelets running pods as processes).

    with LocalCluster(".tpujob/work") as cluster:
        cluster.apply(documents)          # as `kubectl apply -f`
        cluster.job("default", "quickstart")

`stop()` stops the pieces in reverse order and leaves no process behind: the executor's
trainer processes first, then the operator, the emulator and the server.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpujob.api.crd import build_crd
from tpujob.api.resource import GROUP, PLURAL, VERSION
from tpujob.controller.settings import OperatorSettings
from tpujob.local.apiserver import ApiServer, bundled_crd_paths, load_crds
from tpujob.local.executor.client import EVENTS, PODS, KubeApi, Resource
from tpujob.local.session.gcs import GcsEmulator, bucket_of
from tpujob.local.session.manifests import apply_documents

log = logging.getLogger("tpujob.local")
TPUJOBS = Resource(GROUP, VERSION, PLURAL)


class StartError(RuntimeError):
    """A piece of local mode could not be started; the message says which and why."""

# The operator reads progress every second here (15 s in a cluster): a person is watching.
LOCAL_OPERATOR = OperatorSettings(http_host="127.0.0.1", http_port=None, progress_interval_s=1.0,
                                  resync_interval_s=10.0, retry_delays_s=(0.5, 1, 2, 5),
                                  host_report_interval_s=2.0)


@dataclass(frozen=True)
class LocalSettings:
    """How the pieces of local mode are started."""

    port: int = 0                          # the API server's port; 0: a free one
    cpu_devices_per_process: int | None = 1   # JAX CPU devices per trainer process (None: as on TPU)
    gcs: bool = True                       # run the GCS emulator for gs:// outputs
    operator: OperatorSettings = LOCAL_OPERATOR
    executor: dict[str, Any] = field(default_factory=dict)   # ExecutorSettings overrides
    # "embedded": the API server written for local mode, with the executor as JobSet and Job
    # controllers. "real": etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the
    # JobSet controller and the chart installed by helm (tpujob.local.controlplane), with the
    # executor as the kubelets of TPU node pools.
    control_plane: str = "embedded"


class LocalCluster:
    """The API server, GCS emulator, operator and executor of local mode, over `workdir`
    (the kubeconfig, pod directories and logs, the emulated buckets, the operator's log)."""

    def __init__(self, workdir: str | os.PathLike, settings: LocalSettings | None = None,
                 **overrides: Any) -> None:
        self.settings = dataclasses.replace(settings or LocalSettings(), **overrides)
        self.workdir = Path(workdir).resolve()
        self.server: ApiServer | None = None
        self.control_plane: Any = None   # RealControlPlane
        self.gcs: GcsEmulator | None = None
        self.operator: Any = None     # OperatorThread
        self.executor: Any = None     # Executor
        self.api: KubeApi | None = None
        self.kubeconfig = self.workdir / "kubeconfig"
        self._stopping = threading.Event()
        self._buckets: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        """Start every piece; on any failure, stop what already runs and raise."""
        from tpujob.controller.operator import Operator
        from tpujob.controller.runner import OperatorThread, load_api_config
        from tpujob.local.executor import Executor

        if self.settings.control_plane not in ("embedded", "real"):
            raise ValueError(f"control_plane must be 'embedded' or 'real', not "
                             f"{self.settings.control_plane!r}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            if self.settings.control_plane == "real":
                operator_config, executor_server = self._start_real_control_plane()
            else:
                # The server, with both CRDs served from the start (no apply, no wait).
                crds = load_crds(bundled_crd_paths()) + [build_crd()]
                self.server = ApiServer(port=self.settings.port, crds=crds)
                self.server.start()
                self.server.write_kubeconfig(self.kubeconfig)
                self.api = KubeApi(self.server.url)
                operator_config, executor_server = self.kubeconfig, self.server.url
            # The emulator before the executor: every trainer process gets its address.
            extra_env = dict(self.settings.executor.get("extra_env", {}))
            if self.settings.gcs:
                self.gcs = GcsEmulator(self.workdir / "gcs")
                self.gcs.start()
                extra_env.update(self.gcs.env)
            # The operator, exactly as `tpujob operator` runs it, in a thread.
            operator = Operator(self.settings.operator, load_api_config(operator_config))
            self.operator = OperatorThread(operator).start()
            # The executor: JobSet/Job controllers and kubelets, pods as local processes.
            overrides = {**self.settings.executor, "extra_env": extra_env}
            if self.settings.cpu_devices_per_process is not None:
                overrides["cpu_devices_per_process"] = self.settings.cpu_devices_per_process
            if self.control_plane is not None:
                overrides["controllers"] = False
                pki = self.control_plane.pki
                overrides["kubelet_tls"] = (*map(str, pki.serving("kubelet")), str(pki.ca))
            self.executor = Executor(executor_server, self.workdir, **overrides)
            self.executor.start()
            if self.server is not None:
                self.server.set_pod_logs(self.executor.kubelet)   # kubectl logs
            # Jobs created by others (kubectl) get their output bucket too.
            if self.gcs is not None:
                self._buckets = threading.Thread(target=self._provide_buckets,
                                                 name="local-buckets", daemon=True)
                self._buckets.start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_real_control_plane(self) -> tuple[Path, Path]:
        """Start the real control plane; the user's kubeconfig is its admin's. Returns the
        operator's kubeconfig (the chart's ServiceAccount) and the kubelets'."""
        from tpujob.local.controlplane.build import BuildError
        from tpujob.local.controlplane.cluster import RealControlPlane
        from tpujob.local.controlplane.processes import ComponentError

        self.control_plane = RealControlPlane(self.workdir)
        try:
            self.control_plane.start()
        except (BuildError, ComponentError) as err:
            raise StartError(f"the real control plane: {err}") from err
        self.write_kubeconfig(self.kubeconfig)
        self.api = KubeApi(self.control_plane.admin_kubeconfig)
        return self.control_plane.operator_kubeconfig, self.control_plane.kubelet_kubeconfig

    def stop(self) -> None:
        """Stop the executor (and every process it started), the operator, the emulator and the
        server; each is stopped even when an earlier one fails to."""
        self._stopping.set()
        if self.server is not None:
            self.server.set_pod_logs(None)
        steps = [("executor", self.executor), ("operator", self.operator),
                 ("GCS emulator", self.gcs), ("API server", self.server),
                 ("control plane", self.control_plane)]
        self.executor = self.operator = self.gcs = self.control_plane = None
        for what, piece in steps:
            if piece is None:
                continue
            try:
                piece.stop()
            except Exception as err:  # keep stopping the others
                log.warning("stopping the %s failed: %s", what, err)
        if self._buckets is not None:
            self._buckets.join(timeout=5)
            self._buckets = None
        if self.api is not None:
            self.api.close()
        self.server = None

    def _provide_buckets(self) -> None:
        """Watch TpuTrainingJobs in every namespace and create each one's output bucket."""
        assert self.api is not None
        api, version = self.api.session_copy(), ""
        while not self._stopping.is_set():
            try:
                if not version:
                    jobs, version = api.list(TPUJOBS)
                    self._ensure_buckets(jobs)
                for event in api.watch(TPUJOBS, None, version, timeout_s=10):
                    if self._stopping.is_set():
                        break
                    if event.get("type") == "ERROR":
                        version = ""
                        break
                    obj = event.get("object") or {}
                    version = (obj.get("metadata") or {}).get("resourceVersion", version)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._ensure_buckets([obj])
            except Exception as err:  # the server stopping, or a bucket refused: go on
                version = ""
                log.debug("bucket watch interrupted: %s", err)
                self._stopping.wait(0.5)
        api.close()

    def _ensure_buckets(self, documents: list[dict[str, Any]]) -> None:
        if self.gcs is None:
            return
        for doc in documents:
            if doc.get("kind", "TpuTrainingJob") == "TpuTrainingJob":
                bucket = bucket_of(str((doc.get("spec") or {}).get("output") or ""))
                if bucket:
                    self.gcs.ensure_bucket(bucket)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: str | os.PathLike) -> Path:
        """A kubeconfig for kubectl at `path`: the embedded server's, or the real control
        plane's admin's."""
        if self.control_plane is not None:
            target = Path(path).expanduser()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch(mode=0o600, exist_ok=True)
            target.write_bytes(self.control_plane.admin_kubeconfig.read_bytes())
            return target
        assert self.server is not None, "not started"
        return self.server.write_kubeconfig(path)

    @property
    def url(self) -> str:
        if self.control_plane is not None:
            return self.control_plane.url
        assert self.server is not None, "not started"
        return self.server.url

    # -- using it ----------------------------------------------------------------------------

    def apply(self, documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Create the documents (as `kubectl apply -f` would on a fresh cluster), after
        creating the buckets the TpuTrainingJobs among them write to; returns what the server
        stored. Raises `ApplyError` naming the document the server refused."""
        assert self.api is not None, "not started"
        self._ensure_buckets([d for d in documents if d.get("kind") == "TpuTrainingJob"])
        return apply_documents(self.api, documents)

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The TpuTrainingJob as stored now (None once deleted)."""
        assert self.api is not None, "not started"
        return self.api.get(TPUJOBS, namespace, name)

    def delete_job(self, namespace: str, name: str) -> bool:
        assert self.api is not None, "not started"
        return self.api.delete(TPUJOBS, namespace, name, propagation="Background")

    def pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """The job's pods, host 0 first."""
        assert self.api is not None, "not started"
        items, _ = self.api.list(PODS, namespace, f"jobset.sigs.k8s.io/jobset-name={job}")
        return sorted(items, key=_host_order)

    def events(self, namespace: str, name: str | None = None) -> list[dict[str, Any]]:
        """Events of the namespace (of one object, when named), oldest first."""
        assert self.api is not None, "not started"
        items, _ = self.api.list(EVENTS, namespace)
        if name is not None:
            items = [e for e in items if (e.get("involvedObject") or {}).get("name") == name]
        return sorted(items, key=lambda e: int(e["metadata"].get("resourceVersion") or 0))


def _host_order(pod: dict[str, Any]) -> tuple[int, int, str]:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (int(labels.get("jobset.sigs.k8s.io/job-index", 0) or 0),
            int(labels.get("batch.kubernetes.io/job-completion-index", 0) or 0),
            meta.get("creationTimestamp", ""))
