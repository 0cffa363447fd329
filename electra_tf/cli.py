"""What the command lines share once their flags are parsed (command_line.py, outside the
package, parses them and answers --help before TensorFlow loads).

- hide_xla_notice(): TensorFlow announces its first XLA compilation with "Compiled cluster using
  XLA!" (and an absl notice about logging before InitializeLog); the fused kernels are small
  XLA functions even with jit_compile off, so the line says nothing about the training step.
  Compiling a trivial function once, with stderr held back, uses up that once-per-process line.
- make_strategy(), reported_stops(): the strategy a config names; a run's stops as one line.
- run_training_command(): the main() of run_pretraining.py and run_finetuning.py, which differ
  only in how they read their config, what they run and which of its errors are the user's.
"""

from __future__ import annotations

import contextlib
import re
import sys
from typing import Any, Callable, Iterator

from electra_tf import hardware

_XLA_NOTICE = re.compile(r"Compiled cluster using XLA|All log messages before "
                         r"absl::InitializeLog\(\) is called are written to STDERR")


def fail(message: str) -> None:
    """The work failed in a way the message explains: prints `error: message`, exits 1."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def hide_xla_notice() -> None:
    """Uses up TensorFlow's once-per-process "Compiled cluster using XLA!" line (see the module
    docstring). Call it after the tf.distribute strategy exists."""
    import tensorflow as tf

    with hardware.stderr_without(_XLA_NOTICE):
        tf.function(lambda x: x + 1.0, jit_compile=True)(tf.constant(0.0))


def make_strategy(config, num_cpu_devices: int = 0):
    """The tf.distribute strategy the config (pretraining's or fine-tuning's) names. Call it
    before anything else runs a TensorFlow op: a multi-worker strategy cannot be made after."""
    from electra_tf import distribution

    distribution.split_cpu(num_cpu_devices)
    strategy = distribution.make_strategy(config.strategy, config.tpu_name, config.tpu_zone,
                                          config.gcp_project)
    hide_xla_notice()
    return strategy


@contextlib.contextmanager
def reported_stops() -> Iterator[None]:
    """A training run's stops as a user should see them: a preemption prints its line and
    exits with its code (143 for SIGTERM, 130 for SIGINT); a divergence, an unreadable input
    file, a checkpoint that cannot be read or written or another file that cannot be written
    prints `error: ...` and exits 1."""
    from electra_tf import files, preemption, resume, training

    try:
        yield
    except preemption.Preempted as e:
        print(e, flush=True)
        sys.exit(e.exit_code)
    except (training.Diverged, training.InputDataError, resume.CheckpointError,
            resume.CheckpointWriteError, files.WriteError) as e:
        fail(str(e))


def run_training_command(argv: list[str], from_hparams: Callable[[str, str, Any], Any],
                         run: Callable[[Any, Any], Any],
                         usage_errors: tuple[type[Exception], ...] = ()) -> None:
    """Builds the config from --model_name, --data_dir and --hparams, then the strategy, and
    runs `run(config, strategy)`. A bad config, a missing file or one of `usage_errors` is a
    usage error (one line and the flags' help); a stop is reported as reported_stops() says."""
    from absl import app, flags, logging

    from electra_tf.hparam_parsing import ConfigError

    logging.set_verbosity(logging.WARNING)
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    given = flags.FLAGS
    try:
        config = from_hparams(given.model_name, given.data_dir, given.hparams)
        strategy = make_strategy(config, given.num_cpu_devices)
    except (ConfigError, FileNotFoundError) as e:
        raise app.UsageError(str(e)) from None
    with reported_stops():
        try:
            run(config, strategy)
        except (ConfigError, FileNotFoundError, *usage_errors) as e:
            raise app.UsageError(str(e)) from None
