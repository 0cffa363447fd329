"""The fused kernels give the original's values and the autodiff gradients of its formulas."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf import fused, modeling


def _value_and_gradients(fn, inputs, upstream):
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        y = fn(*inputs)
    return y, tape.gradient(y, inputs, output_gradients=upstream)


def test_gelu_is_the_exact_formula_with_its_gradient():
    x = tf.constant(np.linspace(-6, 6, 1001), tf.float32)
    dy = tf.random.stateless_normal(x.shape, [1, 2])

    def exact(x):  # the original's gelu()
        return x * (0.5 * (1.0 + tf.math.erf(x / tf.sqrt(2.0))))

    ours, ours_grad = _value_and_gradients(fused.gelu, [x], dy)
    ref, ref_grad = _value_and_gradients(exact, [x], dy)
    # 1 + erf(x / sqrt 2) cancels in float32 (ulp 6e-8) for x < -3: both are exact to ~1e-6.
    np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-6, atol=1e-6)



@pytest.mark.parametrize("shape", [(7, 16), (3, 5, 32)])
def test_layer_norm_matches_the_original_formula_and_its_gradients(shape):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(3.0, 2.0, shape), tf.float32)  # off-centre, as activations are
    gamma = tf.constant(rng.normal(1.0, 0.3, shape[-1]), tf.float32)
    beta = tf.constant(rng.normal(0.0, 0.3, shape[-1]), tf.float32)
    dy = tf.constant(rng.normal(size=shape), tf.float32)

    def original(x, gamma, beta):  # contrib layer_norm: moments over the last axis
        mean, variance = tf.nn.moments(x, [-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + 1e-12) * gamma + beta

    ours, ours_grads = _value_and_gradients(
        lambda *a: fused.layer_norm(*a, 1e-12), [x, gamma, beta], dy)
    ref, ref_grads = _value_and_gradients(original, [x, gamma, beta], dy)
    np.testing.assert_allclose(ours.numpy(), ref.numpy(), atol=2e-6)
    for name, a, b in zip(["x", "gamma", "beta"], ours_grads, ref_grads):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=2e-5, err_msg=name)


def test_layer_norm_layer_is_keras_layer_normalization():
    x = np.random.default_rng(1).normal(size=(2, 4, 8)).astype("float32")
    ours = modeling.LayerNorm(epsilon=1e-12)
    keras_norm = keras.layers.LayerNormalization(epsilon=1e-12)
    ours.build(x.shape)
    keras_norm.build(x.shape)
    gamma = np.linspace(0.5, 1.5, 8).astype("float32")
    for layer in (ours, keras_norm):
        layer.gamma.assign(gamma)
        layer.beta.assign(-gamma)
    assert [v.name for v in ours.weights] == ["gamma", "beta"]
    np.testing.assert_allclose(ours(x).numpy(), keras_norm(x).numpy(), atol=2e-6)
    again = modeling.LayerNorm.from_config(ours.get_config())
    assert again.epsilon == 1e-12 and isinstance(again, modeling.LayerNorm)


def test_layer_norm_computes_in_float32_and_returns_the_compute_dtype():
    norm = modeling.LayerNorm(epsilon=1e-12, dtype="mixed_bfloat16")
    x = tf.cast(tf.constant([[1000.0, 1001.0, 1002.0, 1003.0]]), tf.bfloat16)
    y = norm(x)
    assert y.dtype == tf.bfloat16 and norm.gamma.dtype == "float32"
    # 1000..1003 are exact in bfloat16 only to 4 units; the result is still centred.
    assert abs(float(tf.reduce_mean(tf.cast(y, tf.float32)))) < 0.02


def test_dropout_drops_at_the_rate_scales_the_rest_and_masks_the_gradient():
    x = tf.ones([200, 500])
    seed = tf.constant([3, 4])
    y, grads = _value_and_gradients(lambda x: fused.dropout(x, 0.1, seed), [x], 2 * x)
    kept = (tf.random.stateless_uniform(x.shape, seed) >= 0.1).numpy()
    np.testing.assert_allclose(y.numpy(), np.where(kept, 1 / 0.9, 0.0), rtol=1e-7)
    np.testing.assert_allclose(grads[0].numpy(), np.where(kept, 2 / 0.9, 0.0), rtol=1e-7)
    assert abs(1 - kept.mean() - 0.1) < 0.004  # 100,000 draws: 4.7 standard deviations


@pytest.mark.parametrize("shape", [(2, 4, 16, 16), (7, 5, 3), (3,)])
def test_dropout_draws_tensorflows_own_random_numbers(shape):
    # Philox computed in the kernel gives TensorFlow's stream, element for element, also when
    # the element count is not a multiple of Philox's four words.
    x = tf.random.stateless_normal(shape, [5, 6])
    for seed in ([3, 4], [0, 0], [-7, 2**31 - 1]):
        expected = tf.nn.experimental.stateless_dropout(x, 0.3, seed)
        np.testing.assert_array_equal(fused.dropout(x, 0.3, tf.constant(seed)).numpy(),
                                      expected.numpy())


def test_philox_carries_across_counter_words():
    # A counter about to wrap its low words: counter + block index must carry like TF's.
    key = tf.constant([0x12345678, 0x9ABCDEF0], tf.uint32)
    counter = tf.constant([0xFFFFFFF0, 0xFFFFFFFF, 0xFFFFFFFF, 7], tf.uint32)
    x = tf.ones([256])
    keep_bits = fused._dropout_keep_bits(x, key, counter, 0.5)
    uniform = tf.raw_ops.StatelessRandomUniformV2(
        shape=[256], key=tf.bitcast(key, tf.uint64)[None],
        counter=tf.bitcast(tf.reshape(counter, [2, 2]), tf.uint64), alg=1)
    kept = fused._apply_keep_bits(x, keep_bits, 0.5).numpy() > 0
    np.testing.assert_array_equal(kept, uniform.numpy() >= 0.5)


def test_dropout_layer_is_random_per_call_seeded_and_off_outside_training():
    x = tf.ones([64, 64])
    assert modeling.Dropout(0.1)(x, training=False) is x
    first, second = modeling.Dropout(0.1, seed=7), modeling.Dropout(0.1, seed=7)
    a, b = first(x, training=True), second(x, training=True)
    np.testing.assert_array_equal(a.numpy(), b.numpy())  # same seed, same mask
    assert not np.array_equal(a.numpy(), first(x, training=True).numpy())  # a new mask per call
    np.testing.assert_array_equal(  # Keras' own layer with the same seed: the same values
        modeling.Dropout(0.1, seed=5)(x, training=True).numpy(),
        keras.layers.Dropout(0.1, seed=5)(x, training=True).numpy())
    assert modeling.Dropout(0.1, dtype="mixed_bfloat16")(
        tf.cast(x, tf.bfloat16), training=True).dtype == tf.bfloat16


@pytest.mark.parametrize("seed", [None, [3, 4]])
def test_dropout_add_layer_norm_is_the_three_ops_in_turn(seed):
    rng = np.random.default_rng(7)
    x, residual = (tf.constant(rng.normal(size=(2, 8, 16)), tf.float32) for _ in range(2))
    bias, gamma, beta = (tf.constant(rng.normal(size=16), tf.float32) for _ in range(3))
    seed = None if seed is None else tf.constant(seed)

    def separate(x, bias, residual, gamma, beta):
        h = tf.nn.bias_add(x, bias)
        if seed is not None:
            h = fused.dropout(h, 0.25, seed)
        return fused.layer_norm(h + residual, gamma, beta, 1e-12)

    inputs = [x, bias, residual, gamma, beta]
    dy = tf.random.stateless_normal(x.shape, [1, 2])
    ours = _value_and_gradients(
        lambda *a: fused.dropout_add_layer_norm(*a, 1e-12, 0.25, seed), inputs, dy)
    reference = _value_and_gradients(separate, inputs, dy)
    np.testing.assert_allclose(ours[0].numpy(), reference[0].numpy(), rtol=1e-5, atol=1e-5)
    for a, b in zip(ours[1], reference[1]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["gelu", "bias_gelu", "dropout", "dropout_add_layer_norm"])
def test_bfloat16_inputs_are_computed_in_float32_and_rounded_once(op):
    """Under mixed_bfloat16 a kernel converts its inputs to float32, computes there and rounds
    its outputs once: exactly the float32 kernel on the same values, rounded (not rounded after
    every op, which is also several times slower on XLA:CPU)."""
    rng = np.random.default_rng(3)
    shape = (64, 32)
    values = [tf.cast(tf.constant(rng.normal(size=s), tf.float32), tf.bfloat16)
              for s in (shape, shape[-1:], shape, shape)]  # x, bias, residual, dy
    gamma = tf.constant(rng.normal(1.0, 0.3, shape[-1]), tf.float32)
    beta = tf.constant(rng.normal(0.0, 0.3, shape[-1]), tf.float32)
    seed = tf.constant([5, 6])
    fn = {"gelu": lambda x, bias, residual: fused.gelu(x),
          "bias_gelu": lambda x, bias, residual: fused.bias_gelu(x, bias),
          "dropout": lambda x, bias, residual: fused.dropout(x, 0.3, seed),
          "dropout_add_layer_norm": lambda x, bias, residual: fused.dropout_add_layer_norm(
              x, bias, residual, gamma, beta, 1e-12, 0.3, seed)}[op]

    def run(dtype):
        x, bias, residual, dy = (tf.cast(v, dtype) for v in values)
        y, (dx,) = _value_and_gradients(lambda x: fn(x, bias, residual), [x], dy)
        return y, dx

    (y16, dx16), (y32, dx32) = run(tf.bfloat16), run(tf.float32)
    assert y16.dtype == dx16.dtype == tf.bfloat16
    np.testing.assert_array_equal(tf.cast(y16, tf.float32), tf.cast(tf.cast(y32, tf.bfloat16),
                                                                     tf.float32))
    np.testing.assert_array_equal(tf.cast(dx16, tf.float32),
                                  tf.cast(tf.cast(dx32, tf.bfloat16), tf.float32))


@pytest.mark.parametrize("targets_shape", [(6,), (3, 4)])
def test_softmax_cross_entropy_matches_log_softmax_and_its_gradient(targets_shape):
    vocab = 50
    rng = np.random.default_rng(2)
    logits = tf.constant(rng.normal(0, 5, targets_shape + (vocab,)) + 80, tf.float32)  # large
    targets = tf.constant(rng.integers(0, vocab, targets_shape), tf.int32)
    weights = tf.constant(rng.random(targets_shape), tf.float32)

    def original(logits):  # get_softmax_output: -sum(one_hot * log_softmax)
        return -tf.reduce_sum(tf.one_hot(targets, vocab) * tf.nn.log_softmax(logits), -1)

    ours, ours_grad = _value_and_gradients(
        lambda l: fused.softmax_cross_entropy(l, targets), [logits], weights)
    ref, ref_grad = _value_and_gradients(original, [logits], weights)
    np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours_grad[0].numpy(), ref_grad[0].numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("depth,units", [(24, 8), (8, 24)])
def test_matmul_gives_autodiffs_values_and_gradients_in_either_orientation(depth, units):
    rng = np.random.default_rng(3)
    x = tf.constant(rng.normal(size=(2, 5, depth)), tf.float32)
    kernel = tf.constant(rng.normal(size=(depth, units)), tf.float32)
    dy = tf.constant(rng.normal(size=(2, 5, units)), tf.float32)
    ours, ours_grads = _value_and_gradients(fused.matmul, [x, kernel], dy)
    ref, ref_grads = _value_and_gradients(lambda x, k: tf.einsum("bld,du->blu", x, k),
                                          [x, kernel], dy)
    np.testing.assert_allclose(ours.numpy(), ref.numpy(), atol=1e-5)
    for a, b in zip(ours_grads, ref_grads):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)


@pytest.mark.parametrize("pad_wide_rows", [False, True])
@pytest.mark.parametrize("depth,units", [(1024, 256), (256, 1024), (768, 256), (24, 8)])
def test_weight_gradient_is_x_transpose_dy_in_every_layout(depth, units, pad_wide_rows):
    rng = np.random.default_rng(5)
    rows = tf.constant(rng.normal(size=(6, depth)), tf.float32)
    dy_rows = tf.constant(rng.normal(size=(6, units)), tf.float32)
    ours = fused.weight_gradient(rows, dy_rows, pad_wide_rows)
    assert ours.shape == (depth, units)
    np.testing.assert_allclose(ours.numpy(), rows.numpy().T @ dy_rows.numpy(), atol=1e-4)


@pytest.mark.parametrize("pad_wide_rows", [False, True])
def test_matmul_pads_its_weight_gradient_where_onednn_runs_avx2_code(monkeypatch,
                                                                    pad_wide_rows):
    monkeypatch.setattr(fused, "_PAD_WIDE_ROWS", pad_wide_rows)
    x, kernel = tf.ones([4, 256]), tf.ones([256, 1024])

    @tf.function
    def kernel_gradient(x, kernel):
        with tf.GradientTape() as tape:
            tape.watch(kernel)
            y = fused.matmul(x, kernel)
        return tape.gradient(y, kernel)

    graph = kernel_gradient.get_concrete_function(x, kernel).graph
    assert ("Pad" in {op.type for op in graph.get_operations()}) is pad_wide_rows
    np.testing.assert_allclose(kernel_gradient(x, kernel).numpy(), 4.0)


def test_only_rows_of_many_kilobytes_are_padded():
    assert [fused._padded_width(w) for w in (64, 256, 500, 512, 768, 1024, 1000)] == [
        64, 256, 500, 528, 784, 1040, 1000]


@pytest.mark.parametrize("activation", ["gelu", fused.gelu])  # fused.gelu: bias_gelu's path
def test_dense_layer_is_keras_dense(activation):
    x = tf.constant(np.random.default_rng(4).normal(size=(3, 5, 16)), tf.float32)
    ours = modeling.Dense(4, activation=activation, bias_initializer="random_normal")
    reference = keras.layers.Dense(4, activation="gelu")  # Keras' exact (erf) GELU
    ours.build(x.shape)
    reference.build(x.shape)
    reference.set_weights(ours.get_weights())
    assert [v.name for v in ours.weights] == ["kernel", "bias"]
    dy = tf.random.stateless_normal([3, 5, 4], [1, 1])
    results = []
    for layer in (ours, reference):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
        results.append([y, *tape.gradient(y, [x, *layer.trainable_variables], dy)])
    for a, b in zip(*results):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_gumbel_noise_is_the_originals_formula_and_broadcasts():
    uniform = tf.random.stateless_uniform([3, 4, 6], [5, 6])
    logits = tf.constant(np.random.default_rng(5).normal(size=(3, 1, 6)), tf.float32)
    original = logits - tf.math.log(-tf.math.log(uniform + 1e-9) + 1e-9)
    ours = fused.add_gumbel_noise(logits, uniform)
    assert ours.shape == (3, 4, 6)
    np.testing.assert_allclose(ours.numpy(), original.numpy(), rtol=1e-6, atol=1e-6)
    # The 1e-9 guards keep u = 0 finite, as in the original.
    assert np.isfinite(fused.add_gumbel_noise(tf.zeros([1]), tf.zeros([1])).numpy()).all()
