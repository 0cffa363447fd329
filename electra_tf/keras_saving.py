"""What Keras itself writes: our .keras files (run_pretraining.py's discriminator.keras and
generator.keras), saved through a temporary name and read with a damaged archive named; and TF
SavedModels with serving signatures (keras.export), which tf.saved_model.load runs without this
package."""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile

import keras
import tensorflow as tf

from electra_tf import checkpoint_names, files, model_files


# ------------------------------------------------------------------------ .keras files

def save_keras(model: keras.Model, path: str) -> str:
    """model.save(path) through a temporary name: never a half-written .keras file under the
    final name."""
    with files.renamed_into_place(path, suffix=".keras") as temporary:
        model.save(temporary)
    return path


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


def load_keras(keras_file: str) -> keras.Model:
    """The model in our .keras file, uncompiled."""
    _keras_config(keras_file)  # fails naming a damaged file
    return keras.saving.load_model(keras_file, compile=False)


def keras_sizes(keras_file: str) -> checkpoint_names.EncoderSpec:
    """The encoder's hyperparameters from a .keras archive's config.json."""
    encoder = _keras_config(keras_file)["config"]["encoder"]["config"]
    return checkpoint_names.EncoderSpec(**{
        f.name: encoder[f.name] for f in dataclasses.fields(checkpoint_names.EncoderSpec)
        if f.name in encoder})


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
        model_files.write_files(os.path.join(directory, "assets.extra"),
                                model_files.tokenizer_files(
                                    vocab_file, do_lower_case,
                                    model.encoder.max_position_embeddings))
    return directory
