"""The objects a JobSet controller makes for a JobSet, pure, as kubernetes-sigs/jobset v0.12
builds them: the webhook's defaults (applied in memory), child Job names, the labels and
annotations of a child Job and its pod template, the child Jobs and the headless Service.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from . import keys
from .keys import JobSetCondition
from .objects import annotations, build_controller_ref, is_condition_true, name, namespace


def default_jobset(js: dict[str, Any]) -> dict[str, Any]:
    """A copy of the JobSet with its admission webhook's defaults filled in."""
    js = copy.deepcopy(js)
    spec = js.setdefault("spec", {})
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    network = spec.get("network") or {}
    spec["network"] = network
    for rjob in spec.setdefault("replicatedJobs", []):
        rjob.setdefault("replicas", 1)
        rjob.setdefault("groupName", "default")
        job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
        job_spec.setdefault("completionMode", "Indexed")
        network.setdefault("enableDNSHostnames", True)
        pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
        if not pod_spec.get("restartPolicy"):
            pod_spec["restartPolicy"] = "OnFailure"
    return js


def job_name(jobset: str, replicated_job: str, index: int) -> str:
    return f"{jobset}-{replicated_job}-{index}"


def subdomain(js: dict[str, Any]) -> str:
    return (js["spec"].get("network") or {}).get("subdomain") or name(js)


def is_dns_enabled(js: dict[str, Any]) -> bool:
    return bool((js["spec"].get("network") or {}).get("enableDNSHostnames"))


def is_suspended(js: dict[str, Any]) -> bool:
    return bool(js["spec"].get("suspend"))


def is_finished(js: dict[str, Any]) -> bool:
    return any(is_condition_true(js, c) for c in (JobSetCondition.COMPLETED,
                                                    JobSetCondition.FAILED))


def job_key(ns: str, job: str) -> str:
    """The job-key label: SHA-1 of `<namespace>/<job name>`, as the controller computes it."""
    return hashlib.sha1(f"{ns}/{job}".encode()).hexdigest()


def _global_index(spec: dict[str, Any], rjob_name: str, index: int) -> str:
    total = 0
    for rjob in spec["replicatedJobs"]:
        if rjob["name"] == rjob_name:
            return str(total + index)
        total += int(rjob["replicas"])
    return ""


def _group_index(spec: dict[str, Any], group: str, rjob_name: str, index: int) -> str:
    total = 0
    for rjob in spec["replicatedJobs"]:
        if rjob["groupName"] != group:
            continue
        if rjob["name"] == rjob_name:
            return str(total + index)
        total += int(rjob["replicas"])
    return ""


def _job_restart_attempt(js: dict[str, Any], rjob: str, index: int) -> int:
    for rjs in (js.get("status") or {}).get("replicatedJobsStatus") or []:
        if rjs.get("name") == rjob and len(rjs.get("jobRestarts") or []) > index:
            return int(rjs["jobRestarts"][index])
    return 0


def build_jobset_labels(js: dict[str, Any], rjob: dict[str, Any], index: int) -> dict[str, str]:
    """The labels (and, with the same values, annotations) JobSet puts on a child Job and its
    pod template."""
    spec = js["spec"]
    jname = job_name(name(js), rjob["name"], index)
    group = rjob["groupName"]
    values = {
        keys.JOBSET_NAME: name(js),
        keys.REPLICATED_JOB_NAME: rjob["name"],
        keys.RESTART_ATTEMPT: str(int((js.get("status") or {}).get("restarts") or 0)),
        keys.JOB_RESTART_ATTEMPT: str(_job_restart_attempt(js, rjob["name"], index)),
        keys.REPLICATED_JOB_REPLICAS: str(rjob["replicas"]),
        keys.GLOBAL_REPLICAS: str(sum(int(r["replicas"]) for r in spec["replicatedJobs"])),
        keys.JOB_INDEX: str(index),
        keys.JOB_KEY: job_key(namespace(js), jname),
        keys.JOB_GLOBAL_INDEX: _global_index(spec, rjob["name"], index),
        keys.GROUP_NAME: group,
        keys.GROUP_REPLICAS: str(sum(int(r["replicas"]) for r in spec["replicatedJobs"]
                                     if r["groupName"] == group)),
        keys.JOB_GROUP_INDEX: _group_index(spec, group, rjob["name"], index),
    }
    coordinator = spec.get("coordinator")
    if coordinator:
        values[keys.COORDINATOR] = (
            f"{name(js)}-{coordinator['replicatedJob']}-{coordinator.get('jobIndex', 0)}-"
            f"{coordinator.get('podIndex', 0)}.{subdomain(js)}")
    return values


def _label_and_annotate(target_meta: dict[str, Any], js: dict[str, Any], rjob: dict[str, Any],
                        index: int) -> None:
    values = build_jobset_labels(js, rjob, index)
    target_meta["labels"] = {**(target_meta.get("labels") or {}), **values}
    notes = {**(target_meta.get("annotations") or {}), **values}
    for source in (annotations(js), (rjob["template"].get("metadata") or {}).get("annotations")
                   or {}):
        if keys.EXCLUSIVE_TOPOLOGY in source:
            notes[keys.EXCLUSIVE_TOPOLOGY] = source[keys.EXCLUSIVE_TOPOLOGY]
            if keys.NODE_SELECTOR_STRATEGY in source:
                notes[keys.NODE_SELECTOR_STRATEGY] = source[keys.NODE_SELECTOR_STRATEGY]
    target_meta["annotations"] = notes


def build_job(js: dict[str, Any], rjob: dict[str, Any], index: int) -> dict[str, Any]:
    """The child Job `index` of replicated job `rjob` (of a defaulted JobSet)."""
    template = rjob["template"]
    tmeta = template.get("metadata") or {}
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name(name(js), rjob["name"], index), "namespace": namespace(js),
                     "labels": dict(tmeta.get("labels") or {}),
                     "annotations": dict(tmeta.get("annotations") or {}),
                     "ownerReferences": [build_controller_ref(js)]},
        "spec": copy.deepcopy(template["spec"]),
    }
    _label_and_annotate(job["metadata"], js, rjob, index)
    pod_template = job["spec"].setdefault("template", {})
    _label_and_annotate(pod_template.setdefault("metadata", {}), js, rjob, index)
    pod_spec = pod_template.setdefault("spec", {})
    if is_dns_enabled(js):
        pod_spec["subdomain"] = subdomain(js)
    notes = job["metadata"]["annotations"]
    if keys.EXCLUSIVE_TOPOLOGY in notes and keys.NODE_SELECTOR_STRATEGY in notes:
        pod_spec.setdefault("nodeSelector", {})[keys.NAMESPACED_JOB] = \
            f"{namespace(js)}_{job['metadata']['name']}"
        pod_spec.setdefault("tolerations", []).append(
            {"key": keys.NO_SCHEDULE_TAINT, "operator": "Exists", "effect": "NoSchedule"})
    job["spec"]["suspend"] = is_suspended(js)
    return job


def build_headless_service(js: dict[str, Any]) -> dict[str, Any]:
    network = js["spec"].get("network") or {}
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": subdomain(js), "namespace": namespace(js),
                     "ownerReferences": [build_controller_ref(js)]},
        "spec": {"clusterIP": "None", "selector": {keys.JOBSET_NAME: name(js)},
                 "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True)},
    }
