"""experiments/detection_baselines.py: each detector finds what it can read and nothing more on
hand-made text with a planted bigram rule, and a saved pretraining run is judged end to end."""

import json
import sys

import numpy as np
import pytest

from conftest import REPO, save_pretraining_run, tiny_config

sys.path.insert(0, str(REPO / "experiments"))
import detection_baselines as db  # noqa: E402
import records  # noqa: E402

VOCAB = 50


def _chain(rng, rows, length=24):
    """Text in which each token follows from the one before (t -> 3t + 1 mod VOCAB): its
    bigrams say everything, its unigrams nothing (every token about equally frequent)."""
    ids = np.empty((rows, length), np.int64)
    ids[:, 0] = rng.integers(0, VOCAB, rows)
    for i in range(1, length):
        ids[:, i] = (3 * ids[:, i - 1] + 1) % VOCAB
    return ids


def _outputs(rng, batches, logit_knows):
    """Corrupted batches: 15% of tokens replaced by uniform draws; a discriminator logit that
    is the label plus noise where `logit_knows`, else noise alone."""
    out = []
    for _ in range(batches):
        ids = _chain(rng, 8)
        replaced = rng.random(ids.shape) < 0.15
        fake = np.where(replaced, rng.integers(0, VOCAB, ids.shape), ids)
        labels = (fake != ids).astype(np.int32)
        noise = rng.normal(size=ids.shape)
        out.append({"fake_input_ids": fake, "input_mask": np.ones_like(ids),
                    "disc_labels": labels,
                    "disc_logits": (2.0 * labels + noise if logit_knows else noise)})
    return out


def test_the_bigram_detector_reads_a_planted_bigram_rule_and_the_token_alone_does_not():
    rng = np.random.default_rng(0)
    text = _chain(rng, 400)
    counts = db.Counts.of([(text, np.ones_like(text))], VOCAB)
    aucs = db.fold_aucs(db.Positions.of(_outputs(rng, 8, logit_knows=False)), counts)
    assert set(aucs) == set(db.DETECTORS) and all(len(v) == 2 for v in aucs.values())
    assert min(aucs[db.BIGRAMS]) > 0.95
    assert max(abs(a - 0.5) for a in aucs[db.TOKEN] + aucs[db.DISCRIMINATOR]) < 0.1
    assert min(aucs[db.BIGRAMS_AND_DISCRIMINATOR]) > 0.95


def test_a_discriminator_and_the_bigrams_together_beat_either_when_each_knows_part():
    rng = np.random.default_rng(1)
    text = _chain(rng, 400)
    counts = db.Counts.of([(text, np.ones_like(text))], VOCAB)
    aucs = db.fold_aucs(db.Positions.of(_outputs(rng, 8, logit_knows=True)), counts)
    assert 0.8 < min(aucs[db.DISCRIMINATOR]) < 0.95  # label + noise: good, not perfect
    assert min(np.subtract(aucs[db.BIGRAMS_AND_DISCRIMINATOR], aucs[db.DISCRIMINATOR])) > 0.03


def test_labels_nothing_predicts_leave_every_fitted_detector_at_chance():
    """Labels drawn apart from the tokens: a rate or regression that saw the labels it is
    scored on would score above 0.5 here (the rates are counted per token, 50 tokens)."""
    rng = np.random.default_rng(2)
    text = _chain(rng, 400)
    counts = db.Counts.of([(text, np.ones_like(text))], VOCAB)
    outputs = _outputs(rng, 16, logit_knows=False)
    for out in outputs:
        out["disc_labels"] = (rng.random(out["disc_labels"].shape) < 0.3).astype(np.int32)
    aucs = db.fold_aucs(db.Positions.of(outputs), counts)
    for name in db.DETECTORS:
        assert max(abs(a - 0.5) for a in aucs[name]) < 0.05, (name, aucs[name])


def test_padding_is_no_token_and_no_neighbour():
    ids = np.array([[5, 6, 7, 0], [8, 9, 0, 0]])
    mask = (ids > 0).astype(np.int32)
    positions = db.Positions.of([{"fake_input_ids": ids, "input_mask": mask,
                                  "disc_labels": np.zeros_like(ids),
                                  "disc_logits": np.zeros(ids.shape, np.float32)}])
    assert positions.token.tolist() == [5, 6, 7, 8, 9]
    assert positions.left.tolist() == [db.EDGE, 5, 6, db.EDGE, 8]
    assert positions.right.tolist() == [6, 7, db.EDGE, 9, db.EDGE]
    text = np.array([[5, 6, 7]])
    features = db.features(positions, np.full(5, 0.1), db.Counts.of([(text, np.ones_like(text))],
                                                                     10), with_logit=False)
    # An edge is not a missing bigram: (8, 9) is one, (5, 6) and the edges are not.
    assert features[:, 3].tolist() == [0, 0, 0, 0, 1]
    assert features[:, 4].tolist() == [0, 0, 0, 1, 0]


def test_counts_and_pmi_of_hand_counted_text():
    ids = np.array([[1, 2, 3, 0], [1, 2, 2, 0]])
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 0]])
    counts = db.Counts.of([(ids, mask)], 5)
    assert counts.unigrams.tolist() == [0, 2, 3, 1, 0]  # the padding is not text
    assert counts.bigram(np.array([1, 2, 2, 3, db.EDGE]), np.array([2, 3, 2, 0, 1])).tolist() \
        == [2, 1, 1, 0, 0]
    pmi = counts.pmi(np.array([1, 3, db.EDGE]), np.array([2, 1, 1]))
    assert pmi[0] > 0 > pmi[1] and pmi[2] == 0.0


def test_a_saved_pretraining_run_is_judged_and_its_record_appended(data_dir, tmp_path):
    save_pretraining_run(data_dir, "tiny", tiny_config(data_dir), step=7)
    results = tmp_path / "detection.jsonl"
    db.main(["--data_dir", str(data_dir), "--model_name", "tiny", "--batches", "4",
             "--results", str(results)])
    record, = records.read(str(results))
    assert record["step"] == 7 and record["batches"] == 4 and record["batch_size"] == 8
    assert record["judged_files"] == ["pretrain_data.tfrecord-0-of-2"]  # 5 batches
    assert record["counted_tokens"] > 0 and 0 < record["replaced_share"] < 1
    assert all(len(v) == 2 and all(0 <= a <= 1 for a in v) for v in record["auc"].values())
    json.dumps(record)


def test_as_few_leading_files_are_judged_as_hold_the_batches_and_one_is_left_to_count(
        data_dir):
    files = sorted(str(p) for p in (data_dir / "pretrain_tfrecords").iterdir())  # 40 each
    assert db.leading_files(files, 40) == files[:1]
    assert db.leading_files(files, 41) == files[:1]  # never the last: it is counted
    with pytest.raises(db.TooLittleText, match="two files or more"):
        db.leading_files(files[:1], 8)


def test_flags_are_checked_before_any_model_is_read():
    with pytest.raises(SystemExit):
        db.parse_args(["--data_dir", "d", "--model_name", "m", "--results", "r",
                       "--batches", "2"])


def test_a_build_whose_move_was_interrupted_is_refused_with_an_error_line(data_dir, tmp_path):
    from electra_tf import data

    save_pretraining_run(data_dir, "tiny", tiny_config(data_dir), step=7)
    (data_dir / "pretrain_tfrecords" / "incomplete").mkdir()
    (data_dir / "pretrain_tfrecords" / data.PUBLISHING_SUMMARY).write_text("{}")
    with pytest.raises(SystemExit, match="^error: .*interrupted"):
        db.main(["--data_dir", str(data_dir), "--model_name", "tiny", "--batches", "4",
                 "--results", str(tmp_path / "detection.jsonl")])
    assert not (tmp_path / "detection.jsonl").exists()
