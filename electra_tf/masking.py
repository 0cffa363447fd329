"""The input corruption the pretraining objectives share, as the original's
pretrain/pretrain_helpers.py computes it: dynamic masking, Gumbel-max sampling from the
generator, and putting the samples into the input.

  mask()                N draws with replacement over the maskable positions; 85% of them become
                        [MASK], 15% keep their token, none become a random token
  sample_from_softmax() Gumbel-max sampling from generator logits
  replace_tokens()      the corrupted input and the replaced-token labels

Randomness comes from a tf.random.Generator when one is given (a replica's own, checkpointed
stream), else from TensorFlow's global one.
"""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from electra_tf import fused, tokenization

REPLACE_WITH_MASK_PROB = 0.85  # of the masked positions; the other 15% keep the original token


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    """Vocabulary ids the objective needs; the original reads them from vocab.txt."""
    pad: int = 0
    cls: int = 101
    sep: int = 102
    mask: int = 103

    @classmethod
    def from_vocab(cls, vocab: dict[str, int], vocab_file: str = "vocab") -> SpecialIds:
        tokenization.check_vocab(vocab, vocab_file)
        return cls(pad=vocab["[PAD]"], cls=vocab["[CLS]"], sep=vocab["[SEP]"],
                   mask=vocab["[MASK]"])


def load_vocab(vocab_file: str) -> dict[str, int]:
    """token -> id from a BERT vocab.txt (one token per line)."""
    if not tf.io.gfile.exists(vocab_file):
        raise FileNotFoundError(f"vocab file {vocab_file} not found: put the vocabulary at "
                                "DATA_DIR/vocab.txt or set the vocab_file hparam")
    return {token: i for i, token in enumerate(tokenization.read_vocab(vocab_file))}


@dataclasses.dataclass
class MaskedInputs:
    input_ids: tf.Tensor  # [B, L] with [MASK] at 85% of the drawn positions
    masked_lm_positions: tf.Tensor  # [B, N]; 0 where weights are 0
    masked_lm_ids: tf.Tensor  # [B, N] the original tokens there; 0 where weights are 0
    masked_lm_weights: tf.Tensor  # [B, N] float, 1 for the first num_to_predict draws


@dataclasses.dataclass
class Batch:
    """A batch of examples and its masking: what every generator and objective starts from."""
    input_ids: tf.Tensor  # [B, L] int32, the original tokens
    input_mask: tf.Tensor  # [B, L] int32
    segment_ids: tf.Tensor  # [B, L] int32
    masked: MaskedInputs


def scatter_update(sequence, updates, positions):
    """Writes [B, N] `updates` into [B, L] int `sequence` at [B, N] `positions`.

    As the original: writes to position 0 are ignored (that is where unused draws point), and a
    position drawn several times receives the integer mean of its updates (the same value when
    the updates agree, as with [MASK]). Returns (updated sequence, [B, L] int32 updated mask)."""
    seq_length = sequence.shape[1] or tf.shape(sequence)[1]
    hits = tf.one_hot(positions, seq_length, dtype=tf.int32)  # [B, N, L]
    counts = tf.reduce_sum(hits, axis=1)  # [B, L]
    counts *= tf.concat([tf.zeros_like(counts[:, :1]), tf.ones_like(counts[:, 1:])], axis=1)
    summed = tf.reduce_sum(hits * tf.cast(updates, tf.int32)[:, :, None], axis=1)
    values = tf.math.floordiv(summed, tf.maximum(1, counts))
    updated_mask = tf.minimum(counts, 1)
    updated = (1 - updated_mask) * tf.cast(sequence, tf.int32) + updated_mask * values
    return updated, updated_mask


def candidates_mask(input_ids, input_mask, special: SpecialIds):
    """Positions that may be masked: real tokens other than [CLS], [SEP] and [MASK]."""
    ok = tf.cast(input_mask, tf.bool)
    for token in (special.sep, special.cls, special.mask):
        ok &= tf.not_equal(input_ids, token)
    return ok


def _uniform(rng: tf.random.Generator | None, shape):
    return tf.random.uniform(shape) if rng is None else rng.uniform(shape)


def mask(input_ids, input_mask, mask_prob: float, max_predictions_per_seq: int,
         special: SpecialIds, rng: tf.random.Generator | None = None) -> MaskedInputs:
    """The original's pretrain_helpers.mask() for uniform masking.

    Per example, N = max(1, min(max_predictions_per_seq, round(real tokens * mask_prob)))
    positions are drawn with replacement, uniformly over the candidates; tf.round rounds half to
    even, as in the original. Duplicated draws collapse into one masked token in the input but
    keep their weight in the MLM loss, as in the original."""
    input_ids = tf.cast(input_ids, tf.int32)
    batch_size, seq_length = input_ids.shape[0] or tf.shape(input_ids)[0], input_ids.shape[1]
    n = max_predictions_per_seq
    candidates = candidates_mask(input_ids, input_mask, special)

    num_tokens = tf.cast(tf.reduce_sum(tf.cast(input_mask, tf.int32), -1), tf.float32)
    num_to_predict = tf.maximum(1, tf.minimum(n, tf.cast(tf.round(num_tokens * mask_prob),
                                                         tf.int32)))
    weights = tf.cast(tf.sequence_mask(num_to_predict, n), tf.float32)
    # An example with nothing maskable has no predictions (the original would divide by zero).
    weights *= tf.cast(tf.reduce_any(candidates, -1, keepdims=True), tf.float32)

    # N categorical draws over the candidates by Gumbel-max: the same distribution as the
    # original's tf.random.categorical, but from the replica's own random stream.
    log_prob = tf.where(candidates, 0.0, -math.inf)  # uniform over candidates
    noisy = fused.add_gumbel_noise(log_prob[:, None, :], _uniform(rng, [batch_size, n, seq_length]))
    positions = tf.argmax(noisy, axis=-1, output_type=tf.int32)
    int_weights = tf.cast(weights, tf.int32)
    positions *= int_weights
    masked_lm_ids = tf.gather(input_ids, positions, batch_dims=1) * int_weights

    use_mask_token = tf.cast(_uniform(rng, [batch_size, n]) < REPLACE_WITH_MASK_PROB, tf.int32)
    masked_ids, _ = scatter_update(input_ids, tf.fill(tf.shape(positions), special.mask),
                                   positions * use_mask_token)
    return MaskedInputs(tf.stop_gradient(masked_ids), positions, masked_lm_ids, weights)


def sample_from_softmax(logits, rng: tf.random.Generator | None = None, disallow=None):
    """Gumbel-max sample of token ids from [B, N, V] logits (the original's sample_from_softmax,
    which returns the same argmax as a one-hot). `disallow` [B, N, V] subtracts 1000 first."""
    if disallow is not None:
        logits -= 1000.0 * disallow
    noisy = fused.add_gumbel_noise(logits, _uniform(rng, tf.shape(logits)))
    return tf.argmax(noisy, -1, output_type=tf.int32)


def replace_tokens(input_ids, sampled, masked_lm_positions, all_replaced_are_fake: bool = False):
    """Puts generator samples into the input (the original's _get_fake_data).

    Returns (fake input ids, [B, L] replaced mask, [B, L] discriminator labels). A position is
    fake (label 1) only where it was replaced *and* the sample differs from the original token;
    a sample equal to the original counts as real. Electric labels every replaced position fake
    (`all_replaced_are_fake`)."""
    fake_ids, replaced = scatter_update(input_ids, sampled, masked_lm_positions)
    if all_replaced_are_fake:
        return fake_ids, replaced, replaced
    return fake_ids, replaced, replaced * tf.cast(tf.not_equal(fake_ids, input_ids), tf.int32)


def weighted_mean(values, weights, axis=None):
    """sum(weights * values) / sum(weights) over `axis` (None: all), 0 without weight (the
    original's 1e-6 guard)."""
    return (tf.reduce_sum(weights * values, axis)
            / (tf.reduce_sum(weights, axis) + 1e-6))


def softmax_loss(logits, targets, weights):
    """Weighted mean token cross-entropy (the original's get_softmax_output)."""
    return weighted_mean(fused.softmax_cross_entropy(logits, targets), weights)


@dataclasses.dataclass
class Corrupted:
    """The generator's samples put into the input (the original's _get_fake_data)."""
    input_ids: tf.Tensor  # [B, L] the corrupted input
    sampled: tf.Tensor  # [B, N] the sampled token at each draw
    replaced: tf.Tensor  # [B, L] int, 1 where a sample was written
    labels: tf.Tensor  # [B, L] int, 1 where the token is fake (see replace_tokens)
    policy_logits: tf.Tensor  # [B, N, V] the logits the samples were drawn from


def corrupt(input_ids, masked: MaskedInputs, mlm_logits, temperature: float = 1.0,
            disallow_correct: bool = False, all_replaced_are_fake: bool = False,
            rng: tf.random.Generator | None = None) -> Corrupted:
    """Samples a token at every draw from the generator's [B, N, V] logits / temperature (never
    the original with disallow_correct), under stop-gradient, and writes the samples into the
    original input_ids: unmasking gives back input_ids exactly, as position 0 is never drawn."""
    # x / 1.0 == x: the default temperature skips a pass over [B, N, vocab].
    logits = mlm_logits if temperature == 1.0 else mlm_logits / temperature
    if disallow_correct:  # after the temperature, as the original's sample_from_softmax
        logits -= 1000.0 * tf.one_hot(masked.masked_lm_ids, tf.shape(logits)[-1])
    sampled = tf.stop_gradient(sample_from_softmax(logits, rng))
    fake_ids, replaced, labels = replace_tokens(input_ids, sampled, masked.masked_lm_positions,
                                                all_replaced_are_fake)
    return Corrupted(fake_ids, sampled, replaced, labels, logits)
