"""The training loop that pretraining and fine-tuning share, and the distributed machinery
under it.

- make_strategy: the tf.distribute strategy an hparam names (TPUs resolved from tpu_name,
  tpu_zone and gcp_project; multi-worker from TF_CONFIG). Create it first thing: a
  multi-worker strategy must exist before TensorFlow runs any op.
- precision_policy: Keras mixed precision (variables stay float32).
- apply_gradients: all-reduce, un-scale, clip at global norm 1.0 and apply, in replica context.
  A step whose gradient norm is not finite is skipped: nothing is applied and
  optimizer.iterations does not move.
- DynamicLossScale: float16 loss scaling.
- train: the loop. Host calls of up to iterations_per_loop steps, shortened so that one never
  runs much past MAX_HOST_CALL_SECONDS nor past the next progress line; metrics, TensorBoard and
  the health monitor every log_steps; checkpoints (resume.Checkpointer) every save_steps;
  periodic Hooks; SIGTERM/SIGINT finish the current step, checkpoint and raise Preempted;
  nonfinite_patience non-finite steps in a row raise Diverged without saving.
- evaluate: the same host calls over an evaluation set, with progress lines.
- ProgressLogger: the console line and TensorBoard scalars.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import os
import signal
import threading
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

import keras
import tensorflow as tf

log = logging.getLogger("electra_tf")

CLIP_NORM = 1.0  # the original clips the global gradient norm at 1.0
# A host call is cut short when its steps would take longer than this: under multi-worker
# training it bounds how long a preemption notice waits (TF's PreemptionCheckpointHandler acts
# between host calls); its overhead (a few ms) stays negligible.
MAX_HOST_CALL_SECONDS = 10.0


def split_cpu(num_devices: int) -> None:
    """Splits the host CPU into `num_devices` logical devices (before TF touches any), so that
    MirroredStrategy can be tried without GPUs."""
    if num_devices > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * num_devices)


def make_strategy(name: str, tpu_name: str | None = None, tpu_zone: str | None = None,
                  gcp_project: str | None = None) -> tf.distribute.Strategy:
    """default | one_device | mirrored | multi_worker_mirrored | tpu."""
    if name == "multi_worker_mirrored":
        try:
            return tf.distribute.MultiWorkerMirroredStrategy()
        except RuntimeError as e:
            raise RuntimeError(
                f"{e}: create the strategy (training.make_strategy) before anything else runs "
                "a TensorFlow op, as run_pretraining.py and run_finetuning.py do") from None
    gpus = tf.config.list_logical_devices("GPU")
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if name == "mirrored":
        # Without GPUs, mirror over the logical CPUs (see split_cpu).
        devices = None if gpus else [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu_name or "", zone=tpu_zone, project=gcp_project)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(f"unknown strategy {name!r}")


def multi_worker(strategy: tf.distribute.Strategy) -> bool:
    """Whether the strategy spans several processes (a TF_CONFIG cluster)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and
            resolver is not None and bool(resolver.cluster_spec().jobs))


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes checkpoints, summaries and exports (the others of a
    multi-worker cluster write nothing that lasts)."""
    return strategy.extended.should_checkpoint


def on_cpu(strategy: tf.distribute.Strategy) -> bool:
    """Whether the strategy computes on CPUs only."""
    if not tf.distribute.has_strategy() and strategy is tf.distribute.get_strategy():
        # The default strategy has no device list; it runs on the first GPU if there is one.
        return not tf.config.list_logical_devices("GPU")
    return all("CPU" in d.upper() for d in strategy.extended.worker_devices)


def use_xla(requested: bool | None, strategy: tf.distribute.Strategy) -> bool:
    """Whether to XLA-compile the forward and backward pass.

    Default (None): on for GPUs and TPUs (TPUs always compile anyway), off on CPUs, where XLA
    measured slower (docs/performance.md) and where MirroredStrategy over several CPU devices
    cannot use it at all."""
    works = not (strategy.num_replicas_in_sync > 1 and on_cpu(strategy))
    if requested and not works:
        log.warning("jit_compile=true does not work with several replicas on CPU devices; "
                    "running without XLA")
    if requested is None:
        return not on_cpu(strategy)
    return bool(requested) and works


@contextlib.contextmanager
def precision_policy(precision: str):
    """Sets the global Keras dtype policy while models are built, then restores it."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def _apply_if(condition, apply_fn: Callable[[], None],
              on_cross_replica: Callable[[tf.Tensor], None] | None = None) -> None:
    """Runs apply_fn in every replica when `condition` (the same on all replicas). The
    condition has to be taken in cross-replica context because the optimizer's apply itself
    calls merge_call; `on_cross_replica(condition)` runs there too."""

    def cross_replica(strategy, condition):
        condition = strategy.experimental_local_results(condition)[0]

        def apply():
            strategy.extended.call_for_each_replica(apply_fn)
            return tf.constant(True)

        tf.cond(condition, apply, lambda: tf.constant(False))
        if on_cross_replica is not None:
            on_cross_replica(condition)

    tf.distribute.get_replica_context().merge_call(cross_replica, args=(condition,))


class DynamicLossScale(tf.Module):
    """Float16 loss scaling: the loss is multiplied by `scale`; a step whose gradients are not
    finite is skipped (by apply_gradients) and halves the scale; `growth_interval` finite steps
    in a row double it."""

    def __init__(self, initial_scale: float = 2.0 ** 15, growth_interval: int = 2000):
        super().__init__(name="loss_scale")
        self.growth_interval = growth_interval
        self.scale = tf.Variable(initial_scale, trainable=False, dtype=tf.float32,
                                 aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self.good_steps = tf.Variable(0, trainable=False, dtype=tf.int64,
                                      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def update(self, finite) -> None:
        """In cross-replica context, after a step: grows or halves the scale."""
        grow = finite & (self.good_steps + 1 >= self.growth_interval)
        self.scale.assign(tf.where(finite, tf.where(grow, self.scale * 2.0, self.scale),
                                   tf.maximum(self.scale / 2.0, 1.0)))
        self.good_steps.assign(tf.where(finite & ~grow, self.good_steps + 1,
                                        tf.constant(0, tf.int64)))


def apply_gradients(optimizer: keras.optimizers.Optimizer, grads, variables,
                    loss_scale: DynamicLossScale | None = None) -> tf.Tensor:
    """In replica context: sums gradients over replicas, removes the loss scale, clips the
    global norm at CLIP_NORM and applies them. Returns the (unclipped) global norm.

    A non-finite norm (an overflow under float16, or a diverging run) skips the update: no
    weight changes and optimizer.iterations stays, so that no NaN ever reaches the weights or a
    checkpoint; the training loop counts such steps (nonfinite_patience).

    Each replica's gradient must be of loss / num_replicas (x the loss scale), so that the sum
    is the gradient of the global-batch loss, as the original computes it on one device."""
    ctx = tf.distribute.get_replica_context()
    grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                           [tf.convert_to_tensor(g) for g in grads])
    if loss_scale is not None:
        grads = [g / loss_scale.scale for g in grads]
    # tf.linalg.global_norm's L2Loss kernel is single-threaded: a sum of squares is faster.
    norm = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(g)) for g in grads]))
    grads, _ = tf.clip_by_global_norm(grads, CLIP_NORM, use_norm=norm)
    # Keras' apply() sums gradients across replicas again: give each replica an equal share.
    shares = [g / ctx.num_replicas_in_sync for g in grads]

    def apply():
        optimizer.apply(shares, variables)

    _apply_if(tf.math.is_finite(norm), apply,
              loss_scale.update if loss_scale is not None else None)
    return norm


def checkpoint(model: keras.Model, **extra) -> tf.train.Checkpoint:
    """A checkpoint of the model's variables keyed by their paths, plus `extra` trackables
    (optimizer, RNG, loss scale). TF's object-graph tracking does not see the Keras 3
    sub-layers kept in lists and dicts (the transformer layers, the fine-tuning heads), so
    `Checkpoint(model=model)` alone would silently miss them."""
    variables = {v.path: v for v in model.weights}
    if len(variables) != len(model.weights):
        raise ValueError(f"{model.name}: two variables share a path; cannot key them by path")
    return tf.train.Checkpoint(variables=variables, **extra)


def seed_generator_states(model: keras.Model) -> list[tf.Variable]:
    """The state of the model's dropout seed generators (not among model.weights), in the
    model's order: checkpointed so that a resumed run draws the same dropout masks as an
    uninterrupted one. By order, not by path: Keras numbers auto-named seed generators per
    process (seed_generator_7), so their paths depend on what the process built before."""
    weights = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in weights]


class SkippedSteps:
    """Host-side counts of the batches whose update apply_gradients skipped (non-finite):
    in a row (for nonfinite_patience) and since the last read."""

    def __init__(self, optimizer: keras.optimizers.Optimizer, patience: int):
        self.iterations = optimizer.iterations
        self.patience = patience
        with tf.init_scope():
            self.in_a_row = tf.Variable(0, trainable=False, dtype=tf.int64)
            self.since_read = tf.Variable(0, trainable=False, dtype=tf.int64)

    def count(self, before) -> None:
        skipped = tf.cast(tf.convert_to_tensor(self.iterations) <= before, tf.int64)
        self.in_a_row.assign((self.in_a_row + skipped) * skipped)
        self.since_read.assign_add(skipped)

    def read(self) -> int:
        value = int(self.since_read.numpy())
        self.since_read.assign(0)
        return value


def run_steps(strategy: tf.distribute.Strategy, replica_fn: Callable, *,
              split_batches: bool = False, stop: tf.Variable | None = None,
              skipped: SkippedSteps | None = None):
    """A tf.function `loop(iterator, num_steps)` running `replica_fn(batch)` on every replica
    for up to `num_steps` batches: one host call (the original's iterations_per_loop). It
    returns the number of batches run: fewer when the iterator ends, when `stop` turns true
    (checked before each step) or when `skipped` counts `patience` skipped steps in a row.

    `split_batches`: the iterator yields global batches that are split among the replicas
    (see Input); otherwise it is a distributed iterator, or there is one replica."""
    replicas = strategy.num_replicas_in_sync

    def distribute(batch):
        if not split_batches or replicas == 1:
            return batch

        def shard(ctx):
            i = ctx.replica_id_in_sync_group
            return tf.nest.map_structure(
                lambda t: t[i * (t.shape[0] // replicas):(i + 1) * (t.shape[0] // replicas)],
                batch)

        return strategy.experimental_distribute_values_from_function(shard)

    def halted():
        flags = [tf.constant(False)]
        if stop is not None:
            flags.append(stop.read_value())
        if skipped is not None:
            flags.append(skipped.in_a_row >= skipped.patience)
        return tf.reduce_any(flags)

    @tf.function
    def loop(iterator: Iterator, num_steps) -> tf.Tensor:
        done = tf.constant(0, tf.int64)
        for _ in tf.range(tf.cast(num_steps, tf.int64)):
            if halted():
                break
            batch = iterator.get_next_as_optional()
            if not batch.has_value():
                break
            before = tf.convert_to_tensor(skipped.iterations) if skipped is not None else None
            strategy.run(replica_fn, args=(distribute(batch.get_value()),))
            if skipped is not None:
                skipped.count(before)
            done += 1
        return done

    return loop


def maybe_jit(fn: Callable, jit_compile: bool) -> Callable:
    """XLA-compiles the forward and backward pass. The gradient all-reduce and the optimizer
    stay outside the cluster, where tf.distribute can do its cross-replica calls."""
    return tf.function(fn, jit_compile=True) if jit_compile else fn


def format_duration(seconds: float) -> str:
    return str(datetime.timedelta(seconds=int(round(seconds))))


# ------------------------------------------------------------------------ input

class Input:
    """The batches of a run, for any strategy.

    One process (default, one_device, mirrored): one tf.data pipeline of global batches, which
    run_steps splits among the replicas inside the step. Its iterator is a plain tf.data
    iterator, so its position goes into the checkpoint and a resumed run continues the very
    stream. A multi-worker cluster or a TPU: tf.distribute's per-pipeline datasets, whose
    iterators cannot be checkpointed; a resumed run starts a fresh shuffle seeded by its step.

    make_dataset(batch_size, input_context, start_step) -> tf.data.Dataset of batches of
    batch_size (a per-pipeline size under tf.distribute); start_step re-seeds the shuffle."""

    def __init__(self, strategy: tf.distribute.Strategy,
                 make_dataset: Callable[[int, tf.distribute.InputContext, int], tf.data.Dataset],
                 global_batch_size: int):
        self.strategy = strategy
        self.make_dataset = make_dataset
        self.global_batch_size = global_batch_size
        self.checkpointable = not (multi_worker(strategy) or
                                   isinstance(strategy, tf.distribute.TPUStrategy))

    def iterator(self, start_step: int = 0):
        if self.checkpointable:
            context = tf.distribute.InputContext(1, 0, self.strategy.num_replicas_in_sync)
            return iter(self.make_dataset(self.global_batch_size, context, start_step))
        return iter(self.strategy.distribute_datasets_from_function(
            lambda ctx: self.make_dataset(ctx.get_per_replica_batch_size(self.global_batch_size),
                                          ctx, start_step)))

    def run_steps(self, replica_fn: Callable, **kwargs):
        return run_steps(self.strategy, replica_fn, split_batches=self.checkpointable, **kwargs)


# ------------------------------------------------------------------------ the loop

class Preempted(Exception):
    """Training stopped on SIGTERM/SIGINT after writing a checkpoint."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


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


class _Signals:
    """SIGTERM and SIGINT ask the loop to stop after the current step: a watcher thread sets
    `stop` (which run_steps checks before each step) as soon as one arrives, even while a host
    call runs. A second signal exits at once, without a checkpoint."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, stop: tf.Variable):
        self.stop = stop
        self.received: int | None = None
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        # Python's C-level handler writes each signal's number to the wakeup fd (from
        # whichever thread the signal lands on); the Python-level handler must be set for it.
        self._previous = {s: signal.signal(s, lambda signum, frame: None)
                          for s in self.SIGNALS}
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, name="stop-signals", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while True:
            try:
                data = os.read(self._read, 16)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                name = signal.Signals(signum).name
                if self.received is not None:
                    print(f"second {name}: exiting now, without a checkpoint", flush=True)
                    os._exit(128 + signum)
                self.received = signum
                print(f"received {name}: finishing the current step, then writing a "
                      "checkpoint (send it again to exit at once)", flush=True)
                self.stop.assign(True)

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous_fd)
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        os.close(self._write)
        self._thread.join(timeout=5)
        os.close(self._read)


class _PreemptionHandler:
    """Multi-worker clusters: TensorFlow's PreemptionCheckpointHandler. When any worker gets
    SIGTERM (or, on GCE GPU VMs, a maintenance notice), every worker checkpoints after the same
    host call and raises Preempted. SIGINT is turned into SIGTERM. The host calls must be the
    same on every worker, which _Pacer's broadcast ensures."""

    def __init__(self, strategy: tf.distribute.Strategy, checkpointer):
        self.step = 0
        self.received = None  # it raises Preempted itself

        def exit_fn():
            raise Preempted(f"preempted: every worker wrote its checkpoint at step {self.step}; "
                            "rerun the same command to resume", 128 + signal.SIGTERM)

        self.handler = tf.distribute.experimental.PreemptionCheckpointHandler(
            strategy.cluster_resolver, checkpointer,
            termination_config=tf.distribute.experimental.TerminationConfig(exit_fn=exit_fn))
        self._previous = signal.signal(signal.SIGINT,
                                       lambda s, f: os.kill(os.getpid(), signal.SIGTERM))

    def after_call(self, step: int) -> None:
        self.step = step
        logger = tf.get_logger()
        level = logger.level
        logger.setLevel(logging.ERROR)  # the handler uses its own deprecated total_run_calls
        try:
            self.handler.save_checkpoint_if_preempted(checkpoint_number=step)
        finally:
            logger.setLevel(level)

    def close(self) -> None:
        signal.signal(signal.SIGINT, self._previous)


class _Pacer:
    """Decides how many steps the next host call runs: up to `limit` (the next boundary or
    iterations_per_loop), and no more than fit, at the measured time per step, in
    MAX_HOST_CALL_SECONDS or before the next progress line is due. The first two calls run one
    step each: the first traces and compiles, the second measures. Multi-worker: the chief's
    plan is broadcast, so that every worker runs the same host calls."""

    def __init__(self, strategy: tf.distribute.Strategy, log_seconds: float):
        self.log_seconds = log_seconds
        self.seconds_per_step: float | None = None
        self.calls = 0
        self.last_line = time.time()
        self.strategy = strategy
        self.broadcast = self._make_broadcast(strategy) if multi_worker(strategy) else None

    @staticmethod
    def _make_broadcast(strategy):
        @tf.function
        def broadcast(values):
            def from_first_replica():
                ctx = tf.distribute.get_replica_context()
                mine = tf.where(ctx.replica_id_in_sync_group == 0, values,
                                tf.zeros_like(values))
                return ctx.all_reduce(tf.distribute.ReduceOp.SUM, mine)
            return strategy.experimental_local_results(strategy.run(from_first_replica))[0]
        return broadcast

    def plan(self, limit: int) -> tuple[int, bool]:
        """(steps for the next call, whether a progress line is due after it)."""
        steps, line_due = 1, False
        if self.seconds_per_step is not None:
            until_line = self.last_line + self.log_seconds - time.time()
            budget = min(MAX_HOST_CALL_SECONDS, max(until_line, 0.0))
            steps = max(1, int(budget / max(self.seconds_per_step, 1e-9)))
            line_due = steps * self.seconds_per_step >= until_line
        steps = min(steps, limit)
        if self.broadcast is not None:
            agreed = self.broadcast(tf.constant([steps, int(line_due)], tf.int64)).numpy()
            steps, line_due = int(agreed[0]), bool(agreed[1])
        return steps, line_due

    def measured(self, steps: int, seconds: float) -> None:
        """The time of a host call; the first one (tracing, compiling) says nothing."""
        self.calls += 1
        if steps > 0 and self.calls > 1:
            self.seconds_per_step = seconds / steps


def _next_multiple(step: int, every: int) -> int:
    return (step // every + 1) * every


def train(strategy: tf.distribute.Strategy, state, step_fn: Callable, input_: Input,
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
    checkpointer.track("seed_generators", seed_generator_states(state.model))
    if checkpointer.restored:
        checkpointer.restore_part("seed_generators", "the dropout streams")
    iterator = _restored_input(input_, checkpointer, step)

    skipped = SkippedSteps(optimizer, config.nonfinite_patience)
    with tf.init_scope():
        stop = tf.Variable(False, trainable=False)
    loop = input_.run_steps(step_fn, skipped=skipped,
                            stop=None if multi_worker(strategy) else stop)
    logger = ProgressLogger(config.model_dir if is_chief(strategy) else None, config.num_steps,
                            step, config.global_batch_size)
    pacer = _Pacer(strategy, config.log_seconds)
    signals = (_PreemptionHandler(strategy, checkpointer) if multi_worker(strategy)
               else _Signals(stop))
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
            if isinstance(signals, _PreemptionHandler):
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
                   if multi_worker(strategy) else "")
    print(f"trained to step {step} in {format_duration(time.time() - start)}; checkpoints in "
          f"{config.model_dir}{fingerprint}", flush=True)
    return results


def weights_fingerprint(model: keras.Model) -> float:
    """The sum of every trainable weight in float64: equal on workers that agree."""
    return float(tf.add_n([tf.reduce_sum(tf.cast(v.value, tf.float64))
                           for v in model.trainable_variables]))


def _restored_input(input_: Input, checkpointer, step: int):
    """The training iterator, at the checkpoint's position where there is one."""
    if not input_.checkpointable:
        if step:
            print("multi-worker/TPU input: the data starts a fresh shuffle, seeded by the step",
                  flush=True)
        return input_.iterator(step)
    iterator = input_.iterator()
    checkpointer.track("data", iterator)
    if checkpointer.restored and not checkpointer.restore_part("data", "the input position"):
        iterator = input_.iterator(step)  # a new order, not the start of the old one again
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


def evaluate(strategy: tf.distribute.Strategy, step_fn: Callable, input_: Input,
             num_steps: int, log_seconds: float = 30.0) -> int:
    """Runs step_fn over up to num_steps batches of input_ (fewer when the data ends), with a
    progress line at least every log_seconds. Returns the number of batches run."""
    loop = input_.run_steps(step_fn)
    iterator = input_.iterator()
    pacer = _Pacer(strategy, log_seconds)
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


# ------------------------------------------------------------------------ logging

class ProgressLogger:
    """Prints "step 200/1000 (20.0%) | 12.3 ex/s | ETA 0:10:00 | loss 10.2 ..." and writes the
    same scalars to TensorBoard (nowhere when logdir is None: a multi-worker cluster's
    non-chief workers)."""

    def __init__(self, logdir: str | None, total_steps: int, start_step: int,
                 examples_per_step: int):
        if logdir is None:
            self.writer = tf.summary.create_noop_writer()
        else:
            try:
                self.writer = tf.summary.create_file_writer(logdir)
            except tf.errors.OpError as e:
                raise OSError(f"cannot write TensorBoard events to {logdir}: "
                              f"{e.message.splitlines()[0]}") from None
        self.total_steps = total_steps
        self.examples_per_step = examples_per_step
        self.restart_clock(start_step)

    def restart_clock(self, step: int) -> None:
        """Rates and the ETA are measured from here (e.g. after the compiling first call)."""
        self.last_step, self.last_time = step, time.time()

    def log(self, step: int, scalars: dict[str, float], console_keys: tuple[str, ...],
            summary: bool = True) -> None:
        """A console line; with `summary`, the scalars (and the rates) to TensorBoard."""
        now = time.time()
        elapsed, steps = now - self.last_time, step - self.last_step
        scalars = dict(scalars)
        if steps > 0 and elapsed > 0:
            scalars["examples_per_second"] = steps * self.examples_per_step / elapsed
            scalars["steps_per_second"] = steps / elapsed
        if summary:
            self.scalars(step, scalars)
        line = f"step {step}/{self.total_steps} ({100.0 * step / self.total_steps:.1f}%)"
        if "steps_per_second" in scalars:
            eta = (self.total_steps - step) / scalars["steps_per_second"]
            line += (f" | {scalars['examples_per_second']:.1f} ex/s"
                     f" | ETA {format_duration(eta)}")
        line += "".join(f" | {k} {scalars[k]:.4g}" for k in console_keys if k in scalars)
        if scalars.get("skipped_steps"):
            line += f" | skipped {int(scalars['skipped_steps'])} non-finite steps"
        print(line, flush=True)
        if steps > 0:
            self.last_step, self.last_time = step, now

    def scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        with self.writer.as_default(step=step):
            for name, value in scalars.items():
                tf.summary.scalar(name, value)
        self.writer.flush()

    def text(self, step: int, name: str, markdown: str) -> None:
        with self.writer.as_default(step=step):
            tf.summary.text(name, markdown)
        self.writer.flush()

    def note(self, step: int, message: str) -> None:
        """A health message: on the console and as TensorBoard text."""
        print(f"step {step}: {message}", flush=True)
        self.text(step, "health", message)


def read_events(logdir: str) -> tuple[dict[str, dict[int, float]], dict[str, dict[int, str]]]:
    """(scalars, texts): tag -> step -> value, read back from every TensorBoard events file
    that a ProgressLogger wrote into logdir (the last value where a step was written twice)."""
    scalars: dict[str, dict[int, float]] = {}
    texts: dict[str, dict[int, str]] = {}
    for path in sorted(tf.io.gfile.glob(os.path.join(logdir, "events.out.tfevents*"))):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                array = tf.make_ndarray(value.tensor)
                if array.dtype.kind in "SO":
                    texts.setdefault(value.tag, {})[event.step] = array.flat[0].decode()
                else:
                    scalars.setdefault(value.tag, {})[event.step] = float(array)
    return scalars, texts
