"""Long runs that survive, as a user meets them (subprocesses where the command line matters):
SIGTERM, Ctrl-C and kill -9 lose at most one save interval and a resumed run equals the
uninterrupted one bit for bit; fine-tuning resumes its interrupted trial; a diverging run stops
without saving NaN weights; a damaged TFRecord is named; a full disk is reported; two workers on
the loopback train as one (slow)."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, TINY_FINETUNING, TINY_MODEL, run_script, write_tfrecords
from test_resume import mounted_tmpfs
from electra_tf import resume, training


def _hparams(**extra):
    return json.dumps({**TINY_MODEL, "text_summary_steps": 0, **extra})


def _command(data_dir, name, hparams):
    return [sys.executable, "run_pretraining.py", f"--data_dir={data_dir}",
            f"--model_name={name}", f"--hparams={hparams}"]


def _interrupt(command, pattern, signum, tmp_path, timeout=600):
    """Runs `command`, sends `signum` once a stdout line matches `pattern` (a regex, or a
    predicate on the line), and returns (return code, stdout, stderr)."""
    matches = pattern if callable(pattern) else pattern.search
    stderr_path = tmp_path / f"stderr-{signum}-{os.getpid()}.txt"
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=stderr,
                                text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        lines = []
        try:
            for line in proc.stdout:
                lines.append(line)
                if matches(line):
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


@pytest.mark.slow
def test_preempted_killed_and_resumed_the_run_equals_the_whole(data_dir, tmp_path):
    """Stopped by SIGTERM, then killed with -9 after a periodic save, and resumed each time, a
    seeded run ends bit-equal to an uninterrupted one: the input position, the masking and
    sampling stream and the dropout streams are all in the checkpoint, and the TensorBoard
    text sample (on in the whole run, off in the interrupted one) takes nothing from them."""
    common = dict(num_train_steps=24, iterations_per_loop=24, log_steps=24, log_seconds=0.01)
    _check(run_script(*_command(data_dir, "whole", _hparams(
        **common, save_checkpoints_steps=1000, text_summary_steps=5))[1:]))
    parts = _command(data_dir, "parts", _hparams(**common, save_checkpoints_steps=6))
    model_dir = data_dir / "models" / "parts"

    rc, out, err = _interrupt(parts, re.compile(r"^step ([3-9]|1\d)/24 "), signal.SIGTERM,
                              tmp_path)
    assert rc == 128 + signal.SIGTERM, out[-2000:] + err[-3000:]
    stopped = re.search(r"stopped by SIGTERM at step (\d+): checkpoint (\S+); rerun", out)
    assert stopped and "Traceback" not in err, out[-2000:] + err[-3000:]
    first = int(stopped.group(1))
    assert first < 24 and stopped.group(2) == str(model_dir / f"ckpt-{first}")
    assert os.path.exists(stopped.group(2) + ".index")

    later_save = re.compile(rf"^saved {model_dir}/ckpt-(\d+)$", re.M)
    rc, out, _ = _interrupt(parts, later_save, signal.SIGKILL, tmp_path)
    assert rc == -signal.SIGKILL
    assert f"restored step {first} from" in out and "restored the input position" in out
    assert "restored the dropout streams" in out
    killed_after = max(int(n) for n in later_save.findall(out))
    leftover = model_dir / "ckpt-23_temp"  # what a kill in the middle of a save leaves
    leftover.mkdir()
    (leftover / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"\0" * 100)

    out = _check(run_script(*parts[1:]))
    assert f"removing {leftover}, left by an interrupted save" in out
    restored = int(re.search(r"restored step (\d+) from", out).group(1))
    assert restored >= killed_after  # at most one save interval lost
    assert "step 24/24" in out and not list(model_dir.glob("*_temp"))
    whole, resumed = (_tensors(data_dir / "models" / name / "ckpt-24")
                      for name in ("whole", "parts"))
    assert set(whole) == set(resumed) and any(k.startswith("seed_generators") for k in whole)
    differ = [k for k in whole if not np.array_equal(whole[k], resumed[k])]
    assert not differ, differ[:5]


@pytest.mark.slow
def test_a_decay_branch_forked_from_a_trunk_equals_the_whole_run(data_dir):
    """Warmup-stable-decay in pieces: a trunk at the peak learning rate to step 8, a branch
    forked from its checkpoint that decays to step 12, bit-equal to one run of the same
    schedule; the branch records the hparams it changed."""
    common = dict(lr_schedule="wsd", num_warmup_steps=2, iterations_per_loop=4,
                  log_steps=4, log_seconds=0.01)
    _check(run_script(*_command(data_dir, "whole", _hparams(
        **common, num_train_steps=12, lr_decay_steps=4, save_checkpoints_steps=12))[1:]))
    _check(run_script(*_command(data_dir, "trunk", _hparams(
        **common, num_train_steps=8, save_checkpoints_steps=8))[1:]))
    models = data_dir / "models"
    resume.fork(str(models / "trunk"), 8, str(models / "branch"))
    out = _check(run_script(*_command(data_dir, "branch", _hparams(
        **common, num_train_steps=12, lr_decay_steps=4, save_checkpoints_steps=12))[1:]))
    assert "restored step 8 from" in out and "restored the input position" in out
    changes = json.loads((models / "branch" / "hparam_changes.json").read_text())
    [change] = changes
    locations = {"model_name", "model_dir", "results_txt", "results_pkl"}  # the branch's own
    assert change["step"] == 8 and set(change["changed"]) == locations | {
        "num_train_steps", "lr_decay_steps", "save_checkpoints_steps"}
    assert change["changed"]["lr_decay_steps"] == [0, 4]
    whole, branch = (_tensors(models / name / "ckpt-12") for name in ("whole", "branch"))
    assert set(whole) == set(branch)
    differ = [k for k in whole if not np.array_equal(whole[k], branch[k])]
    assert not differ, differ[:5]


@pytest.mark.slow
def test_a_diverging_run_stops_and_keeps_only_finite_checkpoints(data_dir):
    result = run_script(*_command(data_dir, "nan", _hparams(
        learning_rate=1e4, num_warmup_steps=0, num_train_steps=60, iterations_per_loop=1,
        save_checkpoints_steps=1, keep_checkpoint_max=1, nonfinite_patience=3))[1:],
        expect_failure=True)
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
    """The first records pass the start-up check; the damage further in stops training with
    the file's name, and the progress is saved."""
    import run_pretraining
    from conftest import BERT_VOCAB, tiny_config

    shutil.copy(BERT_VOCAB, tmp_path / "vocab.txt")
    files = write_tfrecords(tmp_path / "pretrain_tfrecords", num_files=4, examples_per_file=40)
    damaged = files[1]
    with open(damaged, "rb") as f:
        content = f.read()
    with open(damaged, "wb") as f:
        f.write(content[:len(content) // 2])
    config = tiny_config(tmp_path, num_train_steps=200, iterations_per_loop=50,
                         save_checkpoints_steps=1000, text_summary_steps=0)
    with pytest.raises(training.InputDataError, match=rf"^{damaged} cannot be read \(.*"
                       r"truncated.*\): remove it from the input or rebuild it\. the input "
                       r"pipeline failed at step \d+.*; the progress is saved in (\S+) "
                       r"\(without the input position\)") as error:
        run_pretraining.train_or_eval(config, tf.distribute.get_strategy())
    saved = re.search(r"saved in (\S+) ", str(error.value)).group(1)
    assert os.path.exists(saved + ".index")


@pytest.fixture
def small_disk(tmp_path):
    """10 MB: one tiny-model checkpoint (~6.3 MB) fits, a second does not."""
    with mounted_tmpfs(tmp_path / "disk", "10m") as mount:
        yield mount


def test_a_disk_too_small_for_the_run_stops_before_training_and_a_rerun_says_so_at_once(
        data_dir, small_disk, capsys):
    """The free space is compared with what the run writes to its end (three checkpoints kept
    at once, then the exported models) before the first step, not after a save interval."""
    import run_pretraining
    from conftest import tiny_config

    model_dir = small_disk / "run"
    config = tiny_config(data_dir, num_train_steps=6, iterations_per_loop=2,
                         save_checkpoints_steps=2, text_summary_steps=0,
                         model_dir=str(model_dir))
    message = (rf"^model_dir {model_dir} has [\d.]+ MB free but the rest of this run \(3 "
               r"checkpoint\(s\) at once, then the exported models\) needs about [\d.]+ MB: "
               r"free some space \(the checkpoints already there are intact\) and rerun to "
               r"resume$")
    for _ in range(2):
        with pytest.raises(resume.CheckpointWriteError, match=message):
            run_pretraining.train_or_eval(config, tf.distribute.get_strategy())
        assert not re.search(r"^step \d", capsys.readouterr().out, re.M)  # before any training
    assert not list(model_dir.glob("ckpt-*"))


def _finished_run(config, strategy) -> None:
    """config.model_dir as a run that saved its last checkpoint and died before its exports
    (untrained weights: what is tested is the files, not the training)."""
    import run_pretraining  # noqa: F401  (the command's own imports and flags)
    from electra_tf import pretraining

    special = pretraining.SpecialIds.from_vocab(pretraining.load_vocab(config.vocab_file),
                                                config.vocab_file)
    state = pretraining.create_state(config, special, strategy)
    checkpointer = resume.Checkpointer(state.checkpoint(), config.model_dir,
                                       state.optimizer.iterations, config.keep_checkpoint_max,
                                       guard_variables=state.model.trainable_variables)
    state.optimizer.iterations.assign(config.num_train_steps)
    checkpointer.save(config.num_train_steps)


def test_a_full_disk_at_the_export_is_one_line_and_the_rerun_asks_room_only_for_the_exports(
        data_dir, tmp_path, monkeypatch, capsys):
    import run_pretraining
    from conftest import tiny_config

    strategy = tf.distribute.get_strategy()
    with mounted_tmpfs(tmp_path / "disk", "20m") as disk:
        model_dir = disk / "run"
        config = tiny_config(data_dir, num_train_steps=2, iterations_per_loop=2,
                             save_checkpoints_steps=2, text_summary_steps=0,
                             model_dir=str(model_dir))
        _finished_run(config, strategy)
        checkpoint = sum(p.stat().st_size for p in model_dir.glob("ckpt-2.*"))
        filler = disk / "filler"

        def leave_free(free: int) -> None:
            filler.unlink(missing_ok=True)
            filler.write_bytes(b"\0" * (shutil.disk_usage(disk).free - free))

        # Past the space check, the write itself runs out of space: one line, nothing left.
        monkeypatch.setattr(resume, "SPACE_MARGIN", 0.0)
        leave_free(1_000_000)
        with pytest.raises(resume.CheckpointWriteError, match=(
                rf"^could not write the exported models into {model_dir}: .*No space left on "
                r"device.*; nothing half-written is left, and training is complete \("
                rf"{model_dir}/ckpt-2\): free some space and rerun the same command, which only "
                r"writes the exports$")):
            run_pretraining.train_or_eval(config, strategy)
        assert not [p for p in model_dir.iterdir() if ".tmp-" in p.name]
        monkeypatch.undo()
        # The rerun asks room for the exports, not for another checkpoint.
        leave_free(int(1.1 * checkpoint))
        capsys.readouterr()
        run_pretraining.train_or_eval(config, strategy)
        out = capsys.readouterr().out
        assert "step 2: already trained to 2 steps" in out
        assert f"exported {model_dir}/discriminator.keras" in out
        exports = sorted(model_dir.glob("*.keras"))
        exported = sum(p.stat().st_size for p in exports)
        assert len(exports) == 2 and 1.3 * exported < 1.1 * checkpoint
        for path in exports:
            path.unlink()
        leave_free(exported // 2)
        with pytest.raises(resume.CheckpointWriteError, match=(
                rf"^model_dir {model_dir} has [\d.]+ MB free but the exported models need about "
                rf"[\d.]+ MB: free some space \(the checkpoints already there are intact; the "
                rf"newest is {model_dir}/ckpt-2\) and rerun to resume$")):
            run_pretraining.train_or_eval(config, strategy)


@pytest.mark.slow
def test_finetuning_stopped_by_ctrl_c_resumes_the_trial_and_skips_the_finished(
        finetuning_dir, tmp_path):
    hparams = json.dumps({**TINY_FINETUNING, "task_names": ["sst"], "num_train_epochs": 3,
                          "num_trials": 2, "log_seconds": 0.01})
    command = [sys.executable, "run_finetuning.py", f"--data_dir={finetuning_dir}",
               "--model_name=tiny", f"--hparams={hparams}"]
    seen = []

    def second_trial_runs(line):
        if "trial 2/2" in line:
            seen.append(line)
        return bool(seen) and re.match(r"step ([3-9]|[1-4]\d)/60 ", line)

    rc, out, err = _interrupt(command, second_trial_runs, signal.SIGINT, tmp_path)
    assert rc == 128 + signal.SIGINT, out[-2000:] + err[-3000:]
    step = int(re.search(r"stopped by SIGINT at step (\d+): checkpoint", out).group(1))
    results_path = finetuning_dir / "models" / "tiny" / "results" / "sst_results.json"
    first_trial = json.loads(results_path.read_text())["trials"]
    assert len(first_trial) == 1 and "Traceback" not in err

    out = _check(run_script(*command[1:]))
    assert "trial 1 finished in an earlier, interrupted run: its results are reused" in out
    model_2 = finetuning_dir / "models" / "tiny" / "finetuning_models" / "sst_model_2"
    assert f"resuming at step {step} from {model_2}/ckpt-{step}" in out
    assert "step 60/60" in out and "step 1/60" not in out
    trials = json.loads(results_path.read_text())["trials"]
    assert len(trials) == 2 and trials[0] == first_trial[0]


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _two_workers(data_dir, tmp_path, name, preempt_worker_1_after=None):
    """Runs two workers of a multi_worker_mirrored cluster on 127.0.0.1 (optionally sending
    SIGTERM to worker 1 once it printed that step); returns their (return code, stdout)."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in _free_ports(2)]}
    command = _command(data_dir, "mw", _hparams(
        strategy="multi_worker_mirrored", num_train_steps=30, iterations_per_loop=30,
        save_checkpoints_steps=10, text_summary_steps=10, log_seconds=0.01))
    procs, outputs = [], []
    for index in range(2):
        scratch = tmp_path / f"worker{index}"
        scratch.mkdir(exist_ok=True)
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(scratch),
               "TF_CONFIG": json.dumps({"cluster": cluster,
                                        "task": {"type": "worker", "index": index}}),
               # TF's preemption handler asks GCE's metadata server whether it runs on GCP:
               # keep that question on the loopback too (a closed port answers at once).
               "GCE_METADATA_IP": "127.0.0.1:9"}
        outputs.append(scratch / f"{name}.out")
        with open(outputs[-1], "w") as out, open(scratch / f"{name}.err", "w") as err:
            procs.append(subprocess.Popen(command, cwd=REPO, env=env, text=True, stdout=out,
                                          stderr=err))
    try:
        if preempt_worker_1_after is not None:
            step = re.compile(rf"^step ({preempt_worker_1_after}|[1-2]\d)/30 ", re.M)
            while not step.search(outputs[1].read_text()) and procs[1].poll() is None:
                time.sleep(0.5)
            procs[1].send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=1200)
    finally:
        for proc in procs:
            proc.kill()
    return [(proc.returncode, path.read_text()) for proc, path in zip(procs, outputs)]


@pytest.mark.slow
def test_two_workers_on_the_loopback_stop_together_resume_and_agree(data_dir, tmp_path):
    """A 2-worker cluster: SIGTERM to one worker checkpoints both at the same step (TF's
    PreemptionCheckpointHandler); the restarted cluster resumes, agrees on the weights, and
    only the chief wrote checkpoints, events and exports."""
    model_dir = data_dir / "models" / "mw"
    workers = _two_workers(data_dir, tmp_path, "preempted", preempt_worker_1_after=3)
    steps = set()
    for rc, out in workers:
        assert rc == 128 + signal.SIGTERM, out[-3000:]
        steps.add(re.search(r"preempted: every worker wrote its checkpoint at step (\d+)",
                            out).group(1))
    assert len(steps) == 1
    step = int(steps.pop())
    assert os.path.exists(model_dir / f"ckpt-{step}.index")

    workers = _two_workers(data_dir, tmp_path, "resumed")
    for rc, out in workers:
        assert rc == 0, out[-3000:]
        assert f"restored step {step} from {model_dir}/ckpt-{step}" in out
        assert "with 2 replica(s)" in out and "step 30/30" in out
    fingerprints = [re.search(r"weights fingerprint (\S+)\)", out).group(1)
                    for _, out in workers]
    assert fingerprints[0] == fingerprints[1]
    chief, other = workers[0][1], workers[1][1]
    assert f"saved {model_dir}/ckpt-30" in chief
    assert f"exported {model_dir}/discriminator.keras" in chief
    assert "saved" not in other and "exported" not in other
    # The other worker's share of every save went to a scratch directory, removed at once.
    assert not list((tmp_path / "worker1").glob("electra_tf_worker_ckpt_*"))
    assert len(list(model_dir.glob("events.out.tfevents*"))) == 2  # the chief's, one a run


def test_finetuning_trials_resume_only_an_interrupted_run_of_the_same_hparams(tmp_path):
    import run_finetuning
    from electra_tf.finetuning.config import from_hparams

    def trials(**hparams):
        return run_finetuning._Trials(from_hparams("m", str(tmp_path), {
            "task_names": ["sst"], "num_trials": 2, **hparams}))

    first = trials()
    model_dir = tmp_path / "models" / "m" / "finetuning_models" / "sst_model_1"
    first.start(str(model_dir))
    (model_dir / "ckpt-3.index").write_text("")
    first.finish(1, {"sst": {"accuracy": 50.0}}, last=False)
    interrupted = trials(log_steps=7)  # logging is not part of a trial's identity
    assert interrupted.results(1) == {"sst": {"accuracy": 50.0}}
    interrupted.start(str(model_dir))
    assert (model_dir / "ckpt-3.index").exists()  # kept: the trial resumes
    interrupted.finish(2, {"sst": {"accuracy": 60.0}}, last=True)
    rerun = trials()  # the run finished: a rerun is a new run, as the original's
    assert rerun.results(1) is None
    rerun.start(str(model_dir))
    assert not (model_dir / "ckpt-3.index").exists() and (model_dir / "trial.json").exists()
    rerun.finish(1, {}, last=False)
    assert trials(learning_rate=3e-4).results(1) is None  # other hparams: a new run


@pytest.mark.parametrize("damage", [b'[{"step": 20, "changed": {"learning_rate": [0.00',
                                    b'[{"step": 20, "changed": {"learning_rate": "\xff"}}]',
                                    b'{"step": 20}'])
def test_a_damaged_hparam_changes_file_is_said_kept_aside_and_begun_anew(tmp_path, capsys,
                                                                         damage):
    import run_pretraining
    from conftest import tiny_config

    config = tiny_config(tmp_path, model_dir=str(tmp_path), learning_rate=5e-4)
    saved = {**json.loads(config.to_json()), "learning_rate": 1e-3}
    path = tmp_path / "hparam_changes.json"
    path.write_bytes(damage)
    run_pretraining._record_changes(config, saved, 40)
    out = capsys.readouterr().out
    kept = tmp_path / "hparam_changes.json.damaged-at-step-40"
    assert f"{path} is damaged (" in out and f"kept as {kept}; a new history starts" in out
    assert kept.read_bytes() == damage
    assert json.loads(path.read_text()) == [{"step": 40,
                                             "changed": {"learning_rate": [1e-3, 5e-4]}}]


def test_a_damaged_pretrain_config_is_said_and_ignored(tmp_path, capsys):
    import run_pretraining

    path = tmp_path / "pretrain_config.json"
    path.write_text('{"model_size": "small", "learning_ra')
    assert run_pretraining._read_saved_config(str(path)) is None
    assert f"{path} is damaged (" in capsys.readouterr().out
    assert run_pretraining._read_saved_config(str(tmp_path / "missing.json")) is None
