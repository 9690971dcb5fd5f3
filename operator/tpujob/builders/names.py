"""Names, labels and well-known keys shared by the builders and the operator's observers."""

from __future__ import annotations

LABEL_JOB = "tpujob.dev/job-name"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "tpujob"
REPLICATED_JOB = "slice"
TRAINER_CONTAINER = "trainer"
METRICS_PORT = 9431
COORDINATOR_PORT = 8482  # JAX's coordinator port on GKE TPU (jax/_src/clusters/cloud_tpu_cluster.py)
MEGASCALE_PORT = 8081  # the TPU runtime's DCN port, as Ray's TPU utilities pass it
TPU_PROCESS_PORT = 8476  # libtpu's first per-process port where a host runs several processes

JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_LABEL_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSET_LABEL_RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
JOB_COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Kueue v0.17.0: pkg/controller/constants/constants.go (WorkloadPriorityClassLabel,
# ProvReqAnnotationPrefix) and apis/kueue/v1beta2/topology_types.go (the TAS annotations).
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# Kueue's maximum execution time (pkg/controller/constants/constants.go, MaxExecTimeSecondsLabel).
KUEUE_MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
KUEUE_PROVREQ_PREFIX = "provreq.kueue.x-k8s.io/"
TAS_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
TAS_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
TAS_SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
TAS_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
# GKE node labels for the kind of capacity a node runs on (see docs/queueing.md for sources).
GKE_SPOT_LABEL = "cloud.google.com/gke-spot"
GKE_FLEX_START_LABEL = "cloud.google.com/gke-flex-start"
GKE_QUEUED_LABEL = "cloud.google.com/gke-queued"
GKE_RESERVATION_NAME = "cloud.google.com/reservation-name"
GKE_RESERVATION_AFFINITY = "cloud.google.com/reservation-affinity"
GKE_RESERVATION_PROJECT = "cloud.google.com/reservation-project"
GKE_RESERVATION_BLOCKS = "cloud.google.com/reservation-blocks"
GKE_RESERVATION_SUBBLOCKS = "cloud.google.com/reservation-subblocks"
CONFIG_MOUNT = "/etc/tpujob"
CONFIG_FILE = "trainer.yaml"
LOCAL_CHECKPOINT_MOUNT = "/tpujob/local-checkpoints"  # spec.localCheckpoints, in every container
LOCAL_CHECKPOINT_ENV = "TPUJOB_LOCAL_CHECKPOINT_DIR"  # its path, for any trainer


def container_names(containers_per_host: int) -> list[str]:
    """`trainer`, or `trainer-1`, `trainer-2` where a host runs one process per NUMA node."""
    if containers_per_host == 1:
        return [TRAINER_CONTAINER]
    return [f"{TRAINER_CONTAINER}-{i + 1}" for i in range(containers_per_host)]


def host_fqdn(jobset: str, slice_index: int, host_index: int) -> str:
    """DNS name JobSet gives a pod: `<jobset>-<replicated job>-<job index>-<pod index>.<subdomain>`
    (the subdomain defaults to the JobSet name)."""
    return f"{jobset}-{REPLICATED_JOB}-{slice_index}-{host_index}.{jobset}"
