"""The local network: one loopback address per pod (its podIP, as if each pod had its own host,
which is what hostNetwork pods on their own TPU VMs have), and the DNS of headless Services,
which resolves a pod's `<hostname>.<subdomain>[.<namespace>[.svc[.cluster.local]]]` to it.

Addresses are sticky per DNS name: the pod that takes host name `x` in subdomain `s` gets the
address `x.s` resolves to, whenever it is created. So a name resolves before its pod exists
(as JAX's coordinator address must, for the processes started first), and a replacement pod
keeps its predecessor's address. Each network draws its addresses from a random /24 block of
127.0.0.0/8 (Linux routes all of it to the loopback interface), so several executors on one
machine do not collide.
"""

from __future__ import annotations

import random
import re
import threading
from typing import Any

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"


class LocalNetwork:
    """Loopback addresses and the names that resolve to them."""

    def __init__(self, block: tuple[int, int] | None = None, seed: int | None = None) -> None:
        rng = random.Random(seed)
        self._rng = rng
        self._block = block or (rng.randint(16, 250), rng.randint(0, 255))
        self._next_host = 1
        self._by_key: dict[tuple[str, ...], str] = {}
        self._domains: dict[str, set[str]] = {}  # namespace -> subdomains with DNS records
        self._lock = threading.Lock()

    def _allocate(self) -> str:
        if self._next_host > 254:
            self._block = (self._rng.randint(16, 250), self._rng.randint(0, 255))
            self._next_host = 1
        address = f"127.{self._block[0]}.{self._block[1]}.{self._next_host}"
        self._next_host += 1
        return address

    def address_for(self, key: tuple[str, ...]) -> str:
        with self._lock:
            if key not in self._by_key:
                self._by_key[key] = self._allocate()
            return self._by_key[key]

    def pod_address(self, pod: dict[str, Any]) -> str:
        """The address of a pod: its DNS name's when it has a host name and a subdomain."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        ns = meta.get("namespace", "")
        if spec.get("hostname") and spec.get("subdomain"):
            self.add_domain(ns, spec["subdomain"])
            return self.address_for(("dns", ns, spec["subdomain"], spec["hostname"]))
        return self.address_for(("pod", ns, meta.get("uid", meta.get("name", ""))))

    def add_domain(self, namespace: str, subdomain: str) -> None:
        """Publish DNS records for `subdomain` (a headless Service) in `namespace`."""
        with self._lock:
            self._domains.setdefault(namespace, set()).add(subdomain)

    def resolve(self, namespace: str, hostname: str) -> str | None:
        """The address of a pod DNS name, or None when no headless Service publishes it."""
        parts = hostname.split(".")
        if len(parts) < 2:
            return None
        host, sub, rest = parts[0], parts[1], parts[2:]
        ns = rest[0] if rest else namespace
        if rest[1:] not in ([], ["svc"], ["svc", "cluster", "local"]):
            return None
        if sub not in self._domains.get(ns, set()):
            return None
        return self.address_for(("dns", ns, sub, host))

    def rewrite(self, namespace: str, text: str) -> str:
        """`text` with every pod DNS name it mentions replaced by its address, as a resolver
        would answer (`coordinator.js:8476` -> `127.x.y.z:8476`)."""
        domains: set[str] = set()
        for subs in self._domains.values():
            domains |= subs
        if not domains or "." not in text:
            return text
        alternatives = "|".join(re.escape(d) for d in sorted(domains, key=len, reverse=True))
        pattern = re.compile(rf"(?<![-a-z0-9.])({_LABEL})\.({alternatives})"
                             rf"((?:\.{_LABEL})(?:\.svc(?:\.cluster\.local)?)?)?(?![-a-z0-9.])")

        def replace(match: re.Match[str]) -> str:
            resolved = self.resolve(namespace, match.group(0))
            return resolved if resolved is not None else match.group(0)
        return pattern.sub(replace, text)

    def hosts_entries(self, namespace: str) -> list[tuple[str, list[str]]]:
        """Every pod DNS name with an address, as /etc/hosts lines for a pod in `namespace`:
        (address, names), `<host>.<subdomain>` for its own namespace's names, then the
        namespace-qualified forms."""
        with self._lock:
            keys = [(k, a) for k, a in self._by_key.items() if k[0] == "dns"]
            published = {ns: set(subs) for ns, subs in self._domains.items()}
        out = []
        for (_, ns, sub, host), address in sorted(keys, key=lambda kv: kv[1]):
            if sub not in published.get(ns, set()):
                continue
            base = f"{host}.{sub}"
            names = [base] if ns == namespace else []
            out.append((address, [*names, f"{base}.{ns}", f"{base}.{ns}.svc",
                                  f"{base}.{ns}.svc.cluster.local"]))
        return out
