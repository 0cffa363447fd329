"""What every hparam config shares (pretraining's, fine-tuning's, a kind of task's) to read
--hparams and to fail on a bad value naming the key: ConfigError, require, did_you_mean and
load_hparams. The bottom of the hparam modules: it imports nothing of electra_tf, so that the
tasks and the command lines raise and catch ConfigError without depending on config.py.
"""

from __future__ import annotations

import difflib
import json
import os
from typing import Any


class ConfigError(ValueError):
    """A hyperparameter is unknown, of the wrong type, or impossible."""


def require(ok: bool, key: str, message: str) -> None:
    """Raises ConfigError naming hparam `key` unless `ok`."""
    if not ok:
        raise ConfigError(f"hparam {key!r}: {message}")


def did_you_mean(names: list[str], choices) -> str:
    """The hint ` (did you mean 'x' or 'y'?)` with the choices closest to the unknown names
    (difflib; case ignored), or an empty string."""
    lowered = {choice.lower(): choice for choice in choices}
    close = list(dict.fromkeys(lowered[match] for name in names
                               for match in difflib.get_close_matches(name.lower(), lowered,
                                                                      n=3)))
    return f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""


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
