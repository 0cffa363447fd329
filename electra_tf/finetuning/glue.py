"""The GLUE tasks, as the original's finetune/classification/classification_tasks.py reads them.

Each task reads GLUE's TSV files as GLUE distributes them from DATA_DIR/finetuning_data/<task>/
(train.tsv, dev.tsv, test.tsv; MNLI's dev_matched.tsv, dev_mismatched.tsv, test_matched.tsv,
test_mismatched.tsv and the AX diagnostic set), with the original's column positions, header
skipping and example ids (eid: the row's index in the file, header excluded). MRPC and STS-B
pairs are unordered, so by default their training set is doubled with each pair swapped, as the
original's `double_unordered`. Where the original logged a bad row and skipped it, a DataError
names the file and line instead: a silently smaller training set is worse than a stopped run.

Each task also scores predictions as the original's scorers do (percent), picks the number the
ELECTRA paper averages into its GLUE score, and writes GLUE leaderboard submission files.
`read_tfds` gives the same examples from a prepared tensorflow-datasets `glue` data_dir.

As a fine-tuning Task, a GLUE task featurizes as the original's
classification_tasks.SingleOutputTask: [CLS] A [SEP] (B [SEP]), segment 0 then 1, a pair
truncated one token at a time from the longer side to max_seq_length - 3, a single text to
max_seq_length - 2. Its head (ClassificationHead) reads [CLS]; its loss is the cross-entropy,
or for STS-B the squared error of the score scaled to [0, 1]. Its hparam: `double_unordered`.

>>> task = get_task("rte")
>>> task.labels, task.label_id("not_entailment"), task.submission_name("test")
(('entailment', 'not_entailment'), 1, 'RTE.tsv')
>>> get_task("sts").label_id("3.5")
0.7
"""

from __future__ import annotations

import csv
import dataclasses
import os
import typing
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import tensorflow as tf
from keras import layers
from scipy import stats
from sklearn import metrics

from electra_tf import files, modeling
from electra_tf.finetuning.task import (INPUTS, Baseline, DataError, Head, SplitData, Task,
                                        TaskHparams, cross_entropy, log_probabilities,
                                        most_frequent, softmax)
from electra_tf.modeling import register

if typing.TYPE_CHECKING:
    from electra_tf.finetuning.hparams import FinetuningConfig
    from electra_tf.tokenization import WordPieceTokenizer


@dataclasses.dataclass(frozen=True)
class Example:
    """One sentence or sentence pair with its label (None on test and diagnostic splits)."""
    eid: int
    text_a: str
    text_b: str | None
    label: str | float | None


@dataclasses.dataclass(frozen=True)
class _Split:
    """Where a split lives and which columns hold what (negative: counted from the end)."""
    files: tuple[str, ...]  # relative to the task's data_dir; the first that exists is read
    text_a: int
    text_b: int | None
    label: int | None  # None: unlabelled (test, diagnostic)
    tfds: tuple[str, str]  # (glue config, split) in tensorflow-datasets
    header: bool = True
    submission: str | None = None  # the GLUE leaderboard file for a test split
    result_suffix: str = ""  # a dev split's results are named <task><suffix>, e.g. mnli-mm


@register
class ClassificationHead(Head):
    """The [CLS] vector, dropout 0.1, one dense layer to `num_outputs` logits (1 for
    regression). No pooler, as the original; the dense layer has tf.layers' default Glorot
    initialisation, as the original's."""

    reads_first_position_only = True  # the encoder's last layer may compute [CLS] alone

    def __init__(self, num_outputs: int, dropout_rate: float = 0.1, **kwargs):
        super().__init__(**kwargs)
        self.num_outputs = num_outputs
        self.dropout_rate = dropout_rate
        self.dropout = modeling.Dropout(dropout_rate, dtype=self.dtype_policy)
        self.dense = layers.Dense(num_outputs, name="dense", dtype=self.dtype_policy)

    def build(self, input_shape):
        self.dense.build((None, input_shape[-1]))
        self.built = True

    def call(self, sequence_output, features=None, training=None):
        cls = self.dropout(sequence_output[:, 0], training=training)
        return tf.cast(self.dense(cls), tf.float32)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "num_outputs": self.num_outputs,
                "dropout_rate": self.dropout_rate}


@dataclasses.dataclass
class GlueHparams(TaskHparams):
    double_unordered: bool = True  # MRPC and STS train on both orders of each pair


@dataclasses.dataclass(frozen=True)
class GlueTask(Task):
    """A GLUE task: how to read its splits, score predictions and write a submission."""
    name: str
    labels: tuple[str, ...] | None  # in label-id order; None for regression (STS-B)
    splits: Mapping[str, _Split] = dataclasses.field(compare=False, repr=False)
    tfds_text: tuple[str, str | None] = ("sentence", None)  # tfds feature names of text a, b
    unordered_pairs: bool = False  # a pair means the same swapped: double_unordered applies
    main_metric_name: str = "accuracy"
    f1: bool = False  # also report F1 (MRPC, QQP: GLUE's leaderboard shows it)
    min_value: float = 0.0  # regression score range (the original's RegressionTask)
    max_value: float = 5.0
    num_train_epochs: float = 3.0  # the original's per-task default
    glue_name: str = ""  # GLUE's own folder for the task (e.g. SST-2), read when ours is absent
    in_glue_score: bool = True  # averaged into the GLUE score (glue_score)

    hparams_class = GlueHparams

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    def defaults(self) -> dict[str, Any]:
        return {"num_train_epochs": self.num_train_epochs}

    def dev_splits(self, config: FinetuningConfig | None = None) -> list[str]:
        return [name for name in self.splits if name.startswith("dev")]

    def test_splits(self, config: FinetuningConfig | None = None) -> list[str]:
        return [name for name, split in self.splits.items() if split.submission]

    def result_name(self, split: str) -> str:
        return self.name + self._split(split).result_suffix

    def read_split(self, config: FinetuningConfig, split: str,
                   double_unordered: bool | None = None) -> list[Example]:
        """The split's examples from the files or tensorflow-datasets, as config says."""
        double = (self.hparams(config).double_unordered if double_unordered is None
                  else double_unordered)
        if config.data_source == "tfds":
            return read_tfds(self, split, config.tfds_data_dir, double)
        return self.read(self.data_dir(config), split, double)

    def data_dir(self, config: FinetuningConfig) -> str:
        """DATA_DIR/finetuning_data/<task>, or GLUE's own folder name for it (SST-2, CoLA, ...)
        when only that exists: GLUE's download script writes those."""
        ours = config.raw_data_dir(self.data_name)
        if self.glue_name and not tf.io.gfile.isdir(ours):
            theirs = config.raw_data_dir(self.glue_name)
            if tf.io.gfile.isdir(theirs):
                return theirs
        return ours

    def load(self, config: FinetuningConfig, split: str,
             tokenizer: WordPieceTokenizer) -> SplitData:
        examples = self.read_split(config, split)
        if config.log_examples:
            print(f"{self.name} {split}: {len(examples)} examples, e.g. {examples[0]}",
                  flush=True)
        return SplitData(self, split, self.featurize(examples, tokenizer,
                                                     config.max_seq_length), examples)

    def featurize(self, examples: Sequence[Example], tokenizer: WordPieceTokenizer,
                  max_seq_length: int) -> dict[str, np.ndarray]:
        """Examples -> int32 INPUTS [N, L], float32 `label` [N] (class id or scaled score; 0
        where there is none) and int `eid` [N]."""
        ids_a = tokenizer.tokenize_to_ids([e.text_a for e in examples])
        ids_b = tokenizer.tokenize_to_ids([e.text_b or "" for e in examples])
        cls, sep = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
        n = len(examples)
        arrays = {name: np.zeros((n, max_seq_length), np.int32) for name in INPUTS}
        for row, (example, a, b) in enumerate(zip(examples, ids_a, ids_b)):
            if example.text_b:
                truncate_pair(a, b, max_seq_length - 3)
            else:
                a, b = a[:max_seq_length - 2], []
            ids = [cls] + a + [sep] + (b + [sep] if b else [])
            arrays["input_ids"][row, :len(ids)] = ids
            arrays["input_mask"][row, :len(ids)] = 1
            arrays["segment_ids"][row, len(a) + 2:len(ids)] = 1
        arrays["label"] = np.array([0.0 if e.label is None else self.label_id(e.label)
                                    for e in examples], np.float32)
        arrays["eid"] = np.array([e.eid for e in examples], np.int64)
        return arrays

    def make_head(self, config: FinetuningConfig) -> ClassificationHead:
        return ClassificationHead(1 if self.is_regression else len(self.labels), name=self.name)

    def example_losses(self, config: FinetuningConfig, outputs: tf.Tensor,
                       batch: dict[str, tf.Tensor]) -> tf.Tensor:
        if self.is_regression:
            return tf.square(outputs[:, 0] - batch["label"])
        return cross_entropy(outputs, tf.cast(batch["label"], tf.int32))

    def predictions(self, outputs: np.ndarray) -> np.ndarray:
        """Label ids (classification) or scaled scores (regression) from the head's logits."""
        return outputs[:, 0] if self.is_regression else outputs.argmax(-1)

    def label_names(self, config: FinetuningConfig) -> list[str]:
        return [] if self.is_regression else list(self.labels)

    def row_ids(self, data: SplitData) -> list[str]:
        return [str(eid) for eid in data.arrays["eid"]]

    def ensemble_outputs(self, config: FinetuningConfig, data: SplitData,
                         outputs: np.ndarray) -> dict[str, np.ndarray]:
        """Class probabilities (an ensemble averages those, as the ELECTRA + BERT studies
        do), or for regression the predicted scores."""
        if self.is_regression:
            return {"scores": np.asarray(outputs, np.float32)}
        return {"probabilities": softmax(outputs).astype(np.float32)}

    def from_ensemble_outputs(self, config: FinetuningConfig, data: SplitData,
                              averaged: dict[str, np.ndarray]) -> np.ndarray:
        if self.is_regression:
            return averaged["scores"]
        return log_probabilities(averaged["probabilities"])

    def evaluate(self, config: FinetuningConfig, data: SplitData, outputs: np.ndarray,
                 tokenizer: WordPieceTokenizer, output_dir: str) -> dict[str, float]:
        labels = data.arrays["label"]
        return self.score(labels if self.is_regression else labels.astype(int),
                          self.predictions(outputs))

    def baseline(self, config: FinetuningConfig, data: SplitData, fit: SplitData,
                 tokenizer: WordPieceTokenizer) -> Baseline:
        """The majority class of `fit`, or for regression its mean score, predicted for every
        example (data.examples: this task's, or a zero-shot task's of this task's files). A
        constant has no correlation with the scores, so regression reports the MSE only."""
        gold = np.array([self.label_id(e.label) for e in data.examples])
        fitted = [self.label_id(e.label) for e in fit.examples]
        if self.is_regression:
            mean = float(np.mean(fitted))
            mse = self.score(gold, np.full(len(gold), mean))["mse"]
            return Baseline(f"mean score {mean * self.max_value + self.min_value:.2f} of "
                            f"{fit.split}", {"mse": mse})
        majority = most_frequent(fitted)
        return Baseline(f"majority class {self.labels[majority]!r} of {fit.split}",
                        self.score(gold, np.full(len(gold), majority)))

    def write_test_outputs(self, config: FinetuningConfig, data: SplitData,
                           outputs: np.ndarray, tokenizer: WordPieceTokenizer,
                           directory: str) -> list[str]:
        path = os.path.join(directory, self.submission_name(data.split))
        self.write_submission(path, data.arrays["eid"].tolist(),
                              self.predictions(outputs).tolist())
        return [path]

    def _split(self, split: str) -> _Split:
        if split not in self.splits:
            raise ValueError(f"{self.name} has no split {split!r}; its splits: {list(self.splits)}")
        return self.splits[split]

    def read(self, data_dir: str, split: str, double_unordered: bool = True) -> list[Example]:
        """The examples of one split from GLUE's TSV files in `data_dir`."""
        spec = self._split(split)
        path = _find_file(data_dir, spec.files, self.name, split)
        rows = _read_tsv(path)
        # Rows must be as wide as the header, so a row missing a field is caught even where
        # columns are counted from the end (STS-B, MNLI's label).
        need = max(_width(i) for i in (spec.text_a, spec.text_b, spec.label) if i is not None)
        if spec.header:
            _, header = next(rows, (0, []))
            need = max(need, len(header))
        examples = []
        for eid, (line, row) in enumerate(rows):
            where = f"{path}:{line}"
            if len(row) < need:
                raise DataError(f"{where}: {len(row)} tab-separated columns, expected at "
                                f"least {need}")
            text_b = None if spec.text_b is None else _text(row[spec.text_b], spec.text_b, where)
            label = None if spec.label is None else self._parse_label(row[spec.label], where)
            examples.append(Example(eid, _text(row[spec.text_a], spec.text_a, where), text_b,
                                    label))
        if not examples:
            raise DataError(f"{path} holds no examples")
        if double_unordered and self.unordered_pairs and split == "train":
            examples += _swapped(examples)
        return examples

    def _parse_label(self, raw: str, where: str) -> str | float:
        if not self.is_regression:
            if raw not in self.labels:
                raise DataError(f"{where}: unknown label {raw!r}; {self.name} labels are "
                                f"{list(self.labels)}")
            return raw
        try:
            value = float(raw)
        except ValueError:
            raise DataError(f"{where}: score {raw!r} is not a number") from None
        if not self.min_value <= value <= self.max_value:  # also rejects nan
            raise DataError(f"{where}: score {raw!r} is outside "
                            f"[{self.min_value:g}, {self.max_value:g}]")
        return value

    def label_id(self, label: str | float) -> int | float:
        """The model's target: a class index, or the score scaled as the original's
        RegressionTask does, (x - min) / max."""
        if self.is_regression:
            return (float(label) - self.min_value) / self.max_value
        if label not in self.labels:
            raise ValueError(f"{label!r} is not a {self.name} label; labels are {self.labels}")
        return self.labels.index(label)

    def score(self, labels: Sequence, predictions: Sequence) -> dict[str, float]:
        """Dev-set metrics in percent (MSE on the scaled score), as the original's scorers.

        `labels` and `predictions` are label ids, or scaled scores for STS-B. A metric that is
        undefined on the input (MCC or a correlation when one side is constant) is 0.0.
        """
        y_true, y_pred = np.asarray(labels), np.asarray(predictions)
        if y_true.shape != y_pred.shape or y_true.ndim != 1 or not y_true.size:
            raise ValueError(f"{self.name}: need equally long, non-empty 1-D labels and "
                             f"predictions, got shapes {y_true.shape} and {y_pred.shape}")
        if self.is_regression:
            y_true, y_pred = y_true.astype(np.float64), y_pred.astype(np.float64)
            defined = _varies(y_true) and _varies(y_pred)
            return {
                "pearson": 100.0 * stats.pearsonr(y_true, y_pred)[0] if defined else 0.0,
                "spearman": 100.0 * stats.spearmanr(y_true, y_pred)[0] if defined else 0.0,
                "mse": float(metrics.mean_squared_error(y_true, y_pred)),
            }
        results = {"accuracy": 100.0 * metrics.accuracy_score(y_true, y_pred)}
        if self.main_metric_name == "mcc":
            defined = _varies(y_true) and _varies(y_pred)
            results["mcc"] = 100.0 * metrics.matthews_corrcoef(y_true, y_pred) if defined else 0.0
        if self.f1:
            # The original's F1Scorer (unused there: MRPC and QQP got the AccuracyScorer)
            # counts n_gold from the predictions, so its recall always equals its precision.
            # This is the usual F1 of the positive class "1".
            precision, recall, f1, _ = metrics.precision_recall_fscore_support(
                y_true, y_pred, pos_label=self.labels.index("1"), average="binary",
                zero_division=0.0)
            results.update(precision=100.0 * precision, recall=100.0 * recall, f1=100.0 * f1)
        return {key: float(value) for key, value in results.items()}

    def main_metric(self, results: Mapping[str, float]) -> float:
        """The number the ELECTRA paper averages: MCC (CoLA), Spearman (STS-B), else accuracy."""
        return results[self.main_metric_name]

    @classmethod
    def benchmark_scores(cls, results: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        """The GLUE score (glue_score) when the results hold a task it averages."""
        scored = any(name in TASKS and TASKS[name].in_glue_score for name in results)
        return {"glue_score": glue_score(results)} if scored else {}

    def submission_name(self, split: str) -> str:
        """GLUE's file name for this test split's predictions, e.g. MNLI-mm.tsv."""
        name = self._split(split).submission
        if name is None:
            raise ValueError(f"{self.name} {split} is not submitted to GLUE; test splits: "
                             f"{self.test_splits()}")
        return name

    def write_submission(self, path: str, eids: Sequence[int], predictions: Sequence) -> None:
        """Writes GLUE's "index<TAB>prediction" file in eid order: label strings, or STS-B
        scores back on GLUE's 0-5 scale. The file appears complete or not at all."""
        if len(eids) != len(predictions):
            raise ValueError(f"{len(eids)} eids but {len(predictions)} predictions")
        eids = [int(eid) for eid in eids]
        if len(set(eids)) != len(eids):
            raise ValueError(f"{self.name}: the same eid appears twice")
        lines = ["index\tprediction"]
        for eid, prediction in sorted(zip(eids, predictions), key=lambda pair: pair[0]):
            lines.append(f"{eid}\t{self._format_prediction(prediction)}")
        files.write_atomically(path, "\n".join(lines) + "\n")

    def _format_prediction(self, prediction) -> str:
        if self.is_regression:
            score = float(prediction) * self.max_value + self.min_value  # label_id's inverse
            return f"{min(max(score, self.min_value), self.max_value):.3f}"
        label_id = int(prediction)
        if not 0 <= label_id < len(self.labels):
            raise ValueError(f"{self.name}: prediction {prediction!r} is not a label id "
                             f"(0..{len(self.labels) - 1})")
        return self.labels[label_id]


def truncate_pair(a: list[int], b: list[int], max_length: int) -> None:
    """The original's _truncate_seq_pair: pops from the longer list until both fit."""
    while len(a) + len(b) > max_length:
        (a if len(a) > len(b) else b).pop()


def _make_split(files: str | tuple[str, ...], columns: tuple, tfds: tuple[str, str],
                **kwargs) -> _Split:
    """columns: (text_a, text_b, label), label None when unlabelled; tfds: (config, split)."""
    return _Split((files,) if isinstance(files, str) else files, *columns, tfds, **kwargs)


def _standard(config: str, labelled: tuple, unlabelled: tuple, submission: str,
              header: bool = True) -> dict[str, _Split]:
    """train/dev/test of a task whose train and dev files share a layout."""
    return {
        "train": _make_split("train.tsv", labelled, (config, "train"), header=header),
        "dev": _make_split("dev.tsv", labelled, (config, "validation"), header=header),
        "test": _make_split("test.tsv", (*unlabelled, None), (config, "test"),
                            submission=submission),
    }


_BINARY = ("0", "1")
_NLI = ("entailment", "not_entailment")
_MNLI_PAIR = (8, 9)  # sentence1, sentence2 after the ids, genre and parses

TASKS: dict[str, GlueTask] = {task.name: task for task in [
    # CoLA train/dev: no header; [source, label, original label, sentence].
    GlueTask("cola", _BINARY, _standard("cola", (3, None, 1), (1, None), "CoLA.tsv",
                                        header=False), main_metric_name="mcc", glue_name="CoLA"),
    GlueTask("sst", _BINARY, _standard("sst2", (0, None, 1), (1, None), "SST-2.tsv"),
             glue_name="SST-2"),
    GlueTask("mrpc", _BINARY, _standard("mrpc", (3, 4, 0), (3, 4), "MRPC.tsv"),
             ("sentence1", "sentence2"), unordered_pairs=True, f1=True, glue_name="MRPC"),
    GlueTask("sts", None, _standard("stsb", (-3, -2, -1), (-2, -1), "STS-B.tsv"),
             ("sentence1", "sentence2"), unordered_pairs=True, main_metric_name="spearman",
             num_train_epochs=10.0, glue_name="STS-B"),
    GlueTask("qqp", _BINARY, _standard("qqp", (3, 4, 5), (1, 2), "QQP.tsv"),
             ("question1", "question2"), f1=True, glue_name="QQP"),
    GlueTask("mnli", ("contradiction", "entailment", "neutral"), {
        "train": _make_split("train.tsv", (*_MNLI_PAIR, -1), ("mnli", "train")),
        "dev": _make_split("dev_matched.tsv", (*_MNLI_PAIR, -1), ("mnli", "validation_matched")),
        "dev_mismatched": _make_split("dev_mismatched.tsv", (*_MNLI_PAIR, -1),
                                      ("mnli", "validation_mismatched"), result_suffix="-mm"),
        "test": _make_split("test_matched.tsv", (*_MNLI_PAIR, None), ("mnli", "test_matched"),
                            submission="MNLI-m.tsv"),
        "test_mismatched": _make_split("test_mismatched.tsv", (*_MNLI_PAIR, None),
                                       ("mnli", "test_mismatched"), submission="MNLI-mm.tsv"),
        # The original's name, GLUE's name beside it, or GLUE's own ax task directory.
        "diagnostic": _make_split(("diagnostic.tsv", "AX.tsv", "../ax/AX.tsv"), (1, 2, None),
                                  ("ax", "test"), submission="AX.tsv"),
    }, ("premise", "hypothesis"), glue_name="MNLI"),
    GlueTask("qnli", _NLI, _standard("qnli", (1, 2, 3), (1, 2), "QNLI.tsv"),
             ("question", "sentence"), glue_name="QNLI"),
    GlueTask("rte", _NLI, _standard("rte", (1, 2, 3), (1, 2), "RTE.tsv"),
             ("sentence1", "sentence2"), num_train_epochs=10.0, glue_name="RTE"),
    # Not in the original; GLUE's layout as RTE's, labels 0/1 (1: entailment). Left out of the
    # GLUE score, as the ELECTRA paper.
    GlueTask("wnli", _BINARY, _standard("wnli", (1, 2, 3), (1, 2), "WNLI.tsv"),
             ("sentence1", "sentence2"), glue_name="WNLI", in_glue_score=False),
]}


def get_task(name: str) -> GlueTask:
    if name not in TASKS:
        raise ValueError(f"unknown GLUE task {name!r}; valid tasks: {list(TASKS)}")
    return TASKS[name]


def glue_score(results: Mapping[str, Mapping[str, float]]) -> float:
    """The mean main metric over the GLUE tasks in `results` (task name -> score()), without
    WNLI as the ELECTRA paper (in_glue_score); other keys (e.g. squad) are ignored."""
    scores = [TASKS[name].main_metric(task_results) for name, task_results in results.items()
              if name in TASKS and TASKS[name].in_glue_score]
    if not scores:
        raise ValueError(f"no GLUE task other than wnli in the results: {list(results)}")
    return float(np.mean(scores))


def read_tfds(task: GlueTask, split: str, tfds_data_dir: str | None,
              double_unordered: bool = True) -> list[Example]:
    """The examples of `task.read` from tensorflow-datasets' glue/<config>, which must already
    be prepared in `tfds_data_dir` (nothing is downloaded). eid is tfds's idx: the row index
    in GLUE's file, except MRPC train/dev, which tfds numbers by row of the original MSR train
    file (train and dev rows interleaved)."""
    import tensorflow_datasets as tfds  # heavy; only this path needs it

    spec = task._split(split)
    config, tfds_split = spec.tfds
    name = f"glue/{config}"
    builder = tfds.builder(name, data_dir=tfds_data_dir)
    try:
        dataset = builder.as_dataset(split=tfds_split, shuffle_files=False)
    except AssertionError:  # how tfds says the data is not there; it never downloads here
        raise DataError(
            f"{name} is not prepared in {builder.data_dir}; nothing is downloaded here. Prepare "
            f"it on a machine with internet: `tfds build {name} --data_dir=DIR` (or "
            f"tfds.builder('{name}', data_dir=DIR).download_and_prepare()), copy DIR here and "
            f"pass it as tfds_data_dir") from None
    label_feature = builder.info.features["label"]
    rows = sorted(tfds.as_numpy(dataset), key=lambda row: int(row["idx"]))
    key_a, key_b = task.tfds_text
    examples = []
    for row in rows:
        where = f"{name} {tfds_split} idx {int(row['idx'])}"
        text_a = _text(row[key_a].decode("utf-8"), key_a, where)
        text_b = None if key_b is None else _text(row[key_b].decode("utf-8"), key_b, where)
        label = None
        if spec.label is not None:
            label = task._parse_label(_tfds_label_string(task, label_feature, row["label"]),
                                      where)
        examples.append(Example(int(row["idx"]), text_a, text_b, label))
    if double_unordered and task.unordered_pairs and split == "train":
        examples += _swapped(examples)
    return examples


def _tfds_label_string(task: GlueTask, feature, value) -> str:
    """tfds's label as it is written in GLUE's file."""
    if task.is_regression:
        return str(value)  # a float32; its shortest repr is the file's decimal
    label_id = int(value)
    names = feature.names
    if not 0 <= label_id < len(names):
        return str(label_id)  # -1: no label; _parse_label reports it
    # tfds keeps label words (MNLI, QNLI, RTE) and turns GLUE's digit labels into the class
    # index, naming the classes its own way (e.g. SST-2's "negative", "positive").
    return names[label_id] if set(names) <= set(task.labels) else str(label_id)


def _width(index: int) -> int:
    """Columns a row needs for `index` to exist."""
    return index + 1 if index >= 0 else -index


def _text(value: str, column: int | str, where: str) -> str:
    if not value.strip():
        raise DataError(f"{where}: empty text in column {column}")
    return value


def _swapped(examples: list[Example]) -> list[Example]:
    """The pairs in the other order, numbered on after the originals (the original's eids)."""
    start = max((e.eid for e in examples), default=-1) + 1
    return [dataclasses.replace(e, eid=start + i, text_a=e.text_b, text_b=e.text_a)
            for i, e in enumerate(examples)]


def _varies(values: np.ndarray) -> bool:
    """Whether a correlation with `values` is defined (more than one distinct value)."""
    return np.unique(values).size > 1


def _resolve(data_dir: str, relative: str) -> str:
    """data_dir joined with `relative`, "../" taken textually so gs:// paths work too."""
    base = data_dir.rstrip("/")
    while relative.startswith("../"):
        base, relative = os.path.dirname(base), relative[3:]
    return os.path.join(base, relative)


def _find_file(data_dir: str, files: tuple[str, ...], task: str, split: str) -> str:
    candidates = [_resolve(data_dir, file) for file in files]
    for path in candidates:
        if tf.io.gfile.exists(path):
            return path
    raise DataError(f"no {task} {split} file: {' or '.join(candidates)} does not exist; put "
                    f"GLUE's {task} files, as GLUE distributes them, in "
                    f"DATA_DIR/finetuning_data/{task}/ (or in GLUE's own folder name for it)")


def _read_tsv(path: str) -> Iterator[tuple[int, list[str]]]:
    """(1-based line number, fields) per line; tabs only, quotes are text (as the original,
    whose csv.reader had no quotechar; GLUE's sentences contain unbalanced quotes)."""

    def lines() -> Iterator[str]:
        # Binary, to name the line of a decoding error. GFile's readline drops every "\r",
        # as the original's text-mode GFile did.
        with tf.io.gfile.GFile(path, "rb") as f:
            for number, line in enumerate(f, start=1):
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataError(f"{path}:{number}: not UTF-8 ({e.reason} at byte "
                                    f"{e.start})") from None
                yield text.removeprefix("\ufeff") if number == 1 else text

    reader = csv.reader(lines(), delimiter="\t", quoting=csv.QUOTE_NONE)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:  # e.g. a field over csv's size limit
            raise DataError(f"{path}:{reader.line_num}: {e}") from None
        yield reader.line_num, row
