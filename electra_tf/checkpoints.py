"""The front door of checkpoint interop: Google's TF1 checkpoints, Hugging Face weights and our
.keras files are read, and Hugging Face, TF1-style checkpoints, TF SavedModel and keras-hub
presets written, every format through one registry.

Every format is read into one canonical form, {the original's TF1 variable name: array}, which
is then assigned to our Keras models by structure (checkpoint_names), so each format needs only
its name map, in a module of its own: tf1_checkpoint, hf_checkpoint, keras_saving (.keras files,
the SavedModel export) and keras_hub_preset; model_files holds the tokenizer files beside a
model. A Hugging Face config.json or a .keras config gives the architecture; TF1 sizes come from
the shapes, and what shapes do not show (heads, activation, LayerNorm epsilon) from an argument
or the config saved beside the checkpoint (see tf1_checkpoint.tf1_sizes). A variable the model
expects but the checkpoint lacks, a shape that differs, or a checkpoint variable that nothing
takes fails with the names. Exports carry the tokenizer (vocab.txt, tokenizer_config.json).

Each format is a `Format` (find it at a path, read its weights and its architecture, write it)
in one registry, FORMATS (tf1, hf, keras, saved_model, keras_hub), through which
load_pretrained, read_architecture and convert_checkpoint.py dispatch: a new format is one
class and one register() line (and, to be written from the command line, its name in
convert_checkpoint.EXPORT_FORMATS).

    pretrained = load_pretrained("electra_small/")  # TF1, HF, .keras: detected
    pretrained.discriminator, pretrained.generator, pretrained.vocab_file
    read_architecture("electra_small/").discriminator  # the hyperparameters, no weights
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from typing import Any

import keras
import tensorflow as tf

from electra_tf import (checkpoint_names, files, hf_checkpoint, keras_hub_preset, keras_saving,
                        model_files, model_shape, modeling, optimization, tf1_checkpoint)
from electra_tf.hparam_parsing import ConfigError


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
    # A run restored with its optimizer (pretraining.restored_run): the AdamWeightDecay whose
    # slots a tf1 export writes, and whether the generator reads the discriminator's tables.
    optimizer: optimization.AdamWeightDecay | None = None
    tied_embeddings: bool | None = None


@dataclasses.dataclass
class Architecture:
    """What read_architecture found: the encoders' hyperparameters, without the weights."""
    discriminator: checkpoint_names.EncoderSpec | None
    generator: checkpoint_names.EncoderSpec | None
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
    return model_files.tokenizer_files(vocab_file, do_lower_case, max_length)


class Tf1Checkpoint(Format):
    """The original's name-based checkpoints (Google's releases, its run_pretraining.py) and
    ours (tf1_checkpoint.write_tf1_checkpoint). Tried last: a run_pretraining directory holds
    TF2 object checkpoints beside its discriminator.keras, and this format fails on those."""
    name, expected, tried_last = "tf1", "a TF1 checkpoint", True

    def locate(self, path: str) -> str | None:
        prefix = tf1_checkpoint.tf1_checkpoint_prefix(path)
        if prefix is None:
            return None
        if "_CHECKPOINTABLE_OBJECT_GRAPH" in dict(tf.train.list_variables(prefix)):
            if tf.io.gfile.exists(os.path.join(model_files.model_directory(path),
                                               "pretrain_config.json")):
                raise FileNotFoundError(
                    f"{path} is a run_pretraining directory without its exported models "
                    "(discriminator.keras is written when training ends): rerun the same "
                    "run_pretraining.py command to finish and export it, or convert it as it "
                    "stands with convert_checkpoint.py --to tf1 --optimizer_state")
            raise FileNotFoundError(f"{prefix} is a TF2 object checkpoint, not ELECTRA weights "
                                    "in the original's names")
        return prefix

    def load(self, where: str, num_attention_heads: int | None) -> Models:
        weights = tf1_checkpoint.read_tf1_checkpoint(where)
        discriminator, generator = checkpoint_names.build_models(
            weights, where, tf1_checkpoint.tf1_sizes(where, checkpoint_names.shapes_of(weights),
                                                     num_attention_heads))
        step = int(weights["global_step"]) if "global_step" in weights else None
        return Models(discriminator, generator, step,
                      checkpoint_names.DISCRIMINATOR_HEAD in weights)

    def architecture(self, where: str, num_attention_heads: int | None) -> Architecture:
        sizes = tf1_checkpoint.tf1_sizes(where, {name: tuple(shape) for name, shape
                                                 in tf.train.list_variables(where)},
                                         num_attention_heads)
        return Architecture(sizes.get("electra"), sizes.get("generator"), where,
                            self.reported_kind)

    def export(self, pretrained: Pretrained, output: str, vocab_file: str, do_lower_case: bool,
               source: str) -> list[str]:
        tokenizer = _tokenizer(pretrained, vocab_file, do_lower_case)
        step = pretrained.global_step or 0
        written = [tf1_checkpoint.write_tf1_checkpoint(
            os.path.join(output, f"model.ckpt-{step}"), pretrained.discriminator,
            pretrained.generator, step, pretrained.optimizer, pretrained.tied_embeddings)]
        return written + model_files.write_files(output, tokenizer)


class HuggingFace(Format):
    """A Hugging Face directory: config.json and model.safetensors (or pytorch_model.bin), a
    discriminator or a generator; written as DIR/discriminator/ and DIR/generator/."""
    name, kind, expected = "hf", "huggingface", "a Hugging Face directory with config.json"

    def locate(self, path: str) -> str | None:
        if tf.io.gfile.isdir(path) and tf.io.gfile.exists(os.path.join(path, "config.json")):
            return path
        return None

    def load(self, where: str, num_attention_heads: int | None) -> Models:
        state, config = hf_checkpoint.read_hf_state(where)
        weights = hf_checkpoint.hf_to_tf1(state, config, where)
        sizes = hf_checkpoint.hf_sizes(config, where)
        if "generator_predictions/dense/kernel" in weights:
            generator = modeling.ElectraGenerator(sizes.encoder("generator"),
                                                  name="electra_generator")
            checkpoint_names.assign(generator, weights, where, embeddings_scope="generator")
            return Models(None, generator)
        discriminator, generator = checkpoint_names.build_models(weights, where,
                                                                 {"electra": sizes})
        return Models(discriminator, generator,
                      has_discriminator_head=checkpoint_names.DISCRIMINATOR_HEAD in weights)

    def architecture(self, where: str, num_attention_heads: int | None) -> Architecture:
        config = files.read_json(os.path.join(where, "config.json"))
        sizes = hf_checkpoint.hf_sizes(config, where)
        if any(a.endswith("ForMaskedLM") for a in config.get("architectures") or []):
            return Architecture(None, sizes, where, self.reported_kind)
        return Architecture(sizes, None, where, self.reported_kind)

    def export(self, pretrained: Pretrained, output: str, vocab_file: str, do_lower_case: bool,
               source: str) -> list[str]:
        return [hf_checkpoint.export_hf(model, os.path.join(output, name), vocab_file,
                                        do_lower_case)
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
        generator = keras_saving.load_keras(generator_file) \
            if tf.io.gfile.exists(generator_file) else None
        return Models(keras_saving.load_keras(where), generator)

    def architecture(self, where: str, num_attention_heads: int | None) -> Architecture:
        generator_file = os.path.join(os.path.dirname(where), "generator.keras")
        return Architecture(keras_saving.keras_sizes(where),
                            keras_saving.keras_sizes(generator_file)
                            if tf.io.gfile.exists(generator_file) else None, where,
                            self.reported_kind)

    def export(self, pretrained: Pretrained, output: str, vocab_file: str, do_lower_case: bool,
               source: str) -> list[str]:
        tokenizer = _tokenizer(pretrained, vocab_file, do_lower_case)
        written = [keras_saving.save_keras(model, os.path.join(output, f"{name}.keras"))
                   for name, model in _models(pretrained).items()]
        return written + model_files.write_files(output, tokenizer)


class SavedModel(Format):
    """Written only: the discriminator as DIR/discriminator/, a TF SavedModel with serving
    signatures (keras_saving.export_saved_model)."""
    name = "saved_model"

    def export(self, pretrained: Pretrained, output: str, vocab_file: str, do_lower_case: bool,
               source: str) -> list[str]:
        if pretrained.discriminator is None:
            raise ValueError(f"{source} holds no discriminator to serve")
        return [keras_saving.export_saved_model(pretrained.discriminator,
                                                os.path.join(output, "discriminator"),
                                                vocab_file, do_lower_case)]


class KerasHubPreset(Format):
    """Written only: a keras-hub preset of the discriminator's encoder
    (keras_hub_preset.export_keras_hub)."""
    name = "keras_hub"

    def check_installed(self) -> None:
        if importlib.util.find_spec("keras_hub") is None:
            raise ValueError("--to keras_hub needs keras-hub: "
                             f"{keras_hub_preset.KERAS_HUB_INSTALL}")

    def check_export(self, pretrained: Pretrained, source: str) -> None:
        if pretrained.discriminator is None:
            raise ValueError(f"{source} holds no discriminator, the model keras-hub's "
                             "ElectraBackbone takes; export a generator with --to hf or keras")
        keras_hub_preset.keras_hub_config(pretrained.discriminator.encoder, source)

    def export(self, pretrained: Pretrained, output: str, vocab_file: str, do_lower_case: bool,
               source: str) -> list[str]:
        return [keras_hub_preset.export_keras_hub(pretrained.discriminator, output, vocab_file,
                                                  do_lower_case, source)]


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
    tf1_checkpoint.tf1_sizes)."""
    format_, where = _locate(path)
    models = format_.load(where, num_attention_heads)
    return Pretrained(models.discriminator, models.generator, model_files.find_vocab(where),
                      model_files.find_do_lower_case(where), where, format_.reported_kind,
                      models.global_step, models.has_discriminator_head)


def read_architecture(path: str, num_attention_heads: int | None = None) -> Architecture:
    """The hyperparameters of the encoders at `path` (any format load_pretrained reads), from
    config.json, the .keras files' configs or the TF1 shapes (see tf1_checkpoint.tf1_sizes),
    without loading the weights."""
    format_, where = _locate(path)
    return format_.architecture(where, num_attention_heads)


def init_architecture(config, user: dict[str, Any], path: str) -> Architecture | None:
    """The architecture of init_checkpoint `path` for a config (pretraining's or fine-tuning's;
    model_shape.pretrained_architecture calls it): None when nothing is at a default path the
    user did not give; what cannot be read is a ConfigError naming the hparam."""
    if config.debug or user.get("debug"):
        raise ConfigError("hparam 'debug' builds the original's tiny model, which "
                          f"cannot start from init_checkpoint {path}; drop one of them")
    heads = user.get("model_hparam_overrides", {}).get("num_attention_heads")
    try:
        architecture = read_architecture(path, heads)
    except NoPretrainedModel:
        if "init_checkpoint" in user:
            raise
        return None
    except ValueError as e:
        raise ConfigError(f"hparam 'init_checkpoint': {e}") from None
    if architecture.discriminator is None:
        raise ConfigError(f"hparam 'init_checkpoint': {architecture.source} holds a "
                          "generator only; point it at the discriminator")
    return architecture


model_shape.read_pretrained_with(init_architecture)
