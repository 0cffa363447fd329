"""A run's progress: the console line and the TensorBoard scalars and texts (ProgressLogger),
and reading them back from the events files (read_events)."""

from __future__ import annotations

import datetime
import os
import time
from typing import Mapping

import tensorflow as tf


def format_duration(seconds: float) -> str:
    return str(datetime.timedelta(seconds=int(round(seconds))))


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
