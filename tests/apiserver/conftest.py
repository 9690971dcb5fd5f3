"""The API server contract suite: the shared `kube` fixtures and the Widget test CRD."""

from __future__ import annotations

import copy

import pytest

from tests.apiserver.crds import GROUP, WIDGET_CRD
from tests.support.apiserver import *  # noqa: F401,F403
from tests.support.apiserver import Kube


@pytest.fixture(scope="session")
def widgets(kube: Kube) -> str:
    """The Widget CRD, applied; returns the namespaced collection path for widgets."""
    kube.ensure_crd(copy.deepcopy(WIDGET_CRD))
    return f"/apis/{GROUP}/v1/namespaces/{kube.namespace}/widgets"
