"""The TFRecord builder (the original's packing) and the tensorflow-text tokenizer."""

import json

import numpy as np
import pytest
import tensorflow as tf
from official.nlp.tools import tokenization as reference

from conftest import BERT_VOCAB, SAMPLE, SHARED_DATA
from electra_tf import data
from electra_tf.tokenization import WordPieceTokenizer
from pretrain_data import build_pretraining_dataset as builder

HARD_CASES = [
    "Café naïve RÉSUMÉ Ångström", "北京大学 and 東京", "emoji 🙂👍 mixed", "tab\tand\u00a0nbsp",
    "control\x00chars\x07here\u200b", "a" * 250 + " short", "é" * 150, "", "   ",
    "don't stop-believing... (ok)?", "\ufeffbom start", "ﬁ ligature and Ⅻ numeral",
]


@pytest.mark.parametrize("lower", [True, False])
def test_tokenizer_matches_the_reference_full_tokenizer(lower):
    ours = WordPieceTokenizer(str(BERT_VOCAB), do_lower_case=lower)
    ref = reference.FullTokenizer(str(BERT_VOCAB), do_lower_case=lower)
    # tf-models-official's copy allows 400 characters a word; ELECTRA's original allows 200.
    ref.wordpiece_tokenizer.max_input_chars_per_word = 200
    lines = HARD_CASES[:]
    for corpus in (SAMPLE / "corpus" / "enwiki_sample.txt", SHARED_DATA / "corpora" / "brown.txt"):
        lines += corpus.read_text(encoding="utf-8").split("\n")[:400]
    expected = [ref.convert_tokens_to_ids(ref.tokenize(line)) for line in lines]
    got = ours.tokenize_to_ids(lines)
    mismatches = [(line, g, e) for line, g, e in zip(lines, got, expected) if g != e]
    assert not mismatches, mismatches[:3]


def _read(files, seq_length):
    ds = tf.data.TFRecordDataset(files).map(lambda r: data.decode_record(r, seq_length))
    return [{k: v.numpy() for k, v in ex.items()} for ex in ds]


def test_builder_packs_like_the_original(tmp_path):
    corpus = SAMPLE / "corpus"
    summary = builder.build(str(corpus), str(BERT_VOCAB), str(tmp_path / "a"),
                            max_seq_length=64, num_out_files=3, seed=3)
    files = sorted(str(p) for p in (tmp_path / "a").glob("pretrain_data.tfrecord-*-of-3"))
    assert len(files) == 3 and not list((tmp_path / "a").glob("*.incomplete"))
    examples = _read(files, 64)
    assert len(examples) == summary["examples"] > 500
    single = 0
    for ex in examples:
        n = ex["input_mask"].sum()
        assert ex["input_mask"][:n].all() and not ex["input_mask"][n:].any()
        ids, seg = ex["input_ids"], ex["segment_ids"]
        assert ids[0] == 101 and ids[n - 1] == 102 and not ids[n:].any()
        seps = np.flatnonzero(ids[:n] == 102)
        assert len(seps) in (1, 2)
        assert not seg[:seps[0] + 1].any() and seg[seps[0] + 1:n].all() and not seg[n:].any()
        single += len(seps) == 1
    assert single == summary["single_segment"]
    assert json.loads((tmp_path / "a" / "build_summary.json").read_text())["examples"] == \
        len(examples)
    # Deterministic for a seed.
    builder.build(str(corpus), str(BERT_VOCAB), str(tmp_path / "b"), max_seq_length=64,
                  num_out_files=3, seed=3)
    again = sorted(str(p) for p in (tmp_path / "b").glob("pretrain_data.tfrecord-*"))
    assert all(open(a, "rb").read() == open(b, "rb").read() for a, b in zip(files, again))


def test_example_builder_rules():
    import random
    b = builder.ExampleBuilder(16, 101, 102, random.Random(0))
    assert b.add_line([1, 2, 3]) is None
    assert b.add_line(None) is not None  # a blank line ends the example
    assert b.add_line(None) is None and b.sentences == [[]]  # as the original
    b = builder.ExampleBuilder(16, 101, 102, random.Random(0))
    first, second, _ = b.add_line(list(range(1000, 1030)))  # one over-long line
    assert len(first) == 14 and second == []  # cut to max - 2, one segment
    feats = b.features(first, second)
    assert feats["input_ids"][0] == 101 and feats["input_ids"][15] == 102


def test_builder_errors(tmp_path):
    with pytest.raises(ValueError, match="is not a directory"):
        builder.build(str(tmp_path / "nope"), str(BERT_VOCAB), str(tmp_path / "o"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "a.txt").write_text("\n\n")
    with pytest.raises(ValueError, match="hold no text"):
        builder.build(str(tmp_path / "empty"), str(BERT_VOCAB), str(tmp_path / "o"),
                      num_out_files=2)
