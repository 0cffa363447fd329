"""Element-wise parts of the transformer as single XLA kernels, with hand-written gradients.

TensorFlow runs an expression such as LayerNorm as a chain of small kernels, each a full pass
over memory, and its autodiff gradient as a longer chain. On CPU that chain, not the matmuls,
is what separates a step from the matmul peak (docs/performance.md). Each op here is one
XLA-compiled function for the forward pass and one for the backward pass, while the matmuls
around them stay with TensorFlow's oneDNN kernels (XLA:CPU's own matmuls are slower).
The arithmetic is the original's; tests/test_fused.py checks values and gradients against
plain TensorFlow.

Dropout computes TensorFlow's own Philox random numbers inside its kernel; the Gumbel noise
takes them from TensorFlow's kernel (XLA:CPU's generator is slower). `bias_gelu` and
`dropout_add_layer_norm` take a dense layer's bias into the kernel that follows it. `matmul` is
the one op here that is not element-wise: a matmul whose weight gradient lays its operands out
the way oneDNN's kernels on this CPU run fastest.

>>> import numpy as np
>>> x = tf.constant(np.linspace(-3, 3, 12, dtype="float32").reshape(3, 4))
>>> y = layer_norm(x, tf.ones([4]), tf.zeros([4]), 1e-12)
>>> np.allclose(tf.reduce_mean(y, -1), 0, atol=1e-6)
True
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from electra_tf import hardware

_SQRT_2 = 1.4142135623730951
_INV_SQRT_2PI = 0.3989422804014327  # 1 / sqrt(2 pi)
# oneDNN runs its AVX2 kernels: weight_gradient pads the long operands it reads transposed.
_PAD_WIDE_ROWS = hardware.onednn_runs_avx2_code(hardware.read_cpu(),
                                               hardware.onednn_enabled())


def _kernel(fn: Callable) -> Callable:
    """One XLA kernel. AutoGraph is off: the kernels are straight-line TensorFlow, and converting
    them would only add tracing time."""
    return tf.function(fn, jit_compile=True, autograph=False)


def _float32(*tensors):
    """The kernels' arithmetic is float32 whatever their inputs' dtype: XLA:CPU computes a
    bfloat16 expression op by op through float32 with a conversion at each op, several times
    slower than the same expression converted once on the way in and once on the way out."""
    return [tf.cast(t, tf.float32) for t in tensors]


def _gelu(x):
    x32, = _float32(x)
    return tf.cast(x32 * (0.5 * (1.0 + tf.math.erf(x32 / _SQRT_2))), x.dtype)


def _gelu_gradient(x, dy):
    x32, dy32 = _float32(x, dy)
    cdf = 0.5 * (1.0 + tf.math.erf(x32 / _SQRT_2))
    return tf.cast(dy32 * (cdf + x32 * _INV_SQRT_2PI * tf.exp(-0.5 * x32 * x32)), dy.dtype)


_gelu_forward = _kernel(_gelu)
_gelu_backward = _kernel(_gelu_gradient)


def _sum_rows(x):
    """Sum over all axes but the last, in float32, as a product with a row of ones: XLA:CPU's
    own column reductions run at a fraction of memory speed, a GEMV at full speed."""
    rows = tf.reshape(tf.cast(x, tf.float32), [-1, x.shape[-1]])
    return tf.cast(tf.matmul(tf.ones([1, tf.shape(rows)[0]]), rows)[0], x.dtype)


@tf.custom_gradient
def gelu(x):
    """The exact GELU, x * Phi(x), as the original's gelu(); gradient Phi(x) + x phi(x), each
    one pass where TensorFlow's ops and their autodiff gradient make several."""
    return _gelu_forward(x), lambda dy: _gelu_backward(x, dy)


@_kernel
def _bias_gelu_forward(x, bias):
    x32, bias32 = _float32(x, bias)
    return tf.cast(_gelu(x32 + bias32), x.dtype)


@_kernel
def _bias_gelu_backward(x, bias, dy):
    x32, bias32 = _float32(x, bias)
    dx = _gelu_gradient(x32 + bias32, dy)
    return dx, _sum_rows(dx)


def bias_gelu(x, bias):
    """gelu(x + bias), a dense layer's bias and activation in one pass; the backward pass makes
    both gradients in one kernel (the bias's as a sum over rows)."""

    @tf.custom_gradient
    def activate(x, bias):
        return _bias_gelu_forward(x, bias), lambda dy: _bias_gelu_backward(x, bias, dy)

    return activate(x, bias)


def _normalize(x, gamma, beta, epsilon):
    mean = tf.reduce_mean(x, -1, keepdims=True)
    centered = x - mean
    inv_std = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), -1, keepdims=True) + epsilon)
    normalized = centered * inv_std
    return normalized * gamma + beta, normalized, inv_std


def _normalize_gradient(dy, normalized, inv_std, gamma):
    d_normalized = dy * gamma
    dx = inv_std * (d_normalized - tf.reduce_mean(d_normalized, -1, keepdims=True)
                    - normalized * tf.reduce_mean(d_normalized * normalized, -1, keepdims=True))
    return dx, _sum_rows(dy * normalized), _sum_rows(dy)


_layer_norm_forward = _kernel(_normalize)
_layer_norm_backward = _kernel(_normalize_gradient)


def layer_norm(x, gamma, beta, epsilon: float):
    """LayerNorm over the last axis, as the original's (contrib) layer_norm: the variance is
    the mean squared deviation. Computed in float32 whatever x's dtype; returns x's dtype."""
    dtype = x.dtype

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        y, normalized, inv_std = _layer_norm_forward(x, gamma, beta, epsilon)
        return y, lambda dy: _layer_norm_backward(dy, normalized, inv_std, gamma)

    return tf.cast(normalize(tf.cast(x, tf.float32), gamma, beta), dtype)


# TensorFlow's Philox-4x32-10 (tensorflow/core/lib/random/philox_random.h): its multipliers and
# the Weyl constants added to the key between rounds.
_PHILOX_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
_PHILOX_KEY_STEPS = (0x9E3779B9, 0xBB67AE85)


def _multiply_high_low(a, multiplier: int):
    product = tf.cast(a, tf.uint64) * tf.constant(multiplier, tf.uint64)
    return tf.cast(tf.bitwise.right_shift(product, tf.constant(32, tf.uint64)), tf.uint32), \
        tf.cast(product, tf.uint32)


def _philox(counter, key):
    """Ten Philox rounds on four uint32 counter words (arrays) under a two-word key."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    xor = tf.bitwise.bitwise_xor
    for round_ in range(10):
        if round_:
            k0, k1 = k0 + _PHILOX_KEY_STEPS[0], k1 + _PHILOX_KEY_STEPS[1]
        high0, low0 = _multiply_high_low(c0, _PHILOX_MULTIPLIERS[0])
        high1, low1 = _multiply_high_low(c2, _PHILOX_MULTIPLIERS[1])
        c0, c1, c2, c3 = xor(xor(high1, c1), k0), low1, xor(xor(high0, c3), k1), low0
    return c0, c1, c2, c3


@_kernel
def _dropout_keep_bits(x, key, counter, rate):
    """Bit l of byte i: keep x's element 4i + l, i.e. its draw from
    tf.random.stateless_uniform(x.shape, seed) (key and counter from that seed) is >= rate.

    Philox makes four uint32 per 128-bit counter, and TensorFlow gives element j the word
    j % 4 of counter + j // 4. Packing the four decisions of one counter into a byte keeps
    XLA from computing the rounds once per element: it recomputes a fused expression for
    every output element, and a byte per counter is one output element."""
    blocks = (tf.size(x) + 3) // 4
    index = tf.cast(tf.range(blocks), tf.uint32)
    # counter + index as one 128-bit number, carrying from word to word.
    c0 = counter[0] + index
    carry = tf.cast(c0 < index, tf.uint32)
    c1 = counter[1] + carry
    carry = tf.cast(c1 < carry, tf.uint32)
    c2 = counter[2] + carry
    c3 = counter[3] + tf.cast(c2 < carry, tf.uint32)
    words = _philox((c0, c1, c2, c3), (key[0], key[1]))
    keep_bits = tf.zeros([blocks], tf.int32)
    for lane, word in enumerate(words):
        # TensorFlow's uint32 -> float in [0, 1): 23 random mantissa bits under exponent 0.
        mantissa = tf.bitwise.bitwise_and(word, tf.constant(0x7FFFFF, tf.uint32))
        uniform = tf.bitcast(tf.bitwise.bitwise_or(mantissa, tf.constant(0x3F800000, tf.uint32)),
                             tf.float32) - 1.0
        keep_bits += tf.cast(uniform >= rate, tf.int32) * (1 << lane)
    return tf.cast(keep_bits, tf.uint8)


def _keep(x, keep_bits, rate):
    lanes = tf.bitwise.right_shift(tf.cast(keep_bits, tf.int32)[:, None], tf.range(4)[None])
    keep = tf.reshape(tf.bitwise.bitwise_and(lanes, 1) > 0, [-1])[:tf.size(x)]
    x32, = _float32(x)
    return tf.cast(tf.where(tf.reshape(keep, tf.shape(x)), x32 * (1.0 / (1.0 - rate)), 0.0),
                   x.dtype)


_apply_keep_bits = _kernel(_keep)


def _keep_bits_for(x, rate: float, seed):
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)
    return _dropout_keep_bits(x, tf.reshape(tf.bitcast(key, tf.uint32), [2]),
                              tf.reshape(tf.bitcast(counter, tf.uint32), [4]), rate)


def dropout(x, rate: float, seed):
    """Inverted dropout with tf.random.stateless_uniform(x.shape, seed)'s very draws: zero
    where the draw < rate, scale the rest by 1 / (1 - rate). For float32 x that is exactly
    tf.nn.experimental.stateless_dropout(x, rate, seed); under mixed precision the draws
    stay float32. seed: int32 [2].

    The random numbers are made inside the kernel (TensorFlow's Philox, the same words), four
    decisions to a byte, which is also all the backward pass keeps: no tensor of random
    numbers is written or read."""
    keep_bits = _keep_bits_for(x, rate, seed)

    @tf.custom_gradient
    def drop(x):
        return _apply_keep_bits(x, keep_bits, rate), \
            lambda dy: _apply_keep_bits(dy, keep_bits, rate)

    return drop(x)


@_kernel
def _add_norm_forward(x, bias, residual, keep_bits, rate, gamma, beta, epsilon):
    x, bias, residual = _float32(x, bias, residual)
    x = x + bias
    if keep_bits is not None:
        x = _keep(x, keep_bits, rate)
    return _normalize(x + residual, gamma, beta, epsilon)


@_kernel
def _add_norm_backward(dy, normalized, inv_std, gamma, keep_bits, rate):
    d_sum, d_gamma, d_beta = _normalize_gradient(tf.cast(dy, tf.float32), normalized, inv_std,
                                                 gamma)
    dx = tf.cast(d_sum if keep_bits is None else _keep(d_sum, keep_bits, rate), dy.dtype)
    return dx, _sum_rows(dx), tf.cast(d_sum, dy.dtype), d_gamma, d_beta


def dropout_add_layer_norm(x, bias, residual, gamma, beta, epsilon: float, rate: float = 0.0,
                           seed=None):
    """layer_norm(dropout(x + bias) + residual): a transformer sub-layer's output, where x is
    its dense layer's product without the bias. The same arithmetic as bias_add, dropout() and
    layer_norm() in turn (the same draws for the same seed), as one kernel each way instead of
    five forward and four backward; no dropout when seed is None."""
    keep_bits = None if seed is None or not rate else _keep_bits_for(x, rate, seed)

    @tf.custom_gradient
    def add_norm(x, bias, residual, gamma, beta):
        y, normalized, inv_std = _add_norm_forward(x, bias, residual, keep_bits, rate, gamma,
                                                   beta, epsilon)
        return tf.cast(y, x.dtype), \
            lambda dy: _add_norm_backward(dy, normalized, inv_std, gamma, keep_bits, rate)

    return add_norm(x, bias, residual, gamma, beta)


@_kernel
def _cross_entropy_forward(logits, targets):
    top = tf.reduce_max(logits, -1, keepdims=True)
    log_normalizer = tf.math.log(tf.reduce_sum(tf.exp(logits - top), -1, keepdims=True)) + top
    target_logits = tf.gather(logits, targets, batch_dims=len(targets.shape))
    return log_normalizer[..., 0] - target_logits, log_normalizer


@_kernel
def _cross_entropy_backward(logits, log_normalizer, targets, d_loss):
    one_hot = tf.one_hot(targets, logits.shape[-1], dtype=logits.dtype)
    return (tf.exp(logits - log_normalizer) - one_hot) * d_loss[..., None]


def softmax_cross_entropy(logits, targets):
    """-log softmax(logits)[targets] per position, for float32 logits [..., V] and int targets.

    The same value as the original's -sum(one_hot * log_softmax(logits)), without
    materialising the log-probabilities; the gradient softmax - one_hot is one pass, where
    TensorFlow's gradient of log_softmax + gather densifies through a scatter."""

    @tf.custom_gradient
    def cross_entropy(logits):
        loss, log_normalizer = _cross_entropy_forward(logits, targets)
        return loss, lambda d: _cross_entropy_backward(logits, log_normalizer, targets, d)

    return cross_entropy(logits)


@_kernel
def add_gumbel_noise(logits, uniform):
    """logits + Gumbel(0, 1) noise made from float32 uniform draws (shapes broadcast), as the
    original's sample_from_softmax writes it: -log(-log(u + 1e-9) + 1e-9). One pass over the
    generator's logits where TensorFlow's ops make six."""
    return logits - tf.math.log(-tf.math.log(uniform + 1e-9) + 1e-9)


def _pad_columns(rows, width: int):
    return tf.pad(rows, [[0, 0], [0, width - rows.shape[-1]]])


def _padded_width(width: int) -> int:
    """The row width oneDNN's AVX2 sgemm reads a long transposed operand at full speed: a row
    of 512 or more floats that is a multiple of 1 KB gets one cache line more, as rows that far
    apart in memory fall into the same cache sets when the sgemm packs them."""
    return width + 16 if width >= 512 and width % 256 == 0 else width


def weight_gradient(rows, dy_rows, pad_wide_rows: bool):
    """rows^T @ dy_rows, the kernel gradient of rows @ kernel, laid out as oneDNN runs it
    fastest.

    With oneDNN's AVX2 kernels (pad_wide_rows), the wider operand is copied into rows one
    cache line longer and the extra rows or columns of the product dropped: over the long
    batch dimension the sgemm otherwise reads rows a multiple of 1 KB apart (the
    feed-forward's 4 KB), at as little as half its speed. Otherwise (oneDNN's AVX-512 kernels,
    or Eigen's): (dy^T x)^T where the input is wider than the output (the feed-forward output
    layer), x^T dy elsewhere. The products are the same; only the operands' layout changes."""
    depth, units = rows.shape[-1], dy_rows.shape[-1]
    if pad_wide_rows:
        if depth >= units and _padded_width(depth) != depth:
            return tf.matmul(_pad_columns(rows, _padded_width(depth)), dy_rows,
                             transpose_a=True)[:depth]
        if _padded_width(units) != units:
            return tf.matmul(rows, _pad_columns(dy_rows, _padded_width(units)),
                             transpose_a=True)[:, :units]
        return tf.matmul(rows, dy_rows, transpose_a=True)
    if depth > units:
        return tf.transpose(tf.matmul(dy_rows, rows, transpose_a=True))
    return tf.matmul(rows, dy_rows, transpose_a=True)


def matmul(x, kernel):
    """x [..., K] @ kernel [K, N], with the kernel's gradient laid out as oneDNN runs it
    fastest (`weight_gradient`)."""
    depth, units = kernel.shape

    @tf.custom_gradient
    def product(x, kernel):
        rows = tf.reshape(x, [-1, depth])
        y = tf.reshape(tf.matmul(rows, kernel), tf.concat([tf.shape(x)[:-1], [units]], 0))

        def gradient(dy):
            dy_rows = tf.reshape(dy, [-1, units])
            dx = tf.reshape(tf.matmul(dy_rows, kernel, transpose_b=True), tf.shape(x))
            return dx, weight_gradient(rows, dy_rows, _PAD_WIDE_ROWS)

        return y, gradient

    return product(x, kernel)
