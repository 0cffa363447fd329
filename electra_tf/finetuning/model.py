"""The fine-tuning model: the pretrained discriminator's encoder (the backbone) with one head per
task on top, as the original's run_finetuning.FinetuningModel. Each head lives with its task
(glue.ClassificationHead, qa.SquadHead, tagging.TaggingHead, zero_shot.ReplacedTokenHead).

>>> import numpy as np
>>> from electra_tf import modeling
>>> from electra_tf.finetuning.glue import ClassificationHead
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

from electra_tf import modeling
from electra_tf.modeling import register


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
        cls_only = all(head.reads_first_position_only for head in heads.values())
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


def load_pretrained_encoder(encoder: modeling.Encoder, path: str) -> str:
    """Copies a pretrained discriminator's encoder into `encoder`. `path` is anything
    checkpoints.load_pretrained reads: our discriminator.keras (or its directory), a TF1
    checkpoint (Google's releases, the original's run_pretraining.py output) or a Hugging Face
    directory. Returns what was read. Fails naming both values where the architectures differ
    (finetuning/config.py gives the encoder the checkpoint's architecture)."""
    from electra_tf import checkpoint_names, checkpoints

    pretrained = checkpoints.load_pretrained(path, encoder.num_attention_heads)
    if pretrained.discriminator is None:
        raise ValueError(f"init_checkpoint {path} holds a generator only; fine-tuning starts "
                         "from the discriminator")
    source = pretrained.discriminator.encoder
    keys = [f.name for f in dataclasses.fields(checkpoint_names.EncoderSpec)]
    differ = [f"{k} {getattr(source, k)} in the checkpoint, {getattr(encoder, k)} in the config"
              for k in keys if getattr(source, k) != getattr(encoder, k)]
    if differ:
        raise ValueError(
            f"init_checkpoint {pretrained.source} does not match the configured model "
            f"(model_size, embedding_size, vocab_size, model_hparam_overrides): "
            f"{', '.join(differ)}")
    modeling.build_once(encoder)
    targets = checkpoint_names.encoder_variables(encoder, "electra")
    for name, variable in checkpoint_names.encoder_variables(source, "electra").items():
        targets[name].assign(variable)
    return f"{pretrained.source} ({pretrained.format})"
