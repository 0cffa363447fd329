"""Checkpoint interop: Google's TF1 checkpoints, Hugging Face weights, our .keras files, and
exports to Hugging Face, TF1-style checkpoints and TF SavedModel.

Every format is read into one canonical form, {the original's TF1 variable name: array}
(`electra/encoder/layer_3/attention/self/query/kernel`, `generator_predictions/output_bias`,
...), which is then assigned to our Keras models by structure (see `model_variables`), so each
format needs only its name map. Sizes are inferred from the shapes (heads: hidden / 64, as the
original's configs, unless a Hugging Face config.json says otherwise). A variable the model
expects but the checkpoint lacks, a shape that differs, or a checkpoint variable that nothing
takes fails with the names.

    pretrained = load_pretrained("electra_small/")  # TF1, HF, .keras: detected
    pretrained.discriminator, pretrained.generator, pretrained.vocab_file

>>> sizes = EncoderSizes(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2,
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
import json
import os
import re
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from electra_tf import modeling

# Not model weights: the original's optimizer state and step counter.
_TF1_EXTRAS = re.compile(r"(/adam_[mv]$|^global_step$|/Adam(_1)?$|^beta[12]_power$)")
_HF_IGNORED = re.compile(r"(position_ids$|pooler\.)")  # buffers; BERT's pooler (ELECTRA has none)


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


# ------------------------------------------------------------------------ sizes and models

@dataclasses.dataclass
class EncoderSizes:
    vocab_size: int
    embedding_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int = 512
    type_vocab_size: int = 2

    def encoder(self, name: str) -> modeling.Encoder:
        return modeling.Encoder(**dataclasses.asdict(self), name=name)


def infer_sizes(weights: dict[str, np.ndarray], scope: str, embeddings_scope: str = "electra",
                num_attention_heads: int | None = None) -> EncoderSizes | None:
    """An encoder's sizes from its TF1-named shapes (None if the scope is absent). Heads cannot
    be read off shapes: hidden / 64 as the original's configs, unless given."""
    query = f"{scope}/encoder/layer_0/attention/self/query/kernel"
    if query not in weights:
        return None
    layers = 0
    while f"{scope}/encoder/layer_{layers}/attention/self/query/kernel" in weights:
        layers += 1
    es = embeddings_scope if f"{embeddings_scope}/embeddings/word_embeddings" in weights else scope
    vocab, embedding = weights[f"{es}/embeddings/word_embeddings"].shape
    hidden = weights[query].shape[0]
    return EncoderSizes(
        vocab_size=vocab, embedding_size=embedding, hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=num_attention_heads or max(1, hidden // 64),
        intermediate_size=weights[f"{scope}/encoder/layer_0/intermediate/dense/kernel"].shape[1],
        max_position_embeddings=weights[f"{es}/embeddings/position_embeddings"].shape[0],
        type_vocab_size=weights[f"{es}/embeddings/token_type_embeddings"].shape[0])


_DISCRIMINATOR_HEAD = "discriminator_predictions/dense/kernel"


def build_models(weights: dict[str, np.ndarray], source: str,
                 heads: dict[str, int | None] | None = None):
    """The discriminator (always) and the generator (when the weights hold one) of these
    weights, assigned. Fails naming the weights nothing took."""
    heads = heads or {}
    disc_sizes = infer_sizes(weights, "electra", num_attention_heads=heads.get("electra"))
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
    gen_sizes = infer_sizes(weights, "generator", num_attention_heads=heads.get("generator"))
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
    """Writes the models' variables under the original's names (generator embeddings shared
    under electra/ when a discriminator is written too), readable by the original code and by
    tf.train.load_checkpoint. Returns the prefix."""
    names: dict[str, Any] = {}
    if discriminator is not None:
        names.update(model_variables(discriminator))
    if generator is not None:
        for name, var in model_variables(generator).items():
            names.setdefault(name, var)
    if global_step is not None:
        names["global_step"] = tf.constant(global_step, tf.int64)
    tf.io.gfile.makedirs(os.path.dirname(prefix) or ".")
    ordered = sorted(names)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=ordered, shape_and_slices=[""] * len(ordered),
                      tensors=[tf.convert_to_tensor(names[n]) for n in ordered])
    with tf.io.gfile.GFile(os.path.join(os.path.dirname(prefix) or ".", "checkpoint"), "w") as f:
        f.write(f'model_checkpoint_path: "{os.path.basename(prefix)}"\n')
    return prefix


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
        "initializer_range": encoder.initializer_range, "layer_norm_eps": 1e-12,
        "pad_token_id": 0, "position_embedding_type": "absolute", "tie_word_embeddings": True}


def export_hf(model, directory: str, vocab_file: str | None = None,
              do_lower_case: bool = True) -> str:
    """Writes config.json and model.safetensors (and vocab.txt and tokenizer_config.json when a
    vocab is given) that transformers' ElectraForPreTraining / ElectraForMaskedLM load."""
    from safetensors.numpy import save as save_safetensors

    generator = isinstance(model, modeling.ElectraGenerator)
    scope = "generator" if generator else "electra"
    weights = {name: var.numpy() for name, var in model_variables(model, scope).items()}
    pairs = _hf_encoder_pairs(model.encoder.num_hidden_layers, scope, "electra.",
                              model.encoder.embeddings_project is not None)
    pairs += _HF_GENERATOR_HEAD if generator else _HF_DISCRIMINATOR_HEAD
    state = {hf: np.ascontiguousarray(weights[tf1].T if transpose else weights[tf1])
             for tf1, hf, transpose in pairs}
    if generator:
        state["generator_lm_head.weight"] = state["electra.embeddings.word_embeddings.weight"]
    tf.io.gfile.makedirs(directory)
    files = {"config.json": json.dumps(hf_config(model), indent=2).encode(),
             "model.safetensors": save_safetensors(state, metadata={"format": "pt"})}
    if vocab_file:
        with tf.io.gfile.GFile(vocab_file, "rb") as f:
            files["vocab.txt"] = f.read()
        files["tokenizer_config.json"] = json.dumps(
            {"do_lower_case": do_lower_case, "tokenizer_class": "ElectraTokenizer"}).encode()
    for name, data in files.items():  # temporary names first: never a half-written model
        with tf.io.gfile.GFile(os.path.join(directory, name + ".tmp"), "wb") as f:
            f.write(data)
    for name in files:
        tf.io.gfile.rename(os.path.join(directory, name + ".tmp"), os.path.join(directory, name),
                           overwrite=True)
    return directory


def save_keras(model: keras.Model, path: str) -> str:
    """model.save(path) through a temporary name: never a half-written .keras file under the
    final name."""
    tmp = path + ".tmp.keras"
    model.save(tmp)
    tf.io.gfile.rename(tmp, path, overwrite=True)
    return path


# ------------------------------------------------------------------------ SavedModel

def export_saved_model(model, directory: str) -> str:
    """A TF SavedModel that tf.saved_model.load runs without this package. Inputs: int32
    [batch, length] `input_ids`, `input_mask`, `segment_ids`. Signatures: `serving_default`
    gives the model's outputs (a discriminator: per-token `logits` and `sequence_output`; a
    fine-tuned model: each task's outputs), `sequence_embeddings` the encoder's output."""
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
    return directory


# ------------------------------------------------------------------------ detection

@dataclasses.dataclass
class Pretrained:
    """What load_pretrained found: the models and the tokenizer settings next to them."""
    discriminator: modeling.ElectraDiscriminator
    generator: modeling.ElectraGenerator | None
    vocab_file: str | None
    do_lower_case: bool | None
    source: str
    format: str  # "tf1", "huggingface" or "keras"
    global_step: int | None = None
    has_discriminator_head: bool = True  # False: a bare encoder, the head freshly initialised


def _vocab_next_to(path: str) -> str | None:
    directory = path if tf.io.gfile.isdir(path) else os.path.dirname(path)
    vocab = os.path.join(directory, "vocab.txt")
    return vocab if tf.io.gfile.exists(vocab) else None


def load_pretrained(path: str) -> Pretrained:
    """Loads any of: a TF1 checkpoint (directory or prefix; Google's releases and the original
    run_pretraining.py's output), a Hugging Face directory (config.json + model.safetensors or
    pytorch_model.bin; discriminator or generator), our discriminator.keras (or a directory
    holding it, with generator.keras when present)."""
    if tf.io.gfile.isdir(path) and tf.io.gfile.exists(os.path.join(path, "config.json")):
        state, config = read_hf_state(path)
        weights = hf_to_tf1(state, config, path)
        heads = config.get("num_attention_heads")
        scope = "generator" if "generator_predictions/dense/kernel" in weights else "electra"
        if scope == "generator":
            sizes = infer_sizes(weights, "generator", "generator", heads)
            generator = modeling.ElectraGenerator(sizes.encoder("generator"),
                                                  name="electra_generator")
            assign(generator, weights, path, embeddings_scope="generator")
            discriminator = None
        else:
            discriminator, generator = build_models(weights, path, {"electra": heads})
        lower = None
        tokenizer_config = os.path.join(path, "tokenizer_config.json")
        if tf.io.gfile.exists(tokenizer_config):
            with tf.io.gfile.GFile(tokenizer_config) as f:
                lower = json.load(f).get("do_lower_case")
        return Pretrained(discriminator, generator, _vocab_next_to(path), lower, path,
                          "huggingface",
                          has_discriminator_head=_DISCRIMINATOR_HEAD in weights)
    keras_file = os.path.join(path, "discriminator.keras") if tf.io.gfile.isdir(path) else path
    if keras_file.endswith(".keras") and tf.io.gfile.exists(keras_file):
        discriminator = keras.saving.load_model(keras_file, compile=False)
        generator_file = os.path.join(os.path.dirname(keras_file), "generator.keras")
        generator = (keras.saving.load_model(generator_file, compile=False)
                     if tf.io.gfile.exists(generator_file) else None)
        return Pretrained(discriminator, generator, _vocab_next_to(keras_file), None, keras_file,
                          "keras")
    prefix = tf1_checkpoint_prefix(path)
    if prefix is not None:
        weights = read_tf1_checkpoint(prefix)
        discriminator, generator = build_models(weights, prefix)
        step = int(weights["global_step"]) if "global_step" in weights else None
        return Pretrained(discriminator, generator, _vocab_next_to(path), None, prefix, "tf1",
                          step, has_discriminator_head=_DISCRIMINATOR_HEAD in weights)
    raise FileNotFoundError(
        f"{path}: no pretrained ELECTRA found (expected a TF1 checkpoint, a Hugging Face "
        "directory with config.json, or discriminator.keras)")
