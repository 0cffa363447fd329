"""The original's name-based (TF1 Saver) checkpoints: Google's releases, the original's
run_pretraining.py output and our exports, read and written without a TF1 graph. The encoders'
sizes come from the shapes; what shapes do not show (heads, activation, LayerNorm epsilon), from
an argument or the config saved beside the checkpoint (see tf1_sizes)."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np
import tensorflow as tf

from electra_tf import config as config_lib
from electra_tf import checkpoint_names, files, model_files, optimization

# Written beside our TF1 exports: the encoders' hyperparameters that shapes do not show.
ARCHITECTURE_FILE = "electra_config.json"


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
    """{name: array} of a name-based (TF1 Saver) checkpoint's weights and global_step; no TF1
    graph needed. Optimizer slots are left on disk (twice the weights' size): only
    init_optimizer_state reads them, by name."""
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not checkpoint_names.OPTIMIZER_STATE.search(name)}


def write_tf1_checkpoint(prefix: str, discriminator=None, generator=None,
                         global_step: int | None = None,
                         optimizer: optimization.AdamWeightDecay | None = None,
                         tied: bool | None = None) -> str:
    """Writes the models' variables under the original's names, readable by the original code
    and by tf.train.load_checkpoint: the generator's embeddings under electra/ when they are
    the discriminator's (tied, as the original shares them), else under generator/ (the
    original's untied_generator_embeddings); `tied` as tf1_variables takes it. Beside it,
    ARCHITECTURE_FILE records what shapes cannot tell (attention heads, activation, LayerNorm
    epsilon). With `optimizer` (the
    AdamWeightDecay that trained them), each variable it trains has its Adam slots beside it
    (slot_names), as in the original's checkpoints. Returns the prefix."""
    names = tf1_variables(discriminator, generator, tied)
    architecture = {role: dataclasses.asdict(checkpoint_names.EncoderSpec.of(model.encoder))
                    for role, model in (("discriminator", discriminator),
                                        ("generator", generator)) if model is not None}
    if optimizer is not None:
        for name, variable in list(names.items()):
            if optimizer.tracks(variable):
                names.update(zip(slot_names(name), optimizer.moments(variable)))
    if global_step is not None:
        names["global_step"] = tf.constant(global_step, tf.int64)
    directory = os.path.dirname(prefix) or "."
    tf.io.gfile.makedirs(directory)
    ordered = sorted(names)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=ordered, shape_and_slices=[""] * len(ordered),
                      tensors=[tf.convert_to_tensor(names[n]) for n in ordered])
    model_files.write_files(directory, {
        ARCHITECTURE_FILE: json.dumps(architecture, indent=2).encode(),
        "checkpoint": f'model_checkpoint_path: "{os.path.basename(prefix)}"\n'.encode()})
    return prefix


def tf1_variables(discriminator=None, generator=None,
                  tied: bool | None = None) -> dict[str, Any]:
    """{the original's name: variable} of the models, as write_tf1_checkpoint names them. `tied`
    says whether the generator shares the discriminator's embeddings; None: judged by their
    values (models loaded from files share none by identity)."""
    names: dict[str, Any] = {}
    if discriminator is not None:
        names.update(checkpoint_names.model_variables(discriminator))
    if generator is not None:
        if tied is None:
            tied = discriminator is not None and _same_embeddings(discriminator, generator)
        names.update(checkpoint_names.model_variables(generator,
                                                      "electra" if tied else "generator"))
    return names


def slot_names(name: str) -> tuple[str, ...]:
    """The names of variable `name`'s Adam slots in the original's checkpoints."""
    return tuple(f"{name}/{slot}" for slot in optimization.SLOT_NAMES)


def _same_embeddings(discriminator, generator) -> bool:
    """Whether the generator's embedding block holds the discriminator's values (tied)."""
    ours = checkpoint_names.encoder_variables(discriminator.encoder, "electra")
    theirs = checkpoint_names.encoder_variables(generator.encoder, "generator", "electra")
    return all(tuple(ours[n].shape) == tuple(theirs[n].shape)
               and np.array_equal(np.asarray(ours[n]), np.asarray(theirs[n]))
               for n in theirs if n.startswith("electra/embeddings/"))


def tf1_sizes(prefix: str, shapes: dict[str, tuple[int, ...]],
              num_attention_heads: int | None = None) -> dict[str, checkpoint_names.EncoderSpec]:
    """The encoders' sizes of a TF1 checkpoint by scope: shapes for the sizes; for the heads,
    activation and LayerNorm epsilon, `num_attention_heads` (the discriminator's), else the
    ARCHITECTURE_FILE or the pretrain_config.json beside it, else the original's rules (gelu,
    1e-12, hidden / 64 heads). The discriminator's heads follow hidden / 64 only by default
    (model_hparam_overrides may say otherwise): when its hidden size is not a multiple of 64,
    nothing can tell them, and this fails. The original's generator always has hidden / 64."""
    saved = _saved_architecture(os.path.dirname(prefix) or ".")
    sizes = {}
    for scope in ("electra", "generator"):
        inferred = checkpoint_names.infer_sizes(shapes, scope)
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
    exported = files.read_json(os.path.join(directory, ARCHITECTURE_FILE))
    if exported is not None:
        return {scope: exported[key] for scope, key in (("electra", "discriminator"),
                                                        ("generator", "generator"))
                if key in exported}
    run = files.read_json(os.path.join(directory, "pretrain_config.json"))
    if run is None:
        return {}
    config = config_lib.saved_config(run)
    return {"electra": config.bert_config(), "generator": config.generator_bert_config()}
