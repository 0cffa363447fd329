"""What pretraining's and fine-tuning's configs share beyond reading --hparams (hparam_parsing):
the original's TPU hparams (TpuHparams, validate_tpu), setting hparams on a config dataclass with
their types checked (update), and the checks of data_dir and the vocabulary file
(check_data_dir, count_vocab). Above hparam_parsing and below both configs, so that fine-tuning's
config need not import pretraining's for them.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from typing import Any

import tensorflow as tf

from electra_tf import tokenization
from electra_tf.hparam_parsing import ConfigError, did_you_mean, require


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


def valid_keys(cls: type) -> list[str]:
    derived = getattr(cls, "DERIVED", ())
    return sorted([f.name for f in dataclasses.fields(cls)
                   if f.name not in ("model_name", "data_dir") + derived]
                  + list(getattr(cls, "SPELLINGS", ())))


def _check_type(key: str, value: Any, types: dict[str, Any]) -> Any:
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
            raise ConfigError(f"unknown hparam {key!r}{did_you_mean([key], keys)}; every "
                              "hparam is listed in "
                              f"{cls.HPARAMS_DOC}")
        setattr(config, key, _check_type(key, value, types))


def count_vocab(vocab_file: str) -> int | None:
    """The tokens of vocab_file (tokenization.read_vocab: every line one); None when there is
    no such file. A directory or an empty file there is a ConfigError naming it (not a
    vocab_size of 0)."""
    if not tf.io.gfile.exists(vocab_file):
        return None
    if tf.io.gfile.isdir(vocab_file):
        raise ConfigError(f"vocab file {vocab_file} is a directory: put the vocabulary (one "
                          "token a line) there as a file, or point the vocab_file hparam at it")
    tokens = len(tokenization.read_vocab(vocab_file))
    if not tokens:
        raise ConfigError(f"vocab file {vocab_file} is empty: put the vocabulary (one token a "
                          "line) there, or point the vocab_file hparam at it")
    return tokens


def check_data_dir(data_dir: str, inputs: list[str]) -> None:
    """Fails naming --data_dir when it does not exist and an input is to be read from inside it,
    rather than naming the first file missing there."""
    if tf.io.gfile.isdir(data_dir):
        return
    root = os.path.join(os.path.normpath(data_dir), "")
    inside = [os.path.relpath(path, data_dir) for path in inputs
              if path and os.path.normpath(path).startswith(root)]
    if inside:
        raise ConfigError(f"--data_dir {data_dir} does not exist (it should hold "
                          f"{', '.join(inside)}); check the path")
