"""The canonical form every checkpoint format is read into and written from: {the original's TF1
variable name: array} (`electra/encoder/layer_3/attention/self/query/kernel`,
`generator_predictions/output_bias`, ...), assigned to our Keras models by structure (see
`model_variables`), so that each format needs only its name map. The encoders' hyperparameters
(EncoderSpec) come from a format's config or the shapes (infer_sizes), and build_models makes
the models of weights in these names. A variable the model expects but the weights lack, a
shape that differs, or a weight that nothing takes fails with the names.

>>> sizes = EncoderSpec(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2,
...                      num_attention_heads=2, intermediate_size=32)
>>> names = model_variables(modeling.ElectraDiscriminator(sizes.encoder("electra")))
>>> sorted(names)[:3]
['discriminator_predictions/dense/bias', 'discriminator_predictions/dense/kernel', \
'discriminator_predictions/dense_1/bias']
>>> "electra/encoder/layer_0/attention/self/query/kernel" in names
True
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from electra_tf import modeling

# Not model weights: the original's optimizer state (AdamWeightDecayOptimizer's slots; a stock
# tf.compat.v1 Adam's) and its step counter.
OPTIMIZER_STATE = re.compile(r"(/adam_[mv]$|/Adam(_1)?$|^beta[12]_power$)")
_TF1_EXTRAS = re.compile(rf"({OPTIMIZER_STATE.pattern}|^global_step$)")


# ------------------------------------------------------------------------ the canonical names

def encoder_variables(encoder: modeling.Encoder, scope: str,
                       embeddings_scope: str | None = None) -> dict[str, Any]:
    """{TF1 name: variable} of an encoder, as the original's BertModel names them."""
    emb, es = encoder.embeddings, embeddings_scope or scope
    names = {f"{es}/embeddings/word_embeddings": emb.word_embeddings,
             f"{es}/embeddings/position_embeddings": emb.position_embeddings,
             f"{es}/embeddings/token_type_embeddings": emb.token_type_embeddings,
             f"{es}/embeddings/LayerNorm/gamma": emb.layer_norm.gamma,
             f"{es}/embeddings/LayerNorm/beta": emb.layer_norm.beta}
    if encoder.embeddings_project is not None:
        names[f"{scope}/embeddings_project/kernel"] = encoder.embeddings_project.kernel
        names[f"{scope}/embeddings_project/bias"] = encoder.embeddings_project.bias
    for i, layer in enumerate(encoder.transformer_layers):
        prefix = f"{scope}/encoder/layer_{i}"
        for part, dense in (("attention/self/query", layer.query),
                            ("attention/self/key", layer.key),
                            ("attention/self/value", layer.value),
                            ("attention/output/dense", layer.attention_output),
                            ("intermediate/dense", layer.intermediate),
                            ("output/dense", layer.output_dense)):
            names[f"{prefix}/{part}/kernel"] = dense.kernel
            names[f"{prefix}/{part}/bias"] = dense.bias
        for part, norm in (("attention/output/LayerNorm", layer.attention_layer_norm),
                           ("output/LayerNorm", layer.output_layer_norm)):
            names[f"{prefix}/{part}/gamma"] = norm.gamma
            names[f"{prefix}/{part}/beta"] = norm.beta
    return names


def model_variables(model: modeling.ElectraDiscriminator | modeling.ElectraGenerator,
                    embeddings_scope: str = "electra") -> dict[str, Any]:
    """{the original's TF1 name: variable} of a discriminator (scope `electra`) or generator
    (scope `generator`; its embeddings under `embeddings_scope`, `electra` as the original
    shares them)."""
    modeling.build_once(model)
    if isinstance(model, modeling.ElectraGenerator):
        names = encoder_variables(model.encoder, "generator", embeddings_scope)
        head = model.head
        names.update({"generator_predictions/dense/kernel": head.dense.kernel,
                      "generator_predictions/dense/bias": head.dense.bias,
                      "generator_predictions/LayerNorm/gamma": head.layer_norm.gamma,
                      "generator_predictions/LayerNorm/beta": head.layer_norm.beta,
                      "generator_predictions/output_bias": head.output_bias})
        return names
    names = encoder_variables(model.encoder, "electra")
    head = model.head
    names.update({"discriminator_predictions/dense/kernel": head.dense.kernel,
                  "discriminator_predictions/dense/bias": head.dense.bias,
                  "discriminator_predictions/dense_1/kernel": head.dense_1.kernel,
                  "discriminator_predictions/dense_1/bias": head.dense_1.bias})
    return names


def assign(model, weights: dict[str, np.ndarray], source: str,
           embeddings_scope: str = "electra") -> set[str]:
    """Sets the model's variables from {TF1 name: array}; returns the names used. Fails naming
    every variable missing from `source` and every shape that differs."""
    targets = model_variables(model, embeddings_scope)
    missing = sorted(set(targets) - set(weights))
    wrong = sorted(f"{name} {tuple(weights[name].shape)} vs {tuple(var.shape)}"
                   for name, var in targets.items()
                   if name in weights and tuple(weights[name].shape) != tuple(var.shape))
    if missing or wrong:
        raise ValueError(f"{source} does not fit the model: missing {missing[:8]}"
                         f"{' ...' if len(missing) > 8 else ''}; shapes (checkpoint vs model) "
                         f"{wrong[:8]}")
    for name, var in targets.items():
        var.assign(weights[name].astype(var.dtype))
    return set(targets)


def copy_weights(source, target, skip_embeddings: bool = False) -> list[str]:
    """Copies a discriminator or generator into one of ours by the original's names (e.g. a
    loaded release into pretraining's models). `skip_embeddings` leaves the target's
    word/position/type embeddings and their LayerNorm alone (a generator whose embeddings are
    the discriminator's). Returns the names copied; fails naming every shape that differs."""
    theirs, ours = model_variables(source), model_variables(target)
    names = [n for n in ours if not (skip_embeddings and "/embeddings/" in n)]
    wrong = [f"{n} {tuple(theirs[n].shape)} vs {tuple(ours[n].shape)}" for n in names
             if n in theirs and tuple(theirs[n].shape) != tuple(ours[n].shape)]
    if wrong or set(names) - set(theirs):
        raise ValueError(f"the checkpoint's model does not fit: shapes (checkpoint vs config) "
                         f"{wrong[:6]}; missing {sorted(set(names) - set(theirs))[:6]}")
    for name in names:
        ours[name].assign(theirs[name])
    return names


# ------------------------------------------------------------------- encoder specs and models

@dataclasses.dataclass
class EncoderSpec:
    """Everything an Encoder is built from: its sizes, its activation and its LayerNorm
    epsilon (modeling.Encoder's arguments), as a checkpoint's architecture records them."""
    vocab_size: int
    embedding_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_act: str = "gelu"
    layer_norm_eps: float = modeling.LAYER_NORM_EPSILON

    def encoder(self, name: str) -> modeling.Encoder:
        return modeling.Encoder(**dataclasses.asdict(self), name=name)

    @classmethod
    def of(cls, encoder: modeling.Encoder) -> EncoderSpec:
        return cls(**{f.name: getattr(encoder, f.name) for f in dataclasses.fields(cls)})


def infer_sizes(shapes: dict[str, tuple[int, ...]], scope: str,
                num_attention_heads: int | None = None) -> EncoderSpec | None:
    """An encoder's sizes from its TF1 names' shapes (None if the scope is absent); its
    embeddings are its own when the scope has them, else the discriminator's (electra/).
    Heads do not show in shapes: hidden / 64 as the original's configs, unless given."""
    query = f"{scope}/encoder/layer_0/attention/self/query/kernel"
    if query not in shapes:
        return None
    layers = 0
    while f"{scope}/encoder/layer_{layers}/attention/self/query/kernel" in shapes:
        layers += 1
    es = scope if f"{scope}/embeddings/word_embeddings" in shapes else "electra"
    vocab, embedding = shapes[f"{es}/embeddings/word_embeddings"]
    hidden = shapes[query][0]
    return EncoderSpec(
        vocab_size=vocab, embedding_size=embedding, hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=num_attention_heads or max(1, hidden // 64),
        intermediate_size=shapes[f"{scope}/encoder/layer_0/intermediate/dense/kernel"][1],
        max_position_embeddings=shapes[f"{es}/embeddings/position_embeddings"][0],
        type_vocab_size=shapes[f"{es}/embeddings/token_type_embeddings"][0])


def shapes_of(weights: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    """{name: shape} of weights in the canonical names."""
    return {name: tuple(value.shape) for name, value in weights.items()}


# Weights with it hold the replaced-token head; without it, a bare encoder (ElectraModel, BERT).
DISCRIMINATOR_HEAD = "discriminator_predictions/dense/kernel"


def build_models(weights: dict[str, np.ndarray], source: str,
                 sizes: dict[str, EncoderSpec] | None = None):
    """The discriminator (always) and the generator (when the weights hold one) of these
    weights, assigned; `sizes` by scope (electra, generator) where known, else inferred from
    the shapes. Fails naming the weights nothing took."""
    sizes = sizes or {}
    disc_sizes = sizes.get("electra") or infer_sizes(shapes_of(weights), "electra")
    if disc_sizes is None:
        raise ValueError(f"{source} holds no ELECTRA discriminator (no "
                         "electra/encoder/layer_0/...); found e.g. "
                         f"{sorted(weights)[:5]}")
    discriminator = modeling.ElectraDiscriminator(disc_sizes.encoder("electra"),
                                                  name="electra_discriminator")
    if DISCRIMINATOR_HEAD in weights:
        used = assign(discriminator, weights, source)
    else:  # a bare encoder (ElectraModel, BERT): the replaced-token head starts fresh
        used = _assign_encoder_only(discriminator, weights, source)
    generator = None
    gen_sizes = sizes.get("generator") or infer_sizes(shapes_of(weights), "generator")
    if gen_sizes is not None:
        generator = modeling.ElectraGenerator(gen_sizes.encoder("generator"),
                                              name="electra_generator")
        es = "generator" if "generator/embeddings/word_embeddings" in weights else "electra"
        used |= assign(generator, weights, source, embeddings_scope=es)
    left = sorted(n for n in set(weights) - used if not _TF1_EXTRAS.search(n))
    if left:
        raise ValueError(f"{source}: {len(left)} variables map to nothing in the ELECTRA "
                         f"models: {left[:8]}")
    return discriminator, generator


def _assign_encoder_only(discriminator, weights, source) -> set[str]:
    """A checkpoint without the replaced-token head (e.g. a bare ElectraModel or BERT): the
    encoder is loaded, the head keeps its fresh initialisation."""
    modeling.build_once(discriminator)
    names = encoder_variables(discriminator.encoder, "electra")
    subset = {n: weights[n] for n in names if n in weights}
    missing = sorted(set(names) - set(subset))
    if missing:
        raise ValueError(f"{source} does not fit the encoder: missing {missing[:8]}")
    for name, var in names.items():
        if tuple(var.shape) != subset[name].shape:
            raise ValueError(f"{source}: {name} has shape {subset[name].shape}, the model "
                             f"{tuple(var.shape)}")
        var.assign(subset[name])
    return set(names)
