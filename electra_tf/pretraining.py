"""The replaced-token-detection objective, as the original's run_pretraining.py and
pretrain/pretrain_helpers.py compute it, in TF2.

One training example goes through:
  mask()                dynamic masking: N draws with replacement over maskable positions,
                        85% of them become [MASK], 15% keep their token, none become random
  generator             a small masked LM; vocabulary logits only at the masked positions
  sample_from_softmax() Gumbel-max sampling at logits / temperature, under stop-gradient
  discriminator         labels a token fake only where it was replaced *and* differs
  loss                  gen_weight * MLM + disc_weight * sigmoid cross-entropy over real tokens

Variants (the original's hparams): electra_objective=false (BERT's MLM with the same masking),
uniform_generator, untied_generator=false (one set of weights), untied_generator_embeddings,
disallow_correct, temperature, and electric_objective (Electric's two-tower cloze generator).

Randomness comes from a tf.random.Generator: created under a tf.distribute strategy scope it
gives each replica its own stream, and it is checkpointed, so a resumed run continues the stream.
"""

from __future__ import annotations

import dataclasses
import math

import keras
import tensorflow as tf

from electra_tf import fused, modeling, optimization, tokenization, training
from electra_tf.config import PretrainingConfig

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


def softmax_loss(logits, targets, weights):
    """Weighted mean token cross-entropy (the original's get_softmax_output)."""
    label_losses = fused.softmax_cross_entropy(logits, targets)
    return tf.reduce_sum(weights * label_losses) / (tf.reduce_sum(weights) + 1e-6)


def _encoder(bert: dict, name: str, embedding_size: int | None = None, embeddings=None,
             causal: str | None = None, kernels: str = "auto") -> modeling.Encoder:
    return modeling.Encoder(**bert, embedding_size=embedding_size, embeddings=embeddings,
                            causal=causal, kernels=kernels, name=name)


class PretrainingModel(keras.Model):
    """Generator + discriminator with the original's weight tying, and the objective.

    Tying (the original's scopes): generator and discriminator share the whole embedding block
    (word, position, token type, LayerNorm) unless untied_generator_embeddings; the generator has
    its own `embeddings_project` when its hidden size differs. untied_generator=false uses the
    discriminator's encoder as the generator. electra_objective=false trains the full-size
    generator alone (BERT).
    """

    def __init__(self, config: PretrainingConfig, special: SpecialIds,
                 rng: tf.random.Generator | None = None, **kwargs):
        super().__init__(name="electra_pretraining", **kwargs)
        self.config = config
        self.special = special
        self.rng = rng
        bert = config.bert_config()
        gen_bert = config.generator_bert_config()
        embedding_size = config.resolved_embedding_size()
        self.electra = config.electra_objective or config.electric_objective

        # The discriminator (or, for BERT, the only model) is the original's "electra" scope.
        self.discriminator = _encoder(bert, "electra", embedding_size, kernels=config.kernels)
        shared = None if config.untied_generator_embeddings else self.discriminator.embeddings
        gen_embedding_size = None if config.untied_generator_embeddings else embedding_size

        self.generator = None  # uniform_generator has no network
        self.generator_rtl = None  # the second tower of Electric's generator
        if config.uniform_generator:
            pass
        elif not self.electra or not config.untied_generator:
            self.generator = self.discriminator
        elif config.two_tower_generator:  # untied embeddings: each tower its own, as the original
            self.generator = _encoder(gen_bert, "generator_ltr", gen_embedding_size, shared, "ltr",
                                      config.kernels)
            self.generator_rtl = _encoder(gen_bert, "generator_rtl", gen_embedding_size, shared,
                                          "rtl", config.kernels)
        else:
            self.generator = _encoder(gen_bert, "generator", gen_embedding_size, shared,
                                      kernels=config.kernels)

        self.mlm_head = None
        if self.generator is not None:
            self.mlm_head = modeling.MaskedLMHead(
                bert["vocab_size"], self.generator.embedding_size, bert["hidden_act"],
                bert["initializer_range"], config.kernels,
                name="cloze_predictions" if config.two_tower_generator else "generator_predictions")
        self.disc_head = modeling.DiscriminatorHead(
            bert["hidden_size"], bert["hidden_act"], bert["initializer_range"], config.kernels,
            name="discriminator_predictions") if self.electra else None

    def build(self, input_shape=None):
        for part in (self.discriminator, self.generator, self.generator_rtl, self.disc_head):
            if part is not None:
                modeling.build_once(part)
        if self.mlm_head is not None:
            width = self.generator.hidden_size * (2 if self.generator_rtl is not None else 1)
            modeling.build_once(self.mlm_head, (None, None, width))
        self.built = True

    # ----- generator -----
    def _generator_logits(self, masked: MaskedInputs, features, training):
        """[B, N, V] float32 logits at the masked positions."""
        if self.generator is None:  # uniform generator
            shape = tf.concat([tf.shape(masked.masked_lm_ids), [self.config.vocab_size]], 0)
            return tf.zeros(shape, tf.float32)
        hidden = self.generator(masked.input_ids, features["input_mask"],
                                features["segment_ids"], training=training)
        hidden = modeling.gather_positions(hidden, masked.masked_lm_positions)
        return self.mlm_head(hidden, self.generator.embedding_table)

    def _cloze_logits(self, features, training):
        """Electric's two-tower cloze model on the unmasked input: [B, L, V] logits, position i
        seeing the left context through the LTR tower and the right through the RTL tower."""
        ids, input_mask, segments = features["input_ids"], features["input_mask"], \
            features["segment_ids"]
        ltr = self.generator(ids, input_mask, segments, training=training)
        rtl = self.generator_rtl(ids, input_mask, segments, training=training)
        hidden = tf.concat([tf.roll(ltr, 1, axis=1), tf.roll(rtl, -1, axis=1)], -1)
        return self.mlm_head(hidden, self.generator.embedding_table)

    # ----- the objective -----
    def call(self, features, training=False):
        """Runs the objective on a batch of {input_ids, input_mask, segment_ids}.

        Returns a dict of tensors: `loss` (the scalar to minimise), the loss parts, and what
        the metrics and the TensorBoard text sample need."""
        c = self.config
        input_ids = tf.cast(features["input_ids"], tf.int32)
        input_mask = tf.cast(features["input_mask"], tf.int32)
        features = {"input_ids": input_ids, "input_mask": input_mask,
                    "segment_ids": tf.cast(features["segment_ids"], tf.int32)}
        masked = mask(input_ids, input_mask, c.mask_prob, c.max_predictions_per_seq,
                      self.special, self.rng)

        cloze_logits = None
        if c.two_tower_generator:
            cloze_logits = self._cloze_logits(features, training)
            mlm_logits = modeling.gather_positions(cloze_logits, masked.masked_lm_positions)
            cloze_weights = tf.cast(candidates_mask(input_ids, input_mask, self.special),
                                    tf.float32)
            gen_loss = softmax_loss(cloze_logits, input_ids, cloze_weights)
        else:
            mlm_logits = self._generator_logits(masked, features, training)
            gen_loss = softmax_loss(mlm_logits, masked.masked_lm_ids, masked.masked_lm_weights)
        out = {"gen_loss": gen_loss, "loss": c.gen_weight * gen_loss,
               "masked_input_ids": masked.input_ids,
               "masked_lm_positions": masked.masked_lm_positions,
               "masked_lm_ids": masked.masked_lm_ids,
               "masked_lm_weights": masked.masked_lm_weights,
               "masked_lm_preds": tf.argmax(mlm_logits, -1, output_type=tf.int32),
               "input_ids": input_ids, "input_mask": input_mask}
        if not self.electra:
            return out

        # Replace the masked tokens with generator samples. Unmasking gives back input_ids
        # exactly (position 0 is never a candidate), so the samples go into input_ids.
        disallow = tf.one_hot(masked.masked_lm_ids, c.vocab_size) if c.disallow_correct else None
        # x / 1.0 == x: the default temperature skips a pass over [B, N, vocab].
        logits = mlm_logits if c.temperature == 1.0 else mlm_logits / c.temperature
        sampled = tf.stop_gradient(sample_from_softmax(logits, self.rng, disallow))
        fake_ids, replaced, labels = replace_tokens(input_ids, sampled, masked.masked_lm_positions,
                                                    c.electric_objective)

        hidden = self.discriminator(fake_ids, input_mask, features["segment_ids"],
                                    training=training)
        logits = self.disc_head(hidden)
        if c.electric_objective:
            log_q = tf.gather(tf.nn.log_softmax(cloze_logits), fake_ids, batch_dims=2)
            logits += tf.stop_gradient(log_q) + math.log(c.mask_prob / (1 - c.mask_prob))
        weights = tf.cast(input_mask, tf.float32)
        losses = tf.nn.sigmoid_cross_entropy_with_logits(
            labels=tf.cast(labels, tf.float32), logits=logits) * weights
        disc_loss = tf.reduce_sum(losses) / (1e-6 + tf.reduce_sum(weights))
        out.update({"disc_loss": disc_loss, "loss": out["loss"] + c.disc_weight * disc_loss,
                    "sampled_tokids": sampled, "fake_input_ids": fake_ids,
                    "replaced_mask": replaced, "disc_labels": labels,
                    "disc_probs": tf.sigmoid(logits),
                    "disc_preds": tf.cast(logits > 0, tf.int32)})
        return out

    def discriminator_model(self) -> modeling.ElectraDiscriminator:
        """The discriminator as a standalone Keras model (shares these weights)."""
        model = modeling.ElectraDiscriminator(self.discriminator, self.disc_head,
                                              name="electra_discriminator")
        model.build()
        return model

    def generator_model(self) -> modeling.ElectraGenerator | None:
        """The (single-tower) generator as a standalone Keras model, if it has one."""
        if self.generator is None or self.generator_rtl is not None:
            return None
        model = modeling.ElectraGenerator(self.generator, self.mlm_head, name="electra_generator")
        model.build()
        return model


class PretrainingMetrics:
    """The original's eval metrics (masked_lm_accuracy, masked_lm_loss, sampled_masked_lm_accuracy,
    disc_loss, disc_auc, disc_accuracy, disc_precision, disc_recall) plus the total loss, the
    share of masked positions whose token really changed, and the gradient norm, as Keras
    metrics that replicas update in place. Create under the strategy scope.

    Differences from the original, on purpose: AUC weights out padding (the original counts each
    pad as a label-0, probability-0 token, which inflates it)."""

    def __init__(self, electra: bool):
        mean = keras.metrics.Mean
        names = ["loss", "masked_lm_loss", "masked_lm_accuracy", "grad_norm"]
        if electra:
            names += ["disc_loss", "sampled_masked_lm_accuracy", "disc_accuracy",
                      "disc_precision", "disc_recall", "replaced_fraction"]
        self.metrics = {name: mean(name=name) for name in names}
        if electra:
            self.metrics["disc_auc"] = keras.metrics.AUC(name="disc_auc", num_thresholds=1000)

    def update(self, out: dict, grad_norm=None) -> None:
        m = self.metrics
        m["loss"].update_state(out["loss"])
        m["masked_lm_loss"].update_state(out["gen_loss"])
        weights = out["masked_lm_weights"]
        m["masked_lm_accuracy"].update_state(
            tf.cast(tf.equal(out["masked_lm_preds"], out["masked_lm_ids"]), tf.float32), weights)
        if grad_norm is not None:
            m["grad_norm"].update_state(grad_norm)
        if "disc_loss" not in out:
            return
        m["disc_loss"].update_state(out["disc_loss"])
        m["sampled_masked_lm_accuracy"].update_state(
            tf.cast(tf.equal(out["sampled_tokids"], out["masked_lm_ids"]), tf.float32), weights)
        labels, preds = out["disc_labels"], out["disc_preds"]
        real = tf.cast(out["input_mask"], tf.float32)
        correct = tf.cast(tf.equal(labels, preds), tf.float32)
        m["disc_accuracy"].update_state(correct, real)
        m["disc_precision"].update_state(correct, tf.cast(preds, tf.float32) * real)
        m["disc_recall"].update_state(correct, tf.cast(labels, tf.float32) * real)
        m["disc_auc"].update_state(labels, out["disc_probs"], real)
        m["replaced_fraction"].update_state(tf.cast(labels, tf.float32),
                                            tf.cast(out["replaced_mask"], tf.float32))

    def results(self) -> dict[str, float]:
        # A Mean that saw nothing (grad_norm during evaluation) is left out.
        return {name: float(metric.result()) for name, metric in self.metrics.items()
                if not hasattr(metric, "count") or metric.count.numpy() > 0}

    def reset(self) -> None:
        for metric in self.metrics.values():
            metric.reset_state()


@dataclasses.dataclass
class PretrainingState:
    """Everything a pretraining run trains and checkpoints. Build it with create_state()."""
    model: PretrainingModel
    optimizer: keras.optimizers.Optimizer
    metrics: PretrainingMetrics
    rng: tf.random.Generator
    loss_scale: training.DynamicLossScale | None

    def checkpoint(self) -> tf.train.Checkpoint:
        parts = {"optimizer": self.optimizer, "rng": self.rng}
        if self.loss_scale is not None:
            parts["loss_scale"] = self.loss_scale
        return training.checkpoint(self.model, **parts)

    def make_train_step(self, num_replicas: int, jit_compile: bool):
        """The per-replica training step: forward and backward (XLA-compiled when asked), then
        training.apply_gradients (all-reduce, clip, AdamW) and the metrics."""
        model, variables, loss_scale = self.model, self.model.trainable_variables, self.loss_scale

        def forward_backward(features):
            with tf.GradientTape() as tape:
                out = model(features, training=True)
                loss = out["loss"] / num_replicas  # the replicas' gradients are summed
                if loss_scale is not None:
                    loss *= loss_scale.scale
            return tape.gradient(loss, variables), out

        forward_backward = training.maybe_jit(forward_backward, jit_compile)

        def train_step(features):
            grads, out = forward_backward(features)
            norm = training.apply_gradients(self.optimizer, grads, variables, loss_scale)
            self.metrics.update(out, norm)

        return train_step


def create_state(config: PretrainingConfig, special: SpecialIds,
                 strategy: tf.distribute.Strategy) -> PretrainingState:
    """Builds the model, optimizer, metrics, random stream and (float16) loss scale under the
    strategy's scope and the config's precision policy."""
    if config.seed is not None:
        keras.utils.set_random_seed(config.seed)  # dropout and initial weights
    with training.precision_policy(config.precision), strategy.scope():
        rng = (tf.random.Generator.from_seed(config.seed) if config.seed is not None
               else tf.random.Generator.from_non_deterministic_state())
        model = PretrainingModel(config, special, rng)
        model.build()
        optimizer = optimization.create_optimizer(
            config.learning_rate, config.num_train_steps, config.num_warmup_steps,
            config.weight_decay_rate, config.lr_decay_power, config.optimizer)
        optimizer.build(model.trainable_variables)
        loss_scale = (training.DynamicLossScale() if config.precision == "mixed_float16"
                      else None)
        return PretrainingState(model, optimizer, PretrainingMetrics(model.electra), rng,
                                loss_scale)
