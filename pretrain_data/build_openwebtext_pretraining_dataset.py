"""Builds pretraining TFRecords from the OpenWebText corpus (the original's
build_openwebtext_pretraining_dataset.py), with the same tokenizer and packing as
build_pretraining_dataset.py.

  python pretrain_data/build_openwebtext_pretraining_dataset.py --data_dir DATA_DIR \\
      [--max_seq_length 128] [--num_processes 8]

Reads DATA_DIR/vocab.txt and every archive in DATA_DIR/openwebtext/ (the release's
urlsf_subset*_data.xz files: tar archives, of any compression, of documents that are plain
text or .xz), writes DATA_DIR/pretrain_tfrecords/. Each document is one document of the
packing (blank lines do not split it), documents of an archive are shuffled with --seed, and
archives are read in memory rather than extracted to a temporary directory.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import electra_tf  # noqa: F401,E402  (first: decides oneDNN before TensorFlow loads)
from absl import app, flags  # noqa: E402

import command_line  # noqa: E402
from pretrain_data import build_pretraining_dataset as builder  # noqa: E402

FLAGS = flags.FLAGS


def main(argv) -> None:
    import tensorflow as tf

    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    owt_dir = os.path.join(FLAGS.data_dir, "openwebtext")
    if not tf.io.gfile.isdir(owt_dir):
        raise app.UsageError(f"--data_dir: {owt_dir} does not exist; extract the OpenWebText "
                             "release (openwebtext.tar.xz) into --data_dir")
    archives = sorted(os.path.join(owt_dir, name) for name in tf.io.gfile.listdir(owt_dir)
                      if not tf.io.gfile.isdir(os.path.join(owt_dir, name)))
    if not archives:
        raise app.UsageError(f"--data_dir: {owt_dir} holds no archives")
    try:
        summary = builder.build(
            None, os.path.join(FLAGS.data_dir, "vocab.txt"),
            os.path.join(FLAGS.data_dir, "pretrain_tfrecords"), FLAGS.max_seq_length,
            FLAGS.num_processes, blanks_separate_docs=False, do_lower_case=FLAGS.do_lower_case,
            do_strip_accents=FLAGS.do_strip_accents, num_out_files=FLAGS.num_out_files,
            seed=FLAGS.seed, strict=FLAGS.strict,
            source={"kind": "openwebtext", "files": archives},
            max_line_chars=FLAGS.max_line_chars, overwrite=FLAGS.overwrite)
    except (ValueError, FileNotFoundError) as e:
        raise app.UsageError(str(e)) from None
    print(json.dumps(summary, indent=2))


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """--data_dir and the builder's flags other than its corpus, vocab and output ones, in
    flag_values (absl's global flags when run as a script)."""
    flags.DEFINE_string("data_dir", None, "Holds vocab.txt and openwebtext/; the TFRecords go "
                        "to its pretrain_tfrecords/.", flag_values=flag_values)
    flags.mark_flag_as_required("data_dir", flag_values=flag_values)
    builder.define_flags(corpus=False, flag_values=flag_values)


if __name__ == "__main__":
    define_flags()
    command_line.run(main, "docs/data.md")
