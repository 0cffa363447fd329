"""Pretraining: a generator and an objective composed into one Keras model, the training
algorithms, the metrics and the training state.

One training example goes through:
  masking.mask()     dynamic masking (masking.py: the corruption every objective shares)
  generator          proposes tokens at the masked positions (generators.py)
  masking.corrupt()  Gumbel-max samples put into the input, under stop-gradient
  objective          the discriminator-sized model learns from the corrupted input
                     (objectives.py); under "mlm" the generator is the model (BERT)
  loss               gen_weight * generator loss + disc_weight * objective loss

What runs, per `objective` (the generator is the original's small masked LM unless
uniform_generator or two_tower_generator says otherwise):

  objective       generator (forward, backward)     discriminator-sized model (forward, backward)
  electra         masked LM on [MASK]ed input        encoder + DiscriminatorHead, every token
  electra_15      masked LM                          the same, loss at the masked positions
  electric        two-tower cloze model              encoder + DiscriminatorHead, every token
  replace_mlm     masked LM                          encoder + MaskedLMHead at the masked positions
  all_tokens_mlm  masked LM                          encoder + MaskedLMHead at every position +
                                                     DiscriminatorHead (the copy probability)
  mlm             the model itself, encoder + MaskedLMHead at the masked positions

Training algorithms (`training_algorithm`, paper section 3.2):
  joint        the sum of both losses, every step (the original)
  two_stage    steps [0, n): the generator alone with its MLM loss; at step n the
               discriminator's encoder is set to the generator's; steps [n, 2n): the
               discriminator alone, the generator frozen (no gradient, no update: optimizer's
               `freeze`); n = num_train_steps / 2, each stage with its own learning-rate
               schedule. The stage follows the optimizer's step inside the compiled step.
  adversarial  the generator maximises the discriminator's loss on its samples by REINFORCE
               with a learned baseline (paper Appendix F), optionally plus its MLM loss

Randomness comes from a tf.random.Generator: created under a tf.distribute strategy scope it
gives each replica its own stream, and it is checkpointed, so a resumed run continues the stream.
"""

from __future__ import annotations

import dataclasses
import math
import os

import keras
import tensorflow as tf

from electra_tf import config as config_lib
from electra_tf import (checkpoint_names, checkpoints, distribution, files, fused, keras_saving,
                        masking, model_files, modeling, objectives, optimization, resume,
                        tf1_checkpoint)
from electra_tf.config import PretrainingConfig
from electra_tf.generators import (Generated, Generator, MaskedLMGenerator, ResidualEmbeddings,
                                   TwoTowerGenerator, UniformGenerator)
from electra_tf.hparam_parsing import ConfigError
# The corruption helpers are part of this module's interface too.
from electra_tf.masking import (REPLACE_WITH_MASK_PROB, SpecialIds, load_vocab,  # noqa: F401
                                mask, replace_tokens, sample_from_softmax, scatter_update)
from electra_tf.objectives import MetricRule


def _encoder(bert: dict, name: str, embedding_size: int | None = None, embeddings=None,
             causal: str | None = None, kernels: str = "auto") -> modeling.Encoder:
    """Every encoder of pretraining is built here."""
    return modeling.Encoder(**bert, embedding_size=embedding_size, embeddings=embeddings,
                            causal=causal, kernels=kernels, name=name)


class PretrainingModel(keras.Model):
    """A generator and an objective on the discriminator-sized encoder (see the module
    docstring), with the original's weight tying and variable names.

    Its parts: `encoder`, the discriminator-sized encoder (the original's "electra" scope:
    ELECTRA's discriminator, BERT itself under mlm); `generator_part` (a generators.Generator),
    whose encoder is `generator` (`generator_rtl` Electric's second tower) and head `mlm_head`;
    `objective` (an objectives.Objective), whose DiscriminatorHead is `disc_head`.

    Tying (`embedding_sharing`, the original's scopes): "tied" shares the whole embedding block
    (word, position, token type, LayerNorm) between generator and discriminator, the generator
    with its own `embeddings_project` when its hidden size differs; "untied" gives the
    generator its own block (its hidden size wide; two-stage training's, the discriminator's
    shape); "gdes" is DeBERTa-v3's gradient-disentangled sharing (generators.py).
    untied_generator=false uses the discriminator's encoder as the generator.
    """

    def __init__(self, config: PretrainingConfig, special: SpecialIds,
                 rng: tf.random.Generator | None = None, **kwargs):
        super().__init__(name="electra_pretraining", **kwargs)
        self.config = config
        self.special = special
        self.rng = rng
        c = config
        bert, gen_bert = c.bert_config(), c.generator_bert_config()
        if c.training_algorithm == "two_stage":  # its generator is the discriminator's twin
            gen_bert = bert
        embedding_size = c.resolved_embedding_size()

        generator_encoder = None
        if c.embedding_sharing == "gdes":
            generator_encoder = _encoder(gen_bert, "generator", embedding_size, kernels=c.kernels)
            self.encoder = _encoder(
                bert, "electra", embeddings=ResidualEmbeddings(generator_encoder.embeddings),
                kernels=c.kernels)
        else:
            self.encoder = _encoder(bert, "electra", embedding_size, kernels=c.kernels)

        objective = objectives.REGISTRY[c.objective]
        self.generator_part: Generator
        if c.uniform_generator:
            self.generator_part = UniformGenerator(c.vocab_size)
        elif objective.generator_is_model or not c.untied_generator:
            self.generator_part = MaskedLMGenerator(self.encoder)
        elif c.two_tower_generator:  # untied embeddings: each tower its own, as the original
            untied = c.embedding_sharing == "untied"
            width, shared = (None, None) if untied else (embedding_size,
                                                         self.encoder.embeddings)
            self.generator_part = TwoTowerGenerator(
                _encoder(gen_bert, "generator_ltr", width, shared, "ltr", c.kernels),
                _encoder(gen_bert, "generator_rtl", width, shared, "rtl", c.kernels), special)
        elif generator_encoder is not None:
            self.generator_part = MaskedLMGenerator(generator_encoder)
        elif c.embedding_sharing == "untied":
            # Two-stage training copies the generator into the discriminator: same shapes.
            width = embedding_size if c.training_algorithm == "two_stage" else None
            self.generator_part = MaskedLMGenerator(_encoder(gen_bert, "generator", width,
                                                             kernels=c.kernels))
        else:
            self.generator_part = MaskedLMGenerator(
                _encoder(gen_bert, "generator", embedding_size, self.encoder.embeddings,
                         kernels=c.kernels))

        self.objective = objective(self.encoder, c)
        self.baseline_head = None  # the adversarial generator's learned reward baseline
        if c.training_algorithm == "adversarial":
            self.baseline_head = keras.layers.Dense(1, name="adversarial_baseline")
        # Every layer, in the order that fixes the variables' order (the checkpoints').
        self.parts = [*self.generator_part.layers, *self.objective.layers,
                      *([self.baseline_head] if self.baseline_head else [])]
        # Two-stage training's switch: the step that starts the discriminator's stage.
        self.switch_step = c.num_train_steps // 2 if c.training_algorithm == "two_stage" \
            else None

    # The parts under the original's names.
    @property
    def generator(self) -> modeling.Encoder | None:
        return self.generator_part.encoder

    @property
    def generator_rtl(self) -> modeling.Encoder | None:
        part = self.generator_part
        return part.rtl if isinstance(part, TwoTowerGenerator) else None

    @property
    def mlm_head(self) -> modeling.MaskedLMHead | None:
        return self.generator_part.head

    @property
    def disc_head(self) -> modeling.DiscriminatorHead | None:
        return self.objective.disc_head

    def build(self, input_shape=None):
        modeling.build_once(self.encoder)
        self.generator_part.build()
        self.objective.build()
        if self.baseline_head is not None:
            modeling.build_once(self.baseline_head, (None, None, self.generator.hidden_size))
        self.built = True

    # ----- the forward pass -----
    def call(self, features, training=False, stage=None):
        """Runs the objective on a batch of {input_ids, input_mask, segment_ids}. `stage`
        (two_stage training only, 1 or 2) runs one network's training; without it both run,
        as in evaluation.

        Returns a dict of tensors: `loss` (the scalar to minimise), the loss parts, and what
        the metrics and the TensorBoard text sample need."""
        c = self.config
        input_ids = tf.cast(features["input_ids"], tf.int32)
        input_mask = tf.cast(features["input_mask"], tf.int32)
        batch = masking.Batch(input_ids, input_mask, tf.cast(features["segment_ids"], tf.int32),
                              mask(input_ids, input_mask, c.mask_prob, c.max_predictions_per_seq,
                                   self.special, self.rng))
        if stage is not None:
            return self._two_stage(batch, training, stage)
        generated = self.generator_part(batch, training)
        if self.objective.generator_is_model:  # BERT
            return self._outputs(batch, generated, c.gen_weight * generated.loss)
        corrupted = self._corrupt(batch, generated)
        loss, judged = self.objective(batch, corrupted, generated, training)
        generator_loss = generated.loss
        if self.baseline_head is not None:
            generator_loss, adversarial = self._adversarial_loss(batch, generated, corrupted,
                                                                 judged)
            judged = {**judged, **adversarial}
        return self._outputs(batch, generated, c.gen_weight * generator_loss
                             + c.disc_weight * loss, corrupted, judged)

    def _corrupt(self, batch: masking.Batch, generated: Generated) -> masking.Corrupted:
        c = self.config
        return masking.corrupt(batch.input_ids, batch.masked, generated.logits, c.temperature,
                               c.disallow_correct, self.objective.all_replaced_are_fake,
                               self.rng)

    def _outputs(self, batch: masking.Batch, generated: Generated, loss,
                 corrupted: masking.Corrupted | None = None, judged: dict | None = None) -> dict:
        masked = batch.masked
        out = {"loss": loss, "gen_loss": generated.loss, "mlm_draw_losses": generated.draw_losses,
               "masked_input_ids": masked.input_ids,
               "masked_lm_positions": masked.masked_lm_positions,
               "masked_lm_ids": masked.masked_lm_ids,
               "masked_lm_weights": masked.masked_lm_weights,
               "masked_lm_preds": tf.argmax(generated.logits, -1, output_type=tf.int32),
               "input_ids": batch.input_ids, "input_mask": batch.input_mask}
        if corrupted is not None:
            out.update({"sampled_tokids": corrupted.sampled, "fake_input_ids": corrupted.input_ids,
                        "replaced_mask": corrupted.replaced, "disc_labels": corrupted.labels,
                        **judged})
        return out

    def _two_stage(self, batch: masking.Batch, training, stage: int) -> dict:
        """Stage 1 trains the generator alone (the discriminator does not run); stage 2 the
        discriminator alone, on samples of the frozen generator, run in inference mode as a
        fixed proposal distribution. The discriminator's outputs of stage 1 carry
        objective_weight 0, so that its metrics leave them out."""
        c = self.config
        if stage == 1:
            generated = self.generator_part(batch, training)
            corrupted = self._corrupt(batch, generated)
            _, judged = self.objective.idle(batch, corrupted)
            loss = c.gen_weight * generated.loss
        else:
            generated = self.generator_part(batch, training=False)
            corrupted = self._corrupt(batch, generated)
            loss, judged = self.objective(batch, corrupted, generated, training)
            loss = c.disc_weight * loss
        return self._outputs(batch, generated, loss, corrupted, {
            **judged, "objective_weight": tf.constant(float(stage == 2)),
            "stage": tf.constant(float(stage))})

    def _adversarial_loss(self, batch: masking.Batch, generated: Generated,
                          corrupted: masking.Corrupted, judged: dict) -> tuple[tf.Tensor, dict]:
        """Paper Appendix F: the generator maximises the discriminator's loss on its samples.
        Per masked draw, the reward is that token's discriminator loss (-log D(real) for a
        sample equal to the original, -log(1 - D(real)) otherwise), the policy gradient is
        grad log p(sample) (reward - baseline), and the baseline -log sigmoid(w.h) reads the
        generator's encoder output there (held constant), trained by cross-entropy towards
        exp(-reward). Returns (the generator's loss, metrics outputs)."""
        masked = batch.masked
        positions, weights = masked.masked_lm_positions, masked.masked_lm_weights
        labels = tf.cast(modeling.gather_positions(corrupted.labels, positions), tf.float32)
        reward = tf.stop_gradient(tf.nn.sigmoid_cross_entropy_with_logits(
            labels=labels, logits=modeling.gather_positions(judged["disc_logits"], positions)))
        baseline_logits = tf.cast(self.baseline_head(tf.stop_gradient(generated.hidden)),
                                  tf.float32)[..., 0]
        baseline = tf.math.softplus(-baseline_logits)  # -log sigmoid
        log_prob = -fused.softmax_cross_entropy(corrupted.policy_logits, corrupted.sampled)
        policy_loss = -masking.weighted_mean(log_prob * tf.stop_gradient(reward - baseline),
                                             weights)
        baseline_loss = masking.weighted_mean(tf.nn.sigmoid_cross_entropy_with_logits(
            labels=tf.exp(-reward), logits=baseline_logits), weights)
        loss = policy_loss + baseline_loss + self.config.adversarial_mlm_weight * generated.loss
        return loss, {"adversarial_reward": masking.weighted_mean(reward, weights),
                      "baseline_loss": baseline_loss}

    # ----- standalone models -----
    def discriminator_model(self) -> modeling.ElectraDiscriminator:
        """The discriminator-sized model as an ElectraDiscriminator: what fine-tuning starts
        from. It shares these weights, except under GDES, where it is a copy whose tables are
        the sums. Objectives without a DiscriminatorHead (mlm, replace_mlm) get a fresh one."""
        encoder = self.encoder
        if isinstance(encoder.embeddings, ResidualEmbeddings):
            encoder = _encoder(self.config.bert_config(), "electra",
                               self.config.resolved_embedding_size(), kernels=self.config.kernels)
            modeling.build_once(encoder)
            theirs = checkpoint_names.encoder_variables(self.encoder, "electra")
            for name, variable in checkpoint_names.encoder_variables(encoder, "electra").items():
                variable.assign(theirs[name])
        model = modeling.ElectraDiscriminator(encoder, self.disc_head,
                                              name="electra_discriminator")
        model.build()
        return model

    def generator_model(self) -> modeling.ElectraGenerator | None:
        """The (single-tower) generator as a standalone Keras model, if it has one."""
        return self.generator_part.model()

    def generator_variables(self) -> list:
        """The variables only the generator uses."""
        return _only_in(self.generator_part.layers, self.objective.layers)

    def discriminator_variables(self) -> list:
        """The variables only the objective's (discriminator-sized) model uses."""
        return _only_in(self.objective.layers, self.generator_part.layers)


def _only_in(layers: list, others: list) -> list:
    theirs = {id(v) for layer in others for v in layer.trainable_variables}
    ours = {id(v): v for layer in layers for v in layer.trainable_variables}
    return [v for key, v in ours.items() if key not in theirs]


class PretrainingMetrics:
    """The metrics that make sense for the run's objective and algorithm, as Keras metrics
    that replicas update in place. Create under the strategy scope.

    Every run: loss, grad_norm, and the generator's masked_lm_loss and masked_lm_accuracy
    (the original's), and masked_lm_accuracy_at_mask: the accuracy at the masked positions
    the model sees as [MASK]. The original's masked_lm_accuracy also counts the positions that
    keep their own token (15% of them, `masking.REPLACE_WITH_MASK_PROB`), so a model that
    copies those and reads no context scores well above the unigram distribution's top-1 share
    there; at [MASK] it scores that share, and above it only by reading its context
    (docs/trunk_pilots.md, "What the plateau is"). With replacements:
    sampled_masked_lm_accuracy (the original's) and replaced_fraction (the share of masked
    positions whose token really changed). Then the objective's own (objectives.py: the
    original's disc_loss, disc_accuracy, disc_precision, disc_recall and disc_auc for the
    detection objectives, none at disc_weight 0); adversarial_reward and baseline_loss for
    adversarial training; stage for two-stage training.

    Differences from the original, on purpose: AUC weights out padding (the original counts each
    pad as a label-0, probability-0 token, which inflates it)."""

    def __init__(self, model: PretrainingModel):
        def correct(predictions, o):
            return tf.cast(tf.equal(predictions, o["masked_lm_ids"]), tf.float32)

        def at_mask(o):
            shown = tf.gather(o["masked_input_ids"], o["masked_lm_positions"], batch_dims=1)
            return o["masked_lm_weights"] * tf.cast(tf.equal(shown, model.special.mask),
                                                    tf.float32)

        mean = MetricRule.mean
        rules = {"loss": mean(lambda o: (o["loss"], None)),
                 "masked_lm_loss": mean(lambda o: (o["mlm_draw_losses"],
                                                   o["masked_lm_weights"])),
                 "masked_lm_accuracy": mean(lambda o: (correct(o["masked_lm_preds"], o),
                                                       o["masked_lm_weights"])),
                 "masked_lm_accuracy_at_mask": mean(lambda o: (
                     correct(o["masked_lm_preds"], o), at_mask(o)))}
        if not model.objective.generator_is_model:
            rules.update({
                "sampled_masked_lm_accuracy": mean(lambda o: (correct(o["sampled_tokids"], o),
                                                              o["masked_lm_weights"])),
                "replaced_fraction": mean(lambda o: (tf.cast(o["disc_labels"], tf.float32),
                                                     tf.cast(o["replaced_mask"], tf.float32)))})
        rules.update(model.objective.metrics)
        # Weighted by the outputs' objective_weight.
        self.objective_names: set[str] = set(model.objective.metrics)
        if model.baseline_head is not None:
            rules.update({"adversarial_reward": mean(lambda o: (o["adversarial_reward"], None)),
                          "baseline_loss": mean(lambda o: (o["baseline_loss"], None))})
        if model.switch_step is not None:
            rules["stage"] = mean(lambda o: (o["stage"], None))
        self.rules = {name: rule for name, (_, rule) in rules.items()}
        self.metrics = {name: make(name=name) for name, (make, _) in rules.items()}
        self.metrics["grad_norm"] = keras.metrics.Mean(name="grad_norm")

    def update(self, out: dict, grad_norm=None) -> None:
        objective_weight = out.get("objective_weight")
        for name, rule in self.rules.items():
            *args, weights = rule(out)
            if objective_weight is not None and name in self.objective_names:
                weights = objective_weight if weights is None else weights * objective_weight
            self.metrics[name].update_state(*args, sample_weight=weights)
        if grad_norm is not None:
            self.metrics["grad_norm"].update_state(grad_norm)

    def results(self) -> dict[str, float]:
        # A metric that saw nothing (grad_norm during evaluation, the discriminator's during
        # two-stage training's first stage) is left out.
        return {name: float(metric.result()) for name, metric in self.metrics.items()
                if _seen(metric)}

    def reset(self) -> None:
        for metric in self.metrics.values():
            metric.reset_state()


def _seen(metric: keras.metrics.Metric) -> bool:
    if isinstance(metric, keras.metrics.AUC):
        return float(tf.reduce_sum(metric.true_positives + metric.false_negatives)
                     + tf.reduce_sum(metric.true_negatives + metric.false_positives)) > 0
    return float(metric.count.numpy()) > 0


@dataclasses.dataclass
class PretrainingState:
    """Everything a pretraining run trains and checkpoints. Build it with create_state()."""
    model: PretrainingModel
    optimizer: keras.optimizers.Optimizer
    metrics: PretrainingMetrics
    rng: tf.random.Generator
    loss_scale: distribution.DynamicLossScale | None

    def checkpoint(self) -> tf.train.Checkpoint:
        parts = {"optimizer": self.optimizer, "rng": self.rng}
        if self.loss_scale is not None:
            parts["loss_scale"] = self.loss_scale
        return resume.checkpoint(self.model, **parts)

    def make_train_step(self, num_replicas: int, jit_compile: bool):
        """The per-replica training step: forward and backward (XLA-compiled when asked), then
        distribution.apply_gradients (all-reduce, clip, AdamW) and the metrics. Two-stage
        training's stage follows the optimizer's step inside the step."""
        model, variables, loss_scale = self.model, self.model.trainable_variables, self.loss_scale
        n = model.switch_step

        def gradients(features, stage=None):
            with tf.GradientTape() as tape:
                out = model(features, training=True, stage=stage)
                loss = out["loss"] / num_replicas  # the replicas' gradients are summed
                if loss_scale is not None:
                    loss *= loss_scale.scale
            grads = tape.gradient(loss, variables)
            if stage is not None:  # a two-stage step leaves one network out: zero gradients
                grads = [tf.zeros(v.shape, v.dtype) if g is None else tf.convert_to_tensor(g)
                         for g, v in zip(grads, variables)]
            return grads, out

        def forward_backward(features):
            if n is None:
                return gradients(features)
            # Each branch differentiates itself: the If op is not differentiated through.
            return tf.cond(self.optimizer.iterations < n, lambda: gradients(features, 1),
                           lambda: gradients(features, 2))

        forward_backward = distribution.maybe_jit(forward_backward, jit_compile)

        def train_step(features):
            if n is not None:
                self._start_discriminator_from_generator()
            grads, out = forward_backward(features)
            norm = distribution.apply_gradients(self.optimizer, grads, variables, loss_scale)
            self.metrics.update(out, norm)

        return train_step

    def _start_discriminator_from_generator(self) -> None:
        """Two-stage training's switch: at step n the discriminator's encoder takes the
        generator's weights. Assigned in cross-replica context, so every replica's copy of a
        mirrored variable gets them."""
        n, model = self.model.switch_step, self.model
        pairs = list(zip(model.generator.weights, model.encoder.weights))

        def copy():
            for source, target in pairs:
                target.assign(source)
            return tf.constant(True)

        def at_switch(strategy):
            tf.cond(tf.equal(self.optimizer.iterations, n), copy, lambda: tf.constant(False))

        tf.distribute.get_replica_context().merge_call(at_switch)


def create_state(config: PretrainingConfig, special: SpecialIds,
                 strategy: tf.distribute.Strategy) -> PretrainingState:
    """Builds the model, optimizer, metrics, random stream and (float16) loss scale under the
    strategy's scope and the config's precision policy."""
    if config.seed is not None:
        keras.utils.set_random_seed(config.seed)  # dropout and initial weights
    with distribution.precision_policy(config.precision), strategy.scope():
        rng = (tf.random.Generator.from_seed(config.seed) if config.seed is not None
               else tf.random.Generator.from_non_deterministic_state())
        model = PretrainingModel(config, special, rng)
        model.build()
        n = model.switch_step
        optimizer = optimization.create_optimizer(
            config.learning_rate, n or config.num_train_steps, config.num_warmup_steps,
            config.weight_decay_rate, config.lr_decay_power, config.optimizer, restart_every=n,
            lr_schedule=config.lr_schedule, lr_decay_steps=config.lr_decay_steps)
        optimizer.build(model.trainable_variables)
        if n is not None:
            optimizer.freeze(model.generator_variables(), lambda: optimizer.iterations >= n)
            optimizer.freeze(model.discriminator_variables(), lambda: optimizer.iterations < n)
        loss_scale = (distribution.DynamicLossScale() if config.precision == "mixed_float16"
                      else None)
        return PretrainingState(model, optimizer, PretrainingMetrics(model), rng, loss_scale)


# ------------------------------------------------------------------ in and out

def initialize_from(model: PretrainingModel, path: str,
                    optimizer: optimization.AdamWeightDecay | None = None) -> list[str]:
    """A new run's weights from pretrained ones (e.g. Google's released electra_small): the
    discriminator, and the generator when the checkpoint has one and the model has its own.
    The optimizer starts fresh, or with `optimizer` (init_optimizer_state) takes the global
    step and Adam slots of a TF1 run of this model. Returns what was done, for the log."""
    pretrained = checkpoints.load_pretrained(path)
    if pretrained.discriminator is None:
        raise FileNotFoundError(f"init_checkpoint {path} holds no discriminator")
    done, taken_generator = [], None
    generator = model.generator_model()
    if generator is not None and model.generator is not model.encoder:
        if pretrained.generator is None:
            done.append(f"{pretrained.source} has no generator: the generator starts from "
                        "fresh weights")
        else:
            # Tied embeddings come with the discriminator; a generator's own are copied.
            tied = model.generator.embeddings is model.encoder.embeddings
            checkpoint_names.copy_weights(pretrained.generator, generator, skip_embeddings=tied)
            done.append(f"initialised the generator from {pretrained.source}")
            taken_generator = generator
    discriminator = model.discriminator_model()
    if isinstance(model.encoder.embeddings, ResidualEmbeddings):
        _load_gdes_discriminator(model, pretrained.discriminator)
    else:
        checkpoint_names.copy_weights(pretrained.discriminator, discriminator)
    done.insert(0, f"initialised the discriminator from {pretrained.source} "
                   f"({pretrained.format})" + ("; fresh optimizer state" if optimizer is None
                                               else ""))
    if optimizer is not None:
        done.append(_take_optimizer_state(model, discriminator, taken_generator, optimizer,
                                          pretrained))
    return done


def _take_optimizer_state(model: PretrainingModel, discriminator: modeling.ElectraDiscriminator,
                          generator: modeling.ElectraGenerator | None,
                          optimizer: optimization.AdamWeightDecay,
                          pretrained: checkpoints.Pretrained) -> str:
    """The global step and every trained variable's Adam slots of a TF1 checkpoint that a run
    of this same model wrote (the original's run_pretraining.py saves both), into `optimizer`.
    Anything less is refused: a variable whose moments started at zero would take steps
    several times their size at the continued rate, with no warmup left and no bias
    correction (Google's releases hold no slots; a fresh optimizer with its warmup suits
    them)."""
    fresh = "set init_optimizer_state false for a fresh optimizer from step 0, with the warmup"
    if pretrained.format != "tf1" or pretrained.global_step is None:
        what = (f"a {pretrained.format} model" if pretrained.format != "tf1"
                else "a TF1 checkpoint without a global_step")
        raise ConfigError(f"hparam 'init_optimizer_state': init_checkpoint {pretrained.source} "
                          f"is {what}, which holds no optimizer state to continue: {fresh}")
    stored = tf.train.load_checkpoint(pretrained.source)
    named = _tf1_names(model, discriminator, generator)
    slots, lacking = {}, []
    for variable in model.trainable_variables:
        name = named.get(id(variable))
        names = tf1_checkpoint.slot_names(name) if name else ()
        if names and all(stored.has_tensor(n) for n in names):
            slots.update(zip(names, optimizer.moments(variable)))
        else:
            lacking.append(name or variable.path)
    if lacking:
        raise ConfigError(
            f"hparam 'init_optimizer_state': {pretrained.source} holds no Adam slots for "
            f"{len(lacking)} of the {len(model.trainable_variables)} variables this run trains "
            f"(e.g. {', '.join(lacking[:3])}); it continues a TF1 run of this same model, as "
            f"the original's run_pretraining.py writes one: {fresh}")
    optimizer.iterations.assign(pretrained.global_step)
    for name, moment in slots.items():
        moment.assign(stored.get_tensor(name))
    return (f"continuing from step {pretrained.global_step} of {pretrained.source}, with the "
            f"Adam slots of all {len(model.trainable_variables)} variables")


def _tied_embeddings(model: PretrainingModel) -> bool:
    """Whether the generator reads the discriminator's embedding tables (the original's
    default), which its checkpoints name once, under electra/."""
    return model.generator is not None and \
        model.generator.embeddings is model.encoder.embeddings


def _tf1_names(model: PretrainingModel, discriminator: modeling.ElectraDiscriminator,
               generator: modeling.ElectraGenerator | None) -> dict[int, str]:
    """{id(variable): the original's name} of the models' variables that its checkpoints
    name."""
    tied = generator is not None and _tied_embeddings(model)
    return {id(variable): name for name, variable in
            tf1_checkpoint.tf1_variables(discriminator, generator, tied).items()}


def restored_run(path: str) -> checkpoints.Pretrained:
    """A run_pretraining.py run (DATA_DIR/models/NAME, finished or not) at its newest
    checkpoint, with the AdamWeightDecay that trained it and its global step: what the
    original's run_pretraining.py checkpoints hold, for a TF1 export with the Adam slots
    (convert_checkpoint.py --optimizer_state), which the original continues from and
    init_optimizer_state takes. A run whose state those checkpoints cannot hold is refused
    before anything is written: another optimizer or training algorithm, GDES's residual
    tables, one network as generator and discriminator, or a variable the original does not
    name (the heads of Replace MLM, All-Tokens MLM, Electric's cloze generator). A uniform
    generator has no variables: the discriminator's alone are written, as the original's."""
    directory = path.rstrip("/")
    the_folder = ("a run's optimizer state is read from the folder run_pretraining.py trains in "
                  "(DATA_DIR/models/NAME)")
    if not tf.io.gfile.isdir(directory):
        raise FileNotFoundError(f"{directory} is not a directory: {the_folder}")
    saved = files.read_json(os.path.join(directory, "pretrain_config.json"))
    if not isinstance(saved, dict):
        raise FileNotFoundError(f"{directory} holds no pretrain_config.json: {the_folder}")
    config = config_lib.saved_config(saved)
    unlike = [f"{key} {getattr(config, key)!r}" for key, original in
              (("optimizer", "adamw"), ("training_algorithm", "joint"))
              if getattr(config, key) != original]
    if config.embedding_sharing == "gdes":
        unlike.append("embedding_sharing 'gdes'")
    weights_alone = "convert it without the optimizer state, which writes the weights alone"
    if unlike:
        raise ConfigError(f"{directory}: trained with {' and '.join(unlike)}; the original's "
                          "checkpoints hold AdamWeightDecay's slots of a generator and a "
                          f"discriminator trained jointly: {weights_alone}")
    state = create_state(config, SpecialIds(), tf.distribute.get_strategy())
    model = state.model
    if model.generator is model.encoder:
        raise ConfigError(f"{directory}: objective {config.objective!r} trains one network "
                          "(untied_generator false shares it); the original's checkpoints "
                          f"name a generator and a discriminator: {weights_alone}")
    discriminator, generator = model.discriminator_model(), model.generator_model()
    named = _tf1_names(model, discriminator, generator)
    unnamed = [v.path for v in model.trainable_variables if id(v) not in named]
    if unnamed:
        raise ConfigError(f"{directory}: {len(unnamed)} of the variables objective "
                          f"{config.objective!r} trains have no name in the original's "
                          f"checkpoints (e.g. {', '.join(unnamed[:3])}): {weights_alone}")
    try:  # the checkpoint is read once the model is known to fit the original's names
        checkpointer = resume.Checkpointer(state.checkpoint(), directory,
                                           state.optimizer.iterations, None, writable=False)
    except resume.CheckpointError as e:
        raise ValueError(str(e)) from None
    if not checkpointer.restored:
        raise FileNotFoundError(f"{directory} holds no checkpoint (ckpt-N) of its run: train "
                                "it first, or convert its exported models")
    return checkpoints.Pretrained(
        discriminator, generator, model_files.find_vocab(directory),
        model_files.find_do_lower_case(directory), directory, "run",
        int(state.optimizer.iterations.numpy()), optimizer=state.optimizer,
        tied_embeddings=_tied_embeddings(model))


def _load_gdes_discriminator(model: PretrainingModel,
                             pretrained: modeling.ElectraDiscriminator) -> None:
    """GDES: the discriminator's tables become the generator's plus residuals equal to the
    difference, everything else is copied."""
    theirs = checkpoint_names.model_variables(pretrained)
    ours = checkpoint_names.model_variables(modeling.ElectraDiscriminator(model.encoder,
                                                                          model.disc_head))
    embeddings = model.encoder.embeddings
    for name, value in ours.items():
        if tuple(theirs[name].shape) != tuple(value.shape):
            raise ValueError(f"the checkpoint's model does not fit: {name} "
                             f"{tuple(theirs[name].shape)} vs {tuple(value.shape)}")
        table = name.rsplit("/", 1)[-1]  # e.g. word_embeddings: a residual on the generator's
        if name.startswith("electra/embeddings/") and table.endswith("_embeddings"):
            getattr(embeddings, f"{table}_delta").assign(
                theirs[name] - getattr(embeddings.shared, table))
        else:
            value.assign(theirs[name])


def export_size(model: PretrainingModel, vocab_file: str | None) -> int:
    """About the bytes export() writes: the weights of each model it saves (a table the two
    share, once per file; under GDES the residual tables too) and the vocabulary."""
    variables = model.encoder.weights + (model.disc_head.weights if model.disc_head
                                               else [])
    generator = model.generator_model()
    variables += generator.weights if generator is not None else []
    size = sum(math.prod(v.shape) * tf.as_dtype(v.dtype).size for v in variables)
    return size + (tf.io.gfile.stat(vocab_file).length if vocab_file else 0)


def export(model: PretrainingModel, model_dir: str, vocab_file: str | None,
           do_lower_case: bool) -> list[str]:
    """Writes discriminator.keras and generator.keras (what the objective has), and the
    tokenizer (vocab.txt, tokenizer_config.json) beside them, into model_dir. Returns the
    paths written."""
    written = []
    for name, keras_model in (("discriminator", model.discriminator_model()),
                              ("generator", model.generator_model())):
        if keras_model is not None:
            written.append(keras_saving.save_keras(keras_model,
                                                   os.path.join(model_dir, f"{name}.keras")))
    if vocab_file:
        written += model_files.write_files(model_dir, model_files.tokenizer_files(
            vocab_file, do_lower_case, model.encoder.max_position_embeddings))
    return written

