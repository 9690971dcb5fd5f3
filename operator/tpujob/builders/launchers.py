"""The launchers that start one process per GPU on every node of a GPU job: torchrun and
`accelerate launch` (with its DeepSpeed and FSDP plugins), each written out from the job's own
numbers, so that no node is ever told a world it is not in.

The operator writes the launcher's command line itself: `--nnodes`/`--num_machines` from
spec.nodes, the processes per node from the machine type's GPUs, the node's rank from its pod's
completion index (`$(NODE_RANK)`, which Kubernetes expands from the pod's env) and the rendezvous
at the first pod's stable host name. Static rendezvous (torchrun's default) is used: every node
knows its rank, as the Indexed Job gives it. Sources: torch/distributed/run.py (torchrun's
options; torch 1.x takes only their underscore spellings, which 2.x keeps),
accelerate/commands/launch.py (accelerate 1.x: options on the command line win over
its config file, which is how a config file saying `num_machines: 1` is overruled).

A misconfiguration is refused before anything runs (`launcher_problem`): a command that starts a
launcher itself (which the operator would then not wire), launcher options that the operator
sets, and world figures in spec.env that disagree with the job.
"""

from __future__ import annotations

import os
import re
from typing import Any

from tpujob.api.recovery import RestartPolicy
from tpujob.api.trainer_spec import TrainerSpec
from tpujob.builders.names import host_fqdn
from tpujob_plan.gpu_plan import GpuPlan, Launcher

MASTER_PORT = 29500  # torchrun's and accelerate's default rendezvous port
# The built-in trainer (and a JAX program that follows its contract) exits 42 on a retryable
# error. torchrun's agent exits 1 whenever a process of its node fails, and a lost peer fails
# them all at once (gloo: "Connection closed by peer"; NCCL: "remote process exited", or its
# watchdog's timeout); accelerate runs torchrun's agent in its own process and exits the same.
# Unless 1 restarts the job, a lost node fails it whenever the surviving node's exit reaches
# the JobSet before the lost one's.
DEFAULT_RETRYABLE_EXIT_CODES = {Launcher.JAX: (42,), Launcher.TORCHRUN: (1, 42),
                                Launcher.ACCELERATE: (1, 42)}
NODE_RANK_REF = "$(NODE_RANK)"
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
# The options each launcher gets from the operator, with the spelling the launcher takes
# (torchrun takes `-` and `_`; accelerate 1.x takes `_`, and `-` too).
_OWN_OPTIONS = {
    Launcher.TORCHRUN: ("nnodes", "nproc_per_node", "node_rank", "master_addr", "master_port",
                        "rdzv_endpoint", "rdzv_backend", "rdzv_id", "standalone"),
    Launcher.ACCELERATE: ("num_machines", "num_processes", "machine_rank", "main_process_ip",
                          "main_process_port"),
}
_LAUNCHER_WORDS = {"torchrun": Launcher.TORCHRUN, "torch.distributed.run": Launcher.TORCHRUN,
                   "accelerate": Launcher.ACCELERATE,
                   "accelerate.commands.launch": Launcher.ACCELERATE, "deepspeed": None}
_WORLD_ENV = ("WORLD_SIZE", "NNODES", "NODE_RANK", "RANK", "LOCAL_RANK", "MASTER_ADDR",
              "MASTER_PORT", "LOCAL_WORLD_SIZE")


def _option(word: str) -> str | None:
    """`--nproc-per-node=8` -> `nproc_per_node`; None for a word that is not an option."""
    if not word.startswith("--"):
        return None
    return word[2:].split("=", 1)[0].replace("-", "_")


def _script(command: list[str], launcher: Launcher) -> list[str]:
    """The command as the launcher takes it: `python3 -m pkg` -> `-m pkg`, `python3 train.py`
    -> `train.py`, a program that is not Python -> `--no_python` (both launchers' flag) first."""
    first = os.path.basename(command[0])
    if _PYTHON.match(first):
        rest = [w for w in command[1:] if w != "-u"]  # the launchers run python unbuffered
        return rest
    return ["--no_python", *command]


def build_launch_command(command: list[str], launcher_args: list[str], plan: GpuPlan,
                         jobset_name: str) -> list[str]:
    """The container command of a GPU job's trainer: `command` (the job's program, or the
    built-in trainer's) as it is for JAX, else the launcher's, wired, then the script."""
    command = list(command)
    launcher = plan.launcher
    if launcher is Launcher.JAX:
        return command
    master = host_fqdn(jobset_name, 0, 0)
    if launcher is Launcher.TORCHRUN:
        # The underscore spellings: every torchrun takes them (1.x takes no other).
        wired = ["torchrun", f"--nnodes={plan.nodes}",
                 f"--nproc_per_node={plan.processes_per_node}", f"--node_rank={NODE_RANK_REF}",
                 f"--master_addr={master}", f"--master_port={MASTER_PORT}"]
    else:
        wired = ["accelerate", "launch", "--num_machines", str(plan.nodes),
                 "--num_processes", str(plan.processes), "--machine_rank", NODE_RANK_REF,
                 "--main_process_ip", master, "--main_process_port", str(MASTER_PORT)]
    return [*wired, *launcher_args, *_script(command, launcher)]


def build_launcher_env(plan: GpuPlan, jobset_name: str) -> list[dict[str, Any]]:
    """What a GPU job's processes read beside the launcher's own variables: xpk's GPU names
    (GPUS_PER_NODE) and, for the per-GPU launchers, the rendezvous and world size that
    torch.distributed's env:// reads."""
    env = [{"name": "GPUS_PER_NODE", "value": str(plan.machine.gpus_per_node)}]
    if plan.launcher is not Launcher.JAX:
        env += [{"name": "MASTER_ADDR", "value": host_fqdn(jobset_name, 0, 0)},
                {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
                {"name": "WORLD_SIZE", "value": str(plan.processes)}]
    return env


def launcher_problem(trainer: TrainerSpec, env: list[Any], plan: GpuPlan
                     ) -> tuple[str, str] | None:
    """(field, message) for a GPU job whose launch would not be the world it asks for."""
    world = (f"{plan.nodes} node(s) x {plan.machine.gpus_per_node} GPUs: {plan.devices} "
             f"GPUs")
    command = list(trainer.command or [])
    program = os.path.basename(command[0]) if command else ""
    if _PYTHON.match(program) and command[1:2] == ["-m"]:
        program = next(iter(command[2:]), "")   # python3 -m torch.distributed.run ...
    started = _LAUNCHER_WORDS.get(program)
    if program in _LAUNCHER_WORDS:
        if started is None:
            return ("spec.trainer.command",
                    "the deepspeed launcher reaches the other nodes over ssh with a hostfile, "
                    "which pods do not have; set spec.trainer.launcher: torchrun (DeepSpeed's "
                    "init_distributed reads torchrun's variables) or accelerate with a "
                    "DeepSpeed config, and give the script and its arguments as the command")
        return ("spec.trainer.command",
                f"starts {program} itself, so each of the {plan.nodes} node(s) would launch "
                f"the world its own options say; set spec.trainer.launcher: "
                f"{started.value} and give only the script and its arguments (e.g. [python3, "
                f"train.py]): the operator runs {program} on every node for {world}, one "
                f"process per GPU, with the node's rank")
    for i, word in enumerate(trainer.launcher_args):
        option = _option(word)
        if option in _OWN_OPTIONS.get(plan.launcher, ()):
            return (f"spec.trainer.launcherArgs[{i}]",
                    f"{word.split('=', 1)[0]} is set by the operator from the job ({world}, "
                    f"{plan.processes} processes, each node's rank and the rendezvous at the "
                    f"first pod); remove it")
    for i, var in enumerate(env):
        name, value = getattr(var, "name", None), getattr(var, "value", None)
        if name in _WORLD_ENV:
            return (f"spec.env[{i}]",
                    f"{name}{'=' + value if value is not None else ''} is set by the operator "
                    f"for each process of the job ({world}, {plan.processes} processes in all); "
                    f"remove it")
    return None


def retryable_exit_codes(trainer: TrainerSpec, policy: RestartPolicy) -> list[int]:
    """The exit codes that restart the job: restartPolicy.retryableExitCodes as written, or
    its launcher's default."""
    if policy.retryable_exit_codes is not None:
        return list(policy.retryable_exit_codes)
    return list(DEFAULT_RETRYABLE_EXIT_CODES[trainer.launcher])
