"""tf.distribute for a training step: the strategy an hparam names, which process is the chief,
whether the step is XLA-compiled, the Keras precision while models are built, and the update that
ends every step on every replica.

- make_strategy: the tf.distribute strategy an hparam names (TPUs resolved from tpu_name,
  tpu_zone and gcp_project; multi-worker from TF_CONFIG). Create it first thing: a
  multi-worker strategy must exist before TensorFlow runs any op.
- use_xla, maybe_jit: XLA for the forward and backward pass where it works and pays.
- precision_policy: Keras mixed precision (variables stay float32).
- apply_gradients: all-reduce, un-scale, clip at global norm 1.0 and apply, in replica context.
  A step whose gradient norm is not finite is skipped: nothing is applied and
  optimizer.iterations does not move.
- DynamicLossScale: float16 loss scaling.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Callable

import keras
import tensorflow as tf

from electra_tf import hardware

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
    if name == "multi_worker_mirrored":
        try:
            return tf.distribute.MultiWorkerMirroredStrategy()
        except RuntimeError as e:
            raise RuntimeError(
                f"{e}: create the strategy (distribution.make_strategy) before anything else runs "
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


def use_xla(requested: bool | None, strategy: tf.distribute.Strategy) -> bool:
    """Whether to XLA-compile the forward and backward pass.

    Default (None): on for GPUs and TPUs (TPUs always compile anyway), off on CPUs, where XLA
    measured slower (docs/performance.md) and where MirroredStrategy over several CPU devices
    cannot use it at all."""
    works = not (strategy.num_replicas_in_sync > 1 and hardware.on_cpu(strategy))
    if requested and not works:
        log.warning("jit_compile=true does not work with several replicas on CPU devices; "
                    "running without XLA")
    if requested is None:
        return not hardware.on_cpu(strategy)
    return bool(requested) and works


def maybe_jit(fn: Callable, jit_compile: bool) -> Callable:
    """XLA-compiles the forward and backward pass. The gradient all-reduce and the optimizer
    stay outside the cluster, where tf.distribute can do its cross-replica calls. Without
    AutoGraph, as the step it is part of (host_calls.run_steps)."""
    return tf.function(fn, jit_compile=True, autograph=False) if jit_compile else fn


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
