"""Which kubeconfig users have credentials that never change (the client's per-request refresh
hook is dropped for them) and which the client must keep refreshing."""

from __future__ import annotations

import pytest
import yaml

from tpujob.controller.runner import _has_static_credentials

USERS = {
    "token": {"token": "abc"},
    "cert": {"client-certificate-data": "Y2VydA==", "client-key-data": "a2V5"},
    "exec": {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                      "command": "gke-gcloud-auth-plugin"}},
    "provider": {"auth-provider": {"name": "gcp"}},
    "token-file": {"tokenFile": "/var/run/token"},
}


def _kubeconfig(tmp_path, current: str, users: dict = USERS) -> str:
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": current,
           "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
           "users": [{"name": n, "user": u} for n, u in users.items()],
           "contexts": [{"name": n, "context": {"cluster": "c", "user": n}}
                        for n in [*users, "nobody"]]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize("user, static", [
    ("token", True), ("cert", True), ("exec", False), ("provider", False),
    ("token-file", False), ("nobody", False),
])
def test_the_current_context(tmp_path, user, static):
    assert _has_static_credentials(_kubeconfig(tmp_path, user), None) is static


def test_a_named_context_wins_over_the_current_one(tmp_path):
    path = _kubeconfig(tmp_path, "token")
    assert _has_static_credentials(path, "exec") is False
    assert _has_static_credentials(path, "cert") is True


def test_an_unreadable_kubeconfig_is_not_static(tmp_path):
    bad = tmp_path / "bad"
    bad.write_text("::: not yaml :::")
    assert _has_static_credentials(str(bad), None) is False
    assert _has_static_credentials(str(tmp_path / "missing"), None) is False
