"""The pod's /etc/hosts: the machine's own lines, then every published pod DNS name with its
address (short form only for the pod's own namespace)."""

import pytest

from tpujob.local.executor.network import LocalNetwork
from tpujob.local.executor.pod_dns import build_hosts_file, wrap_with_hosts

pytestmark = pytest.mark.unit


def _pod(ns, host, sub):
    return {"metadata": {"namespace": ns, "uid": f"{ns}-{host}"},
            "spec": {"hostname": host, "subdomain": sub}}


def test_hosts_entries_and_file():
    net = LocalNetwork(block=(77, 5))
    net.pod_address(_pod("ns", "js-slice-0-0", "js"))
    net.pod_address(_pod("other", "x-slice-0-0", "x"))
    net.address_for(("dns", "ns", "unpublished", "h"))  # no headless Service: no entry
    entries = net.hosts_entries("ns")
    assert entries == [
        ("127.77.5.1", ["js-slice-0-0.js", "js-slice-0-0.js.ns", "js-slice-0-0.js.ns.svc",
                        "js-slice-0-0.js.ns.svc.cluster.local"]),
        ("127.77.5.2", ["x-slice-0-0.x.other", "x-slice-0-0.x.other.svc",
                        "x-slice-0-0.x.other.svc.cluster.local"])]
    text = build_hosts_file("127.0.0.1\tlocalhost\n10.0.0.9\tthis-machine", entries)
    assert text.splitlines()[:3] == ["127.0.0.1\tlocalhost", "10.0.0.9\tthis-machine",
                                     "127.77.5.1\tjs-slice-0-0.js js-slice-0-0.js.ns "
                                     "js-slice-0-0.js.ns.svc "
                                     "js-slice-0-0.js.ns.svc.cluster.local"]


def test_wrapped_command_ends_with_the_container_command():
    argv = wrap_with_hosts(["/usr/bin/python3", "-c", "print(1)"], "/w/hosts")
    assert argv[-4:] == ["/w/hosts", "/usr/bin/python3", "-c", "print(1)"]
    assert "--mount" in argv and "exec \"$@\"" in argv[-5]
