"""Extractive question answering as fine-tuning tasks: SQuAD 1.1/2.0 and the MRQA 2019 shared
task's sets (the original's finetune/qa/qa_tasks.py SQuAD and MRQATask classes).

Both read into squad.QAExample and share the windows, the head (SquadHead), the loss, the
post-processing and the hparams (QAHparams); they differ in the file format and the official
scorer:

  squad, squadv1   DATA_DIR/finetuning_data/<task>/{train,dev,test}.json (SQuAD's schema),
                   scored by SQuAD's official 2.0 / 1.1 scripts.
  newsqa, ...      DATA_DIR/finetuning_data/<task>/{train,dev}.jsonl(.gz) (MRQA's format: a
                   header line, then a context per line with its `qas`), scored by the MRQA
                   script: exact match and F1, each the best over the question's gold answers.
                   MRQA's out-of-domain sets have dev files only: put one beside a task's files
                   as dev-<set>.jsonl(.gz) and it is evaluated with that task's model, reported
                   as <task>-<set>.
"""

from __future__ import annotations

import abc
import dataclasses
import os
import typing
from typing import Any

import numpy as np
import tensorflow as tf
from keras import layers

from electra_tf import fused
from electra_tf.finetuning import squad
from electra_tf.finetuning.task import (INPUTS, Baseline, DataError, Head, SplitData, Task,
                                        TaskHparams, cross_entropy, token_checksums)
from electra_tf.hparam_parsing import require
from electra_tf.modeling import register

if typing.TYPE_CHECKING:
    from electra_tf.finetuning.hparams import FinetuningConfig
    from electra_tf.tokenization import WordPieceTokenizer


@register
class SquadHead(Head):
    """The original's SQuAD head (finetune/qa/qa_tasks.py), XLNet-style.

    Answers may start and end only in segment 1 (the context and its final [SEP]) or at [CLS]
    (position 0): other logits get -1000. With `joint_prediction` the end is predicted from
    [start representation; token representation] through a 512-unit GELU layer: conditioned
    on the gold start in training, on each of the `beam_size` best starts at inference, where
    the outputs are the beam's log-probabilities and indices. The answerability classifier
    reads [CLS] (and, with `answerable_uses_start_logits`, the start-probability-weighted
    representation through a 512-unit GELU layer); its logit is positive for *unanswerable*
    (trained with sigmoid cross-entropy against is_impossible)."""

    def __init__(self, beam_size: int = 20, joint_prediction: bool = True,
                 answerable_classifier: bool = True, answerable_uses_start_logits: bool = True,
                 **kwargs):
        super().__init__(**kwargs)
        self.beam_size = beam_size
        self.joint_prediction = joint_prediction
        self.answerable_classifier = answerable_classifier
        self.answerable_uses_start_logits = answerable_uses_start_logits
        dense = lambda units, name, act=None: layers.Dense(  # noqa: E731
            units, activation=act, name=name, dtype=self.dtype_policy)
        self.start_dense = dense(1, "start_logits")
        if joint_prediction:
            self.end_hidden = dense(512, "qa_hidden", fused.gelu)
            self.end_dense = dense(1, "qa_logits")
        else:
            self.end_dense = dense(1, "end_logits")
        if answerable_classifier:
            self.answer_hidden = (dense(512, "answerable_hidden", fused.gelu)
                                  if answerable_uses_start_logits else None)
            self.answer_dense = dense(1, "answerable_logit")

    def build(self, input_shape):
        hidden = input_shape[-1]
        self.start_dense.build((None, hidden))
        if self.joint_prediction:
            self.end_hidden.build((None, 2 * hidden))
            self.end_dense.build((None, 512))
        else:
            self.end_dense.build((None, hidden))
        if self.answerable_classifier:
            if self.answer_hidden is not None:
                self.answer_hidden.build((None, 2 * hidden))
            self.answer_dense.build((None, 512 if self.answer_hidden is not None else hidden))
        self.built = True

    def call(self, sequence_output, features, training=None):
        seq_length = sequence_output.shape[1] or tf.shape(sequence_output)[1]
        answer_mask = tf.cast(features["input_mask"] * features["segment_ids"], tf.float32)
        answer_mask += tf.one_hot(0, seq_length)
        bias = 1000.0 * (answer_mask - 1.0)  # [B, L]
        start_logits = tf.cast(self.start_dense(sequence_output)[..., 0], tf.float32) + bias
        out = {"start_logits": start_logits}
        if not self.joint_prediction:
            out["end_logits"] = tf.cast(self.end_dense(sequence_output)[..., 0],
                                        tf.float32) + bias
        elif training:
            start = tf.gather(sequence_output, features["start_positions"], batch_dims=1)
            start = tf.broadcast_to(start[:, None], tf.shape(sequence_output))
            hidden = self.end_hidden(tf.concat([start, sequence_output], -1))
            out["end_logits"] = tf.cast(self.end_dense(hidden)[..., 0], tf.float32) + bias
        else:
            log_probs = tf.nn.log_softmax(start_logits)
            out["start_top_log_probs"], out["start_top_index"] = tf.nn.top_k(
                log_probs, k=self.beam_size)
            start = tf.gather(sequence_output, out["start_top_index"], batch_dims=1)  # [B, K, H]
            shape = tf.shape(sequence_output)
            tiled = [shape[0], self.beam_size, shape[1], sequence_output.shape[-1]]
            hidden = self.end_hidden(tf.concat(
                [tf.broadcast_to(start[:, :, None], tiled),
                 tf.broadcast_to(sequence_output[:, None], tiled)], -1))
            end_logits = tf.cast(self.end_dense(hidden)[..., 0], tf.float32) + bias[:, None]
            out["end_top_log_probs"], out["end_top_index"] = tf.nn.top_k(
                tf.nn.log_softmax(end_logits), k=self.beam_size)  # [B, K, K]
        if self.answerable_classifier:
            representation = sequence_output[:, 0]
            if self.answer_hidden is not None:
                start_probs = tf.cast(tf.nn.softmax(start_logits), sequence_output.dtype)
                weighted = tf.reduce_sum(start_probs[..., None] * sequence_output, axis=1)
                representation = self.answer_hidden(tf.concat([representation, weighted], -1))
            out["answerable_logit"] = tf.cast(self.answer_dense(representation)[:, 0],
                                              tf.float32)
        return out

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beam_size": self.beam_size,
                "joint_prediction": self.joint_prediction,
                "answerable_classifier": self.answerable_classifier,
                "answerable_uses_start_logits": self.answerable_uses_start_logits}


@dataclasses.dataclass
class QAHparams(TaskHparams):
    """The original's QA hparams (its SQuAD windows, head and decoding), and ours."""
    max_query_length: int = 64
    doc_stride: int = 128
    n_best_size: int = 20
    max_answer_length: int = 30
    answerable_classifier: bool = True
    answerable_uses_start_logits: bool = True
    answerable_weight: float = 0.5
    joint_prediction: bool = True
    beam_size: int = 20
    qa_na_threshold: float = squad.DEFAULT_NA_THRESHOLD
    # Ours: refuse a QA training file with more answers that are not at their offset.
    max_unfound_fraction: float = squad.DEFAULT_MAX_UNFOUND_FRACTION

    def validate(self) -> None:
        require(0 <= self.max_unfound_fraction <= 1, "max_unfound_fraction", "must be in [0, 1]")


@dataclasses.dataclass(frozen=True)
class QATask(Task):
    """Span extraction over doc_stride windows of a context, as the original's QATask."""
    name: str
    version_2: bool = False  # unanswerable questions, null odds, the answerability classifier

    hparams_class = QAHparams

    def defaults(self) -> dict[str, Any]:
        # As the original for every QA task (its test for "qa" in the name missed naturalqs).
        return {"max_seq_length": 512, "num_train_epochs": 2.0, "write_test_outputs": False}

    @abc.abstractmethod
    def path(self, config: FinetuningConfig, split: str) -> str:
        """The file holding a split."""

    @abc.abstractmethod
    def read(self, config: FinetuningConfig, path: str,
             is_training: bool) -> list[squad.QAExample]:
        """The questions of a file."""

    @abc.abstractmethod
    def score(self, config: FinetuningConfig, path: str, predictions: dict[str, str],
              null_odds: dict[str, float] | None) -> dict[str, float]:
        """The official scores of the predictions for a file's questions (None: without null
        odds, the predictions as they are)."""

    def load(self, config: FinetuningConfig, split: str,
             tokenizer: WordPieceTokenizer) -> SplitData:
        path = self.path(config, split)
        is_training = split == "train"
        examples = self.read(config, path, is_training)
        if not examples:
            raise DataError(f"{path} holds no usable questions")
        hparams = self.hparams(config)
        features = squad.featurize(examples, tokenizer, config.max_seq_length, hparams.doc_stride,
                                   hparams.max_query_length, is_training)
        if config.log_examples:
            print(f"{self.name} {split}: {len(examples)} questions in {len(features)} windows, "
                  f"e.g. {examples[0].question_text!r}", flush=True)
        arrays = {name: np.array([getattr(f, name) for f in features], np.int32)
                  for name in (*INPUTS, "is_impossible", "start_position", "end_position")}
        arrays["start_positions"] = arrays.pop("start_position")
        arrays["end_positions"] = arrays.pop("end_position")
        return SplitData(self, split, arrays, examples, features, path)

    def make_head(self, config: FinetuningConfig) -> SquadHead:
        hparams = self.hparams(config)
        return SquadHead(hparams.beam_size, hparams.joint_prediction,
                         hparams.answerable_classifier, hparams.answerable_uses_start_logits,
                         name=self.name)

    def example_losses(self, config: FinetuningConfig, outputs: dict[str, tf.Tensor],
                       batch: dict[str, tf.Tensor]) -> tf.Tensor:
        """The mean of the start and end cross-entropies, plus answerable_weight x the
        answerability classifier's sigmoid cross-entropy."""
        loss = (cross_entropy(outputs["start_logits"], batch["start_positions"]) +
                cross_entropy(outputs["end_logits"], batch["end_positions"])) / 2.0
        if "answerable_logit" in outputs:
            weight = self.hparams(config).answerable_weight
            loss += weight * tf.nn.sigmoid_cross_entropy_with_logits(
                labels=tf.cast(batch["is_impossible"], tf.float32),
                logits=outputs["answerable_logit"])
        return loss

    def predictions(self, config: FinetuningConfig, data: SplitData,
                    outputs: dict[str, np.ndarray], tokenizer: WordPieceTokenizer):
        """(predictions, null odds, n-best) by the original's post-processing."""
        fields = [f.name for f in dataclasses.fields(squad.RawResult)]
        results = [squad.RawResult(**{k: outputs[k][i] for k in fields if k in outputs})
                   for i in range(len(data))]
        hparams = self.hparams(config)
        return squad.postprocess(data.examples, data.features, results, hparams.n_best_size,
                                 hparams.max_answer_length, hparams.joint_prediction,
                                 hparams.answerable_classifier, self.version_2,
                                 tokenizer=tokenizer)

    def evaluate(self, config: FinetuningConfig, data: SplitData,
                 outputs: dict[str, np.ndarray], tokenizer: WordPieceTokenizer,
                 output_dir: str) -> dict[str, float]:
        """The official scores; the predictions, null odds and n-best are written to
        output_dir, as the original's qa_preds_file / qa_na_file."""
        predictions, null_odds, nbest = self.predictions(config, data, outputs, tokenizer)
        squad.write_predictions(output_dir, predictions,
                                null_odds if self.version_2 else None, nbest)
        return self.score(config, data.path, predictions, null_odds)

    def main_metric(self, results: dict[str, float]) -> float:
        return results["f1"]

    def row_ids(self, data: SplitData) -> list[str]:
        """The question's id, the window's index and its tokens' checksum."""
        return [f"{data.examples[f.example_index].qas_id}#{f.window_index}#{checksum}"
                for f, checksum in zip(data.features, token_checksums(data.arrays["input_ids"]))]

    def ensemble_outputs(self, config: FinetuningConfig, data: SplitData,
                         outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """The start and end logits per window (and the answerability logit), averaged before
        the answer search. Joint prediction's beams (an end beam per start, with token
        indices) cannot be averaged: None (its outputs hold start logits but no end logits)."""
        if "end_logits" not in outputs:
            return None
        return {key: np.asarray(outputs[key]) for key in
                ("start_logits", "end_logits", "answerable_logit") if key in outputs}

    def baseline(self, config: FinetuningConfig, data: SplitData, fit: SplitData,
                 tokenizer: WordPieceTokenizer) -> Baseline | None:
        """SQuAD 2.0: "no answer" to every question (its share of unanswerable questions).
        Without unanswerable questions that scores 0: no baseline."""
        if not self.version_2:
            return None
        predictions = {example.qas_id: "" for example in data.examples}
        return Baseline("no answer to every question",
                        self.score(config, data.path, predictions, None))


@dataclasses.dataclass(frozen=True)
class SquadTask(QATask):
    """SQuAD under the original's names: "squad" is 2.0, "squadv1" is 1.1."""

    def test_splits(self, config: FinetuningConfig) -> list[str]:
        return ["test"] if config.data_source == "files" else []  # tfds has no test split

    def path(self, config: FinetuningConfig, split: str) -> str:
        if config.data_source == "tfds":  # converted to the official json, next to the model
            if split not in ("train", "dev"):
                raise DataError(f"tensorflow-datasets' squad has no {split} split")
            return squad.tfds_to_json(
                "squad/v2.0" if self.version_2 else "squad/v1.1",
                {"train": "train", "dev": "validation"}[split], config.tfds_data_dir,
                os.path.join(config.pretrained_model_dir, "finetuning_data_tfds", self.name,
                             f"{split}.json"))
        path = os.path.join(config.raw_data_dir(self.data_name), f"{split}.json")
        if not tf.io.gfile.exists(path):
            raise DataError(f"no {self.name} {split} file: {path} does not exist; put SQuAD "
                            f"{'2.0' if self.version_2 else '1.1'}'s {split} json there")
        return path

    def read(self, config: FinetuningConfig, path: str,
             is_training: bool) -> list[squad.QAExample]:
        return squad.read_squad(path, is_training, self.version_2,
                                self.hparams(config).max_unfound_fraction)

    def score(self, config: FinetuningConfig, path: str, predictions: dict[str, str],
              null_odds: dict[str, float] | None) -> dict[str, float]:
        return squad.evaluate(path, predictions, null_odds if self.version_2 else None,
                              self.version_2, na_threshold=self.hparams(config).qa_na_threshold)

    def write_test_outputs(self, config: FinetuningConfig, data: SplitData,
                           outputs: dict[str, np.ndarray], tokenizer: WordPieceTokenizer,
                           directory: str) -> list[str]:
        """<task>/predictions.json, with "" where the null odds exceed qa_na_threshold (as the
        original), and <task>/null_odds.json for 2.0."""
        predictions, null_odds, _ = self.predictions(config, data, outputs, tokenizer)
        if self.version_2:
            predictions = squad.apply_na_threshold(predictions, null_odds,
                                                   self.hparams(config).qa_na_threshold)
        out = os.path.join(directory, self.name)
        squad.write_predictions(out, predictions, null_odds if self.version_2 else None)
        return [out]


@dataclasses.dataclass(frozen=True)
class MrqaTask(QATask):
    """A set of the MRQA 2019 shared task in its own jsonl(.gz) format."""

    def _file(self, config: FinetuningConfig, stem: str) -> str | None:
        directory = config.raw_data_dir(self.data_name)
        for extension in (".jsonl", ".jsonl.gz"):
            if tf.io.gfile.exists(os.path.join(directory, stem + extension)):
                return os.path.join(directory, stem + extension)
        return None

    def dev_splits(self, config: FinetuningConfig) -> list[str]:
        """dev, then the out-of-domain sets found as dev-<set>.jsonl(.gz)."""
        pattern = os.path.join(config.raw_data_dir(self.data_name), "dev-*.jsonl*")
        names = {os.path.basename(p)[len("dev-"):].split(".jsonl")[0]
                 for p in tf.io.gfile.glob(pattern)}
        return ["dev", *sorted(names)]

    def path(self, config: FinetuningConfig, split: str) -> str:
        stem = split if split in ("train", "dev") else f"dev-{split}"
        path = self._file(config, stem)
        if path is None:
            where = os.path.join(config.raw_data_dir(self.data_name), stem)
            raise DataError(f"no {self.name} {split} file: neither {where}.jsonl nor "
                            f"{where}.jsonl.gz exists; put the MRQA shared task's file there")
        return path

    def read(self, config: FinetuningConfig, path: str,
             is_training: bool) -> list[squad.QAExample]:
        return squad.read_mrqa(path, is_training, self.hparams(config).max_unfound_fraction)

    def score(self, config: FinetuningConfig, path: str, predictions: dict[str, str],
              null_odds: dict[str, float] | None) -> dict[str, float]:
        return squad.evaluate_mrqa(path, predictions)


TASKS: list[QATask] = [
    SquadTask("squad", version_2=True), SquadTask("squadv1"),
    # The original's four MRQA tasks, then HotpotQA, the shared task's other in-domain set.
    MrqaTask("newsqa"), MrqaTask("naturalqs"), MrqaTask("triviaqa"), MrqaTask("searchqa"),
    MrqaTask("hotpotqa"),
]
