"""A linear probe of the discriminator: does what pretraining learns transfer, while it runs?

A linear probe (Alain & Bengio 2016, "Understanding intermediate layers using linear classifier
probes") fits a linear model on frozen features. Here the features are the discriminator's last
layer on a labelled GLUE-format task: the [CLS] vector beside the mean of the real tokens'
vectors, standardised with the training split's statistics. A classification task is fit with
scikit-learn's LogisticRegression (L2, C=1, lbfgs), a regression task (STS-B) with Ridge
(alpha=1); both are deterministic, so the same weights give the same probe. The score is the
task's GLUE main metric (accuracy; Spearman x 100 for STS-B) on the task's train split (how
separable the features are) and its dev split (how well that generalises).

run_pretraining.py runs it every `probe_steps` steps and at the end when `probe_task` names a
task directory (`DIR/finetuning_data/sst`: its name is the GLUE task, its train.tsv and
dev.tsv are read; at most `probe_examples` rows of each, the first ones):

>>> import os, tempfile
>>> from electra_tf import modeling, tokenization
>>> folder = os.path.join(tempfile.mkdtemp(), "sst")  # the folder's name is the task's
>>> os.makedirs(folder)
>>> for split, rows in (("train", ["good film\\t1", "bad film\\t0"] * 4),
...                     ("dev", ["good\\t1", "bad\\t0"])):
...     with open(os.path.join(folder, f"{split}.tsv"), "w") as f:
...         _ = f.write("sentence\\tlabel\\n" + "\\n".join(rows) + "\\n")
>>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "film"]
>>> linear = LinearProbe.from_directory(folder, tokenization.WordPieceTokenizer(vocab), 8)
>>> encoder = modeling.Encoder(vocab_size=8, hidden_size=16, num_hidden_layers=1,
...                            num_attention_heads=2, intermediate_size=32)
>>> sorted(linear(encoder))
['probe_dev_accuracy', 'probe_train_accuracy']
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable

import numpy as np
import tensorflow as tf

from electra_tf.finetuning import glue
from electra_tf.tokenization import WordPieceTokenizer

BATCH_SIZE = 64


@dataclasses.dataclass
class LinearProbe:
    """A task's featurized train and dev splits; calling it with an encoder scores the
    encoder's frozen features."""
    task: glue.GlueTask
    train: dict[str, np.ndarray]
    dev: dict[str, np.ndarray]

    @classmethod
    def from_directory(cls, directory: str, tokenizer: WordPieceTokenizer, max_seq_length: int,
                       max_examples: int = 2000) -> LinearProbe:
        """The GLUE task named like `directory` (sst, sts, qnli, ...) from its train.tsv and
        dev.tsv. Errors name the `probe_task` hparam."""
        name = os.path.basename(os.path.normpath(directory))
        try:
            task = glue.get_task(name)
        except ValueError as e:
            raise ValueError(f"probe_task {directory!r}: the directory's name must be a GLUE "
                             f"task's, e.g. DATA_DIR/finetuning_data/sst ({e})") from None
        splits = {}
        for split in ("train", "dev"):
            try:
                examples = task.read(directory, split, double_unordered=False)[:max_examples]
            except (FileNotFoundError, glue.DataError) as e:
                raise ValueError(f"probe_task {directory!r}: {e}") from None
            splits[split] = task.featurize(examples, tokenizer, max_seq_length)
            if len(set(splits[split]["label"].tolist())) < 2:
                raise ValueError(f"probe_task {directory!r}: its {split} split has a single "
                                 "label; a probe needs at least two")
        return cls(task, splits["train"], splits["dev"])

    def __call__(self, encoder) -> dict[str, float]:
        """{probe_train_<metric>, probe_dev_<metric>} of the encoder's current weights."""
        pooled = pooled_features(encoder)
        train_x, dev_x = pooled(self.train), pooled(self.dev)
        mean, std = train_x.mean(0), train_x.std(0) + 1e-6
        train_x, dev_x = (train_x - mean) / std, (dev_x - mean) / std
        model = _linear_model(self.task.is_regression)
        model.fit(train_x, self.train["label"])
        scores = {}
        for split, x, arrays in (("train", train_x, self.train), ("dev", dev_x, self.dev)):
            results = self.task.score(arrays["label"].tolist(), model.predict(x).tolist())
            scores[f"probe_{split}_{self.task.main_metric_name}"] = \
                self.task.main_metric(results)
        return scores


@functools.lru_cache(maxsize=4)
def pooled_features(encoder) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """arrays -> [N, 2H]: the last layer's [CLS] vector and the mean over the real tokens, in
    float32. Batches are padded to BATCH_SIZE rows, so the graph is traced once per encoder."""

    @tf.function
    def pooled(ids, mask, segments):
        sequence = tf.cast(encoder(ids, mask, segments, training=False), tf.float32)
        weights = tf.cast(mask, tf.float32)[:, :, None]
        mean = tf.reduce_sum(sequence * weights, 1) / tf.maximum(tf.reduce_sum(weights, 1), 1.0)
        return tf.concat([sequence[:, 0], mean], axis=-1)

    def run(arrays: dict[str, np.ndarray]) -> np.ndarray:
        rows = len(arrays["input_ids"])
        batches = []
        for start in range(0, rows, BATCH_SIZE):
            inputs = [arrays[k][start:start + BATCH_SIZE]
                      for k in ("input_ids", "input_mask", "segment_ids")]
            n = len(inputs[0])
            padded = [np.pad(x, ((0, BATCH_SIZE - n), (0, 0))) for x in inputs]
            batches.append(pooled(*padded).numpy()[:n])
        return np.concatenate(batches)

    return run


def _linear_model(regression: bool):
    from sklearn.linear_model import LogisticRegression, Ridge

    return Ridge(alpha=1.0) if regression else LogisticRegression(C=1.0, max_iter=1000)
