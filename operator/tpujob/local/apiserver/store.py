"""The in-memory object store: objects by kind, resourceVersions, the per-kind event history
that watches replay from, finalizer-aware deletion and ownerReference garbage collection.

Everything here runs on the server's event loop thread, so no locking is needed."""

from __future__ import annotations

import asyncio
import copy
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from . import errors, strategy
from .resources import CRD_TYPE, Registry, ResourceType, crd_errors, types_from_crd

Key = tuple[str, str]  # (group, plural)


@dataclass(frozen=True)
class Event:
    """One change: ADDED, MODIFIED or DELETED, at resourceVersion `rv`."""

    rv: int
    type: str
    obj: dict[str, Any]
    old: dict[str, Any] | None = None


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    """Objects of every served kind, and the subscriptions of running watches."""

    def __init__(self, registry: Registry, history: int = 2000,
                 schedule: Callable[[Callable[[], None]], Any] | None = None) -> None:
        self.registry = registry
        self.rv = 1000  # starts above 1, so that a watch from a very old version gets 410
        self.objects: dict[Key, dict[tuple[str, str], dict[str, Any]]] = {}
        self.history: dict[Key, deque[Event]] = {}
        self.floor: dict[Key, int] = {}  # oldest resourceVersion a watch can start from
        self.history_size = history
        self.watchers: dict[Key, set[asyncio.Queue]] = {}
        self.applied: dict[tuple, dict[str, Any]] = {}  # (key, ns, name, manager) -> config
        self.schedule = schedule or (lambda fn: fn())
        self.on_crd_change: list[Callable[[], None]] = []

    # -- bookkeeping ---------------------------------------------------------------------------

    def ensure_kind(self, rtype: ResourceType) -> None:
        if rtype.key not in self.objects:
            self.objects[rtype.key] = {}
            self.history[rtype.key] = deque()
            self.floor[rtype.key] = self.rv

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def _emit(self, key: Key, event_type: str, obj: dict[str, Any], rv: int,
              old: dict[str, Any] | None = None) -> None:
        event = Event(rv, event_type, copy.deepcopy(obj), old)
        history = self.history[key]
        history.append(event)
        while len(history) > self.history_size:
            self.floor[key] = history.popleft().rv
        for queue in list(self.watchers.get(key, ())):
            queue.put_nowait(event)

    def subscribe(self, key: Key, queue: asyncio.Queue) -> None:
        self.watchers.setdefault(key, set()).add(queue)

    def unsubscribe(self, key: Key, queue: asyncio.Queue) -> None:
        self.watchers.get(key, set()).discard(queue)

    def events_since(self, rtype: ResourceType, rv: int) -> list[Event]:
        """Events after `rv`; raises 410 Expired when `rv` is older than the kept history."""
        self.ensure_kind(rtype)
        if rv < self.floor[rtype.key]:
            raise errors.expired(f"too old resource version: {rv} ({self.floor[rtype.key]})")
        return [e for e in self.history[rtype.key] if e.rv > rv]

    # -- reads ---------------------------------------------------------------------------------

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        self.ensure_kind(rtype)
        obj = self.objects[rtype.key].get((namespace or "", name))
        if obj is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        return obj

    def find(self, rtype: ResourceType, namespace: str | None, name: str) -> dict | None:
        self.ensure_kind(rtype)
        return self.objects[rtype.key].get((namespace or "", name))

    def list(self, rtype: ResourceType, namespace: str | None) -> list[dict[str, Any]]:
        self.ensure_kind(rtype)
        items = [o for (ns, _), o in self.objects[rtype.key].items()
                 if namespace is None or ns == namespace]
        return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""),
                                            o["metadata"]["name"]))

    # -- writes --------------------------------------------------------------------------------

    def _check_namespace(self, rtype: ResourceType, namespace: str | None, name: str) -> None:
        if not rtype.namespaced:
            return
        ns_type = self.registry.get("", "v1", "namespaces")
        ns = self.find(ns_type, None, namespace or "")
        if ns is None:
            raise errors.not_found("namespaces", "", namespace or "")
        if ns["metadata"].get("deletionTimestamp"):
            raise errors.ApiError(
                403, "Forbidden", f'{rtype.plural} "{name}" is forbidden: unable to create new '
                f"content in namespace {namespace} because it is being terminated")

    def create(self, rtype: ResourceType, namespace: str | None, body: Any) -> strategy.WriteResult:
        self.ensure_kind(rtype)
        meta = body.get("metadata") if isinstance(body, dict) else None
        self._check_namespace(rtype, namespace, (meta or {}).get("name", "") if
                              isinstance(meta, dict) else "")
        result = strategy.prepare_create(rtype, body, namespace, now_rfc3339(), self.rv + 1)
        obj = result.obj
        name = obj["metadata"]["name"]
        if (namespace or "", name) in self.objects[rtype.key]:
            raise errors.already_exists(rtype.plural, rtype.group, name)
        if rtype.key == CRD_TYPE.key:
            self._register_crd(obj)
        if rtype.plural == "namespaces" and not rtype.group:
            obj.setdefault("status", {})["phase"] = "Active"
            obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
        rv = self.next_rv()
        self.objects[rtype.key][(namespace or "", name)] = obj
        self._emit(rtype.key, "ADDED", obj, rv)
        return result

    def update(self, rtype: ResourceType, namespace: str | None, name: str, body: Any,
               subresource: str | None = None,
               require_version: bool = True) -> strategy.WriteResult:
        old = self.get(rtype, namespace, name)
        result = strategy.prepare_update(rtype, body, old, subresource, self.rv + 1,
                                         require_version=require_version)
        return self._store_update(rtype, old, result)

    def _store_update(self, rtype: ResourceType, old: dict, result: strategy.WriteResult):
        obj = result.obj
        if obj == {**old, "metadata": {**old["metadata"], "resourceVersion":
                                       obj["metadata"]["resourceVersion"]}}:
            result.obj = old  # a no-op write keeps the resourceVersion and emits nothing
            return result
        if rtype.key == CRD_TYPE.key:
            self._register_crd(obj)
        rv = self.next_rv()
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if obj["metadata"].get("deletionTimestamp") and not obj["metadata"].get("finalizers"):
            self._remove(rtype, key, obj, rv)
        else:
            self.objects[rtype.key][key] = obj
            self._emit(rtype.key, "MODIFIED", obj, rv, old)
        return result

    def delete(self, rtype: ResourceType, namespace: str | None, name: str,
               propagation: str = "Background",
               preconditions: dict[str, Any] | None = None) -> dict[str, Any]:
        obj = self.get(rtype, namespace, name)
        preconditions = preconditions or {}
        meta = obj["metadata"]
        # kube-apiserver's words (staging/src/k8s.io/apiserver/pkg/registry/generic/registry/
        # store.go, deleteWithoutFinalizers' preconditions): the kind, not the resource.
        for field, word, why in (("uid", "UID", "deleted and then recreated"),
                                 ("resourceVersion", "ResourceVersion", "modified")):
            wanted = preconditions.get(field)
            if wanted and str(wanted) != meta[field]:
                raise errors.ApiError(
                    409, "Conflict", f'Operation cannot be fulfilled on {rtype.kind} "{name}": '
                    f"the {word} in the precondition ({wanted}) does not match the {word} in "
                    f"record ({meta[field]}). The object might have been {why}",
                    {"name": name, "group": rtype.group, "kind": rtype.kind})
        key = (namespace or "", name)
        is_namespace = rtype.plural == "namespaces" and not rtype.group
        # Foreground and Orphan: kube-apiserver adds the policy's finalizer and leaves the rest to
        # the garbage collector (here: _finish_propagation, right after).
        policy = {"Foreground": "foregroundDeletion", "Orphan": "orphan"}.get(propagation)
        if meta.get("finalizers") or is_namespace or policy:
            if meta.get("deletionTimestamp"):
                return obj
            obj = copy.deepcopy(obj)
            obj["metadata"]["deletionTimestamp"] = now_rfc3339()
            obj["metadata"]["deletionGracePeriodSeconds"] = 0
            if policy and policy not in (meta.get("finalizers") or []):
                obj["metadata"]["finalizers"] = [*(meta.get("finalizers") or []), policy]
            if "generation" in meta:  # rest.BeforeDelete bumps it with the deletion mark
                obj["metadata"]["generation"] = int(meta["generation"]) + 1
            rv = self.next_rv()
            obj["metadata"]["resourceVersion"] = str(rv)
            if is_namespace:
                obj.setdefault("status", {})["phase"] = "Terminating"
            self.objects[rtype.key][key] = obj
            self._emit(rtype.key, "MODIFIED", obj, rv)
            if is_namespace:
                self.schedule(lambda: self._finish_namespace(rtype, name))
            elif policy:
                uid = meta["uid"]
                self.schedule(lambda: self._finish_propagation(rtype, key, uid, policy))
            return obj
        rv = self.next_rv()
        self._remove(rtype, key, obj, rv, propagation)
        return obj

    def _remove(self, rtype: ResourceType, key: tuple[str, str], obj: dict, rv: int,
                propagation: str = "Background") -> None:
        del self.objects[rtype.key][key]
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = str(rv)
        self._emit(rtype.key, "DELETED", gone, rv)
        for applied_key in [k for k in self.applied if k[:3] == (rtype.key, *key)]:
            del self.applied[applied_key]
        if rtype.key == CRD_TYPE.key:
            self._unregister_crd(obj)
        uid = obj["metadata"]["uid"]
        if propagation == "Orphan":
            self._orphan(uid)
        else:
            self.schedule(lambda: self._collect_garbage(uid))

    # -- namespaces, CRDs, garbage collection ------------------------------------------------

    def _finish_namespace(self, ns_type: ResourceType, name: str) -> None:
        for rtype in self._storage_types():
            if rtype.namespaced:
                for obj in [o for (ns, _), o in self.objects.get(rtype.key, {}).items()
                            if ns == name]:
                    self._delete_quietly(rtype, obj)
        remaining = any(ns == name for rtype in self._storage_types() if rtype.namespaced
                        for (ns, _) in self.objects.get(rtype.key, {}))
        if remaining:  # objects held by finalizers: try again once they are released
            asyncio.get_running_loop().call_later(
                0.2, lambda: self._finish_namespace(ns_type, name))
            return
        ns = self.find(ns_type, None, name)
        if ns is not None:
            self._remove(ns_type, ("", name), ns, self.next_rv())

    def _finish_propagation(self, rtype: ResourceType, key: tuple[str, str], uid: str,
                            finalizer: str) -> None:
        """The garbage collector's part of a Foreground or Orphan deletion: the dependents
        deleted (and gone) or orphaned, then the policy's finalizer removed."""
        obj = self.objects.get(rtype.key, {}).get(key)
        if obj is None or obj["metadata"]["uid"] != uid or \
                finalizer not in (obj["metadata"].get("finalizers") or []):
            return
        if finalizer == "orphan":
            self._orphan(uid)
        else:
            for dependent_type, dependent in self._owned_by(uid):
                refs = dependent["metadata"].get("ownerReferences") or []
                if any(r.get("uid") != uid and self._uid_exists(r.get("uid")) for r in refs):
                    self._keep_owners(dependent_type, dependent, lambda r: r.get("uid") != uid)
                else:
                    self._delete_quietly(dependent_type, dependent)
            if self._owned_by(uid):  # dependents held by their finalizers: wait for them
                asyncio.get_running_loop().call_later(
                    0.2, lambda: self._finish_propagation(rtype, key, uid, finalizer))
                return
        obj = self.objects[rtype.key][key]
        updated = copy.deepcopy(obj)
        updated["metadata"]["finalizers"] = [f for f in obj["metadata"]["finalizers"]
                                             if f != finalizer]
        if not updated["metadata"]["finalizers"]:
            del updated["metadata"]["finalizers"]
        updated["metadata"]["resourceVersion"] = str(self.rv + 1)
        self._store_update(rtype, obj, strategy.WriteResult(updated))

    def _delete_quietly(self, rtype: ResourceType, obj: dict) -> None:
        meta = obj["metadata"]
        try:
            self.delete(rtype, meta.get("namespace"), meta["name"])
        except errors.ApiError:
            pass

    def _storage_types(self) -> list[ResourceType]:
        seen: dict[Key, ResourceType] = {}
        for rtype in self.registry.types.values():
            seen.setdefault(rtype.key, rtype)
        return list(seen.values())

    def _owned_by(self, uid: str) -> list[tuple[ResourceType, dict]]:
        owned = []
        for rtype in self._storage_types():
            for obj in self.objects.get(rtype.key, {}).values():
                if any(ref.get("uid") == uid for ref in obj["metadata"].get(
                        "ownerReferences") or []):
                    owned.append((rtype, obj))
        return owned

    def _uid_exists(self, uid: str) -> bool:
        return any(o["metadata"]["uid"] == uid for objs in self.objects.values()
                   for o in objs.values())

    def _collect_garbage(self, uid: str) -> None:
        for rtype, obj in self._owned_by(uid):
            owners = obj["metadata"].get("ownerReferences") or []
            if not any(self._uid_exists(ref.get("uid")) for ref in owners):
                self._delete_quietly(rtype, obj)
            else:  # an owner lives on: only the references to owners gone are dropped
                self._keep_owners(rtype, obj, lambda ref: self._uid_exists(ref.get("uid")))

    def _orphan(self, uid: str) -> None:
        for rtype, obj in self._owned_by(uid):
            self._keep_owners(rtype, obj, lambda ref: ref.get("uid") != uid)

    def _keep_owners(self, rtype: ResourceType, obj: dict,
                     keep: Callable[[dict], bool]) -> None:
        updated = copy.deepcopy(obj)
        updated["metadata"]["ownerReferences"] = [
            r for r in obj["metadata"]["ownerReferences"] if keep(r)]
        if not updated["metadata"]["ownerReferences"]:
            del updated["metadata"]["ownerReferences"]
        result = strategy.WriteResult(updated)
        updated["metadata"]["resourceVersion"] = str(self.rv + 1)
        self._store_update(rtype, obj, result)

    def _register_crd(self, crd: dict[str, Any]) -> None:
        found = [errors.FieldError("Invalid", f, None, m) for f, m in crd_errors(crd)]
        if found:
            raise errors.ApiError(
                422, "Invalid", f'CustomResourceDefinition.apiextensions.k8s.io '
                f'"{crd["metadata"].get("name", "")}" is invalid: ' +
                ", ".join(f"{e.field}: {e.detail}" for e in found),
                {"name": crd["metadata"].get("name", ""), "group": "apiextensions.k8s.io",
                 "kind": "CustomResourceDefinition",
                 "causes": [{"reason": "FieldValueInvalid", "message": e.detail,
                             "field": e.field} for e in found]})
        name = crd["metadata"]["name"]
        for version in crd["spec"]["versions"]:
            version.setdefault("served", True)
        self.registry.remove_crd(name)
        for rtype in types_from_crd(crd):
            self.registry.add(rtype)
            self.ensure_kind(rtype)
        names = dict(crd["spec"]["names"])
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
        now = now_rfc3339()
        crd["status"] = {
            "acceptedNames": names,
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": now}],
            "storedVersions": [v["name"] for v in crd["spec"]["versions"] if v.get("storage")],
        }
        for callback in self.on_crd_change:
            callback()

    def _unregister_crd(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        key = (spec["group"], spec["names"]["plural"])
        for obj in list(self.objects.get(key, {}).values()):
            rv = self.next_rv()
            gone = copy.deepcopy(obj)
            gone["metadata"]["resourceVersion"] = str(rv)
            self._emit(key, "DELETED", gone, rv)
        self.objects.pop(key, None)
        self.history.pop(key, None)
        self.floor.pop(key, None)
        self.registry.remove_crd(crd["metadata"]["name"])
        for queue in list(self.watchers.pop(key, ())):
            queue.put_nowait(None)  # ends the watches of a kind that is no longer served
        for callback in self.on_crd_change:
            callback()
