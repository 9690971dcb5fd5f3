"""The peak MFU is measured against: the operator's figure on a TPU, the catalog's by device
kind, a measured matmul on a CPU run alone; none on a CPU standing in for a TPU slice."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tpujob_trainer.telemetry import peak

pytestmark = pytest.mark.unit


@dataclass
class Device:
    platform: str
    device_kind: str


def test_a_tpu_uses_the_operators_peak_else_the_catalogs():
    v6e = Device("tpu", "TPU v6 lite")
    assert peak.peak_tflops_per_device(918.0, v6e, local_devices=4, measure=True) == (
        918.0, "env")
    assert peak.peak_tflops_per_device(None, v6e, local_devices=4, measure=True) == (
        918.0, "catalog")


def test_a_cpu_standing_in_for_a_slice_has_no_peak(monkeypatch):
    # Local mode runs a slice's processes on CPU with the slice's TPU peak in the environment:
    # an MFU against it is noise (0.0011%), so there is none, and nothing is measured.
    monkeypatch.setattr(peak, "measure_matmul_tflops", lambda: pytest.fail("measured"))
    cpu = Device("cpu", "cpu")
    assert peak.peak_tflops_per_device(918.0, cpu, local_devices=1, measure=True) == (
        None, "unknown")


def test_a_cpu_run_alone_measures_its_peak(monkeypatch):
    monkeypatch.setattr(peak, "measure_matmul_tflops", lambda: 0.4)
    cpu = Device("cpu", "cpu")
    assert peak.peak_tflops_per_device(None, cpu, local_devices=2, measure=True) == (
        0.2, "measured")
    assert peak.peak_tflops_per_device(None, cpu, local_devices=2, measure=False) == (
        None, "unknown")
