"""Writes text out as the TFRecords ELECTRA pretrains on (the original's
build_pretraining_dataset.py, tokenized with tensorflow-text).

  python pretrain_data/build_pretraining_dataset.py --corpus_dir CORPUS --vocab_file vocab.txt \\
      --output_dir DATA_DIR/pretrain_tfrecords [--max_seq_length 128] [--num_processes 4]

Every file in --corpus_dir (plain, .gz, .bz2 or .xz; UTF-8) is read line by line; with
--blanks_separate_docs (the default) a blank line ends a document, and the end of a file always
does. Instead of a directory, --tfds_name reads the text feature of a tensorflow-datasets
dataset already prepared in --tfds_data_dir (one document per example; nothing is downloaded).

Lines are packed into examples exactly as the original's ExampleBuilder packs them (see
ExampleBuilder) and written round-robin into pretrain_data.tfrecord-{i}-of-{num_out_files}.
Worker j of --num_processes takes files j, j + n, ... and shards likewise. The output is
deterministic for a given --seed, --num_processes and input. Shards are written under a
temporary name and renamed only when every worker has finished, so an interrupted or failed
run never leaves a shard that looks complete. A summary is printed and written to
build_summary.json next to the shards.
"""

from __future__ import annotations

import bz2
import concurrent.futures
import dataclasses
import gzip
import itertools
import json
import lzma
import multiprocessing
import os
import random
import sys
import tarfile
import threading
import time
from typing import Iterator

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Run as a script (also in the spawned workers), the repository root must be importable.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import electra_tf  # noqa: F401,E402  (first: decides oneDNN before TensorFlow loads)
from absl import app, flags, logging  # noqa: E402

FLAGS = flags.FLAGS
SHARD_PREFIX = "pretrain_data.tfrecord"
LINES_PER_BATCH = 4000  # lines tokenized in one call
_DECOMPRESS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def define_flags(corpus: bool = True) -> None:
    """The original's flags (and their dashed spellings) plus ours. The OpenWebText script
    takes --data_dir instead of the corpus, vocab and output flags."""
    if corpus:
        flags.DEFINE_string("corpus_dir", None, "Directory of pretraining text files.")
        flags.DEFINE_string("vocab_file", None, "WordPiece vocabulary (BERT's vocab.txt format).")
        flags.DEFINE_string("output_dir", None, "Where to write the TFRecords.")
        flags.DEFINE_bool("blanks_separate_docs", True, "Whether blank lines end a document.")
        flags.DEFINE_string("tfds_name", None, "Read the text of this tensorflow-datasets "
                            "dataset (e.g. wikipedia/20230601.en) instead of --corpus_dir.")
        flags.DEFINE_string("tfds_data_dir", None, "Where that dataset is prepared.")
        flags.DEFINE_string("tfds_split", "train", "Its split.")
        flags.DEFINE_string("tfds_text_key", "text", "Its text feature.")
    flags.DEFINE_integer("max_seq_length", 128, "Tokens per example (512 for base and large).")
    flags.DEFINE_integer("num_processes", 1, "Worker processes, each on its own files and shards.")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case the text.")
    flags.DEFINE_bool("do_strip_accents", True, "Strip accents (only when lower-casing).")
    flags.DEFINE_integer("num_out_files", 1000, "Number of output shards.")
    flags.DEFINE_integer("seed", 0, "Seed of the packing's random choices.")
    flags.DEFINE_bool("strict", False, "Fail on an unreadable or non-UTF-8 file instead of "
                      "skipping it with a warning.")
    for name in ("corpus_dir", "vocab_file", "output_dir", "max_seq_length", "num_processes",
                 "blanks_separate_docs", "do_lower_case", "do_strip_accents", "num_out_files",
                 "data_dir"):
        if name in FLAGS and name != name.replace("_", "-"):
            flags.DEFINE_alias(name.replace("_", "-"), name)  # the original's spellings


@dataclasses.dataclass
class Stats:
    files: int = 0
    lines: int = 0  # non-blank lines read
    docs: int = 0  # documents holding text
    examples: int = 0
    tokens: int = 0  # real tokens written, [CLS]/[SEP] included
    single_segment: int = 0
    short: int = 0  # examples built to a random target length below max_seq_length
    input_bytes: int = 0  # of the files done (compressed size)

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
    return f"{SHARD_PREFIX}-{index}-of-{num_out_files}"


def read_lines(path: str) -> list[str]:
    """The stripped lines of a UTF-8 text file, decompressed by its extension. Lines end at
    "\\n" only, as the original's tf.io.gfile iteration. Raises OSError or UnicodeDecodeError."""
    import tensorflow as tf

    try:
        with tf.io.gfile.GFile(path, "rb") as raw:
            opener = _DECOMPRESS.get(os.path.splitext(path)[1].lower())
            data = opener(raw).read() if opener else raw.read()
    except (tf.errors.OpError, EOFError, lzma.LZMAError) as e:  # bz2/gzip raise OSError
        raise OSError(str(e)) from e
    lines = data.decode("utf-8").split("\n")
    if lines[-1] == "":
        lines.pop()  # a final newline ends the last line rather than starting one
    return [line.strip() for line in lines]


def openwebtext_documents(path: str) -> Iterator[tuple[str, list[str]]]:
    """(name, lines) of each document of an OpenWebText archive: a tar (of any compression)
    whose members are text files, themselves plain or .xz."""
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as raw, tarfile.open(fileobj=raw, mode="r:*") as archive:
        for member in archive:
            if not member.isfile():
                continue
            data = archive.extractfile(member).read()
            if member.name.endswith(".xz"):
                data = lzma.decompress(data)
            lines = data.decode("utf-8").split("\n")
            yield f"{path}:{member.name}", [line.strip() for line in lines if line.strip()]


def _counters_view(counters, job_id: int):
    """This job's slice of the shared progress counters (bytes, lines, docs, examples, tokens)."""
    return lambda stats: counters.__setitem__(
        slice(5 * job_id, 5 * job_id + 5),
        [stats.input_bytes, stats.lines, stats.docs, stats.examples, stats.tokens])


_COUNTERS = None  # set in each worker by the pool initializer


def _init_worker(counters) -> None:
    global _COUNTERS
    _COUNTERS = counters


def _units(source: dict, mine: list[str], args: dict, rng: random.Random, stats: Stats,
           skipped: list[str]) -> Iterator[list[str]]:
    """The line lists this job feeds the builder, each ending a document."""
    import tensorflow as tf

    if source["kind"] == "tfds":
        import tensorflow_datasets as tfds
        ds = tfds.builder(source["name"], data_dir=source["data_dir"]).as_dataset(
            split=source["split"], shuffle_files=False)
        for example in ds.shard(args["num_jobs"], args["job_id"]).as_numpy_iterator():
            lines = example[source["text_key"]].decode("utf-8").split("\n")
            yield [line.strip() for line in lines if line.strip()]
        return
    for path in mine:
        size = tf.io.gfile.stat(path).length
        try:
            if source["kind"] == "openwebtext":
                documents = [lines for _, lines in openwebtext_documents(path)]
                rng.shuffle(documents)  # the original shuffles each archive's documents
                yield from documents
            else:
                yield read_lines(path)
        except (OSError, UnicodeDecodeError, tarfile.TarError, lzma.LZMAError) as e:
            reason = (f"not UTF-8 ({e.reason} at byte {e.start})"
                      if isinstance(e, UnicodeDecodeError) else str(e))
            if args["strict"]:
                raise ValueError(f"{path}: {reason} (--nostrict skips such files)") from None
            logging.warning("skipping %s: %s", path, reason)
            skipped.append(path)
        stats.files += 1
        stats.input_bytes += size


def write_examples(job_id: int, num_jobs: int, source: dict, args: dict) -> dict:
    """One worker: its inputs (index % num_jobs == job_id) into its shards (likewise), under
    temporary names. Returns its Stats, skipped files and temporary -> final shard names."""
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
    stats, skipped = Stats(), []
    report = _counters_view(_COUNTERS, job_id) if _COUNTERS is not None else lambda s: None
    # One tf.train.Example whose three lists are overwritten for each example (faster than
    # building one per example).
    example_proto = tf.train.Example()
    feature_values = {name: example_proto.features.feature[name].int64_list.value
                      for name in ("input_ids", "input_mask", "segment_ids")}

    def emit(example) -> None:
        first, second, short = example
        for name, values in builder.features(first, second).items():
            feature_values[name][:] = values
        # deterministic: map entries in key order, the same bytes in every process
        writers[stats.examples % len(writers)].write(
            example_proto.SerializeToString(deterministic=True))
        stats.examples += 1
        stats.tokens += len(first) + len(second) + (3 if second else 2)
        stats.single_segment += not second
        stats.short += short

    mine = [f for i, f in enumerate(source.get("files", [])) if i % num_jobs == job_id]
    rng.shuffle(mine)  # as the original
    units = _units(source, mine, dict(args, job_id=job_id, num_jobs=num_jobs), rng, stats,
                   skipped)
    # Blank lines and unit ends both end the current document ("").
    stream = (line for lines in units for line in itertools.chain(
        (line for line in lines if line or args["blanks_separate_docs"]), [""]))
    batches = iter(lambda: list(itertools.islice(stream, LINES_PER_BATCH)), [])
    in_doc = False
    # Tokenization (TF ops, which release the GIL) of the next batch overlaps the packing of
    # this one.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        def tokenize(batch):
            return batch, pool.submit(tokenizer.tokenize_to_ids, [line for line in batch if line])

        pending = tokenize(next(batches, []))
        try:
            while pending[0]:
                batch, ids = pending[0], iter(pending[1].result())
                pending = tokenize(next(batches, []))
                for line in batch:
                    example = builder.add_line(next(ids) if line else None)
                    stats.docs += bool(line) and not in_doc
                    in_doc = bool(line)
                    if example:
                        emit(example)
                stats.lines += sum(1 for line in batch if line)
                report(stats)
        finally:
            for writer in writers:
                writer.close()
    return {"stats": dataclasses.asdict(stats), "skipped": skipped,
            "shards": dict(zip(temporary, final))}


def _progress(counters, total_bytes: int | None, stop: threading.Event) -> None:
    """Prints progress until `stop`: a tqdm bar over input bytes with lines, documents,
    examples and tokens/s."""
    from tqdm import tqdm

    start = time.time()
    with tqdm(total=total_bytes, unit="B", unit_scale=True, desc="building", mininterval=1,
              file=sys.stdout, dynamic_ncols=True) as bar:
        while True:
            stopped = stop.wait(1.0)
            values = list(counters)
            done, lines, docs, examples, tokens = (sum(values[k::5]) for k in range(5))
            bar.update(done - bar.n)
            bar.set_postfix_str(f"{lines:,} lines, {docs:,} docs, {examples:,} examples, "
                                f"{tokens / max(time.time() - start, 1e-9):,.0f} tokens/s")
            if stopped:
                return


def _remove(paths) -> None:
    import tensorflow as tf
    for path in paths:
        if tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)


def build(corpus_dir: str | None, vocab_file: str, output_dir: str, max_seq_length: int = 128,
          num_processes: int = 1, blanks_separate_docs: bool = True, do_lower_case: bool = True,
          do_strip_accents: bool = True, num_out_files: int = 1000, seed: int = 0,
          strict: bool = False, source: dict | None = None, show_progress: bool = True) -> dict:
    """Builds the TFRecords; returns (and writes to output_dir/build_summary.json) the summary.

    `source` is {"kind": "files"|"openwebtext", "files": [...]} or {"kind": "tfds", "name",
    "data_dir", "split", "text_key"}; by default the files of `corpus_dir`."""
    import tensorflow as tf

    from electra_tf import tokenization

    tokenization.check_vocab(tokenization.read_vocab(vocab_file), vocab_file)  # before any worker
    if source is None:
        if not corpus_dir or not tf.io.gfile.isdir(corpus_dir):
            raise ValueError(f"--corpus_dir {corpus_dir} is not a directory")
        files = sorted(os.path.join(corpus_dir, f) for f in tf.io.gfile.listdir(corpus_dir)
                       if not tf.io.gfile.isdir(os.path.join(corpus_dir, f)))
        if not files:
            raise ValueError(f"--corpus_dir {corpus_dir} holds no files")
        source = {"kind": "files", "files": files}
    if max_seq_length < 5:
        raise ValueError(f"--max_seq_length {max_seq_length} must be at least 5")
    if num_processes < 1 or num_out_files < num_processes:
        raise ValueError(f"--num_out_files {num_out_files} must be at least --num_processes "
                         f"{num_processes}, which must be at least 1")
    tf.io.gfile.makedirs(output_dir)
    ours = {shard_name(i, num_out_files) for i in range(num_out_files)}
    foreign = sorted(f for f in tf.io.gfile.listdir(output_dir)
                     if f.startswith(SHARD_PREFIX) and f not in ours
                     and not f.endswith(".incomplete"))
    if foreign:
        raise ValueError(f"--output_dir {output_dir} already holds {len(foreign)} other shards "
                         f"(e.g. {foreign[0]}) that pretraining would read with these; remove "
                         "them or choose another --output_dir")
    args = dict(vocab_file=vocab_file, output_dir=output_dir, max_seq_length=max_seq_length,
                blanks_separate_docs=blanks_separate_docs, do_lower_case=do_lower_case,
                do_strip_accents=do_strip_accents, num_out_files=num_out_files, seed=seed,
                strict=strict)
    total_bytes = (sum(tf.io.gfile.stat(f).length for f in source["files"])
                   if "files" in source else None)
    counters = multiprocessing.get_context("spawn").Array("q", 5 * num_processes, lock=False)
    stop = threading.Event()
    progress = threading.Thread(target=_progress, args=(counters, total_bytes, stop), daemon=True)
    if show_progress:
        progress.start()
    start = time.time()
    results = []
    try:
        if num_processes == 1:
            _init_worker(counters)
            try:
                results = [write_examples(0, 1, source, args)]
            finally:
                _init_worker(None)
        else:
            # A worker that dies (killed, out of memory) fails the build (BrokenProcessPool)
            # instead of hanging it, as multiprocessing.Pool would.
            with concurrent.futures.ProcessPoolExecutor(
                    num_processes, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_init_worker, initargs=(counters,)) as pool:
                jobs = [pool.submit(write_examples, j, num_processes, source, args)
                        for j in range(num_processes)]
                results = [job.result() for job in jobs]
    except BaseException:
        _remove(os.path.join(output_dir, f"{name}.incomplete") for name in ours)
        raise
    finally:
        stop.set()
        if show_progress:
            progress.join()
    total, skipped = Stats(), []
    for result in results:
        total.add(Stats(**result["stats"]))
        skipped += result["skipped"]
    shards = {tmp: final for result in results for tmp, final in result["shards"].items()}
    if total.examples == 0:
        _remove(shards)
        where = source.get("name") or corpus_dir or "the input"
        raise ValueError(f"{where}: no text to build examples from"
                         + (f" ({len(skipped)} files skipped)" if skipped else ""))
    for tmp, final in shards.items():
        tf.io.gfile.rename(tmp, final, overwrite=True)
    elapsed = time.time() - start
    summary = {**dataclasses.asdict(total), "skipped_files": skipped,
               "seconds": round(elapsed, 2), "tokens_per_second": round(total.tokens / elapsed),
               "single_segment_share": total.single_segment / total.examples,
               "short_share": total.short / total.examples,
               "padding_fraction": 1 - total.tokens / (total.examples * max_seq_length),
               "max_seq_length": max_seq_length, "num_out_files": num_out_files,
               "num_processes": num_processes, "vocab_file": vocab_file, "seed": seed,
               "do_lower_case": do_lower_case, "do_strip_accents": do_strip_accents}
    with tf.io.gfile.GFile(os.path.join(output_dir, "build_summary.json"), "w") as f:
        f.write(json.dumps(summary, indent=2))
    if skipped:
        logging.warning("skipped %d unreadable or non-UTF-8 files (listed in "
                        "build_summary.json); --strict fails on them instead", len(skipped))
    return summary


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    for name in ("vocab_file", "output_dir"):
        if not getattr(FLAGS, name):
            raise app.UsageError(f"--{name} is required")
    if bool(FLAGS.corpus_dir) == bool(FLAGS.tfds_name):
        raise app.UsageError("give either --corpus_dir or --tfds_name")
    source = None
    if FLAGS.tfds_name:
        source = {"kind": "tfds", "name": FLAGS.tfds_name, "data_dir": FLAGS.tfds_data_dir,
                  "split": FLAGS.tfds_split, "text_key": FLAGS.tfds_text_key}
        check_tfds(source)
    try:
        summary = build(FLAGS.corpus_dir, FLAGS.vocab_file, FLAGS.output_dir,
                        FLAGS.max_seq_length, FLAGS.num_processes, FLAGS.blanks_separate_docs,
                        FLAGS.do_lower_case, FLAGS.do_strip_accents, FLAGS.num_out_files,
                        FLAGS.seed, FLAGS.strict, source)
    except (ValueError, FileNotFoundError) as e:
        raise app.UsageError(str(e)) from None
    print(json.dumps(summary, indent=2))


def check_tfds(source: dict) -> None:
    """Fails unless the dataset is prepared locally with that split and text feature: the
    builder never downloads."""
    import tensorflow_datasets as tfds

    try:
        info = tfds.builder(source["name"], data_dir=source["data_dir"]).info
    except Exception as e:  # tfds raises many kinds for a missing dataset
        raise app.UsageError(f"--tfds_name {source['name']}: {e}") from None
    if not info.splits:
        raise app.UsageError(f"--tfds_name {source['name']} is not prepared in --tfds_data_dir "
                             f"{source['data_dir']}; prepare it there first (e.g. tfds build)")
    if source["split"] not in info.splits:
        raise app.UsageError(f"--tfds_split {source['split']}: {source['name']} has "
                             f"{sorted(info.splits)}")
    if source["text_key"] not in info.features:
        raise app.UsageError(f"--tfds_text_key {source['text_key']}: {source['name']} has "
                             f"{sorted(info.features)}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
