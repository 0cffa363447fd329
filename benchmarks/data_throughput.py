"""Pretraining-data throughput: our TFRecord builder against the original's pure-Python way,
and the input pipeline against what one training step consumes.

Run from the repository root:

  python benchmarks/data_throughput.py            # 4 copies of the shipped sample corpus, 3 steps
  python benchmarks/data_throughput.py --corpus a.txt b.txt   # 4 copies of your text files
  python benchmarks/data_throughput.py --quick    # the shipped sample once, 1 training step

In one run on this machine:
  (a) pretrain_data/build_pretraining_dataset.build on the corpus with 1 and 2 processes:
      tokenize (tensorflow-text), pack, serialize and write, in tokens written per second;
  (b) the same packing done the original's way: a line at a time through tf-models-official's
      FullTokenizer (the original's pure-Python algorithm), the same ExampleBuilder, a
      tf.train.Example built and written per example;
  (c) electra_tf.data.pretraining_dataset over the TFRecords of (a) at batch 128, in examples
      per second, against the examples per second of one ELECTRA-Small training step
      (batch 128 x 128, float32) measured here with benchmarks/pretrain_throughput.py's code.
Tokens count every real token written ([CLS] and [SEP] included), as the builder's summary.
A benchmark, not a test: run it on an otherwise idle machine, as timings are noisy.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO_ROOT, os.path.join(REPO_ROOT, "benchmarks")]

import electra_tf  # noqa: F401,E402  (first: decides oneDNN before TensorFlow loads)
import tensorflow as tf  # noqa: E402
from official.nlp.tools import tokenization as reference  # noqa: E402

import pretrain_throughput  # noqa: E402
from electra_tf import data  # noqa: E402
from pretrain_data import build_pretraining_dataset as builder  # noqa: E402

SAMPLE_CORPUS = os.path.join(REPO_ROOT, "pretrain_data", "sample", "corpus", "enwiki_sample.txt")
VOCAB = os.path.join(REPO_ROOT, "pretrain_data", "sample", "vocab.txt")
SEQ_LENGTH = 128
BATCH = 128


def original_way(files: list[str], output_file: str, max_seq_length: int = SEQ_LENGTH,
                 rng: random.Random | None = None, vocab_file: str = VOCAB) -> tuple[int, float]:
    """The original builder's loop, pure Python: files in shuffled order, a line at a time
    through FullTokenizer (with ELECTRA's 200-character word limit) into the ExampleBuilder, a
    tf.train.Example built and written per example, all into one file. With the rng of our
    builder's job 0 (random.Random(f"{seed}-0")) it writes the same records as our builder
    with one process and one shard. Returns (tokens written, seconds)."""
    rng = rng or random.Random("0-0")
    tokenizer = reference.FullTokenizer(vocab_file, do_lower_case=True)
    tokenizer.wordpiece_tokenizer.max_input_chars_per_word = 200
    packer = builder.ExampleBuilder(max_seq_length, tokenizer.vocab["[CLS]"],
                                    tokenizer.vocab["[SEP]"], rng)
    writer = tf.io.TFRecordWriter(output_file)
    tokens = 0
    start = time.time()

    def write(example) -> int:
        first, second, _ = example
        features = packer.features(first, second)
        writer.write(tf.train.Example(features=tf.train.Features(feature={
            name: tf.train.Feature(int64_list=tf.train.Int64List(value=values))
            for name, values in features.items()})).SerializeToString())
        return sum(features["input_mask"])

    files = list(files)
    rng.shuffle(files)
    for path in files:
        with tf.io.gfile.GFile(path) as f:
            for line in f:
                line = line.strip()
                ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)) if line else None
                example = packer.add_line(ids)
                if example:
                    tokens += write(example)
        example = packer.add_line(None)
        if example:
            tokens += write(example)
    writer.close()
    return tokens, time.time() - start


def ours(corpus_dir: str, output_dir: str, processes: int) -> tuple[int, float]:
    summary = builder.build(corpus_dir, VOCAB, output_dir, SEQ_LENGTH, processes,
                            num_out_files=8, show_progress=False)
    return summary["tokens"], summary["seconds"]


def pipeline_examples_per_second(files: list[str], batches: int) -> float:
    ds = data.pretraining_dataset(files, BATCH, SEQ_LENGTH, is_training=True, seed=0)
    iterator = iter(ds)
    next(iterator)  # start-up: threads, first shuffle buffer fill
    start = time.time()
    for _ in range(batches):
        next(iterator)
    return batches * BATCH / (time.time() - start)


def training_examples_per_second(steps: int) -> float:
    config = pretrain_throughput.model_config("small", BATCH, SEQ_LENGTH, "float32")
    times, _ = pretrain_throughput.time_step(
        "electra_tf", config, pretrain_throughput.random_batch(BATCH, SEQ_LENGTH), steps)
    return BATCH / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", nargs="*", help="text files (default: the shipped sample corpus)")
    parser.add_argument("--quick", action="store_true", help="one copy of the corpus, 1 training step")
    parser.add_argument("--train_steps", type=int, default=3)
    parser.add_argument("--copies", type=int, default=4,
                        help="copies of each file, so that process start-up (each worker imports "
                             "TensorFlow) weighs as little as on a real corpus")
    args = parser.parse_args()
    files = args.corpus or [SAMPLE_CORPUS]
    missing = [path for path in files if not os.path.isfile(path)]
    if missing:
        parser.error(f"--corpus: no such file: {', '.join(missing)}")
    work = tempfile.mkdtemp(prefix="data_throughput_")
    try:
        corpus = os.path.join(work, "corpus")
        os.makedirs(corpus)
        copies = 1 if args.quick else args.copies
        for path in files:
            for copy in range(copies):
                shutil.copy(path, os.path.join(corpus, f"{copy}-{os.path.basename(path)}"))
        inputs = sorted(os.path.join(corpus, name) for name in os.listdir(corpus))
        megabytes = sum(os.path.getsize(p) for p in inputs) / 1e6
        print(f"corpus: {copies} copies of {', '.join(os.path.basename(p) for p in files)} "
              f"({megabytes:.1f} MB)", flush=True)
        tokens, seconds = original_way(inputs, os.path.join(work, "original.tfrecord"))
        rows = [("(b) original's way: FullTokenizer, pure Python", 1, tokens, seconds)]
        for processes in (1, 2):
            tokens, seconds = ours(corpus, os.path.join(work, f"ours{processes}"), processes)
            rows.append(("(a) build_pretraining_dataset (tensorflow-text)", processes, tokens,
                         seconds))
        baseline = rows[0][2] / rows[0][3]
        print("\n| builder | processes | tokens | seconds | tokens/s | per process vs (b) |")
        print("|---|---|---|---|---|---|")
        for name, processes, tokens, seconds in rows:
            rate = tokens / seconds
            print(f"| {name} | {processes} | {tokens:,} | {seconds:.2f} | {rate:,.0f} | "
                  f"{rate / processes / baseline:.1f}x |")

        shards = sorted(tf.io.gfile.glob(os.path.join(work, "ours1", "pretrain_data.*")))
        feed = pipeline_examples_per_second(shards, 20 if args.quick else 200)
        train = training_examples_per_second(1 if args.quick else args.train_steps)
        print("\n| input pipeline examples/s | ELECTRA-Small step examples/s | ratio |")
        print("|---|---|---|")
        print(f"| {feed:,.0f} | {train:.1f} | {feed / train:,.0f}x |")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
