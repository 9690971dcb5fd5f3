"""The training loop: config -> mesh -> sharded state -> data -> jitted step -> reports and
checkpoints, until `train.steps`, a stop request, or a failure (as a `TrainerExit`).

The step is dispatched before the previous step's metrics are read back, so the host never
waits on the step it just queued: step time is the interval between two steps' completions.
The host report splits that interval, on every process, into its wait (blocked in the runtime,
where it waits for the other processes at the step's collectives: reading the result back, and
dispatching the next step where the backend waits there for the state it donates, as JAX's CPU
client does) and its busy time (the rest: its own work, the next batch, reporting, Python).
Effects (logging, NaN checks, checkpoints, W&B) all live here, not in the step.
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from tpujob_plan.flops import train_flops_per_step
from tpujob_trainer import compile_cache
from tpujob_trainer.config.root import TrainerConfig
from tpujob_trainer.contract import HostPhase
from tpujob_trainer.data.errors import DataError, DataExhausted
from tpujob_trainer.env import ProcessEnv
from tpujob_trainer.exits import Reason, TrainerExit, on_ending
from tpujob_trainer.mesh import build_mesh
from tpujob_trainer.remat import device_generation, device_memory_bytes, resolve_remat
from tpujob_trainer.sharding import activate
from tpujob_trainer.step import step_program
from tpujob_trainer.step_compile import compile_init, start_step_compile
from tpujob_trainer.telemetry.fault import StepFault
from tpujob_trainer.telemetry.host_report import HostReporter
from tpujob_trainer.telemetry.jsonlog import JsonLog
from tpujob_trainer.telemetry.memory import memory_snapshot
from tpujob_trainer.telemetry.peak import peak_tflops_per_device
from tpujob_trainer.telemetry.server import Progress, ProgressServer
from tpujob_trainer.telemetry.stacks import StackDumper
from tpujob_trainer.telemetry.timeline import Timeline, compile_outcome, read_previous
from tpujob_trainer.telemetry.wandb_run import WandbRun

if TYPE_CHECKING:
    from tpujob_trainer.checkpoint.tiered import TieredCheckpointer
    from tpujob_trainer.data import DataSource

WANDB_NAMES = {
    "loss": "learning/loss", "aux_loss": "learning/moe_lb_loss", "grad_norm": "learning/grad_norm",
    "lr": "learning/current_learning_rate", "step_time_s": "perf/step_time_seconds",
    "tflops_per_device": "perf/per_device_tflops_per_sec",
    "tokens_per_s_per_device": "perf/per_device_tokens_per_sec", "mfu": "perf/mfu",
}


class StopSignal:
    """Remembers a SIGTERM (preemption, pod deletion) for the loop to act on between steps."""

    def __init__(self):
        self.requested = False
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGTERM,):
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        self.requested = True

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


@dataclass
class Outcome:
    reason: Reason
    message: str
    step: int
    losses: list[float] = field(default_factory=list)


@dataclass
class _Timer:
    """Step time from completions: the host reads step N-1 while step N runs."""

    last_done: float
    flops_per_step: float
    tokens_per_step: int
    num_devices: int
    peak_tflops: float | None

    def figures(self, now: float, steps: int = 1) -> dict[str, float | None]:
        dt = max((now - self.last_done) / steps, 1e-9)
        self.last_done = now
        tflops = self.flops_per_step / dt / self.num_devices / 1e12
        return {"step_time_s": dt,
                "tokens_per_s": self.tokens_per_step / dt,
                "tokens_per_s_per_device": self.tokens_per_step / dt / self.num_devices,
                "tflops_per_device": tflops,
                "mfu": tflops / self.peak_tflops if self.peak_tflops else None}


@dataclass(frozen=True)
class StepContext:
    """Everything the step loop runs with, set up once by `_train`: what it steps, where batches
    come from and go, and where each step is reported. The loop's own state (the train state,
    the step number) changes every step and is passed beside it."""

    cfg: TrainerConfig
    # (state, global batch) -> (state, metrics on device): the compiled train step.
    compiled: Callable[[Any, dict[str, jax.Array]], tuple[Any, dict[str, jax.Array]]]
    data: DataSource
    checkpointer: TieredCheckpointer | None
    stop: StopSignal
    log: JsonLog
    progress: Progress
    memory: Callable[..., None]               # memory(phase, **fields): a memory report
    wandb_run: WandbRun | None
    timeline: Timeline
    timer: _Timer
    # (this process's rows, stop flag) -> the global batch the compiled step takes.
    to_global: Callable[[np.ndarray, int], dict[str, jax.Array]]
    reporter: HostReporter | None = None     # this process's host report; None: off
    fault: StepFault | None = None           # injected host work per step (a straggler)


def _serve(cfg: TrainerConfig, penv: ProcessEnv, progress: Progress,
           is_main: bool) -> ProgressServer | None:
    """This process's HTTP endpoint: every process serves (process 0's progress, any process's
    stacks on a hang). Only process 0 must: another whose port is taken (several processes of
    one machine, not wired as pods are) goes on without one, saying so on stderr."""
    if cfg.metrics.port is None:
        return None
    try:
        return ProgressServer(progress, cfg.metrics.port, host=penv.bind_address,
                              stacks=StackDumper(penv.host_name, cfg.output))
    except OSError as e:
        if is_main:
            raise
        print(f"tpujob: process {penv.process_id} serves no HTTP endpoint (its stacks cannot be "
              f"asked for): {e}", file=sys.stderr, flush=True)
        return None


def non_finite_loss(metrics: dict[str, float], step: int) -> TrainerExit | None:
    """The NaNLoss exit for a step whose loss is NaN or infinite (either ends the run: a
    checkpoint of it would be useless), else None."""
    if math.isfinite(metrics["loss"]):
        return None
    return TrainerExit(Reason.NAN_LOSS, f"loss is {metrics['loss']} at step {step} "
                       f"(grad norm {metrics['grad_norm']}, lr {metrics['lr']:.3g})")


def _classify(e: BaseException) -> Reason | None:
    text = f"{type(e).__name__}: {e}"
    if "RESOURCE_EXHAUSTED" in text or "Out of memory" in text or "out of memory" in text:
        return Reason.OUT_OF_MEMORY
    if jax.process_count() > 1 and any(s in text for s in (
            "DEADLINE_EXCEEDED", "UNAVAILABLE", "heartbeat", "Connection reset",
            "Connection closed by peer", "Broken pipe", "task has died")):
        return Reason.PEER_LOST
    return None


def train(cfg: TrainerConfig, penv: ProcessEnv, *, stop: StopSignal | None = None,
          log: JsonLog | None = None, timeline: Timeline | None = None,
          reporter: HostReporter | None = None) -> Outcome:
    """Run training to the end; failures raise TrainerExit (or are classified by the CLI)."""
    try:
        return _train(cfg, penv, stop or StopSignal(), log or JsonLog(jax.process_index() == 0),
                      timeline or Timeline(process_index=jax.process_index()), reporter)
    except TrainerExit:
        raise
    except Exception as e:
        from tpujob_trainer.checkpoint import (
            CheckpointMismatchError,
            CheckpointReadError,
            CheckpointSaveError,
        )
        if isinstance(e, CheckpointMismatchError):  # a config change: no restart can help
            raise TrainerExit(Reason.CONFIG_ERROR, str(e)) from e
        if isinstance(e, (CheckpointSaveError, CheckpointReadError)):
            raise TrainerExit(Reason.CHECKPOINT_ERROR, str(e)) from e
        reason = _classify(e)
        if reason is None:
            raise
        raise TrainerExit(reason, f"{type(e).__name__}: {str(e)[:1500]}") from e


def _shared_attempt(timeline: Timeline) -> None:
    """Every process of one start names its attempt after process 0's start time."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        # In two 32-bit halves: without jax_enable_x64 an int64 is cut to its low 32 bits on
        # the way (a start time in milliseconds needs 41).
        started = int(timeline.attempt, 16)
        mine = np.array([started >> 32, started & 0xFFFFFFFF], np.uint32)
        high, low = (int(x) for x in multihost_utils.broadcast_one_to_all(mine))
        timeline.attempt = f"{high << 32 | low:x}"


def _train(cfg: TrainerConfig, penv: ProcessEnv, stop: StopSignal, log: JsonLog,
           timeline: Timeline, reporter: HostReporter | None) -> Outcome:
    from tpujob_trainer.checkpoint import restore_params
    from tpujob_trainer.checkpoint.tiered import TieredCheckpointer
    from tpujob_trainer.data import build_data_source

    t_start = time.perf_counter()
    is_main = jax.process_index() == 0
    cache_dir = compile_cache.enable(cfg.compile_cache, cfg.output)
    B, L = cfg.train.global_batch, cfg.train.seq_len
    devices = jax.devices()
    if B % jax.process_count():
        raise TrainerExit(Reason.CONFIG_ERROR, f"train.global_batch ({B}) must be divisible by the "
                          f"number of processes ({jax.process_count()})")

    # Mesh first: a layout that cannot work fails here, before anything compiles.
    mesh, mesh_plan = build_mesh(cfg.mesh, num_slices=penv.num_slices, devices=devices)
    hbm = device_memory_bytes(devices[0])
    remat = resolve_remat(cfg, mesh_plan.axes, hbm, device_generation(devices[0]))
    model_cfg = cfg.model.model_copy(update={"remat": remat})
    peak, peak_source = peak_tflops_per_device(
        penv.peak_tflops_per_device, devices[0], local_devices=jax.local_device_count(),
        measure=cfg.metrics.measure_peak)
    shape = cfg.model.to_shape()
    flops = train_flops_per_step(shape, B, L)
    log.emit("start", processes=jax.process_count(), devices=len(devices),
             device_kind=devices[0].device_kind, mesh=mesh_plan.axes, remat=remat,
             params=shape.total_params, flops_per_step=flops, peak_tflops_per_device=peak,
             peak_source=peak_source, total_steps=cfg.train.steps, compile_cache=cache_dir)

    _shared_attempt(timeline)
    if is_main:
        timeline.previous = read_previous(cfg.output, timeline.attempt)
    progress = Progress(step=0, total_steps=cfg.train.steps)
    progress.attach("goodput", timeline.document)
    if is_main:
        on_ending("progress", lambda reason: {"progress": progress.final()})
    server = _serve(cfg, penv, progress, is_main)
    if server is not None:
        log.emit("http", host=server.host, port=server.port)
    wandb_run = None
    if is_main:
        wandb_run, why = WandbRun.start(cfg.metrics.wandb, config=cfg.model_dump(mode="json"),
                                        output=cfg.output)
        if wandb_run is None and cfg.metrics.wandb.project:
            log.emit("warning", message=f"W&B off: {why}")

    def memory(phase: str, **extra: Any) -> None:
        snap = memory_snapshot()
        progress.update(**snap)
        log.emit("memory", phase=phase, **snap, **extra)

    checkpointer, step_compile = None, None
    try:
        with activate(mesh):
            fns, abstract_batch = step_program(cfg, mesh, model_cfg)
            step_compile = start_step_compile(cfg, fns, abstract_batch, mesh, cache_dir)
            tokens_sharding = abstract_batch["tokens"].sharding
            stop_sharding = abstract_batch["stop"].sharding
            try:
                data = build_data_source(
                    cfg.data, seq_len=L, global_batch=B, vocab_size=cfg.model.vocab_size,
                    process_index=jax.process_index(), process_count=jax.process_count(),
                    seed=cfg.train.seed)
            except DataError as e:
                raise TrainerExit(Reason.DATA_ERROR, str(e)) from e
            if cfg.checkpoint.enabled:
                checkpointer = TieredCheckpointer(cfg.checkpoint, cfg.output)

            # State: resume, or start from another run's parameters, or initialize - sharded
            # from the start (jit with out_shardings; restores read into shape-only targets).
            progress.update(phase="initializing")
            resume_step = (checkpointer.latest_step()
                           if checkpointer is not None and cfg.checkpoint.resume else None)
            timeline.charge_until_now("training_prep")
            if resume_step is not None and reporter is not None:
                reporter.phase(HostPhase.CHECKPOINT_RESTORE)
            restored = (checkpointer.restore(fns.abstract_state)
                        if resume_step is not None else None)
            if restored is not None:
                state, data_state, step = restored
                data.restore(data_state)
                timeline.charge_until_now("checkpoint_restore")
                log.emit("restore", step=step, tier=checkpointer.restored_tier)
                memory("after_restore", step=step)
            else:
                t0 = time.perf_counter()
                init, init_how = compile_init(cfg, fns, cache_dir)
                state = init()
                step = 0
                if cfg.checkpoint.init_params_from:
                    del state["params"]  # never hold two copies of the parameters
                    params, from_step = restore_params(
                        cfg.checkpoint.init_params_from, fns.abstract_state["params"],
                        step=cfg.checkpoint.init_params_step)
                    state["params"] = params
                    log.emit("init_params", source=cfg.checkpoint.init_params_from, step=from_step)
                memory("after_init", init=init_how, init_s=round(time.perf_counter() - t0, 3))
                timeline.charge_until_now("training_prep")
            timeline.resumed_from_step = step

            progress.update(phase="compiling", step=step)
            if reporter is not None:
                reporter.phase(HostPhase.COMPILE, step)
            t0 = time.perf_counter()
            compiled, how = step_compile.result()
            waited_s, compile_s = time.perf_counter() - t0, step_compile.seconds
            timeline.compile_cache = compile_outcome(how, step_compile.cache_hit)
            timeline.charge_until_now("program_startup")
            memory("after_compile", compile_s=round(compile_s, 3))
            log.emit("compiled", compile_s=compile_s, waited_s=waited_s,
                     overlapped=step_compile.background, startup_s=time.perf_counter() - t_start,
                     compile_cache=compile_cache.counts(), executable=how)

            context = StepContext(
                cfg=cfg, compiled=compiled, data=data, checkpointer=checkpointer, stop=stop,
                log=log, progress=progress, memory=memory, wandb_run=wandb_run,
                timeline=timeline,
                timer=_Timer(time.perf_counter(), flops, B * L, len(devices), peak),
                to_global=lambda local, flag: {
                    "tokens": jax.make_array_from_process_local_data(
                        tokens_sharding, local, (B, L + 1)),
                    "stop": jax.make_array_from_process_local_data(
                        stop_sharding, np.full((local.shape[0],), flag, np.int32), (B,))},
                reporter=reporter,
                fault=StepFault(penv.fault_step_sleep_s, penv.fault_step_slowdown))
            return _run_steps(context, state, step)
    finally:
        if step_compile is not None:
            step_compile.wait()  # a thread left in XLA as the interpreter ends aborts it
        if checkpointer is not None:
            checkpointer.close()
        if server is not None:
            server.close()
        if wandb_run is not None:
            wandb_run.finish()


def _run_steps(ctx: StepContext, state: Any, step: int) -> Outcome:
    """Train from `state` at `step` until `train.steps`, a stop request, the data's end or a
    failure; the run's outcome."""
    from tpujob_trainer.checkpoint.tiered import LOCAL, PERSISTENT

    cfg, data, checkpointer, stop, log = ctx.cfg, ctx.data, ctx.checkpointer, ctx.stop, ctx.log
    progress, timeline, timer, reporter = ctx.progress, ctx.timeline, ctx.timer, ctx.reporter
    total = cfg.train.steps
    losses: list[float] = []
    pending: tuple[int, Any] | None = None     # (step number, its metrics on device)
    last_ckpt: int | None = None
    dispatch_s = 0.0       # time in dispatch calls since the last read-back
    progress.update(phase="training", step=step)

    def read(pending_step: int, metrics: Any, synced: bool = False) -> bool:
        """Read back one step's metrics (blocks on that step only); True if a stop was requested.
        `synced`: the next step waits for this read (a checkpoint or a stop follows)."""
        nonlocal dispatch_s
        waiting_since = time.perf_counter()
        if reporter is not None:
            reporter.waiting(True)
        m = {k: float(v) for k, v in jax.device_get(metrics).items()}
        now = time.perf_counter()
        if reporter is not None:
            reporter.waiting(False)
            wait = now - waiting_since + dispatch_s
            reporter.step_done(pending_step, now - timer.last_done - wait, wait, synced)
        dispatch_s = 0.0
        losses.append(m["loss"])
        fig = timer.figures(now)
        timeline.step_done(pending_step, fig["step_time_s"])
        failed = non_finite_loss(m, pending_step)
        if failed is not None:
            raise failed
        row = {"step": pending_step, "loss": m["loss"], "grad_norm": m["grad_norm"], "lr": m["lr"],
               **fig}
        if cfg.model.moe.num_experts:
            row["aux_loss"] = m["aux_loss"]
        progress.update(**row)
        if pending_step % cfg.metrics.log_every == 0 or pending_step == total:
            log.emit("step", **row)
            if ctx.wandb_run is not None:
                ctx.wandb_run.log(pending_step, {WANDB_NAMES.get(k, k): v for k, v in row.items()
                                                 if v is not None and k != "step"})
        if pending_step % cfg.metrics.memory_every == 0:
            ctx.memory("training", step=pending_step)
        return m["stop"] > 0

    def note_committed() -> None:
        """The status's last checkpoint is one complete on storage, which a restart can resume
        from: an async save counts once its background part has finished."""
        nonlocal last_ckpt
        done = checkpointer.committed_step if checkpointer is not None else None
        if done is not None and done != last_ckpt:
            last_ckpt = done
            progress.update(last_checkpoint_step=done)

    def save(at: int, force: bool) -> None:
        t0 = time.perf_counter()
        if reporter is not None and checkpointer is not None:
            reporter.phase(HostPhase.CHECKPOINT_SAVE)
        tier = checkpointer.save(at, state, data.state(), force=force) if checkpointer else None
        if reporter is not None and checkpointer is not None:
            reporter.phase(HostPhase.STEP)
        timeline.charge("checkpoint_save", time.perf_counter() - t0)
        note_committed()   # a synchronous save, or the previous one it waited for
        if tier == PERSISTENT:
            log.emit("checkpoint", step=at, blocking_s=checkpointer.last_save_blocking_s)
        elif tier == LOCAL:
            log.emit("local_checkpoint", step=at, blocking_s=checkpointer.last_save_blocking_s)

    stop.install()
    reason, message = Reason.COMPLETED, f"trained {total} steps"
    try:
        while step < total:
            try:
                t0 = time.perf_counter()
                local = data.next_batch()
                timeline.charge("data_loading", time.perf_counter() - t0)
                if ctx.fault is not None and ctx.fault.active:
                    ctx.fault()
            except DataExhausted as e:
                reason, message = Reason.DATA_EXHAUSTED, f"data ran out after step {step}: {e}"
                break
            except DataError as e:
                raise TrainerExit(Reason.DATA_ERROR, str(e)) from e
            batch = ctx.to_global(local, int(stop.requested))
            t0 = time.perf_counter()
            if reporter is not None:
                reporter.waiting(True)   # a backend may wait here for the state it donates
            state, metrics = ctx.compiled(state, batch)
            if reporter is not None:
                reporter.waiting(False)
            dispatch_s += time.perf_counter() - t0
            step += 1
            if checkpointer is not None:
                checkpointer.check()  # a background save that failed or is late ends the run
                note_committed()
            stop_now = False
            if pending is not None:
                stop_now = read(*pending)
            pending = (step, metrics)
            if stop_now:
                # Every process saw the same flag with the same step: save together, then go.
                stop_now = read(*pending, synced=True)
                pending = None
                save(step, force=True)
                reason, message = Reason.PREEMPTED, f"stopped by SIGTERM after step {step}"
                break
            if checkpointer is not None and checkpointer.should_save(step):
                # Never checkpoint a NaN: read this step's loss first (a sync every `every` steps).
                stop_now = read(*pending, synced=True)
                pending = None
                save(step, force=False)
                if stop_now:
                    reason, message = Reason.PREEMPTED, f"stopped by SIGTERM after step {step}"
                    break
        if pending is not None:
            if read(*pending) and reason == Reason.COMPLETED and step < total:
                reason = Reason.PREEMPTED
            pending = None
        if reason in (Reason.COMPLETED, Reason.DATA_EXHAUSTED) and step > 0:
            save(step, force=True)
        if checkpointer is not None:
            t0 = time.perf_counter()
            if reporter is not None:
                reporter.phase(HostPhase.CHECKPOINT_SAVE)
            checkpointer.wait()
            note_committed()
            timeline.charge("checkpoint_save", time.perf_counter() - t0)
            log.emit("checkpoint_wait", seconds=time.perf_counter() - t0)
    finally:
        stop.uninstall()
    progress.update(phase="done", reason=reason.value, step=step)
    log.emit("end", reason=reason.value, message=message, step=step,
             last_checkpoint_step=last_ckpt)
    return Outcome(reason, message, step, losses)
