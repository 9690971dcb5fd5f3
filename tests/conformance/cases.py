"""The conformance cases: each a short sequence of requests sent, as it is, to the embedded
API server and to kube-apiserver, whose answers must match (harness.py says what is compared).
Every case names its objects after itself, so the cases share a namespace without meeting.

Kinds: ConfigMaps (a built-in kind that kube-apiserver does not default, so whole bodies
compare), Pods (for the declared patch strategies of their lists; only the fields a case is
about compare, as kube-apiserver defaults a pod's other fields), TpuTrainingJobs (the project's
CRD: schema, status subresource, printer columns) and JobSets (the bundled JobSet CRD)."""

from __future__ import annotations

import copy
from dataclasses import dataclass

from tests.conformance.harness import TABLE, Session, Steps
from tests.conformance.planes import NAMESPACE

NS = f"/api/v1/namespaces/{NAMESPACE}"
CMS = f"{NS}/configmaps"
PODS = f"{NS}/pods"
JOBS = f"/apis/tpujob.dev/v1alpha1/namespaces/{NAMESPACE}/tputrainingjobs"
JOBSETS = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NAMESPACE}/jobsets"


@dataclass(frozen=True)
class Case:
    id: str
    about: str
    steps: Steps


CASES: list[Case] = []


def case(about: str):
    def register(fn: Steps) -> Steps:
        CASES.append(Case(fn.__name__.replace("_", "-"), about, fn))
        return fn
    return register


def cm(name: str, data: dict | None = None, **meta) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, **meta}, "data": data or {"a": "1"}}


def pod(name: str, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "busybox:1"},
                                    {"name": "side", "image": "busybox:1"}], **spec}}


TPUJOB_SPEC = {"slice": "v6e-8", "image": "trainer:1", "output": "gs://bucket/run",
               "data": {"kind": "synthetic"}}


def tpujob(name: str, **spec) -> dict:
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": name}, "spec": {**copy.deepcopy(TPUJOB_SPEC), **spec}}


def rv(body: dict) -> str:
    return body["metadata"]["resourceVersion"]


# -- create, get, list -------------------------------------------------------------------------

@case("create, get, create again (409 AlreadyExists), get of a missing name (404)")
def create_get(s: Session) -> None:
    s.send("POST", CMS, cm("create-get", labels={"app": "x"}, annotations={"n": "1"}))
    s.send("GET", f"{CMS}/create-get")
    s.send("POST", CMS, cm("create-get"))
    s.send("GET", f"{CMS}/create-get-missing")


@case("create with generateName, an invalid name (422), in a missing namespace (404)")
def create_errors(s: Session) -> None:
    code, body = s.send("POST", CMS, {"apiVersion": "v1", "kind": "ConfigMap",
                                      "metadata": {"generateName": "gen-"}}, record=False)
    s.send("GET", f"{CMS}/{body['metadata']['name']}", only=("metadata.generateName",),
           shown=f"GET {CMS}/<generated>")
    s.send("POST", CMS, cm("Create_Errors"))
    s.send("POST", "/api/v1/namespaces/no-such-namespace/configmaps", cm("create-errors"))
    s.send("POST", CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})


@case("list with label selectors: equality, set, existence, negation; a malformed one (400)")
def list_labels(s: Session) -> None:
    for name, tier in (("ll-a", "a"), ("ll-b", "b"), ("ll-c", None)):
        labels = {"case": "list-labels", **({"tier": tier} if tier else {})}
        s.send("POST", CMS, cm(name, labels=labels), record=False)
    for selector in ("case=list-labels,tier=a", "case=list-labels,tier in (a,b)",
                     "case=list-labels,!tier", "case=list-labels,tier!=a",
                     "case=list-labels,tier notin (a)", "case==list-labels,tier",
                     "tier in (a"):
        s.send("GET", CMS, params={"labelSelector": selector})


@case("list with field selectors: name, namespace; an unsupported field (400)")
def list_fields(s: Session) -> None:
    s.send("POST", CMS, cm("lf-a", labels={"case": "list-fields"}), record=False)
    s.send("POST", CMS, cm("lf-b", labels={"case": "list-fields"}), record=False)
    s.send("GET", CMS, params={"fieldSelector": "metadata.name=lf-b"})
    s.send("GET", CMS, params={"fieldSelector": f"metadata.namespace={NAMESPACE},"
                                                "metadata.name!=lf-b",
                               "labelSelector": "case=list-fields"})
    s.send("GET", CMS, params={"fieldSelector": "data.a=1"})
    s.send("GET", f"{PODS}", params={"fieldSelector": "status.phase=Running"})


@case("list pages: limit and continue")
def list_pages(s: Session) -> None:
    for i in range(3):
        s.send("POST", CMS, cm(f"lp-{i}", labels={"case": "list-pages"}), record=False)
    _, first = s.send("GET", CMS, params={"labelSelector": "case=list-pages", "limit": "2"})
    s.send("GET", CMS, params={"labelSelector": "case=list-pages", "limit": "2",
                               "continue": first["metadata"]["continue"]})


# -- watch -------------------------------------------------------------------------------------

@case("watch from a resourceVersion: ADDED, MODIFIED, DELETED in order")
def watch_from_version(s: Session) -> None:
    _, marker = s.send("POST", CMS, cm("wv-marker"), record=False)
    _, made = s.send("POST", CMS, cm("wv-1", labels={"case": "watch-version"}), record=False)
    s.send("PUT", f"{CMS}/wv-1", {**made, "data": {"a": "2"}}, record=False)
    s.send("POST", CMS, cm("wv-2", labels={"case": "watch-version"}), record=False)
    s.send("DELETE", f"{CMS}/wv-1", record=False)
    s.watch(CMS, {"resourceVersion": rv(marker), "labelSelector": "case=watch-version"}, 4)


@case("watch with a label selector: an object that stops matching is DELETED to the watcher")
def watch_leaves_selector(s: Session) -> None:
    _, marker = s.send("POST", CMS, cm("wl-marker"), record=False)
    _, made = s.send("POST", CMS, cm("wl-1", labels={"case": "watch-leaves"}), record=False)
    s.send("PATCH", f"{CMS}/wl-1", {"metadata": {"labels": {"case": "elsewhere"}}},
           patch="merge", record=False)
    s.send("PATCH", f"{CMS}/wl-1", {"metadata": {"labels": {"case": "watch-leaves"}}},
           patch="merge", record=False)
    s.watch(CMS, {"resourceVersion": rv(marker), "labelSelector": "case=watch-leaves"}, 3)


@case("watch with sendInitialEvents: the objects as ADDED, then the initial-events-end "
      "BOOKMARK")
def watch_initial_events(s: Session) -> None:
    for name in ("wi-b", "wi-a"):
        s.send("POST", CMS, cm(name, labels={"case": "watch-initial"}), record=False)
    s.watch(CMS, {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan",
                  "allowWatchBookmarks": "true", "labelSelector": "case=watch-initial"}, 3)


@case("kubectl get NAME -w: the Table it gets, a status write, then its watch (resourceVersion "
      "0, the name's field selector, as Table): one ADDED row, already with the new status")
def watch_named_from_zero(s: Session) -> None:
    s.send("POST", JOBS, tpujob("watch-named"), record=False)
    s.send("GET", f"{JOBS}/watch-named", accept=TABLE)
    s.send("PATCH", f"{JOBS}/watch-named/status", {"status": {"phase": "Running"}},
           patch="merge", record=False)
    s.watch(JOBS, {"resourceVersion": "0", "fieldSelector": "metadata.name=watch-named"}, 1,
            accept=TABLE)


@case("watch from a resourceVersion that is not a number (400)")
def watch_bad_version(s: Session) -> None:
    s.watch(CMS, {"resourceVersion": "abc"}, 1)


# -- update ------------------------------------------------------------------------------------

@case("update: with the current resourceVersion, a stale one (409 Conflict), none at all")
def update_versions(s: Session) -> None:
    _, made = s.send("POST", CMS, cm("update-versions"))
    s.send("PUT", f"{CMS}/update-versions", {**made, "data": {"a": "2"}})
    s.send("PUT", f"{CMS}/update-versions", {**made, "data": {"a": "3"}})
    unversioned = copy.deepcopy(made)
    del unversioned["metadata"]["resourceVersion"]
    s.send("PUT", f"{CMS}/update-versions", {**unversioned, "data": {"a": "4"}})
    s.send("PUT", f"{CMS}/update-versions-missing", cm("update-versions-missing"))
    s.send("PUT", f"{CMS}/update-versions", cm("other-name"))


# -- patches -----------------------------------------------------------------------------------

@case("merge patch: maps merge, null deletes, lists (finalizers) are replaced")
def merge_patch(s: Session) -> None:
    s.send("POST", CMS, cm("merge-patch", {"a": "1", "b": "2"},
                           finalizers=["x.io/one"], labels={"k": "v"}))
    s.send("PATCH", f"{CMS}/merge-patch",
           {"data": {"b": None, "c": "3"}, "metadata": {"finalizers": ["x.io/two"]}},
           patch="merge")
    s.send("PATCH", f"{CMS}/merge-patch", {"metadata": {"finalizers": None}}, patch="merge")
    s.send("PATCH", f"{CMS}/merge-patch", "[1]", patch="merge")


@case("JSON patch: add, replace, remove, test; a failing test; a missing path")
def json_patch(s: Session) -> None:
    s.send("POST", CMS, cm("json-patch", {"a": "1"}))
    s.send("PATCH", f"{CMS}/json-patch", [
        {"op": "add", "path": "/data/b", "value": "2"},
        {"op": "replace", "path": "/data/a", "value": "9"},
        {"op": "test", "path": "/data/a", "value": "9"},
        {"op": "add", "path": "/metadata/finalizers", "value": ["x.io/a"]},
        {"op": "add", "path": "/metadata/finalizers/-", "value": "x.io/b"},
        {"op": "remove", "path": "/metadata/finalizers/0"}], patch="json")
    s.send("PATCH", f"{CMS}/json-patch", [{"op": "test", "path": "/data/a", "value": "1"}],
           patch="json")
    s.send("PATCH", f"{CMS}/json-patch", [{"op": "remove", "path": "/data/zzz"}], patch="json")
    s.send("PATCH", f"{CMS}/json-patch", [{"op": "replace", "path": "/metadata/finalizers",
                                           "value": []}], patch="json")


@case("strategic merge: finalizers merged (patchStrategy merge), not replaced")
def strategic_finalizers(s: Session) -> None:
    s.send("POST", CMS, cm("sm-finalizers", finalizers=["x.io/one"]))
    s.send("PATCH", f"{CMS}/sm-finalizers", {"metadata": {"finalizers": ["x.io/two"]}},
           patch="strategic")
    s.send("PATCH", f"{CMS}/sm-finalizers", {"metadata": {"finalizers": ["x.io/one"]}},
           patch="strategic")
    s.send("PATCH", f"{CMS}/sm-finalizers", {"metadata": {
        "$deleteFromPrimitiveList/finalizers": ["x.io/one", "x.io/absent"]}},
        patch="strategic")
    s.send("PATCH", f"{CMS}/sm-finalizers", {"metadata": {
        "$setElementOrder/finalizers": ["x.io/three", "x.io/two"],
        "finalizers": ["x.io/three"]}}, patch="strategic")
    s.send("PATCH", f"{CMS}/sm-finalizers", {"metadata": {"finalizers": None}},
           patch="strategic")


@case("strategic merge: $retainKeys, $patch replace and delete on maps, an unknown $patch")
def strategic_directives(s: Session) -> None:
    s.send("POST", CMS, cm("sm-directives", {"a": "1", "b": "2", "c": "3"},
                           labels={"x": "1", "y": "2"}))
    s.send("PATCH", f"{CMS}/sm-directives",
           {"data": {"$retainKeys": ["a", "b", "d"], "d": "4"}}, patch="strategic")
    s.send("PATCH", f"{CMS}/sm-directives",
           {"data": {"$retainKeys": ["a"], "e": "5"}}, patch="strategic")
    s.send("PATCH", f"{CMS}/sm-directives",
           {"metadata": {"labels": {"$patch": "replace", "z": "3"}}}, patch="strategic")
    s.send("PATCH", f"{CMS}/sm-directives",
           {"metadata": {"labels": {"$patch": "bogus"}}}, patch="strategic")
    s.send("PATCH", f"{CMS}/sm-directives", {"data": {"$patch": "delete"}}, patch="strategic")


@case("strategic merge on pods: containers merged by name (the only list of a pod's spec "
      "an update may change)")
def strategic_pod_containers(s: Session) -> None:
    only = ("spec.containers[*].name", "spec.containers[*].image")
    s.send("POST", PODS, pod("sm-pod"), only=only, record=False)
    s.send("PATCH", f"{PODS}/sm-pod", {"spec": {"containers": [
        {"name": "side", "image": "busybox:2"}]}}, patch="strategic", only=only)
    s.send("PATCH", f"{PODS}/sm-pod", {"spec": {
        "$setElementOrder/containers": [{"name": "main"}, {"name": "side"}],
        "containers": [{"name": "main", "image": "busybox:3"}]}}, patch="strategic", only=only)


@case("strategic merge: ownerReferences merged by uid (two owners of one name)")
def strategic_owner_references(s: Session) -> None:
    owners = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
               "uid": "00000000-0000-0000-0000-000000000001"},
              {"apiVersion": "v1", "kind": "Secret", "name": "owner",
               "uid": "00000000-0000-0000-0000-000000000002"}]
    s.send("POST", CMS, cm("sm-owners", ownerReferences=owners))
    s.send("PATCH", f"{CMS}/sm-owners", {"metadata": {"ownerReferences": [
        {**owners[1], "blockOwnerDeletion": False}]}}, patch="strategic")
    s.send("PATCH", f"{CMS}/sm-owners", {"metadata": {"ownerReferences": [
        {"uid": owners[0]["uid"], "$patch": "delete"}]}}, patch="strategic")


@case("strategic merge on a Service: ports merged by port, not by name")
def strategic_service_ports(s: Session) -> None:
    only = ("spec.ports", "spec.selector")
    ports = [{"name": "a", "port": 80, "protocol": "TCP", "targetPort": 80},
             {"name": "b", "port": 81, "protocol": "TCP", "targetPort": 81}]
    s.send("POST", f"{NS}/services", {"apiVersion": "v1", "kind": "Service",
                                      "metadata": {"name": "sm-svc"},
                                      "spec": {"ports": ports, "selector": {"app": "x"}}},
           only=only)
    s.send("PATCH", f"{NS}/services/sm-svc", {"spec": {"ports": [
        {"name": "c", "port": 80, "protocol": "TCP", "targetPort": 80}]}},
        patch="strategic", only=only)
    s.send("PATCH", f"{NS}/services/sm-svc", {"spec": {"ports": [
        {"$patch": "replace"}, {"name": "d", "port": 90, "protocol": "TCP", "targetPort": 90}]}},
        patch="strategic", only=only)


@case("strategic merge on a custom resource: 415")
def strategic_custom(s: Session) -> None:
    s.send("POST", JOBS, tpujob("sm-custom"), only=("spec.slice",))
    s.send("PATCH", f"{JOBS}/sm-custom", {"spec": {"slice": "v6e-16"}}, patch="strategic")


@case("server-side apply: create, change, drop a field it applied; a second manager's "
      "conflict (409) and force")
def server_side_apply(s: Session) -> None:
    path = f"{CMS}/ssa"
    applied = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"},
               "data": {"a": "1", "b": "2"}}
    s.send("PATCH", path, applied, patch="apply", params={"fieldManager": "one"})
    s.send("PATCH", path, {**applied, "data": {"a": "1"}}, patch="apply",
           params={"fieldManager": "one"})
    s.send("PATCH", path, {**applied, "data": {"c": "3"}}, patch="apply",
           params={"fieldManager": "two"})
    s.send("PATCH", path, {**applied, "data": {"a": "2"}}, patch="apply",
           params={"fieldManager": "two"})
    s.send("PATCH", path, {**applied, "data": {"a": "2"}}, patch="apply",
           params={"fieldManager": "two", "force": "true"})


@case("server-side apply: finalizers (a set) from two managers are both kept")
def server_side_apply_sets(s: Session) -> None:
    path = f"{CMS}/ssa-sets"
    applied = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa-sets"}}
    s.send("PATCH", path, {**applied, "metadata": {"name": "ssa-sets",
                                                   "finalizers": ["x.io/one"]}},
           patch="apply", params={"fieldManager": "one"})
    s.send("PATCH", path, {**applied, "metadata": {"name": "ssa-sets",
                                                   "finalizers": ["x.io/two"]}},
           patch="apply", params={"fieldManager": "two"})
    s.send("PATCH", path, {**applied, "metadata": {"name": "ssa-sets", "finalizers": []}},
           patch="apply", params={"fieldManager": "one"})


@case("server-side apply without fieldManager (422) and with a mismatched name (400)")
def server_side_apply_errors(s: Session) -> None:
    applied = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa-errors"}}
    s.send("PATCH", f"{CMS}/ssa-errors", applied, patch="apply")
    s.send("PATCH", f"{CMS}/ssa-other", applied, patch="apply", params={"fieldManager": "m"})


# -- custom resources: status subresource, generation, validation -----------------------------

@case("status subresource: the main resource ignores status, /status ignores spec; "
      "generation follows spec only")
def status_subresource(s: Session) -> None:
    only = ("metadata.generation", "spec.slice", "status")
    s.send("POST", JOBS, {**tpujob("status-sub"), "status": {"phase": "Running"}}, only=only)
    s.send("PATCH", f"{JOBS}/status-sub", {"status": {"phase": "Running"}}, patch="merge",
           only=only)
    s.send("PATCH", f"{JOBS}/status-sub/status",
           {"spec": {"slice": "v6e-16"}, "status": {"phase": "Running"}}, patch="merge",
           only=only)
    s.send("PATCH", f"{JOBS}/status-sub", {"metadata": {"labels": {"a": "b"}}},
           patch="merge", only=only)
    s.send("PATCH", f"{JOBS}/status-sub", {"spec": {"slice": "v6e-16"}}, patch="merge",
           only=only)
    _, current = s.send("GET", f"{JOBS}/status-sub/status", only=only)
    s.send("PUT", f"{JOBS}/status-sub/status", {**current, "status": {"phase": "Succeeded"}},
           only=only)
    s.send("PUT", f"{JOBS}/status-sub/status", {**current, "status": {"phase": "Failed"}},
           only=only)


@case("field validation of an unknown field in a custom resource: Strict, Warn, Ignore")
def field_validation_custom(s: Session) -> None:
    for mode in ("Strict", "Warn", "Ignore"):
        body = tpujob(f"fv-{mode.lower()}", color="red")
        body["metadata"]["bogus"] = 1
        s.send("POST", JOBS, body, params={"fieldValidation": mode},
               only=("spec.color", "metadata.bogus", "spec.slice"))
    s.send("PATCH", f"{JOBS}/fv-warn", {"spec": {"shape": 1}}, patch="merge",
           params={"fieldValidation": "Strict"})
    s.send("POST", JOBS, tpujob("fv-bad"), params={"fieldValidation": "Loose"})


@case("field validation of an unknown field in a built-in kind: Strict, Warn, Ignore")
def field_validation_builtin(s: Session) -> None:
    for mode in ("Strict", "Warn", "Ignore"):
        body = cm(f"fvb-{mode.lower()}")
        body["color"] = "red"
        s.send("POST", CMS, body, params={"fieldValidation": mode})


@case("schema validation of a custom resource: wrong type, missing required field (422)")
def schema_validation(s: Session) -> None:
    s.send("POST", JOBS, tpujob("sv-type", slice=8))
    body = tpujob("sv-required")
    del body["spec"]["image"]
    s.send("POST", JOBS, body)


# -- deletion ----------------------------------------------------------------------------------

@case("delete with each propagation policy: what kube-apiserver answers and keeps")
def delete_propagation(s: Session) -> None:
    for policy in ("Background", "Foreground", "Orphan"):
        name = f"del-{policy.lower()}"
        s.send("POST", CMS, cm(name), record=False)
        s.send("DELETE", f"{CMS}/{name}", {"kind": "DeleteOptions", "apiVersion": "v1",
                                           "propagationPolicy": policy})
        if policy == "Background":  # the others wait for the garbage collector
            s.send("GET", f"{CMS}/{name}")
    s.send("DELETE", f"{CMS}/del-background", params={"propagationPolicy": "Sideways"})


@case("delete of a custom resource, and of a pod (objects kube-apiserver returns whole)")
def delete_returns(s: Session) -> None:
    s.send("POST", JOBS, tpujob("del-job"), record=False)
    s.send("DELETE", f"{JOBS}/del-job", only=("kind", "metadata.name", "spec.slice"))
    s.send("POST", PODS, pod("del-pod"), record=False)
    s.send("DELETE", f"{PODS}/del-pod", params={"gracePeriodSeconds": "0"},
           only=("kind", "metadata.name", "metadata.deletionGracePeriodSeconds"))
    s.send("GET", f"{PODS}/del-pod", only=("kind", "metadata.name"))


@case("finalizers hold a deletion until the last one is removed")
def delete_finalizers(s: Session) -> None:
    s.send("POST", CMS, cm("del-held", finalizers=["x.io/a", "x.io/b"]))
    s.send("DELETE", f"{CMS}/del-held")
    s.send("GET", f"{CMS}/del-held")
    s.send("DELETE", f"{CMS}/del-held")
    s.send("PATCH", f"{CMS}/del-held", {"data": {"a": "2"}}, patch="merge")
    s.send("PATCH", f"{CMS}/del-held", {"metadata": {"finalizers": ["x.io/b", "x.io/c"]}},
           patch="merge")
    s.send("PATCH", f"{CMS}/del-held", {"metadata": {"finalizers": None}}, patch="merge")
    s.send("GET", f"{CMS}/del-held")


@case("delete with preconditions: a wrong uid or resourceVersion is 409")
def delete_preconditions(s: Session) -> None:
    s.send("POST", CMS, cm("del-pre"), record=False)
    s.send("DELETE", f"{CMS}/del-pre", {"preconditions": {"uid": "not-the-uid"}})
    s.send("DELETE", f"{CMS}/del-pre", {"preconditions": {"resourceVersion": "1"}})
    s.send("DELETE", f"{CMS}/del-pre-missing")


@case("deletecollection with a label selector")
def delete_collection(s: Session) -> None:
    for name in ("dc-a", "dc-b"):
        s.send("POST", CMS, cm(name, labels={"case": "delete-collection"}), record=False)
    s.send("DELETE", CMS, params={"labelSelector": "case=delete-collection"})
    s.send("GET", CMS, params={"labelSelector": "case=delete-collection"})


# -- tables ------------------------------------------------------------------------------------

@case("Table of ConfigMaps (list and get), as kubectl get asks")
def table_configmaps(s: Session) -> None:
    s.send("POST", CMS, cm("tbl-cm", {"a": "1", "b": "2"}, labels={"case": "table-cm"}),
           record=False)
    s.send("GET", CMS, params={"labelSelector": "case=table-cm"}, accept=TABLE)
    s.send("GET", f"{CMS}/tbl-cm", accept=TABLE)


@case("Table of TpuTrainingJobs: the CRD's printer columns")
def table_tpujobs(s: Session) -> None:
    s.send("POST", JOBS, tpujob("tbl-job"), record=False)
    s.send("GET", JOBS, params={"fieldSelector": "metadata.name=tbl-job"}, accept=TABLE)


@case("Table of pods with includeObject=None")
def table_pods(s: Session) -> None:
    s.send("POST", PODS, pod("tbl-pod"), record=False)
    s.send("GET", f"{PODS}/tbl-pod", params={"includeObject": "None"}, accept=TABLE)


# -- custom resources: JobSet ------------------------------------------------------------------

@case("a JobSet: create, and its defaults from the CRD schema")
def jobset_create(s: Session) -> None:
    template = {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "c", "image": "busybox:1"}]}}}}
    s.send("POST", JOBSETS, {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                             "metadata": {"name": "js"},
                             "spec": {"replicatedJobs": [{"name": "w", "replicas": 1,
                                                          "template": template}]}})
