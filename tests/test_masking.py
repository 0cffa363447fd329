"""Dynamic masking, token replacement and labels against the original's semantics."""

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from electra_tf import pretraining

SPECIAL = pretraining.SpecialIds()  # BERT's: [PAD]=0 [CLS]=101 [SEP]=102 [MASK]=103


def _batch(num_examples=3000, seq_length=64, seed=0):
    """Real-token lengths 4..64 with [CLS], [SEP] in the middle and at the end, a [MASK]
    already in the text of some examples, then padding."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((num_examples, seq_length), np.int32)
    mask = np.zeros_like(ids)
    for i in range(num_examples):
        length = int(rng.integers(4, seq_length + 1))
        ids[i, :length] = rng.integers(1000, 30000, length)
        ids[i, 0] = SPECIAL.cls
        ids[i, length // 2] = SPECIAL.sep
        ids[i, length - 1] = SPECIAL.sep
        if i % 5 == 0 and length > 5:
            ids[i, 1] = SPECIAL.mask
        mask[i, :length] = 1
    return ids, mask


@pytest.fixture(scope="module")
def masked():
    ids, mask = _batch()
    rng = tf.random.Generator.from_seed(7)
    out = pretraining.mask(tf.constant(ids), tf.constant(mask), 0.15, 9, SPECIAL, rng)
    return ids, mask, {k: v.numpy() for k, v in vars(out).items()}


def test_number_of_predictions_per_example(masked):
    ids, mask, out = masked
    real = mask.sum(-1)
    expected = np.maximum(1, np.minimum(9, np.round(real * 0.15).astype(int)))
    np.testing.assert_array_equal(out["masked_lm_weights"].sum(-1), expected)
    # Weights are a prefix: the first num_to_predict draws count.
    for w, n in zip(out["masked_lm_weights"], expected):
        assert w[:n].all() and not w[n:].any()


def test_specials_and_padding_are_never_drawn(masked):
    ids, mask, out = masked
    w = out["masked_lm_weights"] > 0
    drawn = np.take_along_axis(ids, out["masked_lm_positions"], axis=1)[w]
    assert not np.isin(drawn, [SPECIAL.cls, SPECIAL.sep, SPECIAL.mask, SPECIAL.pad]).any()
    assert (np.take_along_axis(mask, out["masked_lm_positions"], axis=1)[w] == 1).all()
    # Unused draws point at position 0 with id 0, as the original pads them.
    assert (out["masked_lm_positions"][~w] == 0).all() and (out["masked_lm_ids"][~w] == 0).all()
    np.testing.assert_array_equal(out["masked_lm_ids"][w], drawn)


def test_85_percent_mask_15_percent_kept_none_random(masked):
    ids, mask, out = masked
    changed = out["input_ids"] != ids
    # 0% random: a changed token is always [MASK], and only at drawn positions.
    assert (out["input_ids"][changed] == SPECIAL.mask).all()
    drawn = np.zeros_like(ids, bool)
    w = out["masked_lm_weights"] > 0
    for i in range(len(ids)):
        drawn[i, out["masked_lm_positions"][i][w[i]]] = True
    assert not (changed & ~drawn).any()
    # Positions drawn exactly once are [MASK] with probability 0.85.
    once = np.zeros_like(ids, bool)
    for i in range(len(ids)):
        positions, counts = np.unique(out["masked_lm_positions"][i][w[i]], return_counts=True)
        once[i, positions[counts == 1]] = True
    share = changed[once].mean()
    assert once.sum() > 10000
    assert abs(share - 0.85) < 0.015, share


def test_draws_are_uniform_over_candidates():
    # Fixed-length examples: every non-special position is equally likely.
    ids, mask = _batch(num_examples=4000, seq_length=16, seed=1)
    ids[:, :] = 2000
    ids[:, 0], ids[:, 15] = SPECIAL.cls, SPECIAL.sep
    mask[:] = 1
    out = pretraining.mask(tf.constant(ids), tf.constant(mask), 0.15, 2, SPECIAL,
                           tf.random.Generator.from_seed(3))
    positions = out.masked_lm_positions.numpy()[out.masked_lm_weights.numpy() > 0]
    counts = np.bincount(positions, minlength=16)
    assert counts[0] == 0 and counts[15] == 0
    assert stats.chisquare(counts[1:15]).pvalue > 0.001


def test_duplicates_are_drawn_with_replacement_and_collapse():
    # Three candidates and nine draws: duplicates are certain; the input shows one [MASK].
    ids = np.array([[101, 5000, 5001, 5002, 102]] * 200, np.int32)
    out = pretraining.mask(tf.constant(ids), tf.ones_like(ids), 0.9, 9, SPECIAL,
                           tf.random.Generator.from_seed(0))
    positions = out.masked_lm_positions.numpy()
    assert all(len(set(row[row > 0])) < (row > 0).sum() for row in positions)
    assert set(np.unique(out.input_ids.numpy())) <= {101, 102, 103, 5000, 5001, 5002}


def test_scatter_update_ignores_position_zero_and_averages_duplicates():
    sequence = tf.constant([[1, 2, 3, 4]])
    updated, mask = pretraining.scatter_update(sequence, tf.constant([[9, 10, 20, 7]]),
                                               tf.constant([[0, 2, 2, 3]]))
    # Position 0 untouched; position 2 gets (10 + 20) // 2 like the original's floordiv.
    np.testing.assert_array_equal(updated.numpy(), [[1, 2, 15, 7]])
    np.testing.assert_array_equal(mask.numpy(), [[0, 0, 1, 1]])


def test_a_sample_equal_to_the_original_is_labelled_real():
    input_ids = tf.constant([[101, 7, 8, 9, 102, 0]])
    positions = tf.constant([[1, 2, 3]])
    sampled = tf.constant([[7, 50, 9]])  # 7 and 9 re-sample the original token
    fake, replaced, labels = pretraining.replace_tokens(input_ids, sampled, positions)
    np.testing.assert_array_equal(fake.numpy(), [[101, 7, 50, 9, 102, 0]])
    np.testing.assert_array_equal(replaced.numpy(), [[0, 1, 1, 1, 0, 0]])
    np.testing.assert_array_equal(labels.numpy(), [[0, 0, 1, 0, 0, 0]])
    # Electric calls every replaced position fake.
    _, _, electric = pretraining.replace_tokens(input_ids, sampled, positions, True)
    np.testing.assert_array_equal(electric.numpy(), [[0, 1, 1, 1, 0, 0]])


def test_gumbel_sampling_follows_the_softmax():
    logits = tf.math.log(tf.constant([[[0.7, 0.2, 0.1, 0.0]]]))
    logits = tf.tile(logits, [20000, 1, 1])
    rng = tf.random.Generator.from_seed(5)
    samples = pretraining.sample_from_softmax(logits, rng).numpy().ravel()
    freq = np.bincount(samples, minlength=4) / len(samples)
    np.testing.assert_allclose(freq, [0.7, 0.2, 0.1, 0.0], atol=0.015)
    # disallow_correct pushes the disallowed token's probability to ~0.
    disallow = tf.one_hot(tf.zeros([20000, 1], tf.int32), 4)
    samples = pretraining.sample_from_softmax(logits, rng, disallow).numpy().ravel()
    assert (samples != 0).all()
