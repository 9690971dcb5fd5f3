"""`tpujob-train --config FILE [key=value ...]`: run the trainer, exit with the contract's code
and leave a one-line JSON reason in the termination-message file."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import NamedTuple

from tpujob_trainer.exits import EXIT_CODES, Reason, TrainerExit, write_termination_message


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="tpujob-train",
        description="Train a decoder LM with JAX. Overrides: section.field=value (YAML values), "
                    "e.g. train.steps=100 model.remat=full mesh.ici.tensor=4.")
    p.add_argument("--config", "-c", help="YAML config file (default: built-in defaults)")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.add_argument("overrides", nargs="*", help="section.field=value overrides")
    return p.parse_args(argv)


# Ends every process of a job reaches at the same step (the loop decides them collectively).
_ENDED_TOGETHER = frozenset({Reason.COMPLETED, Reason.DATA_EXHAUSTED, Reason.PREEMPTED,
                             Reason.NAN_LOSS})


class _Ending(NamedTuple):
    code: int
    reason: Reason | None = None
    message: str = ""


def _finish(reason: Reason, message: str) -> _Ending:
    write_termination_message(reason, message)
    code = EXIT_CODES[reason]
    if code != 0:
        print(f"tpujob-train: {reason.value}: {message}", file=sys.stderr, flush=True)
    return _Ending(code, reason, message)


def run(argv: list[str] | None = None) -> int:
    """Train; the exit code of the contract (exits.py)."""
    return _run(argv).code


def _run(argv: list[str] | None) -> _Ending:
    args = _parse(argv)
    # Config and env first: both are checked without starting JAX.
    from tpujob_trainer.config import ConfigError, TrainerConfig
    from tpujob_trainer.env import EnvError, ProcessEnv

    try:
        cfg = TrainerConfig.load(args.config, args.overrides)
        penv = ProcessEnv.from_env()
    except (ConfigError, EnvError) as e:
        return _finish(Reason.CONFIG_ERROR, str(e))
    if args.print_config:
        print(cfg.to_yaml(), end="")
        return _Ending(0)

    from tpujob_trainer import distributed
    from tpujob_trainer.loop import train
    from tpujob_trainer.telemetry.host_report import HostReporter

    timeline = _start_timeline(cfg.output, penv)
    # Every process reports its phase and step times from here on, beating through the join.
    reporter = HostReporter.for_process(penv)
    try:
        distributed.initialize(penv)
        distributed.watch_for_failures(penv)
        distributed.check_topology(penv)
        timeline.charge_until_now("tpu_initialization")
        outcome = train(cfg, penv, timeline=timeline, reporter=reporter)
        return _finish(outcome.reason, outcome.message)
    except TrainerExit as e:
        if e.reason is Reason.PEER_LOST:
            distributed.defer_to_peer_account()
        return _finish(e.reason, e.message)
    except MemoryError as e:
        return _finish(Reason.OUT_OF_MEMORY, f"host out of memory: {e}")
    except Exception as e:
        traceback.print_exc()
        return _finish(Reason.INTERNAL_ERROR, f"{type(e).__name__}: {e}")
    finally:
        if reporter is not None:
            reporter.close()


def _start_timeline(output: str, penv):
    """This process start's goodput timeline; written to `output` and summed into the
    termination message when the process ends, however it ends (see exits.on_ending)."""
    from tpujob_trainer.exits import on_ending
    from tpujob_trainer.telemetry.timeline import Timeline, write_record

    timeline = Timeline(process_index=penv.process_id or 0)

    def record(reason: Reason) -> dict:
        timeline.finish(reason.value)
        write_record(output, timeline)
        return {"goodput": timeline.compact()}

    on_ending("goodput", record)
    return timeline


def _is_multiprocess() -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and jax.distributed.is_initialized() and jax.process_count() > 1


def main() -> None:
    code, reason, message = _run(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    if reason not in _ENDED_TOGETHER and reason is not None and _is_multiprocess():
        # This process failed alone. JAX's exit handler would wait (up to its 5-minute
        # shutdown timeout) for every process to reach shutdown, while the peers wait in a
        # collective or barrier for this one: the whole job would hang. Tell the peers (they
        # exit with PeerLost) and leave now.
        from tpujob_trainer import distributed
        distributed.announce_failure(reason, message)
        os._exit(code)
    if reason is Reason.CHECKPOINT_ERROR:
        # Orbax's save threads may still be stuck on storage, and the interpreter would wait for
        # them before exiting.
        os._exit(code)
    if "tpujob_trainer.distributed" in sys.modules:
        sys.modules["tpujob_trainer.distributed"].stop_watching()
    sys.exit(code)


if __name__ == "__main__":
    main()
