"""A small data-parallel PyTorch training run, as torchrun starts it on every node of a GPU job:
one process per GPU (here per CPU process, over gloo), a fixed dataset sharded by rank,
DistributedDataParallel, a checkpoint every few steps that the run resumes from after a
restart. Rank 0 prints one JSON line per step (`step`, `loss`, `total_steps`,
`last_checkpoint_step`, `world_size`, `node_rank`, `rank`), which the operator reads with
`progress: {source: log, format: jsonl}`.

    torchrun ... torch_ddp_train.py --steps 40 --every 10 --ckpt DIR [--step-seconds S]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def _latest(ckpt: Path) -> Path | None:
    saved = sorted(ckpt.glob("step-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
    return saved[-1] if saved else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--every", type=int, required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--step-seconds", type=float, default=0.0,
                    help="pace each step, as a real model's compute would")
    args = ap.parse_args()

    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # The world torchrun was told must be the one the job asked for.
    assert world == int(os.environ["WORLD_SIZE"]), (world, os.environ["WORLD_SIZE"])
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ckpt = Path(args.ckpt)
    ckpt.mkdir(parents=True, exist_ok=True)
    start = 0
    latest = _latest(ckpt)
    if latest is not None:
        state = torch.load(latest)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    saved = start if latest is not None else None
    gen = torch.Generator().manual_seed(1234)
    xs = torch.randn(world, 8, 16, generator=gen)  # each rank's own shard, every step
    ys = xs.sum(dim=-1, keepdim=True).sin()
    for step in range(start + 1, args.steps + 1):
        loss = torch.nn.functional.mse_loss(model(xs[rank]), ys[rank])
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        if args.step_seconds:
            time.sleep(args.step_seconds)
        if step % args.every == 0 or step == args.steps:
            if rank == 0:
                tmp = ckpt / f".step-{step}.pt"
                torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                            "step": step}, tmp)
                tmp.rename(ckpt / f"step-{step}.pt")
            dist.barrier()
            saved = step
        if rank == 0:
            print(json.dumps({"step": step, "loss": round(mean.item() / world, 6),
                              "total_steps": args.steps, "last_checkpoint_step": saved,
                              "world_size": world, "node_rank": int(os.environ["GROUP_RANK"]),
                              "rank": rank, "resumed_from": start}), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
