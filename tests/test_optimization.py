"""The optimizer against a NumPy transcription of the original's update rule."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf import distribution, optimization


def _reference_lr(step, peak, total, warmup, power=1.0):
    """tf.train.polynomial_decay(end 0) x min(1, step / warmup), as the original."""
    return peak * (1 - min(step, total) / total) ** power * min(1.0, step / warmup)


def _reference_adamw(params, grad_steps, lrs, rate, decayed):
    """The original AdamWeightDecayOptimizer, after clip_by_global_norm(grads, 1.0)."""
    params = [p.astype(np.float64) for p in params]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for grads, lr in zip(grad_steps, lrs):
        norm = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads))
        grads = [g * 1.0 / max(norm, 1.0) for g in grads]
        for i, g in enumerate(grads):
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g * g
            update = m[i] / (np.sqrt(v[i]) + 1e-6)
            if decayed[i]:
                update = update + rate * params[i]
            params[i] = params[i] - lr * update
    return params


def test_schedule_matches_the_original_warmup_and_decay():
    schedule = optimization.WarmupPolynomialDecay(5e-4, num_train_steps=1000,
                                                  num_warmup_steps=100, power=1.0)
    for step in (0, 1, 50, 99, 100, 101, 500, 999, 1000, 1200):
        np.testing.assert_allclose(float(schedule(step)),
                                   _reference_lr(step, 5e-4, 1000, 100), rtol=1e-4, atol=1e-12)
    # Warmup overlaps the decay: the peak is never reached.
    assert float(schedule(100)) < 5e-4
    quadratic = optimization.WarmupPolynomialDecay(1.0, 10, 0, power=2.0)
    np.testing.assert_allclose(float(quadratic(5)), 0.25, rtol=1e-6)


def test_warmup_stable_decay_holds_the_peak_then_decays_to_zero_at_the_end():
    schedule = optimization.WarmupStableDecay(1e-3, num_train_steps=1000, num_warmup_steps=100,
                                              decay_steps=200)
    expected = {0: 0.0, 50: 5e-4, 100: 1e-3, 500: 1e-3, 800: 1e-3, 900: 5e-4, 950: 2.5e-4,
                1000: 0.0, 1100: 0.0}
    for step, lr in expected.items():
        np.testing.assert_allclose(float(schedule(step)), lr, rtol=1e-5, atol=1e-12)
    # Before its decay, a branch's schedule is the trunk's (decay_steps 0, any length).
    trunk = optimization.WarmupStableDecay(1e-3, num_train_steps=800, num_warmup_steps=100)
    for step in (0, 50, 100, 799, 800):
        assert float(trunk(step)) == float(schedule(step))
    square = optimization.WarmupStableDecay(1.0, 10, 0, decay_steps=4, power=2.0)
    np.testing.assert_allclose(float(square(8)), 0.25, rtol=1e-6)
    # create_optimizer picks it by name; the original's stays the default.
    adam = optimization.create_optimizer(1e-3, 10, 1, lr_schedule="wsd", lr_decay_steps=2)
    assert isinstance(adam._learning_rate, optimization.WarmupStableDecay)
    assert isinstance(optimization.create_optimizer(1e-3, 10)._learning_rate,
                      optimization.WarmupPolynomialDecay)


@pytest.mark.parametrize("fused", [False, True], ids=["per_variable", "fused"])
def test_adamw_matches_the_original_update_with_clipping_and_decay_exclusions(fused):
    rng = np.random.default_rng(0)
    dense = keras.layers.Dense(3, name="dense")
    dense.build((None, 4))
    norm = keras.layers.LayerNormalization(name="LayerNorm")
    norm.build((None, 3))
    variables = [dense.kernel, dense.bias, norm.gamma, norm.beta]
    decayed = [True, False, False, False]
    start = [v.numpy().copy() for v in variables]
    schedule = optimization.WarmupPolynomialDecay(0.05, num_train_steps=8, num_warmup_steps=3)
    optimizer = optimization.AdamWeightDecay(schedule, weight_decay_rate=0.1, fused=fused)
    assert [optimizer.uses_weight_decay(v) for v in variables] == decayed
    optimizer.build(variables)
    grad_steps = [[rng.normal(size=v.shape).astype(np.float32) * scale for v in variables]
                  for scale in (3.0, 0.1, 2.0, 0.05, 1.0, 4.0)]  # some clipped, some not
    for grads in grad_steps:
        distribution.apply_gradients(optimizer, [tf.constant(g) for g in grads], variables)
    lrs = [_reference_lr(step, 0.05, 8, 3) for step in range(len(grad_steps))]
    expected = _reference_adamw(start, grad_steps, lrs, 0.1, decayed)
    for var, want in zip(variables, expected):
        np.testing.assert_allclose(var.numpy(), want, rtol=2e-5, atol=1e-6)
    assert int(optimizer.iterations) == len(grad_steps)
    # Slots carry the original's names.
    slots = [v.name for v in optimizer.variables]
    assert sum(n.endswith("adam_m") for n in slots) == sum(n.endswith("adam_v") for n in slots) \
        == len(variables)


def test_fused_optimizers_with_the_same_constants_share_one_compiled_update():
    """A second trial's optimizer reuses the first's traced (and so compiled) update; one whose
    learning-rate multipliers differ gets its own, and each moves its own variables."""
    def trial(multiplier: float):
        kernel = keras.Variable(np.ones((3, 2), np.float32), name="kernel")
        bias = keras.Variable(np.zeros(2, np.float32), name="bias")
        optimizer = optimization.AdamWeightDecay(
            0.1, weight_decay_rate=0.01, fused=True,
            lr_multipliers={kernel.path: multiplier, bias.path: 1.0})
        optimizer.build([kernel, bias])
        grads = [tf.fill((3, 2), 0.5), tf.fill((2,), -0.5)]
        distribution.apply_gradients(optimizer, grads, [kernel, bias])
        return optimization.fused_adam_update(
            0.9, 0.999, 1e-6, 0.01, (multiplier, 1.0), (True, False), (False, False)), kernel

    first, first_kernel = trial(0.5)
    second, second_kernel = trial(0.5)
    other, other_kernel = trial(0.25)
    assert first is second and first.experimental_get_tracing_count() == 1
    assert other is not first and other.experimental_get_tracing_count() == 1
    np.testing.assert_array_equal(first_kernel.numpy(), second_kernel.numpy())
    assert np.all(first_kernel.numpy() < other_kernel.numpy())  # twice the step down
    assert np.all(other_kernel.numpy() < 1.0)


def test_apply_gradients_returns_the_unclipped_norm():
    var = keras.Variable(np.zeros(2, np.float32), name="kernel")
    optimizer = optimization.AdamWeightDecay(learning_rate=0.0)
    optimizer.build([var])
    norm = distribution.apply_gradients(optimizer, [tf.constant([3.0, 4.0])], [var])
    np.testing.assert_allclose(float(norm), 5.0)


def test_second_moment_is_adams_v():
    """v, not m: after one step on g, v = (1 - beta_2) g^2 and m = (1 - beta_1) g."""
    var = keras.Variable(np.zeros(2, np.float32), name="kernel")
    optimizer = optimization.AdamWeightDecay(learning_rate=0.0)
    optimizer.build([var])
    distribution.apply_gradients(optimizer, [tf.constant([0.3, 0.4])], [var])  # norm 0.5
    np.testing.assert_allclose(optimizer.second_moment(var).numpy(), 0.001 * np.array([0.09, 0.16]),
                               rtol=1e-5)


def test_lamb_scales_each_update_by_the_trust_ratio():
    kernel = keras.Variable(np.full((2, 2), 3.0, np.float32), name="kernel")
    bias = keras.Variable(np.full(2, 3.0, np.float32), name="bias")
    optimizer = optimization.Lamb(learning_rate=0.1, weight_decay_rate=0.0)
    optimizer.build([kernel, bias])
    grads = [np.full((2, 2), 0.5, np.float32), np.full(2, 0.5, np.float32)]
    optimizer.apply([tf.constant(g) for g in grads], [kernel, bias])
    # First step: update = 0.05 / (sqrt(0.00025) + 1e-6) ~ 3.162 per element.
    u = 0.05 / (np.sqrt(0.001 * 0.25) + 1e-6)
    ratio = np.linalg.norm(np.full(4, 3.0)) / np.linalg.norm(np.full(4, u))
    np.testing.assert_allclose(kernel.numpy(), 3.0 - 0.1 * ratio * u, rtol=1e-5)
    np.testing.assert_allclose(bias.numpy(), 3.0 - 0.1 * u, rtol=1e-5)  # bias not adapted
