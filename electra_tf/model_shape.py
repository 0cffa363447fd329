"""The transformer's shape, which pretraining's and fine-tuning's configs share: the size
presets' (bert_config, the original's get_bert_config) and a pretrained model's, which a run that
starts from it takes (pretrained_architecture, preset_size, take_architecture). Below config.py:
it knows no config class, only the fields it reads and sets.
"""

from __future__ import annotations

from typing import Any, Callable

from electra_tf.hparam_parsing import ConfigError

MODEL_SIZES = ("small", "base", "large")

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
    "layer_norm_eps": 1e-12,
}
# BERT config keys that model_hparam_overrides may set (the original's modeling.BertConfig).
BERT_CONFIG_KEYS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob",
    "max_position_embeddings", "type_vocab_size", "initializer_range", "layer_norm_eps",
)


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


# ------------------------------------------------------------------ a pretrained model's shape

# What a pretrained encoder fixes, beyond vocab_size and embedding_size.
ARCHITECTURE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "hidden_act", "max_position_embeddings",
                     "type_vocab_size", "layer_norm_eps")


# The pretrained model's files are read by the checkpoint formats (electra_tf.checkpoints), a
# layer above this one: it hands its reader to read_pretrained_with() as it loads, so that
# model_shape imports nothing above it. electra_tf/__init__.py imports checkpoints, so any import of
# this module has it set.
_pretrained_reader: Callable[[Any, dict[str, Any], str], Any]


def read_pretrained_with(reader: Callable[[Any, dict[str, Any], str], Any]) -> None:
    """Sets what pretrained_architecture() reads a path with (checkpoints.init_architecture)."""
    global _pretrained_reader
    _pretrained_reader = reader


def pretrained_architecture(config, user: dict[str, Any], path: str | None):
    """The architecture (checkpoints.Architecture) of the pretrained model at `path`, which
    fine-tuning and continued pretraining (init_checkpoint) take; None when there is no path,
    or nothing at a default path the user did not give (checkpoints.init_architecture)."""
    if not path:
        return None
    return _pretrained_reader(config, user, path)


def preset_size(sizes, default: str) -> str:
    """The size preset (small, base, large) with this encoder's hidden size and depth, else
    `default`."""
    for size in MODEL_SIZES:
        shape = _ENCODER_SIZES[size]
        if (sizes.hidden_size, sizes.num_hidden_layers) == (shape["hidden_size"],
                                                             shape["num_hidden_layers"]):
            return size
    return default


def take_architecture(config, user: dict[str, Any], architecture) -> None:
    """Sets model_hparam_overrides, embedding_size and vocab_size to the pretrained
    discriminator's. A value the user gave (or implied by the model_size they gave) that
    differs fails naming both; a vocab.txt with more tokens than the model fails too."""
    theirs = architecture.discriminator
    overrides = dict(user.get("model_hparam_overrides", {}))
    ours = {key: (value, "the hparams") for key, value in overrides.items()
            if key in ARCHITECTURE_KEYS}
    if "model_size" in user:  # the size preset fixes the transformer's shape
        implied = bert_config(config.encoder_size, config.vocab_size, overrides)
        ours.update({key: (implied[key], f"model_size {user['model_size']!r}")
                     for key in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                 "intermediate_size") if key not in ours})
    ours.update({key: (user[key], "the hparams") for key in ("embedding_size", "vocab_size")
                 if user.get(key) is not None})
    differ = [f"{key} {getattr(theirs, key)} in the checkpoint, {value} from {where}"
              for key, (value, where) in ours.items() if value != getattr(theirs, key)]
    if "vocab_size" not in user and config.vocab_size > theirs.vocab_size:
        differ.append(f"vocab_size {theirs.vocab_size} in the checkpoint, {config.vocab_size} "
                      f"tokens in {config.vocab_file}")
    if differ:
        raise ConfigError(
            f"init_checkpoint {architecture.source} does not match the configured model: "
            f"{'; '.join(differ)}. Leave these hparams out to take the checkpoint's")
    config.model_hparam_overrides = {**overrides,
                                     **{key: getattr(theirs, key) for key in ARCHITECTURE_KEYS}}
    config.embedding_size = theirs.embedding_size
    config.vocab_size = theirs.vocab_size
