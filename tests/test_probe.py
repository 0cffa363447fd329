"""The linear probe (electra_tf.probe) of sentence and tagging tasks: what it reads, what it
scores, and its errors. Its run inside pretraining is in test_run_pretraining.py."""

import shutil

import numpy as np
import pytest

from conftest import BERT_VOCAB, TEST_DATA, tiny_config, write_sst_files
from electra_tf import modeling, probe, tokenization
from electra_tf.finetuning import pos
from electra_tf.hparam_parsing import ConfigError


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.WordPieceTokenizer(str(BERT_VOCAB))


def _encoder(seed: int = 0):
    import keras

    keras.utils.set_random_seed(seed)
    encoder = modeling.Encoder(**tiny_config().bert_config(), name="electra")
    modeling.build_once(encoder)
    return encoder


def test_scores_real_sentences_deterministically(tmp_path, tokenizer):
    write_sst_files(tmp_path / "sst")
    linear = probe.LinearProbe.from_directory(str(tmp_path / "sst"), tokenizer, 32)
    assert len(linear.train.labels) == 160 and len(linear.dev.labels) == 40
    encoder = _encoder()
    first, second = linear(encoder), linear(encoder)
    assert first == second  # the same weights give the same probe
    assert set(first) == {"probe_train_accuracy", "probe_dev_accuracy"}
    # 160 sentences in 2 x 32 standardised features of a random encoder: the training split
    # is fit above chance; dev is 40 sentences, so it is only bounded.
    assert first["probe_train_accuracy"] > 60
    assert 0 <= first["probe_dev_accuracy"] <= 100
    # Other weights, other features.
    assert linear(_encoder(seed=1)) != first


def test_a_label_carried_by_one_word_is_found(tmp_path, tokenizer):
    """Sentences that differ only in one word, the label following the word: a linear model on
    the mean-pooled features separates them on both splits."""
    folder = tmp_path / "sst"
    folder.mkdir()
    words = {"1": ["wonderful", "great", "superb"], "0": ["awful", "bad", "dreadful"]}
    for split, subjects in (("train", ["the film", "this movie", "the plot", "the cast"]),
                            ("dev", ["the story", "the acting"])):
        rows = [f"{subject} was {word}\t{label}" for subject in subjects
                for label, options in words.items() for word in options]
        (folder / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    scores = probe.LinearProbe.from_directory(str(folder), tokenizer, 16)(_encoder())
    assert scores["probe_train_accuracy"] == 100.0
    assert scores["probe_dev_accuracy"] == 100.0


def test_a_regression_task_reports_spearman(tmp_path, tokenizer):
    folder = tmp_path / "sts"
    folder.mkdir()
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    for split, n in (("train", 40), ("dev", 12)):
        rows = [f"{i}\tg\tf\ty\t{i}\ts\ts\tthe film was {'good ' * (i % 5)}\tit was fine\t{i % 5}"
                for i in range(n)]
        (folder / f"{split}.tsv").write_text(header + "\n" + "\n".join(rows) + "\n")
    scores = probe.LinearProbe.from_directory(str(folder), tokenizer, 32)(_encoder())
    assert set(scores) == {"probe_train_spearman", "probe_dev_spearman"}
    assert np.isfinite(list(scores.values())).all()


def test_errors_name_the_hparam(tmp_path, tokenizer):
    write_sst_files(tmp_path / "mine")
    with pytest.raises(ValueError, match=r"probe_task .*mine.*must be a GLUE task's or a "
                                         r"tagging task's.*'pos'"):
        probe.LinearProbe.from_directory(str(tmp_path / "mine"), tokenizer, 32)
    (tmp_path / "sst").mkdir()
    (tmp_path / "sst" / "train.tsv").write_text("sentence\tlabel\ngood\t1\nbad\t0\n")
    with pytest.raises(ValueError, match=r"probe_task .*sst.*dev"):
        probe.LinearProbe.from_directory(str(tmp_path / "sst"), tokenizer, 32)
    (tmp_path / "sst" / "dev.tsv").write_text("sentence\tlabel\ngood\t1\nfine\t1\n")
    with pytest.raises(ValueError, match="its dev split has a single label"):
        probe.LinearProbe.from_directory(str(tmp_path / "sst"), tokenizer, 32)
    with pytest.raises(ConfigError, match="'probe_task'.*is not a directory"):
        tiny_config(probe_task=str(tmp_path / "missing"))


def _pos_dir(tmp_path, train_sentences=120):
    folder = tmp_path / "pos"
    pos.write_task_files(str(TEST_DATA / "brown_tagged"), str(folder),
                         train_sentences=train_sentences)
    return folder


def test_a_tagging_task_is_probed_per_word(tmp_path, tokenizer):
    """pos from the shipped Brown slice: a label per word that fits, the first-wordpiece
    vectors as features, accuracy on both splits and unseen-word accuracy on dev."""
    folder = _pos_dir(tmp_path)
    linear = probe.LinearProbe.from_directory(str(folder), tokenizer, 32, max_examples=100)
    train = pos.read_task_file(str(folder / "train.txt"))[:100]
    dev = pos.read_task_file(str(folder / "dev.txt"))
    fits = linear.dev.arrays["tag_mask"].sum(-1).astype(int)
    assert len(linear.train.arrays["input_ids"]) == 100 and len(linear.dev.labels) == fits.sum()
    assert fits.sum() < sum(len(s.words) for s in dev)  # long sentences lose their last words
    assert list(linear.dev.labels[:3]) == [*dev[0].tags, *dev[1].tags[:2]]
    unseen = pos.unseen_words(train, dev, tokenizer.normalize)
    assert list(linear.dev.unseen) == [u for row, n in zip(unseen, fits) for u in row[:n]]
    assert linear.train.unseen is None
    encoder = _encoder()
    first = linear(encoder)
    assert first == linear(encoder)  # deterministic
    assert list(first) == ["probe_train_accuracy", "probe_dev_accuracy",
                           "probe_dev_unseen_accuracy"]
    # A random encoder's 32-wide word vectors say something of the word (random seeds 0-2:
    # 46-48% on dev), far above the commonest tag's share (NOUN, 24%); unseen words less.
    tags = list(linear.dev.labels)
    majority = 100 * max(tags.count(t) for t in set(tags)) / len(tags)
    assert first["probe_dev_accuracy"] > majority + 15
    assert first["probe_train_accuracy"] > first["probe_dev_accuracy"]
    assert 0 <= first["probe_dev_unseen_accuracy"] < first["probe_dev_accuracy"]


def test_word_features_are_the_first_wordpiece_vectors(tmp_path, tokenizer):
    folder = _pos_dir(tmp_path)
    linear = probe.LinearProbe.from_directory(str(folder), tokenizer, 32, max_examples=10)
    encoder = _encoder()
    features = probe.encoder_features(encoder)(linear.dev.arrays)
    arrays = linear.dev.arrays
    row = 1  # "The most positive element to emerge ...": "positive" is one piece, at 3
    sequence = encoder(arrays["input_ids"][row:row + 1], arrays["input_mask"][row:row + 1],
                       arrays["segment_ids"][row:row + 1], training=False).numpy()[0]
    offset = int(arrays["tag_mask"][0].sum())
    positions = arrays["tag_positions"][row, :int(arrays["tag_mask"][row].sum())]
    assert features.shape == (len(linear.dev.labels), 32)
    np.testing.assert_allclose(features[offset:offset + len(positions)], sequence[positions],
                               rtol=1e-4, atol=1e-5)


def test_chunking_is_probed_on_its_bioes_labels(tmp_path, tokenizer):
    folder = tmp_path / "chunk"
    folder.mkdir()
    for split in ("train", "dev"):
        shutil.copy(TEST_DATA / "chunk_sample.txt", folder / f"{split}.txt")
    linear = probe.LinearProbe.from_directory(str(folder), tokenizer, 32)
    assert {"B-NP", "E-NP", "S-VP", "O"} <= set(linear.train.labels)
    scores = linear(_encoder())
    assert scores["probe_train_accuracy"] == scores["probe_dev_accuracy"]  # the same file
    assert np.isnan(scores["probe_dev_unseen_accuracy"])  # every dev word is a train word


def test_tagging_errors_name_the_hparam(tmp_path, tokenizer):
    folder = tmp_path / "pos"
    folder.mkdir()
    (folder / "train.txt").write_text("the DET\ndog NOUN\n")
    with pytest.raises(ValueError, match=r"probe_task .*pos.*dev\.txt does not exist"):
        probe.LinearProbe.from_directory(str(folder), tokenizer, 32)
    (folder / "dev.txt").write_text("a DET\ncat NN\n")
    with pytest.raises(ValueError, match=r"probe_task .*pos.*dev\.txt:2: expected `word TAG`"):
        probe.LinearProbe.from_directory(str(folder), tokenizer, 32)
    (folder / "train.txt").write_text("the DET\na DET\n")
    (folder / "dev.txt").write_text("a DET\ncat NOUN\n")
    with pytest.raises(ValueError, match="its train split has a single label"):
        probe.LinearProbe.from_directory(str(folder), tokenizer, 32)
