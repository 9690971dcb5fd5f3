"""The report the timing benchmarks print: the machine and its load before and after, then one
row per measured interval with its median, minimum and maximum over the runs."""

from __future__ import annotations

import os
import platform
import statistics
import sys


def print_timing_table(runs: list[dict[str, float]], labels: dict[str, str],
                       load_before: tuple[float, ...]) -> None:
    load_after = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, {platform.machine()}, Python "
          f"{platform.python_version()}; load average (1/5/15 min) before "
          f"{'/'.join(f'{x:.1f}' for x in load_before)}, after "
          f"{'/'.join(f'{x:.1f}' for x in load_after)}\n")
    print("| interval | median | min | max |\n|---|---|---|---|")
    for key, label in labels.items():
        values = [r[key] for r in runs]
        print(f"| {label} | {statistics.median(values):.2f} s | {min(values):.2f} s | "
              f"{max(values):.2f} s |")


def print_run(index: int, run: dict[str, float]) -> None:
    """One run's intervals, on stderr, as the runs go."""
    print(f"run {index + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in run.items()),
          file=sys.stderr, flush=True)
