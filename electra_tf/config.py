"""Every pretraining hyperparameter in one place, as the original's configure_pretraining.py.

Resolution order (later wins):
  1. the original's defaults (the field defaults below),
  2. the size preset `configs/<model_size>.json` (the paper's Table 6 values, or a released "++"
     model's), then the original's debug-mode values when `debug` is true,
  3. the user's `--hparams`.

Unknown keys, wrong types and impossible values fail here, naming the key. What fine-tuning's
config shares with this one lives below it: reading --hparams and its errors in hparam_parsing,
the transformer's shape (the size presets' and a pretrained model's) in model_shape, and the TPU
hparams, setting hparams with their types checked and the checks of data_dir and the vocabulary
file in shared_hparams. It takes only the choices of strategy, precision and kernels
(STRATEGIES, PRECISIONS, KERNELS) from here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from importlib import resources
from typing import Any

import tensorflow as tf

from electra_tf import files
from electra_tf.hparam_parsing import ConfigError, load_hparams, require
from electra_tf.model_shape import (BERT_CONFIG_KEYS, MODEL_SIZES, bert_config, preset_size,
                                    pretrained_architecture, take_architecture)
from electra_tf.shared_hparams import TpuHparams, count_vocab, update, valid_keys, validate_tpu

STRATEGIES = ("default", "one_device", "mirrored", "multi_worker_mirrored", "tpu")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
OPTIMIZERS = ("adamw", "lamb")
KERNELS = ("auto", "fused", "reference")  # the transformer's implementation (modeling)


@dataclasses.dataclass(frozen=True)
class ObjectiveHparams:
    """What the hparams know of an objective; objectives.py holds its model, its FLOPs and its
    health expectations in the class of the same name."""
    # The discriminator-sized model detects replaced tokens (the original's
    # electra_objective: true).
    detection: bool = False
    disc_weight: float | None = None  # its loss's weight unless given; None: the field's default
    two_tower_generator: bool = False  # it needs Electric's two-tower generator


# Ours: the objectives (what the discriminator-sized model learns), by their `objective` hparam.
# A new objective is one line here and its class in objectives.py.
OBJECTIVES: dict[str, ObjectiveHparams] = {
    "electra": ObjectiveHparams(detection=True),
    "electra_15": ObjectiveHparams(detection=True),
    "mlm": ObjectiveHparams(),
    "replace_mlm": ObjectiveHparams(disc_weight=1.0),  # a masked LM's loss: no 50x
    "all_tokens_mlm": ObjectiveHparams(disc_weight=1.0),
    "electric": ObjectiveHparams(detection=True, two_tower_generator=True),
}
# Ours: how the two networks train, and how their embeddings relate.
TRAINING_ALGORITHMS = ("joint", "two_stage", "adversarial")
EMBEDDING_SHARING = ("tied", "untied", "gdes")


def detection_objectives() -> tuple[str, ...]:
    """The objectives two_stage and adversarial train: replaced-token detection with a
    single-tower generator."""
    return tuple(name for name, objective in OBJECTIVES.items()
                 if objective.detection and not objective.two_tower_generator)


@dataclasses.dataclass
class PretrainingConfig(TpuHparams):
    """Pretraining hyperparameters. Names and meanings are the original's unless marked "ours"."""

    model_name: str
    data_dir: str
    debug: bool = False  # tiny model, few steps (the original's debug mode)
    do_train: bool = True
    do_eval: bool = False

    # Objective: ours, one of OBJECTIVES. The original's electra_objective (false: a BERT-style
    # masked LM with the same masking) and electric_objective (Electric, Clark et al., EMNLP
    # 2020) are taken as its spellings (SPELLINGS).
    objective: str = "electra"
    training_algorithm: str = "joint"  # ours: joint, two_stage or adversarial (paper 3.2)
    gen_weight: float = 1.0
    disc_weight: float = 50.0  # replace_mlm and all_tokens_mlm: 1.0 unless set
    adversarial_mlm_weight: float = 0.0  # ours: MLM loss in the adversarial generator's loss
    mask_prob: float = 0.15

    # Optimization
    learning_rate: float = 5e-4
    lr_decay_power: float = 1.0
    # Ours: "polynomial" (the original's: the decay spans the run) or "wsd" (warmup, the peak
    # held, then the decay over the last lr_decay_steps; 0 holds the peak to the end).
    lr_schedule: str = "polynomial"
    lr_decay_steps: int = 0
    weight_decay_rate: float = 0.01
    num_warmup_steps: int = 10000
    optimizer: str = "adamw"  # ours: "adamw" (the original's) or "lamb" for large batches

    # Training loop
    iterations_per_loop: int = 200
    save_checkpoints_steps: int = 1000
    num_train_steps: int = 1000000
    num_eval_steps: int = 100
    # disc_auc's thresholds: the original's tf.metrics.auc has 200, a poor estimate when the
    # probabilities cluster; more give a finer one (ours)
    auc_num_thresholds: int = 200
    keep_checkpoint_max: int = 5  # 0 or None keeps all
    log_steps: int = 0  # ours: console/TensorBoard interval; 0 means every iterations_per_loop
    log_seconds: float = 30.0  # ours: a console progress line at least this often
    text_summary_steps: int = 5000  # ours: a sample of inputs/samples/verdicts in TensorBoard
    nonfinite_patience: int = 20  # ours: steps in a row with a NaN/inf loss that stop the run
    # Ours: a linear probe of the discriminator on a GLUE or tagging task's directory
    # (electra_tf.probe)
    probe_task: str = ""
    probe_steps: int = 0  # every this many steps and at the end; 0: only at the end
    probe_examples: int = 2000  # the first rows (sentences) of its train and dev splits

    # Model
    model_size: str = "small"  # small, base, large, or a released preset: small++, base++, large++
    model_hparam_overrides: dict = dataclasses.field(default_factory=dict)
    embedding_size: int | None = None  # BERT hidden size when None
    vocab_size: int = 30522
    do_lower_case: bool = True

    # Generator
    uniform_generator: bool = False
    two_tower_generator: bool = False
    # Ours: tied, untied or gdes; the original's untied_generator_embeddings: true is "untied".
    embedding_sharing: str = "tied"
    untied_generator: bool = True
    generator_layers: float = 1.0
    generator_hidden_size: float = 0.25
    disallow_correct: bool = False
    temperature: float = 1.0

    # Batches
    max_seq_length: int = 128
    train_batch_size: int = 128
    eval_batch_size: int = 128

    # Ours: distribution, numerics, XLA, reproducibility
    strategy: str = "default"
    precision: str = "float32"
    jit_compile: bool | None = None  # None: on where it works (one device, GPU or TPU)
    seed: int | None = None  # masking/sampling/dropout seed; None draws one
    kernels: str = "auto"  # fused CPU kernels or the plain reference layers; auto: by device

    # Data locations, derived from data_dir and model_name unless given
    pretrain_tfrecords: str = ""
    eval_tfrecords: str = ""  # ours: held-out TFRecords for do_eval; defaults to the training files
    vocab_file: str = ""
    # Ours: start a new run from pretrained weights (a TF1 release, Hugging Face, .keras), as
    # checkpoints.load_pretrained reads them; a missing generator starts fresh.
    init_checkpoint: str | None = None
    # Ours: with a TF1 init_checkpoint written by a run of this model, also its global step and
    # Adam slots, so the run counts on from that step as the original's resumed run does.
    init_optimizer_state: bool = False
    model_dir: str = ""
    results_txt: str = ""
    results_pkl: str = ""
    max_predictions_per_seq: int = 0  # derived: int((mask_prob + 0.005) * max_seq_length)

    DERIVED: typing.ClassVar[tuple[str, ...]] = ("max_predictions_per_seq",)
    SPELLINGS: typing.ClassVar[tuple[str, ...]] = ("electra_objective", "electric_objective",
                                                    "untied_generator_embeddings")
    HPARAMS_DOC: typing.ClassVar[str] = "docs/pretraining.md#hyperparameters"

    @property
    def encoder_size(self) -> str:
        """"small++" -> "small": the transformer shape of a (possibly released) preset."""
        return self.model_size.rstrip("+")

    def bert_config(self) -> dict[str, Any]:
        """The discriminator's transformer hyperparameters (the original's get_bert_config)."""
        return bert_config(self.encoder_size, self.vocab_size, self.model_hparam_overrides,
                           self.debug)

    def generator_bert_config(self) -> dict[str, Any]:
        """The generator's transformer (the original's get_generator_config); with
        untied_generator false the discriminator's own, whatever the fractions say (the
        original then builds the generator from the discriminator's config)."""
        disc = self.bert_config()
        gen = dict(disc)
        if not self.untied_generator:
            return gen
        gen["hidden_size"] = int(round(disc["hidden_size"] * self.generator_hidden_size))
        gen["num_hidden_layers"] = int(round(disc["num_hidden_layers"] * self.generator_layers))
        gen["intermediate_size"] = 4 * gen["hidden_size"]
        gen["num_attention_heads"] = max(1, gen["hidden_size"] // 64)
        return gen

    def resolved_embedding_size(self) -> int:
        return self.embedding_size or self.bert_config()["hidden_size"]

    # The original's spellings, read from `objective` and `embedding_sharing` (for the saved
    # pretrain_config.json and the original's readers; nothing in electra_tf reads them).
    @property
    def electra_objective(self) -> bool:
        return OBJECTIVES[self.objective].detection

    @property
    def electric_objective(self) -> bool:
        return self.objective == "electric"

    @property
    def untied_generator_embeddings(self) -> bool:
        return self.embedding_sharing == "untied"

    def to_dict(self) -> dict[str, Any]:
        """The hparams, with the original's spellings of `objective` and `embedding_sharing`."""
        return {**dataclasses.asdict(self),
                **{key: getattr(self, key) for key in self.SPELLINGS}}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


_FIELDS = {f.name: f for f in dataclasses.fields(PretrainingConfig)}


def preset(model_size: str) -> dict[str, Any]:
    """The hparams of configs/<model_size>.json."""
    name = f"{model_size}.json"
    files = resources.files("electra_tf").joinpath("configs")
    if not files.joinpath(name).is_file():
        known = sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".json"))
        raise ConfigError(f"model_size: unknown size {model_size!r}; valid sizes: {known}")
    return json.loads(files.joinpath(name).read_text())


# The hparams that decide the variables' shapes: a checkpoint only restores into the same.
SHAPE_KEYS = ("model_size", "model_hparam_overrides", "embedding_size", "vocab_size",
              "generator_hidden_size", "generator_layers", "untied_generator",
              "uniform_generator", "two_tower_generator", "debug", "objective",
              "training_algorithm", "embedding_sharing")
# Those of SHAPE_KEYS that spell the networks' sizes: one model has several spellings (a
# preset; every size written out, as a run started from init_checkpoint saves them).
_SIZE_SPELLINGS = ("model_size", "model_hparam_overrides", "embedding_size",
                   "generator_hidden_size", "generator_layers")
# The original's spellings of our settings (PretrainingConfig.SPELLINGS): taken at the edge,
# by original_spellings, and never read inside.
_SPELLINGS_OF = {"objective": ("electra_objective", "electric_objective"),
                 "embedding_sharing": ("untied_generator_embeddings",)}


def original_spellings(hparams: dict[str, Any]) -> dict[str, Any]:
    """`hparams` (a user's, or a saved run's) with the original's spellings (electra_objective,
    electric_objective, untied_generator_embeddings) taken into `objective` and
    `embedding_sharing`, which they set unless given; `training_algorithm` two_stage implies
    untied embeddings. Fails on a spelling that says otherwise than the setting."""
    hparams = dict(hparams)
    spelled = {key: hparams.pop(key) for key in PretrainingConfig.SPELLINGS if key in hparams}
    for key, value in spelled.items():
        if not isinstance(value, bool):
            raise ConfigError(f"hparam {key!r} must be true or false, got {value!r}")
    electra, electric = spelled.get("electra_objective"), spelled.get("electric_objective")
    if electric:  # the original: electric_objective wins over electra_objective
        objective = hparams.setdefault("objective", "electric")
    else:
        objective = hparams.setdefault("objective", "mlm" if electra is False else "electra")
    known = OBJECTIVES.get(objective)
    contradictions = []
    if electric is not None and electric != (objective == "electric"):
        contradictions.append(f"electric_objective {electric}")
    if electra is not None and known is not None and not known.two_tower_generator and \
            electra != known.detection:
        contradictions.append(f"electra_objective {electra}")
    if contradictions:
        raise ConfigError(f"hparam 'objective' is {objective!r} but {' and '.join(contradictions)}"
                          " says otherwise; set only 'objective' (electra_objective and "
                          "electric_objective are its old spellings)")
    untied = spelled.get("untied_generator_embeddings")
    two_stage = hparams.get("training_algorithm") == "two_stage"
    sharing = hparams.setdefault("embedding_sharing", "untied" if untied or two_stage else "tied")
    if untied is not None and untied != (sharing == "untied"):
        raise ConfigError(f"hparam 'embedding_sharing' is {sharing!r} but "
                          f"untied_generator_embeddings {untied} says otherwise; set only "
                          "'embedding_sharing' (untied_generator_embeddings: true is \"untied\")")
    return hparams


def check_resumable(config: PretrainingConfig, saved: dict[str, Any], where: str) -> None:
    """Fails, naming each difference, unless `config` builds the variables of the run saved in
    `where`: the sizes both resolve to (however spelled) and the other shape-deciding hparams."""
    def shape(c: dict[str, Any]) -> dict[str, Any]:
        # A run saved before training_algorithm, objective or embedding_sharing existed.
        c = original_spellings({"training_algorithm": "joint", **c})
        resolved = saved_config(c)
        return {**{f"discriminator {k}": v for k, v in resolved.bert_config().items()},
                **{f"generator {k}": v for k, v in resolved.generator_bert_config().items()},
                "embedding_size": resolved.resolved_embedding_size(),
                **{k: c.get(k) for k in SHAPE_KEYS if k not in _SIZE_SPELLINGS}}

    if config.training_algorithm == "two_stage" and \
            saved.get("num_train_steps") != config.num_train_steps:
        raise ConfigError(f"{where} holds a two_stage run of {saved.get('num_train_steps')} "
                          f"steps, switching networks half way; resume it with num_train_steps "
                          f"{saved.get('num_train_steps')} (now {config.num_train_steps})")
    ours, theirs = shape(config.to_dict()), shape(saved)
    differ = [k for k in theirs if ours.get(k) != theirs[k]]
    if differ:
        details = ", ".join(f"{k}: {theirs[k]!r} there, {ours.get(k)!r} now" for k in differ)
        raise ConfigError(f"{where} holds a run with other model shapes ({details}); the "
                          "checkpoints cannot resume with these hparams. Use the saved values "
                          "or a new --model_name")


# Act only when a run starts from step 0: not read when it resumes (from_hparams, as_started),
# and not taken from a saved run, whose init_checkpoint may since have moved.
START_ONLY = ("init_checkpoint", "init_optimizer_state")
# Never taken from a saved run (saved_hparams): whether this command trains or evaluates, where
# its outputs go, and the start-only hparams.
_NOT_INHERITED = ("do_train", "do_eval", *START_ONLY, "model_dir", "results_txt", "results_pkl")
# What a run saved before the hparam existed did: disc_auc was counted at 1,000 thresholds.
_BEFORE_THE_HPARAM = {"auc_num_thresholds": 1000}


def as_started(config: PretrainingConfig, saved: dict[str, Any],
               step: int) -> tuple[PretrainingConfig, list[str]]:
    """`config` of a run resumed at `step` from its own checkpoint (`saved`, its
    pretrain_config.json, which check_resumable found to be of the same shapes) as the run
    started: the start-only hparams it started with, so that its record keeps where it came
    from, and its sizes as it spelled them, so that the record changes only in what this
    command changes. Also a line for each start-only hparam given otherwise: unused."""
    defaults = {f.name: f.default for f in dataclasses.fields(PretrainingConfig)}
    kept = {k: saved[k] for k in _SIZE_SPELLINGS if k in saved}
    notes = []
    for key in START_ONLY:
        given, started = getattr(config, key), saved.get(key, defaults[key])
        if given == started or not (given or started):  # "" and None: no init_checkpoint
            continue
        kept[key] = started
        if given:
            notes.append(f"hparam {key!r} is {given!r}, but it only starts a run: this one "
                         f"resumes at step {step} from its own checkpoint, " +
                         (f"and keeps the {started!r} it started with" if started
                          else f"and started without {key}"))
    return dataclasses.replace(config, **kept), notes


def _saved_run(model_dir: str) -> dict[str, Any] | None:
    """pretrain_config.json of the run whose checkpoints are in model_dir; None without a
    checkpoint or a readable file (run_pretraining.py says it is damaged)."""
    if not tf.io.gfile.glob(os.path.join(model_dir, "ckpt-*")):
        return None
    try:
        saved = files.read_json(os.path.join(model_dir, "pretrain_config.json"))
    except ValueError:
        return None
    return saved if isinstance(saved, dict) else None


def saved_hparams(saved: dict[str, Any] | None, user: dict[str, Any]) -> dict[str, Any]:
    """The hparams the user did not give, from the saved run (_saved_run), so that resuming or
    evaluating a run needs only what changes. File locations the saved run derived from its
    data_dir are derived anew (the data may have moved); those it was given are taken; an
    hparam newer than the run, what the run did without it. Empty without a saved run."""
    if saved is None:
        return {}
    given = set(user)
    for setting, spellings in _SPELLINGS_OF.items():  # one spelling given takes none saved
        if given & {setting, *spellings}:
            given |= {setting, *spellings}
    saved_dir = saved.get("data_dir", "")
    derived = {"pretrain_tfrecords": os.path.join(saved_dir, "pretrain_tfrecords",
                                                  "pretrain_data.tfrecord*"),
               "vocab_file": os.path.join(saved_dir, "vocab.txt"),
               "eval_tfrecords": saved.get("pretrain_tfrecords")}
    return {key: value for key, value in {**_BEFORE_THE_HPARAM, **saved}.items()
            if key in valid_keys(PretrainingConfig) and key not in given
            and key not in _NOT_INHERITED and (key not in derived or value != derived[key])}


def saved_config(saved: dict[str, Any]) -> PretrainingConfig:
    """The config of a run's saved pretrain_config.json."""
    return PretrainingConfig(**{k: v for k, v in saved.items() if k in _FIELDS})


# ------------------------------------------------------------------ continued pretraining

def take_generator(config: PretrainingConfig, user: dict[str, Any], architecture) -> None:
    """Continued pretraining: generator_hidden_size and generator_layers from the pretrained
    generator, when the checkpoint has one; a value the user gave that gives another size
    fails naming both."""
    generator, discriminator = architecture.generator, architecture.discriminator
    if generator is None:
        return
    fractions = {"generator_hidden_size": generator.hidden_size / discriminator.hidden_size,
                 "generator_layers": generator.num_hidden_layers /
                 discriminator.num_hidden_layers}
    given = {k: user[k] for k in fractions if k in user}
    update(config, {k: v for k, v in fractions.items() if k not in given})
    ours = config.generator_bert_config()
    differ = [f"{key} {getattr(generator, key)} in the checkpoint, {ours[key]} from the hparams"
              for key in ("hidden_size", "num_hidden_layers", "num_attention_heads")
              if ours[key] != getattr(generator, key)]
    if differ:
        raise ConfigError(
            f"init_checkpoint {architecture.source}'s generator does not match the configured "
            f"one ({', '.join(f'{k} {v}' for k, v in given.items()) or 'heads follow hidden / 64'}"
            f"): {'; '.join(differ)}")


def validate(c: PretrainingConfig) -> None:
    """Impossible values fail before any work starts."""
    require(c.encoder_size in MODEL_SIZES, "model_size", f"unknown size {c.model_size!r}")
    require(0.0 < c.mask_prob < 1.0, "mask_prob", f"must be in (0, 1), got {c.mask_prob}")
    require(c.max_predictions_per_seq >= 1, "mask_prob",
             f"int((mask_prob + 0.005) * max_seq_length) = {c.max_predictions_per_seq}: "
             "no token would be masked; raise mask_prob or max_seq_length")
    bad = sorted(set(c.model_hparam_overrides) - set(BERT_CONFIG_KEYS))
    require(not bad, "model_hparam_overrides",
             f"unknown keys {bad}; valid keys: {list(BERT_CONFIG_KEYS)}")
    bert = c.bert_config()
    require(bert["hidden_size"] % bert["num_attention_heads"] == 0, "model_hparam_overrides",
             f"hidden_size {bert['hidden_size']} is not a multiple of num_attention_heads "
             f"{bert['num_attention_heads']}")
    require(c.max_seq_length <= bert["max_position_embeddings"], "max_seq_length",
             f"{c.max_seq_length} exceeds max_position_embeddings "
             f"{bert['max_position_embeddings']}")
    require(c.max_seq_length >= 3, "max_seq_length", "needs room for [CLS] x [SEP]")
    for key in ("train_batch_size", "eval_batch_size", "num_train_steps", "iterations_per_loop",
                "save_checkpoints_steps", "num_eval_steps", "vocab_size"):
        require(getattr(c, key) >= 1, key, f"must be at least 1, got {getattr(c, key)}")
    require(c.num_warmup_steps >= 0, "num_warmup_steps", "must be >= 0")
    _validate_schedule(c)
    require(c.log_seconds > 0, "log_seconds", f"must be > 0, got {c.log_seconds}")
    require(c.nonfinite_patience >= 1, "nonfinite_patience",
            f"must be at least 1, got {c.nonfinite_patience}")
    require(c.learning_rate > 0, "learning_rate", "must be > 0")
    require(c.probe_steps >= 0, "probe_steps", f"must be >= 0, got {c.probe_steps}")
    require(c.auc_num_thresholds >= 2, "auc_num_thresholds",
            f"must be at least 2, got {c.auc_num_thresholds}")
    require(c.probe_examples >= 2, "probe_examples",
            f"must be at least 2, got {c.probe_examples}")
    require(not c.probe_task or tf.io.gfile.isdir(c.probe_task), "probe_task",
            f"{c.probe_task!r} is not a directory; give a GLUE or tagging task's directory "
            "such as DATA_DIR/finetuning_data/sst or DATA_DIR/finetuning_data/pos")
    require(c.temperature > 0, "temperature", "must be > 0")
    require(c.gen_weight >= 0 and c.disc_weight >= 0, "gen_weight",
             "gen_weight and disc_weight must be >= 0")
    require(0 < c.generator_hidden_size <= 1 and 0 < c.generator_layers <= 1,
             "generator_hidden_size", "generator_hidden_size and generator_layers are fractions "
             "of the discriminator in (0, 1]")
    gen = c.generator_bert_config()
    require(gen["num_hidden_layers"] >= 1 and gen["hidden_size"] % gen["num_attention_heads"] == 0,
             "generator_hidden_size", f"gives an impossible generator {gen}")
    require(c.do_train != c.do_eval, "do_train",
             "exactly one of do_train and do_eval must be true (as the original)")
    _validate_objective(c)
    require(c.strategy in STRATEGIES, "strategy", f"one of {STRATEGIES}, got {c.strategy!r}")
    require(c.precision in PRECISIONS, "precision", f"one of {PRECISIONS}, got {c.precision!r}")
    require(c.optimizer in OPTIMIZERS, "optimizer", f"one of {OPTIMIZERS}, got {c.optimizer!r}")
    validate_tpu(c)
    require(c.kernels in KERNELS, "kernels", f"one of {KERNELS}, got {c.kernels!r}")
    require(c.keep_checkpoint_max is None or c.keep_checkpoint_max >= 0, "keep_checkpoint_max",
             "must be >= 0 (0 keeps all)")


LR_SCHEDULES = ("polynomial", "wsd")


def _validate_schedule(c: PretrainingConfig) -> None:
    require(c.lr_schedule in LR_SCHEDULES, "lr_schedule",
            f"one of {LR_SCHEDULES}, got {c.lr_schedule!r}")
    if c.lr_schedule == "polynomial":
        require(c.lr_decay_steps == 0, "lr_decay_steps",
                "is for lr_schedule 'wsd'; the polynomial schedule decays over the whole run")
        return
    require(0 <= c.lr_decay_steps <= c.num_train_steps - c.num_warmup_steps, "lr_decay_steps",
            f"must be in [0, num_train_steps - num_warmup_steps] = [0, "
            f"{c.num_train_steps - c.num_warmup_steps}], got {c.lr_decay_steps}: the decay "
            "starts after the warmup")
    require(c.training_algorithm != "two_stage", "lr_schedule",
            "two_stage restarts the polynomial schedule for each stage; use 'polynomial'")


def _validate_objective(c: PretrainingConfig) -> None:
    require(c.objective in OBJECTIVES, "objective",
            f"one of {tuple(OBJECTIVES)}, got {c.objective!r}")
    require(not (OBJECTIVES[c.objective].two_tower_generator
                 and (c.uniform_generator or not c.untied_generator)),
            "electric_objective", "Electric needs its own two-tower generator: set "
            "uniform_generator false and untied_generator true")
    require(c.training_algorithm in TRAINING_ALGORITHMS, "training_algorithm",
            f"one of {TRAINING_ALGORITHMS}, got {c.training_algorithm!r}")
    require(c.embedding_sharing in EMBEDDING_SHARING, "embedding_sharing",
            f"one of {EMBEDDING_SHARING}, got {c.embedding_sharing!r}")
    require(c.objective != "mlm" or not c.uniform_generator, "uniform_generator",
            "the mlm objective trains the generator itself (BERT): it cannot be uniform")
    own_generator = not c.uniform_generator and c.untied_generator and not c.two_tower_generator
    if c.embedding_sharing == "gdes":
        require(c.objective != "mlm" and own_generator, "embedding_sharing",
                "gdes shares a separate single-tower generator's embeddings: it needs an "
                "objective other than mlm, uniform_generator false, untied_generator true and "
                "two_tower_generator false")
    algorithm = c.training_algorithm
    if algorithm != "joint":
        require(c.objective in detection_objectives(), "training_algorithm",
                f"{algorithm} trains a generator against ELECTRA's discriminator: objective must "
                f"be one of {detection_objectives()}, got {c.objective!r}")
        require(own_generator, "training_algorithm",
                f"{algorithm} needs a generator network of its own: uniform_generator false, "
                "untied_generator true, two_tower_generator false")
    if algorithm == "two_stage":
        require(c.generator_hidden_size == 1.0 and c.generator_layers == 1.0,
                "training_algorithm", "two_stage initialises the discriminator with the "
                "generator's weights, so both must be the same size: set generator_hidden_size "
                f"and generator_layers to 1.0 (got {c.generator_hidden_size} and "
                f"{c.generator_layers})")
        require(c.embedding_sharing == "untied", "embedding_sharing",
                "two_stage freezes the generator while the discriminator trains, so they cannot "
                f"share embeddings: use \"untied\" (two_stage's default), got "
                f"{c.embedding_sharing!r}")
        require(c.num_train_steps % 2 == 0, "num_train_steps",
                f"two_stage trains each network for num_train_steps / 2 steps: make it even "
                f"(got {c.num_train_steps})")
    require(c.adversarial_mlm_weight >= 0, "adversarial_mlm_weight", "must be >= 0")
    require(not c.init_optimizer_state or c.init_checkpoint, "init_optimizer_state",
            "takes the optimizer state of init_checkpoint: set init_checkpoint too")
    require(not c.init_optimizer_state or c.embedding_sharing != "gdes", "init_optimizer_state",
            "gdes splits the discriminator's embeddings from the checkpoint's tables, so their "
            "Adam slots have no variable to go to: start the optimizer fresh")
    require(not c.init_optimizer_state or c.training_algorithm != "two_stage",
            "init_optimizer_state", "two_stage's stages and schedule restart are counted from "
            "step 0, so a run continued from a checkpoint's step would skip the first stage: "
            "start the optimizer fresh")


def from_hparams(model_name: str, data_dir: str,
                 hparams: str | dict | None = None) -> PretrainingConfig:
    """Builds the config the way the original's PretrainingConfig(model_name, data_dir, **hparams)
    does, with the size presets applied and every value checked."""
    if not model_name:
        raise ConfigError("--model_name is required (the run's directory under DATA_DIR/models)")
    if not data_dir:
        raise ConfigError("--data_dir is required (holds pretrain_tfrecords/, vocab.txt, models/)")
    user = load_hparams(hparams)
    model_dir = user.get("model_dir") or os.path.join(data_dir, "models", model_name)
    saved = _saved_run(model_dir)
    user = {**saved_hparams(saved, user), **user}
    config = PretrainingConfig(model_name=model_name, data_dir=data_dir)
    update(config, {k: v for k, v in user.items() if k in ("model_size", "init_checkpoint")})
    # A resumed run has its sizes from its saved config, and does not read init_checkpoint.
    architecture = (None if saved is not None
                    else pretrained_architecture(config, user, config.init_checkpoint))
    if architecture is not None and "model_size" not in user:
        config.model_size = preset_size(architecture.discriminator, config.model_size)
    size_defaults = preset(config.model_size)
    update(config, size_defaults)
    if user.get("debug", False):  # the original's debug-mode values, before the user's
        update(config, dict(train_batch_size=8, num_train_steps=20, eval_batch_size=4,
                             iterations_per_loop=1, num_eval_steps=2))
    update(config, original_spellings(user))
    objective = OBJECTIVES.get(config.objective)  # validate() names an unknown one
    if objective is not None and objective.two_tower_generator:
        config.two_tower_generator = True  # as the original: Electric needs the two towers
    if objective is not None and objective.disc_weight is not None and "disc_weight" not in user:
        config.disc_weight = objective.disc_weight
    if config.use_tpu and config.strategy == "default":
        config.strategy = "tpu"

    config.pretrain_tfrecords = config.pretrain_tfrecords or os.path.join(
        data_dir, "pretrain_tfrecords", "pretrain_data.tfrecord*")
    config.eval_tfrecords = config.eval_tfrecords or config.pretrain_tfrecords
    config.vocab_file = config.vocab_file or os.path.join(data_dir, "vocab.txt")
    tokens = count_vocab(config.vocab_file)
    if "vocab_size" not in user and tokens:  # the vocabulary decides, unless told
        config.vocab_size = tokens
    if architecture is not None:
        take_architecture(config, user, architecture)
        take_generator(config, user, architecture)
    config.model_dir = config.model_dir or os.path.join(data_dir, "models", model_name)
    results_dir = os.path.join(config.model_dir, "results")
    config.results_txt = config.results_txt or os.path.join(results_dir, "unsup_results.txt")
    config.results_pkl = config.results_pkl or os.path.join(results_dir, "unsup_results.pkl")
    config.max_predictions_per_seq = int((config.mask_prob + 0.005) * config.max_seq_length)
    validate(config)
    return config
