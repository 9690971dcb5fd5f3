"""How a conformance case is sent and compared: a `Session` records each answer of one server
(status code, `Warning` headers, body less the generated fields below, or the events of a
watch), and `diff` lists where two servers' records differ.

Generated fields are left out of the comparison, and only these, because each server makes its
own and no client may expect a given value (docs/local-apiserver.md, "Conformance"):

- `metadata.uid`, `metadata.resourceVersion`, `metadata.creationTimestamp`: made by the server
  (random, etcd's revision, the clock). `metadata.deletionTimestamp` is compared as set or not.
- `metadata.managedFields`: kube-apiserver records a manager for every write (`Update`
  entries with times); the embedded server records `Apply` entries only. The server-side apply
  cases compare the result of the apply, not this bookkeeping.
- a list's or Table's `metadata.resourceVersion`, and the value of a `continue` token (opaque);
  whether one is there is compared.
- `details.uid` of a `Status`, and a uid or resourceVersion quoted in a `Status` message (a
  failed precondition names the object's).
- cells of a Table's `Age` column (the clock).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.conformance.planes import NAMESPACE, Plane

SET = "<set>"
TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"
PATCH_TYPES = {"merge": "application/merge-patch+json", "json": "application/json-patch+json",
               "strategic": "application/strategic-merge-patch+json",
               "apply": "application/apply-patch+yaml"}
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_RV_IN_RECORD = re.compile(r"(ResourceVersion in record \()\d+\)")
_GENERATED = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "selfLink")


def normalize(value: Any) -> Any:
    """`value` with the generated fields (module docstring) taken out, recursively."""
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: normalize(v) for k, v in value.items()}
    meta = out.get("metadata")
    if isinstance(meta, dict):
        for key in _GENERATED:
            meta.pop(key, None)
        if "deletionTimestamp" in meta:
            meta["deletionTimestamp"] = SET
        if "continue" in meta:
            meta["continue"] = SET
    if out.get("kind") == "Status":
        if isinstance(out.get("details"), dict):
            out["details"].pop("uid", None)
        if isinstance(out.get("message"), str):
            out["message"] = _UID.sub("<uid>", _RV_IN_RECORD.sub(r"\1<rv>)", out["message"]))
    if out.get("kind") == "Table":
        ages = [i for i, c in enumerate(out.get("columnDefinitions") or []) if c["name"] == "Age"]
        for row in out.get("rows") or []:
            for i in ages:
                row["cells"][i] = SET
    return out


def pick(value: Any, paths: tuple[str, ...]) -> Any:
    """Only the dotted `paths` of an object (for kinds whose other fields the real server
    defaults: the case compares what it is about)."""
    if not isinstance(value, dict) or value.get("kind") == "Status":
        return value
    out: dict[str, Any] = {}
    for path in paths:
        out[path] = _at(value, path.split("."))
    return out


def _at(node: Any, keys: list[str]) -> Any:
    """The value at `keys`; a key `x[*]` maps the rest over the list at `x`."""
    for i, key in enumerate(keys):
        if key.endswith("[*]"):
            items = node.get(key[:-3]) if isinstance(node, dict) else None
            return [_at(item, keys[i + 1:]) for item in items or []]
        node = node.get(key) if isinstance(node, dict) else None
    return node


@dataclass
class Exchange:
    """One request and what came back."""

    request: str
    status: int
    body: Any
    warnings: list[str] = field(default_factory=list)


class Session:
    """Sends one case's requests to one server and keeps the answers."""

    def __init__(self, plane: Plane) -> None:
        self.plane = plane
        self.exchanges: list[Exchange] = []

    def send(self, method: str, path: str, body: Any = None, *, patch: str | None = None,
             params: dict[str, Any] | None = None, accept: str | None = None,
             only: tuple[str, ...] = (), record: bool = True, shown: str = ""
             ) -> tuple[int, Any]:
        """One request; returns (status, raw body) and records the normalized answer (`only`:
        the paths compared, for kinds the real server defaults; `shown`: the request as the
        record names it, where its path holds a generated name)."""
        headers = {}
        data = None
        if body is not None:
            headers["Content-Type"] = PATCH_TYPES[patch] if patch else "application/json"
            data = body if isinstance(body, str) else json.dumps(body)
        if accept:
            headers["Accept"] = accept
        response = self.plane.request(method, path, data=data, headers=headers, params=params)
        try:
            raw = response.json()
        except ValueError:
            raw = response.text
        if record:
            compared = pick(raw, only) if only else raw
            warnings = [w for w in response.headers.get("Warning", "").split(", 299") if w]
            params_shown = {k: SET if k == "continue" else v for k, v in (params or {}).items()}
            self.exchanges.append(Exchange(
                (shown or f"{method} {path}").replace(f"/namespaces/{NAMESPACE}", "/namespaces/NS")
                + (f" {params_shown}" if params else "") + (f" ({patch})" if patch else ""),
                response.status_code, normalize(compared), [w.strip() for w in warnings]))
        return response.status_code, raw

    def watch(self, path: str, params: dict[str, Any], events: int,
              accept: str | None = None, only: tuple[str, ...] = ()) -> None:
        """Open a watch, record the first `events` events (type and object) it sends, in order,
        and close it; a stream that ends first is recorded as it is."""
        headers = {"Accept": accept} if accept else {}
        params = {**params, "watch": "true", "timeoutSeconds": "10"}
        seen = []
        with self.plane.request("GET", path, params=params, headers=headers, stream=True) \
                as response:
            if response.status_code != 200:
                seen.append({"status": response.status_code, "body": normalize(response.json())})
            else:
                for line in response.iter_lines():
                    if not line:
                        continue
                    event = json.loads(line)
                    obj = event.get("object")
                    if event["type"] == "BOOKMARK":  # only its version and annotations count
                        meta = obj.get("metadata", {})
                        obj = {"kind": obj.get("kind"), "apiVersion": obj.get("apiVersion"),
                               "annotations": meta.get("annotations")}
                    elif only:
                        obj = pick(obj, only)
                    seen.append({"type": event["type"], "object": normalize(obj)})
                    if len(seen) == events:
                        break
        shown = " ".join(f"{k}={v}" for k, v in params.items() if k != "resourceVersion")
        self.exchanges.append(Exchange(
            f"WATCH {path.replace(f'/namespaces/{NAMESPACE}', '/namespaces/NS')} {shown}",
            200, seen))


Steps = Callable[[Session], None]


def run_case(plane: Plane, steps: Steps) -> list[Exchange]:
    session = Session(plane)
    steps(session)
    return session.exchanges


MISSING = "<missing>"


def diff(real: Any, embedded: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Where two records differ: (path, kube-apiserver's value, the embedded server's), at the
    first level that differs; a key one side lacks is MISSING there."""
    if isinstance(real, Exchange) and isinstance(embedded, Exchange):
        return [d for name in ("request", "status", "warnings", "body")
                for d in diff(getattr(real, name), getattr(embedded, name), f"{path}.{name}")]
    if isinstance(real, dict) and isinstance(embedded, dict):
        out = []
        for key in sorted(set(real) | set(embedded), key=str):
            out += diff(real.get(key, MISSING), embedded.get(key, MISSING), f"{path}.{key}")
        return out
    if isinstance(real, list) and isinstance(embedded, list) and len(real) == len(embedded):
        return [d for i, (a, b) in enumerate(zip(real, embedded, strict=True))
                for d in diff(a, b, f"{path}[{i}]")]
    return [] if real == embedded else [(path, real, embedded)]


def diff_exchanges(real: list[Exchange], embedded: list[Exchange]) -> list[tuple[str, Any, Any]]:
    if len(real) != len(embedded):
        return [("exchanges", [e.request for e in real], [e.request for e in embedded])]
    return [d for i, (a, b) in enumerate(zip(real, embedded, strict=True))
            for d in diff(a, b, f"[{i}]")]
