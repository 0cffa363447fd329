"""Long-run resilience of run_pretraining.py, in subprocesses as a user meets it: SIGTERM and
SIGINT checkpoint and exit, a resumed run equals the uninterrupted one bit for bit, kill -9
loses at most one save interval, a diverging run stops without saving NaN weights, a damaged
TFRecord is named, a full disk is reported."""

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, TINY_MODEL, run_script, write_tfrecords


def _hparams(**extra):
    return json.dumps({**TINY_MODEL, "text_summary_steps": 0, **extra})


def _command(data_dir, name, hparams):
    return [sys.executable, "run_pretraining.py", f"--data_dir={data_dir}",
            f"--model_name={name}", f"--hparams={hparams}"]


def _interrupt(command, pattern, signum, tmp_path, timeout=600):
    """Runs `command`, sends `signum` once a stdout line matches `pattern`, and returns
    (return code, stdout, stderr)."""
    stderr_path = tmp_path / f"stderr-{signum}-{os.getpid()}.txt"
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=stderr,
                                text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        lines = []
        try:
            for line in proc.stdout:
                lines.append(line)
                if pattern.search(line):
                    proc.send_signal(signum)
                    break
            lines.extend(proc.stdout)
            proc.wait(timeout=timeout)
        finally:
            proc.kill()
    return proc.returncode, "".join(lines), stderr_path.read_text()


def _tensors(prefix, skip=("data", "save_counter", "_CHECKPOINTABLE_OBJECT_GRAPH")):
    reader = tf.train.load_checkpoint(str(prefix))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if not k.startswith(skip)}


def _check(result):
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result.stdout


def test_sigterm_and_sigint_checkpoint_and_the_resumed_run_equals_the_whole(data_dir, tmp_path):
    """Stopped twice (SIGTERM, then SIGINT) and resumed, a seeded run ends bit-equal to an
    uninterrupted one: the input position, the masking/sampling stream and the dropout
    streams are all in the checkpoint, and the TensorBoard text sample (on in the whole run,
    off in the interrupted one) takes nothing from them."""
    common = dict(num_train_steps=24, iterations_per_loop=24, log_steps=24,
                  save_checkpoints_steps=1000, log_seconds=0.01)
    _check(run_script(*_command(data_dir, "whole", _hparams(**common, text_summary_steps=5))[1:]))
    parts = _command(data_dir, "parts", _hparams(**common))
    step_line = re.compile(r"^step (\d+)/24 ")

    rc, out, err = _interrupt(parts, re.compile(r"^step ([3-9]|1\d)/24 "), signal.SIGTERM,
                              tmp_path)
    assert rc == 128 + signal.SIGTERM, out[-2000:] + err[-3000:]
    stopped = re.search(r"stopped by SIGTERM at step (\d+): checkpoint (\S+); rerun", out)
    assert stopped, out[-2000:]
    first = int(stopped.group(1))
    assert 3 <= first < 24 and stopped.group(2).endswith(f"ckpt-{first}")
    assert os.path.exists(stopped.group(2) + ".index")

    rc, out, err = _interrupt(parts, re.compile(rf"^step ({first + 3}|{first + 4})/24 "),
                              signal.SIGINT, tmp_path)
    assert rc == 128 + signal.SIGINT, out[-2000:] + err[-3000:]
    assert f"restored step {first} from" in out and "restored the input position" in out
    assert "restored the dropout streams" in out
    second = int(re.search(r"stopped by SIGINT at step (\d+)", out).group(1))
    assert second > first and "Traceback" not in err

    out = _check(run_script(*parts[1:]))
    assert f"restored step {second} from" in out
    assert [int(s) for s in step_line.findall(out)][-1] == 24
    whole, resumed = (_tensors(data_dir / "models" / name / "ckpt-24")
                      for name in ("whole", "parts"))
    assert set(whole) == set(resumed) and any(k.startswith("seed_generators") for k in whole)
    differ = [k for k in whole if not np.array_equal(whole[k], resumed[k])]
    assert not differ, differ[:5]


def test_kill_9_resumes_within_one_save_interval(data_dir, tmp_path):
    command = _command(data_dir, "killed", _hparams(num_train_steps=16, iterations_per_loop=16,
                                                    save_checkpoints_steps=4,
                                                    log_seconds=0.01))
    rc, out, _ = _interrupt(command, re.compile(r"^saved \S+ckpt-8$"), signal.SIGKILL, tmp_path)
    assert rc == -signal.SIGKILL
    model_dir = data_dir / "models" / "killed"
    leftover = model_dir / "ckpt-13_temp"  # what a kill in the middle of a save leaves
    leftover.mkdir()
    (leftover / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"\0" * 100)
    out = _check(run_script(*command[1:]))
    assert f"removing {leftover}, left by an interrupted save" in out
    restored = int(re.search(r"restored step (\d+) from", out).group(1))
    assert restored >= 8 and "step 16/16" in out
    assert not list(model_dir.glob("*_temp"))


def test_a_diverging_run_stops_and_keeps_only_finite_checkpoints(data_dir):
    result = run_script(*_command(data_dir, "nan", _hparams(
        learning_rate=1e4, num_warmup_steps=0, num_train_steps=60, iterations_per_loop=1,
        save_checkpoints_steps=1, keep_checkpoint_max=1, nonfinite_patience=3))[1:])
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-3000:]
    assert "error: training diverged: 3 steps in a row had a non-finite loss" in result.stderr
    assert "Traceback" not in result.stderr and "skipped" in result.stdout
    model_dir = data_dir / "models" / "nan"
    latest = tf.train.latest_checkpoint(str(model_dir))
    assert latest and "holds finite weights" in result.stderr and latest in result.stderr
    for name, value in _tensors(latest).items():
        if value.dtype.kind == "f":
            assert np.isfinite(value).all(), name
    assert not (model_dir / "discriminator.keras").exists()


def test_an_unreadable_tfrecord_in_the_middle_is_named(tmp_path):
    from conftest import BERT_VOCAB
    import shutil

    shutil.copy(BERT_VOCAB, tmp_path / "vocab.txt")
    files = write_tfrecords(tmp_path / "pretrain_tfrecords", num_files=4, examples_per_file=40)
    damaged = files[1]
    with open(damaged, "rb") as f:
        content = f.read()
    with open(damaged, "wb") as f:
        f.write(content[:len(content) // 2])  # the first records stay readable
    result = run_script(*_command(tmp_path, "damaged", _hparams(
        num_train_steps=200, iterations_per_loop=50, save_checkpoints_steps=1000))[1:])
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-3000:]
    assert f"error: {damaged} cannot be read (" in result.stderr
    saved = re.search(r"the progress is saved in (\S+) \(without the input position\)",
                      result.stderr)
    assert saved and os.path.exists(saved.group(1) + ".index")
    assert "Traceback" not in result.stderr


@pytest.fixture
def small_disk(tmp_path):
    """A 10 MB tmpfs: one tiny-model checkpoint (~6.3 MB) fits, a second does not."""
    mount = tmp_path / "disk"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=10m", "tmpfs", str(mount)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()}); tests/test_resume.py "
                    "covers an unwritable model_dir")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_stops_with_the_path_and_the_rerun_says_so_at_once(data_dir, small_disk):
    model_dir = small_disk / "run"
    command = _command(data_dir, "full", _hparams(num_train_steps=6, iterations_per_loop=2,
                                                  save_checkpoints_steps=2,
                                                  model_dir=str(model_dir)))
    result = run_script(*command[1:])
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-3000:]
    message = re.compile(rf"error: model_dir {model_dir} has [\d.]+ MB free but a checkpoint "
                         r"needs about [\d.]+ MB: free some space \(the checkpoints already "
                         rf"there are intact; the newest is {model_dir}/ckpt-2\)")
    assert message.search(result.stderr), result.stderr[-3000:]
    assert "Traceback" not in result.stderr and not list(model_dir.glob("*_temp"))
    result = run_script(*command[1:])
    assert result.returncode == 1 and message.search(result.stderr), result.stderr[-3000:]
    assert "step" not in result.stdout  # it failed before training
    assert tf.train.load_checkpoint(str(model_dir / "ckpt-2")) is not None
