"""Send every conformance case (tests/conformance/cases.py) to the embedded API server and to
kube-apiserver, and print where their answers differ, without failing: the count of cases, of
cases that differ, and of differing fields, and each difference.

    .venv/bin/python tools/conformance_report.py [--case ID ...] [--json FILE]

It needs the real control plane's programs (`tpujob local build-control-plane`); it starts
etcd and kube-apiserver alone, as the test suite does (tests/conformance/planes.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conformance.cases import CASES  # noqa: E402
from tests.conformance.harness import diff_exchanges, run_case  # noqa: E402
from tests.conformance.planes import embedded_plane, real_plane  # noqa: E402


def _short(value, width: int = 70) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= width else text[:width - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="only these case ids")
    parser.add_argument("--json", type=Path, help="also write the differences here")
    args = parser.parse_args(argv)
    cases = [c for c in CASES if not args.case or c.id in args.case]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="conformance-") as workdir, \
            real_plane(Path(workdir)) as real, embedded_plane() as embedded:
        started = time.monotonic() - t0
        report = {}
        for case in cases:
            report[case.id] = diff_exchanges(run_case(real, case.steps),
                                             run_case(embedded, case.steps))
    elapsed = time.monotonic() - t0
    fields = 0
    for case_id, differences in report.items():
        print(f"{case_id}: {'same' if not differences else f'{len(differences)} differ'}")
        for path, real_value, embedded_value in differences:
            print(f"    {path}\n        real:     {_short(real_value)}\n"
                  f"        embedded: {_short(embedded_value)}")
        fields += len(differences)
    differing = sum(1 for d in report.values() if d)
    print(f"\n{len(report)} cases, {differing} differ, {fields} differing fields "
          f"({started:.1f} s to start both servers, {elapsed:.1f} s in all)")
    if args.json:
        args.json.write_text(json.dumps({k: [list(d) for d in v] for k, v in report.items()},
                                        indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
