"""What proposes the replacement tokens, and how its embeddings relate to the discriminator's.

Every generator is a `Generator` (what pretraining.PretrainingModel calls), with its forward
pass and its own loss:
  MaskedLMGenerator  the original's: a (small) masked LM on the [MASK]ed input with vocabulary
                     logits at the masked positions only (also BERT's model itself, and the
                     discriminator's own encoder when untied_generator is false)
  TwoTowerGenerator  Electric's cloze model: a left-to-right and a right-to-left tower whose
                     outputs around each position predict its token
  UniformGenerator   uniformly random replacements (uniform_generator)

Embedding sharing (`embedding_sharing`; pretraining.PretrainingModel builds the encoders):
  tied    the generator uses the discriminator's whole embedding block (word, position and
          token-type tables, LayerNorm), as the original
  untied  the generator has its own (the original's untied_generator_embeddings)
  gdes    DeBERTa-v3's gradient-disentangled sharing (ResidualEmbeddings): the generator owns
          the tables and only its MLM loss trains them; the discriminator looks up
          stop_gradient(generator table) + a residual table of its own that starts at zero
"""

from __future__ import annotations

import abc
import dataclasses

import tensorflow as tf
from keras import ops

from electra_tf import fused, modeling
from electra_tf.masking import Batch, candidates_mask, weighted_mean


@dataclasses.dataclass
class Generated:
    """A generator's output for one batch."""
    logits: tf.Tensor  # [B, N, V] float32 at the masked positions
    loss: tf.Tensor  # scalar: the generator's own (maximum-likelihood) loss
    # [B, N] cross-entropy of `logits` at each draw's original token (the original's
    # mlm_output.per_example_loss): evaluation's masked_lm_loss pools these over the weighted
    # draws.
    draw_losses: tf.Tensor
    hidden: tf.Tensor | None = None  # [B, N, H] its encoder's output at the masked positions
    cloze_logits: tf.Tensor | None = None  # [B, L, V] at every position (Electric)


class Generator(abc.ABC):
    """What proposes the replacements: `__call__(batch, training)` gives its Generated;
    `layers` lists every layer it trains (in the order that fixes the checkpoint's variables),
    `encoder` is the encoder that reads its input (Electric's left-to-right tower; None without
    one) and `head` its MaskedLMHead (None without one)."""

    layers: list
    encoder: modeling.Encoder | None = None
    head: modeling.MaskedLMHead | None = None

    @abc.abstractmethod
    def build(self) -> None:
        """Creates the weights of the layers not built yet."""

    @abc.abstractmethod
    def __call__(self, batch: Batch, training) -> Generated:
        """Its proposal and its own loss on `batch`."""

    def model(self) -> modeling.ElectraGenerator | None:
        """The generator as a standalone Keras model sharing these weights, when it is a
        single-tower masked LM."""
        return None


class MaskedLMGenerator(Generator):
    """A masked LM: encoder on the [MASK]ed input, MaskedLMHead at the masked positions, tied to
    the encoder's word embeddings; its loss is the mean cross-entropy over the masked draws."""

    def __init__(self, encoder: modeling.Encoder):
        self.encoder = encoder
        self.head = modeling.MaskedLMHead.for_encoder(encoder, "generator_predictions")
        self.layers = [encoder, self.head]

    def build(self) -> None:
        modeling.build_once(self.encoder)
        modeling.build_once(self.head, (None, None, self.encoder.hidden_size))

    def __call__(self, batch: Batch, training) -> Generated:
        masked = batch.masked
        hidden = self.encoder(masked.input_ids, batch.input_mask, batch.segment_ids,
                              training=training)
        hidden = modeling.gather_positions(hidden, masked.masked_lm_positions)
        logits = self.head(hidden, self.encoder.embedding_table)
        losses = fused.softmax_cross_entropy(logits, masked.masked_lm_ids)
        return Generated(logits, weighted_mean(losses, masked.masked_lm_weights), losses,
                         hidden)

    def model(self) -> modeling.ElectraGenerator:
        model = modeling.ElectraGenerator(self.encoder, self.head, name="electra_generator")
        model.build()
        return model


class TwoTowerGenerator(Generator):
    """Electric's generator (Clark et al., EMNLP 2020): on the unmasked input, position i sees
    its left context through the LTR tower and its right context through the RTL tower; the
    cloze loss covers every maskable position, and the replacements come from the cloze
    distribution at the masked positions."""

    def __init__(self, ltr: modeling.Encoder, rtl: modeling.Encoder, special):
        self.encoder, self.rtl, self.special = ltr, rtl, special
        self.head = modeling.MaskedLMHead.for_encoder(ltr, "cloze_predictions")
        self.layers = [ltr, rtl, self.head]

    def build(self) -> None:
        modeling.build_once(self.encoder)
        modeling.build_once(self.rtl)
        modeling.build_once(self.head, (None, None, 2 * self.encoder.hidden_size))

    def __call__(self, batch: Batch, training) -> Generated:
        inputs = (batch.input_ids, batch.input_mask, batch.segment_ids)
        ltr = self.encoder(*inputs, training=training)
        rtl = self.rtl(*inputs, training=training)
        hidden = tf.concat([tf.roll(ltr, 1, axis=1), tf.roll(rtl, -1, axis=1)], -1)
        cloze_logits = self.head(hidden, self.encoder.embedding_table)
        weights = tf.cast(candidates_mask(batch.input_ids, batch.input_mask, self.special),
                          tf.float32)
        losses = fused.softmax_cross_entropy(cloze_logits, batch.input_ids)
        positions = batch.masked.masked_lm_positions
        return Generated(modeling.gather_positions(cloze_logits, positions),
                         weighted_mean(losses, weights),
                         modeling.gather_positions(losses, positions), cloze_logits=cloze_logits)


class UniformGenerator(Generator):
    """Replacement tokens uniformly at random over the vocabulary: zero logits, no weights.
    Its loss (ln V) is constant."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.layers: list = []

    def build(self) -> None:
        pass

    def __call__(self, batch: Batch, training) -> Generated:
        masked = batch.masked
        logits = tf.zeros(tf.concat([tf.shape(masked.masked_lm_ids), [self.vocab_size]], 0))
        losses = fused.softmax_cross_entropy(logits, masked.masked_lm_ids)
        return Generated(logits, weighted_mean(losses, masked.masked_lm_weights), losses)


class ResidualEmbeddings(modeling.Embeddings):
    """GDES (He et al., 2021, DeBERTaV3, section 3.2): the discriminator's word, position and
    token-type tables are stop_gradient(`shared`'s) + a residual of its own, initialised at
    zero, so that the discriminator's loss trains only the residual and `shared` (the
    generator's) learns from its MLM loss alone. The LayerNorm is the discriminator's own.

    >>> shared = modeling.Embeddings(vocab_size=10, embedding_size=4)
    >>> shared.build()
    >>> residual = ResidualEmbeddings(shared)
    >>> residual.build()
    >>> bool(ops.all(residual.word_embeddings == shared.word_embeddings))
    True
    """

    def __init__(self, shared: modeling.Embeddings, **kwargs):
        kwargs.setdefault("name", "embeddings")
        super().__init__(shared.vocab_size, shared.embedding_size,
                         shared.max_position_embeddings, shared.type_vocab_size,
                         shared.initializer_range, shared.dropout_rate, shared.layer_norm_eps,
                         shared.kernels, **kwargs)
        # Not tracked as a sublayer: the generator owns these weights.
        object.__setattr__(self, "shared", shared)

    def build(self, input_shape=None):
        def residual(name: str, rows: int):
            return self.add_weight(name=f"{name}_delta", shape=(rows, self.embedding_size),
                                   initializer="zeros")

        self.word_embeddings_delta = residual("word_embeddings", self.vocab_size)
        self.token_type_embeddings_delta = residual("token_type_embeddings",
                                                    self.type_vocab_size)
        self.position_embeddings_delta = residual("position_embeddings",
                                                  self.max_position_embeddings)
        self.layer_norm.build((None, None, self.embedding_size))
        self.built = True

    # Embeddings.call looks up these three: the summed tables.
    @property
    def word_embeddings(self):
        return ops.stop_gradient(self.shared.word_embeddings) + self.word_embeddings_delta

    @property
    def token_type_embeddings(self):
        return (ops.stop_gradient(self.shared.token_type_embeddings)
                + self.token_type_embeddings_delta)

    @property
    def position_embeddings(self):
        return (ops.stop_gradient(self.shared.position_embeddings)
                + self.position_embeddings_delta)

