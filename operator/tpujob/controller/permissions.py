"""Every Kubernetes API call the operator makes, as RBAC rules: the Helm chart grants exactly
these, and a test records the requests a running operator sends and checks they are covered."""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "tpujob.dev"
JOBSET_GROUP = "jobset.x-k8s.io"


@dataclass(frozen=True)
class Rule:
    """One RBAC PolicyRule: an API group, one resource (or resource/subresource) and its verbs."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    why: str


# Calls inside the namespaces the operator watches (a Role per namespace, or a ClusterRole).
NAMESPACED: tuple[Rule, ...] = (
    Rule(GROUP, "tputrainingjobs", ("list", "watch"), "follow jobs (kopf keeps no state on them)"),
    Rule(GROUP, "tputrainingjobs/status", ("patch",), "write status"),
    Rule(JOBSET_GROUP, "jobsets", ("get", "list", "watch", "create", "patch", "delete"),
         "create the JobSet (get: when it already exists), follow its status, suspend and "
         "resume it, re-create it after a spec change made while suspended"),
    Rule("batch", "jobs", ("list", "delete"), "restart a stalled run (JobSet re-creates them)"),
    Rule("", "pods", ("list",), "termination messages, restarts and the process-0 metrics address"),
    Rule("", "pods/log", ("get",), "progress from process 0's log (spec.trainer.progress.source "
                                   "log)"),
    Rule("", "configmaps", ("get", "create", "patch"),
         "the trainer config (get and patch: when it already exists)"),
    Rule("", "events", ("create",), "Events on phase changes and refusals"),
    Rule("kueue.x-k8s.io", "workloads", ("list", "watch"),
         "a queued job's place in Kueue (status.queue): the Workload Kueue made for its JobSet"),
)

# Calls only a cluster-wide operator makes (kopf's resource and namespace scanning).
CLUSTER_ONLY: tuple[Rule, ...] = (
    Rule("apiextensions.k8s.io", "customresourcedefinitions", ("list", "watch"),
         "kopf notices when the CRDs it serves appear"),
)


def allowed(group: str, resource: str, verb: str, *, cluster_wide: bool = True) -> bool:
    """Whether the operator's rules grant `verb` on `group`/`resource` (resource may be
    `plural/subresource`)."""
    rules = NAMESPACED + (CLUSTER_ONLY if cluster_wide else ())
    return any(r.group == group and r.resource == resource and verb in r.verbs for r in rules)
