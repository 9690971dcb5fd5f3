{{/*
Generated from operator/tpujob/controller/permissions.py by `python -m charts.generate`.
Do not edit: change permissions.py and run the command again.
*/}}

{{/* Calls inside the watched namespaces: a Role per namespace, or the ClusterRole. */}}
{{- define "tpujob.namespacedRules" -}}
# follow jobs (kopf keeps no state on them)
- apiGroups: ["tpujob.dev"]
  resources: ["tputrainingjobs"]
  verbs: ["list", "watch"]
# write status
- apiGroups: ["tpujob.dev"]
  resources: ["tputrainingjobs/status"]
  verbs: ["patch"]
# create the JobSet (get: when it already exists), follow its status, suspend and resume it, re-create it after a spec change made while suspended
- apiGroups: ["jobset.x-k8s.io"]
  resources: ["jobsets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# restart a stalled run (JobSet re-creates them)
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["list", "delete"]
# termination messages, restarts and the process-0 metrics address
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
# progress from process 0's log (spec.trainer.progress.source log)
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
# the trainer config (get and patch: when it already exists)
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "patch"]
# Events on phase changes and refusals
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# a queued job's place in Kueue (status.queue): the Workload Kueue made for its JobSet
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["list", "watch"]
{{- end }}

{{/* Calls only a cluster-wide operator makes. */}}
{{- define "tpujob.clusterOnlyRules" -}}
# kopf notices when the CRDs it serves appear
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
{{- end }}
