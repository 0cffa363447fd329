"""A run's checkpoints in its model directory: written so that a crash, a full disk or a NaN
cannot cost more than the steps since the last one, and read back with a fallback.
`checkpoint(model, **extra)` is what one holds: the model's variables keyed by path, and the
optimizer, random streams and loss scale beside them.

Saving (Checkpointer.save):
- refuses non-finite weights (the training loop never applies a non-finite update, so this is
  the last line of defence) and fails before writing when the disk cannot hold a checkpoint of
  the size of the last one;
- a failed write (disk full, no permission) removes what it half-wrote (`ckpt-N_temp/`, a
  partial `ckpt-N.*`) and raises CheckpointWriteError naming the path; the `checkpoint` state
  file is only updated after a complete write, so the earlier checkpoints stay the latest;
- rotation (keep_checkpoint_max) deletes only checkpoints older than a newer complete one;
- before training, check_space(saves, then) compares the free space with what the run writes
  to its end (the checkpoints kept at once, rotation counted, and then e.g. the exported
  models), so that a disk too small fails before the first step, not after a save interval;
- in a multi-worker cluster only the chief writes into model_dir; the other workers write to a
  temporary directory that is removed at once (every worker must take part in a save).

Restoring (when a Checkpointer is created): leftover `*_temp` folders of a killed save are
removed; the candidates are the checkpoints on disk that have an index file, newest first (a
`checkpoint` state file naming deleted files, or unreadable itself, is reported and rebuilt);
one that cannot be read (truncated, zeroed, missing data) is reported and the next older one is
tried; none readable is an error, not a fresh start. So is a model_dir with checkpoint files
none of which can be restored (e.g. their index files lost) or a state file naming checkpoints
that are gone: the next save would write over what is left, so only the user starts afresh, by
moving them away. A checkpoint that reads fine but does not fit the model is an error too, not
a reason to go back further, and so is a model_dir whose only checkpoint is in another layout
(the original's TF1 `model.ckpt-N`): the error names init_checkpoint (and
init_optimizer_state), which start a new run from it.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import tempfile
from typing import Iterator, Sequence

import keras
import tensorflow as tf

from electra_tf import files
from electra_tf.files import first_line

PREFIX = "ckpt"
_STEP = re.compile(rf"^{PREFIX}-(\d+)$")
_FILE = re.compile(rf"^({PREFIX}-\d+)\.(index|data-\d+-of-\d+)$")  # a checkpoint's files
SPACE_MARGIN = 1.2  # free space wanted before a save, over the size of the last checkpoint


class CheckpointError(RuntimeError):
    """No checkpoint in model_dir can be restored, or one does not fit the model."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (the earlier ones are intact)."""


def checkpoint(model: keras.Model, **extra) -> tf.train.Checkpoint:
    """A checkpoint of the model's variables keyed by their paths, plus `extra` trackables
    (optimizer, RNG, loss scale). TF's object-graph tracking does not see the Keras 3
    sub-layers kept in lists and dicts (the transformer layers, the fine-tuning heads), so
    `Checkpoint(model=model)` alone would silently miss them."""
    variables = {v.path: v for v in model.weights}
    if len(variables) != len(model.weights):
        raise ValueError(f"{model.name}: two variables share a path; cannot key them by path")
    return tf.train.Checkpoint(variables=variables, **extra)


def seed_generator_states(model: keras.Model) -> list[tf.Variable]:
    """The state of the model's dropout seed generators (not among model.weights), in the
    model's order: checkpointed so that a resumed run draws the same dropout masks as an
    uninterrupted one. By order, not by path: Keras numbers auto-named seed generators per
    process (seed_generator_7), so their paths depend on what the process built before."""
    weights = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in weights]


def _step_of(prefix: str) -> int:
    match = _STEP.match(os.path.basename(prefix))
    return int(match.group(1)) if match else -1


def _is_local(path: str) -> bool:
    return "://" not in path


def _damaged_state(directory: str) -> str | None:
    """What is wrong with the `checkpoint` state file, or None when it is fine or absent.
    get_checkpoint_state returns None for text that does not parse but raises ValueError for a
    non-UTF-8 byte (UnicodeDecodeError) or a state without model_checkpoint_path."""
    if not tf.io.gfile.exists(os.path.join(directory, "checkpoint")):
        return None
    try:
        return None if tf.train.get_checkpoint_state(directory) else "it does not parse"
    except ValueError as e:
        return first_line(e)


def checkpoints_on_disk(directory: str) -> list[str]:
    """Prefixes of the complete-looking checkpoints in `directory` (an index file), oldest
    first."""
    prefixes = [p[:-len(".index")] for p in
                tf.io.gfile.glob(os.path.join(directory, f"{PREFIX}-*.index"))]
    return sorted((p for p in prefixes if _step_of(p) >= 0), key=_step_of)


def checkpoint_steps(directory: str) -> list[int]:
    """The steps of `directory`'s complete-looking checkpoints, ascending."""
    return [_step_of(p) for p in checkpoints_on_disk(directory)]


def all_finite(variables: Sequence[tf.Variable]) -> bool:
    floats = [v for v in variables if tf.as_dtype(v.dtype).is_floating]
    return bool(_all_finite(floats)) if floats else True


@tf.function
def _all_finite(variables):
    return tf.reduce_all([tf.reduce_all(tf.math.is_finite(v)) for v in variables])


def _files_of(prefix: str) -> list[str]:
    return tf.io.gfile.glob(prefix + ".index") + tf.io.gfile.glob(prefix + ".data-*")


def _size_of(prefix: str) -> int:
    return sum(tf.io.gfile.stat(f).length for f in _files_of(prefix))


class Checkpointer(tf.train.CheckpointManager):
    """tf.train.CheckpointManager with the guards and the fallback of the module docstring.
    Creating it restores the newest readable checkpoint into `checkpoint` (`restored` is its
    path, or None).

    It is a CheckpointManager so that TensorFlow's PreemptionCheckpointHandler can save through
    it (its restore_or_initialize only reports what was restored). `writable` false (an
    evaluation) neither probes nor tidies model_dir."""

    def __init__(self, checkpoint: tf.train.Checkpoint, directory: str, step_counter,
                 max_to_keep: int | None, chief: bool = True, writable: bool = True,
                 guard_variables: Sequence[tf.Variable] = ()):
        self.chief = chief
        self.guard_variables = list(guard_variables)
        self._parts: dict[str, object] = {}
        self._directory = directory
        self._last_size = sum(math.prod(v.shape) * tf.as_dtype(v.dtype).size
                              for v in self.guard_variables) * 3  # weights + Adam's two slots
        tidy = chief and writable
        if tidy:
            self._prepare_directory()
        else:
            try:  # CheckpointManager.__init__ would raise on it; only a writable run removes it
                tf.train.get_checkpoint_state(directory)
            except ValueError as e:
                raise CheckpointError(
                    f"{os.path.join(directory, 'checkpoint')} is damaged ({first_line(e)}): "
                    "rerun the training command, which rebuilds it from the checkpoints on "
                    "disk, or delete it (the checkpoints stay)") from None
        self.restored = self._restore(checkpoint, tidy)
        if self.restored:
            self._last_size = _size_of(self.restored) or self._last_size
        super().__init__(checkpoint, directory, max_to_keep=max_to_keep or None,
                         step_counter=step_counter, checkpoint_name=PREFIX)

    # ----- the directory
    def _prepare_directory(self) -> None:
        """Creates model_dir, proves it writable, removes the leftovers of a killed save, and
        drops a damaged `checkpoint` state file (restoring rebuilds it)."""
        directory = self._directory
        try:
            tf.io.gfile.makedirs(directory)
            probe = os.path.join(directory, ".write_test")
            with tf.io.gfile.GFile(probe, "w") as f:
                f.write("ok")
            tf.io.gfile.remove(probe)
        except (tf.errors.OpError, OSError) as e:
            raise CheckpointWriteError(f"model_dir {directory} is not writable: "
                                       f"{first_line(e)}") from None
        for temp in tf.io.gfile.glob(os.path.join(directory, f"{PREFIX}-*_temp")):
            print(f"removing {temp}, left by an interrupted save", flush=True)
            tf.io.gfile.rmtree(temp)
        problem = _damaged_state(directory)
        if problem:
            state = os.path.join(directory, "checkpoint")
            print(f"{state} is damaged ({problem}); it is rebuilt from the checkpoints on disk",
                  flush=True)
            tf.io.gfile.remove(state)

    def _on_disk(self) -> list[str]:
        return checkpoints_on_disk(self._directory)

    def _listed(self) -> list[str]:
        """The prefixes the `checkpoint` state file names (get_checkpoint_state has already put
        the directory in front of the relative ones)."""
        try:
            state = tf.train.get_checkpoint_state(self._directory)
        except ValueError:  # damaged (see _damaged_state): it names nothing
            return []
        if state is None:
            return []
        return list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]

    def check_space(self, saves: int = 1, then: int = 0) -> None:
        """Fails naming model_dir when its disk cannot hold the next `saves` checkpoints, as
        many as exist at once (rotation deletes an old one only after the new one is written),
        and after the last of them `then` bytes more (e.g. the exported models). Checkpoints
        are taken at the size of the last one; local disks only, the chief only."""
        if not self.chief or not _is_local(self._directory):
            return
        kept, most = len(self.checkpoints), self._max_to_keep
        at_once = 0  # more checkpoints than now, at the peak
        if saves:
            before_last = kept + saves - 1 if most is None else min(kept + saves - 1, most)
            at_once = max(before_last + 1 - kept, 1)
        after = kept + saves if most is None else min(kept + saves, most)
        needed = int(max(at_once * self._last_size, max(after - kept, 0) * self._last_size + then)
                     * SPACE_MARGIN)
        free = shutil.disk_usage(self._directory).free
        if free >= needed:
            return
        if at_once == 1 and not then:
            what = "a checkpoint needs"
        elif not saves:
            what = "the exported models need"
        else:
            what = (f"the rest of this run ({at_once} checkpoint(s) at once"
                    f"{', then the exported models' if then else ''}) needs")
        raise CheckpointWriteError(
            f"model_dir {self._directory} has {free / 2**20:.1f} MB free but {what} about "
            f"{needed / 2**20:.1f} MB: free some space (the checkpoints already there are "
            f"intact{self._latest_note()}) and rerun to resume")

    def _latest_note(self) -> str:
        return f"; the newest is {self.latest}" if self.latest else ""

    @property
    def latest(self) -> str | None:
        return self.latest_checkpoint

    # ----- restoring
    def _restore(self, checkpoint: tf.train.Checkpoint, tidy: bool) -> str | None:
        """Restores the newest readable checkpoint (see the module docstring); returns its
        path, or None when model_dir holds none."""
        listed, on_disk = self._listed(), self._on_disk()
        foreign = [p for p in listed if p not in on_disk and tf.io.gfile.exists(p + ".index")]
        indexed = [p[:-len(".index")] for p in
                   sorted(tf.io.gfile.glob(os.path.join(self._directory, "*.index")))]
        foreign = foreign or [p for p in indexed if _step_of(p) < 0]
        if foreign and not on_disk:
            raise CheckpointError(
                f"{self._directory} holds {os.path.basename(foreign[-1])}, a checkpoint in "
                "another program's layout (a TF1 checkpoint, as the original's "
                "run_pretraining.py writes and Google's releases ship), which this run cannot "
                "resume. To train on from it, start a new run (a new --model_name) with "
                f'"init_checkpoint": "{self._directory}" in --hparams; add '
                '"init_optimizer_state": true to count on from its step with its Adam slots, '
                "when a run of the original wrote it (docs/checkpoints.md)")
        for prefix in listed:
            if prefix not in on_disk and prefix not in foreign:
                print(f"the checkpoint file names {prefix}, whose files are gone; skipping it",
                      flush=True)
        failures = []
        for prefix in reversed(on_disk):
            try:
                status = checkpoint.restore(prefix)
                status.expect_partial()  # the tracked parts are restored on their own
                status.assert_existing_objects_matched()
            except (AssertionError, ValueError) as e:
                raise CheckpointError(
                    f"{prefix} does not fit this run's model and optimizer "
                    f"({first_line(e)}); resume with the hparams it was written with, or "
                    "use a new model_name") from None
            except Exception as e:  # anything unreadable: truncated, zeroed, missing data
                failures.append(f"{os.path.basename(prefix)}: {first_line(e)}")
                print(f"{prefix} cannot be read ({first_line(e)}); trying an older "
                      "checkpoint", flush=True)
                continue
            if failures:
                print(f"resuming from {prefix}, the newest readable checkpoint", flush=True)
            usable = [p for p in on_disk if _step_of(p) <= _step_of(prefix)]
            if tidy and usable != listed:
                # The state file names what is usable, for rotation and for the next rerun.
                tf.compat.v1.train.update_checkpoint_state(
                    self._directory, prefix, all_model_checkpoint_paths=usable)
            return prefix
        if failures:
            raise CheckpointError(
                f"none of the checkpoints in {self._directory} can be read "
                f"({'; '.join(failures)}); move them away to start afresh")
        left = {os.path.basename(p) for p in listed}
        left.update(match.group(1) for match in map(_FILE.match, tf.io.gfile.listdir(
            self._directory) if tf.io.gfile.isdir(self._directory) else []) if match)
        if left:
            names = ", ".join(sorted(left, key=_step_of))
            raise CheckpointError(
                f"{self._directory} has no checkpoint that can be restored, yet {names} "
                f"{'is' if len(left) == 1 else 'are'} there or named by its checkpoint file "
                "(an .index file is missing): refusing to start afresh over them. Put the "
                "missing files back to resume, or move the ckpt-* files and the checkpoint file "
                "out of it (or use a new model_name) to start afresh")
        return None

    def restore_or_initialize(self):
        """What restore() restored (PreemptionCheckpointHandler calls this)."""
        return self.restored

    def track(self, name: str, trackable) -> None:
        """Saves `trackable` under `name` from now on (e.g. the input iterator)."""
        setattr(self._checkpoint, name, trackable)
        self._parts[name] = trackable

    def restore_part(self, name: str, what: str) -> bool:
        """Restores a tracked part from the restored checkpoint; says so, or that the checkpoint
        has none that fits (an older checkpoint, changed input files), and returns which."""
        try:
            status = tf.train.Checkpoint(**{name: self._parts[name]}).restore(self.restored)
            status.expect_partial()
            status.assert_existing_objects_matched()
        except Exception as e:
            print(f"{what} could not be restored from {self.restored} ({first_line(e)}): "
                  "starting it afresh", flush=True)
            return False
        print(f"restored {what}", flush=True)
        return True

    @contextlib.contextmanager
    def without(self, name: str) -> Iterator[None]:
        """Saves leave out the tracked part `name` meanwhile (e.g. a failed input pipeline)."""
        part = self._parts.get(name)
        if part is not None:
            delattr(self._checkpoint, name)
        try:
            yield
        finally:
            if part is not None:
                setattr(self._checkpoint, name, part)

    # ----- saving
    def save(self, checkpoint_number=None, check_interval: bool = True, options=None):
        """Writes ckpt-<checkpoint_number> with the guards of the module docstring; returns its
        path (None on a non-chief worker)."""
        step = int(checkpoint_number)
        if self.guard_variables and not all_finite(self.guard_variables):
            raise CheckpointWriteError(
                f"refusing to save non-finite weights at step {step}"
                f"{self._latest_note()} (kept)")
        if not self.chief:
            scratch = tempfile.mkdtemp(prefix="electra_tf_worker_ckpt_")
            try:
                self._checkpoint.write(os.path.join(scratch, PREFIX))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            return None
        self.check_space()
        prefix = os.path.join(self._directory, f"{PREFIX}-{step}")
        try:
            path = super().save(checkpoint_number=step, check_interval=check_interval,
                                options=options)
        except (tf.errors.OpError, OSError) as e:
            self._remove_partial(prefix)
            raise CheckpointWriteError(
                f"could not write the checkpoint {prefix}: {first_line(e)}; nothing of it is "
                f"left behind and the earlier checkpoints are intact{self._latest_note()}. "
                "Free space or fix the permissions of model_dir and rerun to resume") from None
        self._last_size = _size_of(path) or self._last_size
        print(f"saved {path}", flush=True)
        return path

    def _remove_partial(self, prefix: str) -> None:
        for path in _files_of(prefix) + tf.io.gfile.glob(prefix + "_temp"):
            try:
                (tf.io.gfile.rmtree if tf.io.gfile.isdir(path) else tf.io.gfile.remove)(path)
            except tf.errors.OpError:
                pass


def fork(source_dir: str, step: int, target_dir: str,
         config_name: str = "pretrain_config.json") -> str:
    """Starts a run in `target_dir` from `source_dir`'s checkpoint at `step`: its files (weights,
    optimizer state, random streams, input position) and the source's saved config are copied,
    so the new run resumes exactly where the source was at `step`, and the hparams it changes
    (e.g. a decay branch's num_train_steps and lr_decay_steps) are checked and recorded as any
    resume's. Each file is copied under a temporary name and renamed, the index last, so an
    interrupted fork leaves no checkpoint that looks complete; a target that already holds a
    checkpoint is left as it is. Returns the target's checkpoint prefix."""
    prefix = os.path.join(source_dir, f"{PREFIX}-{step}")
    target = os.path.join(target_dir, f"{PREFIX}-{step}")
    if tf.io.gfile.glob(os.path.join(target_dir, f"{PREFIX}-*.index")):
        return target
    sources = _files_of(prefix)
    if not any(path.endswith(".index") for path in sources):
        raise CheckpointError(f"{prefix} does not exist: the run in {source_dir} has no "
                              f"checkpoint at step {step} to fork")
    tf.io.gfile.makedirs(target_dir)
    for path in sorted(sources, key=lambda p: p.endswith(".index")):
        with files.renamed_into_place(os.path.join(target_dir, os.path.basename(path))) as tmp:
            tf.io.gfile.copy(path, tmp, overwrite=True)
    config = os.path.join(source_dir, config_name)
    if tf.io.gfile.exists(config):
        with files.renamed_into_place(os.path.join(target_dir, config_name)) as tmp:
            tf.io.gfile.copy(config, tmp, overwrite=True)
    return target


@contextlib.contextmanager
def writing(what: str, then: str = "") -> Iterator[None]:
    """A write in the block that fails (a full disk) becomes a CheckpointWriteError, `could not
    write {what}: {why}{then}`, which stops the run with one line."""
    try:
        yield
    except CheckpointWriteError:
        raise
    except files.WriteError as e:  # a file of what the block writes: its reason, not its name
        raise CheckpointWriteError(f"could not write {what}: {e.reason}{then}") from None
    except (tf.errors.OpError, OSError) as e:
        raise CheckpointWriteError(f"could not write {what}: {first_line(e)}{then}") from None
