"""Learns a WordPiece vocabulary from a corpus, for pretraining in a language BERT's vocabulary
does not cover.

  python pretrain_data/build_vocab.py --corpus_dir CORPUS --output_file DATA_DIR/vocab.txt \\
      [--vocab_size 30522] [--nodo_lower_case]

Reads the corpus as build_pretraining_dataset.py does (plain, .gz, .bz2 or .xz UTF-8 files),
normalises it exactly as the tokenizer will (the original's lower-casing and accent stripping),
splits it into words on whitespace, punctuation and CJK characters, and learns the WordPiece
vocabulary with tensorflow-text's learner (the algorithm of tensorflow_text.tools.wordpiece_vocab).
The file is BERT's vocab.txt format; by default in BERT's layout, [PAD]=0, [unused0..98],
[UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103, so ids match the released models' conventions.
Then: build_pretraining_dataset.py --vocab_file that file, and pretraining takes vocab_size
from it.
"""

from __future__ import annotations

import os
import sys
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

import command_line  # noqa: E402  (electra_tf, and TensorFlow, load after the flags are parsed)

FLAGS = flags.FLAGS
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def reserved_tokens(bert_layout: bool, extra: list[str]) -> list[str]:
    """The tokens that lead the vocabulary, in id order."""
    if bert_layout:
        tokens = ["[PAD]", *(f"[unused{i}]" for i in range(99)), "[UNK]", "[CLS]", "[SEP]",
                  "[MASK]"]
    else:
        tokens = list(SPECIAL_TOKENS)
    return tokens + [t for t in extra if t not in tokens]


def learn_vocab(files: list[str], vocab_size: int, do_lower_case: bool = True,
                do_strip_accents: bool = True, bert_layout: bool = True,
                extra_reserved: list[str] = (), min_count: int = 10,
                progress: Callable[[str], None] = lambda message: None) -> list[str]:
    """The learned vocabulary, reserved tokens first. `progress` is told what is happening: the
    counting pass over the corpus, then the learning, which takes most of the time."""
    import tensorflow as tf
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as bert_vocab

    from electra_tf.tokenization import normalize
    from pretrain_data.text_lines import read_lines

    def lines():
        for number, path in enumerate(files, 1):
            progress(f"counting words: file {number}/{len(files)}, {path}")
            for line in read_lines(path):
                if line:
                    yield normalize(line, do_lower_case, do_strip_accents)

    dataset = tf.data.Dataset.from_generator(
        lines, output_signature=tf.TensorSpec([], tf.string)).batch(1000)
    reserved = reserved_tokens(bert_layout, list(extra_reserved))
    if vocab_size <= len(reserved):
        raise ValueError(f"--vocab_size {vocab_size} leaves no room after the {len(reserved)} "
                         "reserved tokens")
    # bert_vocab_from_dataset's two steps, with a word between them. The text is normalised
    # already: the learner's splitter must not change it.
    splitter = bert_vocab.bert_tokenizer.BasicTokenizer(lower_case=False)
    word_counts = bert_vocab.learner.count_words(dataset.map(splitter.tokenize))
    progress(f"learning up to {vocab_size} tokens from {len(word_counts)} distinct words "
             "(the long part: a minute for a few MB of text on a small CPU)")
    vocab = bert_vocab.learner.learn(word_counts, vocab_size, reserved, lower_thresh=min_count)
    if len(vocab) <= len(reserved):
        raise ValueError("the corpus is too small to learn a vocabulary from: no word occurs "
                         f"{min_count} times (lower --min_count)")
    return vocab


def main(argv) -> None:
    import tensorflow as tf

    from electra_tf import files
    from pretrain_data.text_lines import UnreadableText, read_lines

    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    if not tf.io.gfile.isdir(FLAGS.corpus_dir):
        raise app.UsageError(f"--corpus_dir {FLAGS.corpus_dir} is not a directory")
    corpus = sorted(os.path.join(FLAGS.corpus_dir, f) for f in tf.io.gfile.listdir(FLAGS.corpus_dir)
                    if not tf.io.gfile.isdir(os.path.join(FLAGS.corpus_dir, f)))
    for path in corpus:  # fail before the long part, naming the file
        try:
            for _ in read_lines(path):
                pass
        except UnreadableText as e:
            raise app.UsageError(f"{path}: {e}; remove it from --corpus_dir") from None
    if tf.io.gfile.exists(FLAGS.output_file) and not FLAGS.overwrite:
        raise app.UsageError(f"--output_file {FLAGS.output_file} exists; pass --overwrite to "
                             "replace it")
    try:
        vocab = learn_vocab(corpus, FLAGS.vocab_size, FLAGS.do_lower_case, FLAGS.do_strip_accents,
                            FLAGS.bert_layout, FLAGS.reserved_tokens or [], FLAGS.min_count,
                            progress=lambda message: print(message, flush=True))
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    files.write_atomically(FLAGS.output_file, "".join(token + "\n" for token in vocab))
    print(f"wrote {len(vocab)} tokens to {FLAGS.output_file}", flush=True)


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The command's flags (and the original's dashed spellings), in flag_values (absl's global
    flags when run as a script; the tests' own, to run main in their process)."""
    flags.DEFINE_string("corpus_dir", None, "Directory of text files.", flag_values=flag_values)
    flags.DEFINE_string("output_file", None, "Where to write vocab.txt.", flag_values=flag_values)
    flags.DEFINE_integer("vocab_size", 30522, "Target size (the learner may return fewer).",
                         flag_values=flag_values)
    flags.DEFINE_bool("do_lower_case", True, "Lower-case the text (as the tokenizer will).",
                      flag_values=flag_values)
    flags.DEFINE_bool("do_strip_accents", True, "Strip accents (only when lower-casing).",
                      flag_values=flag_values)
    flags.DEFINE_bool("bert_layout", True, "BERT's layout: [PAD]=0, [unused0..98], [UNK]=100, "
                      "[CLS]=101, [SEP]=102, [MASK]=103; else the five at ids 0-4.",
                      flag_values=flag_values)
    flags.DEFINE_list("reserved_tokens", None, "More tokens to reserve after the special ones.",
                      flag_values=flag_values)
    flags.DEFINE_integer("min_count", 10, "Words rarer than this do not shape the vocabulary.",
                         flag_values=flag_values)
    flags.DEFINE_bool("overwrite", False, "Replace an existing --output_file.",
                      flag_values=flag_values)
    for name in ("corpus_dir", "output_file", "vocab_size", "do_lower_case", "do_strip_accents"):
        flags.DEFINE_alias(name.replace("_", "-"), name, flag_values=flag_values)
    flags.mark_flags_as_required(["corpus_dir", "output_file"], flag_values=flag_values)


if __name__ == "__main__":
    define_flags()
    command_line.run(main, "docs/data.md")
