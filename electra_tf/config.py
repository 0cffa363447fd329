"""Every pretraining hyperparameter in one place, as the original's configure_pretraining.py.

Resolution order (later wins):
  1. the original's defaults (the field defaults below),
  2. the size preset `configs/<model_size>.json` (the paper's Table 6 values, or a released "++"
     model's), then the original's debug-mode values when `debug` is true,
  3. the user's `--hparams`.

Unknown keys, wrong types and impossible values fail here, naming the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import typing
from importlib import resources
from typing import Any

import tensorflow as tf

MODEL_SIZES = ("small", "base", "large")
STRATEGIES = ("default", "one_device", "mirrored", "multi_worker_mirrored", "tpu")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
OPTIMIZERS = ("adamw", "lamb")
KERNELS = ("auto", "fused", "reference")  # modeling.KERNELS: the transformer's implementation

# Transformer sizes from the original's util/training_utils.get_bert_config; heads and FFN width
# follow the hidden size (64-dim heads, 4x FFN) unless model_hparam_overrides says otherwise.
_ENCODER_SIZES = {
    "small": {"hidden_size": 256, "num_hidden_layers": 12},
    "base": {"hidden_size": 768, "num_hidden_layers": 12},
    "large": {"hidden_size": 1024, "num_hidden_layers": 24},
}
# The rest of the original's BertConfig defaults.
_BERT_DEFAULTS = {
    "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02,
}
# BERT config keys that model_hparam_overrides may set (the original's modeling.BertConfig).
BERT_CONFIG_KEYS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob",
    "max_position_embeddings", "type_vocab_size", "initializer_range",
)


class ConfigError(ValueError):
    """A hyperparameter is unknown, of the wrong type, or impossible."""


def bert_config(size: str, vocab_size: int, overrides: dict[str, Any],
                debug: bool = False) -> dict[str, Any]:
    """A transformer's hyperparameters (the original's util/training_utils.get_bert_config)."""
    args = dict(_BERT_DEFAULTS, **_ENCODER_SIZES[size])
    args["vocab_size"] = vocab_size
    args.update(overrides)
    args["num_attention_heads"] = max(1, args["hidden_size"] // 64)
    args["intermediate_size"] = 4 * args["hidden_size"]
    args.update(overrides)
    if debug:  # the original's run_*.py shrink the model in debug mode
        args.update(hidden_size=144, num_hidden_layers=3, num_attention_heads=4,
                    intermediate_size=144 * 4)
    return args


@dataclasses.dataclass(kw_only=True)
class TpuHparams:
    """The original's TPU hparams, shared by pretraining and fine-tuning. num_tpu_cores and
    tpu_job_name configured TPUEstimator; TPUStrategy needs neither (validate_tpu)."""
    use_tpu: bool = False
    num_tpu_cores: int | None = None
    tpu_job_name: str | None = None
    tpu_name: str | None = None
    tpu_zone: str | None = None
    gcp_project: str | None = None


@dataclasses.dataclass
class PretrainingConfig(TpuHparams):
    """Pretraining hyperparameters. Names and meanings are the original's unless marked "ours"."""

    model_name: str
    data_dir: str
    debug: bool = False  # tiny model, few steps (the original's debug mode)
    do_train: bool = True
    do_eval: bool = False

    # Objective. electra_objective=false trains a BERT-style masked LM with the same masking.
    electra_objective: bool = True
    electric_objective: bool = False  # Electric (Clark et al., EMNLP 2020), two-tower generator
    gen_weight: float = 1.0
    disc_weight: float = 50.0
    mask_prob: float = 0.15

    # Optimization
    learning_rate: float = 5e-4
    lr_decay_power: float = 1.0
    weight_decay_rate: float = 0.01
    num_warmup_steps: int = 10000
    optimizer: str = "adamw"  # ours: "adamw" (the original's) or "lamb" for large batches

    # Training loop
    iterations_per_loop: int = 200
    save_checkpoints_steps: int = 1000
    num_train_steps: int = 1000000
    num_eval_steps: int = 100
    keep_checkpoint_max: int = 5  # 0 or None keeps all
    log_steps: int = 0  # ours: console/TensorBoard interval; 0 means every iterations_per_loop
    text_summary_steps: int = 5000  # ours: a sample of inputs/samples/verdicts in TensorBoard

    # Model
    model_size: str = "small"  # small, base, large, or a released preset: small++, base++, large++
    model_hparam_overrides: dict = dataclasses.field(default_factory=dict)
    embedding_size: int | None = None  # BERT hidden size when None
    vocab_size: int = 30522
    do_lower_case: bool = True

    # Generator
    uniform_generator: bool = False
    two_tower_generator: bool = False
    untied_generator_embeddings: bool = False
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
    model_dir: str = ""
    results_txt: str = ""
    results_pkl: str = ""
    max_predictions_per_seq: int = 0  # derived: int((mask_prob + 0.005) * max_seq_length)

    DERIVED: typing.ClassVar[tuple[str, ...]] = ("max_predictions_per_seq",)
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
        """The generator's transformer (the original's get_generator_config)."""
        disc = self.bert_config()
        gen = dict(disc)
        gen["hidden_size"] = int(round(disc["hidden_size"] * self.generator_hidden_size))
        gen["num_hidden_layers"] = int(round(disc["num_hidden_layers"] * self.generator_layers))
        gen["intermediate_size"] = 4 * gen["hidden_size"]
        gen["num_attention_heads"] = max(1, gen["hidden_size"] // 64)
        return gen

    def resolved_embedding_size(self) -> int:
        return self.embedding_size or self.bert_config()["hidden_size"]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


_FIELDS = {f.name: f for f in dataclasses.fields(PretrainingConfig)}
_TYPES = typing.get_type_hints(PretrainingConfig)


def valid_keys(cls: type = PretrainingConfig) -> list[str]:
    derived = getattr(cls, "DERIVED", ())
    return sorted(f.name for f in dataclasses.fields(cls)
                  if f.name not in ("model_name", "data_dir") + derived)


def load_hparams(hparams: str | dict | None) -> dict[str, Any]:
    """--hparams as the original takes it: a JSON object, or the path of a JSON file (any file,
    e.g. <(...), where the original reads only paths ending in .json)."""
    if hparams is None or hparams == "":
        return {}
    if isinstance(hparams, dict):
        return dict(hparams)
    text, where = hparams, "--hparams"
    if not hparams.lstrip().startswith(("{", "[")):  # a path: JSON text would start so
        if os.path.isdir(hparams):
            raise ConfigError(f"--hparams {hparams!r} is a directory; pass the path of a JSON "
                              "file or a JSON object")
        if not os.path.exists(hparams):
            raise ConfigError(f"--hparams: no such file {hparams!r} (nor is it a JSON object "
                              "such as '{\"model_size\": \"small\"}')")
        with open(hparams) as f:
            text, where = f.read(), hparams
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where} is not valid JSON ({e}); pass a JSON object such as "
                          "'{\"model_size\": \"small\"}' or the path of a JSON file") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a JSON object, got {type(value).__name__}")
    return value


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
              "generator_hidden_size", "generator_layers", "untied_generator_embeddings",
              "untied_generator", "uniform_generator", "electra_objective",
              "electric_objective", "two_tower_generator", "debug")


def check_resumable(config: PretrainingConfig, saved: dict[str, Any], where: str) -> None:
    """Fails naming every shape-deciding hparam that differs from the run saved in `where`."""
    def shape(c: dict[str, Any]) -> dict[str, Any]:
        return {"bert": PretrainingConfig(**{k: v for k, v in c.items() if k in _FIELDS})
                .bert_config(), **{k: c.get(k) for k in SHAPE_KEYS}}

    ours, theirs = shape(config.to_dict()), shape(saved)
    differ = [k for k in SHAPE_KEYS if ours[k] != theirs[k]]
    if ours["bert"] != theirs["bert"] and not differ:
        differ = ["model_size"]
    if differ:
        details = ", ".join(f"{k}: {theirs[k]!r} there, {ours[k]!r} now" for k in differ)
        raise ConfigError(f"{where} holds a run with other model shapes ({details}); the "
                          "checkpoints cannot resume with these hparams. Use the saved values "
                          "or a new --model_name")


def _check_type(key: str, value: Any, types: dict[str, Any] = _TYPES) -> Any:
    expected = types[key]
    args = typing.get_args(expected)
    allowed = tuple(a for a in args if a is not type(None)) if args else (expected,)
    if value is None and (type(None) in args):
        return value
    if float in allowed and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if int in allowed and isinstance(value, float) and value.is_integer() and bool not in allowed:
        return int(value)  # JSON writes 1e6 as a float
    if bool in allowed and not isinstance(value, bool):
        raise ConfigError(f"hparam {key!r} must be true or false, got {value!r}")
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        names = " or ".join(t.__name__ for t in allowed)
        raise ConfigError(f"hparam {key!r} must be {names}, got {value!r}")
    return value


def update(config, hparams: dict[str, Any]) -> None:
    """Sets hparams on a config dataclass, failing on unknown keys and wrong types."""
    cls = type(config)
    keys = valid_keys(cls)
    types = typing.get_type_hints(cls)
    for key, value in hparams.items():
        if key not in keys:
            close = difflib.get_close_matches(key, keys, n=3)
            hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
            raise ConfigError(f"unknown hparam {key!r}{hint}; every hparam is listed in "
                              f"{cls.HPARAMS_DOC}")
        setattr(config, key, _check_type(key, value, types))


def require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"hparam {key!r}: {message}")


def validate_tpu(c: TpuHparams) -> None:
    """The TPU hparams are consistent; those TPUStrategy has no use for fail, saying why."""
    require(c.strategy != "tpu" or c.tpu_name or c.use_tpu, "strategy",
            "\"tpu\" needs tpu_name (or use_tpu on a TPU VM)")
    require(c.num_tpu_cores is None, "num_tpu_cores",
            "TPUStrategy replicates over every core of the TPU named by tpu_name (it takes no "
            "core count, unlike the original's TPUEstimator); leave num_tpu_cores out and pick "
            "the TPU size instead")
    require(c.tpu_job_name is None, "tpu_job_name",
            "TPUClusterResolver finds the TPU's worker job itself (the original passed this "
            "to TPUEstimator); leave tpu_job_name out")


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
    require(c.learning_rate > 0, "learning_rate", "must be > 0")
    require(c.temperature > 0, "temperature", "must be > 0")
    require(c.gen_weight >= 0 and c.disc_weight >= 0, "gen_weight",
             "gen_weight and disc_weight must be >= 0")
    require(0 < c.generator_hidden_size <= 1 and 0 < c.generator_layers <= 1,
             "generator_hidden_size", "generator_hidden_size and generator_layers are fractions "
             "of the discriminator in (0, 1]")
    gen = c.generator_bert_config()
    require(gen["num_hidden_layers"] >= 1 and gen["hidden_size"] % gen["num_attention_heads"] == 0,
             "generator_hidden_size", f"gives an impossible generator {gen}")
    if not c.untied_generator:
        require(c.generator_hidden_size == 1.0 and c.generator_layers == 1.0, "untied_generator",
                 "false ties every generator weight to the discriminator, which needs "
                 "generator_hidden_size = generator_layers = 1.0")
    require(c.do_train != c.do_eval, "do_train",
             "exactly one of do_train and do_eval must be true (as the original)")
    require(not (c.electric_objective and (c.uniform_generator or not c.untied_generator)),
             "electric_objective", "Electric needs its own two-tower generator: set "
             "uniform_generator false and untied_generator true")
    require(c.strategy in STRATEGIES, "strategy", f"one of {STRATEGIES}, got {c.strategy!r}")
    require(c.precision in PRECISIONS, "precision", f"one of {PRECISIONS}, got {c.precision!r}")
    require(c.optimizer in OPTIMIZERS, "optimizer", f"one of {OPTIMIZERS}, got {c.optimizer!r}")
    validate_tpu(c)
    require(c.kernels in KERNELS, "kernels", f"one of {KERNELS}, got {c.kernels!r}")
    require(c.keep_checkpoint_max is None or c.keep_checkpoint_max >= 0, "keep_checkpoint_max",
             "must be >= 0 (0 keeps all)")


def from_hparams(model_name: str, data_dir: str,
                 hparams: str | dict | None = None) -> PretrainingConfig:
    """Builds the config the way the original's PretrainingConfig(model_name, data_dir, **hparams)
    does, with the size presets applied and every value checked."""
    if not model_name:
        raise ConfigError("--model_name is required (the run's directory under DATA_DIR/models)")
    if not data_dir:
        raise ConfigError("--data_dir is required (holds pretrain_tfrecords/, vocab.txt, models/)")
    user = load_hparams(hparams)
    config = PretrainingConfig(model_name=model_name, data_dir=data_dir)
    update(config, {k: v for k, v in user.items() if k == "model_size"})
    size_defaults = preset(config.model_size)
    update(config, size_defaults)
    if user.get("debug", False):  # the original's debug-mode values, before the user's
        update(config, dict(train_batch_size=8, num_train_steps=20, eval_batch_size=4,
                             iterations_per_loop=1, num_eval_steps=2))
    update(config, user)
    if config.electric_objective:
        config.two_tower_generator = True  # as the original: Electric needs the two towers
    if config.use_tpu and config.strategy == "default":
        config.strategy = "tpu"

    config.pretrain_tfrecords = config.pretrain_tfrecords or os.path.join(
        data_dir, "pretrain_tfrecords", "pretrain_data.tfrecord*")
    config.eval_tfrecords = config.eval_tfrecords or config.pretrain_tfrecords
    config.vocab_file = config.vocab_file or os.path.join(data_dir, "vocab.txt")
    if "vocab_size" not in user and tf.io.gfile.exists(config.vocab_file):
        with tf.io.gfile.GFile(config.vocab_file) as f:  # the vocabulary decides, unless told
            config.vocab_size = sum(1 for _ in f)
    config.model_dir = config.model_dir or os.path.join(data_dir, "models", model_name)
    results_dir = os.path.join(config.model_dir, "results")
    config.results_txt = config.results_txt or os.path.join(results_dir, "unsup_results.txt")
    config.results_pkl = config.results_pkl or os.path.join(results_dir, "unsup_results.pkl")
    config.max_predictions_per_seq = int((config.mask_prob + 0.005) * config.max_seq_length)
    validate(config)
    return config
