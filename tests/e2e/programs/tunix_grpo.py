"""GRPO with Tunix (`google-tunix`) that knows nothing of tpujob and downloads nothing.

    python tunix_grpo.py [--steps 80] [--checkpoint-dir DIR]

A tiny randomly initialised Qwen3 (Tunix's own model code) learns, by GRPO with Tunix's
RLCluster and GRPOLearner and its plain JAX sampler, to answer short prompts with the letter
"a": the reward of a completion is its share of "a" characters. The tokenizer (one id per
character), the prompts and the reward are written here, so nothing is fetched at run time.

`jax.distributed.initialize()` takes no arguments: on a cluster (or in tpujob's local mode) JAX
finds the other processes from the environment. Process 0 prints one JSON line per training
step (`step`, `loss`, `reward`, `step_time_s`, `total_steps`); every process prints, at the
end, one `{"event": "done", ...}` line with the mean reward of each step it ran. With a
checkpoint directory (`--checkpoint-dir` or `$TUNIX_CHECKPOINT_DIR`), Tunix saves there every
`--checkpoint-every` steps (and after its first and last) and a rerun resumes from the newest
checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

import jax

CHARS = "abcdefghijklmnopqrstuvwxyz0123456789 +=?."
PAD, BOS, EOS = 0, 1, 2
MAX_PROMPT, MAX_NEW = 8, 12
PROMPTS_PER_STEP, GENERATIONS = 4, 4


class CharTokenizer:
    """One id per character of CHARS, after pad, bos and eos (the interface Tunix asks for)."""

    def __init__(self) -> None:
        self._ids = {c: i + 3 for i, c in enumerate(CHARS)}
        self._chars = {i: c for c, i in self._ids.items()}

    def encode(self, text: str, **_) -> list[int]:
        return [self._ids[c] for c in text if c in self._ids]

    def decode(self, ids, **_) -> str:
        return "".join(self._chars.get(int(i), "") for i in ids)

    def bos_id(self) -> int:
        return BOS

    def eos_id(self) -> int:
        return EOS

    def pad_id(self) -> int:
        return PAD

    @property
    def vocab_size(self) -> int:
        return 3 + len(CHARS)


def share_of_a(prompts, completions, **_) -> list[float]:
    """The reward: the share of "a" among the completion's possible characters."""
    del prompts
    return [c.count("a") / MAX_NEW for c in completions]


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=int(os.environ.get("TUNIX_STEPS", "80")))
    ap.add_argument("--checkpoint-dir", default=os.environ.get("TUNIX_CHECKPOINT_DIR") or None)
    ap.add_argument("--checkpoint-every", type=int, default=20)
    ap.add_argument("--lr", type=float, default=1e-2)
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    jax.distributed.initialize()

    # Tunix and its dependencies import after JAX knows its processes.
    import numpy as np
    import optax
    import orbax.checkpoint as ocp
    from grain import python as grain
    from tunix.models import dummy_model_creator
    from tunix.models.qwen3 import model as qwen3
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.grpo import grpo_learner
    from tunix.rl.rollout import base_rollout
    from tunix.sft import hooks

    first = jax.process_index() == 0
    mesh = jax.make_mesh((jax.device_count(), 1), ("fsdp", "tp"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)
    config = qwen3.ModelConfig(
        num_layers=2, vocab_size=64, embed_dim=64, hidden_dim=128, num_heads=4, head_dim=16,
        num_kv_heads=2, rope_theta=10_000, norm_eps=1e-6, use_tied_embedding=False)
    # The policy and the KL reference start from the same random weights, sharded over `mesh`.
    actor, reference = (dummy_model_creator.create_dummy_model(
        qwen3.Qwen3, config, mesh=mesh, random_seed=0) for _ in range(2))

    # Additions "a+b=" as prompts; their answers are ignored by the reward.
    pairs = np.random.default_rng(0).integers(0, 10, size=(64, 2))
    prompts = [f"{a}+{b}=" for a, b in pairs]
    data = (grain.MapDataset.source(prompts).repeat(1000).batch(PROMPTS_PER_STEP)
            .map(lambda batch: {"prompts": list(batch)}))

    cluster = rl_cluster_lib.RLCluster(
        actor=actor, reference=reference, tokenizer=CharTokenizer(),
        cluster_config=rl_cluster_lib.ClusterConfig(
            role_to_mesh={role: mesh for role in (rl_cluster_lib.Role.ACTOR,
                                                  rl_cluster_lib.Role.REFERENCE,
                                                  rl_cluster_lib.Role.ROLLOUT)},
            rollout_engine="vanilla",
            offload_to_cpu=False,
            training_config=rl_cluster_lib.RLTrainingConfig(
                actor_optimizer=optax.adam(args.lr),
                eval_every_n_steps=10**9,
                max_steps=args.steps,
                checkpoint_root_directory=args.checkpoint_dir,
                checkpointing_options=ocp.CheckpointManagerOptions(
                    save_interval_steps=args.checkpoint_every, max_to_keep=2)),
            rollout_config=base_rollout.RolloutConfig(
                max_tokens_to_generate=MAX_NEW, max_prompt_length=MAX_PROMPT,
                kv_cache_size=MAX_PROMPT + MAX_NEW + 12, temperature=1.0, top_p=1.0)))

    # Tunix's sampler draws with PRNGKey(seed or 0) on every call: without a seed of its own
    # each step would sample with the same noise. Each rollout gets the number of steps
    # trained so far (restored on resume) as its seed.
    rollout = cluster.rollout
    generate = rollout.generate

    def generate_with_own_seed(prompts, rollout_config, **kwargs):
        seed = int(cluster.actor_trainer.train_steps)
        return generate(prompts, dataclasses.replace(rollout_config, seed=seed), **kwargs)

    rollout.generate = generate_with_own_seed

    # Tunix reports the rollout's rewards (once per step, in order) and the actor's loss (per
    # train step, one step late) through two different channels; a step's line is written
    # when its loss arrives, by then its reward is known. Rewards are counted by arrival:
    # Tunix's own global step is not restored from the checkpoint its last step writes.
    rewards: list[float] = []

    def keep_reward(buffer) -> None:
        found = buffer.metrics.get("rewards/sum")
        if buffer.mode == "train" and found:
            rewards.append(float(np.mean(found[0])))

    cluster.with_external_metrics_logger(keep_reward)
    last = [time.perf_counter()]

    class ProgressLines(hooks.TrainingHooks):
        def on_train_step_end(self, train_ctx, train_step, train_loss):
            now = time.perf_counter()
            if first:
                done = int(train_step) - start - 1
                print(json.dumps({
                    "step": int(train_step), "loss": float(train_loss),
                    "reward": rewards[done] if 0 <= done < len(rewards) else None,
                    "step_time_s": round(now - last[0], 4), "total_steps": args.steps,
                }), flush=True)
            last[0] = now

        def on_train_start(self, train_ctx): ...
        def on_train_end(self, train_ctx): ...
        def on_train_step_start(self, train_ctx): ...
        def on_eval_step_start(self, train_ctx): ...
        def on_eval_step_end(self, train_ctx, eval_loss): ...

    cluster.actor_trainer.with_training_hooks(ProgressLines())
    learner = grpo_learner.GRPOLearner(
        rl_cluster=cluster, reward_fns=[share_of_a],
        algo_config=grpo_learner.GRPOConfig(
            num_generations=GENERATIONS, num_iterations=1, beta=0.04, epsilon=0.2))
    start = int(cluster.actor_trainer.train_steps)
    print(json.dumps({"event": "start", "process": jax.process_index(),
                      "processes": jax.process_count(), "devices": jax.device_count(),
                      "resumed_at": start}), flush=True)
    last[0] = time.perf_counter()
    learner.train(data)

    print(json.dumps({"event": "done", "process": jax.process_index(),
                      "steps_done": int(cluster.actor_trainer.train_steps),
                      "rewards": [round(r, 6) for r in rewards]}), flush=True)
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
