"""ELECTRA's transformer, as the original's model/modeling.py builds it, in Keras 3.

A BERT encoder (post-LayerNorm, exact GELU, LayerNorm epsilon 1e-12 by default,
truncated-normal(0.02) initialisation, dropout 0.1, -10000 attention-mask bias) plus the two
pretraining heads.

Layers, from the bottom up:
  Embeddings        word + position + token type, LayerNorm, dropout (shareable between models)
  TransformerLayer  one self-attention + feed-forward block
  Encoder           the backbone: Embeddings, a projection when embedding != hidden size, layers
  MaskedLMHead      the generator's head: dense, GELU, LayerNorm, tied output embedding + bias
  DiscriminatorHead dense, GELU, dense to one logit per token
Models:
  ElectraDiscriminator / ElectraGenerator  an Encoder with its head, savable as .keras

Two implementations of the same layers, with the same variables, chosen by `kernels`:
"reference" is plain Keras (Dense, LayerNormalization, Dropout, softmax), which XLA fuses by
itself on GPUs and TPUs; "fused" is the CPU speed path: LayerNorm, Dropout and Dense below are
Keras' layers computed with the kernels of electra_tf.fused, and TransformerLayer runs one GEMM
for query/key/value and one kernel for each sub-layer's bias, dropout, residual and LayerNorm.
"auto" (the default) picks "fused" where the current tf.distribute strategy computes on CPUs
only, "reference" on GPUs and TPUs.

Example:
>>> import numpy as np
>>> encoder = Encoder(vocab_size=200, hidden_size=32, num_hidden_layers=2,
...                   num_attention_heads=2, intermediate_size=64, embedding_size=16)
>>> disc = ElectraDiscriminator(encoder)
>>> ids = np.array([[101, 7, 8, 102, 0]])
>>> out = disc({"input_ids": ids, "input_mask": ids > 0, "segment_ids": 0 * ids})
>>> tuple(out["logits"].shape), tuple(out["sequence_output"].shape)
((1, 5), (1, 5, 32))
"""

from __future__ import annotations

import math
from typing import Any

import keras
import tensorflow as tf
from keras import layers, ops

from electra_tf import fused, hardware
from electra_tf.config import KERNELS

LAYER_NORM_EPSILON = 1e-12  # the original's contrib layer_norm epsilon; layer_norm_eps's default
ATTENTION_MASK_BIAS = -10000.0  # the original adds this to masked attention scores

register = keras.saving.register_keras_serializable(package="electra_tf")


def _initializer(initializer_range: float) -> keras.initializers.Initializer:
    # Truncated at two standard deviations, like tf.truncated_normal_initializer.
    return keras.initializers.TruncatedNormal(stddev=initializer_range)


@register
class LayerNorm(layers.LayerNormalization):
    """keras.layers.LayerNormalization over the last axis, computed by one fused kernel.

    Same variables (gamma, beta), config and float32 arithmetic as Keras' layer; the forward
    and backward passes are fused.layer_norm's.

    >>> norm = LayerNorm(epsilon=1e-12)
    >>> tuple(norm(ops.ones((2, 3, 8))).shape)
    (2, 3, 8)
    """

    def call(self, inputs):
        if self.axis not in (-1, [-1], [len(inputs.shape) - 1]) or self.rms_scaling \
                or not (self.center and self.scale):
            return super().call(inputs)
        return ops.cast(fused.layer_norm(inputs, self.gamma.value, self.beta.value, self.epsilon),
                        self.compute_dtype)


@register
class Dense(layers.Dense):
    """keras.layers.Dense whose kernel gradient takes fused.matmul's faster layout, and
    whose bias and exact GELU are one kernel (fused.bias_gelu).

    >>> dense = Dense(4, activation="relu")
    >>> tuple(dense(ops.ones((2, 3, 8))).shape)
    (2, 3, 4)
    """

    def call(self, inputs, training=None):
        if self.lora_enabled or self.quantization_mode:
            return super().call(inputs, training=training)
        x = self.product(inputs)
        if self.bias is None:
            return self.activation(x)
        bias = ops.cast(self.bias, x.dtype)
        if self.activation is fused.gelu:
            return fused.bias_gelu(x, bias)
        return self.activation(tf.nn.bias_add(x, bias))

    def product(self, inputs):
        """inputs @ kernel, without bias or activation, for kernels that fuse what follows."""
        return fused.matmul(inputs, ops.cast(self.kernel, inputs.dtype))


@register
class Dropout(layers.Dropout):
    """keras.layers.Dropout with the mask applied (and its gradient taken) by one fused kernel.

    Same semantics as tf.nn.dropout: each value is kept with probability 1 - rate and scaled
    by 1 / (1 - rate). For float32 inputs, the very values of Keras' Dropout with the same seed:
    the same float32 uniform draws from the layer's seed generator.

    >>> drop = Dropout(0.5, seed=1)
    >>> sorted(set(ops.convert_to_numpy(drop(ops.ones((1000,)), training=True)).tolist()))
    [0.0, 2.0]
    """

    def call(self, inputs, training=False):
        if not training or self.rate == 0 or self.noise_shape is not None:
            return super().call(inputs, training=training)
        return fused.dropout(inputs, self.rate, self.next_seed())

    def next_seed(self):
        """The int32 [2] seed of the next mask, from the layer's seed generator."""
        seed = self.seed_generator.next()
        if seed.dtype != tf.int32:  # as Keras' TensorFlow backend turns a seed into int32
            seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
        return seed


def use_fused_kernels(kernels: str) -> bool:
    """Whether layers built now with `kernels` ("auto", "fused" or "reference") take the fused
    CPU path. "auto" decides by the current tf.distribute strategy (the one whose scope the
    model is built in): fused where it computes on CPUs only. A model keeps "auto" in its
    config, so a .keras file saved on one machine decides again where it is loaded."""
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, got {kernels!r}")
    if kernels == "auto":
        return hardware.on_cpu(tf.distribute.get_strategy())
    return kernels == "fused"


def _activation(name: str, fused_kernels: bool):
    """The original's get_activation; "gelu" is the exact erf form (Keras' default gelu)."""
    return fused.gelu if name == "gelu" and fused_kernels else keras.activations.get(name)


def _layer_classes(fused_kernels: bool) -> tuple[type, type, type]:
    """(Dense, LayerNorm, Dropout) of one path: the same variables and values either way."""
    if fused_kernels:
        return Dense, LayerNorm, Dropout
    return layers.Dense, layers.LayerNormalization, layers.Dropout


@register
class Embeddings(layers.Layer):
    """Word + position + token-type embeddings, then LayerNorm and dropout.

    Generator and discriminator share one instance (all four weights) unless the config unties
    them, as the original shares the `electra/embeddings` scope.

    >>> emb = Embeddings(vocab_size=10, embedding_size=4)
    >>> tuple(emb(ops.ones((2, 3), "int32"), ops.zeros((2, 3), "int32")).shape)
    (2, 3, 4)
    """

    def __init__(self, vocab_size: int, embedding_size: int, max_position_embeddings: int = 512,
                 type_vocab_size: int = 2, initializer_range: float = 0.02,
                 dropout_rate: float = 0.1, layer_norm_eps: float = LAYER_NORM_EPSILON,
                 kernels: str = "auto", **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.dropout_rate = dropout_rate
        self.layer_norm_eps = layer_norm_eps
        self.kernels = kernels
        _, layer_norm, dropout = _layer_classes(use_fused_kernels(kernels))
        self.layer_norm = layer_norm(epsilon=layer_norm_eps, name="LayerNorm",
                                     dtype=self.dtype_policy)
        self.dropout = dropout(dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        init = _initializer(self.initializer_range)
        self.word_embeddings = self.add_weight(
            name="word_embeddings", shape=(self.vocab_size, self.embedding_size), initializer=init)
        self.token_type_embeddings = self.add_weight(
            name="token_type_embeddings", shape=(self.type_vocab_size, self.embedding_size),
            initializer=init)
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(self.max_position_embeddings, self.embedding_size),
            initializer=init)
        self.layer_norm.build((None, None, self.embedding_size))
        self.built = True

    def call(self, input_ids, token_type_ids, training=None):
        seq_length = ops.shape(input_ids)[1]
        x = ops.take(self.word_embeddings, input_ids, axis=0)
        x = x + ops.take(self.token_type_embeddings, token_type_ids, axis=0)
        x = x + self.position_embeddings[:seq_length][None]
        return self.dropout(self.layer_norm(x), training=training)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "vocab_size": self.vocab_size,
                "embedding_size": self.embedding_size,
                "max_position_embeddings": self.max_position_embeddings,
                "type_vocab_size": self.type_vocab_size,
                "initializer_range": self.initializer_range, "dropout_rate": self.dropout_rate,
                "layer_norm_eps": self.layer_norm_eps, "kernels": self.kernels}


@register
class TransformerLayer(layers.Layer):
    """One post-LayerNorm transformer block, as the original's transformer_model loop body.

    `kernels`: "reference" computes it as written in `call`, with Keras layers; "fused" with
    the kernels of electra_tf.fused (`_fused_call`); "auto" picks by device (see
    use_fused_kernels). Both have the same variables and give the same values, and the same
    dropout masks for the same seeds in float32.

    >>> block = TransformerLayer(hidden_size=8, num_attention_heads=2, intermediate_size=16)
    >>> tuple(block(ops.ones((1, 3, 8)), ops.ones((1, 1, 1, 3), "int32")).shape)
    (1, 3, 8)
    """

    def __init__(self, hidden_size: int, num_attention_heads: int, intermediate_size: int,
                 hidden_act: str = "gelu", hidden_dropout_prob: float = 0.1,
                 attention_probs_dropout_prob: float = 0.1, initializer_range: float = 0.02,
                 layer_norm_eps: float = LAYER_NORM_EPSILON, kernels: str = "auto", **kwargs):
        super().__init__(**kwargs)
        if hidden_size % num_attention_heads:
            raise ValueError(f"hidden_size {hidden_size} is not a multiple of "
                             f"num_attention_heads {num_attention_heads}")
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.kernels = kernels
        self.fused_kernels = use_fused_kernels(kernels)
        self.head_size = hidden_size // num_attention_heads
        dense_class, layer_norm_class, dropout_class = _layer_classes(self.fused_kernels)

        def dense(units, name, activation=None):
            return dense_class(units, activation=activation, name=name,
                               kernel_initializer=_initializer(initializer_range),
                               dtype=self.dtype_policy)

        def layer_norm(name):
            return layer_norm_class(epsilon=layer_norm_eps, name=name, dtype=self.dtype_policy)

        self.query = dense(hidden_size, "query")
        self.key = dense(hidden_size, "key")
        self.value = dense(hidden_size, "value")
        self.attention_output = dense(hidden_size, "attention_output")
        self.attention_layer_norm = layer_norm("attention_LayerNorm")
        self.intermediate = dense(intermediate_size, "intermediate",
                                  _activation(hidden_act, self.fused_kernels))
        self.output_dense = dense(hidden_size, "output")
        self.output_layer_norm = layer_norm("output_LayerNorm")
        self.attention_dropout = dropout_class(attention_probs_dropout_prob,
                                               dtype=self.dtype_policy)
        self.hidden_dropout = dropout_class(hidden_dropout_prob, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        hidden = (None, None, self.hidden_size)
        for dense in (self.query, self.key, self.value, self.attention_output, self.intermediate):
            dense.build(hidden)
        self.output_dense.build((None, None, self.intermediate_size))
        self.attention_layer_norm.build(hidden)
        self.output_layer_norm.build(hidden)
        self.built = True

    def call(self, x, attention_mask, training=None, first_position_only: bool = False):
        """x: [B, L, H]; attention_mask: int [B, 1, 1 or L, L], 1 where attention may look.

        first_position_only: compute the output at position 0 ([CLS]) only, [B, 1, H], still
        attending over every position: all a classifier on the last layer's [CLS] needs, and
        the same values (and gradients) as the full layer's [:, :1]."""
        if self.fused_kernels:
            return self._fused_call(x, attention_mask, training, first_position_only)
        queries = x[:, :1] if first_position_only else x
        if first_position_only:
            attention_mask = attention_mask[:, :, :1]

        # Self-attention: scaled dot products of every head's query with every key.
        q = self._split_heads(self.query(queries))  # [B, heads, L_q, head_size]
        k = self._split_heads(self.key(x))  # [B, heads, L, head_size]
        v = self._split_heads(self.value(x))
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) * (1.0 / math.sqrt(self.head_size))
        # The mask as a -10000 bias, and the softmax in float32 (also under mixed precision).
        bias = (1.0 - ops.cast(attention_mask, "float32")) * ATTENTION_MASK_BIAS
        probs = ops.softmax(ops.cast(scores, "float32") + bias, axis=-1)
        probs = self.attention_dropout(ops.cast(probs, x.dtype), training=training)
        context = self._merge_heads(ops.matmul(probs, v))  # [B, L_q, H]
        attention = self.attention_output(context)
        attention = self.hidden_dropout(attention, training=training)
        attention = self.attention_layer_norm(attention + queries)

        # Feed-forward: dense + GELU, dense back to the hidden size.
        hidden = self.output_dense(self.intermediate(attention))
        hidden = self.hidden_dropout(hidden, training=training)
        return self.output_layer_norm(hidden + attention)

    def _split_heads(self, x):
        """[B, L, H] -> [B, heads, L, head_size]."""
        x = ops.reshape(x, (ops.shape(x)[0], ops.shape(x)[1], self.num_attention_heads,
                            self.head_size))
        return ops.transpose(x, (0, 2, 1, 3))

    def _merge_heads(self, x):
        """[B, heads, L, head_size] -> [B, L, H]."""
        x = ops.transpose(x, (0, 2, 1, 3))
        return ops.reshape(x, (ops.shape(x)[0], ops.shape(x)[1], self.hidden_size))

    def _fused_call(self, x, attention_mask, training, first_position_only: bool):
        """`call`'s arithmetic with the CPU speed kernels: one GEMM for query, key and value;
        one kernel for each sub-layer's bias, dropout, residual and LayerNorm."""
        batch_size, seq_length = ops.shape(x)[0], ops.shape(x)[1]
        # One GEMM for query, key and value (faster than three); the weights stay separate.
        kernel = ops.concatenate([self.query.kernel, self.key.kernel, self.value.kernel], 1)
        bias = ops.concatenate([self.query.bias, self.key.bias, self.value.bias], 0)
        # bias_add: its gradient kernel is faster than a broadcast add's reduction on CPU.
        qkv = tf.nn.bias_add(ops.matmul(x, ops.cast(kernel, x.dtype)), ops.cast(bias, x.dtype))
        qkv = ops.reshape(qkv, (batch_size, seq_length, 3, self.num_attention_heads,
                                self.head_size))
        # One transpose to [3, B, heads, L, head_size]; unstacking the leading axis then shares
        # the buffer instead of copying it.
        q, k, v = tf.unstack(ops.transpose(qkv, (2, 0, 3, 1, 4)))
        if first_position_only:
            q, x, attention_mask = q[:, :, :1], x[:, :1], attention_mask[:, :, :1]
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) * (1.0 / math.sqrt(self.head_size))
        bias = (1.0 - ops.cast(attention_mask, "float32")) * ATTENTION_MASK_BIAS
        probs = ops.softmax(ops.cast(scores, "float32") + bias, axis=-1)
        probs = self.attention_dropout(ops.cast(probs, x.dtype), training=training)
        context = self._merge_heads(ops.matmul(probs, v))
        attention = self._add_and_norm(self.attention_output, context, x,
                                       self.attention_layer_norm, training)
        return self._add_and_norm(self.output_dense, self.intermediate(attention), attention,
                                  self.output_layer_norm, training)

    def _add_and_norm(self, dense: Dense, inputs, residual, layer_norm: LayerNorm, training):
        """layer_norm(hidden_dropout(dense(inputs)) + residual), the dense layer's bias, the
        dropout, the residual connection and the LayerNorm as one fused kernel."""
        seed = self.hidden_dropout.next_seed() if training and self.hidden_dropout_prob else None
        product = dense.product(inputs)
        return fused.dropout_add_layer_norm(
            product, ops.cast(dense.bias, product.dtype), residual, layer_norm.gamma.value,
            layer_norm.beta.value, layer_norm.epsilon, self.hidden_dropout_prob, seed)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "hidden_size": self.hidden_size,
                "num_attention_heads": self.num_attention_heads,
                "intermediate_size": self.intermediate_size, "hidden_act": self.hidden_act,
                "hidden_dropout_prob": self.hidden_dropout_prob,
                "attention_probs_dropout_prob": self.attention_probs_dropout_prob,
                "initializer_range": self.initializer_range, "layer_norm_eps": self.layer_norm_eps,
                "kernels": self.kernels}


def attention_mask(input_mask, causal: str | None = None):
    """[B, L] padding mask -> int32 [B, 1, 1 or L, L], 1 where attention may look.

    causal="ltr" lets each position see itself and the left; "rtl" itself and the right (the
    original's two-tower Electric generator). Kept integer so Keras' mixed-precision autocast
    leaves it alone; TransformerLayer turns it into the float32 -10000 bias."""
    mask = ops.cast(input_mask, "int32")[:, None, None, :]  # [B, 1, 1, L]
    if causal is not None:
        seq_length = ops.shape(input_mask)[1]
        ones = ops.ones((seq_length, seq_length), "int32")
        band = ops.tril(ones) if causal == "ltr" else ops.triu(ones)
        mask = mask * band[None, None]
    return mask


@register
class Encoder(layers.Layer):
    """The ELECTRA/BERT backbone: token ids -> contextual vectors [B, L, hidden_size].

    Hyperparameters are the original BertConfig's. `embedding_size` defaults to hidden_size;
    when they differ, an `embeddings_project` dense layer maps one to the other. Pass
    `embeddings` to share an Embeddings layer with another encoder. `kernels` ("auto",
    "fused", "reference") picks the implementation of its layers (see the module docstring);
    the config keeps it as given.

    >>> enc = Encoder(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
    ...               intermediate_size=32, embedding_size=8)
    >>> ids = ops.convert_to_tensor([[1, 2, 3]])
    >>> tuple(enc(ids, ops.ones_like(ids), ops.zeros_like(ids)).shape)
    (1, 3, 16)
    """

    def __init__(self, vocab_size: int, hidden_size: int = 768, num_hidden_layers: int = 12,
                 num_attention_heads: int = 12, intermediate_size: int = 3072,
                 hidden_act: str = "gelu", hidden_dropout_prob: float = 0.1,
                 attention_probs_dropout_prob: float = 0.1, max_position_embeddings: int = 512,
                 type_vocab_size: int = 2, initializer_range: float = 0.02,
                 embedding_size: int | None = None, causal: str | None = None,
                 embeddings: Embeddings | dict | None = None,
                 layer_norm_eps: float = LAYER_NORM_EPSILON, kernels: str = "auto", **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.causal = causal
        self.kernels = kernels
        if isinstance(embeddings, dict):
            embeddings = keras.saving.deserialize_keras_object(embeddings)
        if embeddings is None:
            embeddings = Embeddings(
                vocab_size, embedding_size or hidden_size, max_position_embeddings,
                type_vocab_size, initializer_range, hidden_dropout_prob, layer_norm_eps, kernels,
                name="embeddings", dtype=self.dtype_policy)
        elif embeddings.vocab_size != vocab_size:
            raise ValueError(f"shared embeddings have vocab_size {embeddings.vocab_size}, "
                             f"the encoder {vocab_size}")
        self.embeddings = embeddings
        self.embedding_size = embeddings.embedding_size
        self.embeddings_project = None
        if self.embedding_size != hidden_size:
            self.embeddings_project = layers.Dense(
                hidden_size, name="embeddings_project", dtype=self.dtype_policy,
                kernel_initializer=_initializer(initializer_range))
        self.transformer_layers = [
            TransformerLayer(hidden_size, num_attention_heads, intermediate_size, hidden_act,
                             hidden_dropout_prob, attention_probs_dropout_prob, initializer_range,
                             layer_norm_eps, kernels, name=f"layer_{i}", dtype=self.dtype_policy)
            for i in range(num_hidden_layers)]

    def build(self, input_shape=None):
        if not self.embeddings.built:
            self.embeddings.build()
        if self.embeddings_project is not None and not self.embeddings_project.built:
            self.embeddings_project.build((None, None, self.embedding_size))
        for layer in self.transformer_layers:
            if not layer.built:
                layer.build()
        self.built = True

    @property
    def embedding_table(self):
        """The word-embedding matrix [vocab, embedding_size] the MLM head ties its output to."""
        return self.embeddings.word_embeddings

    def call(self, input_ids, input_mask, segment_ids, training=None,
             first_position_only: bool = False):
        """-> [B, L, hidden_size]; with first_position_only, [B, 1, hidden_size]: the last
        layer computes the [CLS] position only (see TransformerLayer.call)."""
        x = self.embeddings(input_ids, segment_ids, training=training)
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)
        mask = attention_mask(input_mask, self.causal)
        for i, layer in enumerate(self.transformer_layers):
            last = i == len(self.transformer_layers) - 1
            x = layer(x, mask, training=training, first_position_only=first_position_only and last)
        return x

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "vocab_size": self.vocab_size,
                "hidden_size": self.hidden_size, "num_hidden_layers": self.num_hidden_layers,
                "num_attention_heads": self.num_attention_heads,
                "intermediate_size": self.intermediate_size, "hidden_act": self.hidden_act,
                "hidden_dropout_prob": self.hidden_dropout_prob,
                "attention_probs_dropout_prob": self.attention_probs_dropout_prob,
                "max_position_embeddings": self.max_position_embeddings,
                "type_vocab_size": self.type_vocab_size,
                "initializer_range": self.initializer_range, "layer_norm_eps": self.layer_norm_eps,
                "embedding_size": self.embedding_size, "causal": self.causal,
                "embeddings": keras.saving.serialize_keras_object(self.embeddings),
                "kernels": self.kernels}


@register
class MaskedLMHead(layers.Layer):
    """The generator's softmax layer (the original's get_token_logits): dense to the embedding
    width, GELU, LayerNorm, then the transposed word-embedding matrix plus an output bias.
    Logits come out in float32 whatever the compute dtype.

    >>> head = MaskedLMHead(vocab_size=10, embedding_size=4)
    >>> tuple(head(ops.ones((2, 3, 8)), ops.ones((10, 4))).shape)
    (2, 3, 10)
    """

    def __init__(self, vocab_size: int, embedding_size: int, hidden_act: str = "gelu",
                 initializer_range: float = 0.02, layer_norm_eps: float = LAYER_NORM_EPSILON,
                 kernels: str = "auto", **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.kernels = kernels
        fused_kernels = use_fused_kernels(kernels)
        self.dense = layers.Dense(embedding_size, activation=_activation(hidden_act, fused_kernels),
                                  name="dense", kernel_initializer=_initializer(initializer_range),
                                  dtype=self.dtype_policy)
        self.layer_norm = _layer_classes(fused_kernels)[1](
            epsilon=layer_norm_eps, name="LayerNorm", dtype=self.dtype_policy)

    @classmethod
    def for_encoder(cls, encoder: Encoder, name: str, **kwargs) -> MaskedLMHead:
        """The head on `encoder`'s output, its shapes, activation and initialiser the encoder's
        (its output layer is `encoder`'s word embeddings, passed to `call`)."""
        return cls(encoder.vocab_size, encoder.embedding_size, encoder.hidden_act,
                   encoder.initializer_range, encoder.layer_norm_eps, encoder.kernels, name=name,
                   **kwargs)

    def build(self, input_shape=None):
        if input_shape is not None and not self.dense.built:
            self.dense.build(input_shape)
        self.layer_norm.build((None, None, self.embedding_size))
        self.output_bias = self.add_weight(name="output_bias", shape=(self.vocab_size,),
                                           initializer="zeros")
        self.built = True

    def call(self, hidden, embedding_table):
        x = self.layer_norm(self.dense(hidden))
        logits = ops.matmul(x, ops.transpose(ops.cast(embedding_table, x.dtype)))
        return ops.cast(logits, "float32") + ops.cast(self.output_bias, "float32")

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "vocab_size": self.vocab_size,
                "embedding_size": self.embedding_size, "hidden_act": self.hidden_act,
                "initializer_range": self.initializer_range, "layer_norm_eps": self.layer_norm_eps,
                "kernels": self.kernels}


@register
class DiscriminatorHead(layers.Layer):
    """Replaced-token detection: dense(hidden, GELU) then dense(1); one float32 logit per token.

    >>> tuple(DiscriminatorHead(hidden_size=8)(ops.ones((2, 3, 8))).shape)
    (2, 3)
    """

    def __init__(self, hidden_size: int, hidden_act: str = "gelu",
                 initializer_range: float = 0.02, kernels: str = "auto", **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.kernels = kernels
        activation = _activation(hidden_act, use_fused_kernels(kernels))
        self.dense = layers.Dense(hidden_size, activation=activation, name="dense",
                                  kernel_initializer=_initializer(initializer_range),
                                  dtype=self.dtype_policy)
        # The original leaves this layer's kernel at tf.layers' default (Glorot uniform).
        self.dense_1 = layers.Dense(1, name="dense_1", dtype=self.dtype_policy)

    @classmethod
    def for_encoder(cls, encoder: Encoder, name: str = "discriminator_predictions",
                    **kwargs) -> DiscriminatorHead:
        """The head on `encoder`'s output, its width, activation and initialiser the
        encoder's."""
        return cls(encoder.hidden_size, encoder.hidden_act, encoder.initializer_range,
                   encoder.kernels, name=name, **kwargs)

    def build(self, input_shape=None):
        self.dense.build((None, None, self.hidden_size))
        self.dense_1.build((None, None, self.hidden_size))
        self.built = True

    def call(self, sequence_output):
        logits = self.dense_1(self.dense(sequence_output))
        return ops.cast(ops.squeeze(logits, -1), "float32")

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "hidden_size": self.hidden_size,
                "hidden_act": self.hidden_act, "initializer_range": self.initializer_range,
                "kernels": self.kernels}


def build_once(layer: layers.Layer, input_shape=None) -> None:
    """Builds a layer that may already be built (shared with a pretraining model)."""
    if not layer.built:
        layer.build(input_shape)


class _EncoderWithHead(keras.Model):
    """An Encoder (the backbone) with one task head on top; subclasses say which head."""

    def __init__(self, encoder: Encoder | dict, head: layers.Layer | dict | None = None,
                 **kwargs):
        super().__init__(**kwargs)
        if isinstance(encoder, dict):
            encoder = keras.saving.deserialize_keras_object(encoder)
        if isinstance(head, dict):
            head = keras.saving.deserialize_keras_object(head)
        self.encoder = encoder
        self.head = head or self.default_head(encoder)

    def default_head(self, encoder: Encoder) -> layers.Layer:
        raise NotImplementedError

    def build(self, input_shape=None):
        build_once(self.encoder)
        build_once(self.head, (None, None, self.encoder.hidden_size))
        self.built = True

    def encode(self, inputs: dict, training=None):
        return self.encoder(inputs["input_ids"], inputs["input_mask"], inputs["segment_ids"],
                            training=training)

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "encoder": keras.saving.serialize_keras_object(self.encoder),
                "head": keras.saving.serialize_keras_object(self.head)}


@register
class ElectraDiscriminator(_EncoderWithHead):
    """Encoder + DiscriminatorHead: what fine-tuning starts from.

    Inputs: a dict of int [B, L] `input_ids`, `input_mask`, `segment_ids`. Outputs: a dict with
    `sequence_output` [B, L, H] and the per-token replaced-token `logits` [B, L] (float32).
    """

    def default_head(self, encoder: Encoder) -> DiscriminatorHead:
        return DiscriminatorHead.for_encoder(encoder, dtype=self.dtype_policy)

    def call(self, inputs, training=None):
        sequence_output = self.encode(inputs, training)
        return {"sequence_output": sequence_output, "logits": self.head(sequence_output)}


@register
class ElectraGenerator(_EncoderWithHead):
    """Encoder + MaskedLMHead tied to the encoder's word embeddings.

    `call(inputs)` gives vocabulary logits [B, L, V] at every position; pass
    `inputs["masked_lm_positions"]` [B, N] to compute them only there, as pretraining does.
    """

    def default_head(self, encoder: Encoder) -> MaskedLMHead:
        return MaskedLMHead.for_encoder(encoder, "generator_predictions", dtype=self.dtype_policy)

    def call(self, inputs, training=None):
        sequence_output = self.encode(inputs, training)
        if "masked_lm_positions" in inputs:
            sequence_output = gather_positions(sequence_output, inputs["masked_lm_positions"])
        return {"sequence_output": sequence_output,
                "logits": self.head(sequence_output, self.encoder.embedding_table)}


def gather_positions(sequence, positions):
    """Values of [B, L, ...] `sequence` at [B, N] `positions` -> [B, N, ...]
    (the original's pretrain_helpers.gather_positions)."""
    return tf.gather(sequence, positions, batch_dims=1)
