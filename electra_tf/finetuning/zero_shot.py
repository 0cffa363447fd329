"""Zero-shot classification with the pretrained discriminator's replaced-token-detection head
(Ni & Kao 2022, "ELECTRA is a Zero-Shot Learner, Too"). No training.

For a labelled single-sentence GLUE-format task, each sentence is put into a template once per
label, with that label's word in it, e.g. "{sentence} It was {word}." with "great" (label 1) and
"terrible" (label 0); the pretrained discriminator scores every token as replaced or original,
and the prediction is the label whose word it judges least likely replaced. Metrics are the GLUE
task's own (accuracy; MCC for CoLA).

What we chose where the paper leaves it open: a word of several wordpieces scores the mean of
their logits; the sentence is truncated (its last tokens) so that the whole template fits; a
"[SEP]" in the template ends segment A and starts segment B, as the paper's prompts in the
second segment. Templates and label words are hparams (ZeroShotHparams): `zero_shot_template`
and `zero_shot_label_words` ({label: word}); {sentence} and {word} must stand apart from the
template's letters (whitespace or punctuation around them), so that each piece tokenizes as it
would in the whole text.
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
import unicodedata
from typing import Any, Mapping

import numpy as np

from electra_tf import modeling
from electra_tf.finetuning import glue
from electra_tf.finetuning.task import (Baseline, Head, SplitData, Task, TaskHparams, pad_rows,
                                        token_checksums)
from electra_tf.hparam_parsing import ConfigError, require
from electra_tf.modeling import register

if typing.TYPE_CHECKING:
    from electra_tf.finetuning.hparams import FinetuningConfig
    from electra_tf.tokenization import WordPieceTokenizer

SENTENCE, WORD, SEP = "{sentence}", "{word}", "[SEP]"
_PIECES = re.compile(r"(\{sentence\}|\{word\}|\[SEP\])")


def _is_boundary(char: str | None) -> bool:
    """Whether BERT's tokenizer splits between this character and a letter next to it."""
    if char is None or char.isspace():
        return True
    return (char.isascii() and not char.isalnum()) or unicodedata.category(char).startswith("P")


def check_template(template: str) -> None:
    """Raises ValueError unless the template has one {sentence}, one {word}, at most one
    [SEP], and the placeholders stand apart from the template's letters."""
    for piece, most in ((SENTENCE, 1), (WORD, 1), (SEP, 1)):
        count = template.count(piece)
        if count > most or (piece != SEP and count < 1):
            raise ValueError(f"template {template!r} must hold {piece} "
                             f"{'at most ' if piece == SEP else ''}once, not {count} times")
    for match in _PIECES.finditer(template):
        if match[0] == SEP:
            continue
        before = template[match.start() - 1] if match.start() else None
        after = template[match.end()] if match.end() < len(template) else None
        if not (_is_boundary(before) and _is_boundary(after)):
            raise ValueError(f"template {template!r}: {match[0]} touches a letter of the "
                             "template; put a space or punctuation next to it")


@register
class ReplacedTokenHead(Head):
    """The pretraining discriminator's replaced-token-detection head as a fine-tuning head:
    one logit per position [B, L], positive for "replaced" (zero-shot classification reads it
    at the label word)."""

    def __init__(self, hidden_size: int, hidden_act: str = "gelu", **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.hidden_act = hidden_act
        self.detector = modeling.DiscriminatorHead(hidden_size, hidden_act,
                                                   name="discriminator_predictions",
                                                   dtype=self.dtype_policy)

    def build(self, input_shape):
        self.detector.build(input_shape)
        self.built = True

    def call(self, sequence_output, features=None, training=None):
        return self.detector(sequence_output)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "hidden_size": self.hidden_size,
                "hidden_act": self.hidden_act}


@dataclasses.dataclass
class ZeroShotHparams(TaskHparams):
    """Ours. "" and {} take the task's own template and words."""
    zero_shot_template: str = ""  # with {sentence} and {word}; "[SEP]" starts segment B
    zero_shot_label_words: dict = dataclasses.field(default_factory=dict)  # label -> word


@dataclasses.dataclass(frozen=True)
class ZeroShotTask(Task):
    """A single-sentence GLUE task classified by the replaced-token-detection head."""
    name: str
    source: glue.GlueTask  # whose files, labels, metrics and submission file it uses
    template: str
    label_words: Mapping[str, str] = dataclasses.field(compare=False)

    trainable = False
    hparams_class = ZeroShotHparams

    @property
    def data_name(self) -> str:
        return self.source.name

    def dev_splits(self, config: FinetuningConfig) -> list[str]:
        return self.source.dev_splits()

    def test_splits(self, config: FinetuningConfig) -> list[str]:
        return self.source.test_splits()

    def prompt(self, config: FinetuningConfig) -> tuple[str, dict[str, str]]:
        """The template and {label: word} in use: the hparams', else the task's own."""
        hparams = self.hparams(config)
        return (hparams.zero_shot_template or self.template,
                dict(hparams.zero_shot_label_words or self.label_words))

    def validate(self, config: FinetuningConfig) -> None:
        template, words = self.prompt(config)
        try:
            check_template(template)
        except ValueError as e:
            raise ConfigError(f"hparam 'zero_shot_template': {e}") from None
        require(sorted(words) == sorted(self.source.labels), "zero_shot_label_words",
                f"needs a word for each {self.source.name} label {list(self.source.labels)}, "
                f"got {words}")
        require(all(isinstance(w, str) and w.strip() for w in words.values()),
                "zero_shot_label_words", f"words must be non-empty strings, got {words}")
        require(bool(config.init_checkpoint), "init_checkpoint",
                f"{self.name} classifies with a pretrained discriminator; name one")

    def load(self, config: FinetuningConfig, split: str,
             tokenizer: WordPieceTokenizer) -> SplitData:
        """One row per (sentence, label): the template filled with the sentence and the
        label's word; `word_start`/`word_end` mark the word's wordpieces."""
        examples = self.source.read_split(config, split, double_unordered=False)
        template, words = self.prompt(config)
        pieces = [piece for piece in _PIECES.split(template) if piece]
        literals = [piece for piece in pieces if piece not in (SENTENCE, WORD, SEP)]
        labels = self.source.labels
        tokenized = tokenizer.tokenize_to_ids([e.text_a for e in examples] + literals +
                                              [words[label] for label in labels])
        sentences = tokenized[:len(examples)]
        literal_ids = dict(zip(literals, tokenized[len(examples):len(examples) + len(literals)]))
        word_ids = dict(zip(labels, tokenized[len(examples) + len(literals):]))
        cls, sep = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
        length = config.max_seq_length
        ids, segments, spans = [], [], []
        for sentence in sentences:
            for label in labels:
                fixed = 2 + (SEP in pieces) + len(word_ids[label]) + sum(
                    len(literal_ids[p]) for p in literals)
                if fixed >= length:
                    raise ValueError(f"{self.name}: the template with {words[label]!r} takes "
                                     f"{fixed} tokens; max_seq_length {length} leaves no room "
                                     "for the sentence")
                row, segment, span = [cls], 0, None
                for piece in pieces:
                    if piece == SEP:
                        row.append(sep)
                        segment = len(row)
                    elif piece == WORD:
                        span = (len(row), len(row) + len(word_ids[label]))
                        row += word_ids[label]
                    else:
                        row += (sentence[:length - fixed] if piece == SENTENCE
                                else literal_ids[piece])
                ids.append(row + [sep])
                segments.append([0] * segment + [1] * (len(row) + 1 - segment) if segment
                                else [0] * (len(row) + 1))
                spans.append(span)
        arrays = {"input_ids": pad_rows(ids, length),
                  "input_mask": pad_rows([[1] * len(row) for row in ids], length),
                  "segment_ids": pad_rows(segments, length),
                  "word_start": np.array([s for s, _ in spans], np.int32),
                  "word_end": np.array([e for _, e in spans], np.int32)}
        if config.log_examples:
            print(f"{self.name} {split}: {len(examples)} sentences x {len(labels)} labels, e.g. "
                  f"{tokenizer.convert_ids_to_tokens(ids[0])}", flush=True)
        return SplitData(self, split, arrays, examples)

    def row_ids(self, data: SplitData) -> list[str]:
        """The row's index (a sentence's label) and its tokens' checksum: the template, the
        label words and the tokenizer decide where the logits that are averaged sit."""
        return [f"{i}#{checksum}" for i, checksum in
                enumerate(token_checksums(data.arrays["input_ids"]))]

    def make_head(self, config: FinetuningConfig) -> ReplacedTokenHead:
        bert = config.bert_config()
        return ReplacedTokenHead(bert["hidden_size"], bert["hidden_act"], name=self.name)

    def init_head(self, head: ReplacedTokenHead, config: FinetuningConfig) -> str:
        """The pretrained discriminator's replaced-token-detection head."""
        from electra_tf import checkpoints

        pretrained = checkpoints.load_pretrained(config.init_checkpoint,
                                                 config.bert_config()["num_attention_heads"])
        if pretrained.discriminator is None or not pretrained.has_discriminator_head:
            raise ValueError(f"init_checkpoint {pretrained.source} has no replaced-token-"
                             f"detection head, which {self.name} classifies with; use a "
                             "pretraining discriminator (run_pretraining's discriminator.keras, "
                             "a released TF1 checkpoint, or Hugging Face ElectraForPreTraining)")
        source = pretrained.discriminator.head.weights
        if [tuple(w.shape) for w in source] != [tuple(w.shape) for w in head.detector.weights]:
            raise ValueError(f"init_checkpoint {pretrained.source}: its discriminator head "
                             "does not match the configured model's hidden size")
        for target, value in zip(head.detector.weights, source):
            target.assign(value)
        return f"{pretrained.source} ({pretrained.format})"

    def predictions(self, data: SplitData, outputs: np.ndarray) -> np.ndarray:
        """Each sentence's label id: the label whose word has the lowest mean
        replaced-token logit."""
        starts, ends = data.arrays["word_start"], data.arrays["word_end"]
        scores = np.array([outputs[row, start:end].mean()
                           for row, (start, end) in enumerate(zip(starts, ends))])
        return scores.reshape(len(data.examples), len(self.source.labels)).argmin(-1)

    def evaluate(self, config: FinetuningConfig, data: SplitData, outputs: np.ndarray,
                 tokenizer: WordPieceTokenizer, output_dir: str) -> dict[str, float]:
        labels = [self.source.label_id(example.label) for example in data.examples]
        return self.source.score(labels, self.predictions(data, outputs))

    def main_metric(self, results: dict[str, float]) -> float:
        return self.source.main_metric(results)

    def label_names(self, config: FinetuningConfig) -> list[str]:
        return self.source.label_names(config)

    def baseline(self, config: FinetuningConfig, data: SplitData, fit: SplitData,
                 tokenizer: WordPieceTokenizer) -> Baseline:
        return self.source.baseline(config, data, fit, tokenizer)

    def write_test_outputs(self, config: FinetuningConfig, data: SplitData,
                           outputs: np.ndarray, tokenizer: WordPieceTokenizer,
                           directory: str) -> list[str]:
        path = os.path.join(directory, self.source.submission_name(data.split))
        self.source.write_submission(path, [e.eid for e in data.examples],
                                     self.predictions(data, outputs).tolist())
        return [path]


TASKS: list[ZeroShotTask] = [
    ZeroShotTask("sst_zeroshot", glue.get_task("sst"), f"{SENTENCE} It was {WORD}.",
                 {"0": "terrible", "1": "great"}),
    ZeroShotTask("cola_zeroshot", glue.get_task("cola"),
                 f"{SENTENCE} {SEP} The grammar of this sentence is {WORD}.",
                 {"0": "wrong", "1": "correct"}),
]
