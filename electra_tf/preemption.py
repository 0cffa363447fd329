"""Stopping a run cleanly: SIGTERM or SIGINT (a preemption notice, Ctrl-C) asks the training
loop to finish the current step, write a checkpoint and raise Preempted, whose exit code tells a
scheduler the run was stopped, not failed.

- StopSignals: one process (default, one_device, mirrored, TPU).
- PreemptionHandler: a multi-worker cluster, through TensorFlow's PreemptionCheckpointHandler,
  so that every worker saves after the same host call.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

import tensorflow as tf


class Preempted(Exception):
    """Training stopped on SIGTERM/SIGINT after writing a checkpoint."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class StopSignals:
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


class PreemptionHandler:
    """Multi-worker clusters: TensorFlow's PreemptionCheckpointHandler. When any worker gets
    SIGTERM (or, on GCE GPU VMs, a maintenance notice), every worker checkpoints after the same
    host call and raises Preempted. SIGINT is turned into SIGTERM. The host calls must be the
    same on every worker, which host_calls.Pacer's broadcast ensures."""

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
