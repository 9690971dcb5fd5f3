"""How fast a failure on one process ends the whole job: the time from the failing process's
exit to its peer's exit, on the trainer's real CLI with 2 processes x 4 CPU devices wired with
jax.distributed on 127.0.0.1.

The same run as tests/trainer/test_multidevice.py's failure test (which checks the signal, both
exits and their causes, not the time): unshuffled token data whose batch 3 holds, in process 1's
rows, a token id the model cannot take. Process 1 fails alone (DataError) after two steps while
process 0 waits for it in step 3's collective; process 0 must stop with PeerLost. Without the
failure being passed on, process 0 would wait for JAX's heartbeat timeout (100 s) and process 1
in JAX's shutdown handshake (5 minutes).

    .venv/bin/python benchmarks/peer_failure.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from timing_table import print_run, print_timing_table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.trainer import helpers  # noqa: E402

POLL_S = 0.01
HANG_GUARD_S = 600.0
LABELS = {
    "failed": "start -> process 1 fails (its DataError written)",
    "peer": "process 1 fails -> process 0 exits (PeerLost)",
    "self": "process 1 fails -> process 1 exits",
}


def measure(tmp: Path) -> dict[str, float]:
    tokens = (np.arange(24 * 64 + 1) % 251).astype(np.int32)
    tokens[21 * 64 + 10] = 300  # batch 3, process 1's rows
    np.save(tmp / "tokens.npy", tokens)
    args = ["--config", str(helpers.TINY_YAML), "train.steps=10", "metrics.measure_peak=false",
            "metrics.port=null", "mesh.ici={data: 2, fsdp: 2, tensor: 2}",
            "checkpoint.enabled=false", "data.kind=tokens", f"data.path={tmp / 'tokens.npy'}",
            "data.shuffle=false", f"output={tmp}/out"]
    port = helpers.free_port()
    start = time.time()
    procs = [subprocess.Popen(helpers.cli_command(*args), cwd=tmp, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL,
                              env=helpers.clean_env(**helpers.process_env(pid, port),
                                            TPUJOB_TERMINATION_LOG=str(tmp / f"term{pid}")))
             for pid in range(2)]
    ended: dict[int, float] = {}
    try:
        while len(ended) < 2:
            for pid, p in enumerate(procs):
                if pid not in ended and p.poll() is not None:
                    ended[pid] = time.time()
            if time.time() - start > HANG_GUARD_S:
                raise TimeoutError(f"the processes did not both exit within {HANG_GUARD_S:.0f} s")
            time.sleep(POLL_S)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    reasons = [json.loads((tmp / f"term{pid}").read_text())["reason"] for pid in range(2)]
    if reasons != ["PeerLost", "DataError"]:
        raise RuntimeError(f"unexpected causes (process 0, process 1): {reasons}")
    # The moment process 1 failed: when it wrote its termination message, before telling its
    # peer and leaving.
    failed = (tmp / "term1").stat().st_mtime
    return {"failed": failed - start, "peer": ended[0] - failed, "self": ended[1] - failed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    load_before = os.getloadavg()
    runs = []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="tpujob-bench-") as tmp:
            runs.append(measure(Path(tmp)))
        print_run(i, runs[-1])
    print_timing_table(runs, LABELS, load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
