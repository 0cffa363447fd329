"""Every command line: --help exits 0 and names its reference doc; a usage error is one line;
no false CUDA error on a machine without an NVIDIA driver. And the installed package is found
even beside a folder with its name."""

import os
import subprocess
import sys

import pytest

from conftest import REPO

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


def test_help_exits_0_and_points_to_the_reference():
    for script, (rc, out, err) in _run_all(["--help"]).items():
        assert rc == 0, (script, err[-2000:])
        assert f"reference for this command (every option, what it reads and writes): " \
               f"{COMMANDS[script]}" in out, script
        assert "flags:" in out and "--" in out, script


def test_run_finetunings_help_says_what_a_rerun_does():
    """--help prints the module docstring: a finished run is retrained, as the original does
    (test_resilience checks the behaviour), only an interrupted one skips its finished trials."""
    import run_finetuning

    doc = " ".join(run_finetuning.__doc__.split())
    assert "resumes that trial and skips the trials that run finished" in doc
    assert "Rerunning a run that finished (or with other hparams) trains every trial afresh, " \
        "as the original does" in doc


def test_a_usage_error_is_one_line_without_the_help():
    # The same cli.run serves every command (the --help test shows each uses it).
    results = _run_all(["--no_such_flag=1"],
                       ("run_finetuning.py", "pretrain_data/build_vocab.py"))
    for script, (rc, out, err) in results.items():
        assert rc == 2, (script, err[-2000:])
        assert err.startswith("error: Unknown command line flag 'no_such_flag'\n"), (script, err)
        assert "flags:" not in err and "cuInit" not in err, script


@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia/version"),
                    reason="a machine with an NVIDIA driver keeps CUDA's messages")
def test_a_missing_input_is_one_line_and_no_cuda_error(tmp_path):
    result = subprocess.run([sys.executable, "run_pretraining.py", f"--data_dir={tmp_path}",
                             "--model_name=x"], cwd=REPO, capture_output=True, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=600)
    assert result.returncode == 2
    assert result.stderr == (f"error: vocab file {tmp_path}/vocab.txt not found: put the "
                             "vocabulary at DATA_DIR/vocab.txt or set the vocab_file hparam\n"
                             "(python run_pretraining.py --help for the flags)\n")


def test_a_folder_named_like_the_package_beside_a_script_does_not_hide_it(tmp_path):
    """A clone (or any folder) called electra_tf next to the user's script would be imported as
    an empty namespace package if the installed package were found after it."""
    (tmp_path / "electra_tf").mkdir()
    script = tmp_path / "mine.py"
    script.write_text("import electra_tf\nprint(electra_tf.__file__, electra_tf.ElectraDiscriminator)\n")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, text=True,
                            capture_output=True, timeout=300,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[0].endswith(os.path.join("electra_tf", "__init__.py"))
