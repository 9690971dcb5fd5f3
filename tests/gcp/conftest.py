"""Fixtures for the Compute Engine client tests: a fresh local Compute stand-in per test and a
client pointed at it with short backoffs, so retries cost milliseconds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tpujob.gcp import ComputeClient, RetryPolicy
from tpujob.local.compute_standin import ComputeStandIn

PROJECT = "tpu-project"
REGION = "us-central1"
NAME = "tpu7x-64-2x4x4-placement-policy"
TOPOLOGY = "2x4x4"
FAST_RETRY = RetryPolicy(max_attempts=3, backoff_s=0.001, max_backoff_s=0.01)


def make_client(compute: ComputeStandIn, **kwargs) -> ComputeClient:
    options = {"retry": FAST_RETRY, "poll_interval_s": 0.001, "timeout_s": 5.0}
    options.update(kwargs)
    return ComputeClient(compute.url, **options)


@pytest.fixture
def compute() -> Iterator[ComputeStandIn]:
    with ComputeStandIn() as standin:
        yield standin


@pytest.fixture
def client(compute: ComputeStandIn) -> ComputeClient:
    return make_client(compute)
