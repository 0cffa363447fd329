"""The fine-tuning model: the pretrained discriminator's encoder (the backbone) with one head per
task on top, as the original's run_finetuning.FinetuningModel.

>>> import numpy as np
>>> from electra_tf import modeling
>>> encoder = modeling.Encoder(vocab_size=50, hidden_size=16, num_hidden_layers=1,
...                            num_attention_heads=2, intermediate_size=32, name="electra")
>>> model = FinetuningModel(encoder, {"sst": ClassificationHead(2, name="sst"),
...                                   "sts": ClassificationHead(1, name="sts")})
>>> ids = np.array([[2, 7, 9, 3, 0]])
>>> out = model({"input_ids": ids, "input_mask": np.sign(ids), "segment_ids": 0 * ids})
>>> out["sst"].shape, out["sts"].shape
(TensorShape([1, 2]), TensorShape([1, 1]))
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
import tensorflow as tf
from keras import layers

from electra_tf import fused, modeling
from electra_tf.modeling import register


@register
class ClassificationHead(layers.Layer):
    """The [CLS] vector, dropout 0.1, one dense layer to `num_outputs` logits (1 for
    regression). No pooler, as the original; the dense layer has tf.layers' default Glorot
    initialisation, as the original's."""

    reads_first_position_only = True  # the encoder's last layer may compute [CLS] alone

    def __init__(self, num_outputs: int, dropout_rate: float = 0.1, **kwargs):
        super().__init__(**kwargs)
        self.num_outputs = num_outputs
        self.dropout_rate = dropout_rate
        self.dropout = modeling.Dropout(dropout_rate, dtype=self.dtype_policy)
        self.dense = layers.Dense(num_outputs, name="dense", dtype=self.dtype_policy)

    def build(self, input_shape):
        self.dense.build((None, input_shape[-1]))
        self.built = True

    def call(self, sequence_output, features=None, training=None):
        cls = self.dropout(sequence_output[:, 0], training=training)
        return tf.cast(self.dense(cls), tf.float32)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "num_outputs": self.num_outputs,
                "dropout_rate": self.dropout_rate}


@register
class FinetuningModel(keras.Model):
    """Encoder + {task name: head}. Inputs: a dict of int [B, L] `input_ids`, `input_mask`,
    `segment_ids` (and what a head needs, e.g. SQuAD's gold `start_positions` in training);
    outputs: {task name: that head's output} for every example (the loss picks each example's
    own task), or for the heads named in `tasks` only. Each head is called as
    head(sequence_output, inputs, training=...)."""

    def __init__(self, encoder: modeling.Encoder | dict, heads: dict[str, Any], **kwargs):
        super().__init__(**kwargs)
        if isinstance(encoder, dict):
            encoder = keras.saving.deserialize_keras_object(encoder)
        self.encoder = encoder
        self.heads = {name: keras.saving.deserialize_keras_object(head)
                      if isinstance(head, dict) else head for name, head in heads.items()}

    def build(self, input_shape=None):
        modeling.build_once(self.encoder)
        for head in self.heads.values():
            modeling.build_once(head, (None, None, self.encoder.hidden_size))
        self.built = True

    def call(self, inputs, training=None, tasks=None):
        heads = {name: self.heads[name] for name in (tasks or self.heads)}
        # Heads that read only [CLS]: the last layer then computes that position alone.
        cls_only = all(getattr(head, "reads_first_position_only", False)
                       for head in heads.values())
        sequence_output = self.encoder(inputs["input_ids"], inputs["input_mask"],
                                       inputs["segment_ids"], training=training,
                                       first_position_only=cls_only)
        return {name: head(sequence_output, inputs, training=training)
                for name, head in heads.items()}

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name,
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                "heads": {name: keras.saving.serialize_keras_object(head)
                          for name, head in self.heads.items()}}


@register
class SquadHead(layers.Layer):
    """The original's SQuAD head (finetune/qa/qa_tasks.py), XLNet-style.

    Answers may start and end only in segment 1 (the context and its final [SEP]) or at [CLS]
    (position 0): other logits get -1000. With `joint_prediction` the end is predicted from
    [start representation; token representation] through a 512-unit GELU layer: conditioned
    on the gold start in training, on each of the `beam_size` best starts at inference, where
    the outputs are the beam's log-probabilities and indices. The answerability classifier
    reads [CLS] (and, with `answerable_uses_start_logits`, the start-probability-weighted
    representation through a 512-unit GELU layer); its logit is positive for *unanswerable*
    (trained with sigmoid cross-entropy against is_impossible)."""

    def __init__(self, beam_size: int = 20, joint_prediction: bool = True,
                 answerable_classifier: bool = True, answerable_uses_start_logits: bool = True,
                 **kwargs):
        super().__init__(**kwargs)
        self.beam_size = beam_size
        self.joint_prediction = joint_prediction
        self.answerable_classifier = answerable_classifier
        self.answerable_uses_start_logits = answerable_uses_start_logits
        dense = lambda units, name, act=None: layers.Dense(  # noqa: E731
            units, activation=act, name=name, dtype=self.dtype_policy)
        self.start_dense = dense(1, "start_logits")
        if joint_prediction:
            self.end_hidden = dense(512, "qa_hidden", fused.gelu)
            self.end_dense = dense(1, "qa_logits")
        else:
            self.end_dense = dense(1, "end_logits")
        if answerable_classifier:
            self.answer_hidden = (dense(512, "answerable_hidden", fused.gelu)
                                  if answerable_uses_start_logits else None)
            self.answer_dense = dense(1, "answerable_logit")

    def build(self, input_shape):
        hidden = input_shape[-1]
        self.start_dense.build((None, hidden))
        if self.joint_prediction:
            self.end_hidden.build((None, 2 * hidden))
            self.end_dense.build((None, 512))
        else:
            self.end_dense.build((None, hidden))
        if self.answerable_classifier:
            if self.answer_hidden is not None:
                self.answer_hidden.build((None, 2 * hidden))
            self.answer_dense.build((None, 512 if self.answer_hidden is not None else hidden))
        self.built = True

    def call(self, sequence_output, features, training=None):
        seq_length = sequence_output.shape[1] or tf.shape(sequence_output)[1]
        answer_mask = tf.cast(features["input_mask"] * features["segment_ids"], tf.float32)
        answer_mask += tf.one_hot(0, seq_length)
        bias = 1000.0 * (answer_mask - 1.0)  # [B, L]
        start_logits = tf.cast(self.start_dense(sequence_output)[..., 0], tf.float32) + bias
        out = {"start_logits": start_logits}
        if not self.joint_prediction:
            out["end_logits"] = tf.cast(self.end_dense(sequence_output)[..., 0],
                                        tf.float32) + bias
        elif training:
            start = tf.gather(sequence_output, features["start_positions"], batch_dims=1)
            start = tf.broadcast_to(start[:, None], tf.shape(sequence_output))
            hidden = self.end_hidden(tf.concat([start, sequence_output], -1))
            out["end_logits"] = tf.cast(self.end_dense(hidden)[..., 0], tf.float32) + bias
        else:
            log_probs = tf.nn.log_softmax(start_logits)
            out["start_top_log_probs"], out["start_top_index"] = tf.nn.top_k(
                log_probs, k=self.beam_size)
            start = tf.gather(sequence_output, out["start_top_index"], batch_dims=1)  # [B, K, H]
            shape = tf.shape(sequence_output)
            tiled = [shape[0], self.beam_size, shape[1], sequence_output.shape[-1]]
            hidden = self.end_hidden(tf.concat(
                [tf.broadcast_to(start[:, :, None], tiled),
                 tf.broadcast_to(sequence_output[:, None], tiled)], -1))
            end_logits = tf.cast(self.end_dense(hidden)[..., 0], tf.float32) + bias[:, None]
            out["end_top_log_probs"], out["end_top_index"] = tf.nn.top_k(
                tf.nn.log_softmax(end_logits), k=self.beam_size)  # [B, K, K]
        if self.answerable_classifier:
            representation = sequence_output[:, 0]
            if self.answer_hidden is not None:
                start_probs = tf.cast(tf.nn.softmax(start_logits), sequence_output.dtype)
                weighted = tf.reduce_sum(start_probs[..., None] * sequence_output, axis=1)
                representation = self.answer_hidden(tf.concat([representation, weighted], -1))
            out["answerable_logit"] = tf.cast(self.answer_dense(representation)[:, 0],
                                              tf.float32)
        return out

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beam_size": self.beam_size,
                "joint_prediction": self.joint_prediction,
                "answerable_classifier": self.answerable_classifier,
                "answerable_uses_start_logits": self.answerable_uses_start_logits}


@register
class TaggingHead(layers.Layer):
    """The original's tagging head: one dense layer to `num_labels` logits (no dropout), here
    at every position [B, L, num_labels]; the task reads each word's first wordpiece."""

    def __init__(self, num_labels: int, **kwargs):
        super().__init__(**kwargs)
        self.num_labels = num_labels
        self.dense = layers.Dense(num_labels, name="dense", dtype=self.dtype_policy)

    def build(self, input_shape):
        self.dense.build((None, None, input_shape[-1]))
        self.built = True

    def call(self, sequence_output, features=None, training=None):
        return tf.cast(self.dense(sequence_output), tf.float32)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "num_labels": self.num_labels}


@register
class ReplacedTokenHead(layers.Layer):
    """The pretraining discriminator's replaced-token-detection head as a fine-tuning head:
    one logit per position [B, L], positive for "replaced" (zero-shot classification reads it
    at the label word)."""

    def __init__(self, hidden_size: int, hidden_act: str = "gelu", **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.hidden_act = hidden_act
        self.detector = modeling.DiscriminatorHead(hidden_size, hidden_act,
                                                   name="discriminator_predictions",
                                                   dtype=self.dtype_policy)

    def build(self, input_shape):
        self.detector.build(input_shape)
        self.built = True

    def call(self, sequence_output, features=None, training=None):
        return self.detector(sequence_output)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "hidden_size": self.hidden_size,
                "hidden_act": self.hidden_act}


def load_pretrained_encoder(encoder: modeling.Encoder, path: str) -> str:
    """Copies a pretrained discriminator's encoder into `encoder`. `path` is anything
    checkpoints.load_pretrained reads: our discriminator.keras (or its directory), a TF1
    checkpoint (Google's releases, the original's run_pretraining.py output) or a Hugging Face
    directory. Returns what was read. Fails naming both values where the architectures differ
    (finetuning/config.py gives the encoder the checkpoint's architecture)."""
    from electra_tf import checkpoints

    pretrained = checkpoints.load_pretrained(path, encoder.num_attention_heads)
    if pretrained.discriminator is None:
        raise ValueError(f"init_checkpoint {path} holds a generator only; fine-tuning starts "
                         "from the discriminator")
    source = pretrained.discriminator.encoder
    keys = [f.name for f in dataclasses.fields(checkpoints.EncoderSizes)]
    differ = [f"{k} {getattr(source, k)} in the checkpoint, {getattr(encoder, k)} in the config"
              for k in keys if getattr(source, k) != getattr(encoder, k)]
    if differ:
        raise ValueError(
            f"init_checkpoint {pretrained.source} does not match the configured model "
            f"(model_size, embedding_size, vocab_size, model_hparam_overrides): "
            f"{', '.join(differ)}")
    modeling.build_once(encoder)
    targets = checkpoints.encoder_variables(encoder, "electra")
    for name, variable in checkpoints.encoder_variables(source, "electra").items():
        targets[name].assign(variable)
    return f"{pretrained.source} ({pretrained.format})"
