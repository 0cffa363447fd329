"""Ensembles (finetuning/ensemble.py, run_ensemble.py), the prediction files every trial
writes, and keep_best_trial."""

import json

import numpy as np
import pytest

from conftest import TINY_FINETUNING, run_script
from electra_tf.finetuning import ensemble


def test_trials_write_prediction_files_and_keep_best_trial_exports_the_best(finetuning_dir):
    """Every trial keeps its dev and test outputs (class probabilities with the example ids);
    keep_best_trial exports the trial with the best dev accuracy, reported beside the median
    with its seed; the ensemble of the two files scores and writes GLUE's file."""
    import keras
    import run_finetuning
    from electra_tf.finetuning import trainer
    from electra_tf.finetuning.config import from_hparams

    hparams = {**TINY_FINETUNING, "task_names": ["sst"], "num_train_epochs": 1,
               "num_trials": 3, "keep_best_trial": True, "write_test_outputs": True,
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

    exported = finetuning_dir / "models" / "tiny" / "finetuning_models" / "sst_best"
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
    del keras

    paths = [str(results / f"sst_outputs_{trial}.npz") for trial in (1, 2, 3)]
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
    report = ensemble.run(paths, [0.5, 0.25, 0.25], str(out), {})
    averaged = sum(w * m.outputs("sst:dev")["probabilities"].astype(np.float64)
                   for w, m in zip((0.5, 0.25, 0.25), members))
    split = report["tasks"]["sst"]["splits"]["sst"]
    assert split["ensemble"]["accuracy"] == pytest.approx(
        100.0 * np.mean(averaged.argmax(-1) == labels))
    assert [s["accuracy"] for s in split["members"]] == pytest.approx(accuracies)
    submission = (out / "test_predictions" / "SST-2.tsv").read_text().splitlines()
    assert submission[0] == "index\tprediction" and len(submission) == 25
    assert "(ensemble)" in (out / "results.txt").read_text()
