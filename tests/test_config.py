"""Hyperparameters: the original's names, the size presets, and clear errors."""

import json
import re

import pytest

from conftest import tiny_config
from electra_tf import config
from electra_tf.hparam_parsing import ConfigError


def test_defaults_are_the_originals_and_small_preset():
    c = config.from_hparams("m", "/data")
    assert (c.mask_prob, c.gen_weight, c.disc_weight, c.learning_rate) == (0.15, 1.0, 50.0, 5e-4)
    assert (c.weight_decay_rate, c.num_warmup_steps, c.lr_decay_power) == (0.01, 10000, 1.0)
    assert (c.embedding_size, c.max_seq_length, c.train_batch_size) == (128, 128, 128)
    assert c.max_predictions_per_seq == 19  # int((0.15 + 0.005) * 128)
    assert c.pretrain_tfrecords == "/data/pretrain_tfrecords/pretrain_data.tfrecord*"
    assert c.model_dir == "/data/models/m" and c.vocab_file == "/data/vocab.txt"
    bert = c.bert_config()
    assert (bert["hidden_size"], bert["num_hidden_layers"], bert["num_attention_heads"],
            bert["intermediate_size"]) == (256, 12, 4, 1024)
    gen = c.generator_bert_config()
    assert (gen["hidden_size"], gen["num_attention_heads"], gen["intermediate_size"]) == \
        (64, 1, 256)


@pytest.mark.parametrize("size, hidden, layers, embedding, gen_hidden, mask_prob, seq", [
    ("base", 768, 12, 768, 256, 0.15, 512),
    ("large", 1024, 24, 1024, 256, 0.25, 512),
    ("small++", 256, 12, 128, 256, 0.15, 512),
])
def test_size_presets(size, hidden, layers, embedding, gen_hidden, mask_prob, seq):
    c = config.from_hparams("m", "/data", {"model_size": size})
    assert c.bert_config()["hidden_size"] == hidden
    assert c.bert_config()["num_hidden_layers"] == layers
    assert c.resolved_embedding_size() == embedding
    assert c.generator_bert_config()["hidden_size"] == gen_hidden
    assert (c.mask_prob, c.max_seq_length) == (mask_prob, seq)


def test_user_hparams_override_presets_and_debug():
    c = config.from_hparams("m", "/d", {"model_size": "base", "learning_rate": 1e-4,
                                        "debug": True, "num_train_steps": 7,
                                        "model_hparam_overrides": {"num_hidden_layers": 3}})
    assert c.learning_rate == 1e-4 and c.num_train_steps == 7
    assert c.train_batch_size == 8  # debug's
    assert c.bert_config()["hidden_size"] == 144  # the original's debug model


@pytest.mark.parametrize("name", ["h.json", "h.txt"])
def test_hparams_from_a_json_file(tmp_path, name):
    path = tmp_path / name
    path.write_text(json.dumps({"mask_prob": 0.25, "num_train_steps": 1e6}))
    c = config.from_hparams("m", "/d", str(path))
    assert c.mask_prob == 0.25 and c.num_train_steps == 1000000
    assert isinstance(c.num_train_steps, int)


def test_vocab_size_comes_from_the_vocab_file(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(f"t{i}" for i in range(1234)) + "\n")
    assert config.from_hparams("m", str(tmp_path)).vocab_size == 1234
    assert config.from_hparams("m", str(tmp_path), {"vocab_size": 2000}).vocab_size == 2000


def test_a_vocab_file_that_is_a_directory_or_empty_is_named(tmp_path):
    from electra_tf.finetuning import config as finetuning_config

    vocab = tmp_path / "vocab.txt"
    for make, problem in ((vocab.mkdir, "is a directory: put the vocabulary (one token a line) "
                                        "there as a file,"),
                          (vocab.touch, "is empty: put the vocabulary (one token a line) there,")):
        make()
        for from_hparams, hparams in ((config.from_hparams, {}),
                                      (finetuning_config.from_hparams, {"task_names": ["sst"]})):
            with pytest.raises(ConfigError, match="^" + re.escape(
                    f"vocab file {vocab} {problem} or point the vocab_file hparam at it") + "$"):
                from_hparams("m", str(tmp_path), hparams)
        vocab.rmdir() if vocab.is_dir() else vocab.unlink()


@pytest.mark.parametrize("hparams, message", [
    ({"mask_probability": 0.1}, "unknown hparam 'mask_probability' (did you mean 'mask_prob'?); "
                                "every hparam is listed in docs/pretraining.md#hyperparameters"),
    ({"lr": 1e-4}, "unknown hparam 'lr'; every hparam is listed in docs/pretraining.md"),
    ({"mask_prob": 0}, "'mask_prob': must be in (0, 1)"),
    ({"mask_prob": "0.15"}, "'mask_prob' must be float"),
    ({"do_eval": "yes"}, "'do_eval' must be true or false"),
    ({"model_size": "huge"}, "unknown size 'huge'"),
    ({"train_batch_size": 0}, "'train_batch_size': must be at least 1"),
    ({"model_hparam_overrides": {"hiden_size": 3}}, "unknown keys ['hiden_size']"),
    ({"max_seq_length": 1024}, "exceeds max_position_embeddings 512"),
    ({"strategy": "horovod"}, "'strategy': one of"),
    ({"precision": "float16"}, "'precision': one of"),
    ({"do_eval": True}, "exactly one of do_train and do_eval"),
    ({"generator_hidden_size": 2.0}, "'generator_hidden_size'"),
    ({"lr_schedule": "cosine"}, "'lr_schedule': one of ('polynomial', 'wsd')"),
    ({"lr_decay_steps": 10}, "'lr_decay_steps': is for lr_schedule 'wsd'"),
    ({"lr_schedule": "wsd", "num_train_steps": 100, "num_warmup_steps": 10,
      "lr_decay_steps": 91}, "'lr_decay_steps': must be in [0, num_train_steps - "
                             "num_warmup_steps] = [0, 90], got 91"),
    ({"lr_schedule": "wsd", "lr_decay_steps": -1}, "'lr_decay_steps': must be in"),
])
def test_bad_hparams_fail_naming_the_key(hparams, message):
    with pytest.raises(ConfigError) as error:
        config.from_hparams("m", "/d", hparams)
    assert message in str(error.value)


def test_bad_hparams_text(tmp_path):
    with pytest.raises(ConfigError, match="not valid JSON"):
        config.from_hparams("m", "/d", "{mask_prob: 0.1}")
    for missing in ("/nonexistent/h.json", "my.txt"):
        with pytest.raises(ConfigError, match=f"--hparams: no such file '{missing}'"):
            config.from_hparams("m", "/d", missing)
    with pytest.raises(ConfigError, match="is a directory"):
        config.from_hparams("m", "/d", str(tmp_path))
    (tmp_path / "bad.txt").write_text("mask_prob = 0.1\n")
    with pytest.raises(ConfigError, match=r"bad\.txt is not valid JSON"):
        config.from_hparams("m", "/d", str(tmp_path / "bad.txt"))
    with pytest.raises(ConfigError, match="must be a JSON object"):
        config.from_hparams("m", "/d", "[1, 2]")
    with pytest.raises(ConfigError, match="--model_name is required"):
        config.from_hparams("", "/d")


def test_config_round_trips_through_json():
    c = tiny_config()
    assert json.loads(c.to_json())["model_hparam_overrides"]["hidden_size"] == 32


def test_a_resumed_run_keeps_the_start_only_hparams_it_started_with():
    """init_checkpoint and init_optimizer_state act only at step 0: a rerun that omits them or
    gives others records the values the run started from, and says so when they were given.
    The sizes keep the run's spelling (here every size written out, as a run started from
    init_checkpoint saves them)."""
    import dataclasses
    plain = config.from_hparams("m", "/data", {"num_train_steps": 2000})
    saved = {**json.loads(plain.to_json()), "num_train_steps": 1000,
             "model_hparam_overrides": plain.bert_config(),
             "init_checkpoint": "/releases/electra_small", "init_optimizer_state": True}
    kept, notes = config.as_started(plain, saved, 40)
    assert (kept.init_checkpoint, kept.init_optimizer_state, kept.num_train_steps) == (
        "/releases/electra_small", True, 2000)
    assert kept.model_hparam_overrides == plain.bert_config() != plain.model_hparam_overrides
    assert kept.bert_config() == plain.bert_config()
    assert notes == []
    other = dataclasses.replace(plain, init_checkpoint="/elsewhere")
    kept, notes = config.as_started(other, saved, 40)
    assert kept.init_checkpoint == "/releases/electra_small" and kept.init_optimizer_state
    assert notes == ["hparam 'init_checkpoint' is '/elsewhere', but it only starts a run: this "
                     "one resumes at step 40 from its own checkpoint, and keeps the "
                     "'/releases/electra_small' it started with"]
    # A run started afresh stays one: a later init_checkpoint is said unused.
    kept, notes = config.as_started(other, json.loads(plain.to_json()), 40)
    assert kept.init_checkpoint is None and len(notes) == 1


def test_a_run_saved_before_auc_num_thresholds_keeps_the_count_it_logged():
    """Resumed or evaluated, a run whose pretrain_config.json predates auc_num_thresholds counts
    disc_auc at the 1,000 thresholds it logged; a newer run at its own; a given value wins."""
    newer = json.loads(config.from_hparams("m", "/data", {}).to_json())
    older = {k: v for k, v in newer.items() if k != "auc_num_thresholds"}
    assert newer["auc_num_thresholds"] == 200
    assert config.saved_hparams(older, {})["auc_num_thresholds"] == 1000
    assert config.saved_hparams(newer, {})["auc_num_thresholds"] == 200
    assert "auc_num_thresholds" not in config.saved_hparams(older, {"auc_num_thresholds": 50})
    assert config.saved_hparams(None, {}) == {}


def test_fine_tuning_hparams_point_to_their_own_reference():
    from electra_tf.finetuning import config as finetuning_config
    with pytest.raises(ConfigError, match=r"unknown hparam 'learning_rat' \(did you mean "
                       r"'learning_rate'\?\); every hparam is listed in docs/finetuning\.md"):
        finetuning_config.from_hparams("m", "/d", {"learning_rat": 1e-4})
