"""The front door of every command line: flags parsed, `--help` and usage errors answered
before TensorFlow (a few seconds to import) is loaded. It lives outside the electra_tf package
because importing the package imports TensorFlow (it registers the Keras classes).

- run(main, reference): absl's app.run, except that `--help` (`-h`, `--helpshort`,
  `--helpfull`) prints the script's docstring, its own flags (not those of the libraries it
  imports) and where every hyperparameter is documented, and exits 0; a usage or flag error
  prints one line, `error: ...`, and exits 2 instead of the whole help text. After the flags
  are parsed it imports electra_tf (oneDNN decided, CUDA's false no-driver error dropped), then
  calls main.
- The scripts define their flags with absl and import electra_tf inside their functions;
  the TFRecord builders import it with their module (their worker processes need it), so
  their flags are parsed after TensorFlow has loaded.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Sequence

from absl import app, flags

HELP_FLAGS = ("--help", "-h", "--helpshort", "--helpfull", "-?")
USAGE_EXIT_CODE = 2  # as argparse: a usage error, not a failure of the work
# The modules whose flags a command's --help lists: the script's and this project's.
_OUR_MODULES = ("command_line", "electra_tf", "pretrain_data")


def error(message: str) -> None:
    """A usage error: prints `error: message` and a pointer to --help, and exits with
    USAGE_EXIT_CODE."""
    script = os.path.basename(sys.argv[0])
    print(f"error: {message}\n(python {script} --help for the flags)", file=sys.stderr,
          flush=True)
    sys.exit(USAGE_EXIT_CODE)


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


def _ours(module: str) -> bool:
    return module == sys.argv[0] or module.split(".")[0] in _OUR_MODULES


def _print_help(reference: str) -> None:
    doc = (sys.modules["__main__"].__doc__ or "").strip()
    modules = [m for m in flags.FLAGS.flags_by_module_dict() if _ours(m)]
    print(doc + "\n\nflags:\n" + "\n".join(flags.FLAGS.module_help(m) for m in modules))
    print(f"\nThe reference for this command (every option, what it reads and writes): "
          f"{reference} in the repository.")


# The original builders' negated flags (argparse's store_false), which absl spells --noNAME.
NEGATED_SPELLINGS = {"--no-lower-case": "do_lower_case", "--no-strip-accents": "do_strip_accents"}


def _parse(reference: str) -> Callable[[list[str]], list[str]]:
    def parse(argv: list[str]) -> list[str]:
        if any(arg in HELP_FLAGS for arg in argv[1:]):
            _print_help(reference)
            sys.exit(0)
        argv = [f"--no{NEGATED_SPELLINGS[arg]}" if NEGATED_SPELLINGS.get(arg) in flags.FLAGS
                else arg for arg in argv]
        try:
            return flags.FLAGS(argv)
        except flags.Error as e:
            error(str(e))
    return parse


def run(main: Callable[[Sequence[str]], None], reference: str) -> None:
    """app.run(main) with short usage errors and a --help that exits 0 (module docstring)."""

    def wrapped(argv: Sequence[str]) -> None:
        import electra_tf  # noqa: F401  (oneDNN decided before TensorFlow loads; see hardware)

        try:
            main(argv)
        except app.UsageError as e:
            error(str(e))

    app.run(wrapped, flags_parser=_parse(reference))
