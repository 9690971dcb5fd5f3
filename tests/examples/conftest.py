"""The examples suite: the shared `kube` fixtures (embedded API server, or the cluster named
by TPUJOB_TEST_KUBECONFIG)."""

from tests.support.apiserver import *  # noqa: F401,F403
