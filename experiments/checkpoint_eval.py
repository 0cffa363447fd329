"""A pretraining run's latest checkpoint under run_pretraining.py's do_eval, its metrics
appended to a JSON Lines file as one record.

  python experiments/checkpoint_eval.py --data_dir DATA_DIR --model_name NAME
      [--num_eval_steps 100] --results experiments/results/LADDER/eval.jsonl

DATA_DIR is a local directory. run_pretraining.py takes every hparam the command does not give
from the run's own pretrain_config.json, so this gives only do_train false, do_eval true,
num_eval_steps and a results file of its own (do_eval writes nothing into the run's directory).
The metrics are those of the run's objective over num_eval_steps
batches of its eval_tfrecords (the training files unless the run set others) with dropout off,
where the training logs them with dropout on. That is how the softmax of All-Tokens MLM was
measured at the replaced tokens (`all_tokens_mlm_softmax_fake_accuracy`, a metric its run did
not log): docs/reproduction.md, "All-Tokens MLM against its prediction".
experiments/ladder_report.py tabulates the records.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from typing import Any, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (REPO, os.path.join(REPO, "experiments")):
    if path not in sys.path:
        sys.path.insert(0, path)

import efficiency  # noqa: E402
import records  # noqa: E402

# run_pretraining.py's line naming what it evaluates, the checkpoint's step in it.
_EVALUATING = re.compile(r"^evaluating .+ \(step (\d+)\) on up to ", re.M)


class NothingEvaluated(RuntimeError):
    """The eval files hold less than one batch: do_eval read no example."""


def parse_results(text: str) -> dict[str, float]:
    """run_pretraining.py's results file, `key = value` a line, as {key: value}.

    >>> parse_results("disc_auc = 0.698\\nnum_examples = 12800.0\\n")
    {'disc_auc': 0.698, 'num_examples': 12800.0}
    """
    metrics = {}
    for line in text.splitlines():
        key, _, value = line.partition(" = ")
        metrics[key.strip()] = float(value)
    return metrics


def evaluated_step(log: str, log_path: str) -> int:
    """The step of the checkpoint that run_pretraining.py's log says it evaluated."""
    found = _EVALUATING.search(log)
    if not found:
        raise RuntimeError(f"{log_path} names no evaluated checkpoint ('evaluating ... (step "
                           "N)'): run_pretraining.py did not evaluate")
    return int(found.group(1))


def under(data_dir: str, patterns: str) -> str:
    """Comma-separated file patterns, relative to data_dir when all of them lie in it (so that
    records read alike on every machine), else as given.

    >>> under("/d", "/d/pretrain_tfrecords/pretrain_data.tfrecord*")
    'pretrain_tfrecords/pretrain_data.tfrecord*'
    >>> under("/d", "/d/a*,gs://b/c*")
    '/d/a*,gs://b/c*'
    """
    prefix = data_dir.rstrip("/") + "/"
    parts = [p.strip() for p in patterns.split(",")]
    if all(p.startswith(prefix) for p in parts):
        return ",".join(p[len(prefix):] for p in parts)
    return patterns


def evaluate(data_dir: str, model_name: str, num_eval_steps: int, log_path: str,
             deadline: float | None = None) -> dict[str, Any]:
    """Runs do_eval on the model's latest checkpoint; returns the record. data_dir is local
    and absolute (run_pretraining.py runs in the repository). At `deadline` (a time.time())
    the evaluation is stopped and efficiency.Stopped raised, nothing recorded."""
    with tempfile.TemporaryDirectory() as scratch:
        results_txt = os.path.join(scratch, "results.txt")
        hparams = {"do_train": False, "do_eval": True, "num_eval_steps": num_eval_steps,
                   "results_txt": results_txt, "results_pkl": os.path.join(scratch, "r.pkl")}
        usage = efficiency.run_logged(
            [sys.executable, "run_pretraining.py", "--data_dir", data_dir, "--model_name",
             model_name, "--hparams", json.dumps(hparams)], log_path, deadline)
        with open(results_txt) as f:
            metrics = parse_results(f.read())
        with open(os.path.join(scratch, "eval_config.json")) as f:
            config = json.load(f)
    if not metrics.get("num_examples"):
        raise NothingEvaluated(
            f"{model_name}: do_eval read no example, its eval_tfrecords "
            f"({config['eval_tfrecords']}) holding less than one batch of "
            f"{config['eval_batch_size']}; see {log_path}")
    with open(log_path) as f:
        step = evaluated_step(f.read(), log_path)
    return {"model": model_name, "objective": config["objective"],
            "objective_hparam": config["objective"], "step": step,
            "num_eval_steps": num_eval_steps, "eval_batch_size": config["eval_batch_size"],
            "auc_num_thresholds": config["auc_num_thresholds"],
            "eval_tfrecords": under(data_dir, config["eval_tfrecords"]),
            "training": False, "metrics": metrics, **usage}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", required=True,
                        help="the run's DATA_DIR (pretrain_tfrecords/, vocab.txt, models/)")
    parser.add_argument("--model_name", required=True,
                        help="the pretraining run under DATA_DIR/models")
    parser.add_argument("--num_eval_steps", type=int, default=100,
                        help="batches evaluated (of the run's eval_batch_size)")
    parser.add_argument("--results", required=True, help="the JSON Lines file appended to")
    parser.add_argument("--log", default=None,
                        help="run_pretraining.py's output (default: eval.log in the run's "
                             "directory, DATA_DIR/models/NAME)")
    args = parser.parse_args(argv)
    args.data_dir = os.path.abspath(args.data_dir)  # the run starts in the repository
    if args.num_eval_steps < 1:
        parser.error(f"--num_eval_steps must be at least 1, got {args.num_eval_steps}")
    model_dir = os.path.join(args.data_dir, "models", args.model_name)
    if not os.path.isfile(os.path.join(model_dir, "pretrain_config.json")):
        parser.error(f"--model_name: {model_dir} holds no pretraining run (no "
                     "pretrain_config.json); name a run under --data_dir's models/")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    log_path = args.log or os.path.join(args.data_dir, "models", args.model_name, "eval.log")
    try:
        record = evaluate(args.data_dir, args.model_name, args.num_eval_steps, log_path)
    except NothingEvaluated as e:
        raise SystemExit(f"error: {e}") from None
    records.append(args.results, [record])
    for key, value in sorted(record["metrics"].items()):
        print(f"{key} = {value:.4f}")
    print(f"appended to {args.results}")


if __name__ == "__main__":
    main()
