"""The TFRecord builder (the original's packing), its inputs and failures, and the round trip
into the input pipeline and a pretraining step."""

import bz2
import gzip
import io
import json
import math
import lzma
import multiprocessing
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import tracemalloc
import unittest.mock

import numpy as np
import pytest
import tensorflow as tf

from conftest import (BERT_VOCAB, REPO, SAMPLE, TEST_DATA, own_flags, run_script,
                      share_changed, tiny_config, usage_error)
from electra_tf import data
from electra_tf.tokenization import WordPieceTokenizer
from pretrain_data import build_openwebtext_pretraining_dataset as openwebtext
from pretrain_data import build_pretraining_dataset as builder
from pretrain_data import shard_files, text_lines

sys.path.insert(0, str(REPO / "benchmarks"))
from data_throughput import original_way  # noqa: E402  (the original's loop, pure Python)

SAMPLE_TEXT = SAMPLE / "corpus" / "enwiki_sample.txt"


def _build(corpus, out, **kwargs):
    kwargs = {"max_seq_length": 64, "num_out_files": 3, "show_progress": False, **kwargs}
    return builder.build(str(corpus), str(BERT_VOCAB), str(out), **kwargs)


def _shards(out):
    return sorted(str(p) for p in out.glob("pretrain_data.tfrecord-*"))


def _records(files):
    return [r.numpy() for r in tf.data.TFRecordDataset(files)]


def _examples(files, seq_length):
    ds = tf.data.TFRecordDataset(files).map(lambda r: data.decode_record(r, seq_length))
    return [{k: v.numpy() for k, v in ex.items()} for ex in ds]


def _corpus(tmp_path, name="corpus", **files):
    corpus = tmp_path / name
    corpus.mkdir()
    for file_name, content in files.items():
        path = corpus / file_name.replace("_", ".")
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return corpus


def test_writes_the_records_the_original_writes(tmp_path):
    """Byte-identical to the original's pure-Python loop (FullTokenizer, a line at a time) with
    the same random choices, on real text."""
    corpus = _corpus(tmp_path, a_txt=SAMPLE_TEXT.read_text(encoding="utf-8"),
                     b_txt=(TEST_DATA / "brown_sample.txt").read_text(encoding="utf-8"))
    summary = _build(corpus, tmp_path / "ours", max_seq_length=128, num_out_files=1, seed=7)
    tokens, _ = original_way(sorted(str(p) for p in corpus.iterdir()),
                             str(tmp_path / "original.tfrecord"), 128,
                             random.Random("7-0"), str(BERT_VOCAB))
    ours = [tf.train.Example.FromString(r) for r in _records(_shards(tmp_path / "ours"))]
    assert len(ours) == summary["examples"] > 1000 and summary["tokens"] == tokens
    assert ours == [tf.train.Example.FromString(r)
                    for r in _records([str(tmp_path / "original.tfrecord")])]


def test_packing_invariants_and_shares_on_real_text(tmp_path, caplog):
    text = (TEST_DATA / "brown_sample.txt").read_text(encoding="utf-8")
    corpus = _corpus(tmp_path, brown_txt=text)
    summary = _build(corpus, tmp_path / "out", max_seq_length=128, num_out_files=4)
    files = _shards(tmp_path / "out")
    assert len(files) == 4 and not list((tmp_path / "out").glob("*.incomplete"))
    examples = _examples(files, 128)
    assert len(examples) == summary["examples"] > 500
    single = short_padding = 0
    for ex in examples:
        n = ex["input_mask"].sum()
        assert ex["input_mask"][:n].all() and not ex["input_mask"][n:].any()
        ids, seg = ex["input_ids"], ex["segment_ids"]
        assert ids[0] == 101 and ids[n - 1] == 102 and not ids[n:].any()
        seps = np.flatnonzero(ids[:n] == 102)
        assert len(seps) in (1, 2) and 101 not in ids[1:n] and 0 not in ids[:n]
        assert not seg[:seps[0] + 1].any() and seg[seps[0] + 1:n].all() and not seg[n:].any()
        single += len(seps) == 1
        short_padding += n < 100
    assert single == summary["single_segment"]
    assert summary["tokens"] == sum(ex["input_mask"].sum() for ex in examples)
    # Brown's sentences (~25 tokens) always give two segments but for the 10% draw; 5% of
    # examples get a random target length. Bounds are 5 standard deviations.
    n = len(examples)
    assert abs(summary["single_segment_share"] - 0.10) < 5 * math.sqrt(0.10 * 0.90 / n)
    assert abs(summary["short_share"] - 0.05) < 5 * math.sqrt(0.05 * 0.95 / n)
    assert summary["short"] >= short_padding * 0.9
    on_disk = json.loads((tmp_path / "out" / "build_summary.json").read_text())
    assert on_disk["examples"] == len(examples) and on_disk["lines"] == 3000
    # Every token of the text is written or counted as cut by the packing's truncation.
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    assert summary["text_tokens"] == sum(map(len, WordPieceTokenizer(str(BERT_VOCAB))
                                              .tokenize_to_ids(lines)))
    specials = 3 * summary["examples"] - summary["single_segment"]
    assert summary["text_tokens"] - summary["dropped_tokens"] == summary["tokens"] - specials
    assert 0 < summary["dropped_share"] < 0.5 and "were cut by the packing" not in caplog.text


def test_blank_lines_separate_documents(tmp_path):
    docs = [[f"document {word} sentence {i} about {word}." for i in range(4)]
            for word in ("apple", "zebra") * 20]
    text = "\n\n".join("\n".join(doc) for doc in docs) + "\n"
    corpus = _corpus(tmp_path, a_txt=text)
    vocab = dict((t, i) for i, t in enumerate(BERT_VOCAB.read_text().split("\n")))
    apple, zebra = vocab["apple"], vocab["zebra"]
    summary = _build(corpus, tmp_path / "sep", num_out_files=1)
    assert summary["docs"] == 40 and summary["lines"] == 160
    for ex in _examples(_shards(tmp_path / "sep"), 64):
        assert not (apple in ex["input_ids"] and zebra in ex["input_ids"])
    summary = _build(corpus, tmp_path / "joined", num_out_files=1, blanks_separate_docs=False)
    assert summary["docs"] == 1
    assert any(apple in ex["input_ids"] and zebra in ex["input_ids"]
               for ex in _examples(_shards(tmp_path / "joined"), 64))


def test_output_is_deterministic_for_a_seed(tmp_path):
    corpus = _corpus(tmp_path, a_txt=SAMPLE_TEXT.read_text(encoding="utf-8"),
                     b_txt="second file.\nwith two lines.\n")
    _build(corpus, tmp_path / "a", seed=3)
    _build(corpus, tmp_path / "b", seed=3)
    _build(corpus, tmp_path / "c", seed=4)
    a, b, c = (_records(_shards(tmp_path / name)) for name in "abc")
    assert a == b and a != c


def test_two_processes_cover_all_shards_deterministically(tmp_path, monkeypatch):
    """Two worker processes make a shard each by default (the 200 KB corpus makes one with
    one process), and the same shards when --num_out_files says so: the same bytes as the two
    workers' jobs run one after the other in this process."""
    corpus = _corpus(tmp_path, **{f"f{i}_txt": SAMPLE_TEXT.read_text(encoding="utf-8")[
        i * 50000:(i + 1) * 50000] for i in range(4)})
    one = _build(corpus, tmp_path / "one", num_out_files=None)
    two = _build(corpus, tmp_path / "two", num_out_files=None, num_processes=2)
    monkeypatch.setattr(builder, "_run_workers", lambda num_jobs, source, args, counters: [
        builder.write_examples(j, num_jobs, source, args, counters) for j in range(num_jobs)])
    again = _build(corpus, tmp_path / "again", num_out_files=2, num_processes=2)
    assert one["num_out_files"] == 1 and len(_shards(tmp_path / "one")) == 1
    assert two["num_out_files"] == 2 and len(_shards(tmp_path / "two")) == 2 and all(
        tf.io.gfile.stat(f).length > 0 for f in _shards(tmp_path / "two"))
    assert _records(_shards(tmp_path / "two")) == _records(_shards(tmp_path / "again"))
    assert two["files"] == 4 and two["lines"] == one["lines"] and two["examples"] > 100


def test_compressed_files_read_like_plain_ones(tmp_path):
    text = SAMPLE_TEXT.read_text(encoding="utf-8")[:100000].encode()
    plain = _build(_corpus(tmp_path, "plain", a_txt=text), tmp_path / "plain_out")
    for name, compress in (("gz", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress)):
        corpus = _corpus(tmp_path, name, **{f"a.txt_{name}": compress(text)})
        summary = _build(corpus, tmp_path / f"{name}_out")
        assert summary["examples"] == plain["examples"] and summary["skipped_files"] == []
        assert _records(_shards(tmp_path / f"{name}_out")) == \
            _records(_shards(tmp_path / "plain_out"))


def test_unreadable_files_are_read_up_to_the_problem_or_fail_with_strict(tmp_path, caplog):
    good = SAMPLE_TEXT.read_text(encoding="utf-8")[:50000]
    corpus = _corpus(tmp_path, a_txt=good, b_txt="caf\xe9 latin-1\n".encode("latin-1"),
                     c_gz=b"not gzip data", d_txt=b"first line\nsecond line\ncaf\xe9 third\nfourth\n")
    summary = _build(corpus, tmp_path / "out")
    skipped = {entry.pop("file"): entry for entry in summary["skipped_files"]}
    assert skipped == {
        str(corpus / "b.txt"): {"reason": "not UTF-8 (invalid continuation byte)", "byte": 3,
                                "line": 1},
        str(corpus / "c.gz"): {"reason": "Not a gzipped file (b'no')", "byte": 0, "line": 1},
        str(corpus / "d.txt"): {"reason": "not UTF-8 (invalid continuation byte)", "byte": 26,
                                "line": 3}}
    assert f"skipping the rest of {corpus / 'd.txt'}: not UTF-8 (invalid continuation byte) " \
        "at byte 26, line 3 (the lines before it are used)" in caplog.text
    # The lines before the problem are packed: all of a.txt and d.txt's first two.
    assert summary["lines"] == sum(1 for line in good.split("\n") if line.strip()) + 2
    assert summary["examples"] > 0 and len(_shards(tmp_path / "out")) == 3
    (corpus / "c.gz").unlink()
    (corpus / "d.txt").unlink()
    with pytest.raises(ValueError, match=r"b\.txt: not UTF-8 \(invalid continuation byte\) at "
                       r"byte 3, line 1 \(--nostrict"):
        _build(corpus, tmp_path / "strict", strict=True, num_processes=2)  # raised in a worker
    assert list((tmp_path / "strict").iterdir()) == []  # nothing half-written left behind


def test_a_broken_link_in_the_corpus_is_named_before_anything_is_written(tmp_path):
    corpus = _corpus(tmp_path, a_txt="A line of text.\n")
    (corpus / "b.txt").symlink_to(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match=rf"^--corpus_dir {corpus}: {corpus / 'b.txt'} cannot be "
                       r"opened \(a link to a missing file\?\): fix or remove it$"):
        _build(corpus, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_bad_input_fails_with_a_clear_message(tmp_path, caplog):
    with pytest.raises(ValueError, match="is not a directory"):
        _build(tmp_path / "nope", tmp_path / "o")
    with pytest.raises(ValueError, match="holds no files"):
        _build(_corpus(tmp_path, "nothing"), tmp_path / "o")
    nested = _corpus(tmp_path, "nested")
    (nested / "AA").mkdir()
    (nested / "AA" / "wiki_00").write_text("text in a subdirectory\n")
    with pytest.raises(ValueError, match=r"holds no files, only subdirectories \(e\.g\. .*AA\)"):
        _build(nested, tmp_path / "o")
    (nested / "top.txt").write_text("text directly in the corpus directory\n")
    summary = _build(nested, tmp_path / "nested_out")
    assert summary["subdirectories_not_read"] == [str(nested / "AA")] and summary["lines"] == 1
    assert "not reading its 1 subdirectories" in caplog.text
    with pytest.raises(ValueError, match="no text to build examples from"):
        _build(_corpus(tmp_path, "blank", a_txt="\n\n  \n"), tmp_path / "o")
    assert not _shards(tmp_path / "o") and not list((tmp_path / "o").glob("*.incomplete"))
    bad_vocab = tmp_path / "vocab.txt"
    bad_vocab.write_text("[PAD]\n[UNK]\n[CLS]\nhello\n")
    with pytest.raises(ValueError, match=r"vocab.txt lacks the special tokens \['\[SEP\]'"):
        builder.build(str(SAMPLE / "corpus"), str(bad_vocab), str(tmp_path / "v"))
    other = tmp_path / "other"
    other.mkdir()
    (other / "pretrain_data.tfrecord-00000.gz").write_bytes(b"")  # not ours
    with pytest.raises(ValueError, match="already holds 1 other shards"):
        _build(SAMPLE / "corpus", other)


def test_rebuilding_into_a_folder_of_ours_needs_overwrite(tmp_path, caplog):
    out = tmp_path / "out"
    _build(SAMPLE / "corpus", out, num_out_files=4)
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    with pytest.raises(ValueError, match=rf"the output directory {out} already holds 4 shards "
                       r"of an earlier build \(e\.g\. pretrain_data\.tfrecord-0-of-4; "
                       r"--num_out_files 4\); pass --overwrite"):
        _build(SAMPLE / "corpus", out, num_out_files=2)
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before
    summary = _build(SAMPLE / "corpus", out, num_out_files=2, overwrite=True)
    assert sorted(path.name for path in out.iterdir()) == [
        "build_summary.json", "pretrain_data.tfrecord-0-of-2", "pretrain_data.tfrecord-1-of-2"]
    assert "removed the 4 shards of the earlier build" in caplog.text
    assert len(_examples(_shards(out), 64)) == summary["examples"]


def test_a_crash_while_moving_a_build_into_place_is_refused_then_finished(tmp_path, caplog):
    """A rebuild that dies after moving one of its shards into place: pretraining refuses the
    mix of old and new shards, and the next build finishes the move (the same bytes as a build
    that was not interrupted) before it decides anything else."""
    assert data.PUBLISHING_SUMMARY == os.path.join(shard_files.INCOMPLETE_DIR, data.BUILD_SUMMARY)
    clean = _build(SAMPLE / "corpus", tmp_path / "clean", num_out_files=2)
    expected = {path.name: path.read_bytes() for path in (tmp_path / "clean").glob("pretrain_*")}
    out = tmp_path / "out"
    _build(SAMPLE / "corpus", out, num_out_files=3)
    rename = tf.io.gfile.rename
    moves = []

    def rename_then_crash(source, target, overwrite=False):
        if pathlib.Path(target).parent == out and "tfrecord" in target:  # a shard into place
            if moves:
                raise OSError("the machine went away")
            moves.append(target)
        rename(source, target, overwrite=overwrite)

    with unittest.mock.patch.object(tf.io.gfile, "rename", rename_then_crash), \
            pytest.raises(OSError, match="went away"):
        _build(SAMPLE / "corpus", out, num_out_files=2, overwrite=True)
    assert len(moves) == 1 and len(_shards(out)) == 4  # the 3 old and 1 new
    assert not (out / data.BUILD_SUMMARY).exists()
    with pytest.raises(data.InputError, match=rf"{out} holds a build whose move into place was "
                       r"interrupted .* rerun pretrain_data/build_pretraining_dataset.py .* "
                       r"without --overwrite"):
        data.check_files(str(out / "pretrain_data.tfrecord*"), 64)

    with pytest.raises(ValueError, match="already holds 2 shards of an earlier build"):
        _build(SAMPLE / "corpus", out, num_out_files=2)  # the same command, without --overwrite
    assert "finished publishing the complete build of 2 shards" in caplog.text
    assert sorted(path.name for path in out.iterdir()) == [
        "build_summary.json", "pretrain_data.tfrecord-0-of-2", "pretrain_data.tfrecord-1-of-2"]
    assert {name: (out / name).read_bytes() for name in expected} == expected
    summary = json.loads((out / data.BUILD_SUMMARY).read_text())
    assert (summary["num_out_files"], summary["examples"]) == (2, clean["examples"])
    assert len(data.check_files(str(out / "pretrain_data.tfrecord*"), 64)) == 2


def test_what_a_kill_leaves_of_the_summary_is_removed_or_named(tmp_path, caplog):
    out = tmp_path / "out"
    (out / shard_files.INCOMPLETE_DIR).mkdir(parents=True)
    (out / shard_files.INCOMPLETE_DIR / (data.BUILD_SUMMARY + ".tmp-0123456789ab")).write_text("{")
    _build(SAMPLE / "corpus", out, num_out_files=2)  # killed inside write_atomically: removed
    assert "removing 1 incomplete files that an interrupted build left" in caplog.text
    assert not (out / shard_files.INCOMPLETE_DIR).exists()
    (out / shard_files.INCOMPLETE_DIR).mkdir()
    (out / data.PUBLISHING_SUMMARY).write_text("not json")
    with pytest.raises(ValueError, match=r"incomplete/build_summary.json says a build is being "
                       r"moved into place but cannot be read"):
        _build(SAMPLE / "corpus", out, num_out_files=2, overwrite=True)
    assert len(_shards(out)) == 2  # the complete build is left alone


def _corpus_with_a_fifo(tmp_path) -> pathlib.Path:
    """A file for worker 0 and, for worker 1, a named pipe that nothing writes: worker 1 opens
    its shards (1 and 3) and waits on it until killed."""
    corpus = _corpus(tmp_path, f0_txt=SAMPLE_TEXT.read_text(encoding="utf-8"))
    os.mkfifo(corpus / "f1.txt")
    return corpus


def _wait_for(condition, process=None, timeout=300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process is None or process.poll() is None, "the build ended first"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _children(pid: int) -> list[int]:
    children = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_killing_the_build_leaves_no_worker_and_no_shard_the_pattern_reads(tmp_path, caplog):
    """kill -9 of the builder's process while both workers write: they end with it; their
    shards stay out of the input pattern, and the next build removes them, saying so."""
    corpus = _corpus_with_a_fifo(tmp_path)
    out = tmp_path / "out"
    build = subprocess.Popen(
        [sys.executable, "pretrain_data/build_pretraining_dataset.py", f"--corpus_dir={corpus}",
         f"--vocab_file={BERT_VOCAB}", f"--output_dir={out}", "--num_processes=2",
         "--num_out_files=4"], cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: len(list(out.glob("incomplete/*"))) == 4, build)  # both writing
        children = [pid for pid in _children(build.pid) if _alive(pid)]
        assert children  # worker 1 (waiting on the pipe) at least
        os.kill(build.pid, signal.SIGKILL)
        build.wait()
        _wait_for(lambda: not any(map(_alive, children)), timeout=60)
    finally:
        os.killpg(build.pid, signal.SIGKILL)
    assert tf.io.gfile.glob(str(out / "pretrain_data.tfrecord*")) == []
    _build(SAMPLE / "corpus", out, num_out_files=3)
    assert "removing 4 incomplete files that an interrupted build left" in caplog.text
    assert sorted(path.name for path in out.iterdir()) == ["build_summary.json"] + [
        f"pretrain_data.tfrecord-{i}-of-3" for i in range(3)]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe")
def test_a_worker_that_dies_fails_the_build_and_stops_the_other(tmp_path):
    corpus = _corpus_with_a_fifo(tmp_path)
    out = tmp_path / "out"

    def kill_worker_1():
        try:
            _wait_for(lambda: len(list(out.glob("incomplete/*"))) == 4)
            worker, = (p for p in multiprocessing.active_children() if p.name == "builder worker 1")
            os.kill(worker.pid, signal.SIGKILL)
        except BaseException:  # end the pipe, so that the build ends and the test fails
            os.close(os.open(corpus / "f1.txt", os.O_WRONLY | os.O_NONBLOCK))
            raise

    killer = threading.Thread(target=kill_worker_1)
    killer.start()
    with pytest.raises(RuntimeError, match="worker 1 of --num_processes 2 was killed by SIGKILL"):
        _build(corpus, out, num_processes=2, num_out_files=4)
    killer.join()
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("builder")]
    assert list(out.iterdir()) == []


def _one_line_of_words(chars: int) -> str:
    """Real text, every line of the sample joined by spaces, to `chars` characters."""
    words = " ".join(line for line in SAMPLE_TEXT.read_text(encoding="utf-8").split("\n") if line)
    return (words * (chars // len(words) + 1))[:chars].strip()


def test_an_over_long_line_is_split_and_all_of_it_packed(tmp_path, caplog):
    """A 300,000-character line without a newline: the packing alone would keep 126 of its
    ~65,000 tokens."""
    line = _one_line_of_words(300_000)
    corpus = _corpus(tmp_path, a_txt=line)
    summary = _build(corpus, tmp_path / "out", max_seq_length=128, num_out_files=1)
    tokenizer = WordPieceTokenizer(str(BERT_VOCAB))
    tokens = tokenizer.tokenize_to_ids([line])[0]
    assert summary["split_lines"] == 1 and summary["split_lines_at"] == [f"{corpus / 'a.txt'}:1"]
    assert summary["text_tokens"] == len(tokens) and summary["dropped_share"] < 0.15
    assert summary["examples"] > 450
    assert "line 1 holds 300,000 characters; split at whitespace into pieces" in caplog.text
    # The pieces, cut at spaces, hold exactly the line's tokens.
    pieces = list(text_lines.read_lines(str(corpus / "a.txt")))
    assert len(pieces) > 3000 and max(map(len, pieces)) <= text_lines.PIECE_CHARS
    assert sum(tokenizer.tokenize_to_ids(pieces), []) == tokens


def test_reading_a_huge_line_holds_a_bounded_part_of_it(tmp_path):
    path = tmp_path / "huge.txt"
    with open(path, "wb") as f:
        for _ in range(200):  # 20 MB, one line
            f.write(b"word " * 20000)
    tracemalloc.start()
    try:
        pieces = sum(1 for _ in text_lines.read_lines(str(path)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert pieces == 20_000_000 // 100 and peak < 10_000_000


def test_lines_of_a_text_read_in_pieces():
    lines = text_lines.stripped_lines
    text = "first\r\n  second  \n\nthird\n" + "x " * 70 + "\n" + " " * 300 + "\nlast"
    splits = []
    whole = list(lines([text], max_line_chars=120,
                       on_split=lambda line, chars: splits.append((line, chars))))
    assert whole == ["first", "second", "", "third", ("x " * 50).strip(), ("x " * 20).strip(), "",
                     "last"]  # the 300 spaces are a blank line
    assert splits == [(5, 140), (6, 300)]
    rng = random.Random(0)
    for _ in range(20):  # wherever the reads cut the text, the same lines
        cuts = sorted(rng.sample(range(1, len(text)), 8))
        chunks = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)])]
        assert list(lines(chunks, max_line_chars=120)) == whole
    assert list(lines(["a\nb\n"])) == ["a", "b"]  # a final newline ends a line
    assert list(lines(["\n"])) == [""] and list(lines([""])) == []
    assert list(lines(["y" * 250], max_line_chars=120)) == ["y" * 100, "y" * 100, "y" * 50]
    # Every carriage return is dropped, as TensorFlow's line reader (the original's) drops it.
    assert list(lines(["foo\rbar\nbaz\r", "\nq\r\r\n"])) == ["foobar", "baz", "q"]


def test_the_default_shard_count_scales_with_the_corpus(tmp_path):
    """The 630 KB sample makes one shard (not the original's 1000 shards of a few examples);
    with two worker processes, two (test_two_processes_cover_all_shards_deterministically)."""
    summary = _build(SAMPLE / "corpus", tmp_path / "one", num_out_files=None)
    assert summary["num_out_files"] == 1 and len(_shards(tmp_path / "one")) == 1
    assert builder.default_num_out_files(9 << 20, 1) == 3
    assert builder.default_num_out_files(38 << 30, 8) == 1000  # OpenWebText's size


def test_cli_usage_errors(tmp_path):
    """(The whole command, with dashed spellings, runs in test_reads_a_prepared_tfds_dataset.)"""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / shard_files.shard_name(0, 2)).write_bytes(b"")  # an earlier build's
    assert "pass --overwrite to replace them" in _usage_error(
        builder, f"--corpus-dir={SAMPLE / 'corpus'}", f"--vocab_file={BERT_VOCAB}",
        f"--output_dir={tmp_path / 'out'}", "--num_out_files=4")
    assert "give either --corpus_dir or --tfds_name" in _usage_error(
        builder, f"--vocab_file={BERT_VOCAB}", f"--output_dir={tmp_path / 'x'}")


def _usage_error(module, *argv: str) -> str:
    """A builder's usage error in this process (conftest.usage_error), its flags its own
    (conftest.own_flags). test_reads_a_prepared_tfds_dataset runs a build as a user runs it, in
    a fresh interpreter."""
    with own_flags(module):
        return usage_error(module, *argv)


def _openwebtext(data_dir, documents_per_archive=3):
    """The OpenWebText release layout: openwebtext/urlsf_subset*_data.xz, each an xz tar of
    documents, here some plain and some themselves .xz."""
    (data_dir / "openwebtext").mkdir(parents=True)
    shutil.copy(BERT_VOCAB, data_dir / "vocab.txt")
    paragraphs = [p for p in SAMPLE_TEXT.read_text(encoding="utf-8").split("\n") if p]
    for archive in range(2):
        with tarfile.open(data_dir / "openwebtext" / f"urlsf_subset0{archive}-1_data.xz",
                          "w:xz") as tar:
            for doc in range(documents_per_archive):
                text = "\n\n".join(paragraphs[(archive * 3 + doc) * 10:][:10]).encode()
                name = f"0{archive}-{doc}.txt"
                if doc % 2:
                    text, name = lzma.compress(text), name + ".xz"
                info = tarfile.TarInfo(name)
                info.size = len(text)
                tar.addfile(info, io.BytesIO(text))


def test_openwebtext_builder(tmp_path, capsys):
    """The command's main in this process (tests/test_cli.py starts it as a script)."""
    _openwebtext(tmp_path)
    with own_flags(openwebtext) as flag_values:
        openwebtext.main(flag_values(["build_openwebtext_pretraining_dataset.py",
                                      f"--data-dir={tmp_path}", "--max-seq-length=64",
                                      "--num-out-files=2"]))
    summary = json.loads((tmp_path / "pretrain_tfrecords" / "build_summary.json").read_text())
    assert capsys.readouterr().out.endswith(json.dumps(summary, indent=2) + "\n")
    # Blank lines do not split an OpenWebText document: six documents, 60 paragraphs.
    assert summary["docs"] == 6 and summary["lines"] == 60 and summary["files"] == 2
    assert len(_examples(_shards(tmp_path / "pretrain_tfrecords"), 64)) == summary["examples"]
    assert "openwebtext does not exist" in _usage_error(openwebtext,
                                                        f"--data_dir={tmp_path / 'missing'}")


def test_an_unreadable_openwebtext_document_is_skipped_alone(tmp_path):
    archive = tmp_path / "urlsf_subset00-1_data.xz"
    with tarfile.open(archive, "w:xz") as tar:
        for name, text in (("a.txt", "good text.\n\nmore good text.\n".encode()),
                           ("b.txt", "caf\xe9\n".encode("latin-1")),
                           ("c.txt", "a third document.\n".encode())):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
    summary = builder.build(None, str(BERT_VOCAB), str(tmp_path / "out"), 64, num_out_files=1,
                            blanks_separate_docs=False, show_progress=False,
                            source={"kind": "openwebtext", "files": [str(archive)]})
    assert summary["docs"] == 2 and summary["lines"] == 3
    assert summary["skipped_files"] == [{"file": f"{archive}:b.txt", "byte": 3, "line": 1,
                                         "reason": "not UTF-8 (invalid continuation byte)"}]


_SAMPLE_WIKI = '''
import sys
import tensorflow_datasets as tfds


class SampleWiki(tfds.core.GeneratorBasedBuilder):
    """Wikipedia-like: one article per example, paragraphs split by blank lines."""
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
            {"title": tfds.features.Text(), "text": tfds.features.Text()}))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        lines = open(sys.argv[2], encoding="utf-8").read().split(chr(10))
        paragraphs = [p for p in lines if p]
        for i in range(8):
            yield i, {"title": f"a{i}", "text": (chr(10) * 2).join(paragraphs[i * 5:i * 5 + 5])}


SampleWiki(data_dir=sys.argv[1]).download_and_prepare()
'''


def test_reads_a_prepared_tfds_dataset(tmp_path):
    (tmp_path / "sample_wiki.py").write_text(_SAMPLE_WIKI)
    result = run_script(str(tmp_path / "sample_wiki.py"), str(tmp_path / "tfds"), str(SAMPLE_TEXT))
    assert result.returncode == 0, result.stderr
    # A fresh process finds it by name in --tfds_data_dir, without the builder's code. The
    # original's flags are given in its dashed spellings, --no-lower-case as its negation.
    result = run_script("pretrain_data/build_pretraining_dataset.py", "--tfds_name=sample_wiki",
                        f"--tfds_data_dir={tmp_path / 'tfds'}", f"--vocab-file={BERT_VOCAB}",
                        f"--output-dir={tmp_path / 'out'}", "--max-seq-length=64",
                        "--num-out-files=2", "--no-lower-case")
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "out" / "build_summary.json").read_text())
    assert summary["docs"] == 8 and summary["lines"] == 40 and summary["examples"] > 20
    assert summary["do_lower_case"] is False and summary["max_seq_length"] == 64
    assert "examples" in result.stdout and "tokens/s" in result.stdout  # progress bar
    assert "--tfds_text_key body: sample_wiki has ['text', 'title']" in _usage_error(
        builder, "--tfds_name=sample_wiki", f"--tfds_data_dir={tmp_path / 'tfds'}",
        "--tfds_text_key=body", f"--vocab_file={BERT_VOCAB}", f"--output_dir={tmp_path / 'o2'}")
    assert "--tfds_name no_such_set" in _usage_error(
        builder, "--tfds_name=no_such_set", f"--tfds_data_dir={tmp_path / 'tfds'}",
        f"--vocab_file={BERT_VOCAB}", f"--output_dir={tmp_path / 'o3'}")


def test_example_builder_rules():
    b = builder.ExampleBuilder(16, 101, 102, random.Random(0))
    assert b.add_line([1, 2, 3]) is None
    assert b.add_line(None) is not None  # a blank line ends the example
    assert b.add_line(None) is None and b.sentences == [[]]  # as the original
    b = builder.ExampleBuilder(16, 101, 102, random.Random(0))
    first, second, _ = b.add_line(list(range(1000, 1030)))  # one over-long line
    assert len(first) == 14 and second == [] and b.dropped == 16  # cut to max - 2, one segment
    feats = b.features(first, second)
    assert feats["input_ids"][0] == 101 and feats["input_ids"][15] == 102


def test_built_records_feed_a_pretraining_step(tmp_path):
    """Round trip: real text -> builder -> input pipeline -> pretraining steps on the default
    (fused, on CPUs) path, which move nearly every variable."""
    from electra_tf import host_calls, pretraining

    _build(SAMPLE / "corpus", tmp_path / "pretrain_tfrecords", max_seq_length=32)
    config = tiny_config(tmp_path, vocab_size=30522)
    files = data.check_files(config.pretrain_tfrecords, config.max_seq_length)
    batch = next(iter(data.pretraining_dataset(files, config.train_batch_size, 32, seed=0)))
    assert batch["input_ids"].shape == (8, 32) and batch["input_ids"].dtype == tf.int32
    strategy = tf.distribute.get_strategy()
    state = pretraining.create_state(config, pretraining.SpecialIds(), strategy)
    assert state.optimizer.fused  # one replica: all variables updated in one XLA computation
    assert state.model.encoder.transformer_layers[0].fused_kernels
    before = [v.numpy().copy() for v in state.model.trainable_variables]
    step = host_calls.run_steps(strategy, state.make_train_step(1, jit_compile=False))
    # Two steps: the warmup gives the first a learning rate of 0.
    step(iter(tf.data.Dataset.from_tensors(batch).repeat()), tf.constant(2))
    results = state.metrics.results()
    assert int(state.optimizer.iterations) == 2 and np.isfinite(results["loss"])
    assert share_changed(before, state.model.trainable_variables) > 0.9


def test_pretraining_passes_over_empty_shards_and_names_bad_files(tmp_path):
    """More workers than input files leave shards empty (as the original's builder does);
    the reader leaves them out, as the original's does, and names files it cannot use."""
    out = tmp_path / "pretrain_tfrecords"
    _build(SAMPLE / "corpus", out, max_seq_length=32, num_processes=2, num_out_files=4)
    shards = _shards(out)
    pattern = str(out / "pretrain_data.tfrecord-*")
    used = data.check_files(pattern, 32)
    assert 0 < len(used) < len(shards) == 4  # one file: one worker's shards hold nothing
    assert all(tf.data.TFRecordDataset(s).take(1).cardinality() != 0 for s in used)
    empty = sorted(set(shards) - set(used))
    with pytest.raises(data.InputError, match="hold no examples; rebuild them"):
        data.check_files(empty[0], 32)
    with pytest.raises(data.InputError, match="has length 32 but max_seq_length is 64"):
        data.check_files(pattern, 64)
    (out / "pretrain_data.tfrecord-foreign").write_text("not a record")
    with pytest.raises(data.InputError, match="tfrecord-foreign is not a readable TFRecord"):
        data.check_files(pattern, 32)


def test_the_summary_records_the_vocabulary_that_pretraining_checks(tmp_path):
    """build_summary.json records the vocabulary's size and fingerprint; data.check_vocabulary
    refuses another vocabulary (one line naming both files), also with a summary written before
    the fingerprint was recorded, or none (then by the largest id in the first records)."""
    from electra_tf import tokenization

    corpus = _corpus(tmp_path, a_txt=SAMPLE_TEXT.read_text(encoding="utf-8"))
    out = tmp_path / "out"
    summary = _build(corpus, out, num_out_files=2)
    tokens = tokenization.read_vocab(str(BERT_VOCAB))
    assert summary["vocab_size"] == len(tokens) == 30522
    assert summary["vocab_fingerprint"] == tokenization.vocab_fingerprint(tokens)
    files = _shards(out)
    data.check_vocabulary(files, str(BERT_VOCAB))  # the builder's own vocabulary passes

    swapped = tmp_path / "swapped.txt"  # same size, two tokens swapped: other ids
    swapped.write_text("\n".join([*tokens[:1000], tokens[1001], tokens[1000], *tokens[1002:]])
                       + "\n", encoding="utf-8")
    with pytest.raises(data.InputError) as error:
        data.check_vocabulary(files, str(swapped))
    message = str(error.value)
    assert "\n" not in message and str(swapped) in message and str(BERT_VOCAB) in message
    assert str(out / "build_summary.json") in message and "--vocab_file" in message

    small = tmp_path / "small.txt"
    small.write_text("\n".join(tokens[:4370]) + "\n", encoding="utf-8")
    old = {k: v for k, v in summary.items() if k not in ("vocab_size", "vocab_fingerprint")}
    (out / "build_summary.json").write_text(json.dumps(old))  # an older builder's summary
    with pytest.raises(data.InputError, match=r"holds token id \d+ but .*small.txt has only "
                                              r"4370 tokens"):
        data.check_vocabulary(files, str(small))
    data.check_vocabulary(files, str(swapped))  # neither size nor fingerprint recorded
    (out / "build_summary.json").unlink()
    with pytest.raises(data.InputError, match="holds token id"):
        data.check_vocabulary(files, str(small))
