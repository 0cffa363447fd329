"""A measured ensemble: the 5 fine-tuning trials of one model on the movie-review sst task.

  python experiments/ensemble.py --work /tmp/ensemble_sst --out \\
      experiments/results/ensemble/sst_small2_random_init.jsonl
  python experiments/ensemble.py \\
      --table experiments/results/ensemble/sst_small2_random_init.jsonl

Builds sst the way experiments/downstream.py does (2000 train, 800 dev, 1600 test with its
labels, from ../shared/data/classification/movie_review_snippets.tsv), fine-tunes a 2-layer
ELECTRA-Small encoder from random weights (no pretraining: the example measures the ensembling
on 2 CPU cores, not the model) 5 times with seeds 0-4 (max_seq_length 64, 3 epochs, lr 5e-4
without layer-wise decay, as nothing pretrained is to be kept; the original's other
defaults), then ensembles the 5 prediction files with run_ensemble.py's code twice: uniform
weights, and weights fitted on dev by forward selection. Every number is scored on dev (the
selection split) and on test (the reported split, whose labels neither the training nor the
weights saw). Writes one JSON line per member, the median, the best member (chosen on dev) and
each ensemble; --table prints docs/finetuning.md's table from them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from typing import Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (REPO, os.path.join(REPO, "experiments")):
    if path not in sys.path:
        sys.path.insert(0, path)

HPARAMS = {"model_size": "small", "model_hparam_overrides": {"num_hidden_layers": 2},
           "task_names": ["sst"], "init_checkpoint": "", "learning_rate": 5e-4,
           "layerwise_lr_decay": 0.0, "max_seq_length": 64, "num_train_epochs": 3,
           "num_trials": 5, "seed": 0,
           "write_test_outputs": True, "n_writes_test": 5}


def _test_labels(path: str) -> dict[str, str]:
    with open(path, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    return {index: label for index, label in rows}


def measure(shared_data: str, work: str) -> list[dict]:
    import downstream
    import run_finetuning
    from electra_tf.finetuning import ensemble, trainer
    from electra_tf.finetuning.config import from_hparams

    if os.path.exists(work):
        raise SystemExit(f"--work {work} exists: give a new directory")
    downstream.build_tasks(shared_data, os.path.join(work, "finetuning_data"), tasks=["sst"])
    shutil.copy(os.path.join(shared_data, "vocab", "bert_uncased_vocab.txt"),
                os.path.join(work, "vocab.txt"))
    config = from_hparams("random_small", work, HPARAMS)
    run_finetuning.run(config)

    paths = [os.path.join(config.results_dir, ensemble.prediction_file_name("sst", trial))
             for trial in range(1, config.num_trials + 1)]
    members = [ensemble.read_member(path) for path in paths]
    task = trainer.make_tasks(config)[0]
    tokenizer = trainer.make_tokenizer(config)
    test = trainer.load_split(config, [task], task, "test", tokenizer)
    labels = _test_labels(os.path.join(config.raw_data_dir("sst"), "test_labels.tsv"))
    gold = [task.label_id(labels[str(eid)]) for eid in test.arrays["eid"]]

    def test_accuracy(outputs: dict) -> float:
        head = task.from_ensemble_outputs(config, test, outputs)
        return task.score(gold, task.predictions(head))["accuracy"]

    records = []
    for member in members:
        records.append({"kind": "member", "trial": member.meta["trial"],
                        "seed": member.meta["seed"],
                        "test_accuracy": test_accuracy(member.outputs("sst:test"))})
    for name, weights in (("ensemble_uniform", "uniform"), ("ensemble_fitted", "fit")):
        report = ensemble.run(paths, ensemble.parse_weights(weights, len(paths)),
                              os.path.join(work, name), {})
        split = report["tasks"]["sst"]["splits"]["sst"]
        for record, scores in zip(records, split["members"]):
            record["dev_accuracy"] = scores["accuracy"]
        task_weights = report["tasks"]["sst"]["weights"]
        records.append({"kind": name, "weights": task_weights,
                        "weights_from": report["tasks"]["sst"]["weights_from"],
                        "dev_accuracy": split["ensemble"]["accuracy"],
                        "test_accuracy": test_accuracy(
                            ensemble.average(members, "sst:test", task_weights))})
    members_records = [r for r in records if r["kind"] == "member"]
    median = {"kind": "median"}
    for key in ("dev_accuracy", "test_accuracy"):
        values = sorted(r[key] for r in members_records)
        median[key] = values[len(values) // 2]
    best = max(members_records, key=lambda r: (r["dev_accuracy"], -r["trial"]))
    records += [median, {"kind": "best_on_dev", "trial": best["trial"],
                         "seed": best["seed"], "dev_accuracy": best["dev_accuracy"],
                         "test_accuracy": best["test_accuracy"]}]
    setup = {"kind": "setup", "hparams": HPARAMS,
             "model": "ELECTRA-Small's shape with 2 layers, random init",
             "data": "experiments/downstream.py sst: 2000 train, 800 dev, 1600 test"}
    return [setup, *records]


def table(records: Sequence[dict]) -> str:
    lines = ["| | seed | weights | dev accuracy | test accuracy |", "|---|---|---|---|---|"]
    order = ["member", "median", "best_on_dev", "ensemble_uniform", "ensemble_fitted"]
    for r in sorted((r for r in records if r["kind"] != "setup"),
                    key=lambda r: order.index(r["kind"])):
        label = {"member": f"trial {r.get('trial')}", "median": "median of the 5",
                 "best_on_dev": f"best on dev (trial {r.get('trial')})",
                 "ensemble_uniform": "ensemble, uniform weights",
                 "ensemble_fitted": "ensemble, weights fitted on dev"}[r["kind"]]
        weights = ", ".join(f"{w:.1f}" for w in r["weights"]) if "weights" in r else ""
        lines.append(f"| {label} | {r.get('seed', '')} | {weights} | "
                     f"{r['dev_accuracy']:.2f} | {r['test_accuracy']:.2f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared_data", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data"))
    parser.add_argument("--work", help="a new scratch directory for the run")
    parser.add_argument("--out", help="the JSON Lines file of the records")
    parser.add_argument("--table", help="print the table of this JSON Lines file")
    args = parser.parse_args(argv)
    if args.table:
        with open(args.table) as f:
            print(table([json.loads(line) for line in f if line.strip()]))
        return
    if not (args.work and args.out):
        parser.error("give --work and --out (or --table)")
    records = measure(args.shared_data, args.work)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))
    print(table(records))


if __name__ == "__main__":
    main()
