"""A linear probe of the discriminator: does what pretraining learns transfer, while it runs?

A linear probe (Alain & Bengio 2016, "Understanding intermediate layers using linear classifier
probes") fits a linear model on frozen features of the discriminator's last layer, standardised
with the training split's statistics, on a labelled task:

- a sentence task (GLUE-format): the [CLS] vector beside the mean of the real tokens' vectors,
  one example a row. A classification task is fit with scikit-learn's LogisticRegression (L2,
  C=1, lbfgs), a regression task (STS-B) with Ridge (alpha=1); the score is the task's GLUE
  main metric (accuracy; Spearman x 100 for STS-B).
- a tagging task (pos, chunk): the vector at each word's first wordpiece, one word an example
  (the words that fit max_seq_length), fit with the same LogisticRegression on the word's
  label (pos: its coarse tag; chunk: its BIOES tag). The scores are `accuracy` and, on dev,
  `unseen_accuracy`: the accuracy on the words (normalised as the tokenizer does: lower-cased
  for an uncased vocabulary) that occur nowhere in the sentences the probe was fit on.

Every score is reported on the task's train split (how separable the features are) and its dev
split (how well that generalises). The fits are deterministic, so the same weights give the
same probe.

run_pretraining.py runs it every `probe_steps` steps and at the end when `probe_task` names a
task directory (`DIR/finetuning_data/sst` or `.../pos`: its name is the task's; its train and
dev files are read, at most `probe_examples` rows or sentences of each, the first ones);
experiments probe exported discriminators with it the same way:

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
>>> folder = os.path.join(os.path.dirname(folder), "pos")  # a tagging task: word TAG lines
>>> os.makedirs(folder)
>>> for split, text in (("train", "good ADJ\\nfilm NOUN\\n\\nbad ADJ\\n\\n" * 4),
...                     ("dev", "bad ADJ\\nfilm NOUN\\n\\nfilm NOUN\\ngood ADJ\\n")):
...     with open(os.path.join(folder, f"{split}.txt"), "w") as f:
...         _ = f.write(text)
>>> linear = LinearProbe.from_directory(folder, tokenization.WordPieceTokenizer(vocab), 8)
>>> sorted(linear(encoder))
['probe_dev_accuracy', 'probe_dev_unseen_accuracy', 'probe_train_accuracy']
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable

import numpy as np
import tensorflow as tf
import threadpoolctl

from electra_tf.finetuning import glue, pos, tagging
from electra_tf.finetuning.task import DataError
from electra_tf.tokenization import WordPieceTokenizer

BATCH_SIZE = 64
# The tasks a probe reads, by name: GLUE's, then the tagging tasks.
PROBED_TASKS: dict[str, glue.GlueTask | tagging.TaggingTask] = {
    **glue.TASKS, **{task.name: task for task in (*tagging.TASKS, *pos.TASKS)}}


@dataclasses.dataclass
class ProbeSplit:
    """One split: the encoder's input arrays and the probe's targets, one a sentence (a
    sentence task) or one a word that fits max_seq_length (a tagging task, whose arrays'
    tag_positions and tag_mask say where each word's first wordpiece is). `unseen` marks a
    tagging task's dev words that the probe's train sentences lack."""
    arrays: dict[str, np.ndarray]
    labels: np.ndarray
    unseen: np.ndarray | None = None


Scores = Callable[[ProbeSplit, np.ndarray], dict[str, float]]


@dataclasses.dataclass
class LinearProbe:
    """A task's featurized train and dev splits; calling it with an encoder scores the
    encoder's frozen features. `scores(split, predicted)` gives a split's metrics by name."""
    task: str
    train: ProbeSplit
    dev: ProbeSplit
    scores: Scores
    regression: bool = False

    @classmethod
    def from_directory(cls, directory: str, tokenizer: WordPieceTokenizer, max_seq_length: int,
                       max_examples: int = 2000) -> LinearProbe:
        """The GLUE task (sst, sts, qnli, ...: train.tsv, dev.tsv) or tagging task (pos, chunk:
        train.txt, dev.txt) named like `directory`, the first `max_examples` rows or sentences
        of each split. Errors name the `probe_task` hparam."""
        name = os.path.basename(os.path.normpath(directory))
        task = PROBED_TASKS.get(name)
        if task is None:
            raise ValueError(f"probe_task {directory!r}: the directory's name must be a GLUE "
                             f"task's or a tagging task's, e.g. DATA_DIR/finetuning_data/sst "
                             f"or DATA_DIR/finetuning_data/pos (one of {list(PROBED_TASKS)})")
        read = _sentence_splits if isinstance(task, glue.GlueTask) else _word_splits
        try:
            train, dev, scores = read(task, directory, tokenizer, max_seq_length, max_examples)
        except (FileNotFoundError, DataError) as e:
            raise ValueError(f"probe_task {directory!r}: {e}") from None
        for split, data in (("train", train), ("dev", dev)):
            if len(set(data.labels.tolist())) < 2:
                raise ValueError(f"probe_task {directory!r}: its {split} split has a single "
                                 "label; a probe needs at least two")
        return cls(name, train, dev, scores, task.is_regression)

    def __call__(self, encoder) -> dict[str, float]:
        """{probe_<split>_<metric>} of the encoder's current weights: the main metric first."""
        features = encoder_features(encoder)
        train_x, dev_x = features(self.train.arrays), features(self.dev.arrays)
        mean, std = train_x.mean(0), train_x.std(0) + 1e-6
        train_x, dev_x = (train_x - mean) / std, (dev_x - mean) / std
        # One BLAS thread: these matrices are small, so threads only contend with each other
        # (and with TensorFlow's), and one thread's sums do not depend on the machine's cores.
        with threadpoolctl.threadpool_limits(limits=1):
            model = _linear_model(self.regression)
            model.fit(train_x, self.train.labels)
            predicted = {"train": model.predict(train_x), "dev": model.predict(dev_x)}
        return {f"probe_{name}_{metric}": value
                for name, split in (("train", self.train), ("dev", self.dev))
                for metric, value in self.scores(split, predicted[name]).items()}


def _sentence_splits(task: glue.GlueTask, directory: str, tokenizer: WordPieceTokenizer,
                     max_seq_length: int, max_examples: int
                     ) -> tuple[ProbeSplit, ProbeSplit, Scores]:
    """A GLUE task's splits, a label a row; scored by the task's main metric."""
    splits = []
    for split in ("train", "dev"):
        examples = task.read(directory, split, double_unordered=False)[:max_examples]
        arrays = task.featurize(examples, tokenizer, max_seq_length)
        splits.append(ProbeSplit(arrays, arrays["label"]))

    def scores(split: ProbeSplit, predicted: np.ndarray) -> dict[str, float]:
        results = task.score(split.labels.tolist(), predicted.tolist())
        return {task.main_metric_name: task.main_metric(results)}

    return *splits, scores


def _word_splits(task: tagging.TaggingTask, directory: str, tokenizer: WordPieceTokenizer,
                 max_seq_length: int, max_examples: int) -> tuple[ProbeSplit, ProbeSplit, Scores]:
    """A tagging task's splits, a label (the task's head's class) a word that fits; scored by
    accuracy, and on dev by the accuracy on words unseen in the train sentences."""
    sentences = {split: task.read(os.path.join(directory, f"{split}.txt"))[:max_examples]
                 for split in ("train", "dev")}
    unseen = pos.unseen_words(sentences["train"], sentences["dev"], tokenizer.normalize)
    splits = []
    for split, flags in (("train", None), ("dev", unseen)):
        labels = [list(task.word_labels(s)) for s in sentences[split]]
        # The arrays' tag_labels are not needed: the probe's labels are the label strings.
        arrays, _ = tagging.featurize([s.words for s in sentences[split]],
                                      [[0] * len(row) for row in labels], tokenizer,
                                      max_seq_length)
        fits = arrays["tag_mask"].sum(-1).astype(int)
        splits.append(ProbeSplit(
            arrays, np.array([tag for row, n in zip(labels, fits) for tag in row[:n]]),
            None if flags is None else np.array(
                [u for row, n in zip(flags, fits) for u in row[:n]], bool)))

    def scores(split: ProbeSplit, predicted: np.ndarray) -> dict[str, float]:
        results = pos.accuracies([split.labels.tolist()], [predicted.tolist()],
                                 [split.unseen.tolist() if split.unseen is not None
                                  else [False] * len(predicted)])
        return results if split.unseen is not None else {"accuracy": results["accuracy"]}

    return *splits, scores


@functools.lru_cache(maxsize=4)
def encoder_features(encoder) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """arrays -> the probe's features from the encoder's last layer, in float32: [N, 2H], the
    [CLS] vector and the mean over the real tokens of each row; or, for arrays with
    tag_positions (a tagging task), [words, H], the vector at each word's first wordpiece.
    Batches are padded to BATCH_SIZE rows, so the graph is traced once per encoder."""

    @tf.function
    def sequence(ids, mask, segments):
        return tf.cast(encoder(ids, mask, segments, training=False), tf.float32)

    def run(arrays: dict[str, np.ndarray]) -> np.ndarray:
        rows = len(arrays["input_ids"])
        batches = []
        for start in range(0, rows, BATCH_SIZE):
            inputs = [arrays[k][start:start + BATCH_SIZE]
                      for k in ("input_ids", "input_mask", "segment_ids")]
            n = len(inputs[0])
            padded = [np.pad(x, ((0, BATCH_SIZE - n), (0, 0))) for x in inputs]
            output = sequence(*padded).numpy()[:n]
            if "tag_positions" in arrays:
                positions = arrays["tag_positions"][start:start + n]
                fits = arrays["tag_mask"][start:start + n].sum(-1).astype(int)
                batches.append(np.concatenate([output[row, positions[row, :fits[row]]]
                                               for row in range(n)]))
            else:
                weights = inputs[1][:, :, None].astype(np.float32)
                mean = (output * weights).sum(1) / np.maximum(weights.sum(1), 1.0)
                batches.append(np.concatenate([output[:, 0], mean], axis=-1))
        return np.concatenate(batches)

    return run


def _linear_model(regression: bool):
    from sklearn.linear_model import LogisticRegression, Ridge

    return Ridge(alpha=1.0) if regression else LogisticRegression(C=1.0, max_iter=1000)
