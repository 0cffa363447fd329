"""Shared fixtures: a tiny model config, TFRecords in the original's layout, the real vocab."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"  # beside the checkout, as on CI
SAMPLE = REPO / "pretrain_data" / "sample"  # shipped in the repo
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


def tiny_config(data_dir: str | os.PathLike = "/nonexistent", **hparams):
    from electra_tf import config
    return config.from_hparams("tiny", str(data_dir), {**TINY_MODEL, **hparams})


def run_script(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Runs a repo script in a fresh interpreter; fails the test with its output on error."""
    result = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                            timeout=timeout, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    return result
