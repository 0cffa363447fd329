"""ELECTRA against BERT with longer pretraining and at other pretraining learning rates, followed
by the linear probe while they pretrain.

  python experiments/probe_curves.py --out DIR [--budget full] [--run LR:STEPS ...]
      [--probe_task sst] [--probe_steps 400] [--workers 2] [--report_dir DIR]

experiments/efficiency.py fine-tunes every checkpoint, which makes each point of its curves
expensive. This experiment asks the cheaper question first: does anything in the frozen
discriminator transfer if the budget's runs go on longer, or use another peak learning rate?
Each `--run LR:STEPS` pretrains ELECTRA for STEPS steps and BERT (`mlm`) for the steps that cost
the same FLOPs (electra_tf.flops), both at peak learning rate LR; everything else (model, data,
vocabulary, batch, schedule shape, seed) is the efficiency budget's. Both runs use
run_pretraining.py's `probe_task` on the budget's built task: every probe_steps (BERT: the
steps of the same FLOPs) a logistic regression on the frozen discriminator's features is
fitted on the task's train split and scored on its dev split, the selection split (the
reported test split is never read). A randomly initialised encoder of the same shape, probed
the same way, is the floor.

Rerunning resumes: finished runs are skipped, an interrupted run continues from its last
checkpoint. Raw results go to DIR/results/probe_curves/*.json, progress to stdout, each run's
output to DIR/logs/, and the table and plot (probe_curves_results.md, probe_curves.png) to
--report_dir.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (REPO, os.path.join(REPO, "experiments")):
    if path not in sys.path:
        sys.path.insert(0, path)

import efficiency  # noqa: E402
import efficiency_plan  # noqa: E402
import report  # noqa: E402
from efficiency import log, read_json, write_json  # noqa: E402

DEFAULT_RUNS = ("1e-3:4000", "3e-3:800")  # docs/efficiency_miniature.md's runs
# The TensorBoard scalars kept from each run: the probe's and the pretraining health's.
TAGS = ("masked_lm_loss", "disc_auc")


@dataclasses.dataclass(frozen=True)
class ProbeRun:
    objective: str
    learning_rate: float
    steps: int
    probe_steps: int
    step_flops: float

    @property
    def name(self) -> str:
        return f"{self.objective}_lr{self.learning_rate:g}_{self.steps}"


def parse_run(text: str) -> tuple[float, int]:
    """'LR:STEPS' -> (learning rate, ELECTRA's steps)."""
    try:
        learning_rate, steps = text.split(":")
        learning_rate, steps = float(learning_rate), int(steps)
    except ValueError:
        raise ValueError(f"--run {text!r}: expected LR:STEPS, e.g. 1e-3:4000") from None
    if learning_rate <= 0 or steps <= 0:
        raise ValueError(f"--run {text!r}: the learning rate and steps must be positive")
    return learning_rate, steps


def plan(budget: efficiency_plan.Budget, data_dir: str, runs: Sequence[tuple[float, int]],
         probe_steps: int) -> list[ProbeRun]:
    """ELECTRA and BERT for each (learning rate, steps), BERT at ELECTRA's FLOPs and probed at
    the steps of ELECTRA's probe points' FLOPs."""
    electra = efficiency_plan.step_flops(budget, data_dir, "electra")
    bert = efficiency_plan.step_flops(budget, data_dir, "mlm")
    planned = []
    for learning_rate, steps in runs:
        planned.append(ProbeRun("electra", learning_rate, steps, probe_steps, electra))
        planned.append(ProbeRun("mlm", learning_rate, round(steps * electra / bert),
                                round(probe_steps * electra / bert), bert))
    return planned


def pretrain(run: ProbeRun, budget: efficiency_plan.Budget, data_dir: str, task: str,
             out: str) -> dict:
    """One run through run_pretraining.py with the probe; its curves from its events."""
    done = os.path.join(out, "results", "probe_curves", f"{run.name}.json")
    if os.path.exists(done):
        return read_json(done)
    hparams = efficiency_plan.pretraining_hparams(budget, run.objective, run.steps, run.probe_steps)
    hparams.update(learning_rate=run.learning_rate,
                   probe_task=os.path.join(data_dir, "finetuning_data", task),
                   probe_steps=run.probe_steps, probe_examples=max(budget.task_sizes.values()))
    log(f"pretraining {run.name}: {run.steps} steps, probed every {run.probe_steps}")
    usage = efficiency.run_logged(
        [sys.executable, "run_pretraining.py", "--data_dir", data_dir, "--model_name",
         f"probe_{run.name}", "--hparams", json.dumps(hparams)],
        os.path.join(out, "logs", f"probe_{run.name}.log"))
    scalars = report.event_scalars(os.path.join(data_dir, "models", f"probe_{run.name}"),
                                   [*TAGS, *probe_tags(task)])
    record = {**dataclasses.asdict(run), "name": run.name, "task": task, "hparams": hparams,
              "scalars": scalars, **usage}
    write_json(done, record)
    log(f"pretrained {run.name} in {usage['wall_seconds']} s wall, {usage['cpu_seconds']} s "
        f"CPU; probe: {scalars.get(probe_tags(task)[1], ([], []))[1]}")
    return record


def probe_tags(task: str) -> tuple[str, str]:
    """The probe's train and dev scalars for a task (its GLUE main metric)."""
    from electra_tf.finetuning import glue

    metric = glue.get_task(task).main_metric_name
    return f"probe_train_{metric}", f"probe_dev_{metric}"


def write_report(records: Sequence[dict], random: dict, task: str, report_dir: str) -> list[str]:
    """probe_curves_results.md (a row per run) and probe_curves.png (the probe, the masked-LM
    loss and the discriminator's AUC against pretraining FLOPs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from electra_tf import files

    train_tag, dev_tag = probe_tags(task)
    floor = random[task][dev_tag]
    lines = [f"| run | peak lr | steps | pretraining FLOPs | probe dev, every probe point "
             f"({task}) | best | last masked-LM loss | last disc AUC | wall s | CPU s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        s = r["scalars"]
        probes = s.get(dev_tag, ([], []))[1]
        last = {tag: f"{s[tag][1][-1]:.3f}" if tag in s else "-" for tag in TAGS}
        lines.append(
            f"| {r['objective']} | {r['learning_rate']:g} | {r['steps']} | "
            f"{r['steps'] * r['step_flops']:.2g} | "
            f"{' / '.join(f'{p:.1f}' for p in probes)} | "
            f"{max(probes):.1f} | {last['masked_lm_loss']} | {last['disc_auc']} | "
            f"{r['wall_seconds']:.0f} | {r['cpu_seconds']:.0f} |")
    lines.append(f"| no pretraining (random weights) | | 0 | 0 | {floor:.1f} | | | | | |")

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    panels = ((dev_tag, f"linear probe, {task} dev"), ("masked_lm_loss",
              "masked-LM loss (ELECTRA: the generator's)"), ("disc_auc", "discriminator AUC"))
    for color, r in enumerate(records):  # a run keeps its colour in every panel
        style = "-" if r["objective"] == "electra" else "--"
        label = (f"{'ELECTRA' if r['objective'] == 'electra' else 'BERT'}, lr "
                 f"{r['learning_rate']:g}, {r['steps']} steps")
        for ax, (tag, _) in zip(axes, panels):
            if tag in r["scalars"]:
                steps, values = r["scalars"][tag]
                ax.plot([step * r["step_flops"] for step in steps], values, style, label=label,
                        color=f"C{color}", marker="o" if tag == dev_tag else None,
                        markersize=3)
    axes[0].axhline(floor, color="grey", linestyle=":", label="no pretraining")
    for ax, (_, title) in zip(axes, panels):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("pretraining FLOPs")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    os.makedirs(report_dir, exist_ok=True)
    plot = os.path.join(report_dir, "probe_curves.png")
    report._save(fig, plot)
    table = os.path.join(report_dir, "probe_curves_results.md")
    text = (f"# Probe curves: results\n\nGenerated by `experiments/probe_curves.py`. The probe: "
            f"a logistic regression on the frozen discriminator's [CLS] and mean-pooled features "
            f"of {task}'s train split, scored on its dev split (the task's GLUE main metric), at "
            f"every probe point of each run. Random weights on the train split: "
            f"{random[task][train_tag]:.1f}. Wall and CPU seconds are the last process's (a "
            f"resumed run's earlier part is not in them)."
            "\n\n" + "\n".join(lines) + "\n")
    files.write_atomically(table, text)
    return [table, plot]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="working directory (data, runs, results)")
    parser.add_argument("--budget", default="full", choices=sorted(efficiency_plan.BUDGETS),
                        help="efficiency.py's budget: the model, data, batch and schedule shape")
    parser.add_argument("--run", action="append", default=None, metavar="LR:STEPS",
                        help=f"ELECTRA's peak learning rate and steps (BERT: equal FLOPs); "
                             f"repeatable; default {' '.join(DEFAULT_RUNS)}")
    parser.add_argument("--probe_task", default="sst", help="a task experiments/downstream.py "
                        "builds, or one under --task_data")
    parser.add_argument("--task_data", default=None)
    parser.add_argument("--probe_steps", type=int, default=400,
                        help="ELECTRA's steps between probes")
    parser.add_argument("--shared_data", default=os.path.join(REPO, "..", "shared", "data"))
    parser.add_argument("--workers", type=int, default=1,
                        help="runs side by side, each on cpu_count / workers threads")
    parser.add_argument("--report_dir", default=None,
                        help="default: docs/ for --budget full, else OUT/report")
    args = parser.parse_args(argv)
    try:
        args.run = [parse_run(r) for r in (args.run or DEFAULT_RUNS)]
    except ValueError as e:
        parser.error(str(e))
    if args.probe_steps <= 0:
        parser.error(f"--probe_steps must be positive, got {args.probe_steps}")
    args.out = os.path.abspath(args.out)
    if args.report_dir is None:
        args.report_dir = (os.path.join(REPO, "docs") if args.budget == "full"
                           else os.path.join(args.out, "report"))
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    budget = efficiency_plan.BUDGETS[args.budget]
    efficiency.share_cores(args.workers)
    start = time.time()
    data_dir = efficiency.prepare_data(args.out, args.shared_data, budget, [args.probe_task],
                                       args.task_data)
    runs = plan(budget, data_dir, args.run, args.probe_steps)
    log(f"{len(runs)} pretraining runs ({', '.join(r.name for r in runs)}), "
        f"{args.workers} at a time")
    records = efficiency.side_by_side(
        args.workers, lambda run: pretrain(run, budget, data_dir, args.probe_task, args.out), runs)
    # The floor, probed at the pretraining sequence length as run_pretraining.py probes.
    random = efficiency.probe(efficiency.NO_PRETRAINING, dataclasses.replace(
        budget, finetune_seq_length=budget.seq_length), data_dir, args.out, [args.probe_task],
        results="probe_curves")
    written = write_report(records, random, args.probe_task, args.report_dir)
    log(f"done in {time.time() - start:.0f} s; wrote {', '.join(written)}")


if __name__ == "__main__":
    main()
