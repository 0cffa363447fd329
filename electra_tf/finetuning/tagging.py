"""Sequence tagging: text chunking on CoNLL-2000 (the original's finetune/tagging/).

Data: DATA_DIR/finetuning_data/chunk/{train,dev,test}.txt in CoNLL-2000's format, one
`word POS chunk-tag` line per word (the tag is the last field, IOB2: B-NP, I-NP, O) and a blank
line between sentences; "-DOCSTART-" lines are skipped. CoNLL-2000 has a training and a test
set: as the original's README says, the test set is the dev set here (its results are reported);
a test.txt is only read for write_test_outputs.

As the original: the model is trained on the chunks' BIOES tags (the label set: the BIOES tags
that occur in the task's train, dev and test files, sorted); a word is tagged at its first
wordpiece by one dense layer (no dropout) over the encoder's output, its loss the cross-entropy
summed over the sentence's words; every token has segment id 1. Each word is tokenized alone (the original's
tokenize_and_align); a word with no wordpiece (e.g. control characters only) becomes [UNK] so
that every word keeps a position.

Scoring is the standard chunk F1 of CoNLL-2000's conlleval script, computed by seqeval (its
default mode implements conlleval's chunk boundaries): the predicted BIOES tags are decoded into
chunks, written back as IOB2 tags, and those are compared with the file's tags; precision,
recall and F1 in percent. The original scored with its own span reader, which agrees with
conlleval on well-formed tags and differs on ill-formed predictions (e.g. I-VP after I-NP).
Words beyond max_seq_length are predicted "O" and counted (the original left them out of its
score); a warning says how many sentences were cut.

Predictions are written in conlleval's input format, `word POS gold predicted` per line: for dev
into results/<tasks>_predictions/, for test into test_predictions/ as chunk.txt.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import typing
from typing import Any, Sequence

import numpy as np
import tensorflow as tf
from absl import logging
from seqeval import metrics
from seqeval.metrics.sequence_labeling import get_entities

from electra_tf import files
from electra_tf.finetuning.model import TaggingHead
from electra_tf.finetuning.task import (Baseline, DataError, SplitData, Task, most_frequent,
                                        pad_rows)

if typing.TYPE_CHECKING:
    from electra_tf.finetuning.config import FinetuningConfig
    from electra_tf.tokenization import WordPieceTokenizer

SPLITS = ("train", "dev", "test")
_TAG_PREFIXES = ("B", "I", "E", "S")


@dataclasses.dataclass(frozen=True)
class Sentence:
    eid: int
    words: tuple[str, ...]
    pos: tuple[str, ...]
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


def read_conll(path: str) -> list[Sentence]:
    """The sentences of a CoNLL-2000 file; bad lines fail naming the file and line."""
    if not tf.io.gfile.exists(path):
        raise DataError(f"{path} does not exist; put CoNLL-2000's file (word POS chunk-tag "
                        "per line, a blank line between sentences) there")
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
            if fields[0] == "-DOCSTART-":
                continue
            if len(fields) < 3:
                raise DataError(f"{path}:{number}: {len(fields)} fields, expected "
                                "`word POS chunk-tag`")
            tag = fields[-1]
            if tag != "O" and (tag[:2] not in {f"{p}-" for p in _TAG_PREFIXES} or len(tag) < 3):
                raise DataError(f"{path}:{number}: chunk tag {tag!r} is not O or B-/I-/E-/S- "
                                "followed by the chunk type")
            rows.append((fields[0], fields[1], tag))
    close()
    if not sentences:
        raise DataError(f"{path} holds no sentences")
    return sentences


@functools.lru_cache(maxsize=8)
def _label_set(paths: tuple[str, ...]) -> tuple[str, ...]:
    """The BIOES tags that occur in the files, sorted."""
    return tuple(sorted({tag for path in paths for sentence in read_conll(path)
                         for tag in encode(chunks(sentence.tags), len(sentence.tags),
                                           "BIOES")}))


@dataclasses.dataclass(frozen=True)
class TaggingTask(Task):
    """Chunk tagging of CoNLL-format files with the first-wordpiece head."""
    name: str

    def defaults(self) -> dict[str, Any]:
        return {"max_seq_length": 256}  # the original's for chunk

    def test_splits(self, config: FinetuningConfig) -> list[str]:
        return ["test"]

    def path(self, config: FinetuningConfig, split: str) -> str:
        return os.path.join(config.raw_data_dir(self.data_name), f"{split}.txt")

    def labels(self, config: FinetuningConfig) -> tuple[str, ...]:
        """The head's classes: the BIOES tags that occur in the task's files, sorted."""
        paths = tuple(self.path(config, s) for s in SPLITS
                      if tf.io.gfile.exists(self.path(config, s)))
        if not paths:
            raise DataError(f"no {self.name} data: none of {self.path(config, 'train')}, "
                            f"dev.txt, test.txt exists")
        return _label_set(paths)

    def load(self, config: FinetuningConfig, split: str,
             tokenizer: WordPieceTokenizer) -> SplitData:
        sentences = read_conll(self.path(config, split))
        label_ids = {label: i for i, label in enumerate(self.labels(config))}
        words = [word for sentence in sentences for word in sentence.words]
        pieces = iter(tokenizer.tokenize_to_ids(words))
        cls, sep, unk = (tokenizer.vocab[t] for t in ("[CLS]", "[SEP]", "[UNK]"))
        length = config.max_seq_length
        ids, positions, labels = [], [], []
        cut = 0
        for sentence in sentences:
            row, first = [cls], []
            word_pieces = [next(pieces) or [unk] for _ in sentence.words]
            for word in word_pieces:
                if len(row) + len(word) + 1 > length:  # [SEP] must fit
                    cut += 1
                    break
                first.append(len(row))
                row += word
            ids.append(row + [sep])
            positions.append(first)
            bioes = encode(chunks(sentence.tags), len(sentence.words), "BIOES")
            labels.append([label_ids[tag] for tag in bioes[:len(first)]])
        if cut:
            logging.warning("%s %s: %d of %d sentences do not fit max_seq_length %d; their "
                            "last words are predicted O", self.name, split, cut,
                            len(sentences), length)
        arrays = {
            "input_ids": pad_rows(ids, length),
            "input_mask": pad_rows([[1] * len(row) for row in ids], length),
            # Segment 1 throughout, as the original's tagging features.
            "segment_ids": pad_rows([[1] * len(row) for row in ids], length),
            "tag_positions": pad_rows(positions, length),
            "tag_labels": pad_rows(labels, length),
            "tag_mask": pad_rows([[1] * len(p) for p in positions], length, np.float32),
            "eid": np.array([s.eid for s in sentences], np.int64),
        }
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
        """IOB2 tags of each sentence's words from the head's logits."""
        labels = self.labels(config)
        tags = []
        for row, sentence in enumerate(data.examples):
            n = int(data.arrays["tag_mask"][row].sum())
            best = outputs[row, data.arrays["tag_positions"][row, :n]].argmax(-1)
            bioes = [labels[i] for i in best] + ["O"] * (len(sentence.words) - n)
            tags.append(encode(chunks(bioes), len(bioes), "IOB2"))
        return tags

    def evaluate(self, config: FinetuningConfig, data: SplitData, outputs: np.ndarray,
                 tokenizer: WordPieceTokenizer, output_dir: str) -> dict[str, float]:
        predicted = self.predicted_tags(config, data, outputs)
        write_conll(os.path.join(output_dir, f"{self.name}.txt"), data.examples, predicted)
        return score([s.tags for s in data.examples], predicted)

    def baseline(self, config: FinetuningConfig, data: SplitData,
                 fit: SplitData) -> Baseline:
        """The most frequent tag of `fit` for every word."""
        tag = most_frequent(tag for sentence in fit.examples for tag in sentence.tags)
        return Baseline(f"most frequent tag {tag!r} of {fit.split}",
                        score([s.tags for s in data.examples],
                              [[tag] * len(s.tags) for s in data.examples]))

    def write_test_outputs(self, config: FinetuningConfig, data: SplitData,
                           outputs: np.ndarray, tokenizer: WordPieceTokenizer,
                           directory: str) -> list[str]:
        path = os.path.join(directory, f"{self.name}.txt")
        write_conll(path, data.examples, self.predicted_tags(config, data, outputs))
        return [path]


def score(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, float]:
    """conlleval's chunk precision, recall and F1 (percent; 0 when undefined)."""
    gold, predicted = [list(tags) for tags in gold], [list(tags) for tags in predicted]
    return {name: 100.0 * float(function(gold, predicted, zero_division=0))
            for name, function in (("precision", metrics.precision_score),
                                   ("recall", metrics.recall_score), ("f1", metrics.f1_score))}


def write_conll(path: str, sentences: Sequence[Sentence],
                predicted: Sequence[Sequence[str]]) -> None:
    """`word POS gold predicted` per line, a blank line after each sentence (conlleval's input);
    written to a temporary file and renamed, so it appears whole or not at all."""
    lines = []
    for sentence, tags in zip(sentences, predicted):
        lines += [" ".join(fields) for fields in zip(sentence.words, sentence.pos,
                                                     sentence.tags, tags)]
        lines.append("")
    files.write_atomically(path, "\n".join(lines) + "\n")


TASKS: list[TaggingTask] = [TaggingTask("chunk")]
