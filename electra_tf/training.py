"""The training loop that pretraining and fine-tuning share, above the model and the
objectives: it knows a run only through its state, its per-replica step and its batches.

- train: host calls (host_calls.py) of up to iterations_per_loop steps, paced so that one never
  runs much past MAX_HOST_CALL_SECONDS nor past the next progress line; metrics, TensorBoard
  and the health monitor every log_steps (progress.py); checkpoints (resume.Checkpointer) every
  save_steps; periodic Hooks; SIGTERM/SIGINT finish the current step, checkpoint and raise
  Preempted (preemption.py); nonfinite_patience non-finite steps in a row raise Diverged without
  saving.
- evaluate: the same host calls over an evaluation set, with progress lines.

What runs on the replicas (strategies, XLA, the all-reduced update, loss scaling) is in
distribution.py.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from typing import Any, Callable, Mapping, Sequence

import keras
import tensorflow as tf

from electra_tf import distribution, resume
from electra_tf.host_calls import Batches, Pacer, SkippedSteps
from electra_tf.preemption import Preempted, PreemptionHandler, StopSignals
from electra_tf.progress import ProgressLogger, format_duration


class Diverged(RuntimeError):
    """Too many steps in a row had a non-finite loss or gradient."""


class InputDataError(RuntimeError):
    """The input pipeline failed to read (e.g. a damaged TFRecord); the run's progress was
    saved without the input position first."""


@dataclasses.dataclass
class Hook:
    """fn(step, state) at every multiple of `every` steps (0: never), and at the last step
    when `at_end`. What fn returns goes to TensorBoard at that step and to the console: floats
    as scalars, strings as text (Markdown).

    A probe on the discriminator every 500 steps, say, is one line where the loop is called:
        hooks.append(Hook("probe", 500, lambda step, state: probe(state.model)))
    """
    name: str
    every: int
    fn: Callable[[int, Any], Mapping[str, float | str] | None]
    at_end: bool = False


@dataclasses.dataclass
class LoopConfig:
    """How train() runs: where it writes, how far, how often it logs, saves and reports."""
    model_dir: str
    num_steps: int
    global_batch_size: int
    iterations_per_loop: int
    log_steps: int  # TensorBoard scalars and a console line; the metrics reset
    save_steps: int
    log_seconds: float = 30.0  # a console line at least this often, whatever the steps
    nonfinite_patience: int = 20  # this many non-finite steps in a row stop the run
    console_keys: tuple[str, ...] = ("loss",)
    # What the command writes after the last save (the exported models), in bytes: the free
    # space is compared with it and the checkpoints before the first step.
    final_bytes: int = 0


def _saves_left(step: int, config: LoopConfig) -> int:
    """The checkpoints train() writes from `step` on: every save_steps and at num_steps."""
    return (config.num_steps // config.save_steps - step // config.save_steps
            + (config.num_steps % config.save_steps != 0))


def _next_multiple(step: int, every: int) -> int:
    return (step // every + 1) * every


def train(strategy: tf.distribute.Strategy, state, step_fn: Callable, batches: Batches,
          checkpointer, config: LoopConfig, hooks: Sequence[Hook] = (),
          monitor=None) -> dict[str, float]:
    """Trains until optimizer.iterations reaches config.num_steps; returns the metrics of the
    last logging interval.

    `state` has `optimizer` (its iterations are the step), `metrics` (results(), reset()),
    `model`, and optionally `loss_scale`; `step_fn(batch)` is the per-replica training step;
    `checkpointer` (resume.Checkpointer) has restored what it could; `monitor` (health) looks
    at every interval's metrics.

    Raises CheckpointWriteError before the first step when model_dir's disk cannot hold what
    the run writes (resume.Checkpointer.check_space), Preempted after SIGTERM/SIGINT (a
    checkpoint written), Diverged after nonfinite_patience non-finite steps in a row (nothing
    saved), InputDataError when the input cannot be read (progress saved)."""
    optimizer = state.optimizer
    step = int(optimizer.iterations.numpy())
    if step >= config.num_steps:
        print(f"step {step}: already trained to {config.num_steps} steps", flush=True)
        return {}
    checkpointer.check_space(_saves_left(step, config), config.final_bytes)
    checkpointer.track("seed_generators", resume.seed_generator_states(state.model))
    if checkpointer.restored:
        checkpointer.restore_part("seed_generators", "the dropout streams")
    iterator = _restored_input(batches, checkpointer, step)

    skipped = SkippedSteps(optimizer, config.nonfinite_patience)
    with tf.init_scope():
        stop = tf.Variable(False, trainable=False)
    loop = batches.run_steps(step_fn, skipped=skipped,
                             stop=None if distribution.multi_worker(strategy) else stop)
    logger = ProgressLogger(config.model_dir if distribution.is_chief(strategy) else None,
                            config.num_steps, step, config.global_batch_size)
    pacer = Pacer(strategy, config.log_seconds)
    signals = (PreemptionHandler(strategy, checkpointer)
               if distribution.multi_worker(strategy) else StopSignals(stop))
    results: dict[str, float] = {}
    logged = saved = step
    fired = {hook.name: step for hook in hooks}
    start = time.time()
    try:
        while step < config.num_steps:
            boundaries = [config.num_steps, step + config.iterations_per_loop,
                          _next_multiple(step, config.log_steps),
                          _next_multiple(step, config.save_steps)]
            boundaries += [_next_multiple(step, h.every) for h in hooks if h.every > 0]
            steps, line_due = pacer.plan(min(boundaries) - step)
            first_call = pacer.calls == 0
            call_start = time.time()
            try:
                ran = int(loop(iterator, tf.constant(steps, tf.int64)))
            except tf.errors.DataLossError as e:
                step = int(optimizer.iterations.numpy())
                with checkpointer.without("data"):
                    path = checkpointer.save(step)
                raise InputDataError(
                    f"the input pipeline failed at step {step}: {e.message.splitlines()[0]}; "
                    f"the progress is saved in {path} (without the input position)") from e
            pacer.measured(ran, time.time() - call_start)
            step = int(optimizer.iterations.numpy())
            if first_call:
                print(f"step {step}/{config.num_steps}: the first host call (tracing and "
                      f"compiling) took {format_duration(time.time() - call_start)}", flush=True)
                logger.restart_clock(step)
                pacer.last_line = time.time()

            if skipped.in_a_row.numpy() >= config.nonfinite_patience:
                logger.log(step, _interval_results(state, skipped), config.console_keys)
                raise Diverged(_divergence_message(config, step, checkpointer, optimizer))
            if ran < steps and signals.received is None:
                raise InputDataError(f"the training input ended at step {step}; it must repeat "
                                     "(make_dataset)")
            if step != logged and (step % config.log_steps == 0 or step == config.num_steps):
                results = _interval_results(state, skipped)
                warnings = monitor.update(step, results) if monitor is not None else []
                logger.log(step, {**results, **(monitor.scalars() if monitor else {})},
                           config.console_keys)
                for message in warnings:
                    logger.note(step, message)
                state.metrics.reset()
                logged, pacer.last_line = step, time.time()
            elif line_due:
                logger.log(step, _running_results(state), config.console_keys, summary=False)
                pacer.last_line = time.time()
            if step != saved and (step % config.save_steps == 0 or step == config.num_steps):
                checkpointer.save(step)
                saved = step
            for hook in hooks:
                if hook.every > 0 and step % hook.every == 0 and step != fired[hook.name]:
                    _run_hook(hook, step, state, logger)
                    fired[hook.name] = step
            if isinstance(signals, PreemptionHandler):
                signals.after_call(step)
            if signals.received is not None:
                path = checkpointer.save(step) if step != saved else checkpointer.latest
                name = signal.Signals(signals.received).name
                raise Preempted(f"stopped by {name} at step {step}: checkpoint {path}; rerun "
                                "the same command to resume", 128 + signals.received)
    finally:
        signals.close()
    for hook in hooks:
        if hook.at_end and fired[hook.name] != step:
            _run_hook(hook, step, state, logger)
    # Every worker of a cluster prints the same fingerprint when they agree on the weights.
    fingerprint = (f" (weights fingerprint {weights_fingerprint(state.model):.12g})"
                   if distribution.multi_worker(strategy) else "")
    print(f"trained to step {step} in {format_duration(time.time() - start)}; checkpoints in "
          f"{config.model_dir}{fingerprint}", flush=True)
    return results


def weights_fingerprint(model: keras.Model) -> float:
    """The sum of every trainable weight in float64: equal on workers that agree."""
    return float(tf.add_n([tf.reduce_sum(tf.cast(v.value, tf.float64))
                           for v in model.trainable_variables]))


def _restored_input(batches: Batches, checkpointer, step: int):
    """The training iterator, at the checkpoint's position where there is one."""
    if not batches.checkpointable:
        if step:
            print("multi-worker/TPU input: the data starts a fresh shuffle, seeded by the step",
                  flush=True)
        return batches.iterator(step)
    iterator = batches.iterator()
    checkpointer.track("data", iterator)
    if checkpointer.restored and not checkpointer.restore_part("data", "the input position"):
        iterator = batches.iterator(step)  # a new order, not the start of the old one again
        checkpointer.track("data", iterator)
    return iterator


def _interval_results(state, skipped: SkippedSteps) -> dict[str, float]:
    results = _running_results(state)
    results["skipped_steps"] = float(skipped.read())
    return results


def _running_results(state) -> dict[str, float]:
    results = dict(state.metrics.results())
    results["learning_rate"] = float(state.optimizer.learning_rate.numpy())
    if getattr(state, "loss_scale", None) is not None:
        results["loss_scale"] = float(state.loss_scale.scale.numpy())
    return results


def _run_hook(hook: Hook, step: int, state, logger: ProgressLogger) -> None:
    out = hook.fn(step, state) or {}
    scalars = {k: float(v) for k, v in out.items() if not isinstance(v, str)}
    for name, text in out.items():
        if isinstance(text, str):
            logger.text(step, name, text)
    if scalars:
        logger.scalars(step, scalars)
        print(f"step {step} {hook.name}: " +
              " | ".join(f"{k} {v:.4g}" for k, v in scalars.items()), flush=True)


def _divergence_message(config: LoopConfig, step: int, checkpointer, optimizer) -> str:
    latest = checkpointer.latest
    kept = (f"the newest checkpoint, {latest}, is from before and holds finite weights"
            if latest else "no checkpoint was written before")
    return (f"training diverged: {config.nonfinite_patience} steps in a row had a non-finite "
            f"loss or gradient and were skipped (nothing applied, nothing saved) after step "
            f"{step}; {kept}. Lower learning_rate (now "
            f"{float(optimizer.learning_rate.numpy()):.3g} at this step), lengthen the warmup, "
            "or use float32/mixed_bfloat16 instead of mixed_float16; the hparam "
            "nonfinite_patience sets how many such steps in a row stop a run")


def evaluate(strategy: tf.distribute.Strategy, step_fn: Callable, batches: Batches,
             num_steps: int, log_seconds: float = 30.0) -> int:
    """Runs step_fn over up to num_steps of the batches (fewer when the data ends), with a
    progress line at least every log_seconds. Returns the number of batches run."""
    loop = batches.run_steps(step_fn)
    iterator = batches.iterator()
    pacer = Pacer(strategy, log_seconds)
    done, start = 0, time.time()
    while done < num_steps:
        steps, line_due = pacer.plan(num_steps - done)
        call_start = time.time()
        ran = int(loop(iterator, tf.constant(steps, tf.int64)))
        pacer.measured(ran, time.time() - call_start)
        done += ran
        if ran < steps:
            print(f"the evaluation data ended after {done} batches", flush=True)
            break
        if line_due:
            rate = done / max(time.time() - start, 1e-9)
            print(f"evaluated {done}/{num_steps} batches | ETA "
                  f"{format_duration((num_steps - done) / rate)}", flush=True)
            pacer.last_line = time.time()
    return done
