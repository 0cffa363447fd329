"""The objectives and training algorithms beyond the original's ELECTRA: each loss against a
NumPy reference computed from the model's own intermediate outputs, where gradients flow, the
hparams that select them, their metrics, and short runs of run_pretraining.py."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from conftest import TINY_MODEL, run_script, tiny_config
from electra_tf import (checkpoints, config, flops, generators, health, masking, modeling,
                        objectives, optimization, pretraining, progress, tf1_checkpoint)
from electra_tf.hparam_parsing import ConfigError
from test_model import _features

NO_DROPOUT = {"model_hparam_overrides": {**TINY_MODEL["model_hparam_overrides"],
                                         "hidden_dropout_prob": 0.0,
                                         "attention_probs_dropout_prob": 0.0}}


def _model(**hparams):
    model = pretraining.PretrainingModel(tiny_config(**hparams), pretraining.SpecialIds(),
                                         tf.random.Generator.from_seed(0))
    model.build()
    return model


def _numpy(out):
    return {k: v.numpy() for k, v in out.items()}


def _sigmoid_cross_entropy(logits, labels):
    return np.maximum(logits, 0) - logits * labels + np.log1p(np.exp(-np.abs(logits)))


def _log_softmax(logits):
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def _encode(model, encoder, input_ids, features):
    return encoder(tf.constant(input_ids), features["input_mask"], features["segment_ids"],
                   training=False)


# ------------------------------------------------------------------ losses vs NumPy

def test_electra_15_counts_the_discriminator_loss_at_the_masked_positions_only():
    model = _model(objective="electra_15")
    features = _features()
    out = _numpy(model(features, training=False))
    drawn = np.zeros_like(out["input_mask"])
    for row, (positions, weights) in enumerate(zip(out["masked_lm_positions"],
                                                   out["masked_lm_weights"])):
        drawn[row, positions[weights > 0]] = 1
    np.testing.assert_array_equal(out["replaced_mask"], drawn)
    losses = _sigmoid_cross_entropy(out["disc_logits"], out["disc_labels"])
    expected = (losses * drawn).sum() / (drawn.sum() + 1e-6)
    np.testing.assert_allclose(out["disc_loss"], expected, rtol=1e-5)
    over_all_tokens = (losses * out["input_mask"]).sum() / out["input_mask"].sum()
    assert abs(expected - over_all_tokens) > 1e-3  # a different loss than ELECTRA's
    np.testing.assert_allclose(out["loss"], out["gen_loss"] + 50.0 * expected, rtol=1e-5)


def test_replace_mlm_predicts_the_originals_from_the_corrupted_input():
    model = _model(objective="replace_mlm")
    assert model.config.disc_weight == 1.0  # an MLM loss: not ELECTRA's 50x
    features = _features()
    out = _numpy(model(features, training=False))
    positions, weights = out["masked_lm_positions"], out["masked_lm_weights"]
    # The model reads the generator's samples at every drawn position, never [MASK].
    seen = np.take_along_axis(out["fake_input_ids"], positions, 1)
    samples_written = np.take_along_axis(out["replaced_mask"], positions, 1) > 0
    assert not (seen[weights > 0] == 103).any() and samples_written[weights > 0].all()
    hidden = _encode(model, model.encoder, out["fake_input_ids"], features)
    logits = model.objective.mlm_head(modeling.gather_positions(hidden, positions),
                                      model.encoder.embedding_table).numpy()
    token_losses = -np.take_along_axis(_log_softmax(logits), out["masked_lm_ids"][..., None],
                                       -1)[..., 0]
    expected = (token_losses * weights).sum() / (weights.sum() + 1e-6)
    np.testing.assert_allclose(out["replace_mlm_loss"], expected, rtol=1e-5)
    np.testing.assert_allclose(out["loss"], out["gen_loss"] + expected, rtol=1e-5)
    np.testing.assert_array_equal(out["replace_mlm_preds"], logits.argmax(-1))


def test_all_tokens_mlm_is_the_cross_entropy_of_the_copy_mixture():
    model = _model(objective="all_tokens_mlm")
    features = _features()
    out = _numpy(model(features, training=False))
    hidden = _encode(model, model.encoder, out["fake_input_ids"], features)
    logits = model.objective.mlm_head(hidden, model.encoder.embedding_table).numpy()
    replaced_logit = model.disc_head(hidden).numpy()
    copy = 1.0 / (1.0 + np.exp(replaced_logit))  # D = sigmoid(-s)
    probs = np.exp(_log_softmax(logits.astype(np.float64)))
    original, shown = out["input_ids"], out["fake_input_ids"]
    p_original = (copy * (shown == original)
                  + (1 - copy) * np.take_along_axis(probs, original[..., None], -1)[..., 0])
    real = out["input_mask"].astype(np.float64)
    expected = -(real * np.log(p_original)).sum() / real.sum()
    np.testing.assert_allclose(out["all_tokens_mlm_loss"], expected, rtol=1e-4)
    np.testing.assert_allclose(out["loss"], out["gen_loss"] + expected, rtol=1e-4)
    mixture = (1 - copy)[..., None] * probs
    np.put_along_axis(mixture, shown[..., None],
                      np.take_along_axis(mixture, shown[..., None], -1) + copy[..., None], -1)
    np.testing.assert_array_equal(out["all_tokens_mlm_preds"][real > 0],
                                  mixture.argmax(-1)[real > 0])
    np.testing.assert_array_equal(out["all_tokens_mlm_softmax_preds"], logits.argmax(-1))
    # The copy head, read as a detector: p(replaced) = 1 - D.
    np.testing.assert_allclose(out["disc_probs"], 1 - copy, rtol=1e-5)


def test_all_tokens_mlm_softmax_fake_accuracy_counts_the_replaced_real_tokens():
    """The softmax's own reconstruction at the replaced tokens, over the real ones: here three
    positions a row are marked replaced (one of them padding in the second row) and the softmax
    is right at the first two of them only, and at no other position."""
    model = _model(objective="all_tokens_mlm")
    out = model(_features(), training=False)
    o = _numpy(out)
    labels = np.zeros_like(o["disc_labels"])
    labels[:, 1:4] = 1
    weights = np.ones_like(o["disc_weights"])
    weights[1, 3] = 0.0  # padding: not counted
    preds = np.full_like(o["input_ids"], -1)
    preds[:, 1:3] = o["input_ids"][:, 1:3]
    metrics = pretraining.PretrainingMetrics(model)
    metrics.update({**out, "disc_labels": tf.constant(labels), "disc_weights":
                    tf.constant(weights), "all_tokens_mlm_softmax_preds": tf.constant(preds)})
    rows = labels.shape[0]
    assert rows >= 2
    assert metrics.results()["all_tokens_mlm_softmax_fake_accuracy"] == pytest.approx(
        2 * rows / (3 * rows - 1))


def test_adversarial_generator_loss_is_reinforce_with_a_learned_baseline():
    model = _model(training_algorithm="adversarial", adversarial_mlm_weight=0.5)
    features = _features()
    out = _numpy(model(features, training=False))
    positions, weights = out["masked_lm_positions"], out["masked_lm_weights"]
    hidden = modeling.gather_positions(
        _encode(model, model.generator, out["masked_input_ids"], features), positions)
    logits = model.mlm_head(hidden, model.generator.embedding_table).numpy()
    log_prob = np.take_along_axis(_log_softmax(logits), out["sampled_tokids"][..., None],
                                  -1)[..., 0]
    reward = _sigmoid_cross_entropy(np.take_along_axis(out["disc_logits"], positions, 1),
                                    np.take_along_axis(out["disc_labels"], positions, 1))
    baseline_logit = model.baseline_head(hidden).numpy()[..., 0]
    baseline = np.log1p(np.exp(-baseline_logit))  # -log sigmoid

    def average(x):
        return (weights * x).sum() / (weights.sum() + 1e-6)

    policy = -average(log_prob * (reward - baseline))
    baseline_loss = average(_sigmoid_cross_entropy(baseline_logit, np.exp(-reward)))
    expected = policy + baseline_loss + 0.5 * out["gen_loss"] + 50.0 * out["disc_loss"]
    np.testing.assert_allclose(out["loss"], expected, rtol=1e-4)
    np.testing.assert_allclose(out["adversarial_reward"], average(reward), rtol=1e-5)
    np.testing.assert_allclose(out["baseline_loss"], baseline_loss, rtol=1e-5)


# ------------------------------------------------------------------ where gradients flow

def _gradients(model, loss_key, variables, **call):
    with tf.GradientTape() as tape:
        out = model(_features(), training=True, **call)
    return [g is not None and bool(tf.reduce_any(tf.convert_to_tensor(g) != 0))
            for g in tape.gradient(out[loss_key], variables)]


def test_gdes_discriminator_reads_generator_embeddings_through_a_stop_gradient():
    model = _model(embedding_sharing="gdes")
    generator_tables, residuals = model.generator.embeddings, model.encoder.embeddings
    assert model.generator.embeddings is not model.encoder.embeddings
    shared = [generator_tables.word_embeddings, generator_tables.position_embeddings,
              generator_tables.token_type_embeddings]
    deltas = [residuals.word_embeddings_delta, residuals.position_embeddings_delta,
              residuals.token_type_embeddings_delta]
    # The residuals start at zero: the discriminator starts with the generator's tables.
    np.testing.assert_array_equal(residuals.word_embeddings.numpy(),
                                  generator_tables.word_embeddings.numpy())
    assert _gradients(model, "disc_loss", shared) == [False] * 3
    assert _gradients(model, "disc_loss", deltas) == [True] * 3
    assert _gradients(model, "gen_loss", deltas) == [False] * 3
    assert _gradients(model, "gen_loss", shared) == [True] * 3
    # The discriminator's own LayerNorm learns from its loss only.
    assert _gradients(model, "gen_loss", residuals.layer_norm.trainable_variables) == [False] * 2


def test_gdes_export_sums_the_tables_and_writes_both_blocks_to_tf1(tmp_path):
    model = _model(embedding_sharing="gdes")
    for delta in model.encoder.embeddings.trainable_variables:
        delta.assign(np.random.default_rng(3).normal(0, 0.1, delta.shape).astype("float32"))
    exported = model.discriminator_model()
    assert type(exported.encoder.embeddings) is modeling.Embeddings
    summed = model.generator.embeddings.word_embeddings.numpy() + \
        model.encoder.embeddings.word_embeddings_delta.numpy()
    np.testing.assert_allclose(exported.encoder.embedding_table.numpy(), summed, rtol=1e-6)
    features = _features()
    np.testing.assert_allclose(
        exported(features)["logits"].numpy(),
        model.disc_head(model.encoder(features["input_ids"], features["input_mask"],
                                            features["segment_ids"])).numpy(), atol=1e-5)
    prefix = tf1_checkpoint.write_tf1_checkpoint(str(tmp_path / "model.ckpt-1"), exported,
                                                 model.generator_model(), 1)
    names = dict(tf.train.list_variables(prefix))
    assert "generator/embeddings/word_embeddings" in names  # the generator's own E_G
    loaded = checkpoints.load_pretrained(str(tmp_path))
    np.testing.assert_allclose(loaded.discriminator.encoder.embedding_table.numpy(), summed,
                               rtol=1e-6)
    np.testing.assert_array_equal(loaded.generator.encoder.embedding_table.numpy(),
                                  model.generator.embedding_table.numpy())


def test_adversarial_gradients():
    model = _model(training_algorithm="adversarial")
    generator_only = model.generator_variables()
    # The discriminator's loss still reaches no generator weight; the REINFORCE loss does
    # (there is no MLM term by default), and the baseline's loss trains the baseline alone.
    assert not any(_gradients(model, "disc_loss", generator_only))
    assert any(_gradients(model, "loss", generator_only))
    assert not any(_gradients(model, "baseline_loss", model.generator.trainable_variables))
    assert all(_gradients(model, "baseline_loss", model.baseline_head.trainable_variables))


TWO_STAGE = {"training_algorithm": "two_stage", "generator_hidden_size": 1.0,
             "num_train_steps": 4, "num_warmup_steps": 1, **NO_DROPOUT}


def test_two_stage_trains_one_network_per_stage():
    model = _model(**TWO_STAGE)
    generator, discriminator = model.generator_variables(), model.discriminator_variables()
    assert generator and discriminator
    assert not set(map(id, generator)) & set(map(id, discriminator))
    assert model.generator.embeddings is not model.encoder.embeddings
    assert all(_gradients(model, "loss", generator, stage=1))
    assert not any(_gradients(model, "loss", discriminator, stage=1))
    assert not any(_gradients(model, "loss", generator, stage=2))
    assert any(_gradients(model, "loss", discriminator, stage=2))


def _state(**hparams):
    return pretraining.create_state(tiny_config(**hparams), pretraining.SpecialIds(),
                                    tf.distribute.get_strategy())


def _values(variables):
    return [v.numpy().copy() for v in variables]


def _slots(optimizer, variables):
    index = [optimizer._get_variable_index(v) for v in variables]
    return [optimizer._adam_m[i].numpy().copy() for i in index] + \
        [optimizer._adam_v[i].numpy().copy() for i in index]


def _unchanged(before, after):
    return all(np.array_equal(a, b) for a, b in zip(before, after))


def test_two_stage_switches_freezes_and_restarts_the_schedule():
    state = _state(**TWO_STAGE)
    model, optimizer = state.model, state.optimizer
    step = tf.function(state.make_train_step(1, jit_compile=False))
    generator, discriminator = model.generator_variables(), model.discriminator_variables()
    disc_start, gen_start = _values(discriminator), _values(generator)
    rates = []
    for _ in range(2):  # stage 1: the discriminator neither learns nor decays
        rates.append(float(optimizer.learning_rate))
        step(_features())
    assert _unchanged(disc_start, _values(discriminator))
    assert not any(s.any() for s in _slots(optimizer, discriminator))
    assert not _unchanged(gen_start, _values(generator))
    # The switch: the discriminator's encoder becomes the generator's.
    tf.function(state._start_discriminator_from_generator)()
    for ours, theirs in zip(model.encoder.weights, model.generator.weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    frozen, frozen_slots = _values(generator), _slots(optimizer, generator)
    switched = _values(discriminator)
    for _ in range(2):  # stage 2: the generator neither learns, decays nor moves its moments
        rates.append(float(optimizer.learning_rate))
        step(_features())
    assert _unchanged(frozen, _values(generator))
    assert _unchanged(frozen_slots, _slots(optimizer, generator))
    assert not _unchanged(switched, _values(discriminator))
    # Each stage warms up from zero and decays over its own 2 steps.
    assert rates[0] == rates[2] == 0.0 and rates[1] == rates[3] > 0
    results = state.metrics.results()
    assert results["stage"] == 1.5 and "disc_auc" in results


@pytest.mark.slow
@pytest.mark.parametrize("stop", [1, 3])
def test_two_stage_resumes_inside_either_stage(tmp_path, stop):
    batches = [_features(seed=i) for i in range(4)]
    straight = _state(**TWO_STAGE)
    step = tf.function(straight.make_train_step(1, jit_compile=False))
    for batch in batches:
        step(batch)
    first = _state(**TWO_STAGE)
    step = tf.function(first.make_train_step(1, jit_compile=False))
    for batch in batches[:stop]:
        step(batch)
    path = first.checkpoint().save(str(tmp_path / "ckpt"))
    resumed = _state(**TWO_STAGE)
    resumed.checkpoint().restore(path).assert_existing_objects_matched()
    step = tf.function(resumed.make_train_step(1, jit_compile=False))
    for batch in batches[stop:]:
        step(batch)
    for ours, theirs in zip(resumed.model.weights, straight.model.weights):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=1e-6, err_msg=ours.path)


@pytest.mark.parametrize("fused", [True, False])
def test_optimizer_freeze_leaves_weights_and_moments_alone(fused):
    import keras
    variables = [keras.Variable(np.ones((2, 3), "float32"), name=n) for n in ("kernel", "k2")]
    optimizer = optimization.AdamWeightDecay(
        learning_rate=optimization.WarmupPolynomialDecay(0.1, 100), weight_decay_rate=0.1,
        fused=fused)
    optimizer.build(variables)
    optimizer.freeze(variables[:1], lambda: optimizer.iterations < 1)
    grads = [np.full((2, 3), 0.5, "float32")] * 2
    tf.function(lambda: optimizer.apply(grads, variables))()
    assert (variables[0].numpy() == 1).all() and not optimizer._adam_m[0].numpy().any()
    assert (variables[1].numpy() < 1).all()
    tf.function(lambda: optimizer.apply(grads, variables))()  # step 1: no longer frozen
    assert (variables[0].numpy() < 1).all() and optimizer._adam_m[0].numpy().any()


# ------------------------------------------------------------------ hparams and metrics

@pytest.mark.parametrize("hparams, objective", [
    ({}, "electra"),
    ({"electra_objective": False}, "mlm"),
    ({"electric_objective": True}, "electric"),
    ({"electra_objective": False, "electric_objective": True}, "electric"),  # the original's
    ({"objective": "all_tokens_mlm", "electra_objective": False}, "all_tokens_mlm"),
])
def test_objective_and_its_original_spellings(hparams, objective):
    config = tiny_config(**hparams)
    assert config.objective == objective
    assert config.electric_objective == (objective == "electric")
    assert config.two_tower_generator == (objective == "electric")
    assert tiny_config(**{k: v for k, v in config.to_dict().items()
                          if k in ("objective", "electra_objective", "electric_objective")}
                       ).objective == objective  # the saved spellings agree


@pytest.mark.parametrize("hparams, message", [
    ({"objective": "replace_mlm", "electra_objective": True},
     "'objective' is 'replace_mlm' but electra_objective True says otherwise"),
    ({"objective": "electra", "electric_objective": True},
     "'objective' is 'electra' but electric_objective True says otherwise"),
    ({"objective": "bert"}, "hparam 'objective': one of"),
    ({"embedding_sharing": "gdes", "untied_generator_embeddings": True},
     "'embedding_sharing' is 'gdes' but untied_generator_embeddings True"),
    ({"training_algorithm": "two_stage"},
     "two_stage initialises the discriminator with the generator's weights, so both must be "
     "the same size: set generator_hidden_size and generator_layers to 1.0 (got 0.25"),
    ({"training_algorithm": "two_stage", "generator_hidden_size": 1.0,
      "embedding_sharing": "tied"}, "two_stage freezes the generator"),
    ({"training_algorithm": "two_stage", "generator_hidden_size": 1.0, "num_train_steps": 5},
     "make it even (got 5)"),
    ({"training_algorithm": "adversarial", "objective": "replace_mlm"},
     "adversarial trains a generator against ELECTRA's discriminator"),
    ({"training_algorithm": "adversarial", "uniform_generator": True},
     "adversarial needs a generator network of its own"),
    ({"embedding_sharing": "gdes", "objective": "mlm"}, "gdes shares a separate"),
    ({"objective": "mlm", "uniform_generator": True}, "cannot be uniform"),
])
def test_contradictions_fail_naming_the_hparams(hparams, message):
    with pytest.raises(ConfigError) as error:
        tiny_config(**hparams)
    assert message in str(error.value)


def test_the_original_spellings_are_taken_at_the_edge_only(tmp_path):
    import dataclasses
    spellings = config.PretrainingConfig.SPELLINGS
    assert not {f.name for f in dataclasses.fields(config.PretrainingConfig)} & set(spellings)
    run = tiny_config(untied_generator_embeddings=True, electra_objective=False)
    assert (run.objective, run.embedding_sharing) == ("mlm", "untied")
    saved = run.to_dict()  # pretrain_config.json: both spellings, as before
    assert (saved["electra_objective"], saved["electric_objective"],
            saved["untied_generator_embeddings"]) == (False, False, True)
    # A run saved with the original's spellings only, or with ours only, reads the same.
    for only in ({k: v for k, v in saved.items() if k not in ("objective", "embedding_sharing")},
                 {k: v for k, v in saved.items() if k not in spellings}):
        model_dir = tmp_path / "models" / "tiny"
        model_dir.mkdir(parents=True, exist_ok=True)
        (model_dir / "pretrain_config.json").write_text(json.dumps(only))
        (model_dir / "ckpt-1.index").write_bytes(b"")
        resumed = config.from_hparams("tiny", str(tmp_path), {})
        assert (resumed.objective, resumed.embedding_sharing) == ("mlm", "untied")
    with pytest.raises(ConfigError, match="'electra_objective' must be true or false, got 'no'"):
        tiny_config(electra_objective="no")


def test_two_stage_and_untied_spellings_resolve():
    config = tiny_config(**TWO_STAGE)
    assert config.embedding_sharing == "untied" and config.untied_generator_embeddings
    assert tiny_config(untied_generator_embeddings=True).embedding_sharing == "untied"


def test_resuming_checks_the_new_shape_hparams():
    from electra_tf.config import check_resumable
    saved = tiny_config().to_dict()
    check_resumable(tiny_config(), saved, "here")
    # A run saved before these hparams existed resumes as what its spellings say.
    legacy = {k: v for k, v in saved.items()
              if k not in ("objective", "training_algorithm", "embedding_sharing")}
    check_resumable(tiny_config(), legacy, "here")
    # The same sizes spelled out in full, as a run started from init_checkpoint saves them.
    written_out = {**saved, "model_hparam_overrides": tiny_config().bert_config()}
    check_resumable(tiny_config(), written_out, "here")
    wider = {**written_out, "model_hparam_overrides": {**written_out["model_hparam_overrides"],
                                                       "intermediate_size": 128}}
    with pytest.raises(ConfigError, match=r"\(discriminator intermediate_size: 128 there, 64 "
                                          r"now\)"):
        check_resumable(tiny_config(), wider, "here")
    # The generator's own size decides its variables; with untied_generator false the
    # generator is the discriminator's size, whatever the fractions say.
    with pytest.raises(ConfigError, match=r"\(generator hidden_size: 8 there, 16 now, "
                                          "generator intermediate_size: 32 there, 64 now\)"):
        check_resumable(tiny_config(generator_hidden_size=0.5), saved, "here")
    with pytest.raises(ConfigError, match="generator num_hidden_layers: 2 there, 1 now"):
        check_resumable(tiny_config(generator_layers=0.5), saved, "here")
    shared = tiny_config(untied_generator=False).to_dict()
    check_resumable(tiny_config(untied_generator=False, generator_hidden_size=0.5), shared, "h")
    # No embedding_size is the hidden size.
    check_resumable(tiny_config(embedding_size=None),
                    tiny_config(embedding_size=32).to_dict(), "here")
    with pytest.raises(ConfigError, match="objective: 'electra' there, 'electra_15' now"):
        check_resumable(tiny_config(objective="electra_15"), saved, "here")
    with pytest.raises(ConfigError, match="resume it with num_train_steps 4"):
        check_resumable(tiny_config(**{**TWO_STAGE, "num_train_steps": 8}),
                        tiny_config(**TWO_STAGE).to_dict(), "here")


@pytest.mark.parametrize("hparams, present, absent", [
    ({"objective": "electra_15"}, {"disc_loss", "disc_auc", "replaced_fraction"},
     {"replace_mlm_loss"}),
    ({"objective": "mlm"}, {"masked_lm_loss", "masked_lm_accuracy",
                            "masked_lm_accuracy_at_mask"},
     {"disc_loss", "sampled_masked_lm_accuracy"}),
    ({"objective": "replace_mlm"}, {"replace_mlm_loss", "replace_mlm_accuracy",
                                    "replace_mlm_fake_accuracy", "sampled_masked_lm_accuracy"},
     {"disc_loss", "disc_auc"}),
    ({"objective": "all_tokens_mlm"}, {"all_tokens_mlm_loss", "all_tokens_mlm_accuracy",
                                       "all_tokens_mlm_fake_accuracy", "copy_probability",
                                       "all_tokens_mlm_softmax_fake_accuracy",
                                       "disc_auc"}, {"disc_loss"}),
    ({"training_algorithm": "adversarial"}, {"adversarial_reward", "baseline_loss",
                                             "disc_loss"}, {"stage"}),
    ({"electric_objective": True}, {"masked_lm_loss", "disc_loss", "disc_auc"}, {"stage"}),
    ({"uniform_generator": True}, {"masked_lm_loss", "disc_loss", "disc_auc"}, {"stage"}),
    # At disc_weight 0 the discriminator does not train: the original's metric_fn reports
    # none of its metrics.
    ({"disc_weight": 0.0}, {"masked_lm_loss", "sampled_masked_lm_accuracy", "replaced_fraction"},
     {"disc_loss", "disc_accuracy", "disc_precision", "disc_recall", "disc_auc"}),
    ({"electric_objective": True, "disc_weight": 0.0}, {"masked_lm_loss"},
     {"disc_loss", "disc_auc"}),
])
def test_each_objective_evaluates_its_own_metrics(hparams, present, absent):
    """What do_eval computes: the metrics over model(features, training=False)."""
    model = _model(**hparams)
    metrics = pretraining.PretrainingMetrics(model)
    metrics.update(model(_features(), training=False))
    results = metrics.results()
    assert present <= set(results), present - set(results)
    assert not absent & set(results) and "grad_norm" not in results
    assert all(np.isfinite(v) for v in results.values())


def test_evaluation_losses_pool_as_the_originals_metric_fn():
    """Over several batches, masked_lm_loss is the mean over every draw of the evaluation
    (tf.metrics.mean of the per-draw losses, weighted by masked_lm_weights) and disc_loss the
    mean over examples of each example's mean over its real tokens, not the mean of the
    batches' losses: here the second batch has fewer draws and examples of unequal length.
    An untrained model's losses are all near ln V and ln 2, so the second batch's are set
    apart: its draws' losses by 3 nats, its discriminator's from logits of our choosing."""
    model = _model()
    metrics = pretraining.PretrainingMetrics(model)
    first = model(_features(seed=1), training=False)
    second = dict(model(_features(seed=2), training=False))
    fewer = second["masked_lm_weights"].numpy().copy()
    fewer[:, 1:] = 0.0
    second["masked_lm_weights"] = tf.constant(fewer)
    second["mlm_draw_losses"] = second["mlm_draw_losses"] + 3.0
    rng = np.random.default_rng(0)
    real = np.zeros(second["input_mask"].shape, np.float32)
    for row, length in enumerate((32, 4, 20, 9)):
        real[row, :length] = 1.0
    logits = (3 * rng.standard_normal(real.shape)).astype(np.float32)
    labels = (rng.random(real.shape) < 0.3).astype(np.int32)
    _, judged = model.objective.outputs(tf.constant(logits), tf.constant(labels),
                                        tf.constant(real))
    second.update(judged)
    for out in (first, second):
        metrics.update(out)
    results = metrics.results()

    draws = [(o["mlm_draw_losses"].numpy(), o["masked_lm_weights"].numpy())
             for o in (first, second)]
    pooled = sum((w * x).sum() for x, w in draws) / sum(w.sum() for _, w in draws)
    assert results["masked_lm_loss"] == pytest.approx(pooled, rel=1e-5)
    assert abs(pooled - np.mean([(w * x).sum() / w.sum() for x, w in draws])) > 0.5
    np.testing.assert_allclose(first["gen_loss"], (draws[0][0] * draws[0][1]).sum()
                               / draws[0][1].sum(), rtol=1e-5)  # the same draws' losses
    examples = []
    for o in map(_numpy, (first, second)):
        losses = _sigmoid_cross_entropy(o["disc_logits"], o["disc_labels"]) * o["disc_weights"]
        examples.extend(losses.sum(-1) / o["disc_weights"].sum(-1))
    assert results["disc_loss"] == pytest.approx(np.mean(examples), rel=1e-5)
    batch_means = [float(o["disc_loss"]) for o in (first, second)]
    assert abs(np.mean(examples) - np.mean(batch_means)) > 0.01


def test_disc_auc_is_tf_metrics_auc_with_padding_weighted_out():
    """By default the original's tf.metrics.auc (200 thresholds, trapezoids), given the real
    tokens as weights (it counted padding as label-0, probability-0 tokens instead); with
    auc_num_thresholds, a finer estimate of the exact area."""
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)

    def disc_auc(**hparams):
        model = _model(**hparams)
        out = model(_features(), training=False)
        weights = out["disc_weights"].numpy()
        labels = (rng.random(weights.shape) < 0.15).astype(np.int32)
        # Clustered near 0.5, as a young discriminator's are: the thresholds' spacing matters.
        probs = np.clip(0.5 + 0.004 * labels + 0.003 * rng.standard_normal(weights.shape),
                        0, 1).astype(np.float32)
        metrics = pretraining.PretrainingMetrics(model)
        metrics.update({**out, "disc_labels": tf.constant(labels),
                        "disc_probs": tf.constant(probs)})
        return metrics.results()["disc_auc"], labels, probs, weights

    ours, labels, probs, weights = disc_auc()
    with tf.Graph().as_default():
        auc, update = tf.compat.v1.metrics.auc(labels, probs, weights)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.local_variables_initializer())
            session.run(update)
            original = session.run(auc)
    assert ours == pytest.approx(original, abs=1e-6)
    real = weights > 0
    assert abs(ours - roc_auc_score(labels[real], probs[real])) > 0.02  # coarse here
    finer, labels, probs, weights = disc_auc(auc_num_thresholds=20000)
    real = weights > 0
    assert finer == pytest.approx(roc_auc_score(labels[real], probs[real]), abs=0.005)


def test_electric_masked_lm_loss_is_the_cloze_model_at_the_draws():
    """As the original's: the cloze loss trains over every maskable token, but masked_lm_loss
    reports the cloze distribution's cross-entropy at the masked draws only."""
    model = _model(electric_objective=True)
    features = _features()
    masked = masking.mask(features["input_ids"], features["input_mask"], 0.15, 5,
                          model.special, tf.random.Generator.from_seed(3))
    generated = model.generator_part(masking.Batch(features["input_ids"],
                                                   features["input_mask"],
                                                   features["segment_ids"], masked),
                                     training=False)
    ids, weights = masked.masked_lm_ids.numpy(), masked.masked_lm_weights.numpy()
    expected = -np.take_along_axis(_log_softmax(generated.logits.numpy()), ids[..., None],
                                   -1)[..., 0]
    drawn = weights > 0  # a padding slot's loss is weighted out
    np.testing.assert_allclose(generated.draw_losses.numpy()[drawn], expected[drawn],
                               rtol=1e-4, atol=1e-5)
    # The training loss covers every maskable token.
    candidates = masking.candidates_mask(features["input_ids"], features["input_mask"],
                                         model.special).numpy()
    token_losses = -np.take_along_axis(_log_softmax(generated.cloze_logits.numpy()),
                                       features["input_ids"].numpy()[..., None], -1)[..., 0]
    assert float(generated.loss) == pytest.approx(
        (token_losses * candidates).sum() / candidates.sum(), rel=1e-5)


def test_accuracy_at_mask_leaves_out_the_positions_that_keep_their_token():
    """masked_lm_accuracy counts every masked position, as the original's; the one at [MASK]
    only those shown as [MASK] (a model that reads no context scores the unigram level there)."""
    metrics = pretraining.PretrainingMetrics(_model(objective="mlm"))
    mask = pretraining.SpecialIds().mask
    metrics.update({
        "loss": tf.constant(1.0), "gen_loss": tf.constant(1.0),
        "mlm_draw_losses": tf.ones([1, 4]),
        # Positions 1 and 3 show [MASK], 2 keeps its token 7; the fourth slot is padding.
        "masked_input_ids": tf.constant([[101, mask, 7, mask, 9, 102]]),
        "masked_lm_positions": tf.constant([[1, 2, 3, 0]]),
        "masked_lm_ids": tf.constant([[5, 7, 8, 0]]),
        "masked_lm_weights": tf.constant([[1.0, 1.0, 1.0, 0.0]]),
        "masked_lm_preds": tf.constant([[5, 7, 1, 0]])})
    results = metrics.results()
    assert results["masked_lm_accuracy"] == pytest.approx(2 / 3)
    assert results["masked_lm_accuracy_at_mask"] == pytest.approx(1 / 2)


def test_two_stage_first_stage_reports_no_discriminator_metrics():
    model = _model(**TWO_STAGE)
    metrics = pretraining.PretrainingMetrics(model)
    metrics.update(model(_features(), training=True, stage=1))
    results = metrics.results()
    assert results["stage"] == 1.0 and "masked_lm_loss" in results
    assert not {"disc_loss", "disc_auc", "disc_accuracy"} & set(results)


# ------------------------------------------------------------------ the protocols and registry

@pytest.mark.parametrize("hparams, generator", [
    ({}, generators.MaskedLMGenerator),
    ({"objective": "mlm"}, generators.MaskedLMGenerator),
    ({"electric_objective": True}, generators.TwoTowerGenerator),
    ({"objective": "all_tokens_mlm", "uniform_generator": True}, generators.UniformGenerator),
    ({"objective": "replace_mlm"}, generators.MaskedLMGenerator),
    ({"objective": "electra_15"}, generators.MaskedLMGenerator),
])
def test_generators_and_objectives_are_the_written_protocols(hparams, generator):
    model = _model(**hparams)
    assert type(model.generator_part) is generator
    assert isinstance(model.generator_part, generators.Generator)
    assert type(model.objective) is objectives.REGISTRY[model.config.objective]
    assert isinstance(model.objective, objectives.Objective)
    assert model.disc_head is model.objective.disc_head


def test_every_objective_has_a_class_and_a_config_line():
    assert list(objectives.REGISTRY) and set(objectives.REGISTRY) == set(config.OBJECTIVES)
    assert config.detection_objectives() == ("electra", "electra_15")

    class Incomplete(objectives.Objective):  # no loss, no FLOPs: cannot be built
        def __init__(self, encoder, config):
            self.encoder, self.layers, self.metrics = encoder, [encoder], {}

    assert "Incomplete" not in {cls.__name__ for cls in objectives.REGISTRY.values()}
    with pytest.raises(TypeError, match="abstract"):
        Incomplete(None, None)


FOCAL = {"objective": "focal_electra", "num_train_steps": 4, "iterations_per_loop": 2,
         "text_summary_steps": 0}


def _register_focal_detection(monkeypatch) -> None:
    """A replaced-token detection with a focal loss (Lin et al., 2017), defined here: its
    class and its line in config.OBJECTIVES make it the `objective` hparam focal_electra (both
    undone after the test)."""
    monkeypatch.setattr(objectives, "REGISTRY", dict(objectives.REGISTRY))

    class FocalDetection(objectives.Objective):
        name = "focal_electra"

        def __init__(self, encoder, config):
            self.encoder = encoder
            self.disc_head = modeling.DiscriminatorHead.for_encoder(encoder)
            self.layers = [encoder, self.disc_head]
            self.metrics = {"focal_loss": objectives.MetricRule.mean(
                lambda o: (o["focal_loss"], None))}

        def __call__(self, batch, corrupted, generated, training):
            hidden = self.encoder(corrupted.input_ids, batch.input_mask, batch.segment_ids,
                                  training=training)
            logits = self.disc_head(hidden)
            signed = tf.where(corrupted.labels > 0, logits, -logits)  # the true class's logit
            losses = -(1.0 - tf.sigmoid(signed)) ** 2 * tf.math.log_sigmoid(signed)
            weights = tf.cast(batch.input_mask, tf.float32)
            loss = tf.reduce_sum(losses * weights) / tf.reduce_sum(weights)
            return loss, {"focal_loss": loss, "disc_logits": logits}

        @classmethod
        def matmuls(cls, step):
            return (step.encoder("discriminator")
                    + step.discriminator_head("focal head", "focal logit") + step.generator())

    with pytest.raises(ConfigError, match="hparam 'objective': one of"):
        tiny_config(**FOCAL)  # the class alone is not an objective
    monkeypatch.setitem(config.OBJECTIVES, "focal_electra",
                        config.ObjectiveHparams(detection=True, disc_weight=20.0))


def test_a_new_objective_is_one_class_and_one_registry_line(monkeypatch):
    """It is an hparam with its disc_weight, counts its FLOPs, checks its health and trains
    its own loss."""
    _register_focal_detection(monkeypatch)
    run = tiny_config(**FOCAL)
    assert run.disc_weight == 20.0 and run.electra_objective
    names = {m.name for m in flops.pretraining_matmuls(run)}
    assert {"focal head", "generator MLM output layer"} <= names
    monitor = health.pretraining_monitor(run.mask_prob, run.vocab_size, 0, run.objective)
    assert monitor.update(10, {"disc_loss": 5.0, "replaced_fraction": 0.4}) == []

    model = _model(objective="focal_electra")
    out = model(_features(), training=False)
    np.testing.assert_allclose(out["loss"], out["gen_loss"] + 20.0 * out["focal_loss"],
                               rtol=1e-5)
    grads = _gradients(model, "focal_loss", model.disc_head.trainable_variables)
    assert grads and all(grads)


@pytest.mark.slow
def test_a_new_objective_trains_and_exports_through_run_pretraining(data_dir, monkeypatch):
    import run_pretraining

    _register_focal_detection(monkeypatch)
    run = tiny_config(data_dir, **FOCAL)
    results = run_pretraining.train_or_eval(run, tf.distribute.get_strategy())
    assert np.isfinite(results["focal_loss"]) and "disc_loss" not in results
    written = progress.read_events(run.model_dir)[0]
    assert set(written["focal_loss"]) == {2, 4}
    exported = checkpoints.load_pretrained(run.model_dir)
    assert exported.discriminator is not None and exported.generator is not None


# ------------------------------------------------------------------ run_pretraining.py

def _pretrain(data_dir, name, **hparams):
    hparams = {**TINY_MODEL, "num_train_steps": 2, "iterations_per_loop": 2,
               "text_summary_steps": 2, **hparams}
    result = run_script("run_pretraining.py", f"--data_dir={data_dir}", f"--model_name={name}",
                        f"--hparams={json.dumps(hparams)}")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result.stdout, data_dir / "models" / name


@pytest.mark.slow
@pytest.mark.parametrize("hparams, scalars", [
    ({"objective": "replace_mlm"}, {"replace_mlm_loss", "replace_mlm_fake_accuracy"}),
    ({"objective": "electra_15", "training_algorithm": "two_stage",
      "generator_hidden_size": 1.0, "num_train_steps": 4},
     {"stage", "disc_loss", "masked_lm_loss"}),
    ({"training_algorithm": "adversarial", "embedding_sharing": "gdes",
      "adversarial_mlm_weight": 0.5}, {"adversarial_reward", "baseline_loss", "disc_auc"}),
    ({"objective": "mlm"}, {"masked_lm_loss"}),
])
def test_run_pretraining_trains_each_objective_and_algorithm(data_dir, hparams, scalars):
    stdout, model_dir = _pretrain(data_dir, "run", **hparams)
    assert "exported" in stdout and os.path.exists(model_dir / "discriminator.keras")
    written = set(progress.read_events(str(model_dir))[0])
    assert scalars <= written, scalars - written
    assert (model_dir / "vocab.txt").read_text() == (data_dir / "vocab.txt").read_text()
    exported = checkpoints.load_pretrained(str(model_dir))
    assert exported.vocab_file == str(model_dir / "vocab.txt") and exported.do_lower_case
    if hparams.get("embedding_sharing") == "gdes":
        # The generator's tables and the discriminator's sums differ after training.
        assert not np.allclose(exported.generator.encoder.embedding_table.numpy(),
                               exported.discriminator.encoder.embedding_table.numpy())


def _sst(directory):
    """A few SST-format sentences (written for this test) with labels."""
    good = ["a wonderful , moving film", "great acting and a clever story", "i loved it",
            "funny , warm and smart", "a joy from start to finish", "beautifully made"]
    bad = ["a dull , lifeless mess", "boring and far too long", "i hated it",
           "the plot makes no sense", "a waste of two hours", "badly acted"]
    rows = [f"{s}\t1" for s in good] + [f"{s}\t0" for s in bad]
    directory.mkdir(parents=True)
    for split in ("train", "dev"):
        (directory / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")


@pytest.mark.slow
def test_all_tokens_mlm_evaluates_exports_and_fine_tunes_with_no_size_hparams(data_dir):
    _, model_dir = _pretrain(data_dir, "atm", objective="all_tokens_mlm")
    evaluation = run_script("run_pretraining.py", f"--data_dir={data_dir}", "--model_name=atm",
                            "--hparams=" + json.dumps({**TINY_MODEL, "objective": "all_tokens_mlm",
                                                       "do_train": False, "do_eval": True,
                                                       "num_eval_steps": 1}))
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]
    results = (model_dir / "results" / "unsup_results.txt").read_text()
    assert "all_tokens_mlm_loss = " in results and "disc_auc = " in results
    _sst(data_dir / "finetuning_data" / "sst")
    hparams = {"task_names": ["sst"], "num_train_epochs": 1, "max_seq_length": 16,
               "train_batch_size": 4, "eval_batch_size": 4, "predict_batch_size": 4}
    tuned = run_script("run_finetuning.py", f"--data_dir={data_dir}", "--model_name=atm",
                       f"--hparams={json.dumps(hparams)}")
    assert tuned.returncode == 0, tuned.stdout[-2000:] + tuned.stderr[-3000:]
    assert "initialised the encoder from" in tuned.stdout
    summary = json.loads((model_dir / "results" / "sst_results.json").read_text())
    assert 0 <= summary["median"]["sst"]["accuracy"] <= 100
