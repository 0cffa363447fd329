"""Shared fixtures: a tiny model config, TFRecords in the original's layout, the real vocab, and
the real data the tests read, shipped in tests/data/ (see its README)."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

try:  # triton (PyPI's CUDA build of torch has it) crashes imported after TensorFlow, not before
    import triton  # noqa: F401
except ImportError:
    pass

import electra_tf  # noqa: F401,E402  (first: decides oneDNN before TensorFlow loads)
import numpy as np
import pytest
import tensorflow as tf

REPO = pathlib.Path(__file__).resolve().parents[1]
TEST_DATA = REPO / "tests" / "data"
SAMPLE = REPO / "pretrain_data" / "sample"  # the quickstart's corpus and vocab
BERT_VOCAB = SAMPLE / "vocab.txt"

# A model small enough for a CPU test, with embedding size != hidden size (the projection path).
TINY_MODEL = {
    "model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 2,
                               "num_attention_heads": 2, "intermediate_size": 64},
    "embedding_size": 16,
    "generator_hidden_size": 0.25,
    "max_seq_length": 32,
    "train_batch_size": 8,
    "eval_batch_size": 8,
    "num_warmup_steps": 2,
    "learning_rate": 1e-3,
    "seed": 1,
}

TINY_FINETUNING = {
    "model_hparam_overrides": TINY_MODEL["model_hparam_overrides"],
    "embedding_size": TINY_MODEL["embedding_size"], "max_seq_length": 32,
    "train_batch_size": 8, "eval_batch_size": 8, "predict_batch_size": 8,
    "learning_rate": 1e-3, "log_steps": 10,
    # The SavedModel export (on by default) takes seconds a trial; the tests of it turn it on.
    "export_saved_model": False,
}


def write_sst_files(directory, n_train=160, n_dev=40, n_test=24):
    """SST-2's format (header "sentence\\tlabel"; test "index\\tsentence") from the real
    movie-review snippets: positive score -> 1, negative -> 0, exactly 0 dropped."""
    by_label = {"0": [], "1": []}
    for line in (TEST_DATA / "movie_review_snippets.tsv").read_text(
            encoding="utf-8").splitlines():
        _, score, sentence = line.split("\t")
        if float(score) != 0:
            by_label["1" if float(score) > 0 else "0"].append((sentence, "1" if float(score) > 0
                                                               else "0"))
    # The file is sorted by source: alternate the labels so every split is balanced.
    rows = [row for pair in zip(by_label["0"], by_label["1"]) for row in pair]
    directory.mkdir(parents=True)
    train, dev, test = rows[:n_train], rows[n_train:n_train + n_dev], rows[-n_test:]
    assert sum(label == "1" for _, label in dev) == n_dev // 2
    (directory / "train.tsv").write_text(
        "sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in train), encoding="utf-8")
    (directory / "dev.tsv").write_text(
        "sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in dev), encoding="utf-8")
    (directory / "test.tsv").write_text(
        "index\tsentence\n" + "".join(f"{i}\t{s}\n" for i, (s, _) in enumerate(test)),
        encoding="utf-8")
    return dev


@pytest.fixture(scope="session")
def _finetuning_files(tmp_path_factory):
    """finetuning_dir's files, written once a test process: its tests each get a copy."""
    from electra_tf.finetuning.config import from_hparams

    directory = tmp_path_factory.mktemp("finetuning_files")
    shutil.copy(BERT_VOCAB, directory / "vocab.txt")
    write_sst_files(directory / "finetuning_data" / "sst")
    save_discriminator(directory, "tiny", from_hparams("tiny", str(directory), TINY_FINETUNING))
    return directory


@pytest.fixture
def finetuning_dir(tmp_path, _finetuning_files):
    """DATA_DIR with vocab.txt, finetuning_data/sst/ and a tiny pretrained discriminator in
    models/tiny/discriminator.keras (as run_pretraining.py exports it): the test's own copy."""
    shutil.copytree(_finetuning_files, tmp_path, dirs_exist_ok=True)
    return tmp_path


def save_discriminator(data_dir, model_name: str, config) -> None:
    """A randomly initialised discriminator of config's shape where run_pretraining.py exports
    one: DATA_DIR/models/NAME/discriminator.keras."""
    from electra_tf import modeling

    encoder = modeling.Encoder(**config.bert_config(), embedding_size=config.embedding_size,
                               name="electra")
    discriminator = modeling.ElectraDiscriminator(encoder, name="electra_discriminator")
    discriminator.build()
    (data_dir / "models" / model_name).mkdir(parents=True)
    discriminator.save(data_dir / "models" / model_name / "discriminator.keras")


def save_pretraining_run(data_dir, model_name: str, config, step: int,
                         edit: Callable | None = None) -> None:
    """A randomly initialised pretraining run where run_pretraining.py leaves one:
    DATA_DIR/models/NAME/ with its pretrain_config.json and a checkpoint of the model, the
    optimizer (at `step`) and the random stream, named for `step`. `edit(state)` may change
    the pretraining.PretrainingState before it is saved."""
    import tensorflow as tf

    from electra_tf import pretraining

    model_dir = data_dir / "models" / model_name
    model_dir.mkdir(parents=True)
    (model_dir / "pretrain_config.json").write_text(config.to_json())
    special = pretraining.SpecialIds.from_vocab(pretraining.load_vocab(config.vocab_file))
    state = pretraining.create_state(config, special, tf.distribute.get_strategy())
    state.optimizer.iterations.assign(step)
    if edit is not None:
        edit(state)
    tf.train.CheckpointManager(state.checkpoint(), str(model_dir), max_to_keep=1,
                               checkpoint_name="ckpt").save(checkpoint_number=step)


if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def write_tfrecords(directory: pathlib.Path, num_files: int = 2, examples_per_file: int = 40,
                    seq_length: int = 32, seed: int = 0) -> list[str]:
    """Packed-example TFRecords as the original's builder writes them: [CLS] A [SEP] B [SEP],
    zero padding, segment ids 0/1, int64 features."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for shard in range(num_files):
        path = directory / f"pretrain_data.tfrecord-{shard}-of-{num_files}"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for _ in range(examples_per_file):
                length = int(rng.integers(6, seq_length + 1))
                split = int(rng.integers(2, length - 2))
                ids = [101, *rng.integers(1000, 30000, split - 1), 102,
                       *rng.integers(1000, 30000, length - split - 2), 102]
                segments = [0] * (split + 1) + [1] * (length - split - 1)
                pad = seq_length - length
                feature = {
                    "input_ids": ids + [0] * pad,
                    "input_mask": [1] * length + [0] * pad,
                    "segment_ids": segments + [0] * pad,
                }
                example = tf.train.Example(features=tf.train.Features(feature={
                    k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
                    for k, v in feature.items()}))
                writer.write(example.SerializeToString())
        paths.append(str(path))
    return paths


@pytest.fixture
def data_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    """A DATA_DIR in the original's layout: vocab.txt and pretrain_tfrecords/."""
    shutil.copy(BERT_VOCAB, tmp_path / "vocab.txt")
    write_tfrecords(tmp_path / "pretrain_tfrecords")
    return tmp_path


def share_changed(before: list[np.ndarray], variables) -> float:
    """The share of `variables` whose values differ from `before`, copies taken earlier."""
    return float(np.mean([not np.array_equal(b, v.numpy()) for b, v in zip(before, variables)]))


def tiny_config(data_dir: str | os.PathLike = "/nonexistent", **hparams):
    from electra_tf import config
    return config.from_hparams("tiny", str(data_dir), {**TINY_MODEL, **hparams})


def run_script(*args: str, timeout: int = 600,
               expect_failure: bool = False) -> subprocess.CompletedProcess:
    """Runs a repo script in a fresh interpreter. Fails the test with the script's output when
    it exits non-zero, or with expect_failure when it exits 0."""
    result = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                            timeout=timeout, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if (result.returncode == 0) == expect_failure:
        pytest.fail(f"{' '.join(args)} exited {result.returncode}, expected "
                    f"{'an error' if expect_failure else '0'}\n--- stdout (end)\n"
                    f"{result.stdout[-3000:]}\n--- stderr (end)\n{result.stderr[-5000:]}",
                    pytrace=False)
    return result


@contextlib.contextmanager
def own_flags(module):
    """A command module's flags defined in a FlagValues of their own and standing in for its
    FLAGS within the block: their names (vocab_file, output_dir, ...) are other commands' too,
    which the tests import into absl's global flags. Yields the FlagValues."""
    import unittest.mock

    from absl import flags

    flag_values = flags.FlagValues()
    module.define_flags(flag_values=flag_values)
    with unittest.mock.patch.object(module, "FLAGS", flag_values):
        yield flag_values


def usage_error(module, *argv: str) -> str:
    """A command line's usage error, in this process: parses argv into the module's FLAGS and
    calls its main as command_line.run does, and returns the message that command_line.run
    prints as `error: ...` (exit 2); fails the test if main returns. Spares the fresh
    interpreter (and its TensorFlow import) a run that stops before any work; test_cli runs
    each command's real start-up path in a subprocess."""
    from absl import app

    remaining = module.FLAGS([module.__file__, *argv])
    try:
        module.main(remaining)
    except app.UsageError as e:
        return str(e)
    finally:
        module.FLAGS.unparse_flags()
    pytest.fail(f"{module.__name__} {' '.join(argv)} ran without a usage error", pytrace=False)
