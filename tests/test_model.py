"""The Keras model and the objective: tying, gradients, loss, variants, serialization."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import tiny_config
from electra_tf import distribution, modeling, optimization, pretraining


def _features(batch=4, seq=32, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 30000, (batch, seq)).astype(np.int32)
    mask = np.ones_like(ids)
    ids[:, 0], ids[:, seq // 2] = 101, 102
    ids[1, 20:], mask[1, 20:] = 0, 0
    ids[1, 19] = 102
    segments = np.zeros_like(ids)
    segments[:, seq // 2 + 1:] = 1
    return {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
            "segment_ids": tf.constant(segments * mask)}


def _model(**hparams):
    config = tiny_config(**hparams)
    model = pretraining.PretrainingModel(config, pretraining.SpecialIds(),
                                         tf.random.Generator.from_seed(0))
    model.build()
    return model


def _ids(variables):
    return {id(v) for v in variables}


def test_default_tying_shares_the_whole_embedding_block():
    model = _model()
    assert model.generator is not model.encoder
    assert model.generator.embeddings is model.encoder.embeddings
    emb = model.encoder.embeddings
    shared = _ids([emb.word_embeddings, emb.position_embeddings, emb.token_type_embeddings,
                   *emb.layer_norm.weights])
    assert shared <= _ids(model.generator.weights) & _ids(model.encoder.weights)
    # Each encoder projects the 16-wide embeddings to its own hidden size.
    assert model.generator.embeddings_project is not model.encoder.embeddings_project
    assert model.generator.hidden_size == 8 and model.encoder.hidden_size == 32
    assert model.generator.embeddings_project.units == 8
    # The MLM head's output layer is the word-embedding matrix (no separate output matrix).
    assert model.mlm_head.dense.units == 16
    variables = model.trainable_variables
    assert len(variables) == len(_ids(variables))  # shared weights are counted once


def test_untied_generator_embeddings_get_their_own_block():
    model = _model(untied_generator_embeddings=True)
    assert model.generator.embeddings is not model.encoder.embeddings
    assert not _ids(model.generator.embeddings.weights) & _ids(model.encoder.weights)
    # As the original: the generator's embeddings are then its own hidden size wide.
    assert model.generator.embedding_size == model.generator.hidden_size == 8
    assert model.generator.embeddings_project is None
    # Electric's two towers then each have their own (tied, they share the discriminator's).
    electric = _model(electric_objective=True, untied_generator_embeddings=True)
    towers = (electric.generator, electric.generator_rtl, electric.encoder)
    assert len({id(tower.embeddings) for tower in towers}) == 3


def test_untied_generator_false_uses_one_encoder():
    # As the original, the generator's fractions are then ignored.
    model = _model(untied_generator=False)
    assert model.generator is model.encoder
    c = tiny_config(untied_generator=False)
    assert c.generator_hidden_size < 1 and c.generator_bert_config() == c.bert_config()


def test_bert_objective_has_no_discriminator_loss():
    model = _model(electra_objective=False)
    out = model(_features(), training=True)
    assert "disc_loss" not in out and model.disc_head is None
    assert model.generator is model.encoder
    np.testing.assert_allclose(float(out["loss"]), float(out["gen_loss"]), rtol=1e-6)


def test_loss_is_mlm_plus_50_times_discriminator():
    model = _model()
    out = model(_features(), training=False)
    expected = float(out["gen_loss"]) + 50.0 * float(out["disc_loss"])
    np.testing.assert_allclose(float(out["loss"]), expected, rtol=1e-5)
    # Untrained: MLM loss ~ ln(vocab), discriminator loss ~ ln 2 (bias-free-ish start).
    assert abs(float(out["gen_loss"]) - math.log(30522)) < 1.0
    assert 0.3 < float(out["disc_loss"]) < 1.5


def test_discriminator_loss_sends_no_gradient_to_the_generator():
    model = _model()
    features = _features()
    generator_only = [v for v in model.trainable_variables
                      if "/generator/" in v.path or "/generator_predictions/" in v.path]
    assert generator_only
    with tf.GradientTape(persistent=True) as tape:
        out = model(features, training=True)
    disc_grads = tape.gradient(out["disc_loss"], generator_only)
    assert all(g is None for g in disc_grads)
    mlm_grads = tape.gradient(out["gen_loss"], generator_only)
    assert all(g is not None for g in mlm_grads)
    # The shared embeddings learn from both losses.
    emb = model.encoder.embeddings.word_embeddings
    assert tape.gradient(out["disc_loss"], emb) is not None


@pytest.mark.parametrize("hparams", [
    {"uniform_generator": True},
    {"disallow_correct": True, "temperature": 0.5},
    {"electric_objective": True},
])
def test_variants_train_one_step(hparams):
    model = _model(**hparams)
    optimizer = optimization.create_optimizer(1e-3, 10, 0, 0.01)
    variables = model.trainable_variables
    before = [v.numpy().copy() for v in variables]
    with tf.GradientTape() as tape:
        out = model(_features(), training=True)
    grads = tape.gradient(out["loss"], variables)
    optimizer.build(variables)
    distribution.apply_gradients(optimizer, grads, variables)
    assert np.isfinite(float(out["loss"]))
    assert any(not np.allclose(b, v.numpy()) for b, v in zip(before, variables))
    if hparams.get("uniform_generator"):
        assert model.generator is None and model.mlm_head is None
    if hparams.get("disallow_correct"):
        w = out["masked_lm_weights"].numpy() > 0
        assert (out["sampled_tokids"].numpy()[w] != out["masked_lm_ids"].numpy()[w]).all()
    if hparams.get("electric_objective"):
        assert model.generator.causal == "ltr" and model.generator_rtl.causal == "rtl"
        # Electric labels every replaced position fake.
        np.testing.assert_array_equal(out["disc_labels"].numpy(), out["replaced_mask"].numpy())
        # Tied embeddings: both towers use the discriminator's.
        assert model.generator.embeddings is model.generator_rtl.embeddings is \
            model.encoder.embeddings


def test_causal_towers_only_look_one_way():
    encoder = modeling.Encoder(vocab_size=50, hidden_size=8, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=16, causal="ltr",
                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ids = tf.constant([[1, 2, 3, 4, 5]])
    changed = tf.constant([[1, 2, 3, 4, 9]])
    ones, zeros = tf.ones_like(ids), tf.zeros_like(ids)
    a, b = encoder(ids, ones, zeros), encoder(changed, ones, zeros)
    np.testing.assert_allclose(a[:, :4].numpy(), b[:, :4].numpy(), atol=1e-6)
    assert not np.allclose(a[:, 4].numpy(), b[:, 4].numpy())


def test_exact_gelu_layer_norm_epsilon_and_padding():
    layer = modeling.TransformerLayer(8, 2, 16)
    layer.build()
    x = tf.constant([-3.0, -0.5, 0.0, 1.0, 2.5])
    exact = 0.5 * x * (1.0 + tf.math.erf(x / math.sqrt(2.0)))
    np.testing.assert_allclose(layer.intermediate.activation(x).numpy(), exact.numpy(),
                               atol=1e-7)
    assert layer.attention_layer_norm.epsilon == 1e-12
    assert layer.output_layer_norm.epsilon == 1e-12
    # A padded position changes nothing at the real positions.
    disc = _model().discriminator_model()
    features = _features()
    out = disc(features)["logits"].numpy()
    ids = features["input_ids"].numpy().copy()
    ids[1, 25] = 4242  # inside the padding of example 1
    out2 = disc({**features, "input_ids": tf.constant(ids)})["logits"].numpy()
    np.testing.assert_allclose(out[1, :20], out2[1, :20], atol=1e-5)


def test_keras_round_trip_gives_identical_outputs(tmp_path):
    model = _model()
    features = _features()
    for name, exported in (("disc", model.discriminator_model()),
                           ("gen", model.generator_model())):
        path = tmp_path / f"{name}.keras"
        exported.save(path)
        loaded = keras.saving.load_model(path)
        expected = exported(features, training=False)
        actual = loaded(features, training=False)
        np.testing.assert_array_equal(actual["logits"].numpy(), expected["logits"].numpy())
        assert [(v.name, v.shape) for v in loaded.weights] == \
            [(v.name, v.shape) for v in exported.weights]


def test_generator_logits_only_at_masked_positions_match_full_logits():
    gen = _model().generator_model()
    features = _features()
    positions = tf.constant([[1, 3, 5]] * 4)
    full = gen(features)["logits"].numpy()
    at = gen({**features, "masked_lm_positions": positions})["logits"].numpy()
    np.testing.assert_allclose(at, full[:, [1, 3, 5]], atol=1e-5)


@pytest.mark.parametrize("causal", [None, "rtl"])
def test_first_position_only_gives_the_full_encoders_cls_vector_and_gradients(causal):
    encoder = modeling.Encoder(vocab_size=50, hidden_size=8, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=16, causal=causal,
                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ids = tf.constant([[1, 5, 7, 9, 2, 0], [1, 4, 2, 0, 0, 0]])
    mask, segments = tf.sign(ids), tf.zeros_like(ids)
    outputs, gradients = [], []
    for first_only in (False, True):
        with tf.GradientTape() as tape:
            out = encoder(ids, mask, segments, first_position_only=first_only)
            loss = tf.reduce_sum(tf.sin(out[:, 0]))
        outputs.append(out)
        gradients.append(tape.gradient(loss, encoder.trainable_variables))
    assert outputs[1].shape == (2, 1, 8)
    np.testing.assert_allclose(outputs[1].numpy(), outputs[0][:, :1].numpy(), atol=1e-6)
    for full, first in zip(*gradients):
        # Gradients reach ~30: float32 rounding of differently shaped matmuls is ~1e-6 of that.
        np.testing.assert_allclose(tf.convert_to_tensor(first).numpy(),
                                   tf.convert_to_tensor(full).numpy(), rtol=1e-5, atol=1e-5)


def test_mixed_bfloat16_step_keeps_float32_variables_and_outputs():
    with distribution.precision_policy("mixed_bfloat16"):
        model = _model(precision="mixed_bfloat16")
    assert all(v.dtype == "float32" for v in model.weights)
    assert model.encoder.transformer_layers[0].compute_dtype == "bfloat16"
    optimizer = optimization.create_optimizer(1e-3, 10, 0, 0.01)
    variables = model.trainable_variables
    optimizer.build(variables)
    with tf.GradientTape() as tape:
        out = model(_features(), training=True)
    assert out["disc_probs"].dtype == tf.float32 and out["loss"].dtype == tf.float32
    grads = tape.gradient(out["loss"], variables)
    norm = distribution.apply_gradients(optimizer, grads, variables)
    assert np.isfinite(float(out["loss"])) and np.isfinite(float(norm))
    assert keras.config.dtype_policy().name == "float32"  # the policy is restored


def test_mixed_float16_loss_scale_skips_non_finite_steps():
    scale = distribution.DynamicLossScale(initial_scale=8.0, growth_interval=2)
    var = keras.Variable(np.ones(2, np.float32), name="kernel")
    optimizer = optimization.AdamWeightDecay(learning_rate=0.1)
    optimizer.build([var])
    distribution.apply_gradients(optimizer, [tf.constant([np.inf, 1.0])], [var], scale)
    np.testing.assert_array_equal(var.numpy(), [1.0, 1.0])  # skipped
    assert float(scale.scale) == 4.0
    for _ in range(2):
        distribution.apply_gradients(optimizer, [tf.constant([4.0, 4.0])], [var], scale)
    assert float(scale.scale) == 8.0  # two good steps in a row double it
    assert (var.numpy() < 1.0).all()
