"""The files beside a model's weights in its directory: the tokenizer's (vocab.txt and
tokenizer_config.json), which every export writes and load_pretrained finds again, and the JSON
configs read from there (tokenizer_config.json, a run's pretrain_config.json, a TF1 export's
electra_config.json). Each file is written whole or not at all (files.write_atomically)."""

from __future__ import annotations

import json
import os

import tensorflow as tf

from electra_tf import files


def write_files(directory: str, contents: dict[str, bytes]) -> list[str]:
    """Writes {name: content} into `directory`, each file whole or not at all. Returns the
    paths."""
    paths = [os.path.join(directory, name) for name in contents]
    for path, data in zip(paths, contents.values()):
        files.write_atomically(path, data)
    return paths


def tokenizer_files(vocab_file: str, do_lower_case: bool,
                    model_max_length: int | None = None) -> dict[str, bytes]:
    """vocab.txt and the tokenizer_config.json with which transformers' ElectraTokenizer(Fast)
    tokenizes as the model was trained (BERT's WordPiece, lower-casing or not)."""
    with tf.io.gfile.GFile(vocab_file, "rb") as f:
        vocab = f.read()
    config = {"do_lower_case": do_lower_case, "tokenizer_class": "ElectraTokenizer"}
    if model_max_length:
        config["model_max_length"] = model_max_length
    return {"vocab.txt": vocab, "tokenizer_config.json": json.dumps(config, indent=2).encode()}


def find_vocab(path: str) -> str | None:
    """The vocabulary of the model at `path`: vocab.txt beside it, else (for a run_pretraining
    output, DATA_DIR/models/NAME) its pretrain_config.json's vocab_file or DATA_DIR/vocab.txt."""
    directory = model_directory(path)
    candidates = [os.path.join(directory, "vocab.txt")]
    run = files.read_json(os.path.join(directory, "pretrain_config.json")) or {}
    if run.get("vocab_file"):
        candidates.append(run["vocab_file"])
    if os.path.basename(os.path.dirname(directory)) == "models":
        candidates.append(os.path.join(os.path.dirname(os.path.dirname(directory)), "vocab.txt"))
    return next((c for c in candidates if tf.io.gfile.exists(c)), None)


def find_do_lower_case(path: str) -> bool | None:
    """do_lower_case from the tokenizer_config.json beside the model at `path`, else from its
    run's pretrain_config.json; None when neither says."""
    directory = model_directory(path)
    for name in ("tokenizer_config.json", "pretrain_config.json"):
        found = (files.read_json(os.path.join(directory, name)) or {}).get("do_lower_case")
        if found is not None:
            return found
    return None


def model_directory(path: str) -> str:
    """The directory holding the model at `path` (a directory, or a file such as a .keras
    file or a TF1 checkpoint prefix)."""
    path = path.rstrip("/")
    return path if tf.io.gfile.isdir(path) else (os.path.dirname(path) or ".")
