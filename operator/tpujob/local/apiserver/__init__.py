"""An embedded Kubernetes API server: real HTTP on 127.0.0.1, CRDs served from their schemas,
watches, finalizers, garbage collection, Table output and OpenAPI, for tests and local mode;
with a request log, fault injection and restarts for testing clients against a server that
misbehaves.

    from tpujob.local.apiserver import ApiServer, bundled_crd_paths, load_crds

    with ApiServer(crds=load_crds(bundled_crd_paths())) as server:
        server.write_kubeconfig("kubeconfig")
"""

from .embedded import ApiServer, bundled_crd_paths, load_crds
from .faults import Faults
from .kubeconfig import build_kubeconfig, write_kubeconfig
from .requestlog import RequestRecord

__all__ = ["ApiServer", "Faults", "RequestRecord", "build_kubeconfig", "bundled_crd_paths",
           "load_crds", "write_kubeconfig"]
