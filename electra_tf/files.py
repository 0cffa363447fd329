"""Files that appear whole or not at all: every file electra_tf writes under a final name goes
through a temporary name in the same directory and a rename, so that a crash, a kill or a full
disk never leaves a half-written file for a rerun or a reader to trust. tf.io.gfile: local paths
and gs:// alike.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "out", "results.txt")
>>> write_atomically(path, "accuracy = 0.9\\n")
>>> open(path).read()
'accuracy = 0.9\\n'
>>> os.listdir(os.path.dirname(path))
['results.txt']

A write that fails (a full disk, no permission) raises WriteError, `could not write PATH: why`,
one line that the command lines print as their error; the old file under that name, if any,
stays as it was. read_json reads a JSON file back, naming it when it is damaged.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from typing import Any, Iterator

import tensorflow as tf


@contextlib.contextmanager
def renamed_into_place(path: str, suffix: str = "") -> Iterator[str]:
    """Yields a temporary path beside `path` (ending in `suffix`, for writers that want an
    extension, e.g. Keras' ".keras") to write; renames it to `path` when the block ends
    normally, and removes it when the block raises. Creates the directory."""
    directory = os.path.dirname(path)
    if directory:
        tf.io.gfile.makedirs(directory)
    # Unique: two processes writing the same file never share a temporary one.
    temporary = f"{path}.tmp-{uuid.uuid4().hex[:12]}{suffix}"
    try:
        yield temporary
        tf.io.gfile.rename(temporary, path, overwrite=True)
    except BaseException:
        with contextlib.suppress(tf.errors.OpError, OSError):
            if tf.io.gfile.isdir(temporary):
                tf.io.gfile.rmtree(temporary)
            elif tf.io.gfile.exists(temporary):
                tf.io.gfile.remove(temporary)
        raise


class WriteError(OSError):
    """A file could not be written; nothing of it is left, and an older file of its name stays."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"could not write {path}: {reason}")
        self.path = path
        self.reason = reason


def first_line(error: BaseException) -> str:
    """The first line of an error's message (TensorFlow's OpErrors carry theirs in .message)."""
    text = getattr(error, "message", None) or str(error) or type(error).__name__
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def write_atomically(path: str, content: str | bytes) -> None:
    """Writes `content` (text, or bytes) to `path` through a temporary name and a rename;
    raises WriteError when it cannot."""
    try:
        with renamed_into_place(path) as temporary:
            with tf.io.gfile.GFile(temporary, "wb" if isinstance(content, bytes) else "w") as f:
                f.write(content)
    except (tf.errors.OpError, OSError) as e:
        raise WriteError(path, first_line(e)) from e


def read_json(path: str) -> Any:
    """The JSON file at `path`, or None when there is none. A file that is not JSON (cut short,
    zeroed, not UTF-8) raises a ValueError naming it."""
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path) as f:
            return json.load(f)
    except ValueError as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{path} is damaged ({e})") from None
