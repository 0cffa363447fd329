"""What the discriminator-sized model learns from the generator-corrupted input: ELECTRA's
replaced-token detection, the paper's "stepping stones" between BERT and ELECTRA (section 3.5,
Table 5), and Electric.

  objective       class                                   its loss (weighted by disc_weight)
  electra         ReplacedTokenDetection                  sigmoid cross-entropy, real tokens
  electra_15      ReplacedTokenDetection(masked_only)     the same at the masked positions only
  electric        Electric                                the same with the cloze correction
  replace_mlm     ReplaceMLM                              softmax cross-entropy, masked positions
  all_tokens_mlm  AllTokensMLM                            copy-mixture cross-entropy, real tokens
  mlm             (none: the generator is the model, as BERT)

Each objective creates its heads on the given encoder (`layers` lists what it trains), and
`__call__(batch, corrupted, generated, training)` returns (loss, outputs); `metrics` says what
it reports (name -> rule, see `mean` and `auc`).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import keras
import tensorflow as tf

from electra_tf import fused, modeling
from electra_tf.generators import Generated
from electra_tf.masking import Batch, Corrupted, softmax_loss

Outputs = dict[str, tf.Tensor]


# ------------------------------------------------------------------ metrics

def mean(rule: Callable[[Outputs], tuple]) -> tuple[Callable, Callable]:
    """A weighted mean; `rule(outputs)` gives (values, weights or None)."""
    return keras.metrics.Mean, rule


def auc(rule: Callable[[Outputs], tuple]) -> tuple[Callable, Callable]:
    """ROC AUC; `rule(outputs)` gives (labels, probabilities, weights)."""
    return (lambda name: keras.metrics.AUC(name=name, num_thresholds=1000)), rule


def _equal(a, b):
    return tf.cast(tf.equal(a, b), tf.float32)


def _detection_metrics() -> dict[str, tuple]:
    """A per-token replaced-token verdict (disc_probs, disc_preds) against disc_labels over
    disc_weights. The original's, except that its AUC counts padding as real tokens."""
    def correct(o):
        return _equal(o["disc_labels"], o["disc_preds"])

    return {
        "disc_accuracy": mean(lambda o: (correct(o), o["disc_weights"])),
        "disc_precision": mean(lambda o: (correct(o), tf.cast(o["disc_preds"], tf.float32)
                                          * o["disc_weights"])),
        "disc_recall": mean(lambda o: (correct(o), tf.cast(o["disc_labels"], tf.float32)
                                       * o["disc_weights"])),
        "disc_auc": auc(lambda o: (o["disc_labels"], o["disc_probs"], o["disc_weights"])),
    }


def _detection_outputs(labels, replaced_logits, weights) -> Outputs:
    return {"disc_labels": labels, "disc_probs": tf.sigmoid(replaced_logits),
            "disc_preds": tf.cast(replaced_logits > 0, tf.int32), "disc_weights": weights}


# ------------------------------------------------------------------ objectives

class ReplacedTokenDetection:
    """ELECTRA's discriminator (paper section 2): DiscriminatorHead on the encoder of the
    corrupted input, a logit per token for "replaced", sigmoid cross-entropy against the labels
    (replaced and different from the original), averaged over every real token; with
    `masked_only` (ELECTRA 15%), over the positions the masking drew."""

    all_replaced_are_fake = False  # a sample equal to the original token is real

    def __init__(self, encoder: modeling.Encoder, masked_only: bool = False):
        self.encoder = encoder
        self.masked_only = masked_only
        self.disc_head = modeling.DiscriminatorHead(encoder.hidden_size, encoder.hidden_act,
                                                    encoder.initializer_range, encoder.kernels,
                                                    name="discriminator_predictions")
        self.layers = [encoder, self.disc_head]
        self.metrics = {"disc_loss": mean(lambda o: (o["disc_loss"], None)),
                        **_detection_metrics()}

    def build(self) -> None:
        modeling.build_once(self.encoder)
        modeling.build_once(self.disc_head)

    def logits(self, batch: Batch, corrupted: Corrupted, generated: Generated, training):
        hidden = self.encoder(corrupted.input_ids, batch.input_mask, batch.segment_ids,
                              training=training)
        return self.disc_head(hidden)

    def __call__(self, batch: Batch, corrupted: Corrupted, generated: Generated,
                 training) -> tuple[tf.Tensor, Outputs]:
        logits = self.logits(batch, corrupted, generated, training)
        weights = tf.cast(corrupted.replaced if self.masked_only else batch.input_mask,
                          tf.float32)
        return self.outputs(logits, corrupted.labels, weights)

    def outputs(self, logits, labels, weights) -> tuple[tf.Tensor, Outputs]:
        losses = tf.nn.sigmoid_cross_entropy_with_logits(
            labels=tf.cast(labels, tf.float32), logits=logits) * weights
        loss = tf.reduce_sum(losses) / (1e-6 + tf.reduce_sum(weights))
        return loss, {"disc_loss": loss, "disc_logits": logits,
                      **_detection_outputs(labels, logits, weights)}

    def idle(self, batch: Batch, corrupted: Corrupted) -> tuple[tf.Tensor, Outputs]:
        """The outputs of a step that does not run the discriminator (two-stage training's
        first stage): zero logits with zero weight."""
        zeros = tf.zeros_like(batch.input_mask, tf.float32)
        return self.outputs(zeros, corrupted.labels, zeros)


class Electric(ReplacedTokenDetection):
    """Electric (Clark et al., EMNLP 2020) as the original's electric_objective: every
    replaced position is fake, and the logit gets stop_gradient(log q(token)) from the
    two-tower cloze model plus log(mask_prob / (1 - mask_prob)) (noise-contrastive
    estimation's prior)."""

    all_replaced_are_fake = True

    def __init__(self, encoder: modeling.Encoder, mask_prob: float):
        super().__init__(encoder)
        self.log_prior = math.log(mask_prob / (1 - mask_prob))

    def logits(self, batch, corrupted, generated, training):
        logits = super().logits(batch, corrupted, generated, training)
        log_q = tf.gather(tf.nn.log_softmax(generated.cloze_logits), corrupted.input_ids,
                          batch_dims=2)
        return logits + tf.stop_gradient(log_q) + self.log_prior


class ReplaceMLM:
    """Table 5's Replace MLM: masked language modelling on the generator-corrupted input. The
    masked positions hold generator samples instead of [MASK] (the masking's 85/15 split only
    shapes the generator's input), and the model predicts the original token there: mean
    softmax cross-entropy over the masking's draws, as the generator's MLM loss."""

    all_replaced_are_fake = False

    disc_head = None

    def __init__(self, encoder: modeling.Encoder):
        self.encoder = encoder
        self.mlm_head = _mlm_head(encoder)
        self.layers = [encoder, self.mlm_head]

        def fake(o):  # draws whose position the model saw with a wrong token
            seen = modeling.gather_positions(o["fake_input_ids"], o["masked_lm_positions"])
            return tf.cast(tf.not_equal(seen, o["masked_lm_ids"]), tf.float32)

        def correct(o):
            return _equal(o["replace_mlm_preds"], o["masked_lm_ids"])

        self.metrics = {
            "replace_mlm_loss": mean(lambda o: (o["replace_mlm_loss"], None)),
            "replace_mlm_accuracy": mean(lambda o: (correct(o), o["masked_lm_weights"])),
            "replace_mlm_fake_accuracy": mean(lambda o: (correct(o),
                                                         o["masked_lm_weights"] * fake(o))),
        }

    def build(self) -> None:
        modeling.build_once(self.encoder)
        modeling.build_once(self.mlm_head, (None, None, self.encoder.hidden_size))

    def __call__(self, batch: Batch, corrupted: Corrupted, generated: Generated,
                 training) -> tuple[tf.Tensor, Outputs]:
        masked = batch.masked
        hidden = self.encoder(corrupted.input_ids, batch.input_mask, batch.segment_ids,
                              training=training)
        hidden = modeling.gather_positions(hidden, masked.masked_lm_positions)
        logits = self.mlm_head(hidden, self.encoder.embedding_table)
        loss = softmax_loss(logits, masked.masked_lm_ids, masked.masked_lm_weights)
        return loss, {"replace_mlm_loss": loss,
                      "replace_mlm_preds": tf.argmax(logits, -1, output_type=tf.int32)}


class AllTokensMLM:
    """Table 5's All-Tokens MLM: on the generator-corrupted input, the model predicts the
    original identity of every real token through a copy mechanism. A copy probability
    D = sigmoid(-s) per token, s from a DiscriminatorHead (so that s, like ELECTRA's logit,
    is positive for "replaced" and the exported model is discriminator-shaped), mixes copying
    the input token with the model's MLM softmax q:
        p(x_t) = D_t [x_t = input_t] + (1 - D_t) q_t(x_t),
    and the loss is -log p(x_t) averaged over the real tokens (see docs/fidelity.md)."""

    all_replaced_are_fake = False

    def __init__(self, encoder: modeling.Encoder):
        self.encoder = encoder
        self.mlm_head = _mlm_head(encoder)
        self.disc_head = modeling.DiscriminatorHead(encoder.hidden_size, encoder.hidden_act,
                                                    encoder.initializer_range, encoder.kernels,
                                                    name="discriminator_predictions")
        self.layers = [encoder, self.mlm_head, self.disc_head]

        def correct(o):
            return _equal(o["all_tokens_mlm_preds"], o["input_ids"])

        self.metrics = {
            "all_tokens_mlm_loss": mean(lambda o: (o["all_tokens_mlm_loss"], None)),
            "all_tokens_mlm_accuracy": mean(lambda o: (correct(o), o["disc_weights"])),
            "all_tokens_mlm_fake_accuracy": mean(lambda o: (
                correct(o), o["disc_weights"] * tf.cast(o["disc_labels"], tf.float32))),
            "copy_probability": mean(lambda o: (1.0 - o["disc_probs"], o["disc_weights"])),
            **_detection_metrics(),
        }

    def build(self) -> None:
        modeling.build_once(self.encoder)
        modeling.build_once(self.mlm_head, (None, None, self.encoder.hidden_size))
        modeling.build_once(self.disc_head)

    def __call__(self, batch: Batch, corrupted: Corrupted, generated: Generated,
                 training) -> tuple[tf.Tensor, Outputs]:
        hidden = self.encoder(corrupted.input_ids, batch.input_mask, batch.segment_ids,
                              training=training)
        logits = self.mlm_head(hidden, self.encoder.embedding_table)  # [B, L, V]
        replaced_logits = self.disc_head(hidden)  # s; D = sigmoid(-s)
        log_copy, log_generate = tf.math.log_sigmoid(-replaced_logits), \
            tf.math.log_sigmoid(replaced_logits)
        log_q = -fused.softmax_cross_entropy(logits, batch.input_ids)
        copyable = tf.equal(corrupted.input_ids, batch.input_ids)
        log_p = tf.reduce_logsumexp(tf.stack(
            [tf.where(copyable, log_copy, -math.inf), log_generate + log_q]), axis=0)
        weights = tf.cast(batch.input_mask, tf.float32)
        loss = -tf.reduce_sum(weights * log_p) / (1e-6 + tf.reduce_sum(weights))
        return loss, {"all_tokens_mlm_loss": loss,
                      "all_tokens_mlm_preds": _mixture_argmax(logits, replaced_logits,
                                                              corrupted.input_ids),
                      **_detection_outputs(corrupted.labels, replaced_logits, weights)}


def _mlm_head(encoder: modeling.Encoder) -> modeling.MaskedLMHead:
    """The discriminator-sized model's own masked-LM head, tied to its word embeddings."""
    return modeling.MaskedLMHead(encoder.vocab_size, encoder.embedding_size, encoder.hidden_act,
                                 encoder.initializer_range, encoder.layer_norm_eps, encoder.kernels,
                                 name="mlm_predictions")


def _mixture_argmax(logits, replaced_logits, input_ids):
    """The most probable token of D [x = input] + (1 - D) softmax(logits): the input token
    when its mixture probability beats the softmax's best (times 1 - D)."""
    probs = tf.nn.softmax(logits)
    copy = tf.sigmoid(-replaced_logits)
    best = tf.argmax(logits, -1, output_type=tf.int32)
    p_best = (1.0 - copy) * tf.reduce_max(probs, -1)
    p_input = copy + (1.0 - copy) * tf.gather(probs, input_ids, batch_dims=2)
    return tf.stop_gradient(tf.where(p_input >= p_best, input_ids, best))


def build(objective: str, encoder: modeling.Encoder, mask_prob: float) -> Any:
    """The objective named by the `objective` hparam on the discriminator-sized `encoder`, or
    None for "mlm" (the generator is the model)."""
    return {"electra": lambda: ReplacedTokenDetection(encoder),
            "electra_15": lambda: ReplacedTokenDetection(encoder, masked_only=True),
            "electric": lambda: Electric(encoder, mask_prob),
            "replace_mlm": lambda: ReplaceMLM(encoder),
            "all_tokens_mlm": lambda: AllTokensMLM(encoder),
            "mlm": lambda: None}[objective]()
