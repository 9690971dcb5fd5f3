"""An embedded Kubernetes API server: real HTTP on 127.0.0.1, CRDs served from their schemas,
watches, finalizers, garbage collection, Table output and OpenAPI, for tests and local mode.

    from tpujob.local.apiserver import ApiServer, bundled_crd_paths, load_crds

    with ApiServer(crds=load_crds(bundled_crd_paths())) as server:
        server.write_kubeconfig("kubeconfig")
"""

from .embedded import ApiServer, bundled_crd_paths, load_crds
from .kubeconfig import build_kubeconfig, write_kubeconfig

__all__ = ["ApiServer", "build_kubeconfig", "bundled_crd_paths", "load_crds", "write_kubeconfig"]
