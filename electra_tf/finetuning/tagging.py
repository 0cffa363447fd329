"""Sequence tagging (the original's finetune/tagging/): the machinery every word-level tagging
task shares (TaggingTask: first-wordpiece features, the head, the loss, prediction files) and
text chunking on CoNLL-2000 (ChunkTask). Part-of-speech tagging (pos.py) is another TaggingTask.

Data: DATA_DIR/finetuning_data/chunk/{train,dev,test}.txt in CoNLL-2000's format, one
`word POS chunk-tag` line per word (the tag is the last field, IOB2: B-NP, I-NP, O) and a blank
line between sentences; "-DOCSTART-" lines are skipped. CoNLL-2000 has a training and a test
set: as the original's README says, the test set is the dev set here (its results are reported);
a test.txt is only read for write_test_outputs.

As the original: the model is trained on the chunks' BIOES tags (the label set: the BIOES tags
that occur in the task's train, dev and test files, sorted); a word is tagged at its first
wordpiece by one dense layer (no dropout) over the encoder's output (TaggingHead), its loss
the cross-entropy summed over the sentence's words; every token has segment id 1. Each word is
tokenized alone (the original's tokenize_and_align); a word with no wordpiece (e.g. control
characters only) becomes [UNK] so that every word keeps a position.

Scoring is the standard chunk F1 of CoNLL-2000's conlleval script, computed by seqeval (its
default mode implements conlleval's chunk boundaries): the predicted BIOES tags are decoded into
chunks, written back as IOB2 tags, and those are compared with the file's tags; precision,
recall and F1 in percent. The original scored with its own span reader, which agrees with
conlleval on well-formed tags and differs on ill-formed predictions (e.g. I-VP after I-NP).
Words beyond max_seq_length are predicted "O" and counted (the original left them out of its
score); a warning says how many sentences were cut.

Predictions are written in conlleval's input format, `word POS gold predicted` per line: for dev
into results/<tasks>_predictions/, for test into test_predictions/ as chunk.txt (every tagging
task: the file's fields, then the predicted tag, in <task>.txt).
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import os
import typing
import zlib
from typing import Any, Callable, ClassVar, Sequence

import numpy as np
import tensorflow as tf
from absl import logging
from keras import layers
from seqeval import metrics
from seqeval.metrics.sequence_labeling import get_entities

from electra_tf import files
from electra_tf.finetuning.task import (Baseline, DataError, Head, SplitData, Task,
                                        log_probabilities, most_frequent, pad_rows, softmax)
from electra_tf.modeling import register

if typing.TYPE_CHECKING:
    from electra_tf.finetuning.hparams import FinetuningConfig
    from electra_tf.tokenization import WordPieceTokenizer

SPLITS = ("train", "dev", "test")
_TAG_PREFIXES = ("B", "I", "E", "S")


@dataclasses.dataclass(frozen=True)
class Sentence:
    eid: int
    words: tuple[str, ...]
    pos: tuple[str, ...]  # CoNLL-2000's POS field; empty for files without one (pos's)
    tags: tuple[str, ...]  # as in the file


def chunks(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """(type, first, last) of each chunk in IOB/BIOES tags, by conlleval's rules."""
    return [(kind, start, end) for kind, start, end in get_entities(list(tags))]


def encode(spans: Sequence[tuple[str, int, int]], length: int, scheme: str) -> list[str]:
    """Tags of `length` words with the given chunks, in "BIOES" or "IOB2"."""
    tags = ["O"] * length
    for kind, start, end in spans:
        for i in range(start, end + 1):
            tags[i] = f"I-{kind}"
        if scheme == "BIOES" and start == end:
            tags[start] = f"S-{kind}"
            continue
        tags[start] = f"B-{kind}"
        if scheme == "BIOES":
            tags[end] = f"E-{kind}"
    return tags


def read_sentences(path: str, missing: str,
                   parse: Callable[[list[str], str], tuple[str, str, str] | None]
                   ) -> list[Sentence]:
    """The sentences of a file with one word a line and a blank line between sentences.
    `parse(fields, where)` turns a line's fields into (word, POS, tag), None to skip the line,
    or raises DataError naming `where` (the file and line); `missing` says how to make a file
    that does not exist."""
    if not tf.io.gfile.exists(path):
        raise DataError(f"{path} does not exist; {missing}")
    sentences: list[Sentence] = []
    rows: list[tuple[str, str, str]] = []

    def close() -> None:
        if rows:
            words, pos, tags = zip(*rows)
            sentences.append(Sentence(len(sentences), words, pos, tags))
            rows.clear()

    with tf.io.gfile.GFile(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                fields = raw.decode("utf-8").split()
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{number}: not UTF-8 ({e.reason})") from None
            if not fields:
                close()
                continue
            row = parse(fields, f"{path}:{number}")
            if row is not None:
                rows.append(row)
    close()
    if not sentences:
        raise DataError(f"{path} holds no sentences")
    return sentences


def _conll_row(fields: list[str], where: str) -> tuple[str, str, str] | None:
    if fields[0] == "-DOCSTART-":
        return None
    if len(fields) < 3:
        raise DataError(f"{where}: {len(fields)} fields, expected `word POS chunk-tag`")
    tag = fields[-1]
    if tag != "O" and (tag[:2] not in {f"{p}-" for p in _TAG_PREFIXES} or len(tag) < 3):
        raise DataError(f"{where}: chunk tag {tag!r} is not O or B-/I-/E-/S- followed by the "
                        "chunk type")
    return fields[0], fields[1], tag


def read_conll(path: str) -> list[Sentence]:
    """The sentences of a CoNLL-2000 file; bad lines fail naming the file and line."""
    return read_sentences(path, "put CoNLL-2000's file (word POS chunk-tag per line, a blank "
                          "line between sentences) there", _conll_row)


@functools.lru_cache(maxsize=8)
def _label_set(paths: tuple[str, ...]) -> tuple[str, ...]:
    """The BIOES tags that occur in the files, sorted."""
    return tuple(sorted({tag for path in paths for sentence in read_conll(path)
                         for tag in encode(chunks(sentence.tags), len(sentence.tags),
                                           "BIOES")}))


def featurize(words: Sequence[Sequence[str]], labels: Sequence[Sequence[int]],
              tokenizer: WordPieceTokenizer, max_seq_length: int) -> tuple[dict, int]:
    """The model's arrays of tagged sentences, and how many sentences were cut.

    Each word is tokenized alone (a word with no wordpiece becomes [UNK]); a row is [CLS], the
    words' pieces, [SEP], segment id 1 throughout (as the original's tagging features).
    tag_positions holds each word's first wordpiece, tag_labels its label id, tag_mask 1 for
    the words that fit: a sentence longer than max_seq_length loses its last words."""
    pieces = iter(tokenizer.tokenize_to_ids([word for sentence in words for word in sentence]))
    cls, sep, unk = (tokenizer.vocab[t] for t in ("[CLS]", "[SEP]", "[UNK]"))
    ids, positions, kept = [], [], []
    cut = 0
    for sentence, sentence_labels in zip(words, labels):
        row, first = [cls], []
        word_pieces = [next(pieces) or [unk] for _ in sentence]
        for word in word_pieces:
            if len(row) + len(word) + 1 > max_seq_length:  # [SEP] must fit
                cut += 1
                break
            first.append(len(row))
            row += word
        ids.append(row + [sep])
        positions.append(first)
        kept.append(list(sentence_labels[:len(first)]))
    arrays = {
        "input_ids": pad_rows(ids, max_seq_length),
        "input_mask": pad_rows([[1] * len(row) for row in ids], max_seq_length),
        "segment_ids": pad_rows([[1] * len(row) for row in ids], max_seq_length),
        "tag_positions": pad_rows(positions, max_seq_length),
        "tag_labels": pad_rows(kept, max_seq_length),
        "tag_mask": pad_rows([[1] * len(p) for p in positions], max_seq_length, np.float32),
    }
    return arrays, cut


@register
class TaggingHead(Head):
    """The original's tagging head: one dense layer to `num_labels` logits (no dropout), here
    at every position [B, L, num_labels]; the task reads each word's first wordpiece."""

    def __init__(self, num_labels: int, **kwargs):
        super().__init__(**kwargs)
        self.num_labels = num_labels
        self.dense = layers.Dense(num_labels, name="dense", dtype=self.dtype_policy)

    def build(self, input_shape):
        self.dense.build((None, None, input_shape[-1]))
        self.built = True

    def call(self, sequence_output, features=None, training=None):
        return tf.cast(self.dense(sequence_output), tf.float32)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "num_labels": self.num_labels}


@dataclasses.dataclass(frozen=True)
class TaggingTask(Task):
    """A word-level tagging task read from `word ... tag` files (a blank line between
    sentences) with the first-wordpiece head. A subclass says how its files are read
    (`read`), which label the head learns for each word (`word_labels`, from `labels`), how
    the head's labels become the file's tags (`decode`), how they are scored (`score`) and
    which of a sentence's fields its prediction files repeat (`columns`)."""
    name: str
    # The head's label predicted for the words past max_seq_length (they count in the score).
    cut_label: ClassVar[str]

    def test_splits(self, config: FinetuningConfig) -> list[str]:
        return ["test"]

    def path(self, config: FinetuningConfig, split: str) -> str:
        return os.path.join(config.raw_data_dir(self.data_name), f"{split}.txt")

    @abc.abstractmethod
    def read(self, path: str) -> list[Sentence]:
        """The sentences of one of the task's files."""

    @abc.abstractmethod
    def labels(self, config: FinetuningConfig) -> tuple[str, ...]:
        """The head's classes."""

    @abc.abstractmethod
    def word_labels(self, sentence: Sentence) -> Sequence[str]:
        """The head's class (one of `labels`) of each of the sentence's words."""

    def decode(self, labels: list[str]) -> list[str]:
        """A sentence's tags in the file's scheme from the head's labels of its words."""
        return labels

    @abc.abstractmethod
    def score(self, config: FinetuningConfig, data: SplitData, predicted: list[list[str]],
              tokenizer: WordPieceTokenizer) -> dict[str, float]:
        """The metrics of a split's predicted tags (in the file's scheme)."""

    def columns(self, sentence: Sentence) -> tuple[Sequence[str], ...]:
        """The fields of each word its prediction files repeat before the predicted tag."""
        return sentence.words, sentence.pos, sentence.tags

    def load(self, config: FinetuningConfig, split: str,
             tokenizer: WordPieceTokenizer) -> SplitData:
        sentences = self.read(self.path(config, split))
        label_ids = {label: i for i, label in enumerate(self.labels(config))}
        arrays, cut = featurize(
            [s.words for s in sentences],
            [[label_ids[tag] for tag in self.word_labels(s)] for s in sentences],
            tokenizer, config.max_seq_length)
        if cut:
            logging.warning("%s %s: %d of %d sentences do not fit max_seq_length %d; their "
                            "last words are predicted %s", self.name, split, cut,
                            len(sentences), config.max_seq_length, self.cut_label)
        arrays["eid"] = np.array([s.eid for s in sentences], np.int64)
        if config.log_examples:
            print(f"{self.name} {split}: {len(sentences)} sentences, e.g. "
                  f"{list(zip(sentences[0].words, sentences[0].tags))[:8]}", flush=True)
        return SplitData(self, split, arrays, sentences)

    def make_head(self, config: FinetuningConfig) -> TaggingHead:
        return TaggingHead(len(self.labels(config)), name=self.name)

    def example_losses(self, config: FinetuningConfig, outputs: tf.Tensor,
                       batch: dict[str, tf.Tensor]) -> tf.Tensor:
        """Each word's cross-entropy at its first wordpiece, summed over the sentence."""
        logits = tf.gather(outputs, batch["tag_positions"], batch_dims=1)  # [B, W, C]
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        losses = -tf.reduce_sum(
            tf.one_hot(batch["tag_labels"], tf.shape(logits)[-1]) * log_probs, axis=-1)
        return tf.reduce_sum(losses * batch["tag_mask"], axis=-1)

    def predicted_tags(self, config: FinetuningConfig, data: SplitData,
                       outputs: np.ndarray) -> list[list[str]]:
        """Each sentence's tags (the file's scheme) from the head's logits."""
        labels = self.labels(config)
        tags = []
        for row, sentence in enumerate(data.examples):
            n = int(data.arrays["tag_mask"][row].sum())
            best = outputs[row, data.arrays["tag_positions"][row, :n]].argmax(-1)
            tags.append(self.decode([labels[i] for i in best]
                                    + [self.cut_label] * (len(sentence.words) - n)))
        return tags

    def main_metric(self, results: dict[str, float]) -> float:
        return results["f1"]

    def label_names(self, config: FinetuningConfig) -> list[str]:
        return list(self.labels(config))

    def row_ids(self, data: SplitData) -> list[str]:
        """The sentence's index and a checksum of its words."""
        return [f"{i}:{zlib.crc32(' '.join(s.words).encode()):08x}"
                for i, s in enumerate(data.examples)]

    @staticmethod
    def _max_words(data: SplitData) -> int:
        """The word axis of the ensemble outputs: the split's longest sentence (at most the
        row length), so that it does not depend on the tokenizer."""
        longest = max((len(sentence.words) for sentence in data.examples), default=0)
        return min(longest, data.arrays["tag_positions"].shape[1])

    def ensemble_outputs(self, config: FinetuningConfig, data: SplitData,
                         outputs: np.ndarray) -> dict[str, np.ndarray]:
        """Each word's tag probabilities [N, longest sentence, tags] (at its first wordpiece,
        so members with other tokenizers line up; 0 past the words that fit)."""
        words = self._max_words(data)
        positions = data.arrays["tag_positions"][:, :words]
        logits = np.take_along_axis(np.asarray(outputs), positions[..., None], axis=1)
        mask = data.arrays["tag_mask"][:, :words, None]
        return {"word_probabilities": (softmax(logits) * mask).astype(np.float32)}

    def from_ensemble_outputs(self, config: FinetuningConfig, data: SplitData,
                              averaged: dict[str, np.ndarray]) -> np.ndarray:
        """Per-wordpiece logits with each word's averaged log-probabilities at its first
        wordpiece, where predicted_tags reads them."""
        scores = log_probabilities(averaged["word_probabilities"])
        words = scores.shape[1]
        positions = data.arrays["tag_positions"]
        outputs = np.zeros((len(positions), positions.shape[1], scores.shape[-1]))
        mask = data.arrays["tag_mask"][:, :words].astype(bool)
        rows = np.nonzero(mask)[0]
        outputs[rows, positions[:, :words][mask]] = scores[mask]
        return outputs

    def evaluate(self, config: FinetuningConfig, data: SplitData, outputs: np.ndarray,
                 tokenizer: WordPieceTokenizer, output_dir: str) -> dict[str, float]:
        predicted = self.predicted_tags(config, data, outputs)
        self.write_predictions(os.path.join(output_dir, f"{self.name}.txt"), data.examples,
                               predicted)
        return self.score(config, data, predicted, tokenizer)

    def baseline(self, config: FinetuningConfig, data: SplitData, fit: SplitData,
                 tokenizer: WordPieceTokenizer) -> Baseline:
        """The most frequent tag of `fit` for every word, scored as the task scores."""
        tag = most_frequent(tag for sentence in fit.examples for tag in sentence.tags)
        return Baseline(f"most frequent tag {tag!r} of {fit.split}",
                        self.score(config, data, [[tag] * len(s.tags) for s in data.examples],
                                   tokenizer))

    def write_test_outputs(self, config: FinetuningConfig, data: SplitData,
                           outputs: np.ndarray, tokenizer: WordPieceTokenizer,
                           directory: str) -> list[str]:
        path = os.path.join(directory, f"{self.name}.txt")
        self.write_predictions(path, data.examples, self.predicted_tags(config, data, outputs))
        return [path]

    def write_predictions(self, path: str, sentences: Sequence[Sentence],
                          predicted: Sequence[Sequence[str]]) -> None:
        """`columns... predicted` per word, a blank line after each sentence (for chunk,
        conlleval's input); written to a temporary file and renamed, so it appears whole or
        not at all."""
        lines = []
        for sentence, tags in zip(sentences, predicted):
            lines += [" ".join(fields) for fields in zip(*self.columns(sentence), tags)]
            lines.append("")
        files.write_atomically(path, "\n".join(lines) + "\n")


@dataclasses.dataclass(frozen=True)
class ChunkTask(TaggingTask):
    """Chunking on CoNLL-2000's files: BIOES labels, conlleval's chunk F1."""
    cut_label: ClassVar[str] = "O"

    def defaults(self) -> dict[str, Any]:
        return {"max_seq_length": 256}  # the original's for chunk

    def read(self, path: str) -> list[Sentence]:
        return read_conll(path)

    def labels(self, config: FinetuningConfig) -> tuple[str, ...]:
        """The head's classes: the BIOES tags that occur in the task's files, sorted."""
        paths = tuple(self.path(config, s) for s in SPLITS
                      if tf.io.gfile.exists(self.path(config, s)))
        if not paths:
            raise DataError(f"no {self.name} data: none of {self.path(config, 'train')}, "
                            f"dev.txt, test.txt exists")
        return _label_set(paths)

    def word_labels(self, sentence: Sentence) -> list[str]:
        return encode(chunks(sentence.tags), len(sentence.words), "BIOES")

    def decode(self, labels: list[str]) -> list[str]:
        """IOB2 tags of the chunks the BIOES labels hold."""
        return encode(chunks(labels), len(labels), "IOB2")

    def score(self, config: FinetuningConfig, data: SplitData, predicted: list[list[str]],
              tokenizer: WordPieceTokenizer) -> dict[str, float]:
        return score([s.tags for s in data.examples], predicted)


def score(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, float]:
    """conlleval's chunk precision, recall and F1 (percent; 0 when undefined)."""
    gold, predicted = [list(tags) for tags in gold], [list(tags) for tags in predicted]
    return {name: 100.0 * float(function(gold, predicted, zero_division=0))
            for name, function in (("precision", metrics.precision_score),
                                   ("recall", metrics.recall_score), ("f1", metrics.f1_score))}


TASKS: list[TaggingTask] = [ChunkTask("chunk")]
