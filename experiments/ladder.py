"""ELECTRA against BERT up a ladder of pretraining budgets: where does pretraining start to beat
random weights on this CPU, and which objective is ahead there?

  python experiments/ladder.py --out DIR [--ladder full|mixed|mixed_wide|smoke] [--hours H]
      [--max_rung K] [--workers 2] [--shared_data ../shared/data] [--results DIR]
      [--report_dir DIR]

One command runs the experiment in sittings: rerun it until it says the ladder is done.
  1. data (from --shared_data, which only this step reads; prepare_data, with
     experiments/ladder_data.py): the pretraining text (downstream.ladder_corpus: the Brown
     files of the pos task's train split, the Wikipedia sample, the technical documentation),
     a vocabulary learned from it and its TFRecords (efficiency.pretraining_data); the pos task
     (electra_tf.finetuning.pos.write_task_files: 1,000 training sentences, dev and test from
     held-out Brown files) and sst (downstream.build_tasks).
  2. pretraining through run_pretraining.py with the warmup-stable-decay schedule
     (`lr_schedule: wsd`): per objective one trunk at the peak learning rate and, for each rung
     of the ladder (`rungs` log-spaced FLOP budgets, electra_tf.flops), a decay branch forked
     from the trunk's checkpoint (electra_tf.resume.fork) that decays linearly to 0 over the
     rung's last `decay_fraction` and ends exactly at it. ELECTRA and BERT (`mlm`), and any
     variant of them (efficiency_plan.VARIANTS), get the same FLOPs at every rung (each its own
     whole number of steps), the same warmup FLOPs and the same share of decay; a ladder's
     `equal_steps` objectives (Table 5's) take the steps of the ELECTRA recipe with their
     generator instead.
  3. fine-tuning through run_finetuning.py of every rung's discriminator and of random weights
     (objective `none`) on every task, `trials` seeds at each learning rate of the budget's
     sweep; every model chooses its rate on dev, and test is reported.
  4. the linear probe (electra_tf.probe) of every rung's frozen discriminator and of random
     weights on every task; for a discriminator that judges every token, what it detects
     beside bigram counts (experiments/detection_baselines.py); every rung's checkpoint under
     run_pretraining.py's do_eval (experiments/checkpoint_eval.py).
  5. the report (experiments/ladder_report.py), from the records alone.

Every finished run appends its records to JSON Lines files in --results (default
experiments/results/ladder/, committed): pretrain.jsonl, finetune.jsonl, probe.jsonl,
detection.jsonl, eval.jsonl, curves.jsonl (each pretraining piece's logged losses and metrics),
baseline.jsonl (the most-frequent-tag tagger, the unigram masked LM) (experiments/records.py,
through experiments/ladder_records.py); and data.json, the SHA-256 of the data they are made on
(experiments/ladder_data.py's check_data: a sitting on other data stops).
A run whose records are there is skipped, so a rerun resumes; the pretraining runs also resume
from their checkpoints in DIR. --hours ends a sitting: no run starts after it, and a pretraining
run still going gets SIGTERM (it writes a checkpoint and the next sitting continues it exactly;
the CPU time it spent is recorded). Progress goes to stdout, each run's output to DIR/logs/.

Each trunk's newest checkpoint is also copied into --results/trunks/OBJECTIVE/ (with the SHA-256
of the data it was trained on; not committed, but copied with the checkout): a sitting on a
machine whose DIR lacks it continues the trunk from there, not from step 0, and a branch whose
model was lost before its fine-tuning ended is made again from the trunk.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from typing import Any, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (REPO, os.path.join(REPO, "experiments")):
    if path not in sys.path:
        sys.path.insert(0, path)

import checkpoint_eval  # noqa: E402
import detection_baselines  # noqa: E402
import downstream  # noqa: E402
import efficiency  # noqa: E402
import efficiency_plan  # noqa: E402
import ladder_data  # noqa: E402
import ladder_records  # noqa: E402
# At the start, so that the report at a sitting's end runs the code the sitting started with.
import ladder_report  # noqa: E402
import records  # noqa: E402
from efficiency import log  # noqa: E402

OBJECTIVES = ("electra", "mlm")
NONE = "none"  # the objective of the model without pretraining
EVAL_BATCHES = 100  # checkpoint_eval's batches of the run's eval_batch_size
# detection_baselines' masking and sampling seeds: their spread is the diagnostic's noise.
DETECTION_SEEDS = (0, 1, 2)


@dataclasses.dataclass(frozen=True)
class TaskProtocol:
    """How one downstream task is fine-tuned; its metric the report's verdicts use."""
    name: str
    epochs: float
    seq_length: int


@dataclasses.dataclass(frozen=True)
class Ladder:
    """Everything that sizes the experiment; every objective climbed gets the same."""
    # The model, sequence length, batch, peak learning rate, vocabulary, and the fine-tuning
    # seeds, learning rates, batch and sst's sizes (its electra_steps and curve_points are
    # not used: the rungs below replace them).
    budget: efficiency_plan.Budget
    tasks: tuple[TaskProtocol, ...]
    # The rungs: `rungs` budgets log-spaced from min_flops to max_flops, or, for a ladder that
    # continues trunks trained before it (their kept checkpoints decide where a first fork can
    # be), the first objective's steps at each rung (`rung_steps`; the others at equal FLOPs).
    min_flops: float = 0.0
    max_flops: float = 0.0
    rungs: int = 1
    rung_steps: tuple[int, ...] = ()
    # The climbs: objectives, or variants of one (efficiency_plan.VARIANTS).
    objectives: tuple[str, ...] = OBJECTIVES
    # Those of them that climb at the steps of their ELECTRA recipe
    # (efficiency_plan.TABLE5_REFERENCE) rather than at the rungs' FLOPs: the paper's Table 5
    # compares its objectives at equal steps.
    equal_steps: tuple[str, ...] = ()
    decay_fraction: float = 0.2  # each rung's last share, its decay branch
    warmup_fraction: float = 0.25  # of the smallest rung's FLOPs: the warmup, shared by all
    warmup_steps: int | None = None  # instead: the same steps for every objective
    trunk_name: str = "trunk_{objective}"  # each trunk's model name
    run_prefix: str = ""  # of the branches' model names
    pos_train_sentences: int = 1000
    save_every: int = 1000  # a pretraining run's checkpoint interval (steps), against crashes
    # The pretraining text's documents shuffled across all sources (downstream.ladder_corpus)
    # rather than one source after another.
    shuffled_corpus: bool = False
    results: str | None = None  # the committed records' folder in experiments/results/

    def __post_init__(self) -> None:
        unknown = set(self.objectives) - set(efficiency_plan.OBJECTIVES) - set(
            efficiency_plan.VARIANTS)
        if unknown:
            raise ValueError(f"objectives {sorted(unknown)}: not an objective or a variant in "
                             "experiments/efficiency_plan.py")
        references = {efficiency_plan.TABLE5_REFERENCE.get(o) for o in self.equal_steps}
        if set(self.equal_steps) - set(self.objectives) or None in references or \
                references - set(self.objectives):
            raise ValueError(f"equal_steps {self.equal_steps} must be among the objectives "
                             f"{self.objectives}, which must hold the ELECTRA recipe each "
                             "climbs beside (efficiency_plan.TABLE5_REFERENCE)")
        if self.rung_steps and self.rungs != len(self.rung_steps):
            raise ValueError(f"rungs {self.rungs} != the {len(self.rung_steps)} rung_steps")

    def rung_flops(self, data_dir: str) -> list[float]:
        """Each rung's FLOPs; `data_dir`'s vocabulary sizes a step, for rungs set in steps."""
        if self.rung_steps:
            flops = efficiency_plan.step_flops(self.budget, data_dir, self.objectives[0])
            return [steps * flops for steps in self.rung_steps]
        if self.rungs == 1:
            return [self.min_flops]
        ratio = (self.max_flops / self.min_flops) ** (1.0 / (self.rungs - 1))
        return [self.min_flops * ratio ** k for k in range(self.rungs)]


FULL_BUDGET = dataclasses.replace(
    efficiency_plan.BUDGETS["full"], trials=5, finetune_lrs=(3e-4, 1e-3), finetune_batch_size=32,
    task_sizes=downstream.DEFAULT_SIZES)
LADDERS = {
    # The pipeline end to end in a few minutes (the slow test): a tiny model, 2 rungs.
    "smoke": Ladder(budget=efficiency_plan.BUDGETS["smoke"], min_flops=1e10, max_flops=2e10,
                    rungs=2, tasks=(TaskProtocol("pos", 1.0, 64), TaskProtocol("sst", 1.0, 64)),
                    pos_train_sentences=40, save_every=4),
    # Issue 26's ladder: 7 rungs from 1e13 to 1e15 FLOPs (a factor 2.15 apart), the full
    # budget's model (hidden 128, 4 layers, generator 1/4, seq 128, batch 32, lr 1e-3) and its
    # 8k vocabulary size, learned from the bigger corpus.
    "full": Ladder(budget=FULL_BUDGET, min_flops=1e13, max_flops=1e15, rungs=7,
                   tasks=(TaskProtocol("pos", 5.0, 128), TaskProtocol("sst", 8.0, 64)),
                   results="ladder"),
}
# The same ladder on the same text with its documents shuffled across the sources: the
# builder writes examples in the order it reads its input files, so "full" trains through
# Wikipedia and Brown, then one technical manual after another (docs/reproduction.md).
LADDERS["mixed"] = dataclasses.replace(LADDERS["full"], shuffled_corpus=True,
                                       results="ladder_mixed")
# Towards ELECTRA-Small (Clark et al. 2020, Table 6: hidden 256, 4 heads, embeddings 128,
# generator 1/4, batch 128, peak rate 5e-4) at the ladder's 4 layers, after 500 warmup steps:
# the wide pilot's trunks (experiments/trunk_pilot.py), which are this ladder's trunks.
WIDE_SHAPE = {"hidden_size": 256, "num_heads": 4, "batch_size": 128}
WIDE_LEARNING_RATE = 5e-4
WIDE_WARMUP_STEPS = 500
# The mixed ladder's text at that shape, its trunks the wide pilot's runs (forked from their
# step 4,000 where kept): its rungs in BERT's steps, ELECTRA at BERT's FLOPs with the paper's
# generator of 1/4 and with one of 1/2, and the Table 5 objectives at the steps of ELECTRA with
# either generator, where BERT's first rung showed transfer (docs/reproduction.md, "The wide
# ladder", "ELECTRA on the wide ladder", "ELECTRA with a 1/2 generator" and "Table 5 at
# ELECTRA's steps": which generator Table 5 takes is decided by the 1/2 generator's rung 1);
# ELECTRA and Replace MLM with each other's loss weight ("The weighting confound"), both
# pretrained again from a second seed ("Pretraining seeds"), and Replace MLM with untied
# embeddings and at weight 50 from the second seed ("The run after the seeds").
LADDERS["mixed_wide"] = dataclasses.replace(
    LADDERS["mixed"], budget=dataclasses.replace(FULL_BUDGET, **WIDE_SHAPE,
                                                 learning_rate=WIDE_LEARNING_RATE),
    min_flops=0.0, max_flops=0.0, rungs=2, rung_steps=(5000, 10000),
    objectives=("mlm", "electra", "electra_half", "electra_w1", "electra_seed2",
                *efficiency_plan.TABLE5_REFERENCE),
    equal_steps=tuple(efficiency_plan.TABLE5_REFERENCE), warmup_steps=WIDE_WARMUP_STEPS,
    trunk_name="pilot_wide_{objective}_lr0.0005_w500", run_prefix="wide_",
    results="ladder_mixed_wide")


# ----------------------------------------------------------------------------- the plan

@dataclasses.dataclass(frozen=True)
class Rung:
    """One budget of one objective: a branch forked from the trunk at `fork`, decaying to 0
    over its last `decay_steps` steps, ending at `steps`."""
    objective: str
    index: int
    steps: int
    decay_steps: int
    step_flops: float
    prefix: str = ""  # of its model's name

    @property
    def fork(self) -> int:
        return self.steps - self.decay_steps

    @property
    def flops(self) -> float:
        return self.steps * self.step_flops

    @property
    def name(self) -> str:
        return f"{self.prefix}{self.objective}_{self.steps}"


@dataclasses.dataclass(frozen=True)
class Climb:
    """One objective's trunk and rungs."""
    objective: str
    step_flops: float
    warmup_steps: int
    rungs: tuple[Rung, ...]
    trunk: str  # its model name

    def cost_flops(self) -> float:
        """Pretraining FLOPs of the whole climb: the trunk to the last fork, every decay."""
        return (self.rungs[-1].fork + sum(r.decay_steps for r in self.rungs)) * self.step_flops


def plan(ladder: Ladder, data_dir: str) -> list[Climb]:
    """Each objective's steps at every rung: the whole number of its steps closest to the
    rung's FLOPs, so two objectives differ by less than half a step there; the warmup and
    the decay are the same FLOPs (shares) for both, unless the ladder sets the warmup's
    steps. The ladder's `equal_steps` objectives take the steps, warmup and decays of their
    ELECTRA recipe (efficiency_plan.TABLE5_REFERENCE)."""
    climbs = []
    budgets = ladder.rung_flops(data_dir)
    by_flops = [o for o in ladder.objectives if o not in ladder.equal_steps]
    for objective in by_flops + [o for o in ladder.objectives if o in ladder.equal_steps]:
        flops = efficiency_plan.step_flops(ladder.budget, data_dir, objective)
        if objective in ladder.equal_steps:
            reference = efficiency_plan.TABLE5_REFERENCE[objective]
            electra = next(c for c in climbs if c.objective == reference)
            climbs.append(Climb(objective, flops, electra.warmup_steps, tuple(
                dataclasses.replace(r, objective=objective, step_flops=flops)
                for r in electra.rungs), ladder.trunk_name.format(objective=objective)))
            continue
        warmup = ladder.warmup_steps or round(ladder.warmup_fraction * budgets[0] / flops)
        rungs = []
        for index, budget in enumerate(budgets):
            steps = round(budget / flops)
            rungs.append(Rung(objective, index, steps,
                              max(1, round(ladder.decay_fraction * steps)), flops,
                              ladder.run_prefix))
        forks = [r.fork for r in rungs]
        if warmup < 1 or forks[0] <= warmup or any(a >= b for a, b in zip(forks, forks[1:])):
            raise ValueError(f"{objective}: the rungs' forks {forks} must rise and start after "
                             f"the warmup ({warmup} steps); space the rungs further apart")
        climbs.append(Climb(objective, flops, warmup, tuple(rungs),
                            ladder.trunk_name.format(objective=objective)))
    return climbs


def pretraining_hparams(ladder: Ladder, climb: Climb, steps: int,
                        decay_steps: int) -> dict[str, Any]:
    """run_pretraining.py's hparams for the trunk (decay_steps 0) up to `steps` or a branch."""
    hparams = efficiency_plan.pretraining_hparams(ladder.budget, climb.objective, steps,
                                                  ladder.save_every)
    hparams.update(lr_schedule="wsd", lr_decay_steps=decay_steps,
                   num_warmup_steps=climb.warmup_steps, keep_checkpoint_max=2)
    return hparams


# ----------------------------------------------------------------------------- the runs

@dataclasses.dataclass
class Sitting:
    """What one sitting may do: its deadline (time.time(), or None) and where it writes."""
    ladder: Ladder
    data_dir: str
    out: str
    store: ladder_records.Store
    deadline: float | None = None

    def check_time(self) -> None:
        if self.deadline is not None and time.time() >= self.deadline:
            raise efficiency.Stopped("the sitting's time is up")


def pretrain(sitting: Sitting, climb: Climb, name: str, steps: int, decay_steps: int,
             kind: str, rung: Rung | None = None, again: bool = False) -> None:
    """One piece of pretraining (the trunk up to `steps`, or a rung's branch), recorded in
    pretrain.jsonl; skipped when recorded, unless `again` (its checkpoint is needed and was
    lost with another machine). A piece stopped at the deadline is recorded as unfinished with
    the CPU time it spent. Its TensorBoard scalars go to curves.jsonl and a trunk's newest
    checkpoint to the records' directory, finished or not."""
    done = dict(objective=climb.objective, model=name, kind=kind, pretrain_steps=steps,
                finished=True)
    if not again and sitting.store.has("pretrain", **done):
        return
    sitting.check_time()
    hparams = pretraining_hparams(sitting.ladder, climb, steps, decay_steps)
    log(f"pretraining {name} to step {steps}" + (f", decaying over the last {decay_steps}"
                                                 if decay_steps else " at the peak rate"))
    record = {**done, "pretrain_flops": steps * climb.step_flops,
              "step_flops": climb.step_flops, "rung": None if rung is None else rung.index,
              "hparams": hparams}
    try:
        usage = efficiency.run_logged(
            [sys.executable, "run_pretraining.py", "--data_dir", sitting.data_dir,
             "--model_name", name, "--hparams", json.dumps(hparams)],
            os.path.join(sitting.out, "logs", f"{name}_{steps}.log"), sitting.deadline)
    except efficiency.Stopped as stopped:
        sitting.store.append("pretrain", [{**record, **stopped.usage, "finished": False}])
        raise
    finally:
        record_curve(sitting, climb, name, kind)
        if kind == "trunk":
            save_trunk(sitting, climb)
    sitting.store.append("pretrain", [{**record, **usage}])
    log(f"pretrained {name} to step {steps} in {usage['wall_seconds']} s wall, "
        f"{usage['cpu_seconds']} s CPU")


# Machine-dependent progress scalars, not the run's learning curve.
NOT_CURVES = ("examples_per_second", "steps_per_second", "skipped_steps")


def record_curve(sitting: Sitting, climb: Climb, name: str, kind: str) -> None:
    """curves.jsonl: a line per logged step of a pretraining piece (every loss and metric the
    run wrote to TensorBoard, and the learning rate), for the steps not yet recorded for that
    piece as logged, so that the report can show where each objective leaves the unigram stage.
    A step recorded with other values (the piece pretrained again from an earlier step, its
    checkpoints lost with a machine) is recorded again: readers take a step's last line
    (records.latest), the curve of the model that was kept."""
    from electra_tf.progress import read_events

    directory = model_dir(sitting, name)
    if not os.path.isdir(directory):
        return
    scalars, _ = read_events(directory)
    recorded = {r["step"]: r["scalars"] for r in sitting.store.read("curves")
                if r["model"] == name}
    logged = {step: {tag: values[step] for tag, values in sorted(scalars.items())
                     if step in values and tag not in NOT_CURVES}
              for step in sorted({s for values in scalars.values() for s in values})}
    sitting.store.append("curves", [
        {"objective": climb.objective, "model": name, "kind": kind, "step": step,
         "pretrain_flops": step * climb.step_flops, "scalars": values}
        for step, values in logged.items() if recorded.get(step) != values])


# ----------------------------------------------------------------------------- the trunks

def trunk_snapshot(sitting: Sitting, climb: Climb) -> str:
    return os.path.join(sitting.store.directory, "trunks", climb.objective)


def save_trunk(sitting: Sitting, climb: Climb) -> None:
    """Copies the trunk's newest checkpoint (weights, optimizer state, random streams, input
    position, config) into RESULTS/trunks/OBJECTIVE/, replacing the one there, so that a
    sitting on another machine (the checkout copied with it) continues the trunk from there
    rather than from step 0."""
    from electra_tf import resume

    steps = resume.checkpoint_steps(model_dir(sitting, climb.trunk))
    target = trunk_snapshot(sitting, climb)
    if not steps or resume.checkpoint_steps(target)[-1:] == steps[-1:]:
        return
    staging, old = target + ".new", target + ".old"
    for leftover in (staging, old):
        shutil.rmtree(leftover, ignore_errors=True)
    resume.fork(model_dir(sitting, climb.trunk), steps[-1], staging)
    efficiency.write_json(os.path.join(staging, "data.json"),
                          ladder_data.data_fingerprint(sitting.data_dir))
    if os.path.exists(target):
        os.rename(target, old)
    os.rename(staging, target)
    shutil.rmtree(old, ignore_errors=True)
    log(f"{climb.trunk}: step {steps[-1]} saved in {target}")


def restore_trunk(sitting: Sitting, climb: Climb) -> None:
    """When the trunk's model directory holds no checkpoint as new as the saved one (a sitting
    on another machine), the saved one is forked into it; an older trunk there is moved aside,
    not deleted."""
    from electra_tf import resume

    target = trunk_snapshot(sitting, climb)
    saved = resume.checkpoint_steps(target)
    directory = model_dir(sitting, climb.trunk)
    local = resume.checkpoint_steps(directory)
    if not saved or (local and local[-1] >= saved[-1]):
        return
    expected = efficiency.read_json(os.path.join(target, "data.json"))
    if expected != ladder_data.data_fingerprint(sitting.data_dir):
        raise SystemExit(f"error: the saved trunk {target} was trained on other data than "
                         f"{sitting.data_dir} holds ({os.path.join(target, 'data.json')} against "
                         "its vocab.txt and pretrain_tfrecords/): rebuild "
                         "the data from the same corpora, or move the saved trunk away to "
                         "start the trunk from step 0")
    if local:
        aside = f"{directory}.stale-{local[-1]}"
        os.rename(directory, aside)
        log(f"{climb.trunk}: its step {local[-1]} is older than the saved step {saved[-1]}; "
            f"moved to {aside}")
    resume.fork(target, saved[-1], directory)
    log(f"{climb.trunk}: continuing from the saved step {saved[-1]} ({target})")


def model_dir(sitting: Sitting, name: str) -> str:
    return os.path.join(sitting.data_dir, "models", name)


def finetune_lines(task: str, summary: dict, test: list[dict[str, float]] | None,
                   key: dict[str, Any], usage: dict[str, float]) -> list[dict[str, Any]]:
    """finetune.jsonl's lines of one run: a line per seed, split and metric. `summary` is
    run_finetuning.py's results JSON (dev under the task's name; a task that scores its test
    split itself, as pos, has it under `<task>-test`); `test` the test metrics scored here
    (GLUE tasks), or None."""
    lines = []
    for trial, results in enumerate(summary["trials"]):
        splits = {"dev": results[task], "test": results.get(f"{task}-test")}
        if test is not None:
            splits["test"] = test[trial]
        if splits["test"] is None:
            raise ValueError(f"{task}: run_finetuning.py's results hold no test split and none "
                             "was scored; the report needs test")
        for split, metrics in splits.items():
            for metric, score in sorted(metrics.items()):
                lines.append({**key, "seed": efficiency.FINETUNE_SEED + trial, "split": split,
                              "metric": metric, "score": score,
                              "run_wall_seconds": usage["wall_seconds"],
                              "run_cpu_seconds": usage["cpu_seconds"]})
    return lines


def finetune(sitting: Sitting, objective: str, steps: int, flops: float, model: str,
             task: TaskProtocol, learning_rate: float) -> None:
    """`trials` seeds of one (model, task, learning rate), recorded in finetune.jsonl."""
    key = dict(objective=objective, pretrain_steps=steps, task=task.name,
               learning_rate=learning_rate)
    if sitting.store.has("finetune", **key):
        return
    sitting.check_time()
    budget = dataclasses.replace(sitting.ladder.budget, finetune_epochs=task.epochs,
                                 finetune_seq_length=task.seq_length)
    log(f"fine-tuning {model} on {task.name} at lr {learning_rate:g}")
    summary, usage = efficiency.run_finetuning(
        model, task.name, learning_rate, budget, sitting.data_dir,
        os.path.join(sitting.out, "logs", "finetune", f"{objective}_{steps}__{task.name}__lr"
                     f"{learning_rate:g}.log"), pretrained=objective != NONE)
    test = None
    if not any(f"{task.name}-test" in trial for trial in summary["trials"]):
        test = efficiency.score_test(sitting.data_dir, model, task.name, budget.trials)
    sitting.store.append("finetune", finetune_lines(task.name, summary, test,
                                                    {**key, "pretrain_flops": flops,
                                                     "model": model}, usage))
    efficiency.discard_finetuned(sitting.data_dir, model)


def probe_lines(record: dict[str, Any], key: dict[str, Any]) -> list[dict[str, Any]]:
    """probe.jsonl's lines from efficiency.probe_model's record ({task: {probe_<split>_<metric>:
    score}}): a line per task, split and metric."""
    lines = []
    for task, metrics in record.items():
        if task == "model" or not metrics:
            continue
        for name, score in sorted(metrics.items()):
            split, metric = name[len("probe_"):].split("_", 1)
            lines.append({**key, "task": task, "split": split, "metric": metric,
                          "score": score})
    return lines


def probe(sitting: Sitting, objective: str, steps: int, flops: float, model: str) -> None:
    """probe.jsonl: the linear probe of the model's frozen features on every task, each line
    with the time the whole probe took."""
    key = dict(objective=objective, pretrain_steps=steps, pretrain_flops=flops)
    if sitting.store.has("probe", objective=objective, pretrain_steps=steps):
        return
    sitting.check_time()
    stopwatch = records.Stopwatch()
    lines = []
    for task in sitting.ladder.tasks:  # each task at its own sequence length
        budget = dataclasses.replace(sitting.ladder.budget, finetune_seq_length=task.seq_length)
        lines += probe_lines(efficiency.probe_model(model, budget, sitting.data_dir,
                                                    [task.name]), key)
    # A model none of whose tasks can be probed (a tiny task of one label) is recorded too.
    spent = stopwatch.spent("run_")
    sitting.store.append("probe", [{**line, **spent} for line in lines] or [
        {**key, "task": None, "split": None, "metric": None, "score": None, **spent}])


def detect(sitting: Sitting, objective: str, steps: int, model: str) -> None:
    """detection.jsonl: what the model's discriminator detects beside bigram counts
    (experiments/detection_baselines.py), once for each of DETECTION_SEEDS, for the objectives
    whose discriminator judges every token. A diagnostic, not part of a rung's evaluation: a
    model lost with another machine is not made again for it."""
    from electra_tf import resume

    objective = efficiency_plan.VARIANTS.get(objective, (objective, {}))[0]
    seeds = [seed for seed in DETECTION_SEEDS
             if not sitting.store.has("detection", model=model, step=steps, seed=seed)]
    if not detection_baselines.judges(objective) or not seeds:
        return
    if steps not in resume.checkpoint_steps(model_dir(sitting, model)):
        log(f"{model}: no checkpoint at step {steps} here, so its discriminator is not judged "
            "against bigram counts")
        return
    for seed in seeds:
        sitting.check_time()
        try:
            record = detection_baselines.judge(sitting.data_dir, model, steps,
                                               batch_size=sitting.ladder.budget.batch_size,
                                               seed=seed)
        except detection_baselines.TooLittleText as e:
            log(f"{model}'s discriminator is not judged against bigram counts: {e}")
            return
        sitting.store.append("detection", [record])
        log(f"judged {model}'s discriminator (seed {seed}): AUC " + ", ".join(
            f"{name} {sum(aucs) / len(aucs):.3f}" for name, aucs in record["auc"].items()))


def evaluate_checkpoint(sitting: Sitting, objective: str, steps: int, model: str) -> None:
    """eval.jsonl: the model's pretraining metrics under do_eval (experiments/checkpoint_eval.py,
    EVAL_BATCHES batches, dropout off), beside the curves logged in training with dropout on;
    its `objective` is the ladder's name for it (a variant's, as in the other records), its
    `objective_hparam` the run's hparam. Stopped at the sitting's deadline, as every run. A
    diagnostic, as detect's: a model lost with another machine is not made again for it."""
    from electra_tf import resume

    if sitting.store.has("eval", model=model, step=steps):
        return
    if resume.checkpoint_steps(model_dir(sitting, model))[-1:] != [steps]:
        log(f"{model}: its latest checkpoint here is not step {steps}, so it is not evaluated")
        return
    sitting.check_time()
    try:
        record = checkpoint_eval.evaluate(sitting.data_dir, model, EVAL_BATCHES,
                                          os.path.join(sitting.out, "logs", f"eval_{model}.log"),
                                          sitting.deadline)
    except checkpoint_eval.NothingEvaluated as e:
        log(f"{model} is not evaluated: {e}")
        return
    if record["step"] != steps:  # the checkpoint at `steps` could not be read
        log(f"{model} is not evaluated: do_eval restored step {record['step']}, not {steps}")
        return
    sitting.store.append("eval", [{**record, "objective": objective}])
    log(f"evaluated {model}'s checkpoint at step {steps} in {record['wall_seconds']} s wall")


def evaluate(sitting: Sitting, objective: str, steps: int, flops: float, model: str) -> None:
    """Every task at every learning rate of the sweep, then the probe and, for a
    discriminator, what it detects; then its checkpoint under do_eval."""
    for task in sitting.ladder.tasks:
        for learning_rate in sitting.ladder.budget.finetune_lrs:
            finetune(sitting, objective, steps, flops, model, task, learning_rate)
    probe(sitting, objective, steps, flops, model)
    detect(sitting, objective, steps, model)
    evaluate_checkpoint(sitting, objective, steps, model)


def evaluated(sitting: Sitting, objective: str, steps: int) -> bool:
    """Whether every fine-tuning run and the probe of a model are recorded."""
    return sitting.store.has("probe", objective=objective, pretrain_steps=steps) and all(
        sitting.store.has("finetune", objective=objective, pretrain_steps=steps,
                          task=task.name, learning_rate=learning_rate)
        for task in sitting.ladder.tasks for learning_rate in sitting.ladder.budget.finetune_lrs)


def unfinished(sitting: Sitting, climbs: Sequence[Climb], max_rung: int) -> list[Climb]:
    """The climbs with a rung up to max_rung not yet evaluated."""
    return [c for c in climbs
            if not all(evaluated(sitting, c.objective, r.steps) for r in c.rungs[:max_rung])]


def runs_at_once(sitting: Sitting, climbing: Sequence[Climb], workers: int) -> int:
    """--workers, or fewer when less work is left (the unfinished climbs, random weights'
    runs), so that a run left alone takes every core instead of its share."""
    return max(1, min(workers, len(climbing) + (not evaluated(sitting, NONE, 0))))


def climb(sitting: Sitting, plan_: Climb, index: int) -> None:
    """One objective's rung `index`: the trunk on to the rung's fork, the decay branch forked
    there, then the branch's fine-tuning and probe. A branch whose model is needed but was
    lost with another machine is made again from the trunk."""
    from electra_tf import resume

    rung = plan_.rungs[index]
    branch = model_dir(sitting, rung.name)
    if not evaluated(sitting, plan_.objective, rung.steps) and \
            rung.steps not in resume.checkpoint_steps(branch):
        lost = sitting.store.has("pretrain", objective=plan_.objective, kind="branch",
                                 pretrain_steps=rung.steps, finished=True)
        if lost:
            log(f"{rung.name}: its model is not in {branch} (it was made on another "
                "machine); it is made again from the trunk")
        restore_trunk(sitting, plan_)
        trunk = model_dir(sitting, plan_.trunk)
        kept = resume.checkpoint_steps(trunk)
        if rung.fork not in kept and kept and kept[-1] > rung.fork:
            raise SystemExit(f"error: {rung.name} forks from the trunk at step {rung.fork}, and "
                             f"the trunk {trunk} is past it with no checkpoint there (it keeps "
                             f"{kept}): set the ladder's rungs so that every fork still needed is "
                             "at a kept checkpoint or after the newest")
        pretrain(sitting, plan_, plan_.trunk, rung.fork, 0, "trunk", again=rung.fork not in kept)
        resume.fork(trunk, rung.fork, branch)
        pretrain(sitting, plan_, rung.name, rung.steps, rung.decay_steps, "branch", rung,
                 again=lost)
    evaluate(sitting, plan_.objective, rung.steps, rung.flops, rung.name)


# ----------------------------------------------------------------------------- data

def prepare_data(out: str, shared_data: str, ladder: Ladder) -> str:
    """DATA_DIR: vocab.txt, pretrain_tfrecords/, finetuning_data/{pos,sst}/."""
    from electra_tf.finetuning import pos

    finetuning = os.path.join(out, "data", "finetuning_data")
    names = [t.name for t in ladder.tasks]
    task_files = {n: os.path.join(finetuning, n, "test.txt" if n == "pos" else "test_labels.tsv")
                  for n in names}
    data_ready = os.path.exists(os.path.join(out, "data", "pretrain_tfrecords",
                                             "build_summary.json"))
    if not data_ready or not all(map(os.path.exists, task_files.values())):
        ladder_data.check_shared_data(shared_data)
    corpus = (ladder_data.build_corpus(out, shared_data, ladder.shuffled_corpus) if not data_ready
              else os.path.join(out, "corpus"))
    data_dir = efficiency.pretraining_data(
        out, corpus, ladder.budget, os.path.join(shared_data, "vocab", "bert_uncased_vocab.txt"))
    if "pos" in names and not os.path.exists(task_files["pos"]):
        counts = pos.write_task_files(os.path.join(shared_data, "corpora", "brown_tagged"),
                                      os.path.join(finetuning, "pos"),
                                      ladder.pos_train_sentences)
        log(f"pos task -> {finetuning}/pos: {counts}")
    glue_tasks = [n for n in names if n != "pos"]
    if glue_tasks and not all(os.path.exists(task_files[n]) for n in glue_tasks):
        downstream.build_tasks(shared_data, finetuning, ladder.budget.task_sizes, glue_tasks)
        log(f"downstream tasks {glue_tasks} -> {finetuning}")
    return data_dir


# ----------------------------------------------------------------------------- main

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="working directory (data, runs, logs)")
    parser.add_argument("--ladder", default="full", choices=sorted(LADDERS))
    parser.add_argument("--hours", type=float, default=None,
                        help="end the sitting after this many hours: no run starts after it, "
                             "a pretraining run still going is stopped with a checkpoint")
    parser.add_argument("--max_rung", type=int, default=None,
                        help="climb only the first K rungs in this sitting (default: all)")
    parser.add_argument("--objectives", default=None,
                        help="comma-separated: climb only these of the ladder's objectives in "
                             "this sitting (default: all); the rungs stay at the ladder's FLOPs")
    parser.add_argument("--workers", type=int, default=1,
                        help="runs side by side, each on cpu_count / workers threads (2: two "
                             "climbs, each on one core; one climb, random weights' fine-tuning "
                             "beside it while that is unfinished); fewer when less work is left, "
                             "so that a run left alone takes every core")
    parser.add_argument("--shared_data", default=os.path.join(REPO, "..", "shared", "data"))
    parser.add_argument("--results", default=None,
                        help="the records' directory (default: experiments/results/LADDER, "
                             "with LADDER ladder for --ladder full, else its name; "
                             "OUT/results for smoke)")
    parser.add_argument("--report_dir", default=None,
                        help="NAME_results.md and NAME_curve.png, NAME the ladder's records' "
                             "folder name (ladder, ladder_mixed_wide; ladder for smoke) "
                             "(default: OUT/report; docs/ for the committed report)")
    args = parser.parse_args(argv)
    if args.hours is not None and args.hours <= 0:
        parser.error(f"--hours must be positive, got {args.hours}")
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    ladder = LADDERS[args.ladder]
    if args.max_rung is not None and not 1 <= args.max_rung <= ladder.rungs:
        parser.error(f"--max_rung must be in [1, {ladder.rungs}], got {args.max_rung}")
    args.objectives = (ladder.objectives if args.objectives is None
                       else tuple(o for o in args.objectives.split(",") if o))
    if not args.objectives or set(args.objectives) - set(ladder.objectives):
        parser.error(f"--objectives must name some of the ladder's {','.join(ladder.objectives)}, "
                     f"got {','.join(args.objectives) or 'none'}")
    args.out = os.path.abspath(args.out)
    if args.results is None:
        args.results = (os.path.join(REPO, "experiments", "results", ladder.results)
                        if ladder.results else os.path.join(args.out, "results"))
    if args.report_dir is None:
        args.report_dir = os.path.join(args.out, "report")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    ladder = LADDERS[args.ladder]
    start = time.time()
    deadline = None if args.hours is None else start + 3600 * args.hours
    data_dir = prepare_data(args.out, args.shared_data, ladder)
    ladder_data.check_data(args.results, data_dir)
    climbs = [c for c in plan(ladder, data_dir) if c.objective in args.objectives]
    max_rung = args.max_rung or ladder.rungs
    for c in climbs:
        log(f"{c.objective}: warmup {c.warmup_steps} steps, rungs at "
            + ", ".join(f"{r.steps} ({r.flops:.2g} FLOPs, fork {r.fork})" for r in c.rungs)
            + f"; {c.cost_flops() / c.rungs[-1].flops:.2f}x the largest rung's FLOPs")
    sitting = Sitting(ladder, data_dir, args.out, ladder_records.Store(args.results), deadline)
    ladder_data.record_baselines(sitting.store, data_dir)
    ladder_data.record_unigram_baseline(sitting.store, data_dir, ladder.budget.seq_length)
    climbing = unfinished(sitting, climbs, max_rung)
    workers = runs_at_once(sitting, climbing, args.workers)
    efficiency.share_cores(workers)
    if workers < args.workers:
        log(f"{workers} run(s) at a time, on all the cores: less work is left than "
            f"--workers {args.workers} shares them for")

    def random_weights(workers: int) -> None:
        # Each of its runs in a model directory of its own, so that workers share its runs.
        efficiency.side_by_side(workers, lambda job: finetune(
            sitting, NONE, 0, 0.0, f"{efficiency.NO_PRETRAINING}__{job[0].name}__lr{job[1]:g}",
            *job), [(t, lr) for t in ladder.tasks for lr in ladder.budget.finetune_lrs])
        probe(sitting, NONE, 0, 0.0, efficiency.NO_PRETRAINING)

    def rungs(workers: int) -> None:
        # Rung by rung, the climbs side by side (at nearly equal FLOPs or steps).
        for index in range(max_rung):
            efficiency.side_by_side(workers, lambda c: climb(sitting, c, index), climbs)

    try:
        if len(climbing) == 1 < workers:  # one climb: random weights beside it, not before it
            efficiency.side_by_side(2, lambda part: part(1), [random_weights, rungs])
        else:
            random_weights(workers)
            rungs(workers)
        finished = max_rung == ladder.rungs
        log("the ladder is done" if finished else f"rungs 1-{max_rung} are done")
    except efficiency.Stopped as stopped:
        log(f"sitting over after {(time.time() - start) / 3600:.2f} h ({stopped}); rerun the "
            "same command to continue")
    written = ladder_report.write(args.results, args.report_dir, ladder.results or "ladder")
    log(f"wrote {', '.join(written)}")


if __name__ == "__main__":
    main()
