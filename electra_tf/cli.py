"""What every command line of the project shares (absl underneath).

- run(main, reference): absl's app.run, except that `--help` (`-h`, `--helpshort`,
  `--helpfull`) prints the script's docstring, its flags and where every hyperparameter is
  documented, and exits 0; a usage or flag error prints one line, `error: ...`, and exits 2
  instead of the whole help text.
- hide_xla_notice(): TensorFlow announces its first XLA compilation with "Compiled cluster using
  XLA!" (and an absl notice about logging before InitializeLog); the fused kernels are small
  XLA functions even with jit_compile off, so the line says nothing about the training step.
  Compiling a trivial function once, with stderr held back, uses up that once-per-process line.

On a machine without an NVIDIA driver, TensorFlow's CUDA build logs
`E ... failed call to cuInit` when it first looks for GPUs; run() looks for them right after
parsing the flags with stderr held back and drops that line only there and only then (a
machine with a driver keeps it).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from typing import Callable, Iterator, Pattern, Sequence

from absl import app, flags

HELP_FLAGS = ("--help", "-h", "--helpshort", "--helpfull", "-?")
USAGE_EXIT_CODE = 2  # as argparse: a usage error, not a failure of the work

_NO_DRIVER_CUDA = re.compile(r"failed call to cuInit")
_XLA_NOTICE = re.compile(r"Compiled cluster using XLA|All log messages before "
                         r"absl::InitializeLog\(\) is called are written to STDERR")


def error(message: str) -> None:
    """A usage error: prints `error: message` and a pointer to --help, and exits with
    USAGE_EXIT_CODE."""
    script = os.path.basename(sys.argv[0])
    print(f"error: {message}\n(python {script} --help for the flags)", file=sys.stderr,
          flush=True)
    sys.exit(USAGE_EXIT_CODE)


def fail(message: str) -> None:
    """The work failed in a way the message explains: prints `error: message`, exits 1."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def define_run_flags(data_dir_help: str, model_name_help: str) -> None:
    """The flags both run commands share. Defined once per process: the first command imported
    describes them, so that both modules can be imported together (as the tests do)."""
    if "data_dir" in flags.FLAGS:
        return
    flags.DEFINE_string("data_dir", None, data_dir_help)
    flags.DEFINE_string("model_name", None, model_name_help)
    flags.DEFINE_string("hparams", "{}", "JSON dict of hyperparameters, or a path to a .json file.")
    flags.DEFINE_integer("num_cpu_devices", 0, "Split the host CPU into this many logical devices "
                         "(to try the mirrored strategy without GPUs).")
    # The original's README spells the flags with dashes.
    flags.DEFINE_alias("data-dir", "data_dir")
    flags.DEFINE_alias("model-name", "model_name")


def _print_help(reference: str) -> None:
    doc = (sys.modules["__main__"].__doc__ or "").strip()
    modules = flags.FLAGS.flags_by_module_dict()
    ours = [m for m in modules if not m.startswith("absl.")]
    print(doc + "\n\nflags:\n" + "\n".join(flags.FLAGS.module_help(m) for m in ours))
    print(f"\nThe reference for this command (every option, what it reads and writes): "
          f"{reference} in the repository.")


def _parse(reference: str) -> Callable[[list[str]], list[str]]:
    def parse(argv: list[str]) -> list[str]:
        if any(arg in HELP_FLAGS for arg in argv[1:]):
            _print_help(reference)
            sys.exit(0)
        try:
            remaining = flags.FLAGS(argv)
        except flags.Error as e:
            error(str(e))
        # Here, before absl's after-init callbacks: TensorFlow registers one that looks for GPUs.
        _probe_devices()
        return remaining
    return parse


@contextlib.contextmanager
def _stderr_without(pattern: Pattern[str]) -> Iterator[None]:
    """Holds back what is written to file descriptor 2 (Python and C++ alike) and writes it
    out afterwards without the lines matching `pattern`."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().decode(errors="replace").splitlines(True)
                    if not pattern.search(line)]
            if kept:
                os.write(2, "".join(kept).encode())


def _has_nvidia_driver() -> bool:
    return os.path.exists("/proc/driver/nvidia/version")


def _probe_devices() -> None:
    import tensorflow as tf

    if _has_nvidia_driver():
        tf.config.list_physical_devices()
        return
    with _stderr_without(_NO_DRIVER_CUDA):
        # Lists the devices without initialising the runtime, so that a multi-worker strategy
        # can still be created afterwards.
        tf.config.list_physical_devices()


def hide_xla_notice() -> None:
    """Uses up TensorFlow's once-per-process "Compiled cluster using XLA!" line (see the module
    docstring). Call it after the tf.distribute strategy exists."""
    import tensorflow as tf

    with _stderr_without(_XLA_NOTICE):
        tf.function(lambda x: x + 1.0, jit_compile=True)(tf.constant(0.0))


def make_strategy(config, num_cpu_devices: int = 0):
    """The tf.distribute strategy the config (pretraining's or fine-tuning's) names. Call it
    before anything else runs a TensorFlow op: a multi-worker strategy cannot be made after."""
    from electra_tf import training

    training.split_cpu(num_cpu_devices)
    strategy = training.make_strategy(config.strategy, config.tpu_name, config.tpu_zone,
                                      config.gcp_project)
    hide_xla_notice()
    return strategy


@contextlib.contextmanager
def reported_stops() -> Iterator[None]:
    """A training run's stops as a user should see them: a preemption prints its line and
    exits with its code (143 for SIGTERM, 130 for SIGINT); a divergence, an unreadable input
    file or a checkpoint that cannot be read or written prints `error: ...` and exits 1."""
    from electra_tf import resume, training

    try:
        yield
    except training.Preempted as e:
        print(e, flush=True)
        sys.exit(e.exit_code)
    except (training.Diverged, training.InputDataError, resume.CheckpointError,
            resume.CheckpointWriteError) as e:
        fail(str(e))


def run(main: Callable[[Sequence[str]], None], reference: str) -> None:
    """app.run(main) with short usage errors and a --help that exits 0 (module docstring)."""

    def wrapped(argv: Sequence[str]) -> None:
        try:
            main(argv)
        except app.UsageError as e:
            error(str(e))

    app.run(wrapped, flags_parser=_parse(reference))
