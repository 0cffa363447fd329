"""run_pretraining.py end to end, in subprocesses, as a user runs it."""

import glob
import json
import os
import pickle

import keras
import numpy as np
import pytest
import tensorflow as tf

import electra_tf  # noqa: F401  (registers the Keras classes load_model needs)
from conftest import (TEST_DATA, TINY_MODEL, run_script, usage_error, write_sst_files,
                      write_tfrecords)
from electra_tf.finetuning import pos

SCALARS = {"loss", "masked_lm_loss", "disc_loss", "masked_lm_accuracy",
           "masked_lm_accuracy_at_mask",
           "sampled_masked_lm_accuracy", "disc_accuracy", "disc_precision", "disc_recall",
           "disc_auc", "replaced_fraction", "learning_rate", "grad_norm", "examples_per_second"}


def _hparams(**extra):
    return json.dumps({**TINY_MODEL, **extra})


def _event_tags(model_dir):
    tags = {}
    for path in sorted(glob.glob(os.path.join(model_dir, "events.out.tfevents*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append(event.step)
    return tags


def _check(result):
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result.stdout


def test_train_writes_checkpoints_events_and_models_then_resumes(data_dir):
    """One run's outputs, then resuming it: with other model shapes refused, with more steps
    continued."""
    model_dir = data_dir / "models" / "tiny"
    probe = {"probe_task": str(data_dir / "finetuning_data" / "sst"), "probe_steps": 2}
    write_sst_files(data_dir / "finetuning_data" / "sst")
    out = _check(run_script("run_pretraining.py", "--data-dir", str(data_dir), "--model-name",
                            "tiny", "--hparams", _hparams(num_train_steps=4,
                                                          iterations_per_loop=2,
                                                          save_checkpoints_steps=2,
                                                          text_summary_steps=2, **probe)))
    assert "step 2/4" in out and "step 4/4" in out
    assert "step 2 probe: probe_train_accuracy" in out and "step 4 probe:" in out
    assert "step 1/4: the first host call (tracing and compiling) took" in out
    assert "model checks start at step 10, after the warmup (num_warmup_steps 2) and five " \
        "logging intervals, and this run ends at step 4: they never run\n" in out
    assert "restored" not in out
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("ckpt-4")
    assert os.path.exists(model_dir / "ckpt-2.index")
    tags = _event_tags(model_dir)
    assert SCALARS <= set(tags), SCALARS - set(tags)
    assert tags["loss"] == [2, 4] and tags["example"] == [2, 4]  # at multiples of 2
    assert tags["skipped_steps"] == [2, 4] and "health/generator_too_strong" in tags
    assert tags["probe_train_accuracy"] == tags["probe_dev_accuracy"] == [2, 4]
    saved = json.loads((model_dir / "pretrain_config.json").read_text())
    # The config goes to its file, named in one line, not onto the console.
    assert f"config: {model_dir / 'pretrain_config.json'}\n" in out
    assert '"model_hparam_overrides"' not in out
    assert saved["num_train_steps"] == 4 and saved["model_hparam_overrides"]["hidden_size"] == 32
    disc = keras.saving.load_model(model_dir / "discriminator.keras")
    ids = np.full((1, 32), 2000, np.int32)
    logits = disc({"input_ids": ids, "input_mask": np.ones_like(ids),
                   "segment_ids": np.zeros_like(ids)})["logits"]
    assert logits.shape == (1, 32)
    assert os.path.exists(model_dir / "generator.keras")
    reader = tf.train.load_checkpoint(str(model_dir / "ckpt-4"))
    step_4 = {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
              if "optimizer/_iterations" in k}

    # Resuming with other model shapes is refused, naming the keys.
    import run_pretraining

    assert "embedding_size: 16 there, 24 now" in usage_error(
        run_pretraining, "--data_dir", str(data_dir), "--model_name", "tiny", "--hparams",
        _hparams(num_train_steps=6, embedding_size=24))

    # The same command with more steps resumes from step 4, optimizer state and all; the
    # changed hparams are logged and recorded. It probes a tagging task: the pos task's files
    # from the shipped Brown slice. An init_checkpoint only starts a run: this one is not read.
    pos.write_task_files(str(TEST_DATA / "brown_tagged"),
                         str(data_dir / "finetuning_data" / "pos"), train_sentences=100)
    probe = {"probe_task": str(data_dir / "finetuning_data" / "pos"), "probe_steps": 2}
    out = _check(run_script("run_pretraining.py", "--data_dir", str(data_dir), "--model_name",
                            "tiny", "--hparams", _hparams(num_train_steps=6,
                                                          iterations_per_loop=2,
                                                          save_checkpoints_steps=2,
                                                          init_checkpoint="/moved", **probe)))
    assert f"restored step 4 from {model_dir / 'ckpt-4'}" in out
    assert ("hparam 'init_checkpoint' is '/moved', but it only starts a run: this one resumes "
            "at step 4 from its own checkpoint, and started without init_checkpoint") in out
    assert "restored the input position" in out
    assert "step 2/6" not in out and "step 6/6" in out
    assert "resuming at step 4 with changed hparams: num_train_steps 4 -> 6" in out
    assert "step 6 probe: probe_train_accuracy" in out and "probe_dev_unseen_accuracy" in out
    changes = json.loads((model_dir / "hparam_changes.json").read_text())
    # text_summary_steps, not given this time, is the saved run's (config.saved_hparams).
    assert changes == [{"step": 4, "changed": {
        "num_train_steps": [4, 6],
        "probe_task": [str(data_dir / "finetuning_data" / "sst"), probe["probe_task"]]}}]
    assert json.loads((model_dir / "pretrain_config.json").read_text())["num_train_steps"] == 6
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("ckpt-6")
    assert [int(v) for v in step_4.values()] == [4]
    tags = _event_tags(model_dir)
    assert max(tags["loss"]) == 6
    assert tags["probe_dev_unseen_accuracy"] == [6] and tags["probe_dev_accuracy"] == [2, 4, 6]


@pytest.mark.slow
def test_eval_writes_results(data_dir):
    """do_eval reads eval_tfrecords once, saying what it evaluates, with progress lines; and
    training prints progress lines by the clock even when a host call is long."""
    common = ["run_pretraining.py", "--data_dir", str(data_dir), "--model_name", "tiny"]
    out = _check(run_script(*common, "--hparams", _hparams(
        num_train_steps=4, iterations_per_loop=1000, text_summary_steps=0, log_seconds=1e-3)))
    assert "step 3/4 (75.0%)" in out  # by the clock, not at iterations_per_loop
    write_tfrecords(data_dir / "held_out", num_files=2, examples_per_file=24, seed=5)
    held_out = str(data_dir / "held_out" / "*")
    out = _check(run_script(*common, "--hparams", _hparams(
        do_train=False, do_eval=True, num_eval_steps=4, eval_tfrecords=held_out,
        log_seconds=1e-3)))
    checkpoint = data_dir / "models" / "tiny" / "ckpt-4"
    assert (f"evaluating {checkpoint} (step 4) on up to 4 batches of 8 examples from 2 file(s) "
            f"matching {held_out} (eval_tfrecords)") in out
    assert "evaluated 3/4 batches" in out and "evaluated 32 examples (4 batches)" in out
    assert "restored step 4" in out and "disc_auc = " in out
    # The files are read once: 48 examples make 6 batches of 8.
    out = _check(run_script(*common, "--hparams", _hparams(
        do_train=False, do_eval=True, num_eval_steps=10, eval_tfrecords=held_out)))
    assert "the evaluation data ended after 6 batches" in out
    results_dir = data_dir / "models" / "tiny" / "results"
    text = (results_dir / "unsup_results.txt").read_text()
    assert "masked_lm_accuracy = " in text and "disc_loss = " in text
    results = pickle.loads((results_dir / "unsup_results.pkl").read_bytes())
    assert 0.0 <= results["disc_auc"] <= 1.0 and results["masked_lm_loss"] > 0
    assert results["num_examples"] == 48


@pytest.mark.slow
def test_mirrored_strategy_over_two_logical_cpus(data_dir):
    out = _check(run_script("run_pretraining.py", "--data_dir", str(data_dir), "--model_name",
                            "m", "--num_cpu_devices", "2", "--hparams",
                            _hparams(strategy="mirrored", num_train_steps=2,
                                     iterations_per_loop=2, text_summary_steps=2)))
    assert "with 2 replica(s)" in out and "XLA only for the small fused functions" in out
    assert "step 2/2" in out
    result = run_script("run_pretraining.py", "--data_dir", str(data_dir), "--model_name", "m2",
                        "--num_cpu_devices", "2", "--hparams",
                        _hparams(strategy="mirrored", train_batch_size=7), expect_failure=True)
    assert result.returncode != 0
    assert "'train_batch_size' = 7 is not divisible by the 2 replicas" in result.stderr


@pytest.mark.slow
def test_mixed_bfloat16_run(data_dir):
    out = _check(run_script("run_pretraining.py", "--data_dir", str(data_dir), "--model_name",
                            "bf16", "--hparams", _hparams(precision="mixed_bfloat16",
                                                          num_train_steps=2,
                                                          iterations_per_loop=2)))
    assert "precision mixed_bfloat16" in out and "step 2/2" in out


@pytest.mark.parametrize("hparams, message", [
    ('{"mask_prob": 0}', "'mask_prob': must be in (0, 1)"),
    ('{"bogus": 1}', "unknown hparam 'bogus'; every hparam is listed in docs/pretraining.md"),
    ('{"max_seq_length": 64}', "has length 32 but max_seq_length is 64"),
])
def test_bad_input_fails_with_a_clear_message(data_dir, hparams, message):
    import run_pretraining

    assert message in usage_error(run_pretraining, "--data_dir", str(data_dir), "--model_name",
                                  "x", "--hparams", hparams)


def test_missing_tfrecords_and_vocab(tmp_path):
    import run_pretraining

    argv = ("--data_dir", str(tmp_path), "--model_name", "x")
    assert "vocab.txt not found" in usage_error(run_pretraining, *argv)
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    assert "no TFRecords match" in usage_error(run_pretraining, *argv)


def test_input_pipeline_shards_files_per_worker(tmp_path):
    from electra_tf import data
    files = write_tfrecords(tmp_path, num_files=4, examples_per_file=8)
    seen = []
    for worker in range(2):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=worker,
                                         num_replicas_in_sync=2)
        ds = data.pretraining_dataset(files, 8, 32, is_training=False, input_context=ctx)
        batches = [b["input_ids"].numpy() for b in ds.take(2)]
        assert batches[0].shape == (8, 32) and batches[0].dtype == np.int32
        seen.append({tuple(row) for b in batches for row in b})
    assert not seen[0] & seen[1]  # disjoint files, so disjoint examples


def test_a_vocabulary_smaller_than_the_records_ids_fails_before_the_model(data_dir):
    """In process: the check runs before the model is built, and nothing is written to the
    model dir."""
    import run_pretraining
    from conftest import BERT_VOCAB, tiny_config
    from electra_tf import data

    tokens = BERT_VOCAB.read_text(encoding="utf-8").splitlines()
    (data_dir / "vocab.txt").write_text("\n".join(tokens[:4370]) + "\n", encoding="utf-8")
    config = tiny_config(data_dir, num_train_steps=2)
    assert config.vocab_size == 4370
    with pytest.raises(data.InputError) as error:
        run_pretraining.train_or_eval(config, tf.distribute.get_strategy())
    assert "\n" not in str(error.value)
    assert str(data_dir / "vocab.txt") in str(error.value)
    assert "pretrain_data.tfrecord" in str(error.value) and "--vocab_file" in str(error.value)
    assert not (data_dir / "models").exists()


def test_evaluating_a_run_takes_the_hparams_not_given_from_it(data_dir):
    """{"do_train": false, "do_eval": true} evaluates a run pretrained with other shapes than
    the defaults; a shape given that differs is still refused; without a checkpoint nothing is
    taken."""
    from conftest import tiny_config
    from electra_tf import config as config_lib
    from electra_tf.hparam_parsing import ConfigError

    trained = tiny_config(data_dir, num_train_steps=4, generator_hidden_size=0.5,
                          objective="electric")
    model_dir = data_dir / "models" / "tiny"
    model_dir.mkdir(parents=True)
    saved_path = str(model_dir / "pretrain_config.json")
    (model_dir / "pretrain_config.json").write_text(trained.to_json())
    saved = json.loads(trained.to_json())
    evaluate = {"do_train": False, "do_eval": True}
    assert config_lib.from_hparams("tiny", str(data_dir), evaluate).embedding_size == 128

    (model_dir / "ckpt-4.index").write_bytes(b"")
    config = config_lib.from_hparams("tiny", str(data_dir), evaluate)
    config_lib.check_resumable(config, saved, saved_path)
    assert (config.do_train, config.do_eval, config.model_dir) == (False, True, str(model_dir))
    assert config.bert_config() == trained.bert_config()
    assert (config.objective, config.generator_hidden_size, config.num_train_steps) == \
        ("electric", 0.5, 4)
    # Another spelling of the objective is the user's: the saved ones are not taken with it.
    mlm = config_lib.from_hparams("tiny", str(data_dir), {**evaluate, "electra_objective": False})
    assert mlm.objective == "mlm"
    with pytest.raises(ConfigError, match="objective: 'electric' there, 'mlm' now"):
        config_lib.check_resumable(mlm, saved, saved_path)
    wider = config_lib.from_hparams("tiny", str(data_dir), {**evaluate, "embedding_size": 24})
    with pytest.raises(ConfigError, match="embedding_size: 16 there, 24 now"):
        config_lib.check_resumable(wider, saved, saved_path)


def test_a_data_dir_that_does_not_exist_is_named(tmp_path):
    import run_pretraining
    from conftest import tiny_config
    from electra_tf.hparam_parsing import ConfigError

    missing = tmp_path / "no_such_dir"
    with pytest.raises(ConfigError, match=f"--data_dir {missing} does not exist "
                                          r"\(it should hold vocab.txt, "
                                          "pretrain_tfrecords/"):
        run_pretraining.train_or_eval(tiny_config(missing), tf.distribute.get_strategy())
