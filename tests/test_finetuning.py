"""Fine-tuning: config resolution, layer-wise learning rates, features, the loss, and an
end-to-end run of run_finetuning.py on a real GLUE-format task."""

import dataclasses
import json
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, TEST_DATA, TINY_FINETUNING, run_script
from electra_tf import optimization
from electra_tf.finetuning import config as finetuning_config
from electra_tf.finetuning.task import (Head, SplitData, Task, TaskHparams, cross_entropy,
                                        pad_rows)
from electra_tf.hparam_parsing import ConfigError


def test_per_task_and_per_size_defaults_as_the_original():
    make = lambda **h: finetuning_config.from_hparams("m", "/nonexistent", h)  # noqa: E731
    assert make(task_names=["rte"]).num_train_epochs == 10.0
    assert make(task_names=["sts"]).num_train_epochs == 10.0
    assert make(task_names=["mnli"]).num_train_epochs == 3.0
    large = make(model_size="large", task_names=["mnli"])
    assert (large.learning_rate, large.layerwise_lr_decay) == (5e-5, 0.9)
    small = make(task_names=["cola"])
    assert (small.learning_rate, small.layerwise_lr_decay, small.embedding_size) == \
        (1e-4, 0.8, 128)
    # What the user sets wins over the per-task and per-size defaults.
    assert make(task_names=["rte"], num_train_epochs=2, model_size="large",
                learning_rate=1e-5).num_train_epochs == 2.0
    assert make(task_names=["rte"]).init_checkpoint == "/nonexistent/models/m"


@pytest.mark.parametrize("hparams, message", [
    ({"task_names": ["mnli", "glue"]},
     "unknown tasks ['glue']; valid tasks: ['cola', 'sst', 'mrpc', 'sts', 'qqp', 'mnli', 'qnli', "
     "'rte', 'wnli', 'squad', 'squadv1', 'newsqa', 'naturalqs', 'triviaqa', 'searchqa', "
     "'hotpotqa', 'chunk', 'pos', 'sst_zeroshot', 'cola_zeroshot']"),
    ({"task_names": ["SST-2", "rte"]}, "unknown tasks ['SST-2'] (did you mean 'sst'?); valid "
     "tasks: ['cola', 'sst'"),
    ({"use_tfrecords_if_existing": True}, "no TFRecords to reuse"),
    ({"num_tpu_cores": 8}, "hparam 'num_tpu_cores': TPUStrategy replicates over every core"),
    ({"tpu_job_name": "worker"}, "hparam 'tpu_job_name': TPUClusterResolver finds"),
    ({"max_unfound_fraction": 1.5}, "hparam 'max_unfound_fraction': must be in [0, 1]"),
    ({"learning_rte": 1e-4}, "unknown hparam 'learning_rte' (did you mean 'learning_rate'?)"),
    ({"task_names": "mnli"}, "hparam 'task_names' must be list"),
    ({"layerwise_lr_decay": 1.5}, "hparam 'layerwise_lr_decay': must be in [0, 1]"),
    ({"model_size": "huge"}, "hparam 'model_size': unknown size 'huge'"),
])
def test_config_errors_name_the_key(hparams, message):
    with pytest.raises(ConfigError) as error:
        finetuning_config.from_hparams("m", "/nonexistent", hparams)
    assert message in str(error.value)


def test_the_registry_names_every_task_and_its_defaults():
    from electra_tf.finetuning import task_builder

    with pytest.raises(ValueError, match=r"unknown task 'conll' \(did you mean 'cola'\?\); "
                                         r"valid tasks: \['cola', .*'chunk'"):
        task_builder.get_task("conll")
    make = lambda name: finetuning_config.from_hparams(  # noqa: E731
        "m", "/nonexistent", {"task_names": [name]})
    # The original's per-task defaults, each from its task; QA's for every QA task (the
    # original's test for "qa" in the name missed naturalqs).
    for name in ("squad", "squadv1", "newsqa", "naturalqs", "hotpotqa"):
        assert (make(name).max_seq_length, make(name).num_train_epochs) == (512, 2.0)
    assert (make("chunk").max_seq_length, make("chunk").num_train_epochs) == (256, 3.0)
    assert (make("pos").max_seq_length, make("pos").num_train_epochs) == (128, 3.0)
    assert not make("sst_zeroshot").do_train


def test_results_are_named_by_their_tasks(tmp_path):
    from electra_tf.finetuning import task_builder

    get = task_builder.get_task
    assert [get("mnli").result_name(s) for s in get("mnli").dev_splits()] == ["mnli", "mnli-mm"]
    assert get("rte").result_name("dev") == "rte"
    config = finetuning_config.from_hparams("m", str(tmp_path), {"task_names": ["newsqa"]})
    directory = tmp_path / "finetuning_data" / "newsqa"
    directory.mkdir(parents=True)
    for name in ("dev.jsonl", "dev-bioasq.jsonl.gz", "dev-drop.jsonl", "train.jsonl"):
        (directory / name).write_text("")
    splits = get("newsqa").dev_splits(config)
    assert splits == ["dev", "bioasq", "drop"]
    assert [get("newsqa").result_name(s) for s in splits] == [
        "newsqa", "newsqa-bioasq", "newsqa-drop"]
    assert get("newsqa").path(config, "bioasq") == str(directory / "dev-bioasq.jsonl.gz")


def test_the_tpu_hparams_fail_in_pretraining_too():
    from electra_tf import config as pretraining_config

    with pytest.raises(ConfigError, match="hparam 'num_tpu_cores'"):
        pretraining_config.from_hparams("m", "/nonexistent", {"num_tpu_cores": 8})


def test_layerwise_lr_multipliers_follow_the_original_formula():
    """The original's _get_layer_lrs with 2 layers and decay 0.8: depths embeddings 0, layer_i
    i + 1, task heads n + 2 = 4, multiplier 0.8^(4 - depth)."""
    paths = ["finetuning/electra/embeddings/word_embeddings/embeddings",
             "finetuning/electra/embeddings/LayerNorm/gamma",
             "finetuning/electra/embeddings_project/kernel",
             "finetuning/electra/layer_0/query/kernel",
             "finetuning/electra/layer_1/output_LayerNorm/beta",
             "finetuning/sst/dense/kernel"]
    got = optimization.layerwise_lr_multipliers(paths, 2, 0.8)
    assert np.allclose([got[p] for p in paths], [0.4096, 0.4096, 0.4096, 0.512, 0.64, 1.0])
    fixed = optimization.layerwise_lr_multipliers(paths, 2, 0.8, fixed=True)
    assert np.allclose([fixed[p] for p in paths], [0.512, 0.512, 0.512, 0.64, 0.8, 1.0])


def test_optimizer_applies_the_multipliers():
    import keras
    variables = [keras.Variable(np.ones(3, "float32"), name=n) for n in ("a", "b")]
    grads = [np.array([1.0, -2.0, 0.5], "float32")] * 2
    opt = optimization.AdamWeightDecay(learning_rate=0.01,
                                       lr_multipliers={variables[1].path: 0.25})
    opt.apply(grads, variables)
    step_a = 1.0 - variables[0].numpy()
    step_b = 1.0 - variables[1].numpy()
    assert np.allclose(step_b, 0.25 * step_a) and np.abs(step_a).min() > 1e-3


@pytest.mark.slow
def test_run_finetuning_end_to_end_on_sst(finetuning_dir):
    hparams = {**TINY_FINETUNING, "task_names": ["sst"], "num_train_epochs": 2,
               "num_trials": 2, "write_test_outputs": True, "n_writes_test": 1,
               "export_saved_model": True}
    result = run_script("run_finetuning.py", f"--data-dir={finetuning_dir}",
                        "--model-name=tiny", f"--hparams={json.dumps(hparams)}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "initialised the encoder from" in result.stdout
    model_dir = finetuning_dir / "models" / "tiny"
    summary = json.loads((model_dir / "results" / "sst_results.json").read_text())
    assert len(summary["trials"]) == 2
    accuracies = [t["sst"]["accuracy"] for t in summary["trials"]]
    assert summary["median"]["sst"]["accuracy"] == pytest.approx(np.median(accuracies))
    assert all(0 <= a <= 100 for a in accuracies)
    text = (model_dir / "results" / "sst_results.txt").read_text()
    assert "sst: accuracy: " in text and "(median)" in text
    assert tf.train.latest_checkpoint(str(model_dir / "finetuning_models" / "sst_model_1"))
    submission = (model_dir / "test_predictions" / "sst_trial_1" / "SST-2.tsv").read_text()
    lines = submission.splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 25
    assert [line.split("\t")[0] for line in lines[1:]] == [str(i) for i in range(24)]
    assert {line.split("\t")[1] for line in lines[1:]} <= {"0", "1"}
    assert not (model_dir / "test_predictions" / "sst_trial_2").exists()  # n_writes_test 1
    served = tf.saved_model.load(str(model_dir / "finetuning_models" / "sst_model_1" /
                                     "saved_model"))
    ids = tf.constant([[101, 2023, 2003, 2307, 102, 0]], tf.int32)
    logits = served.signatures["serving_default"](
        input_ids=ids, input_mask=tf.cast(ids > 0, tf.int32), segment_ids=0 * ids)["sst"]
    assert logits.shape == (1, 2)


@pytest.mark.slow
def test_finetuning_fits_and_evaluates_in_process(finetuning_dir):
    """Trained on the dev sentences themselves, the model fits them (well above chance), and
    its checkpoint evaluates to the same accuracy with do_train false."""
    import run_finetuning
    from electra_tf.finetuning.config import from_hparams

    sst = finetuning_dir / "finetuning_data" / "sst"
    shutil.copy(sst / "dev.tsv", sst / "train.tsv")
    hparams = {**TINY_FINETUNING, "task_names": ["sst"], "num_train_epochs": 50,
               "layerwise_lr_decay": 0.0, "log_steps": 100}
    trained = run_finetuning.run(from_hparams("tiny", str(finetuning_dir), hparams))
    assert trained["sst"]["accuracy"] >= 90.0  # chance: 50
    again = run_finetuning.run(from_hparams("tiny", str(finetuning_dir),
                                            {**hparams, "do_train": False}))
    assert again["sst"]["accuracy"] == pytest.approx(trained["sst"]["accuracy"])


def test_mismatched_init_checkpoint_names_both(finetuning_dir):
    import run_finetuning
    from electra_tf.finetuning.config import from_hparams

    hparams = {**TINY_FINETUNING, "task_names": ["sst"], "embedding_size": 24}
    with pytest.raises(ValueError, match="does not match the configured model"):
        run_finetuning.run(from_hparams("tiny", str(finetuning_dir), hparams))


def test_the_pretrained_models_own_vocabulary_is_used_and_another_refused(finetuning_dir):
    """A model pretrained elsewhere with BERT's 30,522 tokens beside it, and DATA_DIR/vocab.txt
    another (smaller) vocabulary: the model's own is used; the other, given, is refused naming
    both files."""
    from electra_tf.finetuning.config import from_hparams

    other = finetuning_dir / "elsewhere" / "electra"
    other.mkdir(parents=True)
    shutil.copy(finetuning_dir / "models" / "tiny" / "discriminator.keras", other)
    shutil.copy(finetuning_dir / "vocab.txt", other / "vocab.txt")
    tokens = (other / "vocab.txt").read_text(encoding="utf-8").splitlines()
    (finetuning_dir / "vocab.txt").write_text("\n".join(tokens[:4370]) + "\n", encoding="utf-8")
    hparams = {"task_names": ["sst"], "init_checkpoint": str(other)}
    config = from_hparams("run", str(finetuning_dir), hparams)
    assert config.vocab_file == str(other / "vocab.txt") and config.vocab_size == 30522
    given = {**hparams, "vocab_file": str(finetuning_dir / "vocab.txt")}
    with pytest.raises(ConfigError) as error:
        from_hparams("run", str(finetuning_dir), given)
    message = str(error.value)
    assert "\n" not in message and "leave vocab_file out" in message
    assert str(finetuning_dir / "vocab.txt") in message and str(other / "vocab.txt") in message
    # The same tokens in another file are the same vocabulary.
    shutil.copy(other / "vocab.txt", finetuning_dir / "copy.txt")
    assert from_hparams("run", str(finetuning_dir), {
        **hparams, "vocab_file": str(finetuning_dir / "copy.txt")}).vocab_size == 30522


def test_a_data_dir_that_does_not_exist_is_named(tmp_path):
    import run_finetuning
    from electra_tf.finetuning.config import from_hparams

    missing = tmp_path / "no_such_dir"
    with pytest.raises(ConfigError, match=f"--data_dir {missing} does not exist .*vocab.txt"):
        run_finetuning.run(from_hparams("tiny", str(missing), {"task_names": ["sst"]}))
    # A task that reads another task's folder is named by that folder.
    with pytest.raises(ConfigError, match=r"finetuning_data/sst\)"):
        run_finetuning.run(from_hparams("tiny", str(missing), {"task_names": ["sst_zeroshot"]}))


def test_a_misspelled_model_name_lists_the_models_and_writes_nothing(finetuning_dir):
    """The closest names first; no finetuning_models/<task>_run.json is left behind."""
    import run_finetuning
    from electra_tf.finetuning.config import from_hparams

    hparams = {**TINY_FINETUNING, "task_names": ["sst"]}
    (finetuning_dir / "models" / "other").mkdir()
    with pytest.raises(ConfigError) as error:
        run_finetuning.run(from_hparams("tinny", str(finetuning_dir), hparams))
    message = str(error.value)
    assert "\n" not in message and "--model_name 'tinny'" in message
    assert f"{finetuning_dir / 'models' / 'tinny'} does not exist (did you mean 'tiny'?)" in message
    assert "['other', 'tiny']" in message and "init_checkpoint" in message
    assert not (finetuning_dir / "models" / "tinny").exists()
    with pytest.raises(ConfigError, match="models/other holds no pretrained model"):
        run_finetuning.run(from_hparams("other", str(finetuning_dir), hparams))
    assert list((finetuning_dir / "models" / "other").iterdir()) == []


def _squad_v2(directory):
    """The shared SQuAD sample plus two unanswerable questions, as SQuAD 2.0 files."""
    data = json.loads((TEST_DATA / "squad_v1_sample.json").read_text())
    paragraphs = data["data"][0]["paragraphs"]
    for qa in (qa for p in paragraphs for qa in p["qas"]):
        qa["is_impossible"] = False
    paragraphs[0]["qas"].append({"id": "impossible-1", "question": "Who painted the dome?",
                                 "answers": [], "is_impossible": True})
    paragraphs[1]["qas"].append({"id": "impossible-2", "is_impossible": True, "answers": [],
                                 "question": "When did the wind tunnel collapse?"})
    data["version"] = "v2.0"
    directory.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        (directory / f"{split}.json").write_text(json.dumps(data))


def test_the_squad_v2_baseline_answers_nothing(tmp_path):
    """The no-answer baseline scores the share of unanswerable questions; SQuAD 1.1 has
    none."""
    from electra_tf.finetuning import qa, squad
    from electra_tf.finetuning.task import SplitData

    _squad_v2(tmp_path / "squad")
    path = str(tmp_path / "squad" / "dev.json")
    config = finetuning_config.from_hparams("m", str(tmp_path), {"task_names": ["squad"]})
    task = qa.TASKS[0]
    dev = SplitData(task, "dev", {}, squad.read_squad(path, False, True), path=path)
    baseline = task.baseline(config, dev, dev, None)
    assert baseline.predicts == "no answer to every question"
    assert baseline.metrics["exact"] == baseline.metrics["f1"] == pytest.approx(200 / 7)
    assert (baseline.metrics["NoAns_exact"], baseline.metrics["HasAns_exact"]) == (100.0, 0.0)
    assert qa.TASKS[1].baseline(config, dev, dev, None) is None


def test_results_print_and_save_the_baselines_beside_the_scores(tmp_path, capsys):
    import run_finetuning
    from electra_tf.finetuning.task import Baseline

    config = finetuning_config.from_hparams("m", str(tmp_path), {"task_names": ["sst"]})
    summary = run_finetuning._write_results(
        config, [{"sst": {"accuracy": 67.83}}],
        {"sst": Baseline("majority class '1' of train", {"accuracy": 69.0})})
    line = "sst: accuracy: 69.00 (baseline: majority class '1' of train)"
    assert line in capsys.readouterr().out.splitlines()
    results = tmp_path / "models" / "m" / "results"
    assert (results / "sst_results.txt").read_text().splitlines() == [
        "sst: accuracy: 67.83 (trial 1)", "sst: accuracy: 67.83 (median)", line]
    assert json.loads((results / "sst_results.json").read_text())["baselines"] == \
        summary["baselines"] == {"sst": {"predicts": "majority class '1' of train",
                                         "accuracy": 69.0}}


SQUAD_HPARAMS = {**TINY_FINETUNING, "task_names": ["squad"], "max_seq_length": 96,
                 "doc_stride": 48, "max_query_length": 24, "train_batch_size": 4,
                 "eval_batch_size": 4, "predict_batch_size": 4, "beam_size": 4,
                 "n_best_size": 5}


def test_run_finetuning_end_to_end_on_squad_v2_mirrored_over_two_cpus_in_mixed_bfloat16(
        finetuning_dir):
    """The command line on SQuAD 2.0, with a strategy of two replicas and the bfloat16 policy:
    each is a few lines of the run's set-up, and a fresh interpreter (as --num_cpu_devices
    needs) costs seconds, so one run carries all three."""
    _squad_v2(finetuning_dir / "finetuning_data" / "squad")
    hparams = {**SQUAD_HPARAMS, "num_train_epochs": 1, "write_test_outputs": True,
               "strategy": "mirrored", "jit_compile": False, "precision": "mixed_bfloat16"}
    result = run_script("run_finetuning.py", f"--data_dir={finetuning_dir}",
                        "--model_name=tiny", f"--hparams={json.dumps(hparams)}",
                        "--num_cpu_devices=2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "step 4/4" in result.stdout and "loss nan" not in result.stdout
    model_dir = finetuning_dir / "models" / "tiny"
    # The config goes to its file, named in one line, not onto the console.
    assert f"config: {model_dir / 'results' / 'squad_config.json'}\n" in result.stdout
    assert '"doc_stride"' not in result.stdout
    saved = json.loads((model_dir / "results" / "squad_config.json").read_text())
    assert saved["task_names"] == ["squad"] and saved["doc_stride"] == 48
    metrics = json.loads((model_dir / "results" / "squad_results.json").read_text())
    metrics = metrics["median"]["squad"]
    for key in ("exact", "f1", "HasAns_exact", "NoAns_exact", "best_f1", "best_f1_thresh"):
        assert key in metrics
    assert metrics["HasAns_total"] == 5 and metrics["NoAns_total"] == 2
    dev_dir = model_dir / "results" / "squad_predictions" / "squad_1"
    predictions = json.loads((dev_dir / "predictions.json").read_text())
    null_odds = json.loads((dev_dir / "null_odds.json").read_text())
    assert set(predictions) == set(null_odds) and "impossible-2" in predictions
    test = model_dir / "test_predictions" / "squad_trial_1" / "squad"
    written = json.loads((test / "predictions.json").read_text())
    odds = json.loads((test / "null_odds.json").read_text())
    # Test predictions are "" where the null odds exceed qa_na_threshold, as the original.
    assert set(written) == set(odds) and len(written) == 7
    assert all((written[q] == "") == (odds[q] > -2.75) for q in written)


@pytest.mark.slow
def test_squad_v1_fits_its_training_questions(finetuning_dir):
    """Trained on the sample's questions, the model answers them: the whole path (windows,
    gold start conditioning, beam decoding, post-processing, official scorer) lines up."""
    import run_finetuning
    from electra_tf.finetuning.config import from_hparams

    directory = finetuning_dir / "finetuning_data" / "squadv1"
    directory.mkdir(parents=True)
    for split in ("train", "dev"):
        shutil.copy(TEST_DATA / "squad_v1_sample.json", directory / f"{split}.json")
    hparams = {**SQUAD_HPARAMS, "task_names": ["squadv1"], "num_train_epochs": 60,
               "layerwise_lr_decay": 0.0, "log_steps": 200}
    results = run_finetuning.run(from_hparams("tiny", str(finetuning_dir), hparams))
    assert results["squadv1"]["f1"] >= 80.0


def _squad_in_tfds(tmp_path):
    """tensorflow-datasets' mock serving squad/v2.0 as the shared sample and two unanswerable
    questions (the _squad_v2 files, also returned: their dev.json's path)."""
    import tensorflow_datasets as tfds

    _squad_v2(tmp_path / "squad")
    path = tmp_path / "squad" / "dev.json"
    data = json.loads(path.read_text())
    rows = [(p["context"], qa) for p in data["data"][0]["paragraphs"] for qa in p["qas"]]

    def as_dataset(builder, split, **kwargs):
        assert builder.name == "squad" and str(split) in ("train", "validation")
        return tf.data.Dataset.from_generator(lambda: iter([{
            "id": qa["id"], "title": "University_of_Notre_Dame", "context": context,
            "question": qa["question"], "is_impossible": qa["is_impossible"],
            "answers": {"text": [a["text"] for a in qa["answers"]],
                        "answer_start": np.array([a["answer_start"] for a in qa["answers"]],
                                                 np.int32)}} for context, qa in rows]),
            output_signature={
                "id": tf.TensorSpec([], tf.string), "title": tf.TensorSpec([], tf.string),
                "context": tf.TensorSpec([], tf.string), "question": tf.TensorSpec([], tf.string),
                "is_impossible": tf.TensorSpec([], tf.bool),
                "answers": {"text": tf.TensorSpec([None], tf.string),
                            "answer_start": tf.TensorSpec([None], tf.int32)}})

    mock = tfds.testing.mock_data(as_dataset_fn=as_dataset,
                                  policy=tfds.testing.MockPolicy.USE_CODE)
    return mock, str(path)


def test_squad_from_tensorflow_datasets_reads_as_the_json_files(tmp_path):
    """"data_source": "tfds" converts squad/v2.0 into the official json next to the model;
    the questions read from it are the json files' own."""
    from electra_tf.finetuning import qa, squad

    mock, json_path = _squad_in_tfds(tmp_path)
    config = finetuning_config.from_hparams("tiny", str(tmp_path), {
        "task_names": ["squad"], "data_source": "tfds"})
    with mock:
        converted = {split: qa.TASKS[0].path(config, split) for split in ("train", "dev")}
    assert converted["dev"] == str(tmp_path / "models" / "tiny" / "finetuning_data_tfds" /
                                   "squad" / "dev.json")
    for split, is_training in (("train", True), ("dev", False)):
        assert squad.read_squad(converted[split], is_training, True) == \
            squad.read_squad(json_path, is_training, True)


@pytest.mark.slow
def test_squad_from_tensorflow_datasets_trains_and_scores(finetuning_dir, tmp_path):
    import run_finetuning
    from electra_tf.finetuning.config import from_hparams

    mock, _ = _squad_in_tfds(tmp_path)
    hparams = {**SQUAD_HPARAMS, "num_train_epochs": 1, "data_source": "tfds"}
    with mock:
        results = run_finetuning.run(from_hparams("tiny", str(finetuning_dir), hparams))
    assert results["squad"]["HasAns_total"] == 5 and results["squad"]["NoAns_total"] == 2
    converted = json.loads((finetuning_dir / "models" / "tiny" / "finetuning_data_tfds" /
                            "squad" / "dev.json").read_text())
    assert sum(len(p["qas"]) for p in converted["data"][0]["paragraphs"]) == 7


def test_missing_test_file_fails_before_training_and_writes_nothing(finetuning_dir):
    import run_finetuning
    from electra_tf.finetuning.config import from_hparams
    from electra_tf.finetuning.task import DataError

    (finetuning_dir / "finetuning_data" / "sst" / "test.tsv").unlink()
    hparams = {**TINY_FINETUNING, "task_names": ["sst"], "write_test_outputs": True}
    with pytest.raises(DataError, match=r"no sst test file: .*sst/test\.tsv does not exist"):
        run_finetuning.run(from_hparams("tiny", str(finetuning_dir), hparams))
    model_dir = finetuning_dir / "models" / "tiny"
    assert sorted(p.name for p in model_dir.iterdir()) == ["discriminator.keras"]


# A new kind of task, as docs/finetuning.md shows one: is a review longer than
# `long_review_words` words? Its class, its head and its hparam; registered in the test below.


class MeanPoolHead(Head):
    """The mean of the encoder's vectors over the real tokens, to `num_classes` logits."""

    def __init__(self, num_classes: int, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.dense = keras.layers.Dense(num_classes, name="dense")

    def build(self, input_shape):
        self.dense.build((None, input_shape[-1]))
        self.built = True

    def call(self, sequence_output, features, training=None):
        mask = tf.cast(features["input_mask"], sequence_output.dtype)[:, :, None]
        mean = tf.reduce_sum(sequence_output * mask, 1) / tf.reduce_sum(mask, 1)
        return tf.cast(self.dense(mean), tf.float32)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


@dataclasses.dataclass
class LongReviewHparams(TaskHparams):
    long_review_words: int = 12  # a review of more words is long


@dataclasses.dataclass(frozen=True)
class LongReview(Task):
    """Is a review longer than long_review_words words? (a sentence a line in train/dev.txt)"""
    name: str
    hparams_class = LongReviewHparams

    def load(self, config, split, tokenizer):  # read and featurize one split
        path = f"{config.raw_data_dir(self.name)}/{split}.txt"
        sentences = tf.io.gfile.GFile(path).read().splitlines()
        ids = [[101, *row[:config.max_seq_length - 2], 102]
               for row in tokenizer.tokenize_to_ids(sentences)]
        length, words = config.max_seq_length, self.hparams(config).long_review_words
        arrays = {"input_ids": pad_rows(ids, length),
                  "input_mask": pad_rows([[1] * len(row) for row in ids], length),
                  "segment_ids": pad_rows([[]] * len(ids), length),
                  "label": np.array([len(s.split()) > words for s in sentences], np.float32)}
        return SplitData(self, split, arrays, sentences)

    def make_head(self, config):  # called as head(sequence_output, inputs, training=...)
        return MeanPoolHead(2, name=self.name)

    def example_losses(self, config, outputs, batch):  # [B] losses from the head's outputs
        return cross_entropy(outputs, tf.cast(batch["label"], tf.int32))

    def evaluate(self, config, data, outputs, tokenizer, output_dir):  # outputs of all rows
        labels = data.arrays["label"]
        return {"accuracy": 100.0 * float((outputs.argmax(-1) == labels).mean()),
                "long": 100.0 * float(labels.mean())}


def _register_long_review(finetuning_dir, monkeypatch) -> list[str]:
    """LongReview registered as "long" (undone after the test) and its train/dev.txt written;
    returns the dev reviews."""
    from electra_tf.finetuning import task_builder

    monkeypatch.setattr(task_builder, "TASKS", dict(task_builder.TASKS))
    task_builder.register(LongReview("long"))
    rng = np.random.default_rng(0)
    words = "the film was a good bad long slow funny story with great actors".split()
    directory = finetuning_dir / "finetuning_data" / "long"
    directory.mkdir()
    dev = [" ".join(rng.choice(words, size=n)) for n in rng.integers(2, 12, size=16)]
    (directory / "dev.txt").write_text("\n".join(dev) + "\n")
    (directory / "train.txt").write_text("\n".join(
        " ".join(rng.choice(words, size=n)) for n in rng.integers(2, 12, size=48)) + "\n")
    return dev


def test_a_new_task_type_is_one_class(finetuning_dir, monkeypatch):
    """A kind of task the package has never seen (LongReview above: its class, its head and its
    hparam) is registered with one line; its hparam is an --hparams key as any other. It trains
    beside sst and rte in test_multitask_with_a_new_task_type_and_layerwise_decay."""
    _register_long_review(finetuning_dir, monkeypatch)
    with pytest.raises(ConfigError, match="did you mean 'long_review_words'"):
        finetuning_config.from_hparams("tiny", str(finetuning_dir), {"long_review_word": 6})
    config = finetuning_config.from_hparams("tiny", str(finetuning_dir), json.dumps(
        {"task_names": ["long"], "long_review_words": 6}))
    assert LongReview("long").hparams(config).long_review_words == 6
    # docs/finetuning.md's example is this one, as written here.
    doc = (REPO / "docs" / "finetuning.md").read_text(encoding="utf-8")
    block = doc.split("### Adding a task")[1].split("```python\n")[1].split("```")[0]
    code = block[block.index("class MeanPoolHead"):block.index("task_builder.register")]
    assert code.strip() in (REPO / "tests" / "test_finetuning.py").read_text(encoding="utf-8")
    assert 'task_builder.register(LongReview("long"))' in block


def test_multitask_with_a_new_task_type_and_layerwise_decay(finetuning_dir, monkeypatch):
    """Several tasks train jointly (the original's multi-task mode): one encoder, a head per
    task, each example's loss from its own head. Here sst, rte and LongReview, a kind of task
    the package has never seen, on files this test writes; all are scored, and the GLUE
    average is reported over the GLUE tasks."""
    import run_finetuning

    dev_reviews = _register_long_review(finetuning_dir, monkeypatch)
    rte = finetuning_dir / "finetuning_data" / "rte"
    rte.mkdir()
    dev = (finetuning_dir / "finetuning_data" / "sst" / "dev.tsv").read_text().splitlines()[1:]
    pairs = [line.split("\t")[0] for line in dev]
    rows = "".join(f"{i}\t{a}\t{b}\t{'entailment' if i % 2 else 'not_entailment'}\n"
                   for i, (a, b) in enumerate(zip(pairs, pairs[1:] + pairs[:1])))
    for split in ("train", "dev"):
        (rte / f"{split}.tsv").write_text("index\tsentence1\tsentence2\tlabel\n" + rows)
    hparams = {**TINY_FINETUNING, "task_names": ["sst", "rte", "long"], "num_train_epochs": 1,
               "long_review_words": 6}
    config = finetuning_config.from_hparams("tiny", str(finetuning_dir), hparams)
    assert config.num_train_epochs == 1.0 and config.layerwise_lr_decay == 0.8
    results = run_finetuning.run(config)
    assert set(results) == {"sst", "rte", "long"} and 0 <= results["long"]["accuracy"] <= 100
    # The new task read its hparam: the share of dev reviews of more than 6 words.
    assert results["long"]["long"] == pytest.approx(
        100.0 * np.mean([len(s.split()) > 6 for s in dev_reviews]))
    output = finetuning_dir / "models" / "tiny" / "results"
    saved = json.loads((output / "sst,rte,long_config.json").read_text())
    assert saved["long_review_words"] == 6 and saved["doc_stride"] == 128
    summary = json.loads((output / "sst,rte,long_results.json").read_text())
    assert summary["glue_score_median"] == pytest.approx(
        (results["sst"]["accuracy"] + results["rte"]["accuracy"]) / 2)
    # Each GLUE task's majority-class baseline, of its training split (both are balanced: a
    # tie goes to the first label); LongReview defines none.
    assert summary["baselines"] == {
        "sst": {"predicts": "majority class '0' of train", "accuracy": 50.0},
        "rte": {"predicts": "majority class 'entailment' of train", "accuracy": 50.0}}
    # An evaluation-only run deletes none of the checkpoints it evaluates, whatever
    # keep_all_models says (the original's would remove every trial's but the last).
    models = finetuning_dir / "models" / "tiny" / "finetuning_models"
    assert sorted(p.name for p in models.iterdir()) == [
        "sst,rte,long_model_1", "sst,rte,long_run.json"]
    shutil.copytree(models / "sst,rte,long_model_1", models / "sst,rte,long_model_2")
    run_finetuning.run(finetuning_config.from_hparams("tiny", str(finetuning_dir), {
        **hparams, "num_trials": 2, "keep_all_models": False, "do_train": False,
        "do_eval": True}))
    assert sorted(p.name for p in models.iterdir()) == [
        "sst,rte,long_model_1", "sst,rte,long_model_2", "sst,rte,long_run.json"]


def test_the_registry_refuses_a_taken_task_name_or_hparam_name(monkeypatch):
    """A kind's hparams join every run's --hparams, so a name must be new to the registry."""
    from electra_tf.finetuning import task_builder

    monkeypatch.setattr(task_builder, "TASKS", dict(task_builder.TASKS))  # undone after
    with pytest.raises(ValueError, match="a task named 'sst' is registered already"):
        task_builder.register(LongReview("sst"))

    @dataclasses.dataclass
    class Strides(TaskHparams):
        doc_stride: int = 64
        learning_rate: float = 1.0

    @dataclasses.dataclass(frozen=True)
    class Strided(LongReview):
        hparams_class = Strides

    with pytest.raises(ValueError, match=r"Strides of task 'strided' declares hparams that "
                                         r"\{'doc_stride': 'QAHparams', 'learning_rate': "
                                         r"'FinetuningConfig'\} declare already"):
        task_builder.register(Strided("strided"))
    assert "strided" not in task_builder.TASKS


@pytest.mark.slow
def test_mrqa_fits_its_training_questions_and_evaluates_out_of_domain_sets(finetuning_dir):
    """NewsQA-format files (jsonl with a header; gzipped for the out-of-domain dev set) train
    and score through the SQuAD machinery with the MRQA scorer."""
    import run_finetuning
    from electra_tf.finetuning.config import from_hparams
    from test_squad import write_mrqa

    directory = finetuning_dir / "finetuning_data" / "newsqa"
    directory.mkdir(parents=True)
    sample = json.loads((TEST_DATA / "squad_v1_sample.json").read_text())
    for name in ("train.jsonl", "dev.jsonl", "dev-bioasq.jsonl.gz"):
        write_mrqa(directory / name, sample)
    hparams = {**SQUAD_HPARAMS, "task_names": ["newsqa"], "num_train_epochs": 60,
               "layerwise_lr_decay": 0.0, "log_steps": 200}
    results = run_finetuning.run(from_hparams("tiny", str(finetuning_dir), hparams))
    assert set(results) == {"newsqa", "newsqa-bioasq"}
    assert results["newsqa"]["f1"] >= 80.0
    assert results["newsqa-bioasq"] == results["newsqa"]  # the same questions
    predictions = json.loads((finetuning_dir / "models" / "tiny" / "results" /
                              "newsqa_predictions" / "newsqa_1" / "predictions.json").read_text())
    assert set(predictions) == {qa["id"] for p in sample["data"][0]["paragraphs"]
                                for qa in p["qas"]}


def test_the_documented_inference_example_classifies_sentences(finetuning_dir, capsys):
    """docs/finetuning.md's "Classifying your own sentences" block, run as written on a
    fine-tuned trial's SavedModel."""
    import run_finetuning
    from electra_tf.finetuning.config import from_hparams

    hparams = {**TINY_FINETUNING, "task_names": ["sst"], "num_train_epochs": 1,
               "num_trials": 1, "export_saved_model": True}
    run_finetuning.run(from_hparams("tiny", str(finetuning_dir), hparams))
    saved = finetuning_dir / "models" / "tiny" / "finetuning_models" / "sst_model_1" / "saved_model"
    assert (saved / "assets.extra" / "vocab.txt").exists()
    doc = (REPO / "docs" / "finetuning.md").read_text(encoding="utf-8")
    block = doc.split("## Classifying your own sentences")[1].split("```python\n")[1]
    block = block.split("```")[0]
    placeholder = "demo_data/models/quickstart/finetuning_models/sst_model_1/saved_model"
    assert placeholder in block
    capsys.readouterr()
    exec(block.replace(placeholder, str(saved)), {})
    printed = [line.split(" ", 1) for line in capsys.readouterr().out.splitlines()]
    assert [text for _, text in printed] == ["a gorgeous, witty, seductive movie.",
                                             "the plot is nothing but tired cliches."]
    assert {label for label, _ in printed} <= {"0", "1"}
