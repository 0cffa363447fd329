"""Writes text out as the TFRecords ELECTRA pretrains on (the original's
build_pretraining_dataset.py, tokenized with tensorflow-text).

  python pretrain_data/build_pretraining_dataset.py --corpus_dir CORPUS --vocab_file vocab.txt \\
      --output_dir DATA_DIR/pretrain_tfrecords [--max_seq_length 128] [--num_processes 4]

Every file in --corpus_dir (plain, .gz, .bz2 or .xz; UTF-8) is read line by line; with
--blanks_separate_docs (the default) a blank line ends a document, and the end of a file always
does. A line longer than --max_line_chars is split at whitespace into pieces of about a sentence,
since the packing keeps at most one example of a line. Instead of a directory, --tfds_name reads
the text feature of a tensorflow-datasets dataset already prepared in --tfds_data_dir (one
document per example; nothing is downloaded).

Lines are packed into examples exactly as the original's ExampleBuilder packs them (see
ExampleBuilder) and written round-robin into pretrain_data.tfrecord-{i}-of-{num_out_files}.
Worker j of --num_processes takes files j, j + n, ... and shards likewise. The output is
deterministic for a given --seed, --num_processes and input. Shards are written into
--output_dir/incomplete/, where no input pattern finds them, and moved into --output_dir only
when every worker has finished; workers end with the process that started them, and the next
build removes what an interrupted one left. The shards of an earlier build in --output_dir are
replaced only with --overwrite. A summary is printed and written to build_summary.json next to
the shards; it is moved there last, and the next build finishes a move that a crash interrupted.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import multiprocessing
import multiprocessing.connection
import os
import random
import signal
import sys
import threading
import time
import traceback
from typing import Callable, Iterator

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Run as a script (also in the spawned workers), the repository root must be importable.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import electra_tf  # noqa: F401,E402  (first: decides oneDNN before TensorFlow loads)
from absl import app, flags, logging  # noqa: E402

import command_line  # noqa: E402
from pretrain_data.shard_files import (INCOMPLETE_DIR, discard, prepare_output_dir,  # noqa: E402
                                       publish, shard_name)
from pretrain_data.text_lines import (MAX_LINE_CHARS, PIECE_CHARS,  # noqa: E402
                                      UnreadableText, openwebtext_documents, read_lines,
                                      stripped_lines)

FLAGS = flags.FLAGS
LINES_PER_BATCH = 4000  # lines tokenized in one call, or fewer when they hold
CHARS_PER_BATCH = 1 << 21  # this many characters (the batch's memory stays bounded)
# The default shard count scales with the input: one shard per this many bytes of input files
# (a few thousand 128-token examples of plain text), up to the original's 1000 shards.
BYTES_PER_OUT_FILE = 4 << 20
MAX_DEFAULT_OUT_FILES = 1000


def define_flags(corpus: bool = True, flag_values: flags.FlagValues = FLAGS) -> None:
    """The original's flags (and their dashed spellings) plus ours, in flag_values (absl's
    global flags when run as a script; the tests' own, to run main in their process). The
    OpenWebText script takes --data_dir instead of the corpus, vocab and output flags."""
    if corpus:
        flags.DEFINE_string("corpus_dir", None, "Directory of pretraining text files.",
                            flag_values=flag_values)
        flags.DEFINE_string("vocab_file", None, "WordPiece vocabulary (BERT's vocab.txt format).",
                            flag_values=flag_values)
        flags.DEFINE_string("output_dir", None, "Where to write the TFRecords.",
                            flag_values=flag_values)
        flags.DEFINE_bool("blanks_separate_docs", True, "Whether blank lines end a document.",
                          flag_values=flag_values)
        flags.DEFINE_string("tfds_name", None, "Read the text of this tensorflow-datasets "
                            "dataset (e.g. wikipedia/20230601.en) instead of --corpus_dir.",
                            flag_values=flag_values)
        flags.DEFINE_string("tfds_data_dir", None, "Where that dataset is prepared.",
                            flag_values=flag_values)
        flags.DEFINE_string("tfds_split", "train", "Its split.", flag_values=flag_values)
        flags.DEFINE_string("tfds_text_key", "text", "Its text feature.", flag_values=flag_values)
    flags.DEFINE_integer("max_seq_length", 128, "Tokens per example (512 for base and large).",
                         flag_values=flag_values)
    flags.DEFINE_integer("num_processes", 1, "Worker processes, each on its own files and shards.",
                         flag_values=flag_values)
    flags.DEFINE_bool("do_lower_case", True, "Lower-case the text.", flag_values=flag_values)
    flags.DEFINE_bool("do_strip_accents", True, "Strip accents (only when lower-casing).",
                      flag_values=flag_values)
    flags.DEFINE_integer("num_out_files", None, "Number of output shards (default: one per "
                         f"{BYTES_PER_OUT_FILE >> 20} MB of input files, at least "
                         f"--num_processes, at most {MAX_DEFAULT_OUT_FILES}).",
                         flag_values=flag_values)
    flags.DEFINE_integer("seed", 0, "Seed of the packing's random choices.",
                         flag_values=flag_values)
    flags.DEFINE_bool("strict", False, "Fail on an unreadable or non-UTF-8 file instead of "
                      "skipping the rest of it with a warning.", flag_values=flag_values)
    flags.DEFINE_integer("max_line_chars", MAX_LINE_CHARS, "Lines longer than this are split at "
                         f"whitespace into pieces of at most {PIECE_CHARS} characters, each "
                         "packed as a line (the packing keeps at most one example of a line).",
                         flag_values=flag_values)
    flags.DEFINE_bool("overwrite", False, "Replace the shards of an earlier build in the output "
                      "directory.", flag_values=flag_values)
    for name in ("corpus_dir", "vocab_file", "output_dir", "max_seq_length", "num_processes",
                 "blanks_separate_docs", "do_lower_case", "do_strip_accents", "num_out_files",
                 "data_dir"):
        if name in flag_values and name != name.replace("_", "-"):
            flags.DEFINE_alias(name.replace("_", "-"), name,  # the original's spellings
                               flag_values=flag_values)


@dataclasses.dataclass
class Stats:
    files: int = 0
    lines: int = 0  # non-blank lines packed (each piece of a split line counts)
    docs: int = 0  # documents holding text
    examples: int = 0
    tokens: int = 0  # real tokens written, [CLS]/[SEP] included
    text_tokens: int = 0  # tokens of the text read
    dropped_tokens: int = 0  # of those, cut by the packing's truncation
    split_lines: int = 0  # lines over max_line_chars, split into pieces
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
    to max - 2 tokens, B to max - len(A) - 3 (`dropped` counts the tokens these cuts drop).
    After each example, with probability 5% the next target length is randint(5, max), else
    max."""

    def __init__(self, max_length: int, cls_id: int, sep_id: int, rng: random.Random):
        self.max_length = max_length
        self.cls_id, self.sep_id = cls_id, sep_id
        self.rng = rng
        self.sentences: list[list[int]] = []
        self.length = 0
        self.target_length = max_length
        self.dropped = 0

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
        self.dropped += self.length - len(first) - len(second)
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


def _counters_view(counters, job_id: int):
    """This job's slice of the shared progress counters (bytes, lines, docs, examples, tokens)."""
    return lambda stats: counters.__setitem__(
        slice(5 * job_id, 5 * job_id + 5),
        [stats.input_bytes, stats.lines, stats.docs, stats.examples, stats.tokens])


def _job_lines(source: dict, mine: list[str], args: dict, rng: random.Random, stats: Stats,
               notes: dict) -> Iterator[str]:
    """The lines this job packs, "" ending a document: blank lines (with
    blanks_separate_docs) and the end of each file, archive document or dataset example."""
    import tensorflow as tf

    max_chars = args["max_line_chars"]

    def on_split(where: str) -> Callable[[int, int], None]:
        def record(line: int, chars: int) -> None:
            stats.split_lines += 1
            if len(notes["split_lines_at"]) < 10:
                notes["split_lines_at"].append(f"{where}:{line}")
                logging.warning("%s: line %d holds %s characters; split at whitespace into pieces "
                                "of at most %d (--max_line_chars %d)", where, line, f"{chars:,}",
                                PIECE_CHARS, max_chars)
        return record

    def skip(where: str, error: UnreadableText) -> None:
        if args["strict"]:
            raise ValueError(f"{where}: {error} (--nostrict skips the rest of such a file)")
        logging.warning("skipping the rest of %s: %s (the lines before it are used)", where,
                        error)
        notes["skipped"].append({"file": where, "reason": error.reason, "byte": error.offset,
                                 "line": error.line})

    if source["kind"] == "tfds":
        import tensorflow_datasets as tfds
        ds = tfds.builder(source["name"], data_dir=source["data_dir"]).as_dataset(
            split=source["split"], shuffle_files=False)
        for example in ds.shard(args["num_jobs"], args["job_id"]).as_numpy_iterator():
            text = example[source["text_key"]].decode("utf-8")
            yield from (line for line in
                        stripped_lines([text], max_chars, on_split(source["name"]))
                        if line)
            yield ""
        return
    for path in mine:
        size = tf.io.gfile.stat(path).length
        if source["kind"] == "openwebtext":
            documents = list(openwebtext_documents(path, max_chars, on_split, skip))
            rng.shuffle(documents)  # the original shuffles each archive's documents
            for lines in documents:
                yield from lines
                yield ""
        else:
            try:
                for line in read_lines(path, max_chars, on_split(path)):
                    if line or args["blanks_separate_docs"]:
                        yield line
            except UnreadableText as e:
                skip(path, e)
            yield ""
        stats.files += 1
        stats.input_bytes += size


def _batches(lines: Iterator[str]) -> Iterator[list[str]]:
    """LINES_PER_BATCH lines at a time, or fewer when they hold CHARS_PER_BATCH characters."""
    batch, chars = [], 0
    for line in lines:
        batch.append(line)
        chars += len(line)
        if len(batch) == LINES_PER_BATCH or chars >= CHARS_PER_BATCH:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def write_examples(job_id: int, num_jobs: int, source: dict, args: dict, counters=None) -> dict:
    """One worker: its inputs (index % num_jobs == job_id) into its shards (likewise) in
    output_dir/incomplete/. Returns its Stats, skipped files and where it split lines."""
    import tensorflow as tf

    from electra_tf.tokenization import WordPieceTokenizer

    tokenizer = WordPieceTokenizer(args["vocab_file"], args["do_lower_case"],
                                   args["do_strip_accents"])
    rng = random.Random(f"{args['seed']}-{job_id}")
    builder = ExampleBuilder(args["max_seq_length"], tokenizer.vocab["[CLS]"],
                             tokenizer.vocab["[SEP]"], rng)
    temp_dir = os.path.join(args["output_dir"], INCOMPLETE_DIR)
    writers = [tf.io.TFRecordWriter(os.path.join(temp_dir, shard_name(i, args["num_out_files"])))
               for i in range(args["num_out_files"]) if i % num_jobs == job_id]
    stats, notes = Stats(), {"skipped": [], "split_lines_at": []}
    report = _counters_view(counters, job_id) if counters is not None else lambda s: None
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
    batches = _batches(_job_lines(source, mine, dict(args, job_id=job_id, num_jobs=num_jobs), rng,
                                  stats, notes))
    in_doc = False
    # Tokenization (TF ops, which release the GIL) of the next batch overlaps the packing of
    # this one.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        def tokenize(batch):
            return batch, pool.submit(tokenizer.tokenize_to_ids, [line for line in batch if line])

        pending = tokenize(next(batches, []))
        try:
            while pending[0]:
                batch, ids = pending[0], pending[1].result()
                pending = tokenize(next(batches, []))
                stats.text_tokens += sum(map(len, ids))
                ids = iter(ids)
                for line in batch:
                    example = builder.add_line(next(ids) if line else None)
                    stats.docs += bool(line) and not in_doc
                    in_doc = bool(line)
                    if example:
                        emit(example)
                stats.lines += sum(1 for line in batch if line)
                stats.dropped_tokens = builder.dropped
                report(stats)
        finally:
            for writer in writers:
                writer.close()
    return {"stats": dataclasses.asdict(stats), **notes}


def _exit_with_parent(lifeline) -> None:
    """Ends this worker when the process that started it ends, however it ends (kill -9
    included): the kernel then closes the lifeline's only sending end."""
    try:
        lifeline.recv()
    except EOFError:
        pass
    os._exit(1)


def _worker(job_id: int, num_jobs: int, source: dict, args: dict, counters, lifeline,
            results) -> None:
    """A worker process: write_examples, its result or error sent through `results`. Ctrl-C is
    left to the parent, which stops the workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(lifeline,), daemon=True).start()
    try:
        result = ("done", write_examples(job_id, num_jobs, source, args, counters))
    except Exception as e:  # sent as text: not every exception pickles
        result = ("error", (isinstance(e, ValueError), str(e), traceback.format_exc()))
    results.send(result)


def _run_workers(num_jobs: int, source: dict, args: dict, counters) -> list[dict]:
    """write_examples in num_jobs spawned processes. One that fails or dies fails the build,
    and none outlives this call or its process."""
    context = multiprocessing.get_context("spawn")
    lifeline, lifeline_end = context.Pipe(duplex=False)  # nothing is ever sent
    workers, pipes = [], {}
    try:
        for job_id in range(num_jobs):
            receive, send = context.Pipe(duplex=False)
            worker = context.Process(target=_worker, name=f"builder worker {job_id}", daemon=True,
                                     args=(job_id, num_jobs, source, args, counters, lifeline,
                                           send))
            worker.start()
            send.close()
            workers.append(worker)
            pipes[receive] = job_id
        results: list[dict] = [{}] * num_jobs
        while pipes:
            for pipe in multiprocessing.connection.wait(list(pipes)):
                job_id = pipes.pop(pipe)
                try:
                    status, value = pipe.recv()
                except EOFError:
                    workers[job_id].join()
                    code = workers[job_id].exitcode
                    how = (f"was killed by {signal.Signals(-code).name}" if code < 0
                           else f"exited with code {code}")
                    raise RuntimeError(f"worker {job_id} of --num_processes {num_jobs} {how} "
                                       "(the out-of-memory killer sends SIGKILL); nothing was "
                                       "written") from None
                if status == "error":
                    is_value_error, message, details = value
                    if is_value_error:
                        raise ValueError(message)
                    raise RuntimeError(f"worker {job_id} failed:\n{details}")
                results[job_id] = value
        return results
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
            worker.join()
        lifeline_end.close()


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


def _corpus_files(corpus_dir: str | None) -> tuple[list[str], list[str]]:
    """The files directly in corpus_dir, sorted, and its subdirectories (not read)."""
    import tensorflow as tf

    if not corpus_dir or not tf.io.gfile.isdir(corpus_dir):
        raise ValueError(f"--corpus_dir {corpus_dir} is not a directory")
    paths = sorted(os.path.join(corpus_dir, name.rstrip("/"))
                   for name in tf.io.gfile.listdir(corpus_dir))
    directories = [path for path in paths if tf.io.gfile.isdir(path)]
    files = [path for path in paths if path not in directories]
    gone = [path for path in files if not tf.io.gfile.exists(path)]  # e.g. a broken link
    if gone:
        raise ValueError(f"--corpus_dir {corpus_dir}: {gone[0]} cannot be opened (a link to a "
                         f"missing file?{f'; {len(gone)} such entries' if len(gone) > 1 else ''}"
                         "): fix or remove it")
    if not files:
        raise ValueError(f"--corpus_dir {corpus_dir} holds no files" + (
            f", only subdirectories (e.g. {directories[0]}): give one of them, or move their "
            "files into it" if directories else ""))
    if directories:
        logging.warning("--corpus_dir %s: not reading its %d subdirectories (e.g. %s): the "
                        "builder reads the files directly in it", corpus_dir, len(directories),
                        directories[0])
    return files, directories


def default_num_out_files(input_bytes: int | None, num_processes: int) -> int:
    """One shard per BYTES_PER_OUT_FILE of input (as stored: compressed files count their
    compressed size), at least one per worker process, at most MAX_DEFAULT_OUT_FILES, which is
    also the count when the size is unknown (a tensorflow-datasets source).

    >>> default_num_out_files(4_000_000, 1), default_num_out_files(4_000_000, 4)
    (1, 4)
    >>> default_num_out_files(40 << 30, 1), default_num_out_files(None, 1)
    (1000, 1000)
    """
    if input_bytes is None:
        return max(MAX_DEFAULT_OUT_FILES, num_processes)
    shards = min(-(-input_bytes // BYTES_PER_OUT_FILE), MAX_DEFAULT_OUT_FILES)
    return max(shards, num_processes, 1)


def build(corpus_dir: str | None, vocab_file: str, output_dir: str, max_seq_length: int = 128,
          num_processes: int = 1, blanks_separate_docs: bool = True, do_lower_case: bool = True,
          do_strip_accents: bool = True, num_out_files: int | None = None, seed: int = 0,
          strict: bool = False, source: dict | None = None, show_progress: bool = True,
          max_line_chars: int = MAX_LINE_CHARS, overwrite: bool = False) -> dict:
    """Builds the TFRecords; returns (and writes to output_dir/build_summary.json) the summary.

    `source` is {"kind": "files"|"openwebtext", "files": [...]} or {"kind": "tfds", "name",
    "data_dir", "split", "text_key"}; by default the files of `corpus_dir`. `num_out_files`
    None: default_num_out_files."""
    import tensorflow as tf

    from electra_tf import data, tokenization
    from electra_tf.files import write_atomically

    tokens = tokenization.read_vocab(vocab_file)
    tokenization.check_vocab(tokens, vocab_file)  # before any worker
    subdirectories: list[str] = []
    if source is None:
        files, subdirectories = _corpus_files(corpus_dir)
        source = {"kind": "files", "files": files}
    if max_seq_length < 5:
        raise ValueError(f"--max_seq_length {max_seq_length} must be at least 5")
    total_bytes = (sum(tf.io.gfile.stat(f).length for f in source["files"])
                   if "files" in source else None)
    if num_out_files is None:
        num_out_files = default_num_out_files(total_bytes, max(num_processes, 1))
    if num_processes < 1 or num_out_files < num_processes:
        raise ValueError(f"--num_out_files {num_out_files} must be at least --num_processes "
                         f"{num_processes}, which must be at least 1")
    if max_line_chars < PIECE_CHARS:
        raise ValueError(f"--max_line_chars {max_line_chars} must be at least {PIECE_CHARS}, the "
                         "length of the pieces a longer line is split into")
    stale = prepare_output_dir(output_dir, num_out_files, overwrite)  # after every check
    args = dict(vocab_file=vocab_file, output_dir=output_dir, max_seq_length=max_seq_length,
                blanks_separate_docs=blanks_separate_docs, do_lower_case=do_lower_case,
                do_strip_accents=do_strip_accents, num_out_files=num_out_files, seed=seed,
                strict=strict, max_line_chars=max_line_chars)
    counters = multiprocessing.get_context("spawn").Array("q", 5 * num_processes, lock=False)
    stop = threading.Event()
    progress = threading.Thread(target=_progress, args=(counters, total_bytes, stop), daemon=True)
    if show_progress:
        progress.start()
    start = time.time()
    try:
        if num_processes == 1:
            results = [write_examples(0, 1, source, args, counters)]
        else:
            results = _run_workers(num_processes, source, args, counters)
    except BaseException:
        discard(output_dir, num_out_files)
        raise
    finally:
        stop.set()
        if show_progress:
            progress.join()
    total, skipped, split_lines_at = Stats(), [], []
    for result in results:
        total.add(Stats(**result["stats"]))
        skipped += result["skipped"]
        split_lines_at += result["split_lines_at"]
    if total.examples == 0:
        discard(output_dir, num_out_files)
        where = source.get("name") or corpus_dir or "the input"
        raise ValueError(f"{where}: no text to build examples from"
                         + (f" ({len(skipped)} files skipped)" if skipped else ""))
    elapsed = time.time() - start
    dropped_share = total.dropped_tokens / max(total.text_tokens, 1)
    summary = {**dataclasses.asdict(total), "skipped_files": skipped,
               "split_lines_at": split_lines_at[:10], "subdirectories_not_read": subdirectories,
               "seconds": round(elapsed, 2), "tokens_per_second": round(total.tokens / elapsed),
               "single_segment_share": total.single_segment / total.examples,
               "short_share": total.short / total.examples,
               "dropped_share": dropped_share,
               "padding_fraction": 1 - total.tokens / (total.examples * max_seq_length),
               "max_seq_length": max_seq_length, "num_out_files": num_out_files,
               "num_processes": num_processes, "vocab_file": vocab_file,
               # run_pretraining.py checks its vocabulary against these (data.check_vocabulary)
               "vocab_size": len(tokens),
               "vocab_fingerprint": tokenization.vocab_fingerprint(tokens), "seed": seed,
               "do_lower_case": do_lower_case, "do_strip_accents": do_strip_accents,
               "max_line_chars": max_line_chars}
    try:
        write_atomically(os.path.join(output_dir, data.PUBLISHING_SUMMARY),
                         json.dumps(summary, indent=2))
    except BaseException:
        discard(output_dir, num_out_files)
        raise
    publish(output_dir, num_out_files, stale)
    if skipped:
        logging.warning("skipped the rest of %d unreadable or non-UTF-8 files (listed in "
                        "build_summary.json); --strict fails on them instead", len(skipped))
    if total.split_lines:
        logging.warning("lines longer than --max_line_chars %d split into pieces: %d (the first "
                        "at %s)", max_line_chars, total.split_lines, split_lines_at[0])
    if dropped_share > 0.5:
        logging.warning(
            "%.0f%% of the text's tokens were cut by the packing, which keeps at most %d tokens "
            "of a line (the original's rule), and its lines average %.0f tokens: put a sentence "
            "or a short paragraph on a line, or split longer lines with a lower --max_line_chars",
            100 * dropped_share, max_seq_length - 2, total.text_tokens / max(total.lines, 1))
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
                        FLAGS.seed, FLAGS.strict, source, max_line_chars=FLAGS.max_line_chars,
                        overwrite=FLAGS.overwrite)
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
    command_line.run(main, "docs/data.md")
