"""The syntax of the names and locations a job spec is written with: slice names, machine types,
output locations, trainer overrides, Kubernetes names. The CRD's schema carries the same patterns,
so `kubectl apply` refuses what the models refuse."""

from __future__ import annotations

from tpujob.api.base import pattern_string
from tpujob_plan.gpu_catalog import GPU_MACHINES

# Syntax only: a generation prefix and either a size (`v6e-16`) or a topology (`v5p-4x4x4`);
# or a GPU machine type (`a3-megagpu-8g`, or xpk's device type for it).
_TPU_SLICE = r"(v4|v5e|v5litepod|v5p|v6e|tpu7x)-([1-9][0-9]*|[1-9][0-9]*x[1-9][0-9]*(x[1-9][0-9]*)?)"
_GPU_MACHINE = "|".join(alias for m in GPU_MACHINES for alias in m.aliases)
SLICE_PATTERN = rf"^({_TPU_SLICE}|{_GPU_MACHINE})$"
MACHINE_TYPE_PATTERN = r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$"
# A `gs://bucket[/prefix]`, an absolute path, or a relative path without a URL scheme.
OUTPUT_PATTERN = r"^(gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/[^\s]*)?|/[^\s]*|[A-Za-z0-9._-][^\s:]*)$"
OVERRIDE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*=.*$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"

SliceName = pattern_string(
    SLICE_PATTERN, "a slice is <generation>-<size> or <generation>-<topology>, generation one "
    "of v4, v5e, v5litepod, v5p, v6e, tpu7x (e.g. v6e-16, tpu7x-64, v5p-4x4x4), or a GPU "
    f"machine type: {', '.join(m.name for m in GPU_MACHINES)}", max_length=32)
OutputLocation = pattern_string(
    OUTPUT_PATTERN, "use gs://<bucket>/<prefix> (a valid bucket name: lowercase letters, digits, "
    "'-', '_', '.') or a path in the container")
