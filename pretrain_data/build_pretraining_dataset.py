"""Writes text files out as the TFRecords ELECTRA pretrains on (the original's
build_pretraining_dataset.py, tokenized with tensorflow-text).

  python pretrain_data/build_pretraining_dataset.py --corpus_dir CORPUS --vocab_file vocab.txt \\
      --output_dir DATA_DIR/pretrain_tfrecords [--max_seq_length 128] [--num_processes 4]

Every file in --corpus_dir is read line by line; with --blanks_separate_docs (the default) a
blank line ends a document. Lines are packed into examples exactly as the original's
ExampleBuilder packs them (see ExampleBuilder) and written round-robin into
pretrain_data.tfrecord-{i}-of-{num_out_files}. Shards are written under a temporary name and
renamed when complete. The output is deterministic for a given --seed and file list.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import random
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Run as a script (also in the spawned workers), the repository root must be importable.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("corpus_dir", None, "Directory of pretraining text files.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocabulary (BERT's vocab.txt format).")
flags.DEFINE_string("output_dir", None, "Where to write the TFRecords.")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per example (512 for base and large).")
flags.DEFINE_integer("num_processes", 1, "Worker processes, each on its own files and shards.")
flags.DEFINE_bool("blanks_separate_docs", True, "Whether blank lines end a document.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the text.")
flags.DEFINE_bool("do_strip_accents", True, "Strip accents (only when lower-casing).")
flags.DEFINE_integer("num_out_files", 1000, "Number of output shards.")
flags.DEFINE_integer("seed", 0, "Seed of the packing's random choices.")
for _name in ("corpus_dir", "vocab_file", "output_dir", "max_seq_length", "num_processes",
              "blanks_separate_docs", "do_lower_case", "do_strip_accents", "num_out_files"):
    flags.DEFINE_alias(_name.replace("_", "-"), _name)  # the original's dashed spellings

LINES_PER_BATCH = 2000  # lines tokenized together


@dataclasses.dataclass
class Stats:
    files: int = 0
    docs: int = 0
    examples: int = 0
    tokens: int = 0  # real tokens written, [CLS]/[SEP] included
    single_segment: int = 0
    short: int = 0  # examples built to a random target length below max_seq_length

    def add(self, other: Stats) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


class ExampleBuilder:
    """The original's ExampleBuilder: accumulates tokenized lines into packed examples.

    Lines accumulate until the target length is reached (or a document ends). Then 10% of the
    time the example is a single segment; otherwise sentences fill the first segment up to
    (target - 3) // 2 tokens, a sentence that would overflow it still going in half the time
    while the second segment is empty, and the rest form the second segment. Segment A is cut
    to max - 2 tokens, B to max - len(A) - 3. After each example, with probability 5% the next
    target length is randint(5, max), else max."""

    def __init__(self, max_length: int, cls_id: int, sep_id: int, rng: random.Random):
        self.max_length = max_length
        self.cls_id, self.sep_id = cls_id, sep_id
        self.rng = rng
        self.sentences: list[list[int]] = []
        self.length = 0
        self.target_length = max_length

    def add_line(self, token_ids: list[int] | None):
        """Adds a tokenized line; None is a blank line. Returns a finished example or None."""
        if token_ids is None:
            if self.length:
                return self._create_example()
            token_ids = []  # before any text, the original keeps a blank line as an empty sentence
        self.sentences.append(token_ids)
        self.length += len(token_ids)
        if self.length >= self.target_length:
            return self._create_example()
        return None

    def _create_example(self):
        if self.rng.random() < 0.1:
            first_target = 100000  # one segment, as in classification tasks
        else:
            first_target = (self.target_length - 3) // 2  # room for [CLS] A [SEP] B [SEP]
        first: list[int] = []
        second: list[int] = []
        for sentence in self.sentences:
            if (not first or len(first) + len(sentence) < first_target or
                    (not second and len(first) < first_target and self.rng.random() < 0.5)):
                first += sentence
            else:
                second += sentence
        first = first[:self.max_length - 2]
        second = second[:max(0, self.max_length - len(first) - 3)]
        short = self.target_length < self.max_length
        self.sentences, self.length = [], 0
        if self.rng.random() < 0.05:
            self.target_length = self.rng.randint(5, self.max_length)
        else:
            self.target_length = self.max_length
        return first, second, short

    def features(self, first: list[int], second: list[int]) -> dict[str, list[int]]:
        input_ids = [self.cls_id] + first + [self.sep_id]
        segment_ids = [0] * len(input_ids)
        if second:
            input_ids += second + [self.sep_id]
            segment_ids += [1] * (len(second) + 1)
        pad = self.max_length - len(input_ids)
        return {"input_ids": input_ids + [0] * pad,
                "input_mask": [1] * len(input_ids) + [0] * pad,
                "segment_ids": segment_ids + [0] * pad}


def shard_name(index: int, num_out_files: int) -> str:
    return f"pretrain_data.tfrecord-{index}-of-{num_out_files}"


def write_examples(job_id: int, num_jobs: int, files: list[str], args: dict) -> dict:
    """One worker: the files with index % num_jobs == job_id into the shards likewise."""
    import tensorflow as tf

    from electra_tf.tokenization import WordPieceTokenizer

    tokenizer = WordPieceTokenizer(args["vocab_file"], args["do_lower_case"],
                                   args["do_strip_accents"])
    rng = random.Random(f"{args['seed']}-{job_id}")
    builder = ExampleBuilder(args["max_seq_length"], tokenizer.vocab["[CLS]"],
                             tokenizer.vocab["[SEP]"], rng)
    shards = [i for i in range(args["num_out_files"]) if i % num_jobs == job_id]
    final = [os.path.join(args["output_dir"], shard_name(i, args["num_out_files"]))
             for i in shards]
    temporary = [f"{path}.incomplete" for path in final]
    writers = [tf.io.TFRecordWriter(path) for path in temporary]
    stats = Stats()

    def emit(example) -> None:
        first, second, short = example
        features = builder.features(first, second)
        record = tf.train.Example(features=tf.train.Features(feature={
            name: tf.train.Feature(int64_list=tf.train.Int64List(value=values))
            for name, values in features.items()}))
        writers[stats.examples % len(writers)].write(record.SerializeToString())
        stats.examples += 1
        stats.tokens += sum(features["input_mask"])
        stats.single_segment += not second
        stats.short += short

    mine = [f for i, f in enumerate(files) if i % num_jobs == job_id]
    rng.shuffle(mine)
    start = time.time()
    for file_no, path in enumerate(mine):
        with tf.io.gfile.GFile(path) as f:
            lines = [line.strip() for line in f]
        stats.files += 1
        stats.docs += 1 + sum(1 for i, line in enumerate(lines)
                              if not line and i and lines[i - 1])
        for begin in range(0, len(lines), LINES_PER_BATCH):
            batch = [line for line in lines[begin:begin + LINES_PER_BATCH]
                     if line or args["blanks_separate_docs"]]
            for line, ids in zip(batch, tokenizer.tokenize_to_ids(batch)):
                example = builder.add_line(ids if line else None)
                if example:
                    emit(example)
        example = builder.add_line(None)  # a file ends a document
        if example:
            emit(example)
        elapsed = time.time() - start
        print(f"job {job_id}: {file_no + 1}/{len(mine)} files, {stats.docs} docs, "
              f"{stats.examples} examples, {stats.tokens / max(elapsed, 1e-9):.0f} tokens/s",
              flush=True)
    for writer, tmp, path in zip(writers, temporary, final):
        writer.close()
        tf.io.gfile.rename(tmp, path, overwrite=True)
    return dataclasses.asdict(stats)


def build(corpus_dir: str, vocab_file: str, output_dir: str, max_seq_length: int = 128,
          num_processes: int = 1, blanks_separate_docs: bool = True, do_lower_case: bool = True,
          do_strip_accents: bool = True, num_out_files: int = 1000, seed: int = 0) -> dict:
    """Builds the TFRecords; returns (and writes to output_dir/build_summary.json) the summary."""
    import tensorflow as tf

    if not tf.io.gfile.isdir(corpus_dir):
        raise ValueError(f"--corpus_dir {corpus_dir} is not a directory")
    files = sorted(os.path.join(corpus_dir, f) for f in tf.io.gfile.listdir(corpus_dir)
                   if not tf.io.gfile.isdir(os.path.join(corpus_dir, f)))
    if not files:
        raise ValueError(f"--corpus_dir {corpus_dir} holds no files")
    if num_out_files < num_processes:
        raise ValueError(f"--num_out_files {num_out_files} must be at least --num_processes "
                         f"{num_processes}")
    tf.io.gfile.makedirs(output_dir)
    args = dict(vocab_file=vocab_file, output_dir=output_dir, max_seq_length=max_seq_length,
                blanks_separate_docs=blanks_separate_docs, do_lower_case=do_lower_case,
                do_strip_accents=do_strip_accents, num_out_files=num_out_files, seed=seed)
    start = time.time()
    if num_processes == 1:
        results = [write_examples(0, 1, files, args)]
    else:
        with multiprocessing.get_context("spawn").Pool(num_processes) as pool:
            results = pool.starmap(write_examples,
                                   [(j, num_processes, files, args) for j in range(num_processes)])
    total = Stats()
    for result in results:
        total.add(Stats(**result))
    if total.examples == 0:
        raise ValueError(f"--corpus_dir {corpus_dir}: the files hold no text")
    elapsed = time.time() - start
    summary = {**dataclasses.asdict(total), "seconds": round(elapsed, 2),
               "tokens_per_second": round(total.tokens / elapsed),
               "single_segment_share": total.single_segment / total.examples,
               "short_share": total.short / total.examples,
               "padding_fraction": 1 - total.tokens / (total.examples * max_seq_length),
               "max_seq_length": max_seq_length, "num_out_files": num_out_files,
               "vocab_file": vocab_file, "seed": seed}
    with tf.io.gfile.GFile(os.path.join(output_dir, "build_summary.json"), "w") as f:
        f.write(json.dumps(summary, indent=2))
    return summary


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    for name in ("corpus_dir", "vocab_file", "output_dir"):
        if not getattr(FLAGS, name):
            raise app.UsageError(f"--{name} is required")
    try:
        summary = build(FLAGS.corpus_dir, FLAGS.vocab_file, FLAGS.output_dir,
                        FLAGS.max_seq_length, FLAGS.num_processes, FLAGS.blanks_separate_docs,
                        FLAGS.do_lower_case, FLAGS.do_strip_accents, FLAGS.num_out_files,
                        FLAGS.seed)
    except (ValueError, FileNotFoundError) as e:
        raise app.UsageError(str(e)) from None
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    app.run(main)
