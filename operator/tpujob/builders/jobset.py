"""The JobSet that runs a TpuTrainingJob: one replicated job of `slices` Jobs, one pod per host,
one trainer container per JAX process, and failure policies that restart on retryable exits and
fail at once on deterministic ones."""

from __future__ import annotations

from typing import Any

from tpujob.api.recovery import RestartStrategy
from tpujob.api.spec import TpuTrainingJobSpec
from tpujob.builders import names
from tpujob.builders.fingerprint import FINGERPRINT_ANNOTATION, encode_fingerprint
from tpujob.builders.gpu_network import decorate_gpu_pod
from tpujob.builders.invocation import TrainerInvocation, build_invocation, config_map_name
from tpujob.builders.launchers import build_launch_command, retryable_exit_codes
from tpujob.builders.scheduling import (
    build_capacity_placement,
    build_jobset_annotations,
    build_jobset_labels,
    build_topology_annotations,
)
from tpujob.builders.trainer_config import build_config_map
from tpujob.builders.wiring import build_process_env, merge_env
from tpujob_plan.hardware import HardwarePlan
from tpujob_plan.slice_plan import TPU_RESOURCE

SIGNAL_EXIT_CODES = range(129, 256)  # 128 + signal number: SIGTERM on preemption is 143
# JobSet's webhook takes rule names of letters, digits and '_,:' only, starting with a letter
# (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, pkg/webhooks/jobset_webhook.go, v0.12.0).
DISRUPTION_RULE = "Disruption"
FATAL_RULE = "FatalExit"
RETRY_RULE = "RetrySlice"
TERMINATION_GRACE_SECONDS = 120  # time to finish an async checkpoint after SIGTERM
# What JobSet v0.12's webhook asks of every replicated job of an InPlaceRestart JobSet
# (pkg/webhooks/jobset_webhook.go): pod failures must not fail the Job (a failed pod is
# replaced on its own, once it has fully failed).
IN_PLACE_BACKOFF_LIMIT = 2**31 - 1


def build_owner_reference(job: dict[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    return {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def build_child_metadata(job: dict[str, Any]) -> dict[str, Any]:
    """Labels and owner reference every child of the job carries (deleting the job deletes them)."""
    return {"labels": {names.LABEL_JOB: job["metadata"]["name"],
                       names.LABEL_MANAGED_BY: names.MANAGED_BY},
            "ownerReferences": [build_owner_reference(job)]}


def build_children(job: dict[str, Any], spec: TpuTrainingJobSpec, plan: HardwarePlan
                   ) -> list[dict[str, Any]]:
    """Every object the operator creates for a job, in creation order."""
    meta = job["metadata"]
    invocation = build_invocation(spec, meta["namespace"], meta["name"])
    children = []
    if invocation.config is not None:
        children.append(build_config_map(config_map_name(meta["name"]), meta["namespace"],
                                         invocation.config, build_child_metadata(job)))
    children.append(build_jobset(job, spec, plan, invocation))
    return children


def _retryable_codes(spec: TpuTrainingJobSpec) -> list[int]:
    codes = set(retryable_exit_codes(spec.trainer, spec.restart_policy))
    if spec.restart_policy.retry_on_signal:
        codes.update(SIGNAL_EXIT_CODES)
    return sorted(codes)


def build_pod_failure_policy(spec: TpuTrainingJobSpec, containers: list[str]) -> dict[str, Any]:
    """A disrupted pod (preemption, node maintenance) or a non-retryable exit fails the Job at
    once, with reason PodFailurePolicy; the JobSet rules then tell the two apart by message."""
    rules: list[dict[str, Any]] = [{"action": "FailJob", "onPodConditions": [
        {"type": "DisruptionTarget", "status": "True"}]}]
    for container in containers:
        rules.append({"action": "FailJob", "onExitCodes": {
            "containerName": container, "operator": "NotIn", "values": _retryable_codes(spec)}})
    return {"rules": rules}


def build_failure_policy(spec: TpuTrainingJobSpec) -> dict[str, Any]:
    """Disruptions restart the JobSet (counted or not, per spec); deterministic exits fail it;
    any other Job failure (a retryable exit code) restarts it, counting towards maxRestarts."""
    policy = spec.restart_policy
    # RestartJob (multi-slice): the failed slice's Job alone restarts, whatever the cause.
    unit = "Job" if policy.strategy == RestartStrategy.RESTART_JOB else "JobSet"
    disruption_action = (f"Restart{unit}" if policy.disruptions_count_towards_max
                         else f"Restart{unit}AndIgnoreMaxRestarts")
    rules = [
        {"name": DISRUPTION_RULE, "action": disruption_action,
         "onJobFailureReasons": ["PodFailurePolicy"],
         "onJobFailureMessagePatterns": [".*DisruptionTarget.*"]},
        {"name": FATAL_RULE, "action": "FailJobSet",
         "onJobFailureReasons": ["PodFailurePolicy"]},
    ]
    if policy.strategy == RestartStrategy.RESTART_JOB:
        # Without it, a retryable exit (no rule matches) would restart the whole JobSet.
        rules.append({"name": RETRY_RULE, "action": "RestartJob"})
    return {
        "maxRestarts": policy.max_restarts,
        # RestartJob is a rule action; the JobSet-wide strategy stays Recreate for it.
        "restartStrategy": ("InPlaceRestart" if policy.strategy == RestartStrategy.IN_PLACE_RESTART
                            else "Recreate"),
        "rules": rules,
    }


def build_in_place_restart_rules(spec: TpuTrainingJobSpec) -> dict[str, Any]:
    """InPlaceRestart: a container that exits with a retryable code starts again in its pod, on
    its node (Kubernetes 1.35's container restart rules, KEP-5307, beta and on by default); any
    other exit fails the pod, and the pod failure policy decides as with Recreate."""
    return {"restartPolicy": "Never", "restartPolicyRules": [
        {"action": "Restart", "exitCodes": {"operator": "In", "values": _retryable_codes(spec)}}]}


def _container(spec: TpuTrainingJobSpec, plan: HardwarePlan, invocation: TrainerInvocation,
               jobset_name: str, name: str, index: int) -> dict[str, Any]:
    resources: dict[str, dict[str, Any]] = {
        "requests": {**spec.resources.requests, **plan.container_resources["requests"]},
        "limits": {**spec.resources.limits, **plan.container_resources["limits"]},
    }
    env = merge_env([*build_process_env(jobset_name, plan, index), *invocation.env],
                    [e.to_dict() for e in spec.env])
    port = names.METRICS_PORT + index  # host networking: one port per process on a host
    container: dict[str, Any] = {
        "name": name,
        "image": spec.image,
        "command": (build_launch_command(invocation.command, spec.trainer.launcher_args, plan,
                                         jobset_name) if plan.is_gpu
                    else list(invocation.command)),
        "env": [*env, *invocation.secret_env],
        "ports": [{"name": f"metrics-{index}" if index else "metrics", "containerPort": port}],
        "resources": resources,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [dict(m) for m in invocation.mounts],
    }
    args = invocation.container_args(port)
    if args:
        container["args"] = args
    if spec.restart_policy.strategy == RestartStrategy.IN_PLACE_RESTART:
        container.update(build_in_place_restart_rules(spec))
    return container


def build_pod_spec(job_name: str, spec: TpuTrainingJobSpec, plan: HardwarePlan,
                   jobset_name: str, namespace: str = "default",
                   invocation: TrainerInvocation | None = None) -> dict[str, Any]:
    containers = names.container_names(plan.containers_per_host)
    invocation = invocation or build_invocation(spec, namespace, job_name)
    capacity = build_capacity_placement(spec.scheduling.capacity)
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        # TPU hosts talk over the host's network; GPU pods get their NICs as pod interfaces.
        "hostNetwork": not plan.is_gpu,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "nodeSelector": {**plan.node_selector, **capacity.node_selector},
        # GPU nodes' taints are tolerated with their network pieces (gpu_network.py).
        "tolerations": [*([] if plan.is_gpu else [{"key": TPU_RESOURCE, "operator": "Exists",
                                                   "effect": "NoSchedule"}]),
                        *capacity.tolerations],
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "containers": [_container(spec, plan, invocation, jobset_name, name, i)
                       for i, name in enumerate(containers)],
        "volumes": [dict(v) for v in invocation.volumes],
    }
    if capacity.node_affinity:
        pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": capacity.node_affinity}]}}}
    if spec.scheduling.priority_class_name:
        pod["priorityClassName"] = spec.scheduling.priority_class_name
    return pod


def build_pod_template(job_name: str, spec: TpuTrainingJobSpec, plan: HardwarePlan,
                       jobset_name: str, namespace: str, labels: dict[str, str],
                       invocation: TrainerInvocation | None = None) -> dict[str, Any]:
    """The pod template of every host: the pod spec, its labels, Kueue's topology annotations
    and, on GPU nodes, the machine type's network pieces."""
    annotations = build_topology_annotations(spec.scheduling.topology, plan.hosts)
    pod = build_pod_spec(job_name, spec, plan, jobset_name, namespace, invocation)
    if plan.is_gpu:
        decorate_gpu_pod(pod, annotations, plan.machine, spec.gpu_networks)
    metadata: dict[str, Any] = {"labels": dict(labels)}
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": pod}


def build_jobset(job: dict[str, Any], spec: TpuTrainingJobSpec, plan: HardwarePlan,
                 invocation: TrainerInvocation | None = None) -> dict[str, Any]:
    """The JobSet for a job: its name is the job's name, and it is owned by the job (the
    trainer's invocation is built from the spec unless the caller built it already)."""
    meta = job["metadata"]
    name = meta["name"]
    child = build_child_metadata(job)
    labels = {**child["labels"], **build_jobset_labels(spec.scheduling)}
    containers = names.container_names(plan.containers_per_host)
    job_template = {
        "metadata": {"labels": dict(child["labels"])},
        "spec": {
            "parallelism": plan.hosts,
            "completions": plan.hosts,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "podFailurePolicy": build_pod_failure_policy(spec, containers),
            **({"backoffLimit": IN_PLACE_BACKOFF_LIMIT, "podReplacementPolicy": "Failed"}
               if spec.restart_policy.strategy == RestartStrategy.IN_PLACE_RESTART else {}),
            "template": build_pod_template(name, spec, plan, name, meta["namespace"],
                                           child["labels"], invocation),
        },
    }
    return {
        "apiVersion": names.JOBSET_API_VERSION,
        "kind": "JobSet",
        "metadata": {
            "name": name, "namespace": meta["namespace"], "labels": labels,
            # A TPU slice is a node pool of its own; GPU nodes of a pool are shared by jobs.
            "annotations": {**({} if plan.is_gpu else
                               {names.EXCLUSIVE_TOPOLOGY: names.NODEPOOL_LABEL}),
                            FINGERPRINT_ANNOTATION: encode_fingerprint(spec),
                            **build_jobset_annotations(spec.scheduling)},
            "ownerReferences": child["ownerReferences"],
        },
        "spec": {
            # Kueue admits a queued JobSet by unsuspending it.
            "suspend": bool(spec.suspend or spec.scheduling.queue_name),
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [names.REPLICATED_JOB]},
            "failurePolicy": build_failure_policy(spec),
            "replicatedJobs": [{"name": names.REPLICATED_JOB, "replicas": plan.slices,
                                "template": job_template}],
        },
    }
