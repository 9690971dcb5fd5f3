"""Operator settings for workload policies: whether tpujob creates them, in which project and
region, and how it reaches Compute Engine. Off by default: clusters whose tpu7x node pools were
made with their policy (xpk, gcloud, Terraform) need nothing from the operator."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from tpujob.gcp.auth import AdcAuth, NoAuth
from tpujob.gcp.compute import DEFAULT_BASE_URL, ComputeClient, RetryPolicy

AUTH_MODES = ("adc", "none")
_PROJECT = re.compile(r"^(?:[a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_REGION = re.compile(r"^[a-z]+(?:-[a-z]+)+[0-9]+$")
_ZONE = re.compile(r"^(?P<region>[a-z]+(?:-[a-z]+)+[0-9]+)-[a-z]$")


class WorkloadPolicySettingsError(ValueError):
    """Settings that cannot work; `field` names the setting (and its flag in the message)."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class WorkloadPolicySettings:
    """Whether and where the operator ensures workload policies for tpu7x multi-host slices.

    `auth`: "adc" (Application Default Credentials: Workload Identity on GKE) or "none" (only
    for a local stand-in at `base_url`).
    """

    enabled: bool = False
    project: str | None = None
    region: str | None = None
    base_url: str = DEFAULT_BASE_URL
    auth: str = "adc"
    timeout_s: float = 30.0
    operation_timeout_s: float = 300.0
    max_attempts: int = 5

    def __post_init__(self) -> None:
        if self.project is not None and not _PROJECT.match(self.project):
            raise WorkloadPolicySettingsError(
                f"--gcp-project {self.project!r} is not a Google Cloud project id (6-30 "
                "lowercase letters, digits and '-', starting with a letter)", field="project")
        if self.region is not None:
            zone = _ZONE.match(self.region)
            if zone:
                raise WorkloadPolicySettingsError(
                    f"--gcp-region {self.region!r} is a zone; workload policies are regional: "
                    f"use --gcp-region {zone.group('region')}", field="region")
            if not _REGION.match(self.region):
                raise WorkloadPolicySettingsError(
                    f"--gcp-region {self.region!r} is not a Compute Engine region like "
                    "us-central1", field="region")
        if self.enabled and not self.project:
            raise WorkloadPolicySettingsError(
                "--workload-policies needs the project to create them in: add "
                "--gcp-project PROJECT", field="project")
        if self.enabled and not self.region:
            raise WorkloadPolicySettingsError(
                "--workload-policies needs the region of the cluster's TPU node pools: add "
                "--gcp-region REGION (e.g. us-central1)", field="region")
        if self.auth not in AUTH_MODES:
            raise WorkloadPolicySettingsError(
                f"auth must be one of {', '.join(AUTH_MODES)}, got {self.auth!r}",
                field="auth")
        if not self.base_url.startswith(("http://", "https://")):
            raise WorkloadPolicySettingsError(
                f"--compute-url {self.base_url!r} must start with http:// or https://",
                field="base_url")
        if self.auth == "none" and self.base_url.rstrip("/") == DEFAULT_BASE_URL:
            raise WorkloadPolicySettingsError(
                "auth 'none' only works with a local Compute stand-in: set --compute-url",
                field="auth")
        if self.auth == "adc" and self.base_url.startswith("http://"):
            raise WorkloadPolicySettingsError(
                f"--compute-url {self.base_url!r} is plain HTTP: access tokens are only sent "
                "over https://", field="base_url")
        if self.timeout_s <= 0 or self.operation_timeout_s <= 0:
            raise WorkloadPolicySettingsError("timeouts must be positive", field="timeout_s")
        if self.max_attempts < 1:
            raise WorkloadPolicySettingsError("max_attempts must be at least 1",
                                              field="max_attempts")

    def build_client(self) -> ComputeClient:
        """The Compute client these settings describe (reads credentials for auth 'adc')."""
        auth = AdcAuth.from_environment() if self.auth == "adc" else NoAuth()
        return ComputeClient(self.base_url, auth=auth, timeout_s=self.timeout_s,
                             retry=RetryPolicy(max_attempts=self.max_attempts))

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """The command-line flags for these settings (for `tpujob operator`)."""
        group = parser.add_argument_group(
            "workload policies", "Create the Compute Engine workload policy tpu7x multi-host "
            "slices need (off by default: node pools usually come with theirs)")
        group.add_argument("--workload-policies", action=argparse.BooleanOptionalAction,
                           default=False, help="ensure workload policies exist (default: off)")
        group.add_argument("--gcp-project", metavar="PROJECT",
                           help="project of the cluster's TPU node pools")
        group.add_argument("--gcp-region", metavar="REGION",
                           help="region of the cluster's TPU node pools, e.g. us-central1")
        group.add_argument("--compute-url", metavar="URL", default=DEFAULT_BASE_URL,
                           help="Compute Engine API base URL (default: %(default)s)")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> WorkloadPolicySettings:
        """Settings from the flags `add_arguments` defines. A plain-HTTP --compute-url (a
        local stand-in) is used without credentials; https URLs get Application Default
        Credentials."""
        base_url = args.compute_url or DEFAULT_BASE_URL
        auth = "none" if base_url.startswith("http://") else "adc"
        return cls(enabled=args.workload_policies, project=args.gcp_project,
                   region=args.gcp_region, base_url=base_url, auth=auth)
