"""ELECTRA against BERT per pretraining FLOP, and the paper's Table 5 objectives, in miniature.

  python experiments/efficiency.py --out DIR [--budget smoke|pilot|full]
      [--tasks sst,sts,qnli] [--task_data DIR] [--objectives electra,mlm,...]
      [--shared_data ../shared/data] [--workers N] [--report_dir DIR]

One command runs the whole experiment and can be rerun to resume (finished runs are skipped):
  1. data: the pretraining text (experiments/downstream.py: Wikipedia and Brown without its
     held-out tail) to TFRecords with pretrain_data/build_pretraining_dataset.py, and the
     downstream tasks in GLUE's formats (or --task_data: any directory of GLUE-format tasks,
     each with test_labels.tsv beside test.tsv).
  2. pretraining through run_pretraining.py: one run per objective, all of one model size,
     sequence length, batch, data, seed and schedule shape (linear warmup over the same share of
     the run, then linear decay to 0). ELECTRA runs `electra_steps`; BERT (`mlm`) runs the steps
     that cost the same pretraining FLOPs (electra_tf.flops), so it gets more of them; both
     keep a checkpoint at each of `curve_points` FLOP budgets (halving from the end) for the
     score-vs-FLOPs curve. The Table 5 objectives (electra_15, replace_mlm, all_tokens_mlm)
     run `electra_steps`, as the paper compares them at equal steps. The plan (budgets,
     objectives, runs) is experiments/efficiency_plan.py.
  3. fine-tuning through run_finetuning.py: every kept checkpoint's discriminator (exported to
     a .keras model) and a randomly initialised one (no pretraining) on every task, `trials`
     seeds each. The learning rate is swept at each objective's last checkpoint and without
     pretraining, and chosen per model and task on the selection split (dev.tsv); a curve's
     earlier checkpoints take the rate their objective's last checkpoint chose for the task.
     The reported numbers are the test split's (test.tsv, predictions written by
     run_finetuning.py's write_test_outputs and scored here against test_labels.tsv), never
     tuned on.
  4. a linear probe (electra_tf.probe, run_pretraining.py's probe_task) of every kept
     checkpoint's frozen discriminator and of the random one on every task.
  5. the report: raw results as JSON under DIR/results/, and into --report_dir the tables
     (efficiency_results.md: medians with IQR and min-max over seeds, which differences exceed
     the seed noise) and the PNG plots (matplotlib).

Progress goes to stdout, each run's output to DIR/logs/.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (REPO, os.path.join(REPO, "experiments")):
    if path not in sys.path:
        sys.path.insert(0, path)

import downstream  # noqa: E402
import efficiency_plan  # noqa: E402
import report  # noqa: E402
from efficiency_plan import Budget, PretrainRun  # noqa: E402

NO_PRETRAINING = "no_pretraining"
FINETUNE_SEED = 0


# ----------------------------------------------------------------------------- bookkeeping

def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def write_json(path: str, value: Any) -> None:
    """Complete or absent: written under a temporary name, then renamed."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(value, f, indent=2, sort_keys=True)
    os.replace(path + ".tmp", path)


def read_json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


# Set by main(): with several workers, each run's TensorFlow gets a share of the cores.
CHILD_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}


def share_cores(workers: int) -> None:
    """Limits each run to cpu_count / workers threads (TensorFlow's and oneDNN's pools), so
    that `workers` runs side by side do not oversubscribe the cores."""
    from electra_tf import hardware

    if workers > 1:
        CHILD_ENV.update(hardware.thread_limits(workers))


def side_by_side(workers: int, function: Callable[[Any], Any], items: Sequence[Any]) -> list:
    """[function(item) for item in items], `workers` at a time. After the first failure no
    further item starts; the failure is raised when the running ones end (what they finish is
    kept for the rerun that resumes)."""
    failures: list[BaseException] = []

    def unless_failed(item: Any) -> Any:
        if failures:
            return None
        try:
            return function(item)
        except BaseException as e:
            failures.append(e)
            raise

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(unless_failed, item) for item in items]
    if failures:
        raise failures[0]
    return [future.result() for future in futures]


class Stopped(Exception):
    """The sitting's deadline came: no run starts, or a run was stopped (SIGTERM: it wrote a
    checkpoint and resumes exactly when the command is run again; `usage` is what it spent)."""

    def __init__(self, message: str, usage: dict[str, float] | None = None):
        super().__init__(message)
        self.usage = usage or {}


def run_logged(command: Sequence[str], log_path: str,
               deadline: float | None = None) -> dict[str, float]:
    """Runs a command with its output in log_path; fails naming the log. Returns its wall
    time, its own CPU time (user + system, which the machine's other load inflates less than
    the wall time) and the load average when it ended. `deadline` (a time.time()): the command
    gets SIGTERM then, and Stopped is raised once it has exited as SIGTERM asks (143)."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    start = time.time()
    with open(log_path, "w") as out:
        child = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                 env={**os.environ, **CHILD_ENV})
        timer = None
        if deadline is not None:
            timer = threading.Timer(max(0.0, deadline - time.time()), child.terminate)
            timer.start()
        _, status, usage = os.wait4(child.pid, 0)
        if timer is not None:
            timer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)
    spent = {"wall_seconds": round(time.time() - start, 1),
             "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
             "load_average": round(os.getloadavg()[0], 2)}
    # 143: the run's own SIGTERM handler stopped it with a checkpoint; -SIGTERM: the signal came
    # before the run installed that handler (still importing, checking its data).
    if deadline is not None and time.time() >= deadline and \
            child.returncode in (143, -signal.SIGTERM):
        raise Stopped(f"{command[1]} stopped at the sitting's deadline; see {log_path}", spent)
    if child.returncode:
        raise RuntimeError(f"{command[1]} failed (exit {child.returncode}); see {log_path}")
    return spent


# ----------------------------------------------------------------------------- the stages

def pretraining_data(out: str, corpus: str, budget: Budget, bert_vocab: str) -> str:
    """OUT/data with vocab.txt (BERT's, or one of budget.vocab_size learned from the corpus by
    pretrain_data/build_vocab.py) and pretrain_tfrecords/ built from the corpus directory."""
    data_dir = os.path.join(out, "data")
    os.makedirs(data_dir, exist_ok=True)
    vocab = os.path.join(data_dir, "vocab.txt")
    if not os.path.exists(vocab) and budget.vocab_size is None:
        shutil.copy(bert_vocab, vocab + ".tmp")
        os.replace(vocab + ".tmp", vocab)
    elif not os.path.exists(vocab):
        usage = run_logged([sys.executable, "pretrain_data/build_vocab.py", "--corpus_dir",
                            corpus, "--output_file", vocab, "--vocab_size",
                            str(budget.vocab_size)], os.path.join(out, "logs", "vocab.log"))
        log(f"vocabulary learned in {usage['wall_seconds']} s: {vocab}")
    records = os.path.join(data_dir, "pretrain_tfrecords")
    if not os.path.exists(os.path.join(records, "build_summary.json")):
        usage = run_logged([sys.executable, "pretrain_data/build_pretraining_dataset.py",
                            "--corpus_dir", corpus, "--vocab_file", vocab, "--output_dir",
                            records, "--max_seq_length", str(budget.seq_length),
                            "--num_out_files", "8"], os.path.join(out, "logs", "build.log"))
        log(f"TFRecords built in {usage['wall_seconds']} s: {records}")
    return data_dir


def prepare_data(out: str, shared_data: str, budget: Budget, tasks: Sequence[str],
                 task_data: str | None) -> str:
    """DATA_DIR in the original's layout: vocab.txt, pretrain_tfrecords/, finetuning_data/."""
    corpus = os.path.join(out, "corpus")
    if not all(os.path.exists(os.path.join(corpus, f)) for f in downstream.CORPUS_FILES):
        log(f"pretraining text -> {corpus}: "
            f"{downstream.pretraining_corpus(shared_data, corpus)}")
    data_dir = pretraining_data(out, corpus, budget,
                                os.path.join(shared_data, "vocab", "bert_uncased_vocab.txt"))
    finetuning = os.path.join(data_dir, "finetuning_data")
    if task_data:
        if not os.path.exists(finetuning):
            os.symlink(os.path.abspath(task_data), finetuning)
    elif not os.path.exists(os.path.join(finetuning, "build_summary.json")):
        built = [t for t in tasks if t in downstream.TASK_NAMES]
        missing = sorted(set(tasks) - set(built))
        if missing:
            raise ValueError(f"--tasks {missing}: experiments/downstream.py builds only "
                             f"{list(downstream.TASK_NAMES)}; pass --task_data DIR for others")
        downstream.build_tasks(shared_data, finetuning, budget.task_sizes, built)
        log(f"downstream tasks {built} -> {finetuning}")
    for task in tasks:
        labels = os.path.join(finetuning, task, "test_labels.tsv")
        if not os.path.exists(labels):
            raise FileNotFoundError(
                f"{labels} is missing: the reported split is test.tsv scored against "
                "test_labels.tsv (index<TAB>label); dev.tsv is only the selection split")
    return data_dir


def pretrain(run: PretrainRun, budget: Budget, data_dir: str, out: str) -> dict:
    """One pretraining run through run_pretraining.py (resumes where it stopped)."""
    done = os.path.join(out, "results", "pretrain", f"{run.objective}.json")
    if os.path.exists(done):
        return read_json(done)
    hparams = efficiency_plan.pretraining_hparams(budget, run.objective, run.steps,
                                                  run.save_every)
    log(f"pretraining {run.objective}: {run.steps} steps, checkpoints every {run.save_every}")
    usage = run_logged([sys.executable, "run_pretraining.py", "--data_dir", data_dir,
                        "--model_name", run.name, "--hparams", json.dumps(hparams)],
                       os.path.join(out, "logs", f"{run.name}.log"))
    record = {"objective": run.objective, "steps": run.steps, "step_flops": run.step_flops,
              "hparams": hparams, **usage}
    write_json(done, record)
    log(f"pretrained {run.objective} in {usage['wall_seconds']} s wall, "
        f"{usage['cpu_seconds']} s CPU (load {usage['load_average']})")
    return record


def export_discriminator(run: PretrainRun, step: int, budget: Budget, data_dir: str) -> str:
    """DATA_DIR/models/<objective>_<step>/discriminator.keras from the run's ckpt-<step>."""
    name = f"{run.objective}_{step}"
    path = os.path.join(data_dir, "models", name, "discriminator.keras")
    if os.path.exists(path):
        return name
    import tensorflow as tf

    from electra_tf import keras_saving, pretraining
    from electra_tf import config as config_lib

    config = config_lib.from_hparams(run.name, data_dir, efficiency_plan.pretraining_hparams(
        budget, run.objective, run.steps, run.save_every))
    vocab = pretraining.load_vocab(config.vocab_file)
    state = pretraining.create_state(config, pretraining.SpecialIds.from_vocab(vocab),
                                     tf.distribute.get_strategy())
    state.checkpoint().restore(os.path.join(config.model_dir, f"ckpt-{step}")) \
        .expect_partial().assert_existing_objects_matched()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    keras_saving.save_keras(state.model.discriminator_model(), path)
    return name


def finetuning_hparams(budget: Budget, task: str, learning_rate: float,
                       pretrained: bool) -> dict[str, Any]:
    hparams = {**budget.model_hparams(), "task_names": [task], "learning_rate": learning_rate,
               "num_trials": budget.trials, "seed": FINETUNE_SEED,
               "num_train_epochs": budget.finetune_epochs,
               "max_seq_length": budget.finetune_seq_length,
               "train_batch_size": budget.finetune_batch_size, "write_test_outputs": True,
               "n_writes_test": budget.trials, "keep_all_models": False,
               "export_saved_model": False}
    if not pretrained:
        hparams["init_checkpoint"] = ""
    return hparams


def score_test(data_dir: str, model: str, task: str, trials: int) -> list[dict[str, float]]:
    """Each trial's test-split metrics: run_finetuning.py's leaderboard file against
    test_labels.tsv, with the project's GLUE scorer."""
    from electra_tf.finetuning import glue

    spec = glue.get_task(task)
    labels_path = os.path.join(data_dir, "finetuning_data", task, "test_labels.tsv")
    labels = [row[1] for row in _read_rows(labels_path)]
    label_ids = [spec.label_id(float(x) if spec.is_regression else x) for x in labels]
    scores = []
    for trial in range(1, trials + 1):
        path = os.path.join(data_dir, "models", model, "test_predictions",
                            f"{task}_trial_{trial}", spec.submission_name("test"))
        predictions = [row[1] for row in _read_rows(path)]
        if len(predictions) != len(labels):
            raise ValueError(f"{path}: {len(predictions)} predictions for {len(labels)} labels "
                             f"in {labels_path}")
        predicted = [spec.label_id(float(x) if spec.is_regression else x) for x in predictions]
        scores.append(spec.score(label_ids, predicted))
    return scores


def _read_rows(path: str) -> list[list[str]]:
    """The rows of an "index<TAB>value" file after its header."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t") for line in f.readlines()[1:] if line.strip()]


def run_finetuning(model: str, task: str, learning_rate: float, budget: Budget, data_dir: str,
                   log_path: str, pretrained: bool = True) -> tuple[dict, dict[str, float]]:
    """`trials` seeds of one (model, task, learning rate) through run_finetuning.py: its
    results JSON (each trial's metrics per evaluated split) and the command's usage."""
    hparams = finetuning_hparams(budget, task, learning_rate, pretrained)
    model_dir = os.path.join(data_dir, "models", model)
    os.makedirs(model_dir, exist_ok=True)
    usage = run_logged([sys.executable, "run_finetuning.py", "--data_dir", data_dir,
                        "--model_name", model, "--hparams", json.dumps(hparams)], log_path)
    return read_json(os.path.join(model_dir, "results", f"{task}_results.json")), usage


def discard_finetuned(data_dir: str, model: str) -> None:
    """The fine-tuned weights and predictions, not needed once scored."""
    for leftover in ("finetuning_models", "test_predictions"):
        shutil.rmtree(os.path.join(data_dir, "models", model, leftover), ignore_errors=True)


def finetune(model: str, task: str, learning_rate: float, budget: Budget, data_dir: str,
             out: str, progress: Progress, pretrained: bool = True) -> dict:
    """`trials` seeds of one (model, task, learning rate) through run_finetuning.py; the
    selection split's metrics from its results JSON, the test split's scored here."""
    key = f"{model}__{task}__lr{learning_rate:g}"
    done = os.path.join(out, "results", "finetune", f"{key}.json")
    if os.path.exists(done):
        return read_json(done)
    log(f"fine-tuning {progress.next()}: {model} on {task} at lr {learning_rate:g}")
    summary, usage = run_finetuning(model, task, learning_rate, budget, data_dir,
                                    os.path.join(out, "logs", "finetune", f"{key}.log"),
                                    pretrained)
    record = {"model": model, "task": task, "learning_rate": learning_rate,
              "selection": [trial[task] for trial in summary["trials"]],
              "test": score_test(data_dir, model, task, budget.trials),
              "hparams": finetuning_hparams(budget, task, learning_rate, pretrained), **usage}
    write_json(done, record)
    discard_finetuned(data_dir, model)
    return record


def probe_model(name: str, budget: Budget, data_dir: str, tasks: Sequence[str]) -> dict:
    """The linear probe of one model's frozen discriminator on every task (electra_tf.probe,
    what run_pretraining.py's `probe_task` runs): the discriminator.keras in
    DATA_DIR/models/<name>/, or for NO_PRETRAINING a randomly initialised encoder of the same
    shape (seed FINETUNE_SEED). {"model": name, task: its metrics, or None when the task
    cannot be probed}."""
    import keras

    from electra_tf import modeling, tokenization
    from electra_tf import probe as probe_lib
    from electra_tf.finetuning import config as finetuning_config

    if name == NO_PRETRAINING:
        config = finetuning_config.from_hparams(name, data_dir, finetuning_hparams(
            budget, tasks[0], budget.finetune_lrs[0], pretrained=False))
        keras.utils.set_random_seed(FINETUNE_SEED)
        encoder = modeling.Encoder(**config.bert_config(), embedding_size=config.embedding_size,
                                   name="electra")
        modeling.build_once(encoder)
    else:
        encoder = keras.saving.load_model(
            os.path.join(data_dir, "models", name, "discriminator.keras")).encoder
    tokenizer = tokenization.WordPieceTokenizer(os.path.join(data_dir, "vocab.txt"))
    record: dict[str, Any] = {"model": name}
    for task in tasks:
        try:
            linear = probe_lib.LinearProbe.from_directory(
                os.path.join(data_dir, "finetuning_data", task), tokenizer,
                budget.finetune_seq_length, max(budget.task_sizes.values()))
        except ValueError as e:  # e.g. a tiny task whose train split has one label
            log(f"no probe of {name} on {task}: {e}")
            record[task] = None
            continue
        record[task] = linear(encoder)
    log(f"probed {name}: " + ", ".join(f"{t} {record[t]}" for t in tasks))
    return record


def probe(name: str, budget: Budget, data_dir: str, out: str, tasks: Sequence[str],
          results: str = "probe") -> dict:
    """probe_model, recorded in OUT/results/<results>/<name>.json (and read from there when
    it is done)."""
    done = os.path.join(out, "results", results, f"{name}.json")
    if os.path.exists(done):
        return read_json(done)
    record = probe_model(name, budget, data_dir, tasks)
    write_json(done, record)
    return record


# ----------------------------------------------------------------------------- main

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="working directory (data, runs, results)")
    parser.add_argument("--budget", default="full", choices=sorted(efficiency_plan.BUDGETS))
    parser.add_argument("--tasks", default=",".join(downstream.TASK_NAMES),
                        help="GLUE task names (directories of the task data)")
    parser.add_argument("--task_data", default=None,
                        help="a directory of GLUE-format tasks (<task>/train.tsv, dev.tsv, "
                             "test.tsv, test_labels.tsv) instead of the built ones")
    parser.add_argument("--objectives", default=None,
                        help="comma-separated; default: electra, mlm and the Table 5 "
                             "objectives (each is sized from ELECTRA's FLOPs or steps, which "
                             "need no ELECTRA run)")
    parser.add_argument("--shared_data", default=os.path.join(REPO, "..", "shared", "data"))
    parser.add_argument("--workers", type=int, default=1,
                        help="runs side by side, each on cpu_count / workers threads (small "
                             "models use two cores better as two one-thread runs)")
    parser.add_argument("--report_dir", default=None,
                        help="tables and plots (default: docs/ for --budget full, else "
                             "OUT/report)")
    args = parser.parse_args(argv)
    args.out = os.path.abspath(args.out)  # the runs' subprocesses work in the repository
    args.tasks = [t for t in args.tasks.split(",") if t]
    args.objectives = (args.objectives.split(",") if args.objectives
                       else list(efficiency_plan.OBJECTIVES))
    known = efficiency_plan.OBJECTIVES
    unknown = sorted(set(args.objectives) - set(known))
    if unknown:
        parser.error(f"--objectives: unknown {unknown}; choose from {', '.join(known)}")
    if args.report_dir is None:
        args.report_dir = (os.path.join(REPO, "docs") if args.budget == "full"
                           else os.path.join(args.out, "report"))
    return args


class Progress:
    """Numbers the fine-tuning runs as they start, across workers."""

    def __init__(self, total: int, finished: int) -> None:
        self.total, self.started, self.lock = total, finished, threading.Lock()

    def next(self) -> str:
        with self.lock:
            self.started += 1
            return f"{self.started}/{self.total}"


EXPORT_LOCK = threading.Lock()  # exports build models in this process, one at a time


def objective_runs(run: PretrainRun | None, budget: Budget, tasks: Sequence[str],
                   data_dir: str, out: str, progress: Progress) -> None:
    """One objective end to end: pretraining, exports, the learning-rate sweep at its last
    checkpoint, then its curve's earlier checkpoints at the rate chosen for each task.
    run None: the model without pretraining (the sweep only)."""
    if run is None:
        final, steps, pretrained = NO_PRETRAINING, [], False
    else:
        pretrain(run, budget, data_dir, out)
        steps = run.checkpoints(budget.curve_points)
        with EXPORT_LOCK:
            for step in steps:
                export_discriminator(run, step, budget, data_dir)
        final, pretrained = f"{run.objective}_{run.steps}", True
    for task in tasks:
        for lr in budget.finetune_lrs:
            finetune(final, task, lr, budget, data_dir, out, progress, pretrained)
    for step in steps[:-1]:
        for task in tasks:
            chosen = report.select([finetune(final, task, lr, budget, data_dir, out, progress)
                                    for lr in budget.finetune_lrs], task)
            finetune(f"{run.objective}_{step}", task, chosen["learning_rate"], budget,
                     data_dir, out, progress)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    budget = efficiency_plan.BUDGETS[args.budget]
    share_cores(args.workers)
    start = time.time()
    data_dir = prepare_data(args.out, args.shared_data, budget, args.tasks, args.task_data)
    runs = efficiency_plan.plan_pretraining(budget, data_dir, args.objectives)
    sweep = len(budget.finetune_lrs) * len(args.tasks)
    total = sweep * (len(runs) + 1) + sum(
        len(run.checkpoints(budget.curve_points)) - 1 for run in runs) * len(args.tasks)
    log(f"budget {args.budget}: {len(runs)} pretraining runs "
        f"({', '.join(f'{r.objective} {r.steps} steps' for r in runs)}), "
        f"{total} fine-tuning runs of {budget.trials} seeds, {args.workers} at a time")
    finished = os.path.join(args.out, "results", "finetune")
    progress = Progress(total, len(os.listdir(finished)) if os.path.isdir(finished) else 0)
    # One pipeline per objective, in plan order (ELECTRA's and BERT's, with their curves, first).
    side_by_side(args.workers, lambda run: objective_runs(run, budget, args.tasks, data_dir,
                                                          args.out, progress), [*runs, None])
    for run in runs:
        for step in run.checkpoints(budget.curve_points):
            probe(f"{run.objective}_{step}", budget, data_dir, args.out, args.tasks)
    probe(NO_PRETRAINING, budget, data_dir, args.out, args.tasks)
    written = report.write(args.out, args.report_dir, budget, runs, args.tasks)
    log(f"done in {time.time() - start:.0f} s; wrote {', '.join(written)}")


if __name__ == "__main__":
    main()
