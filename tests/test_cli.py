"""Every command line: --help exits 0, lists its own flags and names its reference doc, before
TensorFlow loads; a usage error is one line; no CUDA line (cuInit's false error, the no-driver
notice) on a machine without an NVIDIA driver, in any script that imports electra_tf, and every
script that imports TensorFlow at the top imports electra_tf first. And the installed package is
found even beside a folder with its name."""

import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import REPO

# One test process builds the module's `fresh` interpreters (-n 2: pytest.ini's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_cli")

COMMANDS = {
    "run_pretraining.py": "docs/pretraining.md",
    "run_finetuning.py": "docs/finetuning.md",
    "run_ensemble.py": "docs/finetuning.md#ensembles",
    "convert_checkpoint.py": "docs/checkpoints.md",
    "pretrain_data/build_pretraining_dataset.py": "docs/data.md",
    "pretrain_data/build_openwebtext_pretraining_dataset.py": "docs/data.md",
    "pretrain_data/build_vocab.py": "docs/data.md",
}


def _run_all(argv, scripts=tuple(COMMANDS)):
    """Runs the commands at once (they spend their time importing TensorFlow)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    procs = {script: subprocess.Popen([sys.executable, script, *argv], cwd=REPO, env=env,
                                      text=True, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE)
             for script in scripts}
    outputs = {script: proc.communicate(timeout=600) for script, proc in procs.items()}
    return {script: (procs[script].returncode, *outputs[script]) for script in procs}


# The command lines whose cheapest invocation (--help) imports TensorFlow: their imports are at
# the top of the file, as the worker processes they start need.
TENSORFLOW_AT_HELP = ("pretrain_data/build_pretraining_dataset.py",
                      "pretrain_data/build_openwebtext_pretraining_dataset.py")
# The other scripts that import TensorFlow at the top of the file: the benchmarks and figures.
# Each must import electra_tf before anything that loads TensorFlow, as the command lines above
# do; that they do is read from their source (a fresh interpreter each would cost seconds).
TENSORFLOW_AT_THE_TOP = ("benchmarks/pretrain_throughput.py", "benchmarks/finetune_throughput.py",
                         "benchmarks/data_throughput.py", "benchmarks/memory.py",
                         "docs/figures/make_figures.py",
                         *TENSORFLOW_AT_HELP)
_LOADS_TENSORFLOW = {"tensorflow", "keras", "tensorflow_text", "tensorflow_datasets", "tf_keras",
                     "official", "tensorboard"}
# Any line of TensorFlow's CUDA build about CUDA (on a machine without a driver, noise).
_CUDA_LINE = re.compile(r"cuInit|cuda", re.IGNORECASE)
# A user's script beside a folder named electra_tf: it imports the package, then TensorFlow,
# and looks for GPUs (run with every TensorFlow log line on).
_BESIDE = ("import electra_tf\nprint(electra_tf.__file__, electra_tf.ElectraDiscriminator)\n"
           "import tensorflow as tf\n"
           "print(tf.config.list_physical_devices('GPU'), float(tf.constant(1.0) + 1))\n")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """The fresh interpreters the start-up tests below read, started together: each spends its
    seconds importing TensorFlow, and started at once they share the cores instead of queuing.
    name -> a function that waits for that process and returns (returncode, stdout, stderr)."""
    root = tmp_path_factory.mktemp("fresh")
    (root / "beside" / "electra_tf").mkdir(parents=True)  # a folder named like the package
    (root / "beside" / "mine.py").write_text(_BESIDE)
    (root / "missing").mkdir()
    quiet = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    all_logs = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"}  # every line TensorFlow logs
    # A command in TENSORFLOW_AT_HELP answers its help test from its ("cuda", script) run: the
    # log level changes stderr only. (The other commands' --help runs in
    # test_flags_are_parsed_before_tensorflow_loads.)
    runs = {"missing_input": (["run_pretraining.py", f"--data_dir={root / 'missing'}",
                               "--model_name=x"], REPO, quiet),
            **{("cuda", script): ([script, "--help"], REPO, all_logs)
               for script in TENSORFLOW_AT_HELP},
            "beside": ([str(root / "beside" / "mine.py")], root / "beside", all_logs)}
    procs = {}
    for i, (name, (argv, cwd, env)) in enumerate(runs.items()):
        # Files, not pipes: nobody reads a process's output until its test runs.
        with open(root / f"{i}.out", "w") as out, open(root / f"{i}.err", "w") as err:
            procs[name] = (i, subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env,
                                               text=True, stdout=out, stderr=err))

    def result(name):
        i, proc = procs[name]
        proc.wait(timeout=600)
        return (proc.returncode, (root / f"{i}.out").read_text(),
                (root / f"{i}.err").read_text())

    result.missing_dir = root / "missing"
    yield result
    for _, proc in procs.values():
        proc.kill()
        proc.wait()


def _check_help(script: str, out: str) -> None:
    """--help lists flags and names the command's reference doc."""
    assert f"reference for this command (every option, what it reads and writes): " \
           f"{COMMANDS[script]}" in out, script
    assert "flags:" in out and "--" in out, script


def test_help_exits_0_and_points_to_the_reference(fresh):
    """The commands that import TensorFlow at --help (the others:
    test_flags_are_parsed_before_tensorflow_loads)."""
    assert set(COMMANDS) == {*TENSORFLOW_AT_HELP, *LIGHT_COMMANDS}
    for script in TENSORFLOW_AT_HELP:
        rc, out, err = fresh(("cuda", script))
        assert rc == 0, (script, err[-2000:])
        _check_help(script, out)


def test_run_finetunings_help_says_what_a_rerun_does():
    """--help prints the module docstring: a finished run is retrained, as the original does
    (test_resilience checks the behaviour), only an interrupted one skips its finished trials."""
    import run_finetuning

    doc = " ".join(run_finetuning.__doc__.split())
    assert "resumes that trial and skips the trials that run finished" in doc
    assert "Rerunning a run that finished (or with other hparams) trains every trial afresh, " \
        "as the original does" in doc


# The commands whose flags are parsed before TensorFlow is imported (the builders import it with
# their module, which their worker processes need).
LIGHT_COMMANDS = ("run_pretraining.py", "run_finetuning.py", "run_ensemble.py",
                  "convert_checkpoint.py", "pretrain_data/build_vocab.py")
_REPORT_IMPORTS = """
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as e:
    print("exit", e.code, "tensorflow imported:", "tensorflow" in sys.modules)
"""


@pytest.mark.parametrize("argv", [["--help"], ["--no_such_flag=1"]], ids=["help", "bad_flag"])
def test_flags_are_parsed_before_tensorflow_loads(argv):
    """--help and a flag error answer without importing TensorFlow (seconds), and --help lists
    the command's own flags, not TensorFlow's (--tt_check_filter, --hbm_oom_exit), and names
    the command's reference doc."""
    procs = {script: subprocess.Popen([sys.executable, "-c", _REPORT_IMPORTS, script, *argv],
                                      cwd=REPO, text=True, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE)
             for script in LIGHT_COMMANDS}
    code = 0 if argv == ["--help"] else 2
    for script, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert out.splitlines()[-1] == f"exit {code} tensorflow imported: False", (script, err)
        if argv == ["--help"]:
            _check_help(script, out)
            assert "--tt_check_filter" not in out and "--hbm_oom_exit" not in out, script
            help_text = out.split("flags:")[1].rsplit("\nexit ", 1)[0]
            assert "tensorflow" not in help_text, script


def test_a_usage_error_is_one_line_without_the_help():
    # The same command_line.run serves every command (the --help test shows each uses it).
    results = _run_all(["--no_such_flag=1"],
                       ("run_finetuning.py", "pretrain_data/build_vocab.py"))
    for script, (rc, out, err) in results.items():
        assert rc == 2, (script, err[-2000:])
        assert err.startswith("error: Unknown command line flag 'no_such_flag'\n"), (script, err)
        assert "flags:" not in err and "cuInit" not in err, script


@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia/version"),
                    reason="a machine with an NVIDIA driver keeps CUDA's messages")
def test_a_missing_input_is_one_line_and_no_cuda_error(fresh):
    returncode, _, stderr = fresh("missing_input")
    assert returncode == 2
    assert stderr == (f"error: vocab file {fresh.missing_dir}/vocab.txt not found: put the "
                      "vocabulary at DATA_DIR/vocab.txt or set the vocab_file hparam\n"
                      "(python run_pretraining.py --help for the flags)\n")


@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia/version"),
                    reason="a machine with an NVIDIA driver keeps CUDA's messages")
def test_importing_the_package_drops_the_cuda_no_driver_lines(fresh):
    """Scripts other than the command lines (benchmarks, experiments, the figures) import
    electra_tf first: TensorFlow, imported and looking for GPUs, says nothing about CUDA on a
    CPU machine (TensorFlow's own start-up notices, oneDNN's, stay)."""
    returncode, stdout, stderr = fresh("beside")
    assert returncode == 0, stderr[-2000:]
    assert stdout.endswith("\n[] 2.0\n")
    assert not _CUDA_LINE.search(stderr), stderr


@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia/version"),
                    reason="a machine with an NVIDIA driver keeps CUDA's messages")
def test_no_script_that_imports_tensorflow_says_anything_about_cuda(fresh):
    """The TFRecord builders import TensorFlow before they parse their flags; with every
    TensorFlow log line on, none is about CUDA."""
    for script in TENSORFLOW_AT_HELP:
        returncode, stdout, stderr = fresh(("cuda", script))
        assert returncode == 0, (script, stderr[-2000:])
        assert "usage" in stdout.lower() or "flags" in stdout, (script, stdout[-500:])
        assert not _CUDA_LINE.search(stderr), (script, stderr)


def _first_import_that_decides(path: pathlib.Path) -> str | None:
    """The first module-level import of `path`, in source order and through the repository's
    own modules it imports, that is electra_tf or loads TensorFlow; None if there is none."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top == "electra_tf" or top in _LOADS_TENSORFLOW:
                return top
            for root in (path.parent, REPO, REPO / "benchmarks"):
                local = root / (name.replace(".", "/") + ".py")
                if local.is_file() and (found := _first_import_that_decides(local)):
                    return found
    return None


def test_every_script_that_imports_tensorflow_at_the_top_imports_electra_tf_first(tmp_path):
    for script in TENSORFLOW_AT_THE_TOP:
        assert _first_import_that_decides(REPO / script) == "electra_tf", script
    # The check itself, through a module beside the script and a repository module.
    (tmp_path / "helper.py").write_text("import numpy\nfrom keras import ops\n")
    (tmp_path / "script.py").write_text("import os\nimport helper\nimport electra_tf\n")
    assert _first_import_that_decides(tmp_path / "script.py") == "keras"
    (tmp_path / "script.py").write_text("import pretrain_throughput\nimport tensorflow\n")
    assert _first_import_that_decides(tmp_path / "script.py") == "electra_tf"


def test_a_folder_named_like_the_package_beside_a_script_does_not_hide_it(fresh):
    """A clone (or any folder) called electra_tf next to the user's script would be imported as
    an empty namespace package if the installed package were found after it."""
    returncode, stdout, stderr = fresh("beside")
    assert returncode == 0, stderr[-2000:]
    assert stdout.split()[0].endswith(os.path.join("electra_tf", "__init__.py"))


def test_optimizer_state_beside_another_format_is_refused_before_tensorflow_loads(tmp_path):
    out = subprocess.run([sys.executable, "-c", _REPORT_IMPORTS, "convert_checkpoint.py",
                          "--input", str(tmp_path), "--output", str(tmp_path / "out"),
                          "--to", "hf", "--optimizer_state"],
                         cwd=REPO, text=True, capture_output=True, timeout=300)
    assert out.stdout.splitlines()[-1] == "exit 2 tensorflow imported: False", out.stderr
    assert out.stderr.startswith(
        "error: flags optimizer_state=True, to=hf: --optimizer_state writes the original's Adam "
        "slots, which only --to tf1 holds: drop it, or convert --to tf1\n"), out.stderr
