"""The vocabulary the trainer and the operator share, written once: the trainer owns it, the
operator imports it (standard library only, never JAX). Beside it, `env.py` holds the
environment names both sides use.

- Exit reasons and codes, and the termination message's shape (`exits.py` writes it).
- The `/progress` document's fields and the trainer's phases (`telemetry/server.py` serves it).
- The goodput timeline: its categories, the fields of its document (served as `/progress`
  `goodput`, written as an exit record under `<output>/goodput/`), the compact form in the
  termination message, and the summary of an earlier attempt (`previous`)
  (`telemetry/timeline.py`).
- The progress fields a trainer's log lines may fill (the operator's log-based progress).
- The host report line every process prints (its phase, heartbeat and per-step busy and wait
  times: `telemetry/host_report.py`), read by `tpujob.controller.host_reports`.

The operator's readers (`tpujob.controller.trainer_reports`, `tpujob.controller.host_reports`)
and the status's models are tied to these names by tests: a field or a category on one side only
fails them (docs/trainer.md, docs/goodput.md).
"""

from __future__ import annotations

import enum


class Reason(enum.StrEnum):
    COMPLETED = "Completed"
    DATA_EXHAUSTED = "DataExhausted"     # clean stop: data ran out with data.on_exhausted=stop
    PREEMPTED = "Preempted"              # SIGTERM: checkpointed, restart me
    PEER_LOST = "PeerLost"               # another process vanished: restart the set
    CHECKPOINT_ERROR = "CheckpointError"  # a save failed or timed out, or no checkpoint reads back
    CONFIG_ERROR = "ConfigError"
    OUT_OF_MEMORY = "OutOfMemory"
    DATA_ERROR = "DataError"
    NAN_LOSS = "NaNLoss"
    MESH_MISMATCH = "MeshMismatch"       # processes/devices differ from the job's, or bad mesh
    INTERNAL_ERROR = "InternalError"


# Codes follow the JobSet podFailurePolicy convention xpk uses: 42 (and signals, 128+) restart
# the JobSet; every other non-zero code fails it.
RETRY_EXIT_CODE = 42
SIGNAL_EXIT_BASE = 128

EXIT_CODES: dict[Reason, int] = {
    Reason.COMPLETED: 0,
    Reason.DATA_EXHAUSTED: 0,
    Reason.PREEMPTED: RETRY_EXIT_CODE,
    Reason.PEER_LOST: RETRY_EXIT_CODE,
    Reason.CHECKPOINT_ERROR: RETRY_EXIT_CODE,
    Reason.INTERNAL_ERROR: 1,
    Reason.CONFIG_ERROR: 3,
    Reason.OUT_OF_MEMORY: 4,
    Reason.DATA_ERROR: 5,
    Reason.NAN_LOSS: 6,
    Reason.MESH_MISMATCH: 7,
}

# The termination message: one JSON line within the bytes Kubernetes keeps of it.
TERMINATION_MESSAGE_BYTES = 4096
TERMINATION_FIELDS = ("reason", "message", "goodput", "progress")
# Process 0's last `/progress` figures, in its termination message (`progress`): a run's last
# steps may come after the operator's last read of the endpoint.
FINAL_PROGRESS_FIELDS = ("phase", "step", "total_steps", "loss", "step_time_s",
                         "tokens_per_s_per_device", "tflops_per_device", "mfu",
                         "last_checkpoint_step")

# The trainer's phases, as `/progress` `phase` says them; before "training" it computes no step.
PHASES = ("starting", "initializing", "compiling", "training", "done")
NOT_TRAINING_PHASES = ("starting", "initializing", "compiling")

# Every field of `/progress`, always present, null until known.
PROGRESS_FIELDS = (
    "phase", "step", "total_steps", "loss", "aux_loss", "grad_norm", "lr", "step_time_s",
    "tokens_per_s", "tokens_per_s_per_device", "tflops_per_device", "mfu", "last_checkpoint_step",
    "reason", "rss_bytes", "device_bytes_in_use", "device_peak_bytes", "device_bytes_limit",
    "started_at", "updated_at", "goodput",
)
# What a program's log lines can tell (MaxText's step line, JSON lines, a user's regex).
LOG_PROGRESS_FIELDS = ("step", "loss", "step_time_s", "tokens_per_s_per_device",
                       "tflops_per_device")

# The goodput timeline's categories (docs/goodput.md maps them onto ml-goodput-measurement's
# BadputType); "productive" is training, every other one is badput.
GOODPUT_CATEGORIES = ("tpu_initialization", "training_prep", "checkpoint_restore",
                      "program_startup", "data_loading", "checkpoint_save", "productive")
PRODUCTIVE = "productive"
# The step-time figures a timeline carries.
STEP_TIME_FIELDS = ("step_time_median_s", "step_time_max_s", "step_time_max_deviation_pct")
# One process start's timeline document (`/progress` `goodput` and the exit record).
TIMELINE_FIELDS = ("attempt", "process_index", "started_at", "updated_at", "resumed_from_step",
                   "step", "steps", "seconds", *STEP_TIME_FIELDS, "compile_cache",
                   "first_step_at", "end", "ended_at", "previous")
# How a start got its step program: compiled by XLA ("miss"), from JAX's persistent
# compilation cache ("hit"), or the whole compiled step loaded from the job's executable cache.
COMPILE_CACHE_OUTCOMES = ("miss", "hit", "executable")
# The same, compact, in the termination message.
COMPACT_TIMELINE_FIELDS = ("attempt", "process_index", "step", "steps", "resumed_from_step",
                           "seconds", "step_time_median_s", "end")
# An earlier attempt summed up from its processes' exit records (the timeline's `previous`).
RECORD_SUMMARY_FIELDS = ("attempt", "step", "started_at", "ended_at", "end", "seconds", "steps",
                         "step_time_median_s", "processes")
# Where the exit records go, under the job's output.
RECORD_DIR = "goodput"


# The host report: one compact JSON line on every process's stdout (docs/trainer.md), at each
# phase change and every heartbeat interval, carrying the steps completed since the last one.
HOST_REPORT_EVENT = "host_report"   # its `event`: what picks the lines out of a log


class HostPhase(enum.StrEnum):
    """Where a process is, as its host report says (the operator's hang timeouts are per phase:
    `tpujob.controller.hangs.HostPhase` has the same names)."""

    STARTUP = "startup"                        # process start, distributed init, the state made
    COMPILE = "compile"                        # until the first step ends
    STEP = "step"                              # steady steps
    CHECKPOINT_SAVE = "checkpoint_save"        # a save blocking the loop
    CHECKPOINT_RESTORE = "checkpoint_restore"


HOST_REPORT_FIELDS = ("event", "time", "process", "slice", "host", "container", "phase", "step",
                      "moved_at", "interval_s", "waiting", "steps", "dropped")
# One entry of `steps`: [step, busy_s, wait_s, checkpoint]; total_s = busy_s + wait_s.
HOST_STEP_FIELDS = ("step", "busy_s", "wait_s", "checkpoint")
