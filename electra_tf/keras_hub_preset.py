"""keras-hub presets, written only: the discriminator's encoder as keras-hub's ElectraBackbone and
the WordPiece tokenizer as its ElectraTokenizer, which .from_preset(directory) loads offline.
keras_hub_config and keras_hub_weights are the name map; an encoder that ElectraBackbone cannot
compute fails before anything is written. keras-hub is an extra (KERAS_HUB_INSTALL)."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from electra_tf import checkpoint_names, files, modeling

KERAS_HUB_INSTALL = 'pip install -c constraints.txt -e ".[keras-hub]"'


def keras_hub_config(encoder: modeling.Encoder, source: str) -> dict[str, Any]:
    """The arguments of keras_hub.models.ElectraBackbone for our encoder. That class fixes the
    LayerNorm epsilon (1e-12), the activation (GELU, in its tanh approximation: see
    docs/checkpoints.md) and one dropout rate for all dropouts; an encoder it cannot compute
    fails naming `source`."""
    problems = []
    if encoder.hidden_act != "gelu":
        problems.append(f"hidden_act {encoder.hidden_act!r} (keras-hub's is GELU)")
    if encoder.layer_norm_eps != modeling.LAYER_NORM_EPSILON:
        problems.append(f"layer_norm_eps {encoder.layer_norm_eps} (keras-hub's is "
                        f"{modeling.LAYER_NORM_EPSILON})")
    if encoder.causal is not None:
        problems.append(f"causal attention {encoder.causal!r} (keras-hub's is bidirectional)")
    if problems:
        raise ValueError(f"{source}: keras-hub's ElectraBackbone cannot compute this encoder: "
                         f"{'; '.join(problems)}")
    return {"vocab_size": encoder.vocab_size, "num_layers": encoder.num_hidden_layers,
            "num_heads": encoder.num_attention_heads, "hidden_dim": encoder.hidden_size,
            "embedding_dim": encoder.embedding_size,
            "intermediate_dim": encoder.intermediate_size,
            "dropout": encoder.hidden_dropout_prob,
            "max_sequence_length": encoder.max_position_embeddings,
            "num_segments": encoder.type_vocab_size}


def keras_hub_weights(encoder: modeling.Encoder) -> dict[str, np.ndarray]:
    """{ElectraBackbone weight path: value} of our encoder. Keras' attention keeps its kernels
    per head: query/key/value [hidden, heads, head_size] (biases [heads, head_size]), the
    output [heads, head_size, hidden], the same numbers as ours reshaped. The pooler
    (`pooled_dense`, which ELECTRA lacks) is the identity with a zero bias, so that
    pooled_output = tanh(sequence_output[:, 0]). Every weight of ours is used exactly once."""
    ours = {name: np.asarray(var)
            for name, var in checkpoint_names.encoder_variables(encoder, "electra").items()}
    hidden, heads = encoder.hidden_size, encoder.num_attention_heads
    head_size = hidden // heads
    # (our TF1 name, keras-hub path, keras-hub shape when it is not ours)
    pairs = [(f"electra/embeddings/{ours_name}", f"{hub_name}/embeddings", None)
             for ours_name, hub_name in (("word_embeddings", "token_embedding"),
                                         ("position_embeddings", "position_embedding"),
                                         ("token_type_embeddings", "segment_embedding"))]
    pairs += [(f"electra/embeddings/LayerNorm/{w}", f"embeddings_layer_norm/{w}", None)
              for w in ("gamma", "beta")]
    if encoder.embeddings_project is not None:
        pairs += [(f"electra/embeddings_project/{w}", f"embeddings_projection/{w}", None)
                  for w in ("kernel", "bias")]
    for i in range(encoder.num_hidden_layers):
        tf1, hub = f"electra/encoder/layer_{i}", f"transformer_layer_{i}"
        for part in ("query", "key", "value"):
            pairs += [(f"{tf1}/attention/self/{part}/kernel",
                       f"{hub}/self_attention_layer/{part}/kernel", (hidden, heads, head_size)),
                      (f"{tf1}/attention/self/{part}/bias",
                       f"{hub}/self_attention_layer/{part}/bias", (heads, head_size))]
        pairs += [(f"{tf1}/attention/output/dense/kernel",
                   f"{hub}/self_attention_layer/attention_output/kernel",
                   (heads, head_size, hidden)),
                  (f"{tf1}/attention/output/dense/bias",
                   f"{hub}/self_attention_layer/attention_output/bias", None)]
        for tf1_part, hub_part, kind in (
                ("attention/output/LayerNorm", "self_attention_layer_norm", ("gamma", "beta")),
                ("intermediate/dense", "feedforward_intermediate_dense", ("kernel", "bias")),
                ("output/dense", "feedforward_output_dense", ("kernel", "bias")),
                ("output/LayerNorm", "feedforward_layer_norm", ("gamma", "beta"))):
            pairs += [(f"{tf1}/{tf1_part}/{w}", f"{hub}/{hub_part}/{w}", None) for w in kind]
    uses = collections.Counter(name for name, _, _ in pairs)
    twice = sorted(name for name, count in uses.items() if count > 1)
    unused = sorted(set(ours) - set(uses))
    if twice or unused or len({hub for _, hub, _ in pairs}) != len(pairs):
        raise ValueError(f"the keras-hub name map does not take every encoder weight once: "
                         f"twice {twice[:6]}, unused {unused[:6]}")
    weights = {hub: ours[name] if shape is None else ours[name].reshape(shape)
               for name, hub, shape in pairs}
    weights["pooled_dense/kernel"] = np.eye(hidden, dtype=np.float32)
    weights["pooled_dense/bias"] = np.zeros(hidden, np.float32)
    return weights


def export_keras_hub(model: modeling.ElectraDiscriminator, directory: str, vocab_file: str,
                     do_lower_case: bool = True, source: str = "the model") -> str:
    """Writes a keras-hub preset directory (config.json, model.weights.h5, metadata.json,
    tokenizer.json, assets/tokenizer/vocabulary.txt) that keras_hub.models.ElectraBackbone
    and ElectraTokenizer .from_preset(directory) load offline: the discriminator's encoder
    (its replaced-token head has no place in the backbone) and the WordPiece tokenizer
    (lower-casing and accent stripping as do_lower_case). Written whole under a temporary
    name, then renamed into place."""
    try:
        import keras_hub
    except ImportError:
        raise ValueError(f"--to keras_hub needs keras-hub: {KERAS_HUB_INSTALL}") from None
    from electra_tf import tokenization

    backbone = keras_hub.models.ElectraBackbone(**keras_hub_config(model.encoder, source),
                                                dtype="float32")
    weights = keras_hub_weights(model.encoder)
    targets = {var.path: var for var in backbone.weights}
    missing = sorted(set(targets) - set(weights))
    unused = sorted(set(weights) - set(targets))
    wrong = sorted(f"{path} {weights[path].shape} vs {tuple(var.shape)}"
                   for path, var in targets.items()
                   if path in weights and weights[path].shape != tuple(var.shape))
    if missing or unused or wrong:
        raise ValueError(f"{source} does not fit keras-hub {keras_hub.__version__}'s "
                         f"ElectraBackbone: missing {missing[:6]}; unused {unused[:6]}; shapes "
                         f"(ours vs keras-hub) {wrong[:6]}")
    for path, var in targets.items():
        var.assign(weights[path])
    tokens = tokenization.read_vocab(vocab_file)
    tokenization.check_vocab(tokens, vocab_file)
    # BERT's tokenizer strips accents exactly when it lower-cases.
    tokenizer = keras_hub.models.ElectraTokenizer(vocabulary=tokens, lowercase=do_lower_case,
                                                  strip_accents=do_lower_case)
    with files.renamed_into_place(directory) as temporary:
        backbone.save_to_preset(temporary)
        tokenizer.save_to_preset(temporary)
    return directory
