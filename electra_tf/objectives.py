"""What the discriminator-sized model learns from the generator-corrupted input: ELECTRA's
replaced-token detection, the paper's "stepping stones" between BERT and ELECTRA (section 3.5,
Table 5), Electric, and BERT's masked LM.

  objective       class                     its loss (weighted by disc_weight)
  electra         ReplacedTokenDetection    sigmoid cross-entropy, real tokens
  electra_15      ReplacedTokenDetection15  the same at the masked positions only
  electric        Electric                  the same with the cloze correction
  replace_mlm     ReplaceMLM                softmax cross-entropy, masked positions
  all_tokens_mlm  AllTokensMLM              copy-mixture cross-entropy, real tokens
  mlm             MaskedLM                  none of its own: the generator is the model (BERT)

Every objective is an `Objective`: it creates its heads on the given encoder (`layers` lists
what it trains), `__call__(batch, corrupted, generated, training)` returns (loss, outputs), and
`metrics` says what it reports (name -> MetricRule). Its class also declares the matmuls of a
training step (`matmuls`, for flops.py) and the loss a model that learned nothing has
(`judged_replaced_share`, for health.py); the hparams' side of it (detection, its disc_weight
default, Electric's generator) is its line in config.OBJECTIVES. A new objective is its class
here, named by `name`, and that one line.
"""

from __future__ import annotations

import abc
import math
from typing import Callable, ClassVar, NamedTuple, Protocol

import keras
import tensorflow as tf

from electra_tf import fused, modeling
from electra_tf.config import PretrainingConfig
from electra_tf.generators import Generated
from electra_tf.masking import Batch, Corrupted, softmax_loss, weighted_mean

Outputs = dict[str, tf.Tensor]


class StepNetworks(Protocol):
    """The networks an objective's step runs, each as its forward matmuls (flops.Matmul) at
    the step's shape: what an objective counts its FLOPs with (flops.StepMatmuls is one; it
    imports this module)."""
    tokens: int  # batch_size x seq_length
    predictions: int  # rows of the masked-LM softmax

    def encoder(self, name: str) -> list:
        """The discriminator-sized encoder at every position."""

    def mlm_head(self, name: str, positions: int) -> list:
        """A MaskedLMHead on the discriminator-sized encoder at `positions` rows."""

    def discriminator_head(self, dense: str, logit: str) -> list:
        """A DiscriminatorHead at every position."""

    def generator(self) -> list:
        """The config's generator."""


# ------------------------------------------------------------------ metrics

class MetricRule(NamedTuple):
    """A metric an objective reports: `make(name)` creates its Keras metric, `rule(outputs)`
    gives the arguments of its update_state (the last one the sample weights, or None)."""
    make: Callable[[str], keras.metrics.Metric]
    rule: Callable[[Outputs], tuple]

    @classmethod
    def mean(cls, rule: Callable[[Outputs], tuple]) -> MetricRule:
        """A weighted mean; `rule(outputs)` gives (values, weights or None)."""
        return cls(lambda name: keras.metrics.Mean(name=name), rule)

    @classmethod
    def auc(cls, rule: Callable[[Outputs], tuple], num_thresholds: int) -> MetricRule:
        """ROC AUC by keras.metrics.AUC, tf.metrics.auc's trapezoids; `rule(outputs)` gives
        (labels, probabilities, weights)."""
        return cls(lambda name: keras.metrics.AUC(name=name, num_thresholds=num_thresholds),
                   rule)


def _equal(a, b):
    return tf.cast(tf.equal(a, b), tf.float32)


def _detection_metrics(config: PretrainingConfig) -> dict[str, MetricRule]:
    """A per-token replaced-token verdict (disc_probs, disc_preds) against disc_labels over
    disc_weights. The original's, except that its AUC counts padding as real tokens; the AUC
    at `auc_num_thresholds` thresholds (the original's 200 by default)."""
    def correct(o):
        return _equal(o["disc_labels"], o["disc_preds"])

    return {
        "disc_accuracy": MetricRule.mean(lambda o: (correct(o), o["disc_weights"])),
        "disc_precision": MetricRule.mean(lambda o: (correct(o),
                                                     tf.cast(o["disc_preds"], tf.float32)
                                                     * o["disc_weights"])),
        "disc_recall": MetricRule.mean(lambda o: (correct(o),
                                                  tf.cast(o["disc_labels"], tf.float32)
                                                  * o["disc_weights"])),
        "disc_auc": MetricRule.auc(lambda o: (o["disc_labels"], o["disc_probs"],
                                              o["disc_weights"]), config.auc_num_thresholds),
    }


def _detection_outputs(labels, replaced_logits, weights) -> Outputs:
    return {"disc_labels": labels, "disc_probs": tf.sigmoid(replaced_logits),
            "disc_preds": tf.cast(replaced_logits > 0, tf.int32), "disc_weights": weights}


# ------------------------------------------------------------------ the protocol

# name -> class: every Objective subclass that sets `name` (the `objective` hparam).
REGISTRY: dict[str, type[Objective]] = {}


class Objective(abc.ABC):
    """What pretraining.PretrainingModel calls on an objective. Built on the discriminator-sized
    `encoder`; `layers` lists every layer it trains (in the order that fixes the checkpoint's
    variables), `metrics` what it reports, `disc_head` its DiscriminatorHead (None without one:
    the exported discriminator then gets a fresh one)."""

    name: ClassVar[str]  # its `objective` hparam, and its line in config.OBJECTIVES
    # Every replaced position counts as fake, even where the sample equals the original token.
    all_replaced_are_fake: ClassVar[bool] = False
    # The generator is the model (BERT): no corruption, no loss of its own, no layers.
    generator_is_model: ClassVar[bool] = False

    encoder: modeling.Encoder
    layers: list
    metrics: dict[str, MetricRule]
    disc_head: modeling.DiscriminatorHead | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            REGISTRY[cls.name] = cls

    @abc.abstractmethod
    def __init__(self, encoder: modeling.Encoder, config: PretrainingConfig):
        """Creates its heads on `encoder`."""

    def build(self) -> None:
        """Creates the weights of the layers not built yet."""
        modeling.build_once(self.encoder)
        for layer in self.layers[1:]:
            modeling.build_once(layer, (None, None, self.encoder.hidden_size))

    @abc.abstractmethod
    def __call__(self, batch: Batch, corrupted: Corrupted, generated: Generated,
                 training) -> tuple[tf.Tensor, Outputs]:
        """Its loss (before disc_weight) and the outputs its metrics read."""

    def idle(self, batch: Batch, corrupted: Corrupted) -> tuple[tf.Tensor, Outputs]:
        """The outputs of a step that does not run it (two-stage training's first stage)."""
        raise TypeError(f"objective {self.name!r} has no idle outputs: two_stage trains only "
                        "replaced-token detection")

    @classmethod
    @abc.abstractmethod
    def matmuls(cls, step: StepNetworks) -> list:
        """The matmuls of one training step's forward pass: the generator's and its own."""

    @classmethod
    def judged_replaced_share(cls, mask_prob: float) -> float | None:
        """The share of replaced tokens among those its discriminator judges, per unit of
        replaced_fraction: the base rate whose entropy is a disc_loss that learned nothing
        (health's trivial_loss). None: no such base rate to check."""
        return None


# ------------------------------------------------------------------ objectives

class ReplacedTokenDetection(Objective):
    """ELECTRA's discriminator (paper section 2): DiscriminatorHead on the encoder of the
    corrupted input, a logit per token for "replaced", sigmoid cross-entropy against the labels
    (replaced and different from the original), averaged over every real token (with
    `masked_only`, ELECTRA 15%: over the positions the masking drew)."""

    name = "electra"
    masked_only: ClassVar[bool] = False

    def __init__(self, encoder: modeling.Encoder, config: PretrainingConfig):
        self.encoder = encoder
        self.disc_head = modeling.DiscriminatorHead.for_encoder(encoder)
        self.layers = [encoder, self.disc_head]
        # The original's evaluation disc_loss: the mean over examples of each one's loss
        # (examples with no token to judge, possible with masked_only, left out). As its
        # metric_fn, none at disc_weight 0, where the discriminator does not train.
        self.metrics = {"disc_loss": MetricRule.mean(lambda o: (
                            o["disc_example_losses"],
                            tf.cast(tf.reduce_any(o["disc_weights"] > 0, -1), tf.float32))),
                        **_detection_metrics(config)} if config.disc_weight > 0 else {}

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
            labels=tf.cast(labels, tf.float32), logits=logits)
        loss = weighted_mean(losses, weights)
        return loss, {"disc_loss": loss, "disc_logits": logits,
                      "disc_example_losses": weighted_mean(losses, weights, axis=-1),
                      **_detection_outputs(labels, logits, weights)}

    def idle(self, batch: Batch, corrupted: Corrupted) -> tuple[tf.Tensor, Outputs]:
        """The outputs of a step that does not run the discriminator (two-stage training's
        first stage): zero logits with zero weight."""
        zeros = tf.zeros_like(batch.input_mask, tf.float32)
        return self.outputs(zeros, corrupted.labels, zeros)

    @classmethod
    def matmuls(cls, step: StepNetworks) -> list:
        # Every position is judged (ELECTRA 15% too: it weighs 15% of them).
        return (step.encoder("discriminator")
                + step.discriminator_head("discriminator head", "discriminator logit")
                + step.generator())

    @classmethod
    def judged_replaced_share(cls, mask_prob: float) -> float | None:
        return 1.0 if cls.masked_only else mask_prob


class ReplacedTokenDetection15(ReplacedTokenDetection):
    """Table 5's ELECTRA 15%: the discriminator's loss at the masked positions only."""

    name = "electra_15"
    masked_only = True


class Electric(ReplacedTokenDetection):
    """Electric (Clark et al., EMNLP 2020) as the original's electric_objective: every
    replaced position is fake, and the logit gets stop_gradient(log q(token)) from the
    two-tower cloze model plus log(mask_prob / (1 - mask_prob)) (noise-contrastive
    estimation's prior)."""

    name = "electric"
    all_replaced_are_fake = True

    def __init__(self, encoder: modeling.Encoder, config: PretrainingConfig):
        super().__init__(encoder, config)
        self.log_prior = math.log(config.mask_prob / (1 - config.mask_prob))

    def logits(self, batch, corrupted, generated, training):
        logits = super().logits(batch, corrupted, generated, training)
        log_q = tf.gather(tf.nn.log_softmax(generated.cloze_logits), corrupted.input_ids,
                          batch_dims=2)
        return logits + tf.stop_gradient(log_q) + self.log_prior

    @classmethod
    def judged_replaced_share(cls, mask_prob: float) -> float | None:
        return None  # a noise-contrastive loss has no such base rate


class ReplaceMLM(Objective):
    """Table 5's Replace MLM: masked language modelling on the generator-corrupted input. The
    masked positions hold generator samples instead of [MASK] (the masking's 85/15 split only
    shapes the generator's input), and the model predicts the original token there: mean
    softmax cross-entropy over the masking's draws, as the generator's MLM loss."""

    name = "replace_mlm"

    def __init__(self, encoder: modeling.Encoder, config: PretrainingConfig):
        self.encoder = encoder
        self.mlm_head = modeling.MaskedLMHead.for_encoder(encoder, "mlm_predictions")
        self.layers = [encoder, self.mlm_head]

        def fake(o):  # draws whose position the model saw with a wrong token
            seen = modeling.gather_positions(o["fake_input_ids"], o["masked_lm_positions"])
            return tf.cast(tf.not_equal(seen, o["masked_lm_ids"]), tf.float32)

        def correct(o):
            return _equal(o["replace_mlm_preds"], o["masked_lm_ids"])

        self.metrics = {
            "replace_mlm_loss": MetricRule.mean(lambda o: (o["replace_mlm_loss"], None)),
            "replace_mlm_accuracy": MetricRule.mean(lambda o: (correct(o),
                                                               o["masked_lm_weights"])),
            "replace_mlm_fake_accuracy": MetricRule.mean(
                lambda o: (correct(o), o["masked_lm_weights"] * fake(o))),
        }

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

    @classmethod
    def matmuls(cls, step: StepNetworks) -> list:
        # Its own MLM head at the drawn positions.
        return (step.encoder("discriminator") + step.mlm_head("replace MLM", step.predictions)
                + step.generator())


class AllTokensMLM(Objective):
    """Table 5's All-Tokens MLM: on the generator-corrupted input, the model predicts the
    original identity of every real token through a copy mechanism. A copy probability
    D = sigmoid(-s) per token, s from a DiscriminatorHead (so that s, like ELECTRA's logit,
    is positive for "replaced" and the exported model is discriminator-shaped), mixes copying
    the input token with the model's MLM softmax q:
        p(x_t) = D_t [x_t = input_t] + (1 - D_t) q_t(x_t),
    and the loss is -log p(x_t) averaged over the real tokens (see docs/fidelity.md)."""

    name = "all_tokens_mlm"

    def __init__(self, encoder: modeling.Encoder, config: PretrainingConfig):
        self.encoder = encoder
        self.mlm_head = modeling.MaskedLMHead.for_encoder(encoder, "mlm_predictions")
        self.disc_head = modeling.DiscriminatorHead.for_encoder(encoder)
        self.layers = [encoder, self.mlm_head, self.disc_head]

        def correct(o):
            return _equal(o["all_tokens_mlm_preds"], o["input_ids"])

        self.metrics = {
            "all_tokens_mlm_loss": MetricRule.mean(lambda o: (o["all_tokens_mlm_loss"], None)),
            "all_tokens_mlm_accuracy": MetricRule.mean(lambda o: (correct(o),
                                                                  o["disc_weights"])),
            "all_tokens_mlm_fake_accuracy": MetricRule.mean(lambda o: (
                correct(o), o["disc_weights"] * tf.cast(o["disc_labels"], tf.float32))),
            # The MLM softmax q alone at the replaced tokens, where the mixture's prediction is
            # the wrong input token whenever the copy head fails to detect: what q has learnt
            # to reconstruct, as replace_mlm_fake_accuracy is for Replace MLM.
            "all_tokens_mlm_softmax_fake_accuracy": MetricRule.mean(lambda o: (
                _equal(o["all_tokens_mlm_softmax_preds"], o["input_ids"]),
                o["disc_weights"] * tf.cast(o["disc_labels"], tf.float32))),
            "copy_probability": MetricRule.mean(lambda o: (1.0 - o["disc_probs"],
                                                           o["disc_weights"])),
            **_detection_metrics(config),
        }

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
        loss = -weighted_mean(log_p, weights)
        best = tf.argmax(logits, -1, output_type=tf.int32)  # the softmax's own prediction
        return loss, {"all_tokens_mlm_loss": loss,
                      "all_tokens_mlm_preds": _mixture_argmax(logits, best, replaced_logits,
                                                              corrupted.input_ids),
                      "all_tokens_mlm_softmax_preds": best,
                      **_detection_outputs(corrupted.labels, replaced_logits, weights)}

    @classmethod
    def matmuls(cls, step: StepNetworks) -> list:
        # The MLM head and the copy probability's DiscriminatorHead at every token.
        return (step.encoder("discriminator") + step.mlm_head("all-tokens MLM", step.tokens)
                + step.discriminator_head("copy head", "copy logit") + step.generator())


class MaskedLM(Objective):
    """BERT: the generator, a masked LM on the discriminator-sized encoder, is the model; no
    corruption, and nothing of its own to train or report."""

    name = "mlm"
    generator_is_model = True

    def __init__(self, encoder: modeling.Encoder, config: PretrainingConfig):
        self.encoder = encoder
        self.layers = []
        self.metrics = {}

    def __call__(self, batch, corrupted, generated, training):
        raise TypeError("objective 'mlm' has no loss of its own: the generator's is the model's")

    @classmethod
    def matmuls(cls, step: StepNetworks) -> list:
        return step.encoder("masked LM") + step.mlm_head("masked LM", step.predictions)


def _mixture_argmax(logits, best, replaced_logits, input_ids):
    """The most probable token of D [x = input] + (1 - D) softmax(logits): the input token
    when its mixture probability beats the softmax's best (`best`, the logits' argmax, times
    1 - D)."""
    probs = tf.nn.softmax(logits)
    copy = tf.sigmoid(-replaced_logits)
    p_best = (1.0 - copy) * tf.reduce_max(probs, -1)
    p_input = copy + (1.0 - copy) * tf.gather(probs, input_ids, batch_dims=2)
    return tf.stop_gradient(tf.where(p_input >= p_best, input_ids, best))
