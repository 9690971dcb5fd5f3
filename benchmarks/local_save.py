"""How long a node-local checkpoint save blocks training (`LocalTier.save`, the `blocking_s` of
the trainer's `local_checkpoint` lines): the quickstart model's state (params and AdamW moments,
7.9 MB, manifests/examples/quickstart.yaml's model) on one CPU device, as one process of the
quickstart holds it, saved `--saves` times to a temporary folder with `--gap-ms` between saves
(the writer's work done in the gap, as training does between saves).

With `--rev REV` the trainer of git revision REV is measured beside this checkout's in the same
run, the two alternating round by round, so a change is compared with its anchor under the same
load.

    .venv/bin/python benchmarks/local_save.py [--saves 200] [--rounds 3] [--rev REV]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from startup_cost import trainer_root

MODEL = {"vocab_size": 512, "d_model": 128, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4,
         "head_dim": 32, "mlp_dim": 512}

ONE_ROUND = r'''
import json, sys, tempfile, time
import jax
from tpujob_trainer.config import TrainerConfig
from tpujob_trainer.mesh import build_mesh
from tpujob_trainer.sharding import activate
from tpujob_trainer.step import step_program
from tpujob_trainer.checkpoint.local import LocalTier
from tpujob_trainer.config.checkpoint import LocalCheckpointConfig

model, saves, gap = json.loads(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1000
cfg = TrainerConfig.model_validate({"model": model, "train": {"global_batch": 16, "seq_len": 128}})
mesh, _ = build_mesh(cfg.mesh, num_slices=1, devices=jax.devices()[:1])
with activate(mesh):
    fns, _ = step_program(cfg, mesh, cfg.model.model_copy(update={"remat": "none"}))
    state = jax.block_until_ready(fns.init())
with tempfile.TemporaryDirectory() as folder:
    tier = LocalTier(LocalCheckpointConfig(directory=folder, every=1, keep=2), output="gs://b/run",
                     process_index=0, process_count=1)
    blocked = []
    for step in range(1, saves + 1):
        tier.save(step, state, {"position": step}, base_step=None)
        blocked.append(tier.last_save_blocking_s)
        time.sleep(gap)
    tier.close()
print(json.dumps({"blocked": blocked, "bytes": sum(a.nbytes for a in jax.tree.leaves(state))}))
'''


def one_round(root: Path, saves: int, gap_ms: float) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", ONE_ROUND, json.dumps(MODEL), str(saves),
                           str(gap_ms)], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--saves", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rev", help="also measure this git revision's trainer, alternating")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        arms = {"this checkout": trainer_root(None, Path(tmp))}
        if args.rev:
            arms[args.rev] = trainer_root(args.rev, Path(tmp))
        medians: dict[str, list[float]] = {name: [] for name in arms}
        nbytes = 0
        for r in range(args.rounds):
            order = list(arms) if r % 2 == 0 else list(reversed(arms))
            for name in order:
                got = one_round(arms[name], args.saves, args.gap_ms)
                nbytes = got["bytes"]
                medians[name].append(1000 * statistics.median(got["blocked"][1:]))
    load = os.getloadavg()
    print(f"state {nbytes / 1e6:.1f} MB, {args.saves} saves a round, {args.gap_ms:g} ms apart; "
          f"1-minute load after: {load[0]:.1f}")
    for name, values in medians.items():
        rounds = ", ".join(f"{v:.2f}" for v in values)
        print(f"{name}: median blocking {statistics.median(values):.2f} ms (rounds: {rounds})")


if __name__ == "__main__":
    main()
