"""Element-wise parts of the transformer as single XLA kernels, with hand-written gradients.

TensorFlow runs an expression such as LayerNorm as a chain of small kernels, each a full pass
over memory, and its autodiff gradient as a longer chain. On CPU that chain, not the matmuls,
is what separates a step from the matmul peak (docs/performance.md). Each op here is one
XLA-compiled function for the forward pass and one for the backward pass, while the matmuls
around them stay with TensorFlow's oneDNN kernels (XLA:CPU's own matmuls are slower).
The arithmetic is the original's; tests/test_fused.py checks values and gradients against
plain TensorFlow.

Random numbers come from TensorFlow's kernels: XLA:CPU's generator is 4x slower. `matmul` is
the one op here that is not element-wise: a matmul whose weight gradient takes the faster of
two orientations.

>>> import numpy as np
>>> x = tf.constant(np.linspace(-3, 3, 12, dtype="float32").reshape(3, 4))
>>> y = layer_norm(x, tf.ones([4]), tf.zeros([4]), 1e-12)
>>> np.allclose(tf.reduce_mean(y, -1), 0, atol=1e-6)
True
"""

from __future__ import annotations

import tensorflow as tf

_SQRT_2 = 1.4142135623730951
_INV_SQRT_2PI = 0.3989422804014327  # 1 / sqrt(2 pi)


@tf.function(jit_compile=True)
def _gelu_forward(x):
    return x * (0.5 * (1.0 + tf.math.erf(x / _SQRT_2)))


@tf.function(jit_compile=True)
def _gelu_backward(x, dy):
    cdf = 0.5 * (1.0 + tf.math.erf(x / _SQRT_2))
    return dy * (cdf + x * _INV_SQRT_2PI * tf.exp(-0.5 * x * x))


@tf.custom_gradient
def gelu(x):
    """The exact GELU, x * Phi(x), as the original's gelu(); gradient Phi(x) + x phi(x).

    For a [16384, 1024] FFN activation on this project's CPU: forward 6.5 ms against 34 ms as
    TensorFlow ops, gradient 13 ms against autodiff's 84 ms."""
    return _gelu_forward(x), lambda dy: _gelu_backward(x, dy)


@tf.function(jit_compile=True)
def _layer_norm_forward(x, gamma, beta, epsilon):
    mean = tf.reduce_mean(x, -1, keepdims=True)
    centered = x - mean
    inv_std = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), -1, keepdims=True) + epsilon)
    normalized = centered * inv_std
    return normalized * gamma + beta, normalized, inv_std


@tf.function(jit_compile=True)
def _layer_norm_backward(dy, normalized, inv_std, gamma):
    d_normalized = dy * gamma
    dx = inv_std * (d_normalized - tf.reduce_mean(d_normalized, -1, keepdims=True)
                    - normalized * tf.reduce_mean(d_normalized * normalized, -1, keepdims=True))
    batch_axes = list(range(len(dy.shape) - 1))
    return dx, tf.reduce_sum(dy * normalized, batch_axes), tf.reduce_sum(dy, batch_axes)


def layer_norm(x, gamma, beta, epsilon: float):
    """LayerNorm over the last axis, as the original's (contrib) layer_norm: the variance is
    the mean squared deviation. Computed in float32 whatever x's dtype; returns x's dtype.
    Forward and backward of a [16384, 256] activation: 14 ms against Keras' 21 ms."""
    dtype = x.dtype

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        y, normalized, inv_std = _layer_norm_forward(x, gamma, beta, epsilon)
        return y, lambda dy: _layer_norm_backward(dy, normalized, inv_std, gamma)

    return tf.cast(normalize(tf.cast(x, tf.float32), gamma, beta), dtype)


@tf.function(jit_compile=True)
def _apply_mask(x, keep, rate):
    return tf.where(keep, x * (1.0 / (1.0 - rate)), tf.zeros([], x.dtype))


@tf.function(jit_compile=True)
def _dropout_forward(x, uniform, rate):
    keep = uniform >= rate
    return _apply_mask(x, keep, rate), keep


def dropout(x, rate: float, uniform):
    """Inverted dropout as tf.nn.dropout: zero where uniform < rate, scale the rest by
    1 / (1 - rate). `uniform` holds float32 draws in [0, 1) of x's shape."""

    @tf.custom_gradient
    def drop(x):
        y, keep = _dropout_forward(x, uniform, rate)  # a boolean mask: a quarter of the memory
        return y, lambda dy: _apply_mask(dy, keep, rate)

    return drop(x)


@tf.function(jit_compile=True)
def _cross_entropy_forward(logits, targets):
    top = tf.reduce_max(logits, -1, keepdims=True)
    log_normalizer = tf.math.log(tf.reduce_sum(tf.exp(logits - top), -1, keepdims=True)) + top
    target_logits = tf.gather(logits, targets, batch_dims=len(targets.shape))
    return log_normalizer[..., 0] - target_logits, log_normalizer


@tf.function(jit_compile=True)
def _cross_entropy_backward(logits, log_normalizer, targets, d_loss):
    one_hot = tf.one_hot(targets, logits.shape[-1], dtype=logits.dtype)
    return (tf.exp(logits - log_normalizer) - one_hot) * d_loss[..., None]


def softmax_cross_entropy(logits, targets):
    """-log softmax(logits)[targets] per position, for float32 logits [..., V] and int targets.

    The same value as the original's -sum(one_hot * log_softmax(logits)), without
    materialising the log-probabilities; the gradient softmax - one_hot is one pass. For the
    generator's [128, 19, 30522] logits: 170 ms forward and backward against 415 ms for
    log_softmax + gather, whose gradient TensorFlow densifies through a scatter."""

    @tf.custom_gradient
    def cross_entropy(logits):
        loss, log_normalizer = _cross_entropy_forward(logits, targets)
        return loss, lambda d: _cross_entropy_backward(logits, log_normalizer, targets, d)

    return cross_entropy(logits)


@tf.function(jit_compile=True)
def add_gumbel_noise(logits, uniform):
    """logits + Gumbel(0, 1) noise made from float32 uniform draws (shapes broadcast), as the
    original's sample_from_softmax writes it: -log(-log(u + 1e-9) + 1e-9). One pass over the
    generator's [128, 19, 30522] logits where TensorFlow makes six; with TF's random numbers
    and argmax around it, sampling takes 222 ms against 380 ms."""
    return logits - tf.math.log(-tf.math.log(uniform + 1e-9) + 1e-9)


def matmul(x, kernel):
    """x [..., K] @ kernel [K, N], with the kernel's gradient in oneDNN's faster orientation.

    Autodiff takes it as x^T dy, which on this CPU runs 1.3-1.6x slower than (dy^T x)^T when
    K > N: 205 against 326 GFLOP/s for the feed-forward output layer's [16384, 1024] x
    [1024, 256]. The products are the same; only the order of the operands changes."""
    depth, units = kernel.shape

    @tf.custom_gradient
    def product(x, kernel):
        rows = tf.reshape(x, [-1, depth])
        y = tf.reshape(tf.matmul(rows, kernel), tf.concat([tf.shape(x)[:-1], [units]], 0))

        def gradient(dy):
            dy_rows = tf.reshape(dy, [-1, units])
            dx = tf.reshape(tf.matmul(dy_rows, kernel, transpose_b=True), tf.shape(x))
            if depth > units:
                return dx, tf.transpose(tf.matmul(dy_rows, rows, transpose_a=True))
            return dx, tf.matmul(rows, dy_rows, transpose_a=True)

        return y, gradient

    return product(x, kernel)
