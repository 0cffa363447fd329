"""The ladder's verdicts, tables and curve, redrawn from its records alone.

  python experiments/ladder_report.py --results experiments/results/ladder --report_dir docs
  python experiments/ladder_report.py --combined docs/ladders_curve.png \
      --ladder "hidden 128, batch 32=experiments/results/ladder" \
      --ladder "hidden 256, batch 128=experiments/results/ladder_mixed_wide"

reads finetune.jsonl, probe.jsonl, pretrain.jsonl, curves.jsonl and baseline.jsonl
(experiments/ladder.py writes them), and detection.jsonl, eval.jsonl and gradients.jsonl
where the diagnostics wrote them, and writes NAME_results.md, NAME_curve.png and
NAME_pretraining.png into --report_dir, NAME the records' folder (ladder, ladder_mixed_wide) or
--name; --combined draws several ladders' curves on one pair of axes.

The statistics it shows (each model's learning rate, the decision rule's verdicts, the
collapsed models) are experiments/ladder_verdicts.py's.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import sys
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import detection_baselines  # noqa: E402
import efficiency_plan  # noqa: E402
import gradient_split  # noqa: E402
import records  # noqa: E402
import report  # noqa: E402
from ladder_verdicts import (  # noqa: E402
    COLLAPSE_MARGIN, COLORS, NAMES, NONE, VERDICT_METRIC, VERDICT_TASK, OneChange, Scores,
    Table5Row, Verdict, baseline_score, collapsed, incomplete, one_change, ordered, rank, select,
    table5, verdicts)

# The report's tables: (task, metric) in this order, those with records.
SHOWN = (("pos", "unseen_accuracy"), ("pos", "accuracy"), ("sst", "accuracy"))


def table5_table(rows: Sequence[Table5Row], collapses: Sequence[list[str]] = ()) -> str:
    """Table 5's objectives beside their ELECTRA recipe at its steps (a table per recipe), each
    with the rule's test against it, and the paper's GLUE score for each (its
    ELECTRA-Base-sized models); `collapses` as in verdict_table."""
    tables = []
    for electra_recipe in ordered(r.reference for r in rows):
        group = [i for i, r in enumerate(rows) if r.reference == electra_recipe]
        objectives = ordered(o for i in group for o in rows[i].models)
        name = NAMES.get(electra_recipe, electra_recipe)
        header = ["steps", f"{name} (FLOPs)"] + [
            cell for o in objectives for cell in (f"{NAMES.get(o, o)} (FLOPs)",
                                                  f"against {name} (p)")
        ] + (["collapsed to the most frequent tag"] if collapses else [])
        lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
        for i in group:
            r = rows[i]
            cells = [str(r.steps), "-" if r.reference_scores is None else
                     f"{_cell(r.reference_scores)} ({r.reference_scores.pretrain_flops:.3g})"]
            for o in objectives:
                c = r.against_reference.get(o)
                cells += ["-" if o not in r.models else
                          f"{_cell(r.models[o])} ({r.models[o].pretrain_flops:.3g})",
                          "- (-)" if c is None else f"{_bold(c.verdict)} ({_p(c.p)})"]
            if collapses:
                cells.append(", ".join(collapses[i]) or "-")
            lines.append("| " + " | ".join(cells) + " |")
        tables.append("\n".join(lines))
    paper = ", ".join(f"{NAMES[o]} {efficiency_plan.PAPER_TABLE5[o]}" for o in
                      sorted(efficiency_plan.PAPER_TABLE5, key=efficiency_plan.PAPER_TABLE5.get,
                             reverse=True))
    return "\n\n".join(tables) + \
        f"\n\nThe paper's Table 5 (GLUE dev, ELECTRA-Base-sized): {paper}."


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _spread(scores: Scores) -> str:
    """The test scores' median [interquartile range] (min-max)."""
    test = scores.test
    low, high = np.percentile(test, 25), np.percentile(test, 75)
    return f"{scores.median:.1f} [{low:.1f}, {high:.1f}] ({min(test):.1f}-{max(test):.1f})"


def _cell(scores: Scores | None) -> str:
    return "-" if scores is None else f"{_spread(scores)} (lr {scores.learning_rate:g})"


def _bold(verdict: str) -> str:
    return verdict if verdict in ("-", "no difference") else f"**{verdict}**"


def verdict_table(rows: Sequence[Verdict], collapses: Sequence[list[str]] = ()) -> str:
    """The rule's verdicts: a column per pretrained objective, one per objective compared with
    BERT and one per ELECTRA variant compared with ELECTRA; `collapses` (per row, from
    collapsed()) adds a column naming the models that tag every word with the most frequent
    tag."""
    objectives = ordered(o for v in rows for o in v.models)
    comparisons = [(o, "BERT", "against_bert")
                   for o in ordered(o for v in rows for o in v.against_bert)]
    comparisons += [(o, "ELECTRA", "against_electra")
                    for o in ordered(o for v in rows for o in v.against_electra)]
    header = ([f"{NAMES.get(o, o)} (steps)" for o in objectives]
              + ["no pretraining", "pretraining against none (p)"]
              + [f"{NAMES.get(o, o)} against {other} (p)" for o, other, _ in comparisons]
              + (["collapsed to the most frequent tag"] if collapses else []))
    lines = ["| budget (FLOPs) | " + " | ".join(header) + " |",
             "|---|" + "---|" * len(header)]
    for i, v in enumerate(rows):
        cells = [f"{_cell(v.models[o])} ({v.models[o].pretrain_steps})" if o in v.models
                 else "-" for o in objectives]
        cells += [_cell(v.none), f"{_bold(v.transfer_verdict)} ({_p(v.transfer_p)})"]
        for o, _, field in comparisons:
            c = getattr(v, field).get(o)
            cells.append("- (-)" if c is None else f"{_bold(c.verdict)} ({_p(c.p)})")
        if collapses:
            cells.append(", ".join(collapses[i]) or "-")
        lines.append(f"| {v.flops:.2g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def one_change_table(rows: Sequence[OneChange]) -> str:
    """Each recipe beside each recipe it changes in one hparam: the rule's test between them
    (the one ahead) and how far apart their medians are."""
    lines = ["| model | beside | what differs | steps | the model | the one beside | ahead (p) "
             "| the model's median minus the other's |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| " + " | ".join([
            NAMES.get(r.variant, r.variant), NAMES.get(r.base, r.base), f"`{r.changed}`",
            str(r.steps), _cell(r.scores), _cell(r.base_scores),
            f"{_bold(r.comparison.verdict)} ({_p(r.comparison.p)})",
            f"{r.scores.median - r.base_scores.median:+.1f}"]) + " |")
    return "\n".join(lines)


def scores_table(scores: dict[tuple, Scores]) -> str:
    lines = ["| model | pretraining steps | pretraining FLOPs | test: median [IQR] (min-max) | "
             "lr (dev median) |", "|---|---|---|---|---|"]
    for s in sorted(scores.values(), key=lambda s: (rank(s.objective), s.pretrain_steps)):
        lines.append(f"| {NAMES.get(s.objective, s.objective)} | {s.pretrain_steps} | "
                     f"{s.pretrain_flops:.3g} | {_spread(s)} | {s.learning_rate:g} "
                     f"({s.dev_median:.1f}) |")
    return "\n".join(lines)


def probe_table(lines: Sequence[dict[str, Any]]) -> str:
    """The linear probe's dev scores per model and (task, metric)."""
    columns = sorted({(r["task"], r["metric"]) for r in lines
                      if r.get("task") and r["split"] == "dev"})
    models = sorted({(r["objective"], r["pretrain_steps"], r["pretrain_flops"]) for r in lines},
                    key=lambda m: (rank(m[0]), *m[1:]))
    values = {(r["objective"], r["pretrain_steps"], r["task"], r["metric"]): r["score"]
              for r in lines if r.get("task") and r["split"] == "dev"}
    out = ["| model | pretraining steps | pretraining FLOPs | "
           + " | ".join(f"{t} {m}" for t, m in columns) + " |",
           "|---|---|---|" + "---|" * len(columns)]
    for objective, steps, flops in models:
        cells = [values.get((objective, steps, t, m)) for t, m in columns]
        out.append(f"| {NAMES.get(objective, objective)} | {steps} | {flops:.3g} | "
                   + " | ".join("n/a" if v is None else f"{v:.1f}" for v in cells) + " |")
    return "\n".join(out)


def costs_table(pretrain: Sequence[dict[str, Any]], finetune: Sequence[dict[str, Any]],
                probe: Sequence[dict[str, Any]], detection: Sequence[dict[str, Any]],
                evaluated: Sequence[dict[str, Any]] = ()) -> str:
    """CPU and wall hours per kind of run (a stopped pretraining piece counts what it spent), in
    the order of a run's life: each objective's pretraining in the report's order (trunk, then
    branch), fine-tuning, probing, judging, evaluating checkpoints. Probing, judging and
    evaluating count the runs whose records kept their times."""
    cpu: dict[str, float] = collections.defaultdict(float)
    wall: dict[str, float] = collections.defaultdict(float)
    order: dict[str, tuple] = {}
    for r in pretrain:
        kind = f"pretraining {NAMES.get(r['objective'], r['objective'])} {r['kind']}"
        order[kind] = (0, rank(r["objective"]), r["kind"] != "trunk")
        cpu[kind] += r.get("cpu_seconds", 0.0)
        wall[kind] += r.get("wall_seconds", 0.0)
    runs = {(r["objective"], r["pretrain_steps"], r["task"], r["learning_rate"]):
            r for r in finetune}
    for r in runs.values():
        kind = f"fine-tuning {r['task']}"
        order[kind] = (1, r["task"])
        cpu[kind] += r["run_cpu_seconds"]
        wall[kind] += r["run_wall_seconds"]
    probes = {(r["objective"], r["pretrain_steps"]): r for r in probe}.values()
    for place, (kind, done, prefix) in enumerate(
            (("probing", probes, "run_"),
             ("judging discriminators against bigram counts", detection, ""),
             ("evaluating checkpoints under do_eval", evaluated, "")), 2):
        timed = [r for r in done if prefix + "cpu_seconds" in r]
        if timed:
            if len(timed) < len(done):
                kind += f" ({len(timed)} of {len(done)} runs timed)"
            order[kind] = (place,)
            cpu[kind] = sum(r[prefix + "cpu_seconds"] for r in timed)
            wall[kind] = sum(r[prefix + "wall_seconds"] for r in timed)
    lines = ["| runs | CPU hours | wall hours |", "|---|---|---|"]
    for kind in sorted(cpu, key=order.__getitem__):
        lines.append(f"| {kind} | {cpu[kind] / 3600:.2f} | {wall[kind] / 3600:.2f} |")
    lines.append(f"| **total** | {sum(cpu.values()) / 3600:.2f} | "
                 f"{sum(wall.values()) / 3600:.2f} |")
    return "\n".join(lines)


@dataclasses.dataclass
class Curve:
    """One ladder's points on the curve: its verdict rows, the models that collapsed to the most
    frequent tag (per row), and that tagger's unseen-word score when known."""
    rows: Sequence[Verdict]
    collapses: Sequence[list[str]] = ()
    baseline: float | None = None
    label: str = ""  # after each line's name, where several ladders share the axes


# Each ladder's line style and marker on a curve of several.
LADDER_STYLES = (("-", "o"), ("--", "s"), (":", "^"))


def plot_curves(curves: Sequence[Curve], path: str) -> None:
    """pos unseen-word test accuracy against pretraining FLOPs: each objective (median, IQR),
    no pretraining (median line, IQR band); the most-frequent-tag tagger's score (dotted) and
    the collapsed models (crossed) when known. Several ladders share the axes, each in its own
    line style and marker, its label after each name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    crossed_labelled = False
    baselines_drawn = set()
    for curve, (linestyle, marker) in zip(curves, LADDER_STYLES):
        suffix = f", {curve.label}" if curve.label else ""
        rows = curve.rows
        for objective in ordered(o for v in rows for o in v.models):
            points = [v.models[objective] for v in rows if objective in v.models]
            name = NAMES.get(objective, objective)
            y = [s.median for s in points]
            low = [m - np.percentile(s.test, 25) for m, s in zip(y, points)]
            high = [np.percentile(s.test, 75) - m for m, s in zip(y, points)]
            # A variant (another generator, loss weight or seed) is drawn hollow and larger, so
            # that it does not hide its recipe's point when the two score alike.
            variant = objective in efficiency_plan.VARIANTS
            ax.errorbar([s.pretrain_flops for s in points], y, yerr=[low, high], marker=marker,
                        linestyle=linestyle, capsize=3, color=COLORS.get(objective),
                        markerfacecolor="none" if variant else None,
                        markersize=9 if variant else None, label=name + suffix)
            crossed = [(v.flops, v.models[objective].median)
                       for v, names in zip(rows, curve.collapses)
                       if objective in v.models and any(n.startswith(name + " (") for n in names)]
            if crossed:
                ax.scatter(*zip(*crossed), marker="x", s=120, color="black", zorder=3,
                           label=None if crossed_labelled else "collapsed to the most frequent tag")
                crossed_labelled = True
        none = next((v.none for v in rows if v.none is not None), None)
        if none is not None:
            ax.axhline(none.median, color="gray", linestyle=linestyle if len(curves) > 1 else "--",
                       label=NAMES[NONE] + suffix)
            ax.axhspan(np.percentile(none.test, 25), np.percentile(none.test, 75), color="gray",
                       alpha=0.15)
        if curve.baseline is not None and curve.baseline not in baselines_drawn:
            ax.axhline(curve.baseline, color="black", linestyle=":",
                       label="the most frequent tag for every word")
            baselines_drawn.add(curve.baseline)
    ax.set_xscale("log")
    # A decade either side at least, so that one or two budgets still get decade ticks
    # rather than crowded labels inside a fraction of a decade.
    flops = [s.pretrain_flops for c in curves for v in c.rows for s in v.models.values()]
    if flops:
        ax.set_xlim(min(flops) / 3, max(flops) * 3)
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("pretraining FLOPs")
    ax.set_ylabel("pos test accuracy on unseen words (%)")
    ax.set_title("median and IQR over fine-tuning seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7 if len(curves) > 1 else 8)
    report._save(fig, path)


# The pretraining scalars the report shows (curves.jsonl), with their labels.
# Accuracy at [MASK] is the one that shows whether a generator reads its context: the
# other masked positions keep or randomize their word, and the kept word is easy.
PRETRAINING_SHOWN = (("masked_lm_loss", "masked-LM loss (nats)"),
                     ("masked_lm_accuracy", "masked-LM accuracy"),
                     ("masked_lm_accuracy_at_mask", "masked-LM accuracy at [MASK]"),
                     ("disc_auc", "replaced-token detection AUC"))


def pretraining_baselines(lines: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """The masked-LM loss and accuracy of the masked LMs that read no context (baseline.jsonl,
    task pretraining; experiments/ladder_data.py, record_unigram_baseline), by baseline."""
    baselines: dict[str, dict[str, float]] = {}
    for r in lines:
        if r["task"] == "pretraining":
            baselines.setdefault(r["baseline"], {})[r["metric"]] = r["score"]
    return baselines


def draw_no_context(ax, baselines: dict[str, dict[str, float]], tag: str) -> None:
    """Each no-context baseline's level of `tag` as a black line on the matplotlib axes."""
    for (name, scores), style in zip(baselines.items(), (":", "--", "-.")):
        if tag in scores:
            ax.axhline(scores[tag], color="black", linestyle=style, linewidth=0.8,
                       label=f"no context: {name}")


def pretraining_table(curves: Sequence[dict[str, Any]],
                      baselines: dict[str, dict[str, float]], finished: set[str]) -> str:
    """Each finished decay branch's last logged pretraining scalars: where every budget's model
    left its objective (for ELECTRA the masked LM is the generator's)."""
    last: dict[str, dict[str, Any]] = {}
    for r in curves:
        if r["kind"] == "branch" and r["model"] in finished and \
                r["step"] >= last.get(r["model"], {}).get("step", -1):
            last[r["model"]] = r
    lines = ["| model | step | pretraining FLOPs | "
             + " | ".join(label for _, label in PRETRAINING_SHOWN) + " |",
             "|---|---|---|" + "---|" * len(PRETRAINING_SHOWN)]
    for r in sorted(last.values(), key=lambda r: (rank(r["objective"]), r["step"])):
        lines.append(f"| {NAMES.get(r['objective'], r['objective'])} | {r['step']} | "
                     f"{r['pretrain_flops']:.3g} | " + " | ".join(
                         f"{r['scalars'][tag]:.3f}" if tag in r["scalars"] else "-"
                         for tag, _ in PRETRAINING_SHOWN) + " |")
    for name, scores in baselines.items():
        lines.append(f"| no context: {name} | | | " + " | ".join(
            f"{scores[tag]:.3f}" if tag in scores else "-" for tag, _ in PRETRAINING_SHOWN)
            + " |")
    return "\n".join(lines)


def detection_table(lines: Sequence[dict[str, Any]], pretrain: Sequence[dict[str, Any]]) -> str:
    """Each discriminator's replaced-token AUC beside the detectors that read a token and its
    neighbours only (detection.jsonl, experiments/detection_baselines.py), a row per model and
    step: the mean over its seeds' two folds, and the lowest and highest fold."""
    objective = {r["model"]: r["objective"] for r in pretrain}
    judged: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in lines:
        judged.setdefault((r["model"], r["step"]), []).append(r)
    header = (["model", "step", "seeds", "tokens judged", "replaced"]
              + list(detection_baselines.DETECTORS))
    out = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for (model, step), rs in judged.items():
        name = NAMES.get(objective.get(model, rs[0]["objective"]), model)
        seeds = ", ".join(str(r["seed"]) for r in sorted(rs, key=lambda r: r["seed"]))
        folds = {d: [a for r in rs for a in r["auc"][d]] for d in detection_baselines.DETECTORS}
        out.append(f"| {name} | {step} | {seeds} | {np.mean([r['positions'] for r in rs]):.0f} "
                   f"| {np.mean([r['replaced_share'] for r in rs]):.3f} | "
                   + " | ".join(f"{np.mean(a):.3f} ({min(a):.3f}, {max(a):.3f})"
                                for a in folds.values()) + " |")
    return "\n".join(out)


# The eval table's columns: the generator's and the detector's levels, and how many of the
# replaced tokens each reconstructing objective recovers (each objective logs its own).
EVAL_SHOWN = (("masked_lm_accuracy_at_mask", "generator at [MASK]"),
              ("disc_auc", "detection AUC"),
              ("replace_mlm_fake_accuracy", "Replace MLM: replaced tokens recovered"),
              ("all_tokens_mlm_fake_accuracy", "All-Tokens MLM: replaced tokens recovered"),
              ("all_tokens_mlm_softmax_fake_accuracy",
               "All-Tokens MLM's softmax: replaced tokens recovered"),
              ("copy_probability", "copy probability"))


def eval_table(lines: Sequence[dict[str, Any]]) -> str:
    """A row per checkpoint evaluated with do_eval (eval.jsonl, experiments/checkpoint_eval.py):
    the EVAL_SHOWN metrics its objective has, "-" for the others."""
    header = ["model", "objective", "step", "examples"] + [label for _, label in EVAL_SHOWN]
    out = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for r in sorted(lines, key=lambda r: (rank(r["objective"]), r["step"])):
        metrics = r["metrics"]
        out.append(f"| {r['model']} | {NAMES.get(r['objective'], r['objective'])} | {r['step']} "
                   f"| {metrics.get('num_examples', 0):.0f} | " + " | ".join(
                       f"{metrics[key]:.3f}" if key in metrics else "-"
                       for key, _ in EVAL_SHOWN) + " |")
    return "\n".join(out)


def gradients_table(lines: Sequence[dict[str, Any]]) -> str:
    """A row per checkpoint and objective weight measured by experiments/gradient_split.py
    (gradients.jsonl): the medians over its batches, and the shares of entries below Adam's
    epsilon, the checkpoint's own second moments at the weight it trained with."""
    header = ["model", "objective", "step", "trained at", "weight", "global norm",
              "clip factor", "shared: objective / generator", "shared: cosine"] + [
        f"{group} below eps (Adam's)" for group in gradient_split.GROUPS]
    out = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for r in sorted(lines, key=lambda r: (rank(r["objective"]), r["model"], r["step"])):
        for weight, below in sorted(r["below_epsilon"].items(), key=lambda x: float(x[0])):
            s = gradient_split.summary(r, float(weight))
            trained = float(weight) == r["disc_weight"]
            out.append(
                f"| {r['model']} | {NAMES.get(r['objective'], r['objective'])} | {r['step']} "
                f"| {r['disc_weight']:g} | {float(weight):g} | {s['global_norm']:.3g} "
                f"| {s['clip_factor']:.3g} | {s['shared_objective_over_generator']:.3g} "
                f"| {s['shared_cosine']:.2f} | "
                + " | ".join("-" if g not in below else f"{below[g]:.3f}" + (
                    f" ({r['adam_below_epsilon'][g]:.3f})" if trained else "")
                    for g in gradient_split.GROUPS) + " |")
    return "\n".join(out)


def plot_pretraining(curves: Sequence[dict[str, Any]], baselines: dict[str, dict[str, float]],
                     path: str) -> None:
    """The trunks' and branches' pretraining scalars against FLOPs, one panel per scalar the
    curves log (older runs did not log them all), with the no-context baselines' levels as
    black lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    shown = [(tag, label) for tag, label in PRETRAINING_SHOWN
             if any(tag in r["scalars"] for r in curves)]
    fig, axes = plt.subplots(1, len(shown), figsize=(4 * len(shown), 3.6), squeeze=False)
    for ax, (tag, label) in zip(axes[0], shown):
        for objective in ordered(r["objective"] for r in curves):
            for model in sorted({r["model"] for r in curves if r["objective"] == objective}):
                points = sorted((r["pretrain_flops"], r["scalars"][tag]) for r in curves
                                if r["model"] == model and tag in r["scalars"])
                if points:
                    trunk = any(r["kind"] == "trunk" for r in curves if r["model"] == model)
                    ax.plot(*zip(*points), color=COLORS.get(objective),
                            linewidth=1.2 if trunk else 0.8, alpha=1.0 if trunk else 0.6,
                            label=NAMES.get(objective, objective) if trunk else None)
        draw_no_context(ax, baselines, tag)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("pretraining FLOPs")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    # One legend for all panels, right of the last one: inside a panel it hides the curves.
    legend = {}
    for ax in axes[0]:
        legend.update(zip(*reversed(ax.get_legend_handles_labels())))
    axes[0, -1].legend(legend.values(), legend.keys(), fontsize=8, loc="upper left",
                       bbox_to_anchor=(1.02, 1.0))
    report._save(fig, path)


def _shown(path: str) -> str:
    """A path inside the repository relative to it (as the report is committed)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.abspath(path)
    return os.path.relpath(path, repo) if path.startswith(repo + os.sep) else path


def model_shape(pretrain: Sequence[dict[str, Any]]) -> str:
    """The ladder's model, batch and sequence length as its pretraining records give them, or
    "" when they give none or several (the reports' titles: two ladders' reports sit side by
    side)."""
    shapes = set()
    for line in pretrain:
        hparams = line.get("hparams", {})
        model = hparams.get("model_hparam_overrides", {})
        shapes.add((model.get("hidden_size"), model.get("num_hidden_layers"),
                    hparams.get("train_batch_size"), hparams.get("max_seq_length")))
    if len(shapes) != 1 or None in next(iter(shapes)):
        return ""
    hidden, layers, batch, seq = shapes.pop()
    return f"hidden {hidden}, {layers} layers, batch {batch}, seq {seq}"


def ladder_curve(finetune: Sequence[dict[str, Any]], baselines: Sequence[dict[str, Any]],
                 label: str = "") -> Curve:
    """A ladder's points on the curve, from its finetune.jsonl and baseline.jsonl lines."""
    rows = verdicts(select(finetune, VERDICT_TASK, VERDICT_METRIC))
    baseline = baseline_score(baselines, "accuracy")
    if baseline is None:
        return Curve(rows, label=label)
    return Curve(rows, [collapsed(v.models, finetune, baseline) for v in rows],
                 baseline_score(baselines, VERDICT_METRIC), label)


def write(results_dir: str, report_dir: str, name: str = "ladder") -> list[str]:
    """NAME_results.md, NAME_curve.png when there is a verdict row and NAME_pretraining.png
    when there are curves, into report_dir."""
    from electra_tf import files

    finetune = records.read(os.path.join(results_dir, "finetune.jsonl"))
    probe = records.read(os.path.join(results_dir, "probe.jsonl"))
    pretrain = records.read(os.path.join(results_dir, "pretrain.jsonl"))
    baselines = records.read(os.path.join(results_dir, "baseline.jsonl"))
    curves = records.latest(records.read(os.path.join(results_dir, "curves.jsonl")),
                            "model", "step")
    no_context = pretraining_baselines(baselines)
    os.makedirs(report_dir, exist_ok=True)
    points = ladder_curve(finetune, baselines)
    rows = points.rows
    baseline = baseline_score(baselines, "accuracy")
    check = "" if baseline is None else (
        f"\n\nTagging every word with train.txt's most frequent tag scores "
        f"{baseline:.1f} on test and {baseline_score(baselines, VERDICT_METRIC):.1f} on its "
        f"unseen words (baseline.jsonl). A model whose pos accuracy median is within "
        f"{COLLAPSE_MARGIN:g} point of the former has collapsed to that tag, and its unseen-word "
        "score is that tagger's: the last column names such models, and a verdict that rests "
        "on one is not evidence of transfer (docs/reproduction.md).")
    shape = model_shape(pretrain)
    sections = [
        f"# Ladder ({shape}): results" if shape else "# Ladder: results",
        "Generated by `experiments/ladder_report.py` from the records in "
        f"`{_shown(results_dir)}` alone. Each cell: the test split's median [interquartile "
        "range] (min-max) over the fine-tuning seeds, at the learning rate dev chose for that "
        "model (shown).",
        f"## The decision rule per budget ({VERDICT_TASK} {VERDICT_METRIC}, test)\n\n"
        "Pretraining *transfers* when the better pretrained objective's median is above no "
        "pretraining's and a two-sided Mann-Whitney U test gives p < 0.05, *hurts* when it is "
        "below with p < 0.05, and makes *no difference* otherwise; the objective ahead is the "
        "one whose median is higher with p < 0.05 (docs/reproduction.md, \"The budget "
        "ladder's decision rule\")." + check + "\n\n" + verdict_table(rows, points.collapses),
    ]
    table5_rows = table5(select(finetune, VERDICT_TASK, VERDICT_METRIC))
    table5_collapses = [] if baseline is None else [
        collapsed({**r.models, **({r.reference: r.reference_scores} if r.reference_scores
                                  else {})}, finetune, baseline) for r in table5_rows]
    if table5_rows:
        sections.append(
            f"## Table 5 at ELECTRA's steps ({VERDICT_TASK} {VERDICT_METRIC}, test)\n\n"
            "The objectives of the paper's Table 5, each pretrained for the steps of the "
            "ELECTRA recipe with the same generator at a rung (its FLOPs differ), against that "
            "recipe there by the rule's test: the winner when its median is higher with "
            "p < 0.05, else *no difference*.\n\n"
            + table5_table(table5_rows, table5_collapses))
    changes = one_change(select(finetune, VERDICT_TASK, VERDICT_METRIC))
    if changes:
        sections.append(
            f"## One change at a time ({VERDICT_TASK} {VERDICT_METRIC}, test)\n\n"
            "Each model beside each model of its objective whose recipe differs from its own "
            "in one other hparam, at the same steps, by the rule's test: the one ahead when "
            "its median is higher with p < 0.05, else *no difference*. Every model is "
            f"pretrained from seed {efficiency_plan.PRETRAIN_SEED} unless its name says "
            "otherwise. Where the two "
            "differ in `seed` they are two pretraining runs of one recipe (initial weights, "
            "masking, the generator's samples, dropout and the shuffling drawn again), and the "
            "test, over fine-tuning seeds, says whether the two models differ, not how much "
            "pretraining runs vary (docs/reproduction.md, \"Pretraining seeds\").\n\n"
            + one_change_table(changes))
    for task, metric in SHOWN:
        scores = select(finetune, task, metric)
        if scores:
            sections.append(f"## {task} {metric}, every model\n\n" + scores_table(scores))
    under_way: dict[tuple[str, int], list[str]] = {}
    for task, metric in SHOWN:
        for model in incomplete(finetune, task, metric):
            under_way.setdefault(model, []).append(f"{task} {metric}")
    if under_way:
        sections.append(
            "Fine-tuning sweeps not complete, left out of the tables of their task and metric "
            "above until each of their learning rates and seeds is in (a sitting stopped "
            "between their runs, or the model was lost before they ended: "
            "docs/reproduction.md says which): " + "; ".join(
                f"{NAMES.get(o, o)} at {steps:,} steps ({', '.join(shown)})"
                for (o, steps), shown in sorted(under_way.items())) + ".")
    if probe:
        sections.append("## Linear probe of the frozen discriminator (dev)\n\n"
                        + probe_table(probe))
    if curves:
        sections.append(
            "## Pretraining at the end of each budget\n\n"
            "The last logged value (a mean over the last 50 steps) of each decay branch, from "
            "curves.jsonl. The no-context rows (baseline.jsonl) are two masked LMs that read "
            "no context: the unigram distribution predicts every masked token from the "
            "pretraining text's token frequencies; the kept token, else the unigram "
            "distribution, is what such a model scores in these training metrics, because the "
            "original's masking leaves 15% of the masked positions showing their own token, "
            "which it copies. A masked LM uses the context only where it does better than the "
            f"second row. `{name}_pretraining.png` draws the whole curves."
            + (" ELECTRA 15%'s discriminator judges the masked positions only, so its "
               "detection AUC is over those, where ELECTRA's is over every real token."
               if any(r["objective"].startswith("electra_15") for r in curves) else "")
            + "\n\n"
            + pretraining_table(curves, no_context,
                                {r["model"] for r in pretrain if r.get("finished")}))
    detection = records.read(os.path.join(results_dir, "detection.jsonl"))
    if detection:
        sections.append(
            "## What the discriminators detect\n\n"
            "Replaced-token detection AUC on the first pretraining files' tokens, corrupted by "
            "the run's own generator (detection.jsonl, `experiments/detection_baselines.py`): "
            "the discriminator's logit beside a detector that reads the token alone and one "
            "that reads the token and its neighbours' bigrams, counted on the other pretraining "
            "files; the last column adds the discriminator's logit to the bigrams. Each cell: "
            "the mean over the seeds' two folds (the lowest and highest fold); the seeds draw "
            "the masking and the generator's samples, and the tokens judged are a seed's "
            "mean.\n\n" + detection_table(detection, pretrain))
    evaluated = records.read(os.path.join(results_dir, "eval.jsonl"))
    if evaluated:
        sections.append(
            "## Checkpoints evaluated after pretraining\n\n"
            "Each run's last checkpoint under run_pretraining.py's do_eval (eval.jsonl, "
            "`experiments/checkpoint_eval.py`): its objective's metrics over the examples "
            "shown, from the training files, with dropout off (the curves above are logged "
            "in training, dropout on). Recovered: the share of the replaced tokens whose "
            "original the model predicts.\n\n" + eval_table(evaluated))
    gradients = records.read(os.path.join(results_dir, "gradients.jsonl"))
    if gradients:
        sections.append(
            "## Where the two losses meet\n\n"
            "The generator's and the objective's gradients, taken apart on a checkpoint "
            "(gradients.jsonl, `experiments/gradient_split.py`) over the first batches of the "
            "run's eval_tfrecords (here its training files), dropout on, and summed at each "
            "objective weight shown, as the training step sums them before clipping the "
            "global norm at 1.0. Medians over the batches: the summed gradient's global norm, "
            "the clip factor it gets, and in the tables both losses reach (the tied "
            "embeddings) the weighted objective's gradient norm over the generator's, and the "
            "cosine between the two (1: the same direction; the weight does not change it). "
            "Below eps: per group of variables (only the generator's, the shared, only the "
            "discriminator-sized model's) the share of entries whose clipped gradient's root "
            "mean square over the batches is below Adam's epsilon (1e-6), where epsilon, not "
            "the gradient, would set their step's size. Entries no gradient reaches count: the "
            "attention key biases (the softmax ignores them) and the position embeddings past "
            "the sequence length. The share tends to overstate what epsilon governs: an entry "
            "that rare batches reach has a small mean over these few, where Adam's second "
            "moment keeps such a batch for about a thousand steps (beta_2 0.999). In brackets, "
            "at the weight the run trained with, the same share of the checkpoint's "
            "own Adam second moments.\n\n" + gradients_table(gradients))
    sections.append("## Costs\n\n" + costs_table(pretrain, finetune, probe, detection, evaluated))
    table = os.path.join(report_dir, f"{name}_results.md")
    files.write_atomically(table, "\n\n".join(sections) + "\n")
    written = [table]
    if rows:
        curve = os.path.join(report_dir, f"{name}_curve.png")
        plot_curves([points], curve)
        written.append(curve)
    if curves:
        pretraining = os.path.join(report_dir, f"{name}_pretraining.png")
        plot_pretraining(curves, no_context, pretraining)
        written.append(pretraining)
    return written


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", help="the records' directory")
    parser.add_argument("--report_dir")
    parser.add_argument("--name", default=None,
                        help="the files' prefix (default: the --results folder's name)")
    parser.add_argument("--combined", default=None,
                        help="instead: draw the curve of every --ladder into this PNG")
    parser.add_argument("--ladder", action="append", default=[], metavar="LABEL=DIR",
                        help="with --combined: a ladder's records' directory and its label")
    args = parser.parse_args(argv)
    if args.combined:
        ladders = [entry.partition("=")[::2] for entry in args.ladder]
        if not ladders or any(not label or not directory for label, directory in ladders):
            parser.error("--combined needs one --ladder LABEL=DIR or more, got "
                         f"{args.ladder or 'none'}")
        plot_curves([ladder_curve(records.read(os.path.join(directory, "finetune.jsonl")),
                                  records.read(os.path.join(directory, "baseline.jsonl")), label)
                     for label, directory in ladders], args.combined)
        print(args.combined)
        return
    if not args.results or not args.report_dir:
        parser.error("--results and --report_dir are required (or --combined and --ladder)")
    rows = verdicts(select(records.read(os.path.join(args.results, "finetune.jsonl")),
                           VERDICT_TASK, VERDICT_METRIC))
    print(verdict_table(rows))
    print("\n".join(write(args.results, args.report_dir,
                           args.name or os.path.basename(os.path.normpath(args.results)))))


if __name__ == "__main__":
    main()
