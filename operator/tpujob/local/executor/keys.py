"""The well-known names the emulated controllers write and read: JobSet and Job labels,
annotations and finalizers, condition types, and the reasons and messages the real controllers
put in conditions (kubernetes-sigs/jobset v0.12, Kubernetes batch/v1 Job controller, kubelet)."""

from __future__ import annotations

from enum import StrEnum

# -- JobSet (jobset.x-k8s.io/v1alpha2) ---------------------------------------------------------

JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_VERSION = "v1alpha2"
JOBSET_API_VERSION = f"{JOBSET_GROUP}/{JOBSET_VERSION}"
JOBSET_CONTROLLER_NAME = "jobset.sigs.k8s.io/jobset-controller"  # the managedBy value it owns

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
GLOBAL_REPLICAS = "jobset.sigs.k8s.io/global-replicas"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
# The Job's own restart count under RestartJob (v0.12, RestartJob feature gate on).
JOB_RESTART_ATTEMPT = "jobset.sigs.k8s.io/job-restart-attempt"
GROUP_NAME = "jobset.sigs.k8s.io/group-name"
GROUP_REPLICAS = "jobset.sigs.k8s.io/group-replicas"
JOB_GROUP_INDEX = "jobset.sigs.k8s.io/job-group-index"
COORDINATOR = "jobset.sigs.k8s.io/coordinator"
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR_STRATEGY = "alpha.jobset.sigs.k8s.io/node-selector"
NAMESPACED_JOB = "alpha.jobset.sigs.k8s.io/namespaced-job"
NO_SCHEDULE_TAINT = "alpha.jobset.sigs.k8s.io/no-schedule"


class JobSetCondition(StrEnum):
    COMPLETED = "Completed"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    STARTUP_POLICY_IN_PROGRESS = "StartupPolicyInProgress"
    STARTUP_POLICY_COMPLETED = "StartupPolicyCompleted"


class FailurePolicyAction(StrEnum):
    FAIL_JOBSET = "FailJobSet"
    RESTART_JOBSET = "RestartJobSet"
    RESTART_JOBSET_IGNORE_MAX = "RestartJobSetAndIgnoreMaxRestarts"
    RESTART_JOB = "RestartJob"
    RESTART_JOB_IGNORE_MAX = "RestartJobAndIgnoreMaxRestarts"


# Condition and event reasons/messages, as the JobSet controller's constants spell them.
ALL_JOBS_COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
FAILED_JOBS = ("FailedJobs", "jobset failed due to one or more job failures")
REACHED_MAX_RESTARTS = ("ReachedMaxRestarts", "jobset failed due to reaching max number of restarts")
FAIL_JOBSET_ACTION = ("FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action")
RESTART_JOBSET_ACTION = ("RestartJobSetFailurePolicyAction",
                         "applying RestartJobSet failure policy action")
RESTART_JOBSET_IGNORE_MAX_ACTION = (
    "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction",
    "applying RestartJobSetAndIgnoreMaxRestarts failure policy action")
RESTART_JOB_ACTION = ("RestartJobFailurePolicyAction", "applying RestartJob failure policy action")
RESTART_JOB_IGNORE_MAX_ACTION = (
    "RestartJobAndIgnoreMaxRestartsFailurePolicyAction",
    "applying RestartJobAndIgnoreMaxRestarts failure policy action")
JOBSET_SUSPENDED = ("SuspendedJobs", "jobset is suspended")
JOBSET_RESUMED = ("ResumeJobs", "jobset is resumed")
STARTUP_IN_PROGRESS = ("InOrderStartupPolicyInProgress", "in order startup policy is in progress")
STARTUP_COMPLETED = ("InOrderStartupPolicyCompleted", "in order startup policy has completed")

# -- batch/v1 Job --------------------------------------------------------------------------------

JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # annotation and label
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_JOB_NAME_LABEL = "job-name"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
MAX_GENERATED_NAME = 58  # a generated name is the prefix plus 5 random characters, at most 63


class JobCondition(StrEnum):
    COMPLETE = "Complete"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    FAILURE_TARGET = "FailureTarget"
    SUCCESS_CRITERIA_MET = "SuccessCriteriaMet"


BACKOFF_LIMIT_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE_EXCEEDED = ("DeadlineExceeded", "Job was active longer than specified deadline")
COMPLETIONS_REACHED = ("CompletionsReached", "Reached expected number of succeeded pods")
POD_FAILURE_POLICY = "PodFailurePolicy"
JOB_SUSPENDED = ("JobSuspended", "Job suspended")
JOB_RESUMED = ("JobResumed", "Job resumed")

# -- Pods ----------------------------------------------------------------------------------------

DISRUPTION_TARGET = "DisruptionTarget"
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
DEFAULT_GRACE_SECONDS = 30
TERMINATION_MESSAGE_MAX_BYTES = 4096
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048


class PodPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
