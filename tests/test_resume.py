"""resume.Checkpointer on damaged and hostile model directories: the fallback to the newest
readable checkpoint, a state file that lies, leftovers of a killed save, a full disk, NaN
weights, a checkpoint of another model."""

import contextlib
import os
import shutil
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from electra_tf import files, resume


def _checkpointer(directory, value=0.0, shape=(64, 32), **kwargs):
    weights = tf.Variable(tf.fill(shape, value), name="w")
    step = tf.Variable(0, dtype=tf.int64)
    checkpointer = resume.Checkpointer(tf.train.Checkpoint(w=weights, step=step), str(directory),
                                       step, max_to_keep=kwargs.pop("max_to_keep", 5),
                                       guard_variables=[weights], **kwargs)
    return checkpointer, weights, step


def _save_steps(directory, steps):
    checkpointer, weights, step = _checkpointer(directory)
    for s in steps:
        weights.assign(tf.fill(weights.shape, float(s)))
        step.assign(s)
        checkpointer.save(s)
    return checkpointer


def test_restores_the_newest_and_writes_nothing_when_empty(tmp_path, capsys):
    checkpointer, weights, _ = _checkpointer(tmp_path / "run")
    assert checkpointer.restored is None
    _save_steps(tmp_path / "run", [1, 2])
    checkpointer, weights, step = _checkpointer(tmp_path / "run")
    assert checkpointer.restored.endswith("ckpt-2") and int(step) == 2
    assert float(weights[0, 0]) == 2.0
    assert not os.path.exists(tmp_path / "run" / ".write_test")


def test_a_relative_model_dir_restores_without_a_detour(tmp_path, capsys, monkeypatch):
    """DATA_DIR given as a relative path (as the quickstart does): the state file's names are
    found where they are, not reported gone."""
    monkeypatch.chdir(tmp_path)
    _save_steps("demo/models/run", [1, 2])
    capsys.readouterr()
    checkpointer, weights, _ = _checkpointer("demo/models/run")
    assert checkpointer.restored == os.path.join("demo", "models", "run", "ckpt-2")
    assert float(weights[0, 0]) == 2.0
    assert "gone" not in capsys.readouterr().out


def test_a_damaged_latest_falls_back_to_the_newest_readable(tmp_path, capsys):
    _save_steps(tmp_path, [1, 2, 3])
    data = tmp_path / "ckpt-3.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:100])  # truncated
    (tmp_path / "ckpt-2.index").write_bytes(b"\0" * 64)  # zeroed
    checkpointer, weights, step = _checkpointer(tmp_path)
    out = capsys.readouterr().out
    assert checkpointer.restored.endswith("ckpt-1") and float(weights[0, 0]) == 1.0
    assert f"{tmp_path}/ckpt-3 cannot be read" in out and "ckpt-2 cannot be read" in out
    assert "resuming from" in out and "the newest readable checkpoint" in out
    # The state file now names what is usable, so the next save and rerun agree with it.
    assert tf.train.get_checkpoint_state(str(tmp_path)).model_checkpoint_path.endswith("ckpt-1")
    step.assign(4)
    checkpointer.save(4)
    assert _checkpointer(tmp_path)[0].restored.endswith("ckpt-4")


def test_every_checkpoint_unreadable_is_an_error_not_a_fresh_start(tmp_path):
    _save_steps(tmp_path, [1])
    (tmp_path / "ckpt-1.index").write_bytes(b"garbage")
    with pytest.raises(resume.CheckpointError, match="none of the checkpoints .* can be read"):
        _checkpointer(tmp_path)


def test_a_state_file_naming_deleted_checkpoints_or_damaged(tmp_path, capsys):
    _save_steps(tmp_path, [1, 2, 3])
    for path in tmp_path.glob("ckpt-3.*"):
        path.unlink()
    checkpointer, _, step = _checkpointer(tmp_path)
    assert "names " + str(tmp_path / "ckpt-3") + ", whose files are gone" in capsys.readouterr().out
    assert checkpointer.restored.endswith("ckpt-2") and int(step) == 2
    (tmp_path / "checkpoint").write_text("this is { not a state file")
    checkpointer, _, step = _checkpointer(tmp_path)
    assert "is damaged" in capsys.readouterr().out
    assert checkpointer.restored.endswith("ckpt-2") and int(step) == 2


def test_a_state_file_with_a_non_utf8_byte_is_rebuilt_and_an_evaluation_says_so(tmp_path,
                                                                                  capsys):
    _save_steps(tmp_path, [1, 2])
    state = tmp_path / "checkpoint"
    state.write_bytes(state.read_bytes().replace(b"ckpt-2", b"ckpt-\xff2", 1))
    # An evaluation (read-only) names the file and the fix...
    with pytest.raises(resume.CheckpointError, match=f"^{state} is damaged .*utf-8.*: rerun "
                       "the training command, which rebuilds it"):
        _checkpointer(tmp_path, writable=False)
    # ...a training run says so, rebuilds it and resumes: the checkpoints are untouched.
    checkpointer, weights, step = _checkpointer(tmp_path)
    assert f"{state} is damaged (" in capsys.readouterr().out
    assert checkpointer.restored.endswith("ckpt-2") and int(step) == 2
    assert tf.train.get_checkpoint_state(str(tmp_path)).model_checkpoint_path.endswith("ckpt-2")


def test_a_checkpoint_in_the_originals_layout_is_refused_naming_init_checkpoint(tmp_path):
    """A model_dir holding a TF1 checkpoint (model.ckpt-N, as the original's run_pretraining.py
    names it), with or without the state file naming it, is not ours to resume: the error
    names the way to train on from it, and nothing in the directory changes."""
    prefix = tf.train.Checkpoint(w=tf.Variable(1.0)).write(str(tmp_path / "model.ckpt-1000"))
    tf.compat.v1.train.update_checkpoint_state(str(tmp_path), prefix)
    for state_file in (True, False):
        if not state_file:
            (tmp_path / "checkpoint").unlink()
        left = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
        with pytest.raises(resume.CheckpointError, match=(
                rf"^{tmp_path} holds model\.ckpt-1000, a checkpoint in another program's layout "
                r".*cannot resume\. To train on from it, start a new run \(a new "
                rf'--model_name\) with "init_checkpoint": "{tmp_path}" in --hparams; add '
                '"init_optimizer_state": true to count on from its step')):
            _checkpointer(tmp_path)
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == left


@pytest.mark.parametrize("lost", ["index files", "every file"])
def test_checkpoints_that_cannot_be_restored_are_never_started_over(tmp_path, lost):
    """Lost .index files (the .data files and the state file naming them still there), or a
    state file naming checkpoints whose files are all gone: a fresh start would write ckpt-N
    over what is left, so it is an error that says how to start afresh on purpose."""
    _save_steps(tmp_path, [20, 40])
    for path in tmp_path.glob("ckpt-*.index" if lost == "index files" else "ckpt-*"):
        path.unlink()
    left = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    for writable in (True, False):
        with pytest.raises(resume.CheckpointError, match=(
                rf"^{tmp_path} has no checkpoint that can be restored, yet ckpt-20, ckpt-40 are "
                r"there or named by its checkpoint file \(an \.index file is missing\): "
                r"refusing to start afresh over them\. Put the missing files back to resume, "
                r"or move the ckpt-\* files and the checkpoint file out of it \(or use a new "
                r"model_name\) to start afresh$")):
            _checkpointer(tmp_path, writable=writable)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == left
    if lost == "index files":  # the .data files alone, without a state file, are kept too
        (tmp_path / "checkpoint").unlink()
        with pytest.raises(resume.CheckpointError, match="yet ckpt-20, ckpt-40 are there"):
            _checkpointer(tmp_path)
    for path in tmp_path.iterdir():  # moved away: the user starts afresh
        path.unlink()
    assert _checkpointer(tmp_path)[0].restored is None


def test_another_models_checkpoint_is_an_error_not_a_fallback(tmp_path):
    _save_steps(tmp_path, [1])
    with pytest.raises(resume.CheckpointError, match="does not fit this run's model"):
        _checkpointer(tmp_path, shape=(8, 8))


def test_leftovers_of_a_killed_save_are_removed(tmp_path, capsys):
    _save_steps(tmp_path, [1])
    (tmp_path / "ckpt-2_temp").mkdir()
    (tmp_path / "ckpt-2_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x")
    checkpointer, _, _ = _checkpointer(tmp_path)
    assert not (tmp_path / "ckpt-2_temp").exists()
    assert "left by an interrupted save" in capsys.readouterr().out
    assert checkpointer.restored.endswith("ckpt-1")


def test_non_finite_weights_are_never_saved_and_rotation_keeps_the_good(tmp_path):
    checkpointer, weights, step = _checkpointer(tmp_path, max_to_keep=1)
    step.assign(1)
    checkpointer.save(1)
    weights.assign(tf.fill(weights.shape, np.nan))
    with pytest.raises(resume.CheckpointWriteError, match="refusing to save non-finite"):
        checkpointer.save(2)
    assert sorted(p.name for p in tmp_path.glob("ckpt-*")) == ["ckpt-1.data-00000-of-00001",
                                                               "ckpt-1.index"]


def test_an_unwritable_model_dir_is_named(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(resume.CheckpointWriteError, match=f"model_dir {blocker}/run is not"):
        _checkpointer(blocker / "run")


@contextlib.contextmanager
def mounted_tmpfs(mount, size: str):
    """A small disk to fill: a tmpfs of `size` at `mount`. Mounting needs root (as on this
    project's machines); elsewhere the test is skipped, and test_an_unwritable_model_dir_is_named
    still covers the error path."""
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


@pytest.fixture
def small_disk(tmp_path):
    with mounted_tmpfs(tmp_path / "disk", "1m") as mount:
        yield mount


def test_a_full_disk_fails_cleanly_and_keeps_the_earlier_checkpoints(small_disk, monkeypatch):
    checkpointer, weights, step = _checkpointer(small_disk, shape=(256, 256))  # 256 KB each
    for s in (1, 2):
        step.assign(s)
        checkpointer.save(s)
    # The free-space check refuses the next save before anything is written...
    with pytest.raises(resume.CheckpointWriteError, match=f"model_dir {small_disk} has .* MB "
                       "free but a checkpoint needs about"):
        for s in (3, 4, 5):
            step.assign(s)
            checkpointer.save(s)
    saved = set(os.listdir(small_disk))
    # ...and a write that runs out of space anyway removes what it half-wrote.
    monkeypatch.setattr(resume, "SPACE_MARGIN", 0.0)
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (shutil.disk_usage(small_disk).free - 100_000))
    with pytest.raises(resume.CheckpointWriteError, match="could not write the checkpoint .*"
                       "No space left on device.*the newest is"):
        checkpointer.save(9)
    filler.unlink()
    assert set(os.listdir(small_disk)) == saved and not any("_temp" in p for p in saved)
    restored, weights, step = _checkpointer(small_disk, shape=(256, 256))
    assert restored.restored == checkpointer.latest and int(step) == int(
        checkpointer.latest.rsplit("-", 1)[1])


def test_write_atomically_leaves_the_old_file_on_failure(small_disk):
    path = small_disk / "pretrain_config.json"
    files.write_atomically(str(path), "old")
    with pytest.raises(files.WriteError, match=f"^could not write {path}: .*No space left"):
        files.write_atomically(str(path), "x" * 2_000_000)
    assert path.read_text() == "old" and os.listdir(small_disk) == ["pretrain_config.json"]


def test_the_space_check_before_training_counts_what_the_run_keeps_at_once(small_disk):
    """check_space(saves, then): rotation deletes an old checkpoint only after writing the new
    one, so with one kept and keep 2, three more saves need room for two at once; `then` (the
    exported models) comes after the last save."""
    checkpointer, _, step = _checkpointer(small_disk, shape=(256, 256), max_to_keep=2)
    step.assign(1)
    checkpointer.save(1)
    size = sum(p.stat().st_size for p in small_disk.glob("ckpt-1.*"))
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (shutil.disk_usage(small_disk).free - 2 * size))
    checkpointer.check_space(saves=1)
    checkpointer.check_space(saves=0, then=size)
    with pytest.raises(resume.CheckpointWriteError, match=r"MB free but the rest of this run "
                       r"\(2 checkpoint\(s\) at once\) needs about"):
        checkpointer.check_space(saves=3)
    with pytest.raises(resume.CheckpointWriteError, match=r"but the rest of this run \(2 "
                       r"checkpoint\(s\) at once, then the exported models\) needs about"):
        checkpointer.check_space(saves=3, then=size)
    with pytest.raises(resume.CheckpointWriteError, match="MB free but the exported models need "
                       "about .* the newest is .*ckpt-1"):
        checkpointer.check_space(saves=0, then=2 * size)


def test_fork_starts_a_run_from_another_runs_checkpoint(tmp_path):
    _save_steps(tmp_path / "trunk", [2, 4])
    (tmp_path / "trunk" / "pretrain_config.json").write_text('{"num_train_steps": 4}')
    target = resume.fork(str(tmp_path / "trunk"), 2, str(tmp_path / "branch"))
    assert target == str(tmp_path / "branch" / "ckpt-2")
    assert (tmp_path / "branch" / "pretrain_config.json").read_text() == '{"num_train_steps": 4}'
    assert not list((tmp_path / "branch").glob("*.tmp-*"))
    checkpointer, weights, step = _checkpointer(tmp_path / "branch")
    assert checkpointer.restored.endswith("ckpt-2") and int(step) == 2
    assert float(weights[0, 0]) == 2.0
    # A branch that has moved on is not forked again.
    _save_steps(tmp_path / "branch", [3])
    resume.fork(str(tmp_path / "trunk"), 2, str(tmp_path / "branch"))
    assert _checkpointer(tmp_path / "branch")[0].restored.endswith("ckpt-3")
    with pytest.raises(resume.CheckpointError, match="no checkpoint at step 3 to fork"):
        resume.fork(str(tmp_path / "trunk"), 3, str(tmp_path / "other"))
