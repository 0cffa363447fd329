"""Ensembles (finetuning/ensemble.py, run_ensemble.py), the prediction files every trial
writes, and keep_best_trial."""

import json
import shutil

import numpy as np
import pytest

from conftest import BERT_VOCAB, TEST_DATA, TINY_FINETUNING, run_script, write_sst_files
from electra_tf.finetuning import ensemble


def test_trials_write_prediction_files_and_keep_best_trial_exports_the_best(finetuning_dir):
    """Every trial keeps its dev and test outputs (class probabilities with the example ids);
    keep_best_trial exports the trial with the best dev accuracy, reported beside the median
    with its seed, and keep_all_models false keeps only the last trial's checkpoints; the
    ensemble of the two files scores and writes GLUE's file."""
    import run_finetuning
    from electra_tf.finetuning import trainer
    from electra_tf.finetuning.config import from_hparams

    hparams = {**TINY_FINETUNING, "task_names": ["sst"], "num_train_epochs": 1,
               "num_trials": 2, "keep_best_trial": True, "write_test_outputs": True,
               "keep_all_models": False, "seed": 3}
    config = from_hparams("tiny", str(finetuning_dir), hparams)
    run_finetuning.run(config)
    results = finetuning_dir / "models" / "tiny" / "results"
    summary = json.loads((results / "sst_results.json").read_text())
    accuracies = [t["sst"]["accuracy"] for t in summary["trials"]]
    best = int(np.argmax(accuracies)) + 1  # a tie keeps the earlier trial
    assert summary["best_trial"]["trial"] == best
    assert summary["best_trial"]["seed"] == 3 + best - 1
    assert summary["best_trial"]["results"] == summary["trials"][best - 1]
    text = (results / "sst_results.txt").read_text()
    assert f"(best: trial {best}, seed {3 + best - 1})" in text and "(median)" in text

    models = finetuning_dir / "models" / "tiny" / "finetuning_models"
    # Beside the best trial's export, the last trial's checkpoints and the record of finished
    # trials that a rerun resumes from.
    assert sorted(p.name for p in models.iterdir()) == ["sst_best", "sst_model_2", "sst_run.json"]
    exported = models / "sst_best"
    assert json.loads((exported / "best.json").read_text())["trial"] == best
    assert (exported / "saved_model" / "saved_model.pb").exists()
    # The exported weights are the best trial's: they score its dev accuracy again.
    model = trainer.build_model(config, trainer.make_tasks(config))
    model.load_weights(str(exported / "model.weights.h5"))
    tokenizer = trainer.make_tokenizer(config)
    dev = trainer.load_split(config, trainer.make_tasks(config),
                             trainer.make_tasks(config)[0], "dev", tokenizer)
    assert trainer.evaluate(config, model, dev, tokenizer, 99)[0] == \
        summary["trials"][best - 1]["sst"]

    paths = [str(results / f"sst_outputs_{trial}.npz") for trial in (1, 2)]
    members = [ensemble.read_member(path) for path in paths]
    for trial, member in enumerate(members, 1):
        assert set(member.splits) == {"sst:dev", "sst:test"}
        assert member.meta["trial"] == trial and member.meta["seed"] == 3 + trial - 1
        probabilities = member.outputs("sst:dev")["probabilities"]
        assert probabilities.shape == (40, 2)
        np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
        labels = dev.arrays["label"].astype(int)
        assert 100.0 * np.mean(probabilities.argmax(-1) == labels) == pytest.approx(
            summary["trials"][trial - 1]["sst"]["accuracy"])

    out = finetuning_dir / "ensemble"
    report = ensemble.run(paths, [0.75, 0.25], str(out), {})
    averaged = sum(w * m.outputs("sst:dev")["probabilities"].astype(np.float64)
                   for w, m in zip((0.75, 0.25), members))
    split = report["tasks"]["sst"]["splits"]["sst"]
    assert split["ensemble"]["accuracy"] == pytest.approx(
        100.0 * np.mean(averaged.argmax(-1) == labels))
    assert [s["accuracy"] for s in split["members"]] == pytest.approx(accuracies)
    submission = (out / "test_predictions" / "SST-2.tsv").read_text().splitlines()
    assert submission[0] == "index\tprediction" and len(submission) == 25
    assert "(ensemble)" in (out / "results.txt").read_text()


# Hand-made prediction files: the members' outputs are chosen here, the data is real.

def _setup(tmp_path, hparams):
    """A DATA_DIR with the vocab, the config of a run and the loaded splits."""
    from electra_tf.finetuning import trainer
    from electra_tf.finetuning.config import from_hparams

    if not (tmp_path / "vocab.txt").exists():
        shutil.copy(BERT_VOCAB, tmp_path / "vocab.txt")
    config = from_hparams("m", str(tmp_path), {"init_checkpoint": "", **hparams})
    tokenizer = trainer.make_tokenizer(config)
    task = trainer.make_tasks(config)[0]
    return config, task, tokenizer, {
        split: trainer.load_split(config, [task], task, split, tokenizer)
        for split in task.dev_splits(config) + task.test_splits(config)}


def _write_member(path, config, task, splits: dict, trial: int = 1, labels=None) -> str:
    """A prediction file of `splits` (split -> outputs as Task.ensemble_outputs gives them)."""
    records = {ensemble.split_key(task, split): {
        "task": task.name, "split": split,
        "labels": task.label_names(config) if labels is None else labels,
        "row_ids": task.row_ids(data), "outputs": outputs}
        for split, (data, outputs) in splits.items()}
    meta = {"model_name": config.model_name, "task_names": config.task_names, "trial": trial,
            "seed": trial - 1, "hparams": json.loads(config.to_json())}
    with open(path, "wb") as f:
        f.write(ensemble.prediction_file_bytes(meta, records))
    return str(path)


def _sst(tmp_path):
    write_sst_files(tmp_path / "finetuning_data" / "sst")
    return _setup(tmp_path, {"task_names": ["sst"], "max_seq_length": 32})


def _probabilities(rng, n, correct=None, labels=None):
    """[n, 2] probabilities, right on the rows `correct` marks (labels given)."""
    p = rng.uniform(0.55, 0.95, n)
    if labels is None:
        return np.stack([p, 1 - p], -1).astype(np.float32)
    predicted = np.where(correct, labels, 1 - labels)
    return np.where(predicted[:, None] == 1, np.stack([1 - p, p], -1),
                    np.stack([p, 1 - p], -1)).astype(np.float32)


def test_classification_averages_probabilities_and_writes_glue_files(tmp_path):
    config, task, _, splits = _sst(tmp_path)
    dev, test = splits["dev"], splits["test"]
    labels = dev.arrays["label"].astype(int)
    rng = np.random.default_rng(0)
    members = [rng.dirichlet([1, 1], len(dev)).astype(np.float32) for _ in range(3)]
    tests = [rng.dirichlet([1, 1], len(test)).astype(np.float32) for _ in range(3)]
    paths = [_write_member(tmp_path / f"m{i}.npz", config, task,
                           {"dev": (dev, {"probabilities": members[i]}),
                            "test": (test, {"probabilities": tests[i]})}, trial=i + 1)
             for i in range(3)]
    weights = [0.5, 0.3, 0.2]
    report = ensemble.run(paths, weights, str(tmp_path / "out"), {})
    averaged = sum(w * m.astype(np.float64) for w, m in zip(weights, members))
    split = report["tasks"]["sst"]["splits"]["sst"]
    assert split["ensemble"]["accuracy"] == pytest.approx(
        100 * np.mean(averaged.argmax(-1) == labels))
    member_scores = [100 * np.mean(m.argmax(-1) == labels) for m in members]
    assert [s["accuracy"] for s in split["members"]] == pytest.approx(member_scores)
    assert split["median"]["accuracy"] == pytest.approx(np.median(member_scores))
    assert split["best_member"]["accuracy"] == pytest.approx(max(member_scores))
    # The leaderboard file holds the averaged test probabilities' classes, in GLUE's form.
    expected = sum(w * t.astype(np.float64) for w, t in zip(weights, tests)).argmax(-1)
    rows = (tmp_path / "out" / "test_predictions" / "SST-2.tsv").read_text().splitlines()[1:]
    assert [row.split("\t")[1] for row in rows] == [task.labels[i] for i in expected]
    assert [int(row.split("\t")[0]) for row in rows] == test.arrays["eid"].tolist()


def test_regression_averages_the_scores(tmp_path):
    directory = tmp_path / "finetuning_data" / "sts"
    directory.mkdir(parents=True)
    pairs = [("a good film", "a fine film", 4.5), ("dull", "a gem", 0.5),
             ("bad acting", "poor acting", 4.0), ("great", "awful", 0.2),
             ("ok", "fine", 3.5), ("boring plot", "a thrilling plot", 1.0)]
    for split in ("train", "dev"):
        (directory / f"{split}.tsv").write_text("index\tsentence1\tsentence2\tscore\n" + "".join(
            f"{i}\t{a}\t{b}\t{s}\n" for i, (a, b, s) in enumerate(pairs)))
    (directory / "test.tsv").write_text("index\tsentence1\tsentence2\n" + "".join(
        f"{i}\t{a}\t{b}\n" for i, (a, b, _) in enumerate(pairs)))
    config, task, _, splits = _setup(tmp_path, {"task_names": ["sts"], "max_seq_length": 16})
    dev = splits["dev"]
    gold = dev.arrays["label"]
    a = gold + np.array([0.3, -0.3, 0.3, -0.3, 0.3, -0.3])[:len(gold)]
    b = gold[::-1].copy()
    paths = [_write_member(tmp_path / f"{n}.npz", config, task,
                           {"dev": (dev, {"scores": s[:, None].astype(np.float32)})})
             for n, s in (("a", a), ("b", b))]
    report = ensemble.run(paths, [0.75, 0.25], str(tmp_path / "out"), {})
    ensemble_mse = report["tasks"]["sts"]["splits"]["sts"]["ensemble"]["mse"]
    assert ensemble_mse == pytest.approx(task.score(gold, 0.75 * a + 0.25 * b)["mse"], rel=1e-5)


def test_squad_averages_start_and_end_logits_before_the_answer_search(tmp_path):
    """Averaged per window, then the original's answer search: the ensemble finds the span
    neither member ranks first alone when their averaged logits agree on it."""
    directory = tmp_path / "finetuning_data" / "squadv1"
    directory.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        shutil.copy(TEST_DATA / "squad_v1_sample.json", directory / f"{split}.json")
    config, task, tokenizer, splits = _setup(tmp_path, {
        "task_names": ["squadv1"], "max_seq_length": 64, "doc_stride": 16, "max_query_length": 16,
        "joint_prediction": False, "answerable_classifier": False})
    dev = splits["dev"]
    rng = np.random.default_rng(1)
    shape = dev.arrays["input_ids"].shape
    members = [{"start_logits": rng.normal(size=shape).astype(np.float32),
                "end_logits": rng.normal(size=shape).astype(np.float32)} for _ in range(2)]
    paths = [_write_member(tmp_path / f"m{i}.npz", config, task, {"dev": (dev, m)})
             for i, m in enumerate(members)]
    assert len(set(task.row_ids(dev))) == len(dev) > len(dev.examples)  # several windows
    report = ensemble.run(paths, [0.6, 0.4], str(tmp_path / "out"), {})
    averaged = {k: 0.6 * members[0][k].astype(np.float64) + 0.4 * members[1][k]
                for k in members[0]}
    predictions, _, _ = task.predictions(config, dev, averaged, tokenizer)
    written = json.loads((tmp_path / "out" / "dev_predictions" / "squadv1" /
                          "predictions.json").read_text())
    assert written == predictions
    assert report["tasks"]["squadv1"]["splits"]["squadv1"]["ensemble"] == \
        task.score(config, dev.path, predictions, None)


def test_qa_members_that_tokenized_otherwise_are_refused(tmp_path):
    """QA's outputs are per token: members whose windows hold other tokens (another
    vocabulary, lower-casing or question cut) are not averaged position by position, even
    when their windows are as many."""
    import dataclasses

    directory = tmp_path / "finetuning_data" / "squadv1"
    directory.mkdir(parents=True)
    for split in ("dev", "test"):
        shutil.copy(TEST_DATA / "squad_v1_sample.json", directory / f"{split}.json")
    config, task, _, splits = _setup(tmp_path, {
        "task_names": ["squadv1"], "max_seq_length": 64, "doc_stride": 16,
        "max_query_length": 16, "joint_prediction": False, "answerable_classifier": False})
    dev = splits["dev"]
    ids = dev.arrays["input_ids"].copy()
    ids[3, 1] += 1  # one question token read otherwise
    other = dataclasses.replace(dev, arrays={**dev.arrays, "input_ids": ids})
    logits = np.zeros(ids.shape, np.float32)
    paths = [_write_member(tmp_path / f"m{i}.npz", config, task, {
        "dev": (data, {"start_logits": logits, "end_logits": logits})})
        for i, data in enumerate((dev, other))]
    members = [ensemble.read_member(p) for p in paths]
    with pytest.raises(ensemble.EnsembleError, match="row 3 is .*the same tokenization"):
        ensemble.average(members, "squadv1:dev", [0.5, 0.5])


def test_squad_with_joint_prediction_keeps_no_averageable_outputs(tmp_path):
    from electra_tf.finetuning import task_builder

    task = task_builder.get_task("squadv1")
    # What SquadHead returns when predicting with joint_prediction (the original's default).
    beams = {"start_logits": np.zeros((2, 8)), "start_top_log_probs": np.zeros((2, 3)),
             "start_top_index": np.zeros((2, 3)), "answerable_logit": np.zeros(2)}
    assert task.ensemble_outputs(None, None, beams) is None


def test_tagging_averages_each_words_tag_probabilities(tmp_path):
    directory = tmp_path / "finetuning_data" / "chunk"
    directory.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        shutil.copy(TEST_DATA / "chunk_sample.txt", directory / f"{split}.txt")
    config, task, _, splits = _setup(tmp_path, {"task_names": ["chunk"], "max_seq_length": 32})
    dev = splits["dev"]
    n_labels = len(task.labels(config))
    rng = np.random.default_rng(2)
    words = max(len(sentence.words) for sentence in dev.examples)
    assert words < dev.arrays["tag_positions"].shape[1]  # the word axis is the longest sentence
    members = [rng.dirichlet(np.ones(n_labels), (len(dev), words)).astype(np.float32)
               for _ in range(2)]
    paths = [_write_member(tmp_path / f"m{i}.npz", config, task,
                           {"dev": (dev, {"word_probabilities": m})})
             for i, m in enumerate(members)]
    ensemble.run(paths, [0.3, 0.7], str(tmp_path / "out"), {})
    averaged = 0.3 * members[0].astype(np.float64) + 0.7 * members[1]
    lines = (tmp_path / "out" / "dev_predictions" / "chunk" / "chunk.txt").read_text()
    predicted = [line.split()[-1] for line in lines.splitlines() if line]
    expected = []
    for row, sentence in enumerate(dev.examples):
        n = int(dev.arrays["tag_mask"][row].sum())
        labels = [task.labels(config)[i] for i in averaged[row, :n].argmax(-1)]
        expected += task.decode(labels + [task.cut_label] * (len(sentence.words) - n))
    assert predicted == expected
    # A model's own outputs go through ensemble_outputs and back to the same tags.
    logits = rng.normal(size=(*dev.arrays["input_ids"].shape, n_labels))
    back = task.from_ensemble_outputs(config, dev, task.ensemble_outputs(config, dev, logits))
    assert task.predicted_tags(config, dev, back) == task.predicted_tags(config, dev, logits)
    # A tag that appears in the files only after the run shifts the label indices: refused.
    with open(directory / "test.txt", "a") as f:
        f.write("\nlater NN B-LST\n")
    from electra_tf.finetuning import tagging
    tagging._label_set.cache_clear()  # a new process reads the files anew
    with pytest.raises(ensemble.EnsembleError, match="the data changed since the run"):
        ensemble.run(paths, [0.3, 0.7], str(tmp_path / "out2"), {})


def test_fitted_weights_come_from_dev_and_never_from_test(tmp_path):
    """Forward selection on dev gives the member that is right on dev all the weight; the
    test outputs (here: the other member right on every test row) change nothing."""
    config, task, _, splits = _sst(tmp_path)
    dev, test = splits["dev"], splits["test"]
    labels = dev.arrays["label"].astype(int)
    rng = np.random.default_rng(3)
    right = _probabilities(rng, len(dev), np.ones(len(dev), bool), labels)
    half = _probabilities(rng, len(dev), np.arange(len(dev)) % 2 == 0, labels)
    fits = []
    for run, test_outputs in enumerate(([0.9, 0.1], [0.1, 0.9])):
        paths = [_write_member(
            tmp_path / f"r{run}m{i}.npz", config, task,
            {"dev": (dev, {"probabilities": p}),
             "test": (test, {"probabilities": np.tile(np.float32(t), (len(test), 1))})})
            for i, (p, t) in enumerate(((right, test_outputs), (half, test_outputs[::-1])))]
        report = ensemble.run(paths, None, str(tmp_path / f"out{run}"), {})
        fits.append(report["tasks"]["sst"]["weights"])
        assert report["tasks"]["sst"]["weights_from"].startswith("fitted on sst:dev")
    assert fits == [[1.0, 0.0], [1.0, 0.0]]
    # fit_weights sees only the outputs it is given, scored by the caller.
    calls = []
    ensemble.fit_weights([{"p": np.ones(2)}, {"p": np.zeros(2)}],
                         lambda o: calls.append(o["p"].copy()) or -abs(o["p"][0] - 0.3),
                         rounds=10)
    assert len(calls) == 20


def test_one_line_errors_name_the_file(tmp_path):
    config, task, _, splits = _sst(tmp_path)
    dev = splits["dev"]
    p = {"probabilities": np.full((len(dev), 2), 0.5, np.float32)}
    good = [_write_member(tmp_path / f"g{i}.npz", config, task, {"dev": (dev, p)}, trial=i)
            for i in (1, 2)]

    def error(paths, weights=None, output="out"):
        with pytest.raises(ensemble.EnsembleError) as e:
            ensemble.run(paths, weights, str(tmp_path / output), {})
        assert "\n" not in str(e.value)
        return str(e.value)

    assert "missing.npz does not exist" in error([good[0], str(tmp_path / "missing.npz")])
    (tmp_path / "junk.npz").write_text("not a zip")
    assert "junk.npz is not a prediction file" in error([good[0], str(tmp_path / "junk.npz")])
    relabelled = _write_member(tmp_path / "labels.npz", config, task, {"dev": (dev, p)},
                               labels=["neg", "pos"])
    assert "labels.npz predicts the labels ['neg', 'pos'] for sst:dev" in \
        error([good[0], relabelled])
    other_task = tmp_path / "cola.npz"
    member = ensemble.read_member(good[0])
    meta = {**member.meta, "task_names": ["cola"]}
    del meta["format"], meta["splits"]
    other_task.write_bytes(ensemble.prediction_file_bytes(meta, {"sst:dev": {
        "task": "sst", "split": "dev", "labels": ["0", "1"], "row_ids": task.row_ids(dev),
        "outputs": p}}))
    assert "cola.npz holds tasks ['cola']" in error([good[0], str(other_task)])
    with_test = _write_member(tmp_path / "test.npz", config, task,
                              {"dev": (dev, p), "test": (splits["test"], {
                                  "probabilities": np.full((len(splits["test"]), 2), 0.5,
                                                           np.float32)})})
    assert "g1.npz has no outputs for sst:test (" in error([good[0], with_test])
    shuffled = _write_member(tmp_path / "ids.npz", config, task, {"dev": (dev, p)})
    member = ensemble.read_member(shuffled)
    arrays = {**member.arrays, "sst:dev/row_ids": member.row_ids("sst:dev")[::-1]}
    with open(shuffled, "wb") as f:
        np.savez(f, meta=np.array(json.dumps(member.meta)), **arrays)
    assert error([good[0], shuffled]).startswith(f"{shuffled}: the example ids of sst:dev "
                                                 "differ from")
    # With given weights too, before any member is scored on rows it lacks.
    short = tmp_path / "short.npz"
    arrays = {key: value[:-1] if key.startswith("sst:dev/") else value
              for key, value in member.arrays.items()}
    with open(short, "wb") as f:
        np.savez(f, meta=np.array(json.dumps(member.meta)), **arrays)
    assert error([good[0], str(short)], [0.5, 0.5]).startswith(
        f"{short}: the example ids of sst:dev differ from")
    (tmp_path / "exists").mkdir()
    assert "--output_dir " in error(good, output="exists")
    not_meta = tmp_path / "meta.npz"
    with open(not_meta, "wb") as f:
        np.savez(f, meta=np.array(json.dumps(["not", "an", "object"])))
    assert "meta.npz is not a prediction file" in error([good[0], str(not_meta)])
    older = tmp_path / "format1.npz"  # before QA and zero-shot row ids carried checksums
    member = ensemble.read_member(good[1])
    with open(older, "wb") as f:
        np.savez(f, meta=np.array(json.dumps({**member.meta, "format": 1})), **member.arrays)
    assert "format1.npz is a prediction file of format 1; this version reads format 2: write " \
        "it again" in error([good[0], str(older)])
    from electra_tf.hparam_parsing import ConfigError
    for hparams, message in (({"max_seq_lenght": 64}, "did you mean 'max_seq_length'"),
                             ({"max_seq_length": "64"}, "max_seq_length")):
        with pytest.raises(ConfigError, match=message):
            ensemble.run(good, None, str(tmp_path / "out"), hparams)
    for text, message in (("0.5,0.6", "sum to 1.1, not 1"), ("1.5,-0.5", "negative"),
                          ("1", "has 1 weights for 2 prediction files"),
                          ("a,b", "give 'uniform', 'fit'")):
        with pytest.raises(ensemble.EnsembleError, match=message):
            ensemble.parse_weights(text, 2)
    assert not list(tmp_path.glob("out*"))  # nothing half-written


def test_run_ensemble_command_line_errors_are_one_line(tmp_path):
    result = run_script("run_ensemble.py", f"--predictions={tmp_path}/a.npz,{tmp_path}/b.npz",
                        f"--output_dir={tmp_path}/out", "--weights=0.7,0.7",
                        expect_failure=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[0] == \
        "error: --weights '0.7,0.7' sum to 1.4, not 1"


def test_the_best_trials_export_survives_a_resumed_run_and_not_a_new_one(finetuning_dir):
    """keep_best_trial's export belongs to one run: a rerun that resumes it keeps it (a worse
    trial does not replace it, the exported trial run again does); a new run deletes it."""
    import run_finetuning
    from electra_tf.finetuning import trainer
    from electra_tf.finetuning.config import from_hparams

    config = from_hparams("tiny", str(finetuning_dir),
                          {**TINY_FINETUNING, "keep_best_trial": True})
    model = trainer.build_model(config, trainer.make_tasks(config))
    best = run_finetuning._BestTrial(config, "run-a")
    best.consider(model, 1, 0, 60.0, {"sst": {"accuracy": 60.0}})
    marker = finetuning_dir / "models" / "tiny" / "finetuning_models" / "sst_best" / "best.json"
    assert json.loads(marker.read_text())["trial"] == 1
    resumed = run_finetuning._BestTrial(config, "run-a")
    resumed.consider(model, 2, 1, 55.0, {"sst": {"accuracy": 55.0}})
    assert json.loads(marker.read_text())["trial"] == 1
    resumed.consider(model, 1, 0, 50.0, {"sst": {"accuracy": 50.0}})
    assert json.loads(marker.read_text())["score"] == 50.0
    resumed.consider(model, 3, 2, 70.0, {"sst": {"accuracy": 70.0}})
    assert json.loads(marker.read_text())["trial"] == 3
    assert resumed.summary() == {"trial": 3, "seed": 2, "score": 70.0,
                                 "results": {"sst": {"accuracy": 70.0}}}
    # A replacement stopped between its renames (the old export moved aside, the new one not
    # yet in place) loses neither: the rerun takes the one aside back.
    aside = marker.parent.with_name("sst_best.old")
    marker.parent.rename(aside)
    assert run_finetuning._BestTrial(config, "run-a").summary()["trial"] == 3
    assert marker.exists() and not aside.exists()
    run_finetuning._BestTrial(config, "run-b")
    assert not marker.parent.exists()


def test_the_measured_ensembles_table_is_the_committed_records():
    """docs/finetuning.md's table is experiments/ensemble.py's rendering of the committed
    JSON Lines file (the experiment itself reads ../shared and is not run here)."""
    import importlib.util

    from conftest import REPO

    spec = importlib.util.spec_from_file_location("experiments_ensemble",
                                                  REPO / "experiments" / "ensemble.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = REPO / "experiments" / "results" / "ensemble" / "sst_small2_random_init.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["kind"] for r in records].count("member") == 5
    assert module.table(records) in (REPO / "docs" / "finetuning.md").read_text()


def test_keep_best_trial_needs_do_eval_and_a_main_metric(monkeypatch):
    """Refused before training, not after the first trial."""
    from electra_tf.finetuning import task_builder
    from electra_tf.finetuning.config import from_hparams
    from electra_tf.finetuning.task import Task
    from electra_tf.hparam_parsing import ConfigError

    class Unranked(Task):
        name = "unranked"

        def load(self, config, split, tokenizer):
            raise AssertionError("not read")

        def make_head(self, config):
            raise AssertionError("not built")

        def evaluate(self, config, data, outputs, tokenizer, output_dir):
            return {}

    monkeypatch.setitem(task_builder.TASKS, "unranked", Unranked())
    with pytest.raises(ConfigError, match=r"hparam 'keep_best_trial': \['unranked'\] name no "
                                          "main metric"):
        from_hparams("m", "/nonexistent", {"task_names": ["unranked"], "keep_best_trial": True})
    with pytest.raises(ConfigError, match="hparam 'keep_best_trial': chooses among trained "
                                          "trials by their dev scores: needs do_train and "
                                          "do_eval"):
        from_hparams("m", "/nonexistent", {"keep_best_trial": True, "do_eval": False})
