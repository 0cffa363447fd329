"""The plain reference transformer is the oracle for the fused CPU kernels: the same variables,
values, gradients and dropout masks; checkpoints move between them; both train."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import share_changed, tiny_config
from electra_tf import host_calls, modeling, pretraining, resume
from electra_tf.finetuning import config as finetuning_config
from electra_tf.finetuning import trainer

SIZES = dict(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=32, embedding_size=8)


def _inputs():
    ids = tf.constant([[1, 5, 7, 9, 2, 11, 13, 2], [1, 4, 2, 6, 2, 0, 0, 0]])
    return ids, tf.sign(ids), tf.constant([[0] * 5 + [1] * 3, [0] * 3 + [1] * 2 + [0] * 3])


def _encoder_pair(dropout: float, **kwargs):
    """A fused and a reference encoder with the same initial weights and dropout seeds."""
    encoders = []
    for kernels in ("fused", "reference"):
        keras.utils.set_random_seed(7)  # the same initial weights and seed generators
        encoder = modeling.Encoder(**SIZES, hidden_dropout_prob=dropout,
                                   attention_probs_dropout_prob=dropout, kernels=kernels,
                                   name="electra", **kwargs)
        encoder.build()
        encoders.append(encoder)
    return encoders


def _outputs_and_gradients(encoder, training_mode: bool, first_position_only: bool = False):
    ids, mask, segments = _inputs()
    with tf.GradientTape() as tape:
        out = encoder(ids, mask, segments, training=training_mode,
                      first_position_only=first_position_only)
        loss = tf.reduce_sum(tf.sin(out) * tf.cos(tf.range(out.shape[-1], dtype=tf.float32)))
    return out, tape.gradient(loss, encoder.trainable_variables)


def test_both_paths_build_the_same_layers_and_variables():
    fused, reference = _encoder_pair(0.1)
    assert [v.path for v in fused.weights] == [v.path for v in reference.weights]
    layer = reference.transformer_layers[0]
    assert type(layer.query) is keras.layers.Dense  # plain Keras layers, no fused kernels
    assert type(layer.output_layer_norm) is keras.layers.LayerNormalization
    assert type(layer.hidden_dropout) is keras.layers.Dropout
    assert type(reference.embeddings.layer_norm) is keras.layers.LayerNormalization
    assert isinstance(fused.transformer_layers[0].query, modeling.Dense)
    for a, b in zip(fused.weights, reference.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("first_position_only", [False, True])
def test_fused_path_gives_the_references_values_and_gradients_without_dropout(
        first_position_only):
    fused, reference = _encoder_pair(0.1)
    expected, expected_grads = _outputs_and_gradients(reference, False, first_position_only)
    actual, actual_grads = _outputs_and_gradients(fused, False, first_position_only)
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-5, atol=2e-6)
    for variable, a, b in zip(reference.trainable_variables, actual_grads, expected_grads):
        np.testing.assert_allclose(tf.convert_to_tensor(a).numpy(),
                                   tf.convert_to_tensor(b).numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=variable.path)


def test_fused_path_draws_the_references_dropout_masks():
    # The fused dropout makes Keras' Dropout masks (the same Philox draws) from the same seed
    # generators, called in the same order: training outputs agree, not only their statistics.
    fused, reference = _encoder_pair(0.3)
    expected, expected_grads = _outputs_and_gradients(reference, True)
    actual, actual_grads = _outputs_and_gradients(fused, True)
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-5, atol=2e-6)
    for a, b in zip(actual_grads, expected_grads):
        np.testing.assert_allclose(tf.convert_to_tensor(a).numpy(),
                                   tf.convert_to_tensor(b).numpy(), rtol=1e-4, atol=1e-5)
    # Dropout really acted: evaluation differs from training.
    assert not np.allclose(expected.numpy(), _outputs_and_gradients(reference, False)[0].numpy())


def test_checkpoints_move_between_the_paths(tmp_path):
    fused, reference = _encoder_pair(0.1)
    keras.utils.set_random_seed(8)  # other weights, then restored from the fused encoder's
    reference = modeling.Encoder(**SIZES, kernels="reference", name="electra")
    reference.build()
    path = resume.checkpoint(fused).save(str(tmp_path / "ckpt"))
    resume.checkpoint(reference).restore(path).assert_existing_objects_matched()
    ids, mask, segments = _inputs()
    np.testing.assert_allclose(reference(ids, mask, segments).numpy(),
                               fused(ids, mask, segments).numpy(), rtol=1e-5, atol=2e-6)


def test_keras_files_keep_the_choice_and_auto_decides_where_loaded(tmp_path):
    for kernels in ("reference", "auto"):
        model = modeling.ElectraDiscriminator(modeling.Encoder(**SIZES, kernels=kernels))
        ids, mask, segments = _inputs()
        inputs = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
        expected = model(inputs)["logits"].numpy()
        model.save(tmp_path / f"{kernels}.keras")
        loaded = keras.saving.load_model(tmp_path / f"{kernels}.keras")
        assert loaded.encoder.kernels == kernels
        # "auto" on this CPU-only machine is the fused path, in the heads too.
        assert loaded.encoder.transformer_layers[0].fused_kernels == (kernels == "auto")
        assert (loaded.head.dense.activation is modeling.fused.gelu) == (kernels == "auto")
        np.testing.assert_allclose(loaded(inputs)["logits"].numpy(), expected, atol=1e-5)


def test_auto_is_fused_on_cpus_and_reference_on_accelerators():
    assert modeling.use_fused_kernels("auto")  # the test machine has no GPU
    with tf.distribute.OneDeviceStrategy("/gpu:0").scope():  # a GPU strategy, not run
        assert not modeling.use_fused_kernels("auto")
        assert modeling.use_fused_kernels("fused")
    with pytest.raises(ValueError, match="kernels must be one of"):
        modeling.use_fused_kernels("xla")


# On CPUs every default test that trains takes the fused path (test_pretrain_data's built
# records check a step on it), so by default only the reference path's step runs here.
@pytest.mark.parametrize("kernels", [pytest.param("fused", marks=pytest.mark.slow), "reference"])
def test_a_pretraining_step_trains_on_each_path(kernels):
    config = tiny_config(kernels=kernels)
    strategy = tf.distribute.get_strategy()
    state = pretraining.create_state(config, pretraining.SpecialIds(), strategy)
    assert state.model.encoder.transformer_layers[0].fused_kernels == (kernels == "fused")
    ids = np.random.default_rng(0).integers(1000, 30000, (8, 32)).astype(np.int32)
    ids[:, 0], ids[:, -1] = 101, 102
    batch = {"input_ids": ids, "input_mask": np.ones_like(ids),
             "segment_ids": np.zeros_like(ids)}
    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    iterator = iter(strategy.distribute_datasets_from_function(lambda _: dataset))
    before = [v.numpy().copy() for v in state.model.trainable_variables]
    loop = host_calls.run_steps(strategy, state.make_train_step(1, False))
    loop(iterator, tf.constant(2))
    assert int(state.optimizer.iterations) == 2
    assert np.isfinite(state.metrics.results()["loss"])
    assert share_changed(before, state.model.trainable_variables) > 0.9


@pytest.mark.parametrize("kernels", [pytest.param("fused", marks=pytest.mark.slow), "reference"])
def test_a_finetuning_step_trains_on_each_path(kernels):
    config = finetuning_config.from_hparams("tiny", "/nonexistent", {
        "model_size": "small", "task_names": ["sst"], "max_seq_length": 16,
        "train_batch_size": 4, "kernels": kernels, "vocab_size": 100,
        "model_hparam_overrides": {"hidden_size": 16, "num_hidden_layers": 2,
                                   "num_attention_heads": 2, "intermediate_size": 32}})
    tasks = trainer.make_tasks(config)
    model = trainer.build_model(config, tasks)
    assert model.encoder.transformer_layers[0].fused_kernels == (kernels == "fused")
    strategy = tf.distribute.get_strategy()
    state = trainer.create_train_state(config, model, tasks, strategy, num_steps=10)
    ids = np.random.default_rng(1).integers(5, 100, (4, 16)).astype(np.int32)
    batch = {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids),
             "task_id": np.zeros(4, np.int32), "label": np.array([0, 1, 1, 0], np.float32)}
    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    iterator = iter(strategy.distribute_datasets_from_function(lambda _: dataset))
    before = model.encoder.transformer_layers[0].query.kernel.numpy().copy()
    host_calls.run_steps(strategy, state.step_fn)(iterator, tf.constant(2))
    assert int(state.optimizer.iterations) == 2
    assert np.isfinite(state.metrics.results()["loss"])
    assert not np.array_equal(before, model.encoder.transformer_layers[0].query.kernel.numpy())


def test_config_rejects_an_unknown_kernels_value():
    with pytest.raises(ValueError, match="kernels"):
        tiny_config(kernels="xla")
    with pytest.raises(ValueError, match="kernels"):
        finetuning_config.from_hparams("m", "/nonexistent", {"kernels": "fast"})


def test_reference_path_runs_under_mixed_bfloat16():
    encoders = []
    for dtype in ("float32", "mixed_bfloat16"):
        keras.utils.set_random_seed(7)
        encoders.append(modeling.Encoder(**SIZES, kernels="reference", dtype=dtype))
        encoders[-1].build()
    full, mixed = encoders
    ids, mask, segments = _inputs()
    out = mixed(ids, mask, segments)
    assert out.dtype == tf.bfloat16 and all(v.dtype == "float32" for v in mixed.weights)
    np.testing.assert_allclose(tf.cast(out, tf.float32).numpy(),
                               full(ids, mask, segments).numpy(), atol=0.1)
