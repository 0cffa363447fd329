"""Host calls: one tf.function runs up to iterations_per_loop training steps on every replica
(the original's TPUEstimator loop), so that Python is entered once per call, not once per step.

- run_steps: one host call, stopping early when the data ends, a stop is asked for, or too many
  updates in a row were skipped (SkippedSteps).
- Batches: what a host call reads, for any strategy; checkpointable where one process feeds
  every replica.
- Pacer: how many steps the next host call runs, so that one never runs much past
  MAX_HOST_CALL_SECONDS nor past the next progress line.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator

import keras
import tensorflow as tf

from electra_tf import distribution

# A host call is cut short when its steps would take longer than this: under multi-worker
# training it bounds how long a preemption notice waits (TF's PreemptionCheckpointHandler acts
# between host calls); its overhead (a few ms) stays negligible.
MAX_HOST_CALL_SECONDS = 10.0


class SkippedSteps:
    """Host-side counts of the batches whose update distribution.apply_gradients skipped (not
    finite): in a row (for nonfinite_patience) and since the last read."""

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
    (see Batches); otherwise it is a distributed iterator, or there is one replica."""
    replicas = strategy.num_replicas_in_sync
    # AutoGraph converts the loop below, not the step: the steps branch with tf.cond, so
    # converting them (and every function they call) would only add tracing time.
    step_fn = tf.autograph.experimental.do_not_convert(replica_fn)

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
            strategy.run(step_fn, args=(distribute(batch.get_value()),))
            if skipped is not None:
                skipped.count(before)
            done += 1
        return done

    return loop


class Batches:
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
        self.checkpointable = not (distribution.multi_worker(strategy) or
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


class Pacer:
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
        self.broadcast = (self._make_broadcast(strategy) if distribution.multi_worker(strategy)
                          else None)

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
