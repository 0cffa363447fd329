"""The linear probe (electra_tf.probe): what it reads, what it scores, and its errors. Its run
inside pretraining is in test_run_pretraining.py."""

import numpy as np
import pytest

from conftest import BERT_VOCAB, tiny_config, write_sst_files
from electra_tf import config as config_lib
from electra_tf import modeling, probe, tokenization


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
    assert len(linear.train["label"]) == 160 and len(linear.dev["label"]) == 40
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
    with pytest.raises(ValueError, match=r"probe_task .*mine.*must be a GLUE task's"):
        probe.LinearProbe.from_directory(str(tmp_path / "mine"), tokenizer, 32)
    (tmp_path / "sst").mkdir()
    (tmp_path / "sst" / "train.tsv").write_text("sentence\tlabel\ngood\t1\nbad\t0\n")
    with pytest.raises(ValueError, match=r"probe_task .*sst.*dev"):
        probe.LinearProbe.from_directory(str(tmp_path / "sst"), tokenizer, 32)
    (tmp_path / "sst" / "dev.tsv").write_text("sentence\tlabel\ngood\t1\nfine\t1\n")
    with pytest.raises(ValueError, match="its dev split has a single label"):
        probe.LinearProbe.from_directory(str(tmp_path / "sst"), tokenizer, 32)
    with pytest.raises(config_lib.ConfigError, match="'probe_task'.*is not a directory"):
        tiny_config(probe_task=str(tmp_path / "missing"))
