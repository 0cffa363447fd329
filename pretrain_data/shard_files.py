"""The output shards of the TFRecord builder: their names, and the output directory's crash-safe
life cycle. Shards are written into --output_dir/incomplete/, where no input pattern finds them;
a complete build is moved into place with its summary last (a move that a crash interrupted is
finished by the next build); an interrupted build's shards are removed, and an earlier build's
are replaced only when asked.
"""

from __future__ import annotations

import os
import re

from absl import logging

SHARD_PREFIX = "pretrain_data.tfrecord"
INCOMPLETE_DIR = "incomplete"  # shards being written, inside --output_dir
_SHARD = re.compile(r"pretrain_data\.tfrecord-\d+-of-\d+")


def shard_name(index: int, num_out_files: int) -> str:
    return f"{SHARD_PREFIX}-{index}-of-{num_out_files}"


def _remove(paths) -> None:
    import tensorflow as tf
    for path in paths:
        if tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)


def _remove_if_empty(directory: str) -> None:
    import tensorflow as tf
    if tf.io.gfile.isdir(directory) and not tf.io.gfile.listdir(directory):
        tf.io.gfile.rmtree(directory)


def prepare_output_dir(output_dir: str, num_out_files: int, overwrite: bool) -> list[str]:
    """Readies output_dir/incomplete/ (finishing the publish of a complete build that a crash
    interrupted, removing the shards of an interrupted build) and returns the shards of an
    earlier build that this one will not replace, to remove when it is complete. Fails when
    output_dir holds an earlier build's shards and not `overwrite`, or other files that the
    input pattern would read with ours."""
    import tensorflow as tf

    from electra_tf import data

    temp_dir = os.path.join(output_dir, INCOMPLETE_DIR)
    tf.io.gfile.makedirs(output_dir)
    finished = _finish_interrupted_publish(output_dir)
    if finished:
        logging.warning("finished publishing the complete build of %d shards whose move into %s "
                        "was interrupted", finished, output_dir)
    names = tf.io.gfile.listdir(output_dir)
    leftovers = [os.path.join(output_dir, name) for name in names
                 if name.endswith(".incomplete") and _SHARD.fullmatch(name[:-11])]
    if tf.io.gfile.isdir(temp_dir):
        # A kill inside write_atomically leaves the summary's temporary file.
        leftovers += [os.path.join(temp_dir, name) for name in tf.io.gfile.listdir(temp_dir)
                      if _SHARD.fullmatch(name) or name.startswith(data.BUILD_SUMMARY + ".tmp-")]
    if leftovers:
        logging.warning("removing %d incomplete files that an interrupted build left (e.g. %s)",
                        len(leftovers), leftovers[0])
        _remove(leftovers)
        _remove_if_empty(temp_dir)
    ours = sorted(name for name in names if _SHARD.fullmatch(name))
    foreign = sorted(name for name in names if name.startswith(SHARD_PREFIX)
                     and not _SHARD.fullmatch(name) and not name.endswith(".incomplete"))
    if foreign:
        raise ValueError(f"the output directory {output_dir} already holds {len(foreign)} "
                         f"other shards (e.g. {foreign[0]}) that pretraining would read with "
                         "these; remove them or build into another directory")
    if ours and not overwrite:
        counts = sorted({int(name.rsplit("-", 1)[1]) for name in ours})
        raise ValueError(
            f"the output directory {output_dir} already holds {len(ours)} shards of an earlier "
            f"build (e.g. {ours[0]}; --num_out_files {', '.join(map(str, counts))}); pass "
            "--overwrite to replace them (they stay until this build is complete) or build "
            "into another directory")
    tf.io.gfile.makedirs(temp_dir)
    new = {shard_name(i, num_out_files) for i in range(num_out_files)}
    return [os.path.join(output_dir, name) for name in ours if name not in new]


def publish(output_dir: str, num_out_files: int, stale: list[str]) -> None:
    """Moves a complete build, its summary already written into output_dir/incomplete/, into
    output_dir in place of an earlier build's shards (`stale`: those it does not replace).

    The summary moves last: while it is in incomplete/ the directory is being published (a
    reader refuses it, and the next build finishes the move: _finish_interrupted_publish);
    once it is beside the shards they are all in place. Every step can be repeated: on gs://,
    where a rename is a copy and a delete, a crash between the two leaves a shard in both
    places."""
    import tensorflow as tf

    from electra_tf.data import BUILD_SUMMARY, PUBLISHING_SUMMARY

    temp_dir = os.path.join(output_dir, INCOMPLETE_DIR)
    _remove([os.path.join(output_dir, BUILD_SUMMARY)])
    for i in range(num_out_files):
        name = shard_name(i, num_out_files)
        if tf.io.gfile.exists(os.path.join(temp_dir, name)):  # else moved before a crash
            tf.io.gfile.rename(os.path.join(temp_dir, name), os.path.join(output_dir, name),
                               overwrite=True)
    missing = [shard_name(i, num_out_files) for i in range(num_out_files)
               if not tf.io.gfile.exists(os.path.join(output_dir, shard_name(i, num_out_files)))]
    if missing:
        raise ValueError(f"{output_dir}: the build being moved into place lacks {len(missing)} "
                         f"of its {num_out_files} shards (e.g. {missing[0]}), in "
                         f"{INCOMPLETE_DIR}/ and out of it; remove {PUBLISHING_SUMMARY} and "
                         "build again")
    _remove(stale)
    if stale:
        logging.warning("removed the %d shards of the earlier build in %s (e.g. %s)", len(stale),
                        output_dir, os.path.basename(stale[0]))
    tf.io.gfile.rename(os.path.join(output_dir, PUBLISHING_SUMMARY),
                       os.path.join(output_dir, BUILD_SUMMARY), overwrite=True)
    _remove_if_empty(temp_dir)


def _finish_interrupted_publish(output_dir: str) -> int:
    """Completes the move of a complete build that a crash interrupted (its summary still in
    incomplete/); returns its number of shards, 0 when there was none."""
    import tensorflow as tf

    from electra_tf.data import PUBLISHING_SUMMARY, read_build_summary

    path = os.path.join(output_dir, PUBLISHING_SUMMARY)
    if not tf.io.gfile.exists(path):
        return 0
    summary = read_build_summary(path)
    if not isinstance((summary or {}).get("num_out_files"), int):
        raise ValueError(f"{path} says a build is being moved into place but cannot be read "
                         "(its shards are not known); remove it and build again")
    num_out_files = summary["num_out_files"]
    ours = {shard_name(i, num_out_files) for i in range(num_out_files)}
    stale = [os.path.join(output_dir, name) for name in tf.io.gfile.listdir(output_dir)
             if _SHARD.fullmatch(name) and name not in ours]
    publish(output_dir, num_out_files, stale)
    return num_out_files


def discard(output_dir: str, num_out_files: int) -> None:
    """Removes this build's incomplete shards."""
    temp_dir = os.path.join(output_dir, INCOMPLETE_DIR)
    _remove(os.path.join(temp_dir, shard_name(i, num_out_files)) for i in range(num_out_files))
    _remove_if_empty(temp_dir)
