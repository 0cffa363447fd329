"""Checkpoint interop: Google's TF1 checkpoints, Hugging Face weights, our .keras files, and
exports to Hugging Face, TF1-style checkpoints, TF SavedModel and keras-hub presets.

Every format is read into one canonical form, {the original's TF1 variable name: array}
(`electra/encoder/layer_3/attention/self/query/kernel`, `generator_predictions/output_bias`,
...), which is then assigned to our Keras models by structure (see `model_variables`), so each
format needs only its name map. A Hugging Face config.json or a .keras config gives the
architecture; TF1 sizes come from the shapes, and what shapes do not show (heads, activation,
LayerNorm epsilon) from an argument or the config saved beside the checkpoint (see _tf1_sizes).
A variable the model expects but the checkpoint lacks, a shape that differs, or a checkpoint
variable that nothing takes fails with the names. Exports carry the tokenizer (vocab.txt,
tokenizer_config.json).

Each format is a `Format` (find it at a path, read its weights and its architecture, write it)
in one registry, FORMATS (tf1, hf, keras, saved_model, keras_hub), through which
load_pretrained, read_architecture and convert_checkpoint.py dispatch: a new format is one
class and one register() line (and, to be written from the command line, its name in
convert_checkpoint.EXPORT_FORMATS).

    pretrained = load_pretrained("electra_small/")  # TF1, HF, .keras: detected
    pretrained.discriminator, pretrained.generator, pretrained.vocab_file
    read_architecture("electra_small/").discriminator  # the hyperparameters, no weights

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

import collections
import dataclasses
import importlib.util
import json
import os
import re
import zipfile
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from electra_tf import config as config_lib
from electra_tf import files, modeling

# Not model weights: the original's optimizer state and step counter.
_TF1_EXTRAS = re.compile(r"(/adam_[mv]$|^global_step$|/Adam(_1)?$|^beta[12]_power$)")
_HF_IGNORED = re.compile(r"(position_ids$|pooler\.)")  # buffers; BERT's pooler (ELECTRA has none)
# Written beside our TF1 exports: the encoders' hyperparameters that shapes do not show.
ARCHITECTURE_FILE = "electra_config.json"


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


# Activations that mean the same in a Hugging Face config.json and here.
HF_ACTIVATIONS = ("gelu", "relu", "silu", "swish", "tanh")


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


def _shapes(weights: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    return {name: tuple(value.shape) for name, value in weights.items()}


_DISCRIMINATOR_HEAD = "discriminator_predictions/dense/kernel"


def build_models(weights: dict[str, np.ndarray], source: str,
                 sizes: dict[str, EncoderSpec] | None = None):
    """The discriminator (always) and the generator (when the weights hold one) of these
    weights, assigned; `sizes` by scope (electra, generator) where known, else inferred from
    the shapes. Fails naming the weights nothing took."""
    sizes = sizes or {}
    disc_sizes = sizes.get("electra") or infer_sizes(_shapes(weights), "electra")
    if disc_sizes is None:
        raise ValueError(f"{source} holds no ELECTRA discriminator (no "
                         "electra/encoder/layer_0/...); found e.g. "
                         f"{sorted(weights)[:5]}")
    discriminator = modeling.ElectraDiscriminator(disc_sizes.encoder("electra"),
                                                  name="electra_discriminator")
    if _DISCRIMINATOR_HEAD in weights:
        used = assign(discriminator, weights, source)
    else:  # a bare encoder (ElectraModel, BERT): the replaced-token head starts fresh
        used = _assign_encoder_only(discriminator, weights, source)
    generator = None
    gen_sizes = sizes.get("generator") or infer_sizes(_shapes(weights), "generator")
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


# ------------------------------------------------------------------------ TF1 checkpoints

def tf1_checkpoint_prefix(path: str) -> str | None:
    """The checkpoint prefix of a TF1 checkpoint directory (its latest) or prefix, else None."""
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest:
            return latest
        indexes = sorted(tf.io.gfile.glob(os.path.join(path, "*.index")))
        return indexes[-1][:-len(".index")] if indexes else None
    return path if tf.io.gfile.exists(path + ".index") else None


def read_tf1_checkpoint(prefix: str) -> dict[str, np.ndarray]:
    """{name: array} of a name-based (TF1 Saver) checkpoint; no TF1 graph needed."""
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def write_tf1_checkpoint(prefix: str, discriminator=None, generator=None,
                         global_step: int | None = None) -> str:
    """Writes the models' variables under the original's names, readable by the original code
    and by tf.train.load_checkpoint: the generator's embeddings under electra/ when they are
    the discriminator's (tied, as the original shares them), else under generator/ (the
    original's untied_generator_embeddings). Beside it, ARCHITECTURE_FILE records what shapes
    cannot tell (attention heads, activation, LayerNorm epsilon). Returns the prefix."""
    names: dict[str, Any] = {}
    architecture = {}
    if discriminator is not None:
        names.update(model_variables(discriminator))
        architecture["discriminator"] = dataclasses.asdict(EncoderSpec.of(discriminator.encoder))
    if generator is not None:
        tied = discriminator is not None and _same_embeddings(discriminator, generator)
        names.update(model_variables(generator, "electra" if tied else "generator"))
        architecture["generator"] = dataclasses.asdict(EncoderSpec.of(generator.encoder))
    if global_step is not None:
        names["global_step"] = tf.constant(global_step, tf.int64)
    directory = os.path.dirname(prefix) or "."
    tf.io.gfile.makedirs(directory)
    ordered = sorted(names)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=ordered, shape_and_slices=[""] * len(ordered),
                      tensors=[tf.convert_to_tensor(names[n]) for n in ordered])
    write_files(directory, {
        ARCHITECTURE_FILE: json.dumps(architecture, indent=2).encode(),
        "checkpoint": f'model_checkpoint_path: "{os.path.basename(prefix)}"\n'.encode()})
    return prefix


def _same_embeddings(discriminator, generator) -> bool:
    """Whether the generator's embedding block holds the discriminator's values (tied)."""
    ours = encoder_variables(discriminator.encoder, "electra")
    theirs = encoder_variables(generator.encoder, "generator", "electra")
    return all(tuple(ours[n].shape) == tuple(theirs[n].shape)
               and np.array_equal(np.asarray(ours[n]), np.asarray(theirs[n]))
               for n in theirs if n.startswith("electra/embeddings/"))


def _tf1_sizes(prefix: str, shapes: dict[str, tuple[int, ...]],
               num_attention_heads: int | None = None) -> dict[str, EncoderSpec]:
    """The encoders' sizes of a TF1 checkpoint by scope: shapes for the sizes; for the heads,
    activation and LayerNorm epsilon, `num_attention_heads` (the discriminator's), else the
    ARCHITECTURE_FILE or the pretrain_config.json beside it, else the original's rules (gelu,
    1e-12, hidden / 64 heads). The discriminator's heads follow hidden / 64 only by default
    (model_hparam_overrides may say otherwise): when its hidden size is not a multiple of 64,
    nothing can tell them, and this fails. The original's generator always has hidden / 64."""
    saved = _saved_architecture(os.path.dirname(prefix) or ".")
    sizes = {}
    for scope in ("electra", "generator"):
        inferred = infer_sizes(shapes, scope)
        if inferred is None:
            continue
        known = saved.get(scope, {})
        heads = (num_attention_heads if scope == "electra" else None) or \
            known.get("num_attention_heads")
        if heads is None and scope == "electra" and inferred.hidden_size % 64:
            raise ValueError(
                f"{prefix}: the number of attention heads does not show in a TF1 checkpoint, "
                f"and its hidden size {inferred.hidden_size} is not a multiple of 64 (the "
                "original's head size): put the run's pretrain_config.json (or the "
                f"{ARCHITECTURE_FILE} our exports write) beside it, or give num_attention_heads "
                "(convert_checkpoint.py --num_attention_heads, model_hparam_overrides)")
        sizes[scope] = dataclasses.replace(
            inferred, num_attention_heads=heads or inferred.num_attention_heads,
            hidden_act=known.get("hidden_act", inferred.hidden_act),
            layer_norm_eps=known.get("layer_norm_eps", inferred.layer_norm_eps))
    return sizes


def _saved_architecture(directory: str) -> dict[str, dict[str, Any]]:
    """{scope: encoder hyperparameters} from the ARCHITECTURE_FILE or the pretrain_config.json
    in `directory`, or {}."""
    exported = _read_json(os.path.join(directory, ARCHITECTURE_FILE))
    if exported is not None:
        return {scope: exported[key] for scope, key in (("electra", "discriminator"),
                                                        ("generator", "generator"))
                if key in exported}
    run = _read_json(os.path.join(directory, "pretrain_config.json"))
    if run is None:
        return {}
    config = config_lib.saved_config(run)
    return {"electra": config.bert_config(), "generator": config.generator_bert_config()}


def _read_json(path: str) -> Any:
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def write_files(directory: str, contents: dict[str, bytes]) -> list[str]:
    """Writes {name: content} into `directory`, each file whole or not at all. Returns the
    paths."""
    paths = [os.path.join(directory, name) for name in contents]
    for path, data in zip(paths, contents.values()):
        files.write_atomically(path, data)
    return paths


# ------------------------------------------------------------------------ Hugging Face

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


def hf_sizes(config: dict[str, Any], source: str) -> EncoderSpec:
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
    return EncoderSpec(
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
    weights = {name: np.asarray(var) for name, var in model_variables(model, scope).items()}
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
        contents.update(tokenizer_files(vocab_file, do_lower_case,
                                        model.encoder.max_position_embeddings))
    write_files(directory, contents)
    return directory


# ------------------------------------------------------------------------ the tokenizer

def tokenizer_files(vocab_file: str, do_lower_case: bool,
                    model_max_length: int | None = None) -> dict[str, bytes]:
    """vocab.txt and the tokenizer_config.json with which transformers' ElectraTokenizer(Fast)
    tokenizes as the model was trained (BERT's WordPiece, lower-casing or not)."""
    with tf.io.gfile.GFile(vocab_file, "rb") as f:
        vocab = f.read()
    config = {"do_lower_case": do_lower_case, "tokenizer_class": "ElectraTokenizer"}
    if model_max_length:
        config["model_max_length"] = model_max_length
    return {"vocab.txt": vocab, "tokenizer_config.json": json.dumps(config, indent=2).encode()}


def find_vocab(path: str) -> str | None:
    """The vocabulary of the model at `path`: vocab.txt beside it, else (for a run_pretraining
    output, DATA_DIR/models/NAME) its pretrain_config.json's vocab_file or DATA_DIR/vocab.txt."""
    directory = _directory(path)
    candidates = [os.path.join(directory, "vocab.txt")]
    run = _read_json(os.path.join(directory, "pretrain_config.json")) or {}
    if run.get("vocab_file"):
        candidates.append(run["vocab_file"])
    if os.path.basename(os.path.dirname(directory)) == "models":
        candidates.append(os.path.join(os.path.dirname(os.path.dirname(directory)), "vocab.txt"))
    return next((c for c in candidates if tf.io.gfile.exists(c)), None)


def find_do_lower_case(path: str) -> bool | None:
    """do_lower_case from the tokenizer_config.json beside the model at `path`, else from its
    run's pretrain_config.json; None when neither says."""
    directory = _directory(path)
    for name in ("tokenizer_config.json", "pretrain_config.json"):
        found = (_read_json(os.path.join(directory, name)) or {}).get("do_lower_case")
        if found is not None:
            return found
    return None


def _directory(path: str) -> str:
    path = path.rstrip("/")
    return path if tf.io.gfile.isdir(path) else (os.path.dirname(path) or ".")


def save_keras(model: keras.Model, path: str) -> str:
    """model.save(path) through a temporary name: never a half-written .keras file under the
    final name."""
    with files.renamed_into_place(path, suffix=".keras") as temporary:
        model.save(temporary)
    return path


# ------------------------------------------------------------------------ SavedModel

def export_saved_model(model, directory: str, vocab_file: str | None = None,
                       do_lower_case: bool = True) -> str:
    """A TF SavedModel that tf.saved_model.load runs without this package. Inputs: int32
    [batch, length] `input_ids`, `input_mask`, `segment_ids`. Signatures: `serving_default`
    gives the model's outputs (a discriminator: per-token `logits` and `sequence_output`; a
    fine-tuned model: each task's outputs), `sequence_embeddings` the encoder's output. With a
    vocab, the tokenizer (vocab.txt, tokenizer_config.json) goes into assets.extra/, the
    SavedModel's place for files the graph does not use."""
    spec = {name: tf.TensorSpec([None, None], tf.int32, name=name)
            for name in ("input_ids", "input_mask", "segment_ids")}

    def outputs(inputs):
        out = model(inputs, training=False)
        flat = {}
        for key, value in out.items():
            if isinstance(value, dict):
                flat.update({f"{key}_{k}": v for k, v in value.items()})
            else:
                flat[key] = value
        return flat

    def embeddings(inputs):
        return {"sequence_output": model.encoder(inputs["input_ids"], inputs["input_mask"],
                                                 inputs["segment_ids"], training=False)}

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serving_default", outputs, input_signature=[spec])
    archive.add_endpoint("sequence_embeddings", embeddings, input_signature=[spec])
    archive.write_out(directory, verbose=False)
    if vocab_file:
        write_files(os.path.join(directory, "assets.extra"),
                    tokenizer_files(vocab_file, do_lower_case,
                                    model.encoder.max_position_embeddings))
    return directory


# ------------------------------------------------------------------------ keras-hub

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
    ours = {name: np.asarray(var) for name, var in encoder_variables(encoder, "electra").items()}
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


# ------------------------------------------------------------------------ the formats

class NoPretrainedModel(FileNotFoundError):
    """Nothing at the path is a pretrained model in any format."""


@dataclasses.dataclass
class Pretrained:
    """What load_pretrained found: the models and the tokenizer settings next to them."""
    discriminator: modeling.ElectraDiscriminator | None
    generator: modeling.ElectraGenerator | None
    vocab_file: str | None
    do_lower_case: bool | None
    source: str
    format: str  # the kind of the Format that read it: "tf1", "huggingface", "keras", ...
    global_step: int | None = None
    has_discriminator_head: bool = True  # False: a bare encoder, the head freshly initialised


@dataclasses.dataclass
class Architecture:
    """What read_architecture found: the encoders' hyperparameters, without the weights."""
    discriminator: EncoderSpec | None
    generator: EncoderSpec | None
    source: str
    format: str


@dataclasses.dataclass
class Models:
    """What a Format reads from a pretrained model's files (load_pretrained adds the tokenizer
    settings beside them)."""
    discriminator: modeling.ElectraDiscriminator | None
    generator: modeling.ElectraGenerator | None
    global_step: int | None = None
    has_discriminator_head: bool = True


class Format:
    """A checkpoint format. One that is read overrides `locate`, `load` and `architecture`;
    one that is written overrides `export` (and the checks before it). Registered in FORMATS
    (`register`), it is found by load_pretrained and read_architecture and written by
    convert_checkpoint.py --to NAME.

    name: the registry key and --to's value. kind: what Pretrained.format and
    Architecture.format report (the name unless given). expected: how the "no pretrained
    ELECTRA found" error names it. tried_last: located after the others, for a format whose
    locate fails on a directory that another format's files may share."""

    name: str
    kind: str | None = None
    expected: str = ""
    tried_last: bool = False

    def locate(self, path: str) -> str | None:
        """Where this format's model is at `path` (a file, a directory, a checkpoint prefix),
        or None."""
        return None

    def load(self, where: str, num_attention_heads: int | None) -> Models:
        """The models at `where` (as locate found it), their weights assigned."""
        raise NotImplementedError(f"{self.name} models are not read")

    def architecture(self, where: str, num_attention_heads: int | None) -> Architecture:
        """The encoders' hyperparameters at `where`, without loading the weights."""
        raise NotImplementedError(f"{self.name} models are not read")

    def check_installed(self) -> None:
        """Fails when a package this format writes with is missing (before the input is
        read)."""

    def check_export(self, pretrained: Pretrained, source: str) -> None:
        """Fails on a model this format cannot write (before anything is written)."""

    def export(self, pretrained: Pretrained, output: str, vocab_file: str, do_lower_case: bool,
               source: str) -> list[str]:
        """Writes the model and its tokenizer into the directory `output`; returns the paths
        written."""
        raise NotImplementedError(f"{self.name} models are not written")

    @property
    def reads(self) -> bool:
        return type(self).locate is not Format.locate

    @property
    def writes(self) -> bool:
        return type(self).export is not Format.export

    @property
    def reported_kind(self) -> str:
        return self.kind or self.name


# name -> Format, in the order the formats are named to the user; register() adds one.
FORMATS: dict[str, Format] = {}


def register(format_: Format) -> Format:
    """Adds a format to FORMATS (writable ones still need their name in
    convert_checkpoint.EXPORT_FORMATS, the --to flag parsed before TensorFlow loads)."""
    FORMATS[format_.name] = format_
    return format_


def _models(pretrained: Pretrained) -> dict[str, keras.Model]:
    """{"discriminator": ..., "generator": ...}, the ones present."""
    models = {"discriminator": pretrained.discriminator, "generator": pretrained.generator}
    return {name: model for name, model in models.items() if model is not None}


def _tokenizer(pretrained: Pretrained, vocab_file: str, do_lower_case: bool) -> dict[str, bytes]:
    max_length = next(iter(_models(pretrained).values())).encoder.max_position_embeddings
    return tokenizer_files(vocab_file, do_lower_case, max_length)


class Tf1Checkpoint(Format):
    """The original's name-based checkpoints (Google's releases, its run_pretraining.py) and
    ours (write_tf1_checkpoint). Tried last: a run_pretraining directory holds TF2 object
    checkpoints beside its discriminator.keras, and this format fails on those."""
    name, expected, tried_last = "tf1", "a TF1 checkpoint", True

    def locate(self, path: str) -> str | None:
        prefix = tf1_checkpoint_prefix(path)
        if prefix is None:
            return None
        if "_CHECKPOINTABLE_OBJECT_GRAPH" in dict(tf.train.list_variables(prefix)):
            if tf.io.gfile.exists(os.path.join(_directory(path), "pretrain_config.json")):
                raise FileNotFoundError(
                    f"{path} is a run_pretraining directory without its exported models "
                    "(discriminator.keras is written when training ends): rerun the same "
                    "run_pretraining.py command to finish and export it")
            raise FileNotFoundError(f"{prefix} is a TF2 object checkpoint, not ELECTRA weights "
                                    "in the original's names")
        return prefix

    def load(self, where: str, num_attention_heads: int | None) -> Models:
        weights = read_tf1_checkpoint(where)
        discriminator, generator = build_models(
            weights, where, _tf1_sizes(where, _shapes(weights), num_attention_heads))
        step = int(weights["global_step"]) if "global_step" in weights else None
        return Models(discriminator, generator, step, _DISCRIMINATOR_HEAD in weights)

    def architecture(self, where: str, num_attention_heads: int | None) -> Architecture:
        sizes = _tf1_sizes(where, {name: tuple(shape) for name, shape
                                   in tf.train.list_variables(where)}, num_attention_heads)
        return Architecture(sizes.get("electra"), sizes.get("generator"), where,
                            self.reported_kind)

    def export(self, pretrained: Pretrained, output: str, vocab_file: str, do_lower_case: bool,
               source: str) -> list[str]:
        tokenizer = _tokenizer(pretrained, vocab_file, do_lower_case)
        step = pretrained.global_step or 0
        written = [write_tf1_checkpoint(os.path.join(output, f"model.ckpt-{step}"),
                                        pretrained.discriminator, pretrained.generator, step)]
        return written + write_files(output, tokenizer)


class HuggingFace(Format):
    """A Hugging Face directory: config.json and model.safetensors (or pytorch_model.bin), a
    discriminator or a generator; written as DIR/discriminator/ and DIR/generator/."""
    name, kind, expected = "hf", "huggingface", "a Hugging Face directory with config.json"

    def locate(self, path: str) -> str | None:
        if tf.io.gfile.isdir(path) and tf.io.gfile.exists(os.path.join(path, "config.json")):
            return path
        return None

    def load(self, where: str, num_attention_heads: int | None) -> Models:
        state, config = read_hf_state(where)
        weights = hf_to_tf1(state, config, where)
        sizes = hf_sizes(config, where)
        if "generator_predictions/dense/kernel" in weights:
            generator = modeling.ElectraGenerator(sizes.encoder("generator"),
                                                  name="electra_generator")
            assign(generator, weights, where, embeddings_scope="generator")
            return Models(None, generator)
        discriminator, generator = build_models(weights, where, {"electra": sizes})
        return Models(discriminator, generator,
                      has_discriminator_head=_DISCRIMINATOR_HEAD in weights)

    def architecture(self, where: str, num_attention_heads: int | None) -> Architecture:
        config = _read_json(os.path.join(where, "config.json"))
        sizes = hf_sizes(config, where)
        if any(a.endswith("ForMaskedLM") for a in config.get("architectures") or []):
            return Architecture(None, sizes, where, self.reported_kind)
        return Architecture(sizes, None, where, self.reported_kind)

    def export(self, pretrained: Pretrained, output: str, vocab_file: str, do_lower_case: bool,
               source: str) -> list[str]:
        return [export_hf(model, os.path.join(output, name), vocab_file, do_lower_case)
                for name, model in _models(pretrained).items()]


class KerasFiles(Format):
    """Ours: discriminator.keras (a file, or a directory holding it, with generator.keras when
    present), as run_pretraining.py exports them."""
    name, expected = "keras", "discriminator.keras"

    def locate(self, path: str) -> str | None:
        keras_file = os.path.join(path, "discriminator.keras") if tf.io.gfile.isdir(path) \
            else path
        if keras_file.endswith(".keras") and tf.io.gfile.exists(keras_file):
            return keras_file
        return None

    def load(self, where: str, num_attention_heads: int | None) -> Models:
        generator_file = os.path.join(os.path.dirname(where), "generator.keras")
        generator = _load_keras(generator_file) if tf.io.gfile.exists(generator_file) else None
        return Models(_load_keras(where), generator)

    def architecture(self, where: str, num_attention_heads: int | None) -> Architecture:
        generator_file = os.path.join(os.path.dirname(where), "generator.keras")
        return Architecture(_keras_sizes(where), _keras_sizes(generator_file)
                            if tf.io.gfile.exists(generator_file) else None, where,
                            self.reported_kind)

    def export(self, pretrained: Pretrained, output: str, vocab_file: str, do_lower_case: bool,
               source: str) -> list[str]:
        tokenizer = _tokenizer(pretrained, vocab_file, do_lower_case)
        written = [save_keras(model, os.path.join(output, f"{name}.keras"))
                   for name, model in _models(pretrained).items()]
        return written + write_files(output, tokenizer)


class SavedModel(Format):
    """Written only: the discriminator as DIR/discriminator/, a TF SavedModel with serving
    signatures (export_saved_model)."""
    name = "saved_model"

    def export(self, pretrained: Pretrained, output: str, vocab_file: str, do_lower_case: bool,
               source: str) -> list[str]:
        if pretrained.discriminator is None:
            raise ValueError(f"{source} holds no discriminator to serve")
        return [export_saved_model(pretrained.discriminator,
                                   os.path.join(output, "discriminator"), vocab_file,
                                   do_lower_case)]


class KerasHubPreset(Format):
    """Written only: a keras-hub preset of the discriminator's encoder (export_keras_hub)."""
    name = "keras_hub"

    def check_installed(self) -> None:
        if importlib.util.find_spec("keras_hub") is None:
            raise ValueError(f"--to keras_hub needs keras-hub: {KERAS_HUB_INSTALL}")

    def check_export(self, pretrained: Pretrained, source: str) -> None:
        if pretrained.discriminator is None:
            raise ValueError(f"{source} holds no discriminator, the model keras-hub's "
                             "ElectraBackbone takes; export a generator with --to hf or keras")
        keras_hub_config(pretrained.discriminator.encoder, source)

    def export(self, pretrained: Pretrained, output: str, vocab_file: str, do_lower_case: bool,
               source: str) -> list[str]:
        return [export_keras_hub(pretrained.discriminator, output, vocab_file, do_lower_case,
                                 source)]


register(Tf1Checkpoint())
register(HuggingFace())
register(KerasFiles())
register(SavedModel())
register(KerasHubPreset())


def _either(phrases: list[str]) -> str:
    """The phrases as "a, b, or c"."""
    return phrases[0] if len(phrases) == 1 else f"{', '.join(phrases[:-1])}, or {phrases[-1]}"


def _locate(path: str) -> tuple[Format, str]:
    """(the format, where its model is) of the first registered format found at `path` (those
    tried_last after the others); fails naming what it expected."""
    readable = [f for f in FORMATS.values() if f.reads]
    for format_ in sorted(readable, key=lambda f: f.tried_last):
        where = format_.locate(path)
        if where is not None:
            return format_, where
    raise NoPretrainedModel(f"{path}: no pretrained ELECTRA found (expected "
                            f"{_either([f.expected for f in readable])})")


def load_pretrained(path: str, num_attention_heads: int | None = None) -> Pretrained:
    """Loads a model in any format of FORMATS: a TF1 checkpoint (directory or prefix; Google's
    releases and the original run_pretraining.py's output), a Hugging Face directory
    (config.json + model.safetensors or pytorch_model.bin; discriminator or generator), our
    discriminator.keras (or a directory holding it, with generator.keras when present).
    `num_attention_heads`: the discriminator's, for a TF1 checkpoint that does not say (see
    _tf1_sizes)."""
    format_, where = _locate(path)
    models = format_.load(where, num_attention_heads)
    return Pretrained(models.discriminator, models.generator, find_vocab(where),
                      find_do_lower_case(where), where, format_.reported_kind,
                      models.global_step, models.has_discriminator_head)


def read_architecture(path: str, num_attention_heads: int | None = None) -> Architecture:
    """The hyperparameters of the encoders at `path` (any format load_pretrained reads), from
    config.json, the .keras files' configs or the TF1 shapes (see _tf1_sizes), without
    loading the weights."""
    format_, where = _locate(path)
    return format_.architecture(where, num_attention_heads)


def init_architecture(config, user: dict[str, Any], path: str) -> Architecture | None:
    """The architecture of init_checkpoint `path` for a config (pretraining's or fine-tuning's;
    config.pretrained_architecture calls it): None when nothing is at a default path the user
    did not give; what cannot be read is a ConfigError naming the hparam."""
    if config.debug or user.get("debug"):
        raise config_lib.ConfigError("hparam 'debug' builds the original's tiny model, which "
                                     f"cannot start from init_checkpoint {path}; drop one of them")
    heads = user.get("model_hparam_overrides", {}).get("num_attention_heads")
    try:
        architecture = read_architecture(path, heads)
    except NoPretrainedModel:
        if "init_checkpoint" in user:
            raise
        return None
    except ValueError as e:
        raise config_lib.ConfigError(f"hparam 'init_checkpoint': {e}") from None
    if architecture.discriminator is None:
        raise config_lib.ConfigError(f"hparam 'init_checkpoint': {architecture.source} holds a "
                                     "generator only; point it at the discriminator")
    return architecture


config_lib.read_pretrained_with(init_architecture)


def _keras_config(keras_file: str) -> dict:
    """A .keras archive's config.json; a ValueError naming the file when it is not a readable
    archive (truncated, overwritten), which Keras reports as "File not found"."""
    try:
        with tf.io.gfile.GFile(keras_file, "rb") as f, zipfile.ZipFile(f) as archive:
            return json.loads(archive.read("config.json"))
    except (zipfile.BadZipFile, EOFError, KeyError, json.JSONDecodeError,
            tf.errors.OpError) as e:
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{keras_file} is damaged, not a readable .keras archive ({why}): "
                         "export it again (rerunning the run_pretraining.py command that wrote "
                         "it rewrites it) or use another model") from None


def _load_keras(keras_file: str) -> keras.Model:
    _keras_config(keras_file)  # fails naming a damaged file
    return keras.saving.load_model(keras_file, compile=False)


def _keras_sizes(keras_file: str) -> EncoderSpec:
    """The encoder's hyperparameters from a .keras archive's config.json."""
    encoder = _keras_config(keras_file)["config"]["encoder"]["config"]
    return EncoderSpec(**{f.name: encoder[f.name] for f in dataclasses.fields(EncoderSpec)
                           if f.name in encoder})
