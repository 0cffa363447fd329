"""Distributed-training machinery shared by pretraining and fine-tuning.

- make_strategy: the tf.distribute strategy an hparam names (TPUs resolved from tpu_name,
  tpu_zone and gcp_project; multi-worker from TF_CONFIG).
- precision_policy: Keras mixed precision (variables stay float32).
- apply_gradients: all-reduce, un-scale, clip at global norm 1.0 and apply, in replica context.
- DynamicLossScale: float16 loss scaling that skips steps with non-finite gradients.
- ProgressLogger: the console line and TensorBoard scalars.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import time
from typing import Callable, Iterator

import keras
import tensorflow as tf

log = logging.getLogger("electra_tf")

CLIP_NORM = 1.0  # the original clips the global gradient norm at 1.0


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
    gpus = tf.config.list_logical_devices("GPU")
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if name == "mirrored":
        # Without GPUs, mirror over the logical CPUs (see split_cpu).
        devices = None if gpus else [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu_name or "", zone=tpu_zone, project=gcp_project)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(f"unknown strategy {name!r}")


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


class DynamicLossScale(tf.Module):
    """Float16 loss scaling: the loss is multiplied by `scale`; a step whose gradients are not
    finite is skipped and halves the scale; `growth_interval` finite steps in a row double it."""

    def __init__(self, initial_scale: float = 2.0 ** 15, growth_interval: int = 2000):
        super().__init__(name="loss_scale")
        self.growth_interval = growth_interval
        self.scale = tf.Variable(initial_scale, trainable=False, dtype=tf.float32,
                                 aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self.good_steps = tf.Variable(0, trainable=False, dtype=tf.int64,
                                      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def apply_if_finite(self, finite, apply_fn: Callable[[], None]) -> None:
        """Runs apply_fn in every replica when `finite` (the same on all replicas), and updates
        the scale. The condition has to be taken in cross-replica context because the
        optimizer's apply itself calls merge_call."""

        def cross_replica(strategy, finite):
            finite = strategy.experimental_local_results(finite)[0]

            def apply_and_grow():
                strategy.extended.call_for_each_replica(apply_fn)
                grow = self.good_steps + 1 >= self.growth_interval
                self.scale.assign(tf.where(grow, self.scale * 2.0, self.scale))
                self.good_steps.assign(tf.where(grow, tf.constant(0, tf.int64),
                                                self.good_steps + 1))
                return tf.constant(True)

            def skip_and_shrink():
                self.scale.assign(tf.maximum(self.scale / 2.0, 1.0))
                self.good_steps.assign(0)
                return tf.constant(False)

            tf.cond(finite, apply_and_grow, skip_and_shrink)

        tf.distribute.get_replica_context().merge_call(cross_replica, args=(finite,))


def apply_gradients(optimizer: keras.optimizers.Optimizer, grads, variables,
                    loss_scale: DynamicLossScale | None = None) -> tf.Tensor:
    """In replica context: sums gradients over replicas, removes the loss scale, clips the
    global norm at CLIP_NORM and applies them. Returns the (unclipped) global norm.

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

    if loss_scale is None:
        apply()
    else:
        loss_scale.apply_if_finite(tf.math.is_finite(norm), apply)
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


def run_steps(strategy: tf.distribute.Strategy, replica_fn: Callable):
    """A tf.function running `replica_fn(batch)` on every replica for `num_steps` batches of a
    distributed iterator: the original's iterations_per_loop, one host call per loop."""

    @tf.function
    def loop(iterator: Iterator, num_steps: tf.Tensor):
        for _ in tf.range(num_steps):
            strategy.run(replica_fn, args=(next(iterator),))

    return loop


def maybe_jit(fn: Callable, jit_compile: bool) -> Callable:
    """XLA-compiles the forward and backward pass. The gradient all-reduce and the optimizer
    stay outside the cluster, where tf.distribute can do its cross-replica calls."""
    return tf.function(fn, jit_compile=True) if jit_compile else fn


def format_duration(seconds: float) -> str:
    return str(datetime.timedelta(seconds=int(round(seconds))))


class ProgressLogger:
    """Prints "step 200/1000 (20.0%) | 12.3 ex/s | ETA 0:10:00 | loss 10.2 ..." and writes the
    same scalars to TensorBoard."""

    def __init__(self, logdir: str, total_steps: int, start_step: int, examples_per_step: int):
        self.writer = tf.summary.create_file_writer(logdir)
        self.total_steps = total_steps
        self.examples_per_step = examples_per_step
        self.last_step = start_step
        self.last_time = time.time()

    def log(self, step: int, scalars: dict[str, float], console_keys: tuple[str, ...]) -> None:
        now = time.time()
        elapsed, steps = now - self.last_time, step - self.last_step
        scalars = dict(scalars)
        if steps > 0 and elapsed > 0:
            scalars["examples_per_second"] = steps * self.examples_per_step / elapsed
            scalars["steps_per_second"] = steps / elapsed
        with self.writer.as_default(step=step):
            for name, value in scalars.items():
                tf.summary.scalar(name, value)
        self.writer.flush()
        line = f"step {step}/{self.total_steps} ({100.0 * step / self.total_steps:.1f}%)"
        if "steps_per_second" in scalars:
            eta = (self.total_steps - step) / scalars["steps_per_second"]
            line += (f" | {scalars['examples_per_second']:.1f} ex/s"
                     f" | ETA {format_duration(eta)}")
        line += "".join(f" | {k} {scalars[k]:.4g}" for k in console_keys if k in scalars)
        print(line, flush=True)
        self.last_step, self.last_time = step, now

    def text(self, step: int, name: str, markdown: str) -> None:
        with self.writer.as_default(step=step):
            tf.summary.text(name, markdown)
        self.writer.flush()
