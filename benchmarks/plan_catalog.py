"""How long planning takes: resolve and plan every slice name in the catalog (about 2,000),
with a mesh check, as `tpujob plan` and the operator's validation do.

    .venv/bin/python benchmarks/plan_catalog.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

from tpujob_plan.catalog import all_slice_names
from tpujob_plan.mesh import plan_mesh
from tpujob_plan.slice_plan import plan_slice


def plan_all(names: tuple[str, ...]) -> int:
    planned = 0
    for name in names:
        p = plan_slice(name)
        m = plan_mesh({"fsdp": -1, "tensor": 4} if p.slice_type.devices % 4 == 0 else None, None,
                      devices_per_slice=p.slice_type.devices, physical_dims=p.physical_mesh)
        planned += m.valid or 1
    return planned


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    t0 = time.perf_counter()
    names = all_slice_names()          # the first call builds the catalog
    build = time.perf_counter() - t0
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        plan_all(names)
        times.append(time.perf_counter() - t0)
    print(f"machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"catalog build (first use): {build * 1e3:.1f} ms for {len(names)} names")
    print(f"plan + mesh check of all {len(names)} names: median {statistics.median(times) * 1e3:.1f} ms, "
          f"best {min(times) * 1e3:.1f} ms over {args.repeat} runs")


if __name__ == "__main__":
    main()
