"""Ensembles of fine-tuned models from their prediction files (run_ensemble.py).

Every trial of run_finetuning.py keeps its raw outputs in one prediction file,
DATA_DIR/models/NAME/results/<tasks>_outputs_<trial>.npz (numpy's npz):

  meta                    JSON: {"format": 2, "model_name", "task_names", "trial", "seed",
                          "hparams": the run's hparams, "splits": {"<task>:<split>": {"task",
                          "split", "labels", "keys"}}}
  <task>:<split>/row_ids  str [N]: Task.row_ids, one per row of the split (e.g. GLUE's index)
  <task>:<split>/<key>    float32 [N, ...]: Task.ensemble_outputs (class probabilities,
                          regression scores, SQuAD's start/end logits, tagging's per-word tag
                          probabilities)

for every dev split, and for the test splits of the trials that wrote test outputs.

An ensemble averages each key over its members with weights (given, or fitted on the task's
first dev split by forward selection, fit_weights); the task turns the average back into head
outputs (Task.from_ensemble_outputs) and scores or writes it exactly as a single model's. This
module reads, checks and averages with numpy only, so that run_ensemble.py checks its inputs
before TensorFlow loads; run() loads the splits.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import tempfile
from typing import Any, Callable, Sequence

import numpy as np

# 2: QA and zero-shot row ids carry a checksum of their tokens.
FORMAT = 2
FIT_ROUNDS = 10  # forward selection's rounds: the fitted weights are multiples of 1/10


class EnsembleError(ValueError):
    """Prediction files, weights or an output that an ensemble cannot be made of or into."""


def prediction_file_name(task_string: str, trial: int) -> str:
    return f"{task_string}_outputs_{trial}.npz"


def split_key(task, split: str) -> str:
    """A split's name in a prediction file (a test split may share its dev split's result
    name, e.g. GLUE's)."""
    return f"{task.name}:{split}"


def prediction_file_bytes(meta: dict, splits: dict[str, dict]) -> bytes:
    """A prediction file's content. `splits` maps a split_key to {"task", "split",
    "labels", "row_ids", "outputs"} (outputs: Task.ensemble_outputs)."""
    arrays, described = {}, {}
    for name, split in splits.items():
        arrays[f"{name}/row_ids"] = np.array(split["row_ids"], dtype=str)
        for key, value in split["outputs"].items():
            arrays[f"{name}/{key}"] = np.asarray(value, np.float32)
        described[name] = {"task": split["task"], "split": split["split"],
                           "labels": list(split["labels"]), "keys": sorted(split["outputs"])}
    arrays["meta"] = np.array(json.dumps({"format": FORMAT, **meta, "splits": described}))
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


@dataclasses.dataclass
class Member:
    """One prediction file."""
    path: str
    meta: dict
    arrays: dict[str, np.ndarray]

    @property
    def splits(self) -> dict[str, dict]:
        return self.meta["splits"]

    def outputs(self, result_name: str) -> dict[str, np.ndarray]:
        keys = self.splits[result_name]["keys"]
        return {key: self.arrays[f"{result_name}/{key}"] for key in keys}

    def row_ids(self, result_name: str) -> np.ndarray:
        return self.arrays[f"{result_name}/row_ids"]


def read_member(path: str) -> Member:
    if not os.path.isfile(path):
        raise EnsembleError(f"prediction file {path} does not exist; run_finetuning.py writes "
                            "results/<tasks>_outputs_<trial>.npz for every trial")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
        meta = json.loads(str(arrays.pop("meta")))
    except (OSError, ValueError, KeyError) as e:
        raise EnsembleError(f"{path} is not a prediction file of run_finetuning.py "
                            f"({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("splits"), dict):
        raise EnsembleError(f"{path} is not a prediction file of run_finetuning.py (its meta "
                            "is not an object with the splits)")
    if meta.get("format") != FORMAT:
        raise EnsembleError(f"{path} is a prediction file of format {meta.get('format')}; "
                            f"this version reads format {FORMAT}: write it again by evaluating "
                            "the trial's checkpoint (run_finetuning.py with the run's --hparams "
                            'and "do_train": false; every trial keeps its checkpoint only with '
                            '"keep_all_models", the default)')
    return Member(path, meta, arrays)


def _data_dir(task, config) -> str:
    """The folder the task reads (GLUE's own folder names included)."""
    return task.data_dir(config) if hasattr(task, "data_dir") else \
        config.raw_data_dir(task.data_name)


def check_members(members: Sequence[Member]) -> None:
    """The members are of the same tasks with the same labels, and have the same splits."""
    if len(members) < 2:
        raise EnsembleError(f"an ensemble needs at least 2 prediction files, got {len(members)}")
    first = members[0]
    for member in members[1:]:
        if member.meta["task_names"] != first.meta["task_names"]:
            raise EnsembleError(f"{member.path} holds tasks {member.meta['task_names']}, "
                                f"{first.path} {first.meta['task_names']}: ensemble models of "
                                "the same tasks")
        for name, split in first.splits.items():
            theirs = member.splits.get(name)
            if theirs is None:
                raise EnsembleError(f"{member.path} has no outputs for {name} ({first.path} "
                                    "has): write test outputs for every member's trial, or "
                                    "leave out the members without")
            if theirs["labels"] != split["labels"]:
                raise EnsembleError(f"{member.path} predicts the labels {theirs['labels']} for "
                                    f"{name}, {first.path} {split['labels']}")
        extra = sorted(set(member.splits) - set(first.splits))
        if extra:
            raise EnsembleError(f"{first.path} has no outputs for {extra[0]} ({member.path} "
                                "has): write test outputs for every member's trial, or leave "
                                "out the members without")


def parse_weights(text: str, count: int) -> list[float] | None:
    """--weights: "uniform", "fit" (None: fit_weights decides) or `count` numbers >= 0 that
    sum to 1."""
    if text == "fit":
        return None
    if text == "uniform":
        return [1.0 / count] * count
    try:
        weights = [float(part) for part in text.split(",")]
    except ValueError:
        raise EnsembleError(f"--weights {text!r}: give 'uniform', 'fit' or comma-separated "
                            "numbers") from None
    if len(weights) != count:
        raise EnsembleError(f"--weights has {len(weights)} weights for {count} prediction "
                            "files: give one per file, in their order")
    if any(not w >= 0 for w in weights):
        raise EnsembleError(f"--weights {text!r}: a weight is negative (or not a number); "
                            "weights are >= 0 and sum to 1")
    if abs(sum(weights) - 1.0) > 1e-6:
        raise EnsembleError(f"--weights {text!r} sum to {sum(weights):g}, not 1")
    return weights


def average(members: Sequence[Member], result_name: str,
            weights: Sequence[float]) -> dict[str, np.ndarray]:
    """The weighted average of the members' outputs for a split, row by row."""
    first = members[0]
    for member in members[1:]:
        mine, theirs = first.row_ids(result_name), member.row_ids(result_name)
        if mine.shape != theirs.shape or (mine != theirs).any():
            where = (f"{len(theirs)} rows against {len(mine)}" if mine.shape != theirs.shape
                     else f"row {int(np.argmax(mine != theirs))} is "
                          f"{theirs[mine != theirs][0]!r}, not {mine[mine != theirs][0]!r}")
            raise EnsembleError(f"{member.path}: the example ids of {result_name} differ from "
                                f"{first.path}'s ({where}); ensemble runs of the same data "
                                "with the same max_seq_length (and for QA and zero-shot "
                                "tasks, whose outputs are per token, the same tokenization: "
                                "vocabulary, lower-casing, windows, template)")
    return weighted(
        [m.outputs(result_name) for m in members], weights,
        [m.path for m in members], result_name)


def weighted(outputs: Sequence[dict[str, np.ndarray]], weights: Sequence[float],
             paths: Sequence[str], result_name: str) -> dict[str, np.ndarray]:
    first = outputs[0]
    for path, theirs in zip(paths[1:], outputs[1:]):
        for key in sorted(set(first) | set(theirs)):
            if key not in first or key not in theirs or first[key].shape != theirs[key].shape:
                raise EnsembleError(
                    f"{path}: the {result_name} outputs ({_shapes(theirs)}) do not match "
                    f"{paths[0]}'s ({_shapes(first)})")
    return {key: sum(w * np.asarray(o[key], np.float64) for w, o in zip(weights, outputs))
            for key in first}


def _shapes(outputs: dict[str, np.ndarray]) -> str:
    return ", ".join(f"{key} {list(value.shape)}" for key, value in sorted(outputs.items()))


def fit_weights(outputs: Sequence[dict[str, np.ndarray]],
                score: Callable[[dict[str, np.ndarray]], float],
                rounds: int = FIT_ROUNDS) -> list[float]:
    """Forward selection with replacement (Caruana et al., 2004, "Ensemble selection from
    libraries of models"): `rounds` times, add the member whose addition scores best (`score`
    of the averaged outputs, higher is better; a tie goes to the earlier member). A member's
    weight is the share of rounds that added it. Call it with the dev split's outputs only."""
    counts = np.zeros(len(outputs))
    for _ in range(rounds):
        best, best_score = 0, -np.inf
        for i in range(len(outputs)):
            trial = counts.copy()
            trial[i] += 1
            value = score(weighted(outputs, trial / trial.sum(), [""] * len(outputs), ""))
            if value > best_score:
                best, best_score = i, value
        counts[best] += 1
    return (counts / rounds).tolist()


def run(paths: Sequence[str], weights: list[float] | None, output_dir: str,
        overrides: dict[str, Any]) -> dict:
    """Scores the ensemble of the prediction files on every dev split and writes the test
    splits' leaderboard files into output_dir/test_predictions/; output_dir/results.txt and
    results.json hold the members' scores, their median and best, the ensemble's and the
    weights. output_dir is written under a temporary name and renamed when complete."""
    from electra_tf.finetuning import trainer
    from electra_tf.finetuning.config import from_saved

    if os.path.exists(output_dir):
        raise EnsembleError(f"--output_dir {output_dir} exists: give a new directory")
    members = [read_member(path) for path in paths]
    check_members(members)
    config = from_saved(members[0].meta["hparams"], overrides)
    tokenizer = trainer.make_tokenizer(config)
    tasks = trainer.make_tasks(config)
    parent = os.path.dirname(os.path.abspath(output_dir))
    os.makedirs(parent, exist_ok=True)
    building = tempfile.mkdtemp(prefix=os.path.basename(output_dir) + ".", dir=parent)
    scratch = tempfile.mkdtemp()
    try:
        summary = _run(members, weights, config, tokenizer, tasks, building, scratch)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    os.rename(building, output_dir)
    print("\n".join(_lines(summary)), flush=True)
    return summary


def _run(members: Sequence[Member], weights: list[float] | None, config, tokenizer, tasks,
         building: str, scratch: str) -> dict:
    from electra_tf.finetuning import trainer
    from electra_tf.finetuning.task import Task

    summary: dict = {"members": [{"path": m.path, "model_name": m.meta["model_name"],
                                  "trial": m.meta["trial"], "seed": m.meta["seed"]}
                                 for m in members],
                     "tasks": {}}

    def scored(data, outputs: dict[str, np.ndarray], directory: str) -> dict[str, float]:
        head = data.task.from_ensemble_outputs(config, data, outputs)
        return data.task.evaluate(config, data, head, tokenizer, directory)

    for task in tasks:
        dev = [split_key(task, s) for s in task.dev_splits(config)]
        test = [split_key(task, s) for s in task.test_splits(config)]
        missing = [key for key in dev if key not in members[0].splits]
        if missing:
            raise EnsembleError(f"{members[0].path} has no outputs for {missing[0]}")
        loaded = {}
        for key in dev + test:
            if key not in members[0].splits:
                continue
            data = trainer.load_split(config, tasks, task, members[0].splits[key]["split"],
                                      tokenizer)
            ids = np.array(task.row_ids(data), dtype=str)
            if ids.shape != members[0].row_ids(key).shape or (
                    ids != members[0].row_ids(key)).any():
                raise EnsembleError(f"{members[0].path}: the example ids of {key} differ from "
                                    f"those of {data.path or _data_dir(task, config)}"
                                    " as read now; the data changed since the run")
            labels = task.label_names(config)
            if list(members[0].splits[key]["labels"]) != list(labels):
                raise EnsembleError(f"{members[0].path} predicts the labels "
                                    f"{members[0].splits[key]['labels']} for {key}, but its "
                                    f"files as read now give {labels}; the data changed since "
                                    "the run")
            loaded[key] = data
        ranked = type(task).main_metric is not Task.main_metric
        fitted = weights is None
        if fitted and not ranked:
            raise EnsembleError(f"--weights fit: task {task.name} names no main metric to fit "
                                "the weights on (Task.main_metric); give the weights")
        if fitted:
            fit_on = loaded[dev[0]]
            average(members, dev[0], [1.0 / len(members)] * len(members))  # checks the ids
            task_weights = fit_weights(
                [m.outputs(dev[0]) for m in members],
                lambda o: task.main_metric(scored(fit_on, o, scratch)))
        else:
            task_weights = weights
        report: dict = {"weights": task_weights,
                        "weights_from": f"fitted on {dev[0]} by forward selection "
                                        f"({FIT_ROUNDS} rounds)" if fitted else "given",
                        "splits": {}}
        for key in dev:
            data = loaded[key]
            name = task.result_name(data.split)
            averaged = average(members, key, task_weights)  # checks the rows first
            members_scores = [scored(data, m.outputs(key), scratch) for m in members]
            report["splits"][name] = {
                "members": members_scores,
                "median": {k: float(np.median([s[k] for s in members_scores]))
                           for k in members_scores[0]},
                "ensemble": scored(data, averaged,
                                   os.path.join(building, "dev_predictions", name))}
            if ranked:
                best = int(np.argmax([task.main_metric(s) for s in members_scores]))
                report["splits"][name]["best_member"] = {"index": best, **members_scores[best]}
        written = []
        for key in test:
            if key not in loaded:
                continue
            data = loaded[key]
            head = task.from_ensemble_outputs(config, data, average(members, key, task_weights))
            written += task.write_test_outputs(config, data, head, tokenizer,
                                               os.path.join(building, "test_predictions"))
        report["test_outputs"] = [os.path.relpath(p, building) for p in written]
        summary["tasks"][task.name] = report
    with open(os.path.join(building, "results.json"), "w") as f:
        json.dump(summary, f, indent=2)
    with open(os.path.join(building, "results.txt"), "w") as f:
        f.write("\n".join(_lines(summary)) + "\n")
    return summary


def _lines(summary: dict) -> list[str]:
    """results.txt: run_finetuning.py's "task: metric: value - ..." lines per member, the
    median, the best member and the ensemble, then the weights."""
    def line(name: str, metrics: dict[str, float], label: str) -> str:
        return f"{name}: " + " - ".join(f"{k}: {v:.2f}" for k, v in metrics.items() if
                                        k != "index") + f" ({label})"

    lines = []
    for task, report in summary["tasks"].items():
        for name, split in report["splits"].items():
            for member, metrics in zip(summary["members"], split["members"]):
                lines.append(line(name, metrics, f"{member['model_name']} trial "
                                                 f"{member['trial']}, seed {member['seed']}"))
            lines.append(line(name, split["median"], "median of the members"))
            if "best_member" in split:
                best = summary["members"][split["best_member"]["index"]]
                lines.append(line(name, split["best_member"],
                                  f"best member: {best['model_name']} trial {best['trial']}"))
            lines.append(line(name, split["ensemble"], "ensemble"))
        lines.append(f"{task} weights ({report['weights_from']}): "
                     + ", ".join(f"{w:.2f}" for w in report["weights"]))
    return lines
