"""The object store without HTTP: resourceVersions as Kubernetes defines them (every write a
newer one, a stale one conflicts, a no-op write keeps it, a watch resumes after one or gets 410),
creation refusals, deletion with finalizers and preconditions, garbage collection by
ownerReferences under each propagation policy, namespaces and CRDs.

The store runs the garbage collector and namespace cleanup through `schedule`; these tests
collect that work and run it when they choose, so "after the owner is gone" is a point in the
test, not a wait."""

from __future__ import annotations

import asyncio
import copy

import pytest

from tests.apiserver.crds import GROUP, WIDGET_CRD, widget
from tpujob.local.apiserver.errors import ApiError
from tpujob.local.apiserver.resources import BUILTINS, CRD_TYPE, Registry
from tpujob.local.apiserver.store import Store

pytestmark = pytest.mark.unit

TYPES = {t.plural: t for t in BUILTINS if not t.group}
NAMESPACES, CONFIGMAPS, SECRETS = TYPES["namespaces"], TYPES["configmaps"], TYPES["secrets"]


class Scheduled(list):
    """The work the store schedules, run when the test says."""

    def run(self) -> None:
        while self:
            self.pop(0)()


def new_store(history: int = 2000, namespaces=("default",)) -> tuple[Store, Scheduled]:
    registry = Registry()
    for rtype in BUILTINS:
        registry.add(rtype)
    work = Scheduled()
    store = Store(registry, history=history, schedule=work.append)
    for name in namespaces:
        store.create(NAMESPACES, None, {"metadata": {"name": name}})
    return store, work


def cm(name: str, *owners: dict, finalizers=(), data=None) -> dict:
    meta: dict = {"name": name}
    if owners:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": o["metadata"]["name"],
             "uid": o["metadata"]["uid"]} for o in owners]
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {"metadata": meta, "data": data or {}}


def refusal(fn, *args, **kwargs) -> ApiError:
    with pytest.raises(ApiError) as err:
        fn(*args, **kwargs)
    return err.value


def names(store: Store, rtype=CONFIGMAPS, namespace="default") -> list[str]:
    return [o["metadata"]["name"] for o in store.list(rtype, namespace)]


# -- resourceVersions --------------------------------------------------------------------------

def test_every_write_gets_a_newer_resource_version_that_the_object_and_its_event_agree_on():
    store, _ = new_store()
    start = store.rv
    created = store.create(CONFIGMAPS, "default", cm("c")).obj
    body = copy.deepcopy(created)
    body["data"] = {"k": "v"}
    updated = store.update(CONFIGMAPS, "default", "c", body).obj
    assert store.get(CONFIGMAPS, "default", "c") == updated
    store.delete(CONFIGMAPS, "default", "c")
    events = store.events_since(CONFIGMAPS, start)
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    rvs = [e.rv for e in events]
    assert rvs == sorted(set(rvs)) and rvs[0] > start
    assert [e.obj["metadata"]["resourceVersion"] for e in events] == [str(rv) for rv in rvs]
    assert (created["metadata"]["resourceVersion"], updated["metadata"]["resourceVersion"]) == (
        str(rvs[0]), str(rvs[1]))
    assert events[1].old == created and events[1].obj["data"] == {"k": "v"}


def test_a_write_from_a_stale_resource_version_conflicts_and_changes_nothing():
    store, _ = new_store()
    stale = store.create(CONFIGMAPS, "default", cm("c")).obj
    fresh = copy.deepcopy(stale)
    fresh["data"] = {"k": "1"}
    store.update(CONFIGMAPS, "default", "c", fresh)
    late = copy.deepcopy(stale)
    late["data"] = {"k": "2"}
    seen = store.rv
    err = refusal(store.update, CONFIGMAPS, "default", "c", late)
    assert (err.code, err.reason) == (409, "Conflict")
    assert err.message == ('Operation cannot be fulfilled on configmaps "c": the object has been '
                           "modified; please apply your changes to the latest version and try "
                           "again")
    assert store.get(CONFIGMAPS, "default", "c")["data"] == {"k": "1"}
    assert store.rv == seen and store.events_since(CONFIGMAPS, seen) == []


def test_a_write_that_changes_nothing_keeps_the_resource_version_and_tells_no_watch():
    store, _ = new_store()
    created = store.create(CONFIGMAPS, "default", cm("c", data={"k": "v"})).obj
    seen = store.rv
    again = store.update(CONFIGMAPS, "default", "c", copy.deepcopy(created)).obj
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert store.rv == seen and store.events_since(CONFIGMAPS, seen) == []


@pytest.mark.parametrize(("plural", "version", "refused"), [
    ("configmaps", None, None),          # built-in kinds take unconditional updates
    ("configmaps", "", None),
    ("widgets", None, (422, "Invalid")),  # custom resources do not
    ("widgets", "", (422, "Invalid")),
    ("widgets", "current", None),
    ("widgets", "1", (409, "Conflict")),
])
def test_an_update_without_a_resource_version(plural, version, refused):
    store, _ = new_store()
    store.create(CRD_TYPE, None, copy.deepcopy(WIDGET_CRD))
    rtype = CONFIGMAPS if plural == "configmaps" else store.registry.get(GROUP, "v1", "widgets")
    created = store.create(rtype, "default", widget("w") if rtype.is_custom else cm("w")).obj
    body = copy.deepcopy(created)
    body["metadata"]["labels"] = {"changed": "yes"}
    if version is None:
        del body["metadata"]["resourceVersion"]
    elif version != "current":
        body["metadata"]["resourceVersion"] = version
    if refused is None:
        store.update(rtype, "default", "w", body)
        assert store.get(rtype, "default", "w")["metadata"]["labels"] == {"changed": "yes"}
    else:
        err = refusal(store.update, rtype, "default", "w", body)
        assert (err.code, err.reason) == refused
        if refused[0] == 422:
            assert err.message.endswith("metadata.resourceVersion: Invalid value: 0: must be "
                                        "specified for an update")
        assert "labels" not in store.get(rtype, "default", "w")["metadata"]


def test_a_watch_resumes_after_a_kept_version_and_an_older_one_gets_410():
    store, _ = new_store(history=3)
    rvs = [int(store.create(CONFIGMAPS, "default", cm(f"c{i}")).obj["metadata"]
               ["resourceVersion"]) for i in range(4)]
    assert [e.rv for e in store.events_since(CONFIGMAPS, rvs[0])] == rvs[1:]
    assert [e.rv for e in store.events_since(CONFIGMAPS, rvs[2])] == rvs[3:]
    assert store.events_since(CONFIGMAPS, rvs[3]) == []
    err = refusal(store.events_since, CONFIGMAPS, rvs[0] - 1)
    assert (err.code, err.reason) == (410, "Expired")
    assert err.message == f"too old resource version: {rvs[0] - 1} ({rvs[0]})"
    # Each kind keeps its own history: secrets saw nothing and resume from now.
    assert store.events_since(SECRETS, store.rv) == []
    err = refusal(store.events_since, SECRETS, 1)
    assert err.code == 410


def test_an_event_is_a_copy_of_the_object_as_it_was():
    store, _ = new_store()
    start = store.rv
    store.create(CONFIGMAPS, "default", cm("c", data={"k": "v"}))
    store.get(CONFIGMAPS, "default", "c")["data"]["k"] = "changed later"
    assert store.events_since(CONFIGMAPS, start)[0].obj["data"] == {"k": "v"}


def test_the_store_runs_its_work_at_once_unless_given_a_scheduler():
    registry = Registry()
    for rtype in BUILTINS:
        registry.add(rtype)
    store = Store(registry)
    store.create(NAMESPACES, None, {"metadata": {"name": "default"}})
    owner = store.create(CONFIGMAPS, "default", cm("owner")).obj
    store.create(CONFIGMAPS, "default", cm("child", owner))
    store.delete(CONFIGMAPS, "default", "owner")
    assert names(store) == []


# -- reads and creation ------------------------------------------------------------------------

def test_get_and_list():
    store, _ = new_store(namespaces=("default", "b-ns"))
    for ns, name in [("default", "z"), ("b-ns", "y"), ("default", "a")]:
        store.create(CONFIGMAPS, ns, cm(name))
    err = refusal(store.get, CONFIGMAPS, "default", "y")
    assert (err.code, err.reason, err.message) == (404, "NotFound", 'configmaps "y" not found')
    assert store.find(CONFIGMAPS, "default", "y") is None
    assert store.find(CONFIGMAPS, "b-ns", "y")["metadata"]["name"] == "y"
    assert names(store) == ["a", "z"]
    assert [(o["metadata"]["namespace"], o["metadata"]["name"])
            for o in store.list(CONFIGMAPS, None)] == [("b-ns", "y"), ("default", "a"),
                                                       ("default", "z")]
    assert store.get(NAMESPACES, None, "b-ns")["metadata"]["name"] == "b-ns"
    assert [o["metadata"]["name"] for o in store.list(NAMESPACES, None)] == ["b-ns", "default"]


def test_a_namespace_is_created_active_with_the_kubernetes_finalizer_and_nothing_else_is():
    store, _ = new_store()
    ns = store.get(NAMESPACES, None, "default")
    assert ns["status"] == {"phase": "Active"} and ns["spec"] == {"finalizers": ["kubernetes"]}
    assert "namespace" not in ns["metadata"]  # cluster-scoped
    created = store.create(CONFIGMAPS, "default", cm("c")).obj
    assert "status" not in created and "spec" not in created


def test_create_refusals():
    store, work = new_store(namespaces=("default", "gone"))
    store.create(CONFIGMAPS, "default", cm("c"))
    err = refusal(store.create, CONFIGMAPS, "default", cm("c"))
    assert (err.code, err.reason, err.message) == (409, "AlreadyExists",
                                                   'configmaps "c" already exists')
    err = refusal(store.create, CONFIGMAPS, "nowhere", cm("c"))
    assert (err.code, err.reason, err.message) == (404, "NotFound",
                                                   'namespaces "nowhere" not found')
    store.delete(NAMESPACES, None, "gone")  # Terminating until its cleanup runs
    err = refusal(store.create, CONFIGMAPS, "gone", cm("c"))
    assert (err.code, err.reason) == (403, "Forbidden")
    assert err.message == ('configmaps "c" is forbidden: unable to create new content in '
                           "namespace gone because it is being terminated")
    work.run()
    assert store.find(NAMESPACES, None, "gone") is None


# -- deletion --------------------------------------------------------------------------------

def test_finalizers_hold_a_deleted_object_until_the_last_is_removed():
    store, _ = new_store()
    store.create(CONFIGMAPS, "default", cm("c", finalizers=["example.com/hold"]))
    before = store.rv
    held = store.delete(CONFIGMAPS, "default", "c")
    assert held["metadata"]["deletionTimestamp"]
    assert held["metadata"]["deletionGracePeriodSeconds"] == 0
    assert held["metadata"]["resourceVersion"] == str(store.rv) and store.rv > before
    assert store.get(CONFIGMAPS, "default", "c") == held
    assert [e.type for e in store.events_since(CONFIGMAPS, before)] == ["MODIFIED"]
    # Deleting again changes nothing.
    assert store.delete(CONFIGMAPS, "default", "c") == held
    assert len(store.events_since(CONFIGMAPS, before)) == 1
    # Adding a finalizer to an object being deleted is refused.
    more = copy.deepcopy(held)
    more["metadata"]["finalizers"].append("example.com/another")
    assert refusal(store.update, CONFIGMAPS, "default", "c", more).code == 422
    released = copy.deepcopy(held)
    released["metadata"]["finalizers"] = []
    store.update(CONFIGMAPS, "default", "c", released)
    assert store.find(CONFIGMAPS, "default", "c") is None
    assert [e.type for e in store.events_since(CONFIGMAPS, before)] == ["MODIFIED", "DELETED"]


@pytest.mark.parametrize(("preconditions", "refused"), [
    (None, None),
    ({}, None),
    ({"uid": "current"}, None),
    ({"resourceVersion": "current"}, None),
    # kube-apiserver's words (registry/generic/registry/store.go), the kind named
    ({"uid": "other-uid"}, 'Operation cannot be fulfilled on ConfigMap "c": the UID in the '
                           "precondition (other-uid) does not match the UID in record ({uid}). "
                           "The object might have been deleted and then recreated"),
    ({"resourceVersion": "1"}, 'Operation cannot be fulfilled on ConfigMap "c": the '
                               "ResourceVersion in the precondition (1) does not match the "
                               "ResourceVersion in record ({rv}). The object might have been "
                               "modified"),
])
def test_delete_preconditions(preconditions, refused):
    store, _ = new_store()
    meta = store.create(CONFIGMAPS, "default", cm("c")).obj["metadata"]
    if preconditions:
        preconditions = {k: meta[k] if v == "current" else v for k, v in preconditions.items()}
    if refused is None:
        store.delete(CONFIGMAPS, "default", "c", preconditions=preconditions)
        assert store.find(CONFIGMAPS, "default", "c") is None
    else:
        err = refusal(store.delete, CONFIGMAPS, "default", "c", preconditions=preconditions)
        assert (err.code, err.reason, err.message) == (409, "Conflict",
                                                       refused.format(
                                                           uid=meta["uid"],
                                                           rv=meta["resourceVersion"]))
        assert store.find(CONFIGMAPS, "default", "c") is not None


def test_deleting_an_object_forgets_the_configuration_applied_to_it():
    store, _ = new_store()
    store.create(CONFIGMAPS, "default", cm("c"))
    store.create(CONFIGMAPS, "default", cm("d"))
    store.applied[(CONFIGMAPS.key, "default", "c", "kubectl")] = {"data": {}}
    store.applied[(CONFIGMAPS.key, "default", "d", "kubectl")] = {"data": {}}
    store.delete(CONFIGMAPS, "default", "c")
    assert list(store.applied) == [(CONFIGMAPS.key, "default", "d", "kubectl")]


# (propagation, which of the dependents are left once the collector has run)
@pytest.mark.parametrize(("propagation", "left"), [
    ("Background", ["also-owned", "other-owner", "unrelated"]),
    ("Foreground", ["also-owned", "other-owner", "unrelated"]),
    ("Orphan", ["also-owned", "child", "grandchild", "other-owner", "unrelated"]),
])
def test_garbage_collection_by_owner_references(propagation, left):
    store, work = new_store()
    owner = store.create(CONFIGMAPS, "default", cm("owner")).obj
    other = store.create(CONFIGMAPS, "default", cm("other-owner")).obj
    child = store.create(CONFIGMAPS, "default", cm("child", owner)).obj
    store.create(SECRETS, "default", cm("grandchild", child))
    store.create(CONFIGMAPS, "default", cm("also-owned", owner, other))
    store.create(CONFIGMAPS, "default", cm("unrelated"))
    answer = store.delete(CONFIGMAPS, "default", "owner", propagation)
    if propagation == "Background":  # the owner goes at once
        assert store.find(CONFIGMAPS, "default", "owner") is None
    else:  # kept, marked with the policy's finalizer, until the collector has done its part
        finalizer = {"Foreground": "foregroundDeletion", "Orphan": "orphan"}[propagation]
        assert answer["metadata"]["finalizers"] == [finalizer]
        assert answer["metadata"]["deletionTimestamp"]
        assert store.get(CONFIGMAPS, "default", "owner") == answer
    work.run()
    assert store.find(CONFIGMAPS, "default", "owner") is None
    assert sorted(names(store) + names(store, SECRETS)) == left
    # A dependent that another owner keeps loses its reference to the deleted one, and only
    # that one (Kubernetes' collector drops dangling references; orphaning drops the owner's).
    assert [r["name"] for r in store.get(CONFIGMAPS, "default", "also-owned")["metadata"]
            ["ownerReferences"]] == ["other-owner"]
    if propagation == "Orphan":
        assert "ownerReferences" not in store.get(CONFIGMAPS, "default", "child")["metadata"]
        assert [r["name"] for r in store.get(SECRETS, "default", "grandchild")["metadata"]
                ["ownerReferences"]] == ["child"]


def test_background_deletion_removes_dependents_after_the_owner():
    store, work = new_store()
    owner = store.create(CONFIGMAPS, "default", cm("owner")).obj
    store.create(CONFIGMAPS, "default", cm("child", owner))
    store.delete(CONFIGMAPS, "default", "owner")
    assert names(store) == ["child"]
    work.run()
    assert names(store) == []


def test_an_orphaned_dependent_is_written_with_a_new_resource_version():
    store, work = new_store()
    owner = store.create(CONFIGMAPS, "default", cm("owner")).obj
    child = store.create(CONFIGMAPS, "default", cm("child", owner)).obj
    before = store.rv
    store.delete(CONFIGMAPS, "default", "owner", "Orphan")
    work.run()
    events = store.events_since(CONFIGMAPS, before)
    # The owner marked (the `orphan` finalizer), the child orphaned, then the owner gone.
    assert [(e.type, e.obj["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "owner"), ("MODIFIED", "child"), ("DELETED", "owner")]
    orphan = store.get(CONFIGMAPS, "default", "child")
    assert orphan["metadata"]["resourceVersion"] == str(events[1].rv)
    assert int(orphan["metadata"]["resourceVersion"]) > int(child["metadata"]["resourceVersion"])


# -- namespaces --------------------------------------------------------------------------------

def test_deleting_a_namespace_deletes_what_is_in_it_and_nothing_else():
    store, work = new_store(namespaces=("default", "doomed"))
    store.create(CONFIGMAPS, "doomed", cm("a"))
    store.create(SECRETS, "doomed", cm("b"))
    store.create(CONFIGMAPS, "default", cm("a"))
    terminating = store.delete(NAMESPACES, None, "doomed")
    assert terminating["status"]["phase"] == "Terminating"
    assert terminating["metadata"]["deletionTimestamp"]
    assert store.delete(NAMESPACES, None, "doomed") == terminating
    work.run()
    assert store.find(NAMESPACES, None, "doomed") is None
    assert names(store, CONFIGMAPS, "doomed") == [] and names(store, SECRETS, "doomed") == []
    assert names(store) == ["a"]


def test_a_namespace_waits_for_objects_held_by_finalizers():
    async def scenario() -> None:
        store, work = new_store(namespaces=("default", "doomed"))
        store.create(CONFIGMAPS, "default", cm("elsewhere"))
        store.create(CONFIGMAPS, "doomed", cm("held", finalizers=["example.com/hold"]))
        store.create(CONFIGMAPS, "doomed", cm("free"))
        deleted: asyncio.Queue = asyncio.Queue()
        store.subscribe(NAMESPACES.key, deleted)
        store.delete(NAMESPACES, None, "doomed")
        work.run()
        assert names(store, CONFIGMAPS, "doomed") == ["held"]
        assert store.get(NAMESPACES, None, "doomed")["status"]["phase"] == "Terminating"
        held = copy.deepcopy(store.get(CONFIGMAPS, "doomed", "held"))
        held["metadata"]["finalizers"] = []
        store.update(CONFIGMAPS, "doomed", "held", held)
        while True:  # the namespace goes once the cleanup, trying again, finds it empty
            event = await asyncio.wait_for(deleted.get(), timeout=10)
            if event.type == "DELETED":
                break
        assert event.obj["metadata"]["name"] == "doomed"
        assert store.find(NAMESPACES, None, "doomed") is None
        assert names(store) == ["elsewhere"]

    asyncio.run(scenario())


# -- CRDs ------------------------------------------------------------------------------------

def test_a_crd_serves_its_kind_until_deleted():
    store, work = new_store()
    changes = []
    store.on_crd_change.append(lambda: changes.append(len(changes)))
    crd = copy.deepcopy(WIDGET_CRD)
    del crd["spec"]["versions"][0]["served"]  # served unless said otherwise
    del crd["spec"]["names"]["singular"], crd["spec"]["names"]["listKind"]
    stored = store.create(CRD_TYPE, None, crd).obj
    assert stored["status"]["acceptedNames"] == {
        "kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList",
        "shortNames": ["wdg"]}
    assert [(c["type"], c["status"]) for c in stored["status"]["conditions"]] == [
        ("NamesAccepted", "True"), ("Established", "True")]
    assert stored["status"]["storedVersions"] == ["v1"]
    widgets = store.registry.get(GROUP, "v1", "widgets")
    assert widgets is not None and changes == [0]
    store.create(widgets, "default", widget("w"))
    watch: asyncio.Queue = asyncio.Queue()
    store.subscribe(widgets.key, watch)
    before = store.rv
    store.delete(CRD_TYPE, None, crd["metadata"]["name"])
    assert store.registry.get(GROUP, "v1", "widgets") is None
    assert changes == [0, 1]
    gone = watch.get_nowait()
    assert (gone.type, gone.obj["metadata"]["name"]) == ("DELETED", "w") and gone.rv > before
    assert watch.get_nowait() is None  # the watch of a kind no longer served ends
    work.run()


def test_an_invalid_crd_is_refused_naming_its_fields():
    store, _ = new_store()
    crd = copy.deepcopy(WIDGET_CRD)
    crd["spec"]["scope"] = "Everywhere"
    err = refusal(store.create, CRD_TYPE, None, crd)
    assert (err.code, err.reason) == (422, "Invalid")
    assert err.message == (f'CustomResourceDefinition.apiextensions.k8s.io "widgets.{GROUP}" is '
                           'invalid: spec.scope: Unsupported value: supported values: '
                           '"Cluster", "Namespaced"')
    assert store.registry.get(GROUP, "v1", "widgets") is None
