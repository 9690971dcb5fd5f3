"""The real Kubernetes control plane for local mode, built from the components' Go modules
(`build`), started as processes of this machine (`cluster.RealControlPlane`). See
docs/local-control-plane.md."""
