"""BERT's WordPiece tokenization (the original's model/tokenization.FullTokenizer) on
tensorflow-text.

The text normalisation the original's BasicTokenizer does per character in Python (drop
control characters, map whitespace to spaces, lower-case, strip accents only when lower-casing)
runs here as C-level string operations; splitting on whitespace, punctuation and CJK
characters and the WordPiece lookup run in tensorflow-text's BertTokenizer.

>>> tok = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world",
...                           "##s", ",", "!"])
>>> tok.tokenize_to_ids(["Hello, worlds!", ""])
[[5, 8, 6, 7, 9], []]
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from typing import Iterable, Sequence

import tensorflow as tf
import tensorflow_text as tf_text
# BertTokenizer's documented default splitter (whitespace, punctuation, CJK), used on its own.
from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MAX_CHARS_PER_WORD = 200  # the original's WordpieceTokenizer.max_input_chars_per_word
_TOO_LONG_BYTES = 4 * MAX_CHARS_PER_WORD + 1  # more bytes than any 200-character word has


@functools.lru_cache(maxsize=1)
def _character_classes() -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    """Regexes for the original's _is_control (category C*, but not tab/newline/return, plus
    NUL and U+FFFD), _is_whitespace (space, tab, newline, return, Zs), and the Mn marks that
    accent stripping removes."""
    control, space, marks = ["\x00", "\ufffd"], [" ", "\t", "\n", "\r"], []
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        category = unicodedata.category(char)
        if category.startswith("C") and char not in "\t\n\r":
            control.append(char)
        elif category == "Zs":
            space.append(char)
        elif category == "Mn":
            marks.append(char)

    def char_class(chars: list[str]) -> re.Pattern:
        """A [...] class of code-point ranges (the C* categories hold ~900k code points)."""
        codes = sorted(set(map(ord, chars)))
        ranges, start = [], codes[0]
        for prev, code in zip(codes, codes[1:] + [None]):
            if code != prev + 1:
                ranges.append(re.escape(chr(start)) + ("-" + re.escape(chr(prev))
                                                        if prev > start else ""))
                start = code
        return re.compile("[" + "".join(ranges) + "]")

    return char_class(control), char_class(space), char_class(marks)


def read_vocab(vocab_file: str) -> list[str]:
    """The tokens of a BERT vocab.txt, in id order."""
    if not tf.io.gfile.exists(vocab_file):
        raise FileNotFoundError(f"vocab file {vocab_file} not found")
    with tf.io.gfile.GFile(vocab_file) as f:
        return [line.rstrip("\n") for line in f]


class WordPieceTokenizer:
    """Text -> WordPiece ids exactly as the original's FullTokenizer.

    `vocab` is a vocab.txt path or the list of tokens. Words (after the punctuation split)
    longer than 200 characters become [UNK], as in the original."""

    def __init__(self, vocab: str | Sequence[str], do_lower_case: bool = True,
                 strip_accents: bool = True):
        self.tokens = read_vocab(vocab) if isinstance(vocab, str) else list(vocab)
        self.vocab = {token: i for i, token in enumerate(self.tokens)}
        missing = [t for t in SPECIAL_TOKENS if t not in self.vocab]
        if missing:
            where = vocab if isinstance(vocab, str) else "the vocabulary"
            raise ValueError(f"{where} lacks the special tokens {missing}")
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents
        table = tf.lookup.StaticVocabularyTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(self.tokens), tf.range(len(self.tokens), dtype=tf.int64)),
            num_oov_buckets=1)
        # Normalisation happens in normalize(); this splits on whitespace, punctuation and CJK.
        self._split = BasicTokenizer(lower_case=False)
        self._wordpiece = tf_text.WordpieceTokenizer(
            table, token_out_type=tf.int64, unknown_token="[UNK]",
            max_bytes_per_word=_TOO_LONG_BYTES - 1)
        self._tokenize = tf.function(self._tokenize_normalized,
                                     input_signature=[tf.TensorSpec([None], tf.string)])

    def _tokenize_normalized(self, lines: tf.Tensor) -> tf.RaggedTensor:
        words = self._split.tokenize(lines)  # [lines, words]
        # The original gives [UNK] to a word over 200 characters; tf-text counts bytes, so such
        # words are swapped for one long enough in bytes for tf-text to give [UNK] too.
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > MAX_CHARS_PER_WORD
        words = words.with_flat_values(
            tf.where(too_long, tf.constant("x" * _TOO_LONG_BYTES), words.flat_values))
        return self._wordpiece.tokenize(words).merge_dims(-2, -1)

    def normalize(self, text: str) -> str:
        """The original's BasicTokenizer up to (not including) the punctuation split."""
        control, space, marks = _character_classes()
        text = space.sub(" ", control.sub("", text))
        if self.do_lower_case:
            text = text.lower()
            if self.strip_accents:
                text = marks.sub("", unicodedata.normalize("NFD", text))
        return text

    def tokenize_to_ids(self, lines: Iterable[str]) -> list[list[int]]:
        """WordPiece ids of each line (a batch is much faster than one line at a time)."""
        lines = [self.normalize(line) for line in lines]
        if not lines:
            return []
        ids = self._tokenize(tf.constant(lines, tf.string))
        return [row.tolist() for row in ids.numpy()]

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[i] for i in ids]
