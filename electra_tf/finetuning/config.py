"""A fine-tuning run's hyperparameters (hparams.FinetuningConfig) from --hparams, each checked,
as the original's configure_finetuning.py. The tasks' own hparams (Task.hparams_class) are
known through the registry (task_builder), by the same names as the rest.

Resolution order (later wins), as the original:
  1. the original's defaults (FinetuningConfig's and the tasks' TaskHparams' field defaults),
  2. the user's `--hparams`, then the per-task defaults (one task: each task's own, e.g. RTE and
     STS 10 epochs, QA 512 tokens and 2 epochs, chunking 256 tokens, others 3 epochs; no
     trainable task: no training), the per-size defaults (large: lr 5e-5 and layer-wise decay
     0.9; small: embedding size 128) and the debug values,
  3. the user's `--hparams` again (so what the user sets always wins),
  4. ours: the pretrained model's architecture (init_checkpoint: .keras config, config.json,
     TF1 shapes with the saved config), which also picks model_size when it is not given; a
     value the user gave that contradicts it fails, naming both.
"""

from __future__ import annotations

import os
from typing import Any

import tensorflow as tf

from electra_tf import config as config_lib
from electra_tf import model_shape, shared_hparams
from electra_tf.finetuning import task_builder
from electra_tf.finetuning.hparams import FinetuningConfig
from electra_tf.finetuning.task import Task
from electra_tf.hparam_parsing import ConfigError, did_you_mean, load_hparams, require

DATA_SOURCES = ("files", "tfds")


def _new(model_name: str, data_dir: str) -> FinetuningConfig:
    """The defaults: the original's, and every registered kind of task's own."""
    return FinetuningConfig(model_name=model_name, data_dir=data_dir, task_hparams={
        kind: kind() for kind in task_builder.hparams_classes()})


def update(config: FinetuningConfig, hparams: dict[str, Any]) -> None:
    """Sets hparams, the tasks' by their names as the rest, failing on unknown keys (naming
    the closest) and wrong types."""
    owners = {name: config for name in shared_hparams.valid_keys(FinetuningConfig)}
    owners.update({name: declared for declared in config.task_hparams.values()
                   for name in shared_hparams.valid_keys(type(declared))})
    for key, value in hparams.items():
        if key not in owners:
            raise ConfigError(f"unknown hparam {key!r}{did_you_mean([key], owners)}; "
                              f"every hparam is listed in {FinetuningConfig.HPARAMS_DOC}")
        shared_hparams.update(owners[key], {key: value})


def _task_and_size_defaults(config: FinetuningConfig) -> dict[str, Any]:
    """The original's per-task, per-size and debug defaults for this config."""
    defaults: dict[str, Any] = {}
    tasks = [task_builder.TASKS[name] for name in config.task_names
             if name in task_builder.TASKS]
    if len(config.task_names) == 1 and tasks:
        defaults.update(tasks[0].defaults())
    if tasks and not any(task.trainable for task in tasks):
        defaults["do_train"] = False
    if config.encoder_size == "large":
        defaults.update(learning_rate=5e-5, layerwise_lr_decay=0.9)
    elif config.encoder_size == "small":
        defaults["embedding_size"] = 128
    if config.debug:
        defaults.update(save_checkpoints_steps=1000000, num_trials=1, iterations_per_loop=1,
                        train_batch_size=32, num_train_epochs=3.0, log_examples=True)
    return defaults


def validate(c: FinetuningConfig) -> None:
    require(c.encoder_size in model_shape.MODEL_SIZES, "model_size",
            f"unknown size {c.model_size!r}; valid: {list(model_shape.MODEL_SIZES)}")
    require(bool(c.task_names), "task_names", "name at least one task")
    unknown = [t for t in c.task_names if t not in task_builder.TASKS]
    require(not unknown, "task_names",
            f"unknown tasks {unknown}{did_you_mean(unknown, task_builder.TASKS)}; "
            f"valid tasks: {list(task_builder.TASKS)}")
    require(len(set(c.task_names)) == len(c.task_names), "task_names", "a task appears twice")
    tasks = [task_builder.TASKS[name] for name in c.task_names]
    untrained = [task.name for task in tasks if not task.trainable]
    if untrained:
        require(len(untrained) == len(tasks), "task_names",
                f"{untrained} are evaluated without training and cannot share a run with "
                "tasks that train; run them separately")
        require(not c.do_train, "do_train", f"{untrained} are not trained (zero-shot); set "
                "do_train false or leave it out")
    for task in tasks:
        task.validate(c)
    require(not c.use_tfrecords_if_existing, "use_tfrecords_if_existing",
            "features are built in memory for every run and never written to disk, so there "
            "are no TFRecords to reuse; leave it out (or false)")
    for hparams in c.task_hparams.values():
        hparams.validate()
    bad = sorted(set(c.model_hparam_overrides) - set(model_shape.BERT_CONFIG_KEYS))
    require(not bad, "model_hparam_overrides",
            f"unknown keys {bad}; valid keys: {list(model_shape.BERT_CONFIG_KEYS)}")
    bert = c.bert_config()
    require(c.max_seq_length <= bert["max_position_embeddings"], "max_seq_length",
            f"{c.max_seq_length} exceeds max_position_embeddings "
            f"{bert['max_position_embeddings']}")
    require(c.max_seq_length >= 8, "max_seq_length", f"must be at least 8, got {c.max_seq_length}")
    for key in ("train_batch_size", "eval_batch_size", "predict_batch_size", "num_trials",
                "iterations_per_loop", "save_checkpoints_steps", "vocab_size", "log_steps"):
        require(getattr(c, key) >= 1, key, f"must be at least 1, got {getattr(c, key)}")
    require(c.num_train_epochs > 0, "num_train_epochs", "must be > 0")
    require(c.log_seconds > 0, "log_seconds", f"must be > 0, got {c.log_seconds}")
    require(c.nonfinite_patience >= 1, "nonfinite_patience",
            f"must be at least 1, got {c.nonfinite_patience}")
    require(0 <= c.warmup_proportion <= 1, "warmup_proportion", "must be in [0, 1]")
    require(c.learning_rate > 0, "learning_rate", "must be > 0")
    require(0 <= c.layerwise_lr_decay <= 1, "layerwise_lr_decay",
            "must be in [0, 1] (0 turns it off)")
    require(c.do_train or c.do_eval, "do_train", "do_train or do_eval must be true")
    require(not c.keep_best_trial or (c.do_train and c.do_eval), "keep_best_trial",
            "chooses among trained trials by their dev scores: needs do_train and do_eval")
    unranked = [t.name for t in tasks if type(t).main_metric is Task.main_metric]
    require(not c.keep_best_trial or not unranked, "keep_best_trial",
            f"{unranked} name no main metric to choose the best trial by (Task.main_metric)")
    require(c.data_source in DATA_SOURCES, "data_source", f"one of {DATA_SOURCES}")
    require(c.strategy in config_lib.STRATEGIES, "strategy", f"one of {config_lib.STRATEGIES}")
    require(c.precision in config_lib.PRECISIONS, "precision",
            f"one of {config_lib.PRECISIONS}")
    shared_hparams.validate_tpu(c)
    require(c.kernels in config_lib.KERNELS, "kernels",
            f"one of {config_lib.KERNELS}, got {c.kernels!r}")


def _choose_vocab(config: FinetuningConfig, architecture) -> None:
    """The vocabulary the pretrained model was trained with (vocab.txt beside it, or its run's;
    model_files.find_vocab), as the original reads the model's own vocab.txt; without a
    pretrained model, DATA_DIR/models/NAME/vocab.txt, else DATA_DIR/vocab.txt. A vocab_file
    given with other tokens than the model's fails naming both: its ids would feed the wrong
    embeddings (docs/finetuning.md)."""
    from electra_tf import model_files, tokenization

    own = model_files.find_vocab(architecture.source) if architecture is not None else None
    if not config.vocab_file:
        config.vocab_file = own or os.path.join(config.pretrained_model_dir, "vocab.txt")
        if not tf.io.gfile.exists(config.vocab_file):
            config.vocab_file = os.path.join(config.data_dir, "vocab.txt")
        return
    if own is None or not tf.io.gfile.exists(config.vocab_file):
        return
    ours, theirs = (tokenization.read_vocab(path) for path in (config.vocab_file, own))
    if ours != theirs:
        raise ConfigError(
            f"hparam 'vocab_file' {config.vocab_file} ({len(ours)} tokens) is not the "
            f"vocabulary {own} ({len(theirs)} tokens) that the pretrained model "
            f"{architecture.source} was trained with; leave vocab_file out to use the model's")


def check_locations(config: FinetuningConfig) -> None:
    """Before anything is written: --data_dir exists, and --model_name names a pretrained
    model when init_checkpoint is the default DATA_DIR/models/NAME (else the existing models
    are listed). from_hparams does not check, so that configs can be built anywhere."""
    from electra_tf import checkpoints

    inputs = [config.vocab_file, config.init_checkpoint or ""]
    if config.data_source == "files":
        inputs += [config.raw_data_dir(task_builder.TASKS[name].data_name)
                   for name in config.task_names]
    shared_hparams.check_data_dir(config.data_dir, inputs)
    if config.debug or config.init_checkpoint != config.pretrained_model_dir:
        return
    try:
        checkpoints.read_architecture(config.pretrained_model_dir)
        return
    except checkpoints.NoPretrainedModel:
        pass
    models_dir = os.path.dirname(config.pretrained_model_dir)
    names = sorted(os.path.basename(path.rstrip("/"))
                   for path in tf.io.gfile.glob(os.path.join(models_dir, "*"))
                   if tf.io.gfile.isdir(path))
    where = ("does not exist" if not tf.io.gfile.isdir(config.pretrained_model_dir)
             else "holds no pretrained model")
    raise ConfigError(
        f"--model_name {config.model_name!r}: {config.pretrained_model_dir} {where}"
        f"{did_you_mean([config.model_name], names)}; "
        f"the models in {models_dir}: {names or 'none'} (or set init_checkpoint to a "
        "pretrained model elsewhere)")


def from_hparams(model_name: str, data_dir: str,
                 hparams: str | dict | None = None) -> FinetuningConfig:
    """The config the original's FinetuningConfig(model_name, data_dir, **hparams) builds, with
    every value checked."""
    if not model_name:
        raise ConfigError("--model_name is required (the model under DATA_DIR/models)")
    if not data_dir:
        raise ConfigError("--data_dir is required (holds finetuning_data/, models/)")
    user = load_hparams(hparams)
    config = _new(model_name, data_dir)
    update(config, user)
    if config.init_checkpoint is None and not config.debug:
        config.init_checkpoint = config.pretrained_model_dir
    # The pretrained model decides the architecture (and, unless given, the size preset).
    architecture = model_shape.pretrained_architecture(config, user, config.init_checkpoint)
    if architecture is not None and "model_size" not in user:
        config.model_size = model_shape.preset_size(architecture.discriminator, config.model_size)
    update(config, _task_and_size_defaults(config))
    update(config, user)
    if config.use_tpu and config.strategy == "default":
        config.strategy = "tpu"
    _choose_vocab(config, architecture)
    tokens = shared_hparams.count_vocab(config.vocab_file)
    if "vocab_size" not in user and tokens:
        config.vocab_size = tokens
    if architecture is not None:
        model_shape.take_architecture(config, user, architecture)
    validate(config)
    return config


def from_saved(saved: dict[str, Any], overrides: dict[str, Any]) -> FinetuningConfig:
    """The config of a run as it saved it (FinetuningConfig.to_json), with `overrides` checked
    as --hparams are (run_ensemble.py)."""
    values = dict(saved)
    config = _new(values.pop("model_name"), values.pop("data_dir"))
    update(config, values)
    update(config, overrides)
    validate(config)
    return config
