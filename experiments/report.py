"""Tables and plots of experiments/efficiency.py's raw results (OUT/results/*/*.json).

  python experiments/report.py --out OUT --budget full [--report_dir docs]

redraws the report from the results alone (efficiency.py calls write() at its end). For each
pretrained model and task, the fine-tuning learning rate is the one with the best median on
the selection split (dev.tsv); the numbers shown are that learning rate's test-split metrics
over the seeds: the median, the interquartile range and the min-max. A task's number is its
GLUE main metric (accuracy; Spearman for sts; MCC for cola); "average" is their mean, as the
paper's GLUE score. Two models' difference on a task "exceeds the seed noise" when a two-sided
Mann-Whitney U test over their seeds gives p < 0.05 (with 5 seeds per side the smallest
possible p is 0.008; with 3, 0.1, so 3 seeds can never show it).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import statistics
import sys
from typing import Any, Sequence

import numpy as np

import downstream
import efficiency_plan

NOISE_P = 0.05
# The objectives the curves draw, each in its colour (labels: efficiency_plan.NAMES).
CURVE_COLORS = (("electra", "tab:blue"), ("mlm", "tab:orange"))


@dataclasses.dataclass
class Score:
    """One (model, task) at its selected learning rate: per-seed test main metrics."""
    learning_rate: float
    selection_median: float
    test: list[float]

    @property
    def median(self) -> float:
        return float(np.median(self.test))

    @property
    def iqr(self) -> tuple[float, float]:
        return float(np.percentile(self.test, 25)), float(np.percentile(self.test, 75))


@dataclasses.dataclass
class Model:
    name: str
    objective: str
    step: int  # 0: no pretraining
    flops: float
    scores: dict[str, Score]
    # task -> {"train": .., "dev": ..}: the linear probe's main metric (electra_tf.probe)
    probes: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)

    def average(self, tasks: Sequence[str]) -> float:
        return statistics.mean(self.scores[t].median for t in tasks)

    def seed_averages(self, tasks: Sequence[str]) -> list[float]:
        """Per seed, the mean over tasks (seed k of every task): the spread of the average."""
        return [statistics.mean(vals) for vals in zip(*(self.scores[t].test for t in tasks))]


def main_metric(task: str, metrics: dict[str, float]) -> float:
    from electra_tf.finetuning import glue

    return glue.get_task(task).main_metric(metrics)


def load(out: str, tasks: Sequence[str]) -> list[Model]:
    """Every model with results on every task, the learning rate selected per task."""
    pretrain = {r["objective"]: r for r in map(_read, glob.glob(
        os.path.join(out, "results", "pretrain", "*.json")))}
    by_model: dict[str, dict[str, list[dict]]] = {}
    for record in map(_read, glob.glob(os.path.join(out, "results", "finetune", "*.json"))):
        by_model.setdefault(record["model"], {}).setdefault(record["task"], []).append(record)
    models = []
    for name, per_task in by_model.items():
        if not all(t in per_task for t in tasks):
            continue
        objective, _, step = name.rpartition("_")
        if objective in pretrain:
            step, flops = int(step), int(step) * pretrain[objective]["step_flops"]
        else:
            objective, step, flops = name, 0, 0.0
        scores = {}
        for task in tasks:
            best = select(per_task[task], task)
            scores[task] = Score(best["learning_rate"], _median_metric(task, best["selection"]),
                                 [main_metric(task, m) for m in best["test"]])
        models.append(Model(name, objective, step, flops, scores, _probes(out, name, tasks)))
    return sorted(models, key=lambda m: (m.objective, m.step))


def _probes(out: str, name: str, tasks: Sequence[str]) -> dict[str, dict[str, float]]:
    path = os.path.join(out, "results", "probe", f"{name}.json")
    if not os.path.exists(path):
        return {}
    record = _read(path)
    return {task: {split: next(v for k, v in record[task].items()
                               if k.startswith(f"probe_{split}_"))
                   for split in ("train", "dev")} for task in tasks if record.get(task)}


def _median_metric(task: str, trials: Sequence[dict[str, float]]) -> float:
    return float(np.median([main_metric(task, m) for m in trials]))


def select(records: Sequence[dict], task: str) -> dict:
    """The fine-tuning run (one per learning rate) with the best median main metric on the
    selection split; ties go to the smaller learning rate."""
    return max(records, key=lambda r: (_median_metric(task, r["selection"]),
                                       -r["learning_rate"]))


def _read(path: str) -> dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def exceeds_noise(a: Sequence[float], b: Sequence[float]) -> tuple[float, bool]:
    """(two-sided Mann-Whitney U p-value, p < NOISE_P)."""
    from scipy import stats

    if np.ptp(list(a) + list(b)) == 0:
        return 1.0, False
    p = float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    return p, p < NOISE_P


def _cell(score: Score) -> str:
    low, high = score.iqr
    return (f"{score.median:.1f} [{low:.1f}, {high:.1f}] ({min(score.test):.1f}-"
            f"{max(score.test):.1f})")


def models_table(models: Sequence[Model], tasks: Sequence[str]) -> str:
    header = ("| model | pretraining steps | pretraining FLOPs | " + " | ".join(tasks)
              + " | average (seed min-max) | selected lr |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for m in models:
        seeds = m.seed_averages(tasks)
        lrs = ", ".join(f"{m.scores[t].learning_rate:g}" for t in tasks)
        lines.append(f"| {m.name} | {m.step} | {m.flops:.3g} | "
                     + " | ".join(_cell(m.scores[t]) for t in tasks)
                     + f" | {m.average(tasks):.1f} ({min(seeds):.1f}-{max(seeds):.1f}) | {lrs} |")
    return "\n".join(lines)


def comparison_table(pairs: Sequence[tuple[Model, Model]], tasks: Sequence[str]) -> str:
    header = ("| A | B | " + " | ".join(f"{t}: A - B (p)" for t in tasks)
              + " | average: A - B |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for a, b in pairs:
        cells = []
        for t in tasks:
            p, significant = exceeds_noise(a.scores[t].test, b.scores[t].test)
            diff = a.scores[t].median - b.scores[t].median
            cells.append(f"{diff:+.1f} ({p:.3f}){' *' if significant else ''}")
        lines.append(f"| {a.name} | {b.name} | " + " | ".join(cells)
                     + f" | {a.average(tasks) - b.average(tasks):+.1f} |")
    return "\n".join(lines)


def curve_pairs(models: Sequence[Model]) -> list[tuple[Model, Model]]:
    """ELECTRA's and BERT's checkpoints at the same FLOP budget (the k-th of each)."""
    electra = [m for m in models if m.objective == "electra"]
    bert = [m for m in models if m.objective == "mlm"]
    return list(zip(electra, bert))


def final_models(models: Sequence[Model]) -> list[Model]:
    """Each objective's last checkpoint."""
    last: dict[str, Model] = {}
    for m in models:
        if m.step and (m.objective not in last or m.step > last[m.objective].step):
            last[m.objective] = m
    return sorted(last.values(), key=lambda m: -m.average(list(m.scores)))


def plot_curve(models: Sequence[Model], tasks: Sequence[str], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [*tasks, "average"]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6), squeeze=False)
    baseline = next((m for m in models if m.step == 0), None)
    for ax, panel in zip(axes[0], panels):
        for objective, color in CURVE_COLORS:
            label = efficiency_plan.NAMES[objective]
            points = [m for m in models if m.objective == objective]
            if not points:
                continue
            x = [m.flops for m in points]
            if panel == "average":
                y = [m.average(tasks) for m in points]
                spread = [m.seed_averages(tasks) for m in points]
                low = [yy - min(s) for yy, s in zip(y, spread)]
                high = [max(s) - yy for yy, s in zip(y, spread)]
            else:
                y = [m.scores[panel].median for m in points]
                low = [yy - m.scores[panel].iqr[0] for yy, m in zip(y, points)]
                high = [m.scores[panel].iqr[1] - yy for yy, m in zip(y, points)]
            ax.errorbar(x, y, yerr=[low, high], marker="o", capsize=3, label=label, color=color)
        if baseline is not None:
            level = (baseline.average(tasks) if panel == "average"
                     else baseline.scores[panel].median)
            ax.axhline(level, color="gray", linestyle="--", label="no pretraining")
        _flops_axis(ax, models)
        ax.set_title(panel + (" (seed min-max)" if panel == "average" else " (median, IQR)"))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test score")
    axes[0][-1].legend(fontsize=8)
    _save(fig, path)


def _save(fig, path: str) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _flops_axis(ax, models: Sequence[Model]) -> None:
    """A log x axis ticked at ELECTRA's checkpoints."""
    import matplotlib.ticker

    ax.set_xscale("log")
    ticks = sorted({m.flops for m in models if m.objective == "electra"})
    ax.set_xticks(ticks, [f"{t:.2g}" for t in ticks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("pretraining FLOPs")


def plot_probe(models: Sequence[Model], tasks: Sequence[str], path: str) -> None:
    """The linear probe's dev score against pretraining FLOPs, per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tasks), figsize=(4 * len(tasks), 3.6), squeeze=False)
    baseline = next((m for m in models if m.step == 0 and m.probes), None)
    for ax, task in zip(axes[0], tasks):
        for objective, color in CURVE_COLORS:
            label = efficiency_plan.NAMES[objective]
            points = [m for m in models if m.objective == objective and task in m.probes]
            ax.plot([m.flops for m in points], [m.probes[task]["dev"] for m in points],
                    marker="o", label=label, color=color)
        if baseline is not None and task in baseline.probes:
            ax.axhline(baseline.probes[task]["dev"], color="gray", linestyle="--",
                       label="no pretraining")
        _flops_axis(ax, models)
        ax.set_title(f"{task}: linear probe, dev")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("probe score")
    axes[0][-1].legend(fontsize=8)
    _save(fig, path)


PRETRAINING_PANELS = (("masked_lm_loss", "generator's (BERT's) masked-LM loss"),
                      ("disc_auc", "discriminator AUC (replaced vs original)"),
                      ("replaced_fraction", "masked tokens the sample replaced"))


def event_scalars(model_dir: str, tags: Sequence[str]) -> dict[str, tuple[list[int], list[float]]]:
    """tag -> (steps, values) from a run's TensorBoard events (the last value at each step)."""
    from electra_tf import progress

    scalars, _ = progress.read_events(model_dir)
    return {tag: (sorted(scalars[tag]), [scalars[tag][k] for k in sorted(scalars[tag])])
            for tag in tags if tag in scalars}


def pretraining_scalars(out: str, objective: str) -> dict[str, tuple[list[int], list[float]]]:
    """The PRETRAINING_PANELS curves of an objective's pretraining run."""
    return event_scalars(os.path.join(out, "data", "models", f"pretrain_{objective}"),
                         [tag for tag, _ in PRETRAINING_PANELS])


def plot_pretraining(out: str, objectives: Sequence[str], path: str) -> None:
    """Each objective's pretraining metrics against its steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PRETRAINING_PANELS), figsize=(13, 3.6))
    for objective in objectives:
        scalars = pretraining_scalars(out, objective)
        for ax, (tag, _) in zip(axes, PRETRAINING_PANELS):
            if tag in scalars:
                ax.plot(*scalars[tag], label=objective)
    for ax, (_, title) in zip(axes, PRETRAINING_PANELS):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("pretraining step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    _save(fig, path)


def probe_table(models: Sequence[Model], tasks: Sequence[str]) -> str:
    lines = ["| model | pretraining FLOPs | " + " | ".join(tasks) + " |",
             "|---|---|" + "---|" * len(tasks)]
    for m in models:
        lines.append(f"| {m.name} | {m.flops:.3g} | " + " | ".join(
            f"{m.probes[t]['dev']:.1f} ({m.probes[t]['train']:.1f})" if t in m.probes
            else "n/a" for t in tasks) + " |")
    return "\n".join(lines)


def plot_table5(models: Sequence[Model], tasks: Sequence[str], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    finals = [m for m in final_models(models) if m.objective in efficiency_plan.PAPER_TABLE5]
    fig, (ours, paper) = plt.subplots(1, 2, figsize=(10, 3.8))
    names = [m.objective for m in finals]
    y = [m.average(tasks) for m in finals]
    spread = [m.seed_averages(tasks) for m in finals]
    ours.bar(names, y, yerr=[[v - min(s) for v, s in zip(y, spread)],
                             [max(s) - v for v, s in zip(y, spread)]], capsize=4,
             color="tab:blue")
    baseline = next((m for m in models if m.step == 0), None)
    if baseline is not None:
        ours.axhline(baseline.average(tasks), color="gray", linestyle="--",
                     label="no pretraining")
        ours.legend(fontsize=8)
    ours.set_title(f"ours: average test score ({', '.join(tasks)})")
    paper.bar(names, [efficiency_plan.PAPER_TABLE5[n] for n in names], color="tab:gray")
    paper.set_title("paper, Table 5: GLUE dev (Base size)")
    floor = [baseline.average(tasks)] if baseline is not None else []
    for ax, values in ((ours, y + floor + [max(s) for s in spread] + [min(s) for s in spread]),
                       (paper, [efficiency_plan.PAPER_TABLE5[n] for n in names])):
        ax.set_ylim(min(values) - 3, max(values) + 2)
        ax.tick_params(axis="x", rotation=20)
        ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


def costs_table(out: str) -> str:
    lines = ["| run | steps | wall s | CPU s | load average at the end |", "|---|---|---|---|---|"]
    for path in sorted(glob.glob(os.path.join(out, "results", "pretrain", "*.json"))):
        r = _read(path)
        lines.append(f"| pretrain {r['objective']} | {r['steps']} | {r['wall_seconds']} | "
                     f"{r['cpu_seconds']} | {r['load_average']} |")
    finetunes = list(map(_read, glob.glob(os.path.join(out, "results", "finetune", "*.json"))))
    if finetunes:
        lines.append(f"| {len(finetunes)} fine-tuning runs | | "
                     f"{sum(r['wall_seconds'] for r in finetunes):.0f} | "
                     f"{sum(r['cpu_seconds'] for r in finetunes):.0f} | |")
    return "\n".join(lines)


def write(out: str, report_dir: str, budget, runs, tasks: Sequence[str]) -> list[str]:
    """efficiency_results.md, efficiency_table5.png, efficiency_pretraining.png and, where
    ELECTRA or BERT ran, efficiency_curve.png and (with probe results) efficiency_probe.png
    into report_dir."""
    models = load(out, tasks)
    if not models:
        raise ValueError(f"no model has results on every task {list(tasks)} in {out}/results")
    os.makedirs(report_dir, exist_ok=True)
    table5 = os.path.join(report_dir, "efficiency_table5.png")
    plot_table5(models, tasks, table5)
    written = [table5]
    # The curves against FLOPs are ELECTRA's and BERT's (a run of other objectives has none).
    on_curve = [m for m in models if m.objective in ("electra", "mlm")]
    if on_curve:
        curve = os.path.join(report_dir, "efficiency_curve.png")
        plot_curve(models, tasks, curve)
        written.append(curve)
    if any(m.probes for m in on_curve):
        probe_plot = os.path.join(report_dir, "efficiency_probe.png")
        plot_probe(models, tasks, probe_plot)
        written.append(probe_plot)
    pretraining_plot = os.path.join(report_dir, "efficiency_pretraining.png")
    plot_pretraining(out, [r.objective for r in runs], pretraining_plot)
    written.append(pretraining_plot)
    finals = final_models(models)
    baseline = [m for m in models if m.step == 0]
    sections = [
        "# Efficiency experiment: results",
        "Generated by `experiments/efficiency.py` from the raw results in "
        f"`{os.path.basename(os.path.abspath(out))}/results/`; each cell is the test split's "
        "median [interquartile range] (min-max) over the fine-tuning seeds, at the learning "
        "rate the selection split chose. `*`: the difference exceeds the seed noise "
        f"(Mann-Whitney U, p < {NOISE_P}).",
        "## Budget\n\n```json\n" + json.dumps(dataclasses.asdict(budget), indent=2) + "\n```",
        "## Pretraining runs\n\n" + "\n".join(
            f"- {r.objective}: {r.steps} steps of {r.step_flops:.3g} FLOPs" for r in runs),
        "## Every checkpoint\n\n" + models_table(models, tasks),
        "## ELECTRA against BERT at equal pretraining FLOPs\n\n"
        + comparison_table(curve_pairs(models), tasks),
        "## The objectives' last checkpoints (Table 5)\n\n" + models_table(finals, tasks)
        + "\n\n" + comparison_table([(a, b) for a in finals for b in finals + baseline
                                     if a is not b and a.objective == "electra"], tasks),
        "## Linear probe of the frozen discriminator\n\nThe task's main metric on its dev "
        "split (on its train split in parentheses), one logistic regression (Ridge for sts) per "
        "model and task (`electra_tf.probe`).\n\n" + probe_table(models, tasks),
        "## Costs\n\n" + costs_table(out),
    ]
    tables = os.path.join(report_dir, "efficiency_results.md")
    with open(tables + ".tmp", "w") as f:
        f.write("\n\n".join(sections) + "\n")
    os.replace(tables + ".tmp", tables)
    return [tables, *written]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget", default="full", choices=sorted(efficiency_plan.BUDGETS))
    parser.add_argument("--tasks", default=",".join(downstream.TASK_NAMES))
    parser.add_argument("--objectives", default=None)
    parser.add_argument("--report_dir", required=True)
    args = parser.parse_args(argv)
    budget = efficiency_plan.BUDGETS[args.budget]
    objectives = (args.objectives.split(",") if args.objectives
                  else list(efficiency_plan.OBJECTIVES))
    runs = efficiency_plan.plan_pretraining(budget, os.path.join(args.out, "data"), objectives)
    print("\n".join(write(args.out, args.report_dir, budget, runs, args.tasks.split(","))))


if __name__ == "__main__":
    # electra_tf from this checkout when it is not installed, as efficiency.py's runs find it.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
