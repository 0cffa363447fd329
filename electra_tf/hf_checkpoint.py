"""Hugging Face weights: an ELECTRA (ElectraForPreTraining, ElectraForMaskedLM, ElectraModel)
or BERT directory, config.json and model.safetensors (or pytorch_model.bin), read into the
original's TF1 names (hf_to_tf1) with its encoder's hyperparameters (hf_sizes); and ours written
for transformers' ElectraForPreTraining / ElectraForMaskedLM and ElectraTokenizer(Fast)
(export_hf)."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import numpy as np
import tensorflow as tf

from electra_tf import checkpoint_names, model_files, modeling

_HF_IGNORED = re.compile(r"(position_ids$|pooler\.)")  # buffers; BERT's pooler (ELECTRA has none)
# Activations that mean the same in a Hugging Face config.json and here.
HF_ACTIVATIONS = ("gelu", "relu", "silu", "swish", "tanh")


def _hf_encoder_pairs(num_layers: int, scope: str, prefix: str,
                      has_project: bool) -> list[tuple[str, str, bool]]:
    """(TF1 name, HF name, transpose) for an encoder; torch Linear weights are [out, in]."""
    pairs = [(f"{scope}/embeddings/{kind}_embeddings", f"{prefix}embeddings.{kind}_embeddings.weight",
              False) for kind in ("word", "position", "token_type")]
    pairs += [(f"{scope}/embeddings/LayerNorm/gamma", f"{prefix}embeddings.LayerNorm.weight", False),
              (f"{scope}/embeddings/LayerNorm/beta", f"{prefix}embeddings.LayerNorm.bias", False)]
    if has_project:
        pairs += [(f"{scope}/embeddings_project/kernel", f"{prefix}embeddings_project.weight", True),
                  (f"{scope}/embeddings_project/bias", f"{prefix}embeddings_project.bias", False)]
    for i in range(num_layers):
        tf1, hf = f"{scope}/encoder/layer_{i}", f"{prefix}encoder.layer.{i}"
        for part in ("attention/self/query", "attention/self/key", "attention/self/value",
                     "attention/output/dense", "intermediate/dense", "output/dense"):
            dotted = part.replace("/", ".")
            pairs += [(f"{tf1}/{part}/kernel", f"{hf}.{dotted}.weight", True),
                      (f"{tf1}/{part}/bias", f"{hf}.{dotted}.bias", False)]
        for part in ("attention/output/LayerNorm", "output/LayerNorm"):
            dotted = part.replace("/", ".")
            pairs += [(f"{tf1}/{part}/gamma", f"{hf}.{dotted}.weight", False),
                      (f"{tf1}/{part}/beta", f"{hf}.{dotted}.bias", False)]
    return pairs


_HF_DISCRIMINATOR_HEAD = [
    ("discriminator_predictions/dense/kernel", "discriminator_predictions.dense.weight", True),
    ("discriminator_predictions/dense/bias", "discriminator_predictions.dense.bias", False),
    ("discriminator_predictions/dense_1/kernel",
     "discriminator_predictions.dense_prediction.weight", True),
    ("discriminator_predictions/dense_1/bias", "discriminator_predictions.dense_prediction.bias",
     False)]
_HF_GENERATOR_HEAD = [
    ("generator_predictions/dense/kernel", "generator_predictions.dense.weight", True),
    ("generator_predictions/dense/bias", "generator_predictions.dense.bias", False),
    ("generator_predictions/LayerNorm/gamma", "generator_predictions.LayerNorm.weight", False),
    ("generator_predictions/LayerNorm/beta", "generator_predictions.LayerNorm.bias", False),
    ("generator_predictions/output_bias", "generator_lm_head.bias", False)]


def read_hf_state(directory: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(state dict as arrays, config.json) of a Hugging Face model directory. safetensors is
    read without torch; pytorch_model.bin needs torch."""
    with tf.io.gfile.GFile(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    safetensors_file = os.path.join(directory, "model.safetensors")
    if tf.io.gfile.exists(safetensors_file):
        from safetensors.numpy import load as load_safetensors
        with tf.io.gfile.GFile(safetensors_file, "rb") as f:
            return dict(load_safetensors(f.read())), config
    bin_file = os.path.join(directory, "pytorch_model.bin")
    if tf.io.gfile.exists(bin_file):
        try:
            import torch
        except ImportError:
            raise ValueError(f"{bin_file} is a PyTorch pickle: reading it needs torch "
                             "(pip install torch), or convert it to model.safetensors") from None
        state = torch.load(bin_file, map_location="cpu", weights_only=True)
        return {k: v.float().numpy() if v.is_floating_point() else v.numpy()
                for k, v in state.items()}, config
    raise FileNotFoundError(f"{directory} has config.json but neither model.safetensors nor "
                            "pytorch_model.bin")


def hf_to_tf1(state: dict[str, np.ndarray], config: dict[str, Any],
              source: str) -> dict[str, np.ndarray]:
    """A Hugging Face ELECTRA (ElectraForPreTraining, ElectraForMaskedLM, ElectraModel) or BERT
    (BertModel) state dict -> TF1 names. A generator's encoder goes to scope `generator` with
    its own embeddings (the hub's generators store them separately)."""
    state = {k: v for k, v in state.items() if not _HF_IGNORED.search(k)}
    is_generator = any(k.startswith("generator_") for k in state)
    prefix = next((p for p in ("electra.", "bert.", "") if any(k.startswith(p + "embeddings.")
                                                               for k in state)), None)
    if prefix is None:
        raise ValueError(f"{source}: no ELECTRA or BERT embeddings in the weights (e.g. "
                         f"{sorted(state)[:5]})")
    scope = "generator" if is_generator else "electra"
    layers = config.get("num_hidden_layers", 0)
    pairs = _hf_encoder_pairs(layers, scope, prefix,
                              f"{prefix}embeddings_project.weight" in state)
    pairs += _HF_GENERATOR_HEAD if is_generator else _HF_DISCRIMINATOR_HEAD
    out, used = {}, set()
    for tf1, hf, transpose in pairs:
        if hf in state:
            out[tf1] = state[hf].T if transpose else state[hf]
            used.add(hf)
    # The generator's output matrix is the word embeddings (tied); a stored copy must agree.
    lm_head = "generator_lm_head.weight"
    if lm_head in state:
        if not np.allclose(state[lm_head], state[f"{prefix}embeddings.word_embeddings.weight"]):
            raise ValueError(f"{source}: generator_lm_head.weight differs from the word "
                             "embeddings; ELECTRA ties them")
        used.add(lm_head)
    left = sorted(set(state) - used)
    if left:
        raise ValueError(f"{source}: {len(left)} weights map to nothing in ELECTRA: {left[:8]}")
    return out


def hf_config(model) -> dict[str, Any]:
    """transformers' ElectraConfig (as a dict) of one of our models."""
    encoder = model.encoder
    generator = isinstance(model, modeling.ElectraGenerator)
    return {
        "architectures": ["ElectraForMaskedLM" if generator else "ElectraForPreTraining"],
        "model_type": "electra", "vocab_size": encoder.vocab_size,
        "embedding_size": encoder.embedding_size, "hidden_size": encoder.hidden_size,
        "num_hidden_layers": encoder.num_hidden_layers,
        "num_attention_heads": encoder.num_attention_heads,
        "intermediate_size": encoder.intermediate_size, "hidden_act": encoder.hidden_act,
        "hidden_dropout_prob": encoder.hidden_dropout_prob,
        "attention_probs_dropout_prob": encoder.attention_probs_dropout_prob,
        "max_position_embeddings": encoder.max_position_embeddings,
        "type_vocab_size": encoder.type_vocab_size,
        "initializer_range": encoder.initializer_range,
        "layer_norm_eps": encoder.layer_norm_eps,
        "pad_token_id": 0, "position_embedding_type": "absolute", "tie_word_embeddings": True}


def hf_sizes(config: dict[str, Any], source: str) -> checkpoint_names.EncoderSpec:
    """An encoder's hyperparameters from a Hugging Face config.json (ELECTRA or BERT); fails
    on what this encoder cannot compute (another activation, relative positions)."""
    act = config.get("hidden_act", "gelu")
    if act not in HF_ACTIVATIONS:
        raise ValueError(f"{source}/config.json: hidden_act {act!r} is not supported; "
                         f"supported: {list(HF_ACTIVATIONS)}")
    positions = config.get("position_embedding_type", "absolute")
    if positions != "absolute":
        raise ValueError(f"{source}/config.json: position_embedding_type {positions!r} is not "
                         "supported (ELECTRA's are absolute)")
    hidden = config["hidden_size"]
    return checkpoint_names.EncoderSpec(
        vocab_size=config["vocab_size"], embedding_size=config.get("embedding_size", hidden),
        hidden_size=hidden, num_hidden_layers=config["num_hidden_layers"],
        num_attention_heads=config["num_attention_heads"],
        intermediate_size=config["intermediate_size"],
        max_position_embeddings=config.get("max_position_embeddings", 512),
        type_vocab_size=config.get("type_vocab_size", 2), hidden_act=act,
        layer_norm_eps=config.get("layer_norm_eps", modeling.LAYER_NORM_EPSILON))


def export_hf(model, directory: str, vocab_file: str | None = None,
              do_lower_case: bool = True) -> str:
    """Writes config.json and model.safetensors (and, when a vocab is given, the tokenizer:
    vocab.txt and tokenizer_config.json) that transformers' ElectraForPreTraining /
    ElectraForMaskedLM and ElectraTokenizer(Fast) load."""
    from safetensors.numpy import save as save_safetensors

    generator = isinstance(model, modeling.ElectraGenerator)
    scope = "generator" if generator else "electra"
    weights = {name: np.asarray(var)
               for name, var in checkpoint_names.model_variables(model, scope).items()}
    pairs = _hf_encoder_pairs(model.encoder.num_hidden_layers, scope, "electra.",
                              model.encoder.embeddings_project is not None)
    pairs += _HF_GENERATOR_HEAD if generator else _HF_DISCRIMINATOR_HEAD
    state = {hf: np.ascontiguousarray(weights[tf1].T if transpose else weights[tf1])
             for tf1, hf, transpose in pairs}
    if generator:
        state["generator_lm_head.weight"] = state["electra.embeddings.word_embeddings.weight"]
    contents = {"config.json": json.dumps(hf_config(model), indent=2).encode(),
                "model.safetensors": save_safetensors(state, metadata={"format": "pt"})}
    if vocab_file:
        contents.update(model_files.tokenizer_files(vocab_file, do_lower_case,
                                                    model.encoder.max_position_embeddings))
    model_files.write_files(directory, contents)
    return directory
