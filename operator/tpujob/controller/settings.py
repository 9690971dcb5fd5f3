"""The operator's settings: what it watches, how often it looks, where it serves health, metrics
and the admission webhook. One frozen dataclass, filled from the command line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpujob.gcp.settings import WorkloadPolicySettings


@dataclass(frozen=True)
class OperatorSettings:
    namespaces: tuple[str, ...] = ()          # empty: every namespace
    http_host: str = "0.0.0.0"
    http_port: int | None = 8080              # /healthz, /readyz, /metrics; None: off
    webhook: bool = False
    webhook_host: str = "0.0.0.0"
    webhook_port: int = 9443
    webhook_cert_dir: str = "/etc/tpujob/webhook"   # tls.crt and tls.key
    workload_policies: WorkloadPolicySettings | None = None   # when policies are managed
    progress_interval_s: float = 15.0         # how often a running job's progress is read
    resync_interval_s: float = 60.0           # every job is looked at again at least this often
    # Jobs and JobSets are listed again this often (0: never), to catch what no watch reported:
    # a watch that could not resume after a gap longer than the server's history lists again,
    # and a list reports no deletions.
    relist_interval_s: float = 300.0
    retry_delays_s: tuple[float, ...] = (1, 2, 5, 10, 30, 60)
    workers: int = 4                          # jobs reconciled at the same time
    progress_timeout_s: float = 2.0
    # How often every trainer container's log is read for its host reports (slow hosts,
    # docs/operator.md#slow-hosts); 0: never.
    host_report_interval_s: float = 30.0
    stacks_timeout_s: float = 10.0           # how long a process has to answer for its stacks
    # Watches end and restart on this schedule, so a silently dead connection is noticed
    # (otherwise handlers can stop firing with no error at all).
    watch_server_timeout_s: int = 300
    watch_client_timeout_s: int = 330
    watch_connect_timeout_s: int = 30
    log_format: str = "text"                  # text or json
    # Serve the admission webhook over plain HTTP, with no certificate (tests only: the API
    # server calls admission webhooks over HTTPS).
    webhook_insecure: bool = False

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces
