"""tf.data input for pretraining: TFRecords of packed examples -> batches.

Files are sharded per input pipeline (tf.distribute.InputContext), read in parallel, shuffled,
repeated (training), batched with drop_remainder and parsed a batch at a time so every shape is
static (TPU, XLA). With a seed the pipeline is deterministic: the same seed gives the same
batches, and a checkpointed iterator continues them exactly. Local paths and gs:// work alike
(tf.io.gfile). Features, as the original's builder writes them: int64 `input_ids`,
`input_mask`, `segment_ids` of max_seq_length each.
"""

from __future__ import annotations

import os

import tensorflow as tf
from google.protobuf import message

from electra_tf import files, tokenization

FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids")
# What pretrain_data/build_pretraining_dataset.py writes beside its shards, with its vocabulary.
BUILD_SUMMARY = "build_summary.json"
# While the builder moves a complete build into place (pretrain_data/shard_files.publish), its summary waits here (then last).
PUBLISHING_SUMMARY = os.path.join("incomplete", BUILD_SUMMARY)
_ID_RECORDS_PER_FILE = 16  # the first records of each file whose largest token id is checked


class InputError(ValueError):
    """The TFRecords are missing or do not match the config."""


def list_files(patterns: str) -> list[str]:
    """Files matching a comma-separated list of glob patterns, sorted."""
    files = []
    for pattern in patterns.split(","):
        files.extend(tf.io.gfile.glob(pattern.strip()))
    return sorted(set(files))


def _first_records(files: list[str]) -> dict[str, bytes]:
    """The first record of every file that has a readable one, read in parallel."""
    ds = tf.data.Dataset.from_tensor_slices(files).interleave(
        lambda path: tf.data.TFRecordDataset(path).take(1).map(lambda r: (path, r)),
        cycle_length=min(16, len(files)), num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.ignore_errors()
    return {path.decode(): record for path, record in ds.as_numpy_iterator()}


def check_files(patterns: str, max_seq_length: int) -> list[str]:
    """The files to read: those matching `patterns` that hold examples. Fails naming the
    pattern or file when there is nothing to read, when the builder's move of a build into a
    directory was interrupted, when a file's first record cannot be read (a foreign or damaged
    file), or when it does not have the three features at max_seq_length. An empty file is
    left out, as the original's reader passes over it (the builder writes one when a worker
    has fewer examples than shards). Damage further into a file is found when training reads
    it (find_unreadable)."""
    files = list_files(patterns)
    if not files:
        raise InputError(f"no TFRecords match {patterns!r}; build them with "
                         "pretrain_data/build_pretraining_dataset.py into "
                         "DATA_DIR/pretrain_tfrecords/ or set the pretrain_tfrecords hparam")
    for directory in sorted({os.path.dirname(path) for path in files}):
        if tf.io.gfile.exists(os.path.join(directory, PUBLISHING_SUMMARY)):
            raise InputError(
                f"{directory} holds a build whose move into place was interrupted (its "
                f"{PUBLISHING_SUMMARY} is still there): rerun "
                "pretrain_data/build_pretraining_dataset.py with the same --output_dir and "
                "without --overwrite, which finishes the move and then stops, the directory "
                "holding a complete build")
    first = _first_records(files)
    for path in files:
        if path not in first:  # the parallel pass skipped it: read it alone for the error
            try:
                record = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
            except tf.errors.OpError as e:
                raise InputError(f"{path} is not a readable TFRecord file: {e.message}; "
                                 "remove it from the input or rebuild it") from None
            if record is None:
                continue
            first[path] = record.numpy()
        try:
            example = tf.train.Example.FromString(first[path])
        except message.DecodeError:
            raise InputError(f"{path} holds no tf.train.Example records; remove it from the "
                             "input") from None
        for name in FEATURE_NAMES:
            if name not in example.features.feature:
                raise InputError(f"{path}: examples lack the feature {name!r}; expected "
                                 f"{FEATURE_NAMES}")
            length = len(example.features.feature[name].int64_list.value)
            if length != max_seq_length:
                raise InputError(
                    f"{path}: feature {name!r} has length {length} but max_seq_length is "
                    f"{max_seq_length}; rebuild the data with --max_seq_length "
                    f"{max_seq_length} or set the max_seq_length hparam to {length}")
    if not first:
        raise InputError(f"the {len(files)} TFRecord file(s) matching {patterns!r} hold no "
                         "examples; rebuild them from a corpus with text")
    return [path for path in files if path in first]


def read_build_summary(path: str) -> dict | None:
    """A builder's summary; None when there is none or it cannot be read (the ids are still
    checked)."""
    try:
        summary = files.read_json(path)
    except ValueError:
        return None
    return summary if isinstance(summary, dict) else None


def _largest_id(files: list[str]) -> int:
    """The largest input id in the first records of every file (-1 when none can be read)."""
    spec = {"input_ids": tf.io.VarLenFeature(tf.int64)}
    ds = tf.data.Dataset.from_tensor_slices(files).interleave(
        lambda path: tf.data.TFRecordDataset(path).take(_ID_RECORDS_PER_FILE),
        cycle_length=min(16, len(files)), num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.ignore_errors().batch(4096).map(
        lambda records: tf.reduce_max(tf.io.parse_example(records, spec)["input_ids"].values))
    return max((int(value) for value in ds.as_numpy_iterator()), default=-1)


def check_vocabulary(files: list[str], vocab_file: str) -> None:
    """Fails naming both files when the vocabulary is not the one the TFRecords were built
    with: another size or fingerprint than the builder's build_summary.json beside them records
    (a summary without a fingerprint, written before it was recorded: the size only), or a
    token id in their first records beyond the vocabulary."""
    tokens = tokenization.read_vocab(vocab_file)
    size = len(tokens)
    fix = (f"rebuild them with pretrain_data/build_pretraining_dataset.py --vocab_file "
           f"{vocab_file}, or set the vocab_file hparam to the vocabulary they were built with")
    for directory in sorted({os.path.dirname(path) for path in files}):
        path = os.path.join(directory, BUILD_SUMMARY)
        summary = read_build_summary(path)
        if summary is None:
            continue
        theirs = summary.get("vocab_fingerprint")
        if summary.get("vocab_size", size) != size or (
                theirs is not None and theirs != tokenization.vocab_fingerprint(tokens)):
            raise InputError(
                f"{vocab_file} ({size} tokens) is not the vocabulary the TFRecords in "
                f"{directory} were built with: {path} names {summary.get('vocab_file')} "
                f"({summary.get('vocab_size', 'an unrecorded number of')} tokens); {fix}")
    largest = _largest_id(files)
    if largest >= size:
        where = next(path for path in files if _largest_id([path]) == largest)
        raise InputError(f"{where} holds token id {largest} but {vocab_file} has only {size} "
                         f"tokens: the TFRecords were built with another vocabulary; {fix}")


def find_unreadable(files: list[str]) -> tuple[str, str] | None:
    """The first file that cannot be read to its end, and the error, or None (used after a
    DataLossError, which does not say which file it came from)."""
    for path in files:
        try:
            tf.data.TFRecordDataset(path).reduce(0, lambda n, _: n + 1)
        except tf.errors.OpError as e:
            return path, e.message.splitlines()[0]
    return None


def decode_record(records, max_seq_length: int) -> dict[str, tf.Tensor]:
    """Serialized tf.train.Examples (one, or a batch) -> int32 features (TPUs take no int64)."""
    spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in FEATURE_NAMES}
    examples = tf.io.parse_example(records, spec)
    return {name: tf.cast(value, tf.int32) for name, value in examples.items()}


def pretraining_dataset(files: list[str], batch_size: int, max_seq_length: int,
                        is_training: bool = True,
                        input_context: tf.distribute.InputContext | None = None,
                        seed: int | None = None, deterministic: bool | None = None,
                        shuffle_buffer: int = 100, cycle_length: int = 4) -> tf.data.Dataset:
    """Batches of `batch_size` examples for one input pipeline (per replica under
    distribute_datasets_from_function: pass the per-replica batch size).

    Training repeats forever and shuffles files and examples; evaluation reads the files once,
    in order, without shuffling. `deterministic` (default: when a seed is given) keeps the
    parallel reads in order, so that a seed fixes the batches."""
    if deterministic is None:
        deterministic = seed is not None
    pipelines = input_context.num_input_pipelines if input_context else 1
    # Each pipeline reads its own files; with fewer files than pipelines, its own records.
    shard_records = len(files) < pipelines
    ds = tf.data.Dataset.from_tensor_slices(files)
    if pipelines > 1 and not shard_records:
        ds = ds.shard(pipelines, input_context.input_pipeline_id)
    if is_training:
        if not shard_records:  # record sharding needs every pipeline to see the same file order
            ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        ds = ds.repeat()
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(cycle_length, len(files)),
                       num_parallel_calls=tf.data.AUTOTUNE,
                       deterministic=deterministic or not is_training or shard_records)
    if shard_records and pipelines > 1:
        ds = ds.shard(pipelines, input_context.input_pipeline_id)
    if is_training:
        ds = ds.shuffle(shuffle_buffer, seed=seed)
    # Parsing a whole batch at once is much faster than record by record.
    ds = ds.batch(batch_size, drop_remainder=True)
    ds = ds.map(lambda r: decode_record(r, max_seq_length), num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=deterministic or not is_training)
    return ds.prefetch(tf.data.AUTOTUNE)
