"""The fine-tuning task protocol (the original's finetune/task.py).

A Task says everything run_finetuning.py needs to know about one task: its splits and how each
split's results are named, how to read and featurize a split, the head it puts on the encoder,
each example's loss, the hparams its kind adds, and how to score predictions and write the
leaderboard (test) files. The trainer and run_finetuning.py know tasks only through this class;
task_builder.py names them.

Tasks hold no run state: the methods take the FinetuningConfig (and the tokenizer) they need, so
one instance per task name serves every run. Head outputs are whatever the task's head returns
(a tensor or a dict of tensors); the trainer hands them back to the same task untouched.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import typing
import zlib
from typing import Any, ClassVar, Hashable, Iterable

import numpy as np
import tensorflow as tf
from keras import layers

if typing.TYPE_CHECKING:
    import keras

    from electra_tf.finetuning.hparams import FinetuningConfig
    from electra_tf.tokenization import WordPieceTokenizer

# The encoder's inputs: int [N, L] arrays every task's features have.
INPUTS = ("input_ids", "input_mask", "segment_ids")


class DataError(ValueError):
    """A task's file (or tfds dataset) is missing or holds something that cannot be read."""


def token_checksums(input_ids: np.ndarray) -> list[str]:
    """A checksum of each row's token ids: outputs per token position (QA's start and end
    logits, zero-shot's replaced-token logits) average only between members that tokenized
    the row alike (vocabulary, lower-casing, windows, template)."""
    return [f"{zlib.crc32(np.ascontiguousarray(row, np.int32).tobytes()):08x}"
            for row in np.asarray(input_ids)]


@dataclasses.dataclass
class SplitData:
    """One split of one task, read and featurized.

    `arrays` are the model's rows: the INPUTS, the training targets the task's loss reads and
    `task_id` (set by the trainer), each [N, ...]. The rest is what the task needs to score or
    write predictions: its examples, and where rows are windows of examples (SQuAD) the
    windows and the source file."""
    task: Task
    split: str
    arrays: dict[str, np.ndarray]
    examples: list
    features: list | None = None
    path: str | None = None

    def __len__(self) -> int:
        return len(self.arrays["input_ids"])


@dataclasses.dataclass(frozen=True)
class Baseline:
    """What a trivial prediction scores on a split, printed and saved beside the fine-tuned
    model's scores so that a score can be read against it."""
    predicts: str  # e.g. "majority class '1' of train"
    metrics: dict[str, float]


def most_frequent(values: Iterable[Hashable]) -> Any:
    """The most frequent value; a tie goes to the smallest, so that the choice is repeatable."""
    counts = collections.Counter(values)
    return min(counts, key=lambda value: (-counts[value], value))


@dataclasses.dataclass
class TaskHparams:
    """The hparams a kind of task adds to --hparams (Task.hparams_class): a dataclass subclass
    whose fields are their names, types and defaults. Every run accepts every registered kind's
    hparams (one --hparams for all its tasks), so a name must be new to the registry."""

    def validate(self) -> None:
        """Raises hparam_parsing.ConfigError for a value that no task of this kind runs with;
        checked in every run, whichever its tasks, as every other hparam."""


class Head(layers.Layer):
    """A kind of task's output layer: `call(sequence_output, inputs, training)` on the encoder's
    last hidden states [batch, seq, hidden] and the model's inputs (input_mask...)."""

    # True for a head that reads only the first position ([CLS]): when every head of a model
    # does, the encoder's last layer computes that position alone.
    reads_first_position_only: ClassVar[bool] = False


class Task(abc.ABC):
    """One fine-tuning task. Subclass it (and register an instance in task_builder.py) to add a
    task; classification, question answering, tagging and zero-shot tasks are examples."""

    name: str
    trainable: ClassVar[bool] = True  # False: evaluated from the pretrained model as it is
    # The hparams this kind of task adds (a TaskHparams dataclass), read with self.hparams.
    hparams_class: ClassVar[type[TaskHparams] | None] = None

    def hparams(self, config: FinetuningConfig) -> TaskHparams:
        """This kind of task's hparams in `config`."""
        if self.hparams_class not in config.task_hparams:
            raise ValueError(f"task {self.name}: the config has no {self.hparams_class!r}; "
                             "build it with config.from_hparams once the task is registered")
        return config.task_hparams[self.hparams_class]

    @property
    def is_regression(self) -> bool:
        """Whether the task's labels are numbers (a head of one output) rather than classes."""
        return False

    @property
    def data_name(self) -> str:
        """The directory under DATA_DIR/finetuning_data holding the task's files."""
        return self.name

    def defaults(self) -> dict[str, Any]:
        """Hparams this task sets when it is the only task (the user's values still win)."""
        return {}

    def validate(self, config: FinetuningConfig) -> None:
        """Raises hparam_parsing.ConfigError for hparams this task cannot run with (checked when
        the task is one of the run's)."""

    def dev_splits(self, config: FinetuningConfig) -> list[str]:
        """The splits evaluated after training."""
        return ["dev"]

    def test_splits(self, config: FinetuningConfig) -> list[str]:
        """The splits whose predictions write_test_outputs writes (none: not supported)."""
        return []

    def result_name(self, split: str) -> str:
        """The name a split's metrics are reported under: the task's own name for "dev"."""
        return self.name if split == "dev" else f"{self.name}-{split}"

    @abc.abstractmethod
    def load(self, config: FinetuningConfig, split: str,
             tokenizer: WordPieceTokenizer) -> SplitData:
        """Reads and featurizes one split."""

    @abc.abstractmethod
    def make_head(self, config: FinetuningConfig) -> keras.layers.Layer:
        """A new head, called as head(sequence_output, inputs, training=...)."""

    def init_head(self, head: keras.layers.Layer, config: FinetuningConfig) -> str | None:
        """Loads pretrained weights into a head that comes with the pretrained model (none by
        default: heads start fresh). Returns what was loaded."""
        return None

    def example_losses(self, config: FinetuningConfig, outputs: Any,
                       batch: dict[str, tf.Tensor]) -> tf.Tensor:
        """[B] float32 losses of the batch's rows from this task's head outputs (rows of other
        tasks are dropped by the caller, so they only need to be finite)."""
        raise NotImplementedError(f"task {self.name} is not trained")

    def baseline(self, config: FinetuningConfig, data: SplitData, fit: SplitData,
                 tokenizer: WordPieceTokenizer) -> Baseline | None:
        """The scores on the labelled split `data` of the task's trivial prediction, learnt
        from `fit` (the training split when the run read it, else `data` itself), in the
        task's own metrics: the majority class, the mean score, the most frequent tag, no
        answer. None: the task has none."""
        return None

    @abc.abstractmethod
    def evaluate(self, config: FinetuningConfig, data: SplitData, outputs: Any,
                 tokenizer: WordPieceTokenizer, output_dir: str) -> dict[str, float]:
        """Metrics of a labelled split from the head's outputs for all its rows. Predictions
        worth keeping (e.g. SQuAD's) may be written to output_dir."""

    def write_test_outputs(self, config: FinetuningConfig, data: SplitData, outputs: Any,
                           tokenizer: WordPieceTokenizer, directory: str) -> list[str]:
        """Writes a test split's predictions into directory; returns the paths written."""
        raise NotImplementedError(f"task {self.name} writes no test outputs")

    @classmethod
    def benchmark_scores(cls, results: dict[str, dict[str, float]]) -> dict[str, float]:
        """Scores of a benchmark over its tasks (e.g. the GLUE score), from a run's results
        (result name -> metrics) of tasks of this kind: {name: score}, written to the results
        JSON as <name>_median. None by default: {}."""
        return {}

    # What ensembles (finetuning/ensemble.py) and best-of-N selection need of a task.

    def main_metric(self, results: dict[str, float]) -> float:
        """The one number of a split's metrics that trials are compared by and ensemble weights
        fitted on: higher is better."""
        raise NotImplementedError(f"task {self.name} names no main metric")

    def label_names(self, config: FinetuningConfig) -> list[str]:
        """The classes the head predicts (none: regression, QA); ensemble members must agree."""
        return []

    def row_ids(self, data: SplitData) -> list[str]:
        """An id per row of the split, so that members' outputs are matched row by row: an
        example id where the outputs are per example or per word (any tokenizer's members
        match); with token_checksums where they are per token (QA, zero-shot)."""
        return [str(i) for i in range(len(data))]

    def ensemble_outputs(self, config: FinetuningConfig, data: SplitData,
                         outputs: Any) -> dict[str, np.ndarray] | None:
        """The head's outputs as an ensemble averages them: arrays [N, ...] of the split's
        rows (e.g. class probabilities). None: these outputs cannot be averaged."""
        if isinstance(outputs, dict):
            return {key: np.asarray(value) for key, value in outputs.items()}
        return {"outputs": np.asarray(outputs)}

    def from_ensemble_outputs(self, config: FinetuningConfig, data: SplitData,
                              averaged: dict[str, np.ndarray]) -> Any:
        """Head outputs that evaluate and write_test_outputs read, from (weighted averages of)
        ensemble_outputs."""
        return averaged["outputs"] if set(averaged) == {"outputs"} else dict(averaged)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


def cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """-log softmax(logits)[label] over the last axis, as the original writes it (one-hot times
    log-probabilities)."""
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    return -tf.reduce_sum(tf.one_hot(labels, tf.shape(logits)[-1]) * log_probs, axis=-1)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities over the last axis, in float64."""
    shifted = np.asarray(logits, np.float64) - np.max(logits, axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(-1, keepdims=True)


def log_probabilities(probabilities: np.ndarray) -> np.ndarray:
    """Logits whose softmax is `probabilities` (an ensemble's average); a zero stays finite."""
    return np.log(np.maximum(np.asarray(probabilities, np.float64), 1e-30))


def pad_rows(rows: list[list[int]], length: int, dtype=np.int32) -> np.ndarray:
    """Rows of different lengths as a zero-padded [N, length] array."""
    out = np.zeros((len(rows), length), dtype)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out
