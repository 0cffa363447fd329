"""Fine-tunes a pretrained ELECTRA discriminator (the original's run_finetuning.py, on TF2 and
Keras 3).

  python run_finetuning.py --data_dir DATA_DIR --model_name NAME \\
      --hparams '{"task_names": ["mrpc"]}'

Reads the tasks' data from DATA_DIR/finetuning_data/<task>/ (GLUE's TSV files as GLUE
distributes them, SQuAD's json, MRQA's jsonl, CoNLL-2000's text; or "data_source": "tfds" with
"tfds_data_dir"), the vocabulary from DATA_DIR/models/NAME/vocab.txt or DATA_DIR/vocab.txt and
the pretrained discriminator from DATA_DIR/models/NAME/discriminator.keras (run_pretraining.py's
export; or "init_checkpoint"). Trains num_trials times with seeds seed, seed + 1, ..., evaluates
on the dev sets and writes DATA_DIR/models/NAME/results/<tasks>_results.txt and .json (every
trial, the median, and each task's baseline: what a trivial prediction such as the majority
class scores), each trial's raw outputs (results/<tasks>_outputs_<trial>.npz, which
run_ensemble.py averages), the fine-tuned checkpoints and a SavedModel of each under
DATA_DIR/models/NAME/finetuning_models/ (with "keep_best_trial", the trial with the best dev
score also in <tasks>_best/), and with "write_test_outputs" the leaderboard files under
DATA_DIR/models/NAME/test_predictions/.
Zero-shot tasks are not trained: each trial evaluates the pretrained discriminator as it is.
SIGTERM or Ctrl-C during training writes a checkpoint; rerunning the same command then resumes
that trial and skips the trials that run finished. Rerunning a run that finished (or with other
hparams) trains every trial afresh, as the original does.
"""

from __future__ import annotations

import json
import os
import uuid

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's C++ start-up chatter

from absl import flags  # noqa: E402

import command_line  # noqa: E402  (electra_tf, and TensorFlow, load after the flags are parsed)

FLAGS = flags.FLAGS
command_line.define_run_flags("Location of data files (finetuning_data, models, vocab).",
                               "The name of the pretrained model being fine-tuned.")


def _median(trials: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    import numpy as np
    return {task: {metric: float(np.median([t[task][metric] for t in trials]))
                   for metric in trials[0][task]} for task in trials[0]}


def _baselines(config, dev_data: list, train_splits: dict, tokenizer) -> dict:
    """Each dev split's Task.baseline (result name -> Baseline), fitted on the task's training
    split when the run read it, else on the dev split itself."""
    baselines = {}
    for data in dev_data:
        found = data.task.baseline(config, data, train_splits.get(data.task.name, data),
                                   tokenizer)
        if found is not None:
            baselines[data.task.result_name(data.split)] = found
    return baselines


def _write_results(config, trials: list[dict[str, dict[str, float]]],
                   baselines: dict | None = None, best: dict | None = None) -> dict:
    """The original's results.txt lines ("task: metric: value - ...") per trial, plus JSON
    with the median's benchmark scores (Task.benchmark_scores: the GLUE score); then with
    keep_best_trial the best trial's (`best`: its trial, seed and results), and each task's
    baseline (a trivial prediction's scores, Task.baseline) in the same form, "(baseline: what
    it predicts)"."""
    from electra_tf import files
    from electra_tf.finetuning import trainer

    median = _median(trials)
    baselines = baselines or {}
    summary = {"trials": trials, "median": median,
               "baselines": {name: {"predicts": b.predicts, **b.metrics}
                             for name, b in baselines.items()}}
    if best is not None:
        summary["best_trial"] = best
    for kind in dict.fromkeys(type(task) for task in trainer.make_tasks(config)):
        for name, score in kind.benchmark_scores(median).items():
            summary[f"{name}_median"] = score
    lines = []
    best_row = ([(f"best: trial {best['trial']}, seed {best['seed']}", best["results"])]
                if best is not None else [])
    for label, results in [*((f"trial {i + 1}", t) for i, t in enumerate(trials)),
                           ("median", median), *best_row]:
        for task, metrics in results.items():
            lines.append(f"{task}: " + " - ".join(f"{k}: {v:.2f}" for k, v in metrics.items())
                         + f" ({label})")
    for task, baseline in baselines.items():
        lines.append(f"{task}: " + " - ".join(f"{k}: {v:.2f}" for k, v in
                                              baseline.metrics.items())
                     + f" (baseline: {baseline.predicts})")
    for extension, text in (("txt", "\n".join(lines) + "\n"),
                            ("json", json.dumps(summary, indent=2))):
        files.write_atomically(trainer.results_path(config, extension), text)
    print("\n".join(lines), flush=True)
    return summary


# Hparams that change neither what a trial trains nor its results: an interrupted run may be
# resumed with other values.
_NOT_IN_FINGERPRINT = ("num_trials", "log_steps", "log_seconds", "log_examples",
                       "iterations_per_loop")


class _Trials:
    """Which trials of this run are done, so that a rerun after an interruption (SIGTERM, a
    crash) skips them and resumes the interrupted one. DATA_DIR/models/NAME/finetuning_models/
    <tasks>_run.json holds the run's id and hparams, each finished trial's results, and whether
    the run finished; <trial dir>/trial.json the id of the run that started the trial.

    A rerun of a finished run, or one with other hparams, is a new run: every trial starts
    afresh, its directory deleted, as the original does; so does a trial directory that another
    run left."""

    def __init__(self, config):
        import tensorflow as tf

        self.fingerprint = {k: v for k, v in json.loads(config.to_json()).items()
                            if k not in _NOT_IN_FINGERPRINT}
        self.path = os.path.join(config.pretrained_model_dir, "finetuning_models",
                                 f"{config.task_string}_run.json")
        self.run_id = uuid.uuid4().hex
        self.done: dict[str, dict] = {}
        saved = {}
        if tf.io.gfile.exists(self.path):
            with tf.io.gfile.GFile(self.path) as f:
                try:
                    saved = json.load(f)
                except json.JSONDecodeError:
                    print(f"{self.path} is damaged: the trials start afresh", flush=True)
        if saved.get("fingerprint") == self.fingerprint and not saved.get("finished"):
            self.run_id, self.done = saved["run_id"], saved.get("trials", {})
            print(f"resuming an interrupted run ({len(self.done)} trial(s) done, "
                  f"{self.path})", flush=True)
        self._write(finished=False)

    def _write(self, finished: bool) -> None:
        from electra_tf import files

        files.write_atomically(self.path, json.dumps(
            {"run_id": self.run_id, "fingerprint": self.fingerprint, "trials": self.done,
             "finished": finished}, indent=2))

    def results(self, trial: int) -> dict | None:
        """The results of a trial this run already finished, else None."""
        return self.done.get(str(trial))

    def start(self, model_dir: str) -> None:
        """Keeps a trial this run started (training resumes from its checkpoint); deletes
        anything else in model_dir."""
        import tensorflow as tf

        from electra_tf import files

        marker = os.path.join(model_dir, "trial.json")
        if tf.io.gfile.exists(marker):
            with tf.io.gfile.GFile(marker) as f:
                try:
                    ours = json.load(f).get("run_id") == self.run_id
                except json.JSONDecodeError:
                    ours = False
            if ours:
                return
        if tf.io.gfile.exists(model_dir):
            tf.io.gfile.rmtree(model_dir)  # as the original: a trial starts afresh
        files.write_atomically(marker, json.dumps({"run_id": self.run_id}))

    def finish(self, trial: int, results: dict, last: bool) -> None:
        self.done[str(trial)] = results
        self._write(finished=last)


def _trial_score(tasks: list, config, results: dict[str, dict[str, float]]) -> float:
    """What keep_best_trial compares trials by: the mean over the tasks of their main metric
    on their first dev split (higher is better)."""
    import numpy as np
    return float(np.mean([task.main_metric(results[task.result_name(task.dev_splits(config)[0])])
                          for task in tasks]))


class _BestTrial:
    """keep_best_trial: DATA_DIR/models/NAME/finetuning_models/<tasks>_best/ holds the trial
    with the best dev score so far: saved_model/ (a TF SavedModel), model.weights.h5 (the
    fine-tuned model's Keras weights) and best.json (the run's id, the trial, its seed, score
    and results). It is replaced whole (written beside, then renamed) when a trial beats it.
    A rerun that resumes the run keeps it; a new run deletes it first."""

    def __init__(self, config, run_id: str):
        import tensorflow as tf

        self.config = config
        self.run_id = run_id
        self.path = os.path.join(config.pretrained_model_dir, "finetuning_models",
                                 f"{config.task_string}_best")
        self.best: dict | None = None
        marker = os.path.join(self.path, "best.json")
        aside = self.path + ".old"
        if not tf.io.gfile.exists(marker) and tf.io.gfile.exists(aside):
            # A replacement stopped between its two renames: the previous best is whole there.
            if tf.io.gfile.exists(self.path):
                tf.io.gfile.rmtree(self.path)
            tf.io.gfile.rename(aside, self.path)
        if tf.io.gfile.exists(marker):
            with tf.io.gfile.GFile(marker) as f:
                try:
                    saved = json.load(f)
                except json.JSONDecodeError:
                    saved = {}
            if saved.get("run_id") == run_id:
                self.best = saved
        if self.best is None and tf.io.gfile.exists(self.path):
            tf.io.gfile.rmtree(self.path)

    def consider(self, model, trial: int, seed: int, score: float, results: dict) -> None:
        """Exports the trial when it beats the best so far (a tie keeps the earlier one) or
        is the trial the export already holds (rerun after an interruption)."""
        import tensorflow as tf

        from electra_tf import files, keras_saving, resume

        if self.best is not None and score <= self.best["score"] and \
                trial != self.best["trial"]:
            return
        best = {"run_id": self.run_id, "trial": trial, "seed": seed, "score": score,
                "results": results}
        building = self.path + ".partial"
        if tf.io.gfile.exists(building):
            tf.io.gfile.rmtree(building)
        with resume.writing(building):
            keras_saving.export_saved_model(model, os.path.join(building, "saved_model"),
                                            self.config.vocab_file, self.config.do_lower_case)
            model.save_weights(os.path.join(building, "model.weights.h5"))
        files.write_atomically(os.path.join(building, "best.json"), json.dumps(best, indent=2))
        # The old export is moved aside before the new one takes its name, so that a stop
        # between the renames leaves one whole export (__init__ takes the one aside back).
        aside = self.path + ".old"
        if tf.io.gfile.exists(aside):
            tf.io.gfile.rmtree(aside)
        if tf.io.gfile.exists(self.path):
            tf.io.gfile.rename(self.path, aside)
        tf.io.gfile.rename(building, self.path)
        if tf.io.gfile.exists(aside):
            tf.io.gfile.rmtree(aside)
        self.best = best
        print(f"trial {trial} (seed {seed}) has the best dev score so far ({score:.2f}): "
              f"exported to {self.path}", flush=True)

    def summary(self) -> dict | None:
        return None if self.best is None else {k: self.best[k] for k in
                                                ("trial", "seed", "score", "results")}


def _write_predictions(config, trial: int, records: dict) -> None:
    """The trial's prediction file (finetuning/ensemble.py describes it)."""
    from electra_tf import files
    from electra_tf.finetuning import ensemble

    if not records:
        return
    meta = {"model_name": config.model_name, "task_names": config.task_names, "trial": trial,
            "seed": config.seed + trial - 1, "hparams": json.loads(config.to_json())}
    path = os.path.join(config.results_dir,
                        ensemble.prediction_file_name(config.task_string, trial))
    files.write_atomically(path, ensemble.prediction_file_bytes(meta, records))


def _record(config, data, outputs) -> dict | None:
    """A split's entry of the prediction file, None when the task's outputs cannot be
    averaged (SQuAD with joint_prediction)."""
    averaged = data.task.ensemble_outputs(config, data, outputs)
    if averaged is None:
        return None
    return {"task": data.task.name, "split": data.split,
            "labels": data.task.label_names(config), "row_ids": data.task.row_ids(data),
            "outputs": averaged}


def run(config, strategy=None) -> dict:
    """Every trial: train (do_train), evaluate on the dev sets (do_eval), write test outputs.
    Raises preemption.Preempted when SIGTERM/SIGINT stops a trial (a checkpoint written)."""
    import keras
    import tensorflow as tf

    from electra_tf import distribution, files, hardware, resume
    from electra_tf.finetuning import config as finetuning_config
    from electra_tf.finetuning import ensemble, trainer

    finetuning_config.check_locations(config)
    if strategy is None:
        strategy = distribution.make_strategy(config.strategy, config.tpu_name, config.tpu_zone,
                                              config.gcp_project)
    print(hardware.banner(), flush=True)
    tasks = trainer.make_tasks(config)
    tokenizer = trainer.make_tokenizer(config)

    def load(task, split):
        return trainer.load_split(config, tasks, task, split, tokenizer)

    train_splits = {task.name: load(task, "train") for task in tasks} if config.do_train else {}
    train_data = (trainer.concatenate([split.arrays for split in train_splits.values()])
                  if config.do_train else None)
    dev_data = ([load(task, split) for task in tasks for split in task.dev_splits(config)]
                if config.do_eval else [])
    baselines = _baselines(config, dev_data, train_splits, tokenizer)
    del train_splits  # their examples are no longer needed
    # Read before training, so that a missing or bad test file stops the run at once.
    test_data = []
    if config.write_test_outputs and config.n_writes_test >= 1:
        for task in tasks:
            splits = task.test_splits(config)
            if not splits:
                print(f"{task.name} has no test split to write predictions for", flush=True)
            test_data += [load(task, split) for split in splits]
    # Written once the data has been read, so that a run refused for its data leaves nothing.
    config_path = os.path.join(config.results_dir, f"{config.task_string}_config.json")
    files.write_atomically(config_path, config.to_json())
    print(f"config: {config_path}", flush=True)

    trials = []
    progress = _Trials(config) if config.do_train else None
    best = _BestTrial(config, progress.run_id) if config.keep_best_trial else None
    for trial in range(1, config.num_trials + 1):
        seed = config.seed + trial - 1
        keras.utils.set_random_seed(seed)
        model_dir = config.model_dir(trial)
        print(f"{'=' * 20} trial {trial}/{config.num_trials}: {model_dir} {'=' * 20}", flush=True)
        if progress is not None and progress.results(trial) is not None:
            print(f"trial {trial} finished in an earlier, interrupted run: its results are "
                  "reused", flush=True)
            if config.do_eval:
                trials.append(progress.results(trial))
            continue
        with strategy.scope(), distribution.precision_policy(config.precision):
            model = trainer.build_model(config, tasks)
        if config.do_train:
            if config.init_checkpoint:
                source = trainer.initialise(config, model, tasks)
                print(f"initialised the encoder from {source}", flush=True)
            else:
                print("no init_checkpoint: training from random weights", flush=True)
            progress.start(model_dir)
            trainer.train(config, model, tasks, train_data, strategy, model_dir, seed)
            if config.export_saved_model:
                from electra_tf import keras_saving
                with resume.writing(os.path.join(model_dir, "saved_model")):
                    saved = keras_saving.export_saved_model(
                        model, os.path.join(model_dir, "saved_model"), config.vocab_file,
                        config.do_lower_case)
                print(f"exported the fine-tuned model to {saved}", flush=True)
        elif not any(task.trainable for task in tasks):
            source = trainer.initialise(config, model, tasks)
            print(f"evaluating the pretrained model as it is: {source}", flush=True)
        else:
            latest = tf.train.latest_checkpoint(model_dir)
            if latest is None:
                raise FileNotFoundError(f"do_train is false but {model_dir} holds no "
                                        "checkpoint to evaluate; train first")
            resume.checkpoint(model).restore(latest).expect_partial() \
                .assert_existing_objects_matched()
            print(f"evaluating the fine-tuned checkpoint {latest}", flush=True)
        records = {}
        if config.do_eval:
            results = {}
            for data in dev_data:
                name = data.task.result_name(data.split)
                results[name], outputs = trainer.evaluate(config, model, data, tokenizer, trial)
                records[ensemble.split_key(data.task, data.split)] = _record(config, data,
                                                                             outputs)
            trials.append(results)
            if best is not None:
                best.consider(model, trial, seed, _trial_score(tasks, config, results), results)
            _write_results(config, trials, baselines, best and best.summary())
        if trial <= config.n_writes_test:
            for data in test_data:
                written, outputs = trainer.write_test_outputs(
                    config, model, data, tokenizer, config.test_predictions_dir(trial))
                records[ensemble.split_key(data.task, data.split)] = _record(config, data,
                                                                             outputs)
                print(f"wrote {', '.join(written)}", flush=True)
        _write_predictions(config, trial,
                           {k: v for k, v in records.items() if v is not None})
        if progress is not None:
            progress.finish(trial, trials[-1] if config.do_eval else {},
                            last=trial == config.num_trials)
        # Only what this run trained: an evaluation-only run keeps the checkpoints it read.
        if config.do_train and not config.keep_all_models and trial != config.num_trials:
            tf.io.gfile.rmtree(model_dir)  # gs:// too
    return _median(trials) if trials else {}


def main(argv) -> None:
    from electra_tf import cli
    from electra_tf.finetuning import config as finetuning_config
    from electra_tf.finetuning.task import DataError

    cli.run_training_command(argv, finetuning_config.from_hparams, run, (DataError, ValueError))


if __name__ == "__main__":
    command_line.run(main, "docs/finetuning.md")
