"""BERT's WordPiece tokenization (the original's model/tokenization.FullTokenizer) on
tensorflow-text, with identical ids and ~20x its speed.

The original's BasicTokenizer normalises per character in Python (drop control characters, map
whitespace to spaces, lower-case, strip accents only when lower-casing). tensorflow-text's own
normaliser (FastBertTokenizer's `lower_case_nfd_strip_accents`) differs from it on real text
(it case-folds: final sigma, ß -> ss, ½ -> 1⁄2), so the normalisation stays the original's,
done with C-level string operations and skipped where a line has nothing to normalise.
FastBertTokenizer then splits on whitespace, punctuation and CJK characters and runs the
WordPiece lookup. Lines holding a word of over 200 characters (the original's [UNK] limit, which
tensorflow-text counts in bytes) take the slower BasicTokenizer + WordpieceTokenizer path.

>>> tok = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world",
...                           "##s", ",", "!"])
>>> tok.tokenize_to_ids(["Hello, worlds!", ""])
[[5, 8, 6, 7, 9], []]
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
import unicodedata
from typing import Collection, Iterable, Sequence

import tensorflow as tf
import tensorflow_text as tf_text
# BertTokenizer's documented default splitter (whitespace, punctuation, CJK), used on its own.
from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MAX_CHARS_PER_WORD = 200  # the original's WordpieceTokenizer.max_input_chars_per_word
_MAX_WORD_BYTES = 4 * MAX_CHARS_PER_WORD  # no word of <= 200 characters has more UTF-8 bytes
_LONG_CHUNK = re.compile(r"\S{%d}" % (MAX_CHARS_PER_WORD + 1))


_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _is_control(char: str) -> bool:
    """The original's _clean_text drops these: category C* but tab/newline/return, NUL, U+FFFD."""
    return char in "\x00\ufffd" or (unicodedata.category(char)[0] == "C" and char not in "\t\n\r")


def _is_space(char: str) -> bool:
    """Mapped to a space: the original's _is_whitespace (space, tab, newline, return, Zs) and
    the line/paragraph separators that its whitespace split (str.split) splits on."""
    return char in " \t\n\r" or unicodedata.category(char) in ("Zs", "Zl", "Zp")


def _is_mark(char: str) -> bool:
    """Accent stripping drops these (category Mn) after NFD."""
    return unicodedata.category(char) == "Mn"


@functools.lru_cache(maxsize=None)
def _bmp_class(member) -> re.Pattern:
    """A regex class of the BMP characters for which `member` holds. (Python's re looks BMP
    classes up in a bitmap; astral ones, which are rare in text, go through _ASTRAL.)"""
    chars = "".join(chr(code) for code in range(0x10000)
                    if not 0xD800 <= code < 0xE000 and member(chr(code)))
    runs = []
    for _, group in itertools.groupby(enumerate(map(ord, chars)), lambda p: p[1] - p[0]):
        codes = [code for _, code in group]
        runs.append(re.escape(chr(codes[0])) +
                    (f"-{re.escape(chr(codes[-1]))}" if len(codes) > 1 else ""))
    return re.compile(f"[{''.join(runs)}]")


def _astral_clean(match: re.Match) -> str:
    char = match[0]
    return "" if _is_control(char) else " " if _is_space(char) else char


def _astral_strip(match: re.Match) -> str:
    return "" if _is_mark(match[0]) else match[0]


def normalize(text: str, lower_case: bool = True, strip_accents: bool = True) -> str:
    """The original's BasicTokenizer up to (not including) the punctuation split: control
    characters dropped, whitespace mapped to spaces, then lower-casing and accent stripping."""
    if not text.isprintable():  # printable: no control characters, no space but " "
        text = _bmp_class(_is_space).sub(" ", _bmp_class(_is_control).sub("", text))
        text = _ASTRAL.sub(_astral_clean, text)
    if lower_case:
        text = text.lower()
        if strip_accents and not text.isascii():
            text = _bmp_class(_is_mark).sub("", unicodedata.normalize("NFD", text))
            text = _ASTRAL.sub(_astral_strip, text)
    return text


def check_vocab(tokens: Collection[str], where: str) -> None:
    """Fails naming `where` when the vocabulary lacks one of BERT's special tokens or, given
    as its lines in order, holds a token twice (TensorFlow Text's tokenizers need each token
    once)."""
    missing = [t for t in SPECIAL_TOKENS if t not in tokens]
    if missing:
        raise ValueError(f"{where} lacks the special tokens {missing}; a BERT vocab.txt (or one "
                         "from pretrain_data/build_vocab.py) has them")
    first_line: dict[str, int] = {}
    for line, token in enumerate(tokens, 1):
        if token in first_line:
            raise ValueError(
                f"{where} holds the token {token!r} on lines {first_line[token]} and {line} "
                "(compared after stripping whitespace, as the original's load_vocab reads it); "
                "the original gives it the last line's id, TensorFlow Text's tokenizer refuses "
                "it: replace the earlier line with a token that occurs nowhere else (such as "
                "an unused [unusedN]) to keep every id")
        first_line[token] = line


def read_vocab(vocab_file: str) -> list[str]:
    """The tokens of a BERT vocab.txt, in id order: as the original's load_vocab, every line is
    one token, stripped (a blank line too, also at the end: it holds an id); the final newline
    ends the last line. The one reading of a vocabulary: its size is len() of this."""
    if not tf.io.gfile.exists(vocab_file):
        raise FileNotFoundError(f"vocab file {vocab_file} not found")
    with tf.io.gfile.GFile(vocab_file) as f:
        lines = f.read().split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline
    return [line.strip() for line in lines]  # as the original's load_vocab


def vocab_fingerprint(tokens: Sequence[str]) -> str:
    """A short hash of the tokens in id order: two vocabularies with the same fingerprint give
    every token the same id (line endings and the final newline do not count)."""
    return "sha256:" + hashlib.sha256("\n".join(tokens).encode("utf-8")).hexdigest()[:16]


class WordPieceTokenizer:
    """Text -> WordPiece ids exactly as the original's FullTokenizer.

    `vocab` is a vocab.txt path or the list of tokens. Words (after the punctuation split)
    longer than 200 characters become [UNK], as in the original."""

    def __init__(self, vocab: str | Sequence[str], do_lower_case: bool = True,
                 strip_accents: bool = True):
        self.tokens = read_vocab(vocab) if isinstance(vocab, str) else list(vocab)
        check_vocab(self.tokens, vocab if isinstance(vocab, str) else "the vocabulary")
        self.vocab = {token: i for i, token in enumerate(self.tokens)}
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents
        # Input is already normalised (normalize()): these only split and look up.
        fast = tf_text.FastBertTokenizer(self.tokens, token_out_type=tf.int64,
                                         unknown_token="[UNK]", max_bytes_per_word=_MAX_WORD_BYTES)
        split = BasicTokenizer(lower_case=False)
        wordpiece = tf_text.WordpieceTokenizer(
            tf.lookup.StaticVocabularyTable(
                tf.lookup.KeyValueTensorInitializer(
                    tf.constant(self.tokens), tf.range(len(self.tokens), dtype=tf.int64)),
                num_oov_buckets=1),
            token_out_type=tf.int64, unknown_token="[UNK]", max_bytes_per_word=_MAX_WORD_BYTES)

        def tokenize_long_words(lines: tf.Tensor) -> tf.RaggedTensor:
            words = split.tokenize(lines)
            # tf-text counts bytes, so a word over 200 characters is swapped for one with more
            # bytes than its limit, which it gives [UNK] as the original does.
            too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > MAX_CHARS_PER_WORD
            words = words.with_flat_values(
                tf.where(too_long, tf.constant("x" * (_MAX_WORD_BYTES + 1)), words.flat_values))
            return wordpiece.tokenize(words).merge_dims(-2, -1)

        spec = [tf.TensorSpec([None], tf.string)]
        self._split_words = tf.function(split.tokenize, input_signature=spec, autograph=False)
        self._tokenize = tf.function(fast.tokenize, input_signature=spec, autograph=False)
        self._tokenize_long_words = tf.function(tokenize_long_words, input_signature=spec,
                                                autograph=False)

    def normalize(self, text: str) -> str:
        """The original's normalisation (see the module function) with these settings."""
        return normalize(text, self.do_lower_case, self.strip_accents)

    def tokenize_to_ids(self, lines: Iterable[str]) -> list[list[int]]:
        """WordPiece ids of each line (a batch is much faster than one line at a time)."""
        lines = [self.normalize(line) for line in lines]
        long_words = [i for i, line in enumerate(lines) if _LONG_CHUNK.search(line)]
        ids = self._run(self._tokenize, lines)
        if long_words:
            for i, row in zip(long_words,
                              self._run(self._tokenize_long_words, [lines[i] for i in long_words])):
                ids[i] = row
        return ids

    def split_words(self, lines: Iterable[str]) -> list[list[str]]:
        """Each line's words as the original's BasicTokenizer.tokenize gives them: normalised,
        then split on whitespace, around punctuation and around CJK characters."""
        lines = [self.normalize(line) for line in lines]
        if not lines:
            return []
        ragged = self._split_words(tf.constant(lines, tf.string))
        words = [word.decode("utf-8") for word in ragged.flat_values.numpy().tolist()]
        splits = ragged.row_splits.numpy().tolist()
        return [words[begin:end] for begin, end in zip(splits, splits[1:])]

    @staticmethod
    def _run(tokenize, lines: list[str]) -> list[list[int]]:
        if not lines:
            return []
        ragged = tokenize(tf.constant(lines, tf.string))
        flat, splits = ragged.flat_values.numpy().tolist(), ragged.row_splits.numpy().tolist()
        return [flat[begin:end] for begin, end in zip(splits, splits[1:])]

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[i] for i in ids]
