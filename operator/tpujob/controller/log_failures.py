"""Why a program that writes no termination message of its own failed, read from the end of its
log (what Kubernetes puts in the termination message under `FallbackToLogsOnError`: the last
lines of the container's log): a GPU out of memory, a collective that timed out (NCCL's
watchdog, a rendezvous that never completed), a GPU hardware fault (an Xid, an uncorrectable
ECC error, a GPU fallen off the bus) or a peer that stopped. Pure: text in, a reason and the
line that says so out.

The patterns are the messages PyTorch, NCCL, JAX/XLA and the NVIDIA driver print
(torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp's watchdog message, c10/cuda's
`CUDA out of memory`, XLA's `RESOURCE_EXHAUSTED: Out of memory`, the driver's `NVRM: Xid`).
The first match in this order wins: a hardware fault explains the timeouts of its peers, and
memory exhaustion is a cause where a timeout is often a consequence.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from tpujob.api.status import FailureReason

_HARDWARE = re.compile(
    r"\bXid\b(?:\s*\([^)\n]*\))?:?\s*(?P<xid>\d+)|"
    r"uncorrectable ECC error|GPU has fallen off the bus|"
    r"CUDA error: (?:unspecified launch failure|an illegal memory access was encountered)|"
    r"NVLink error|CUDA_ERROR_ECC_UNCORRECTABLE", re.IGNORECASE)
_OUT_OF_MEMORY = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|"
    r"CUBLAS_STATUS_ALLOC_FAILED|RESOURCE_EXHAUSTED: Out of memory|"
    r"NCCL error.*(?:out of memory|Cuda failure 2)", re.IGNORECASE)
_COLLECTIVE_TIMEOUT = re.compile(
    r"Watchdog caught collective operation timeout|"
    r"ran for \d+ milliseconds before timing out|"
    r"NCCL (?:communicator was aborted|timeout)|ncclRemoteError|"
    r"(?:rendezvous|DistStoreError|store).{0,80}(?:timed out|timeout)|"
    r"Socket Timeout|Connection timed out.*(?:nccl|gloo|c10d)", re.IGNORECASE)
# A peer that stopped: gloo's tcp pair ("Connection closed by peer ... typically caused by a
# remote worker crashing"), NCCL's remote error, c10d's network error. A consequence of the
# peer's own failure, which explains it (observe.explain_failure ranks it last).
_PEER_LOST = re.compile(
    r"Connection (?:closed|reset) by peer.{0,80}remote worker|"
    r"gloo/transport/tcp/\S*\] Connection (?:closed|reset) by peer|"
    r"remote process exited or there was a network error|DistNetworkError", re.IGNORECASE)
PEER_LOST_SUMMARY = "lost a peer (another process or node stopped)"
_ORDER = ((_HARDWARE, FailureReason.HARDWARE_ERROR, "GPU hardware fault"),
          (_OUT_OF_MEMORY, FailureReason.OUT_OF_MEMORY, "out of GPU memory"),
          (_COLLECTIVE_TIMEOUT, FailureReason.COLLECTIVE_TIMEOUT, "collective timed out"),
          (_PEER_LOST, FailureReason.PREEMPTED, PEER_LOST_SUMMARY))
MAX_LINE = 300


class LogFailure(NamedTuple):
    reason: FailureReason
    summary: str   # e.g. "GPU hardware fault (Xid 79)"
    line: str      # the log line that says so, cut to MAX_LINE characters

    @property
    def lost_peer(self) -> bool:
        return self.summary == PEER_LOST_SUMMARY


def read_log_failure(text: str) -> LogFailure | None:
    """The cause a log's tail names, or None when it names none of these."""
    lines = text.splitlines()
    for pattern, reason, summary in _ORDER:
        for line in reversed(lines):
            found = pattern.search(line)
            if found is None:
                continue
            xid = found.groupdict().get("xid")
            detail = f"{summary} (Xid {xid})" if xid else summary
            return LogFailure(reason, detail, line.strip()[:MAX_LINE])
    return None
