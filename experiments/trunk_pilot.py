"""Which peak learning rate and warmup train the ladder's trunks, for ELECTRA and for BERT?

  python experiments/trunk_pilot.py --out DIR [--ladder full|mixed] [--pilot rates|wide]
      [--steps 2000] [--workers 2] [--hours H] [--shared_data ../shared/data]
      [--results DIR] [--report_dir DIR]

The ladder's trunks (experiments/ladder.py: peak learning rate 1e-3 after 87 and 95 warmup
steps, batch 32) stop learning: BERT's masked LM stalls at 17% accuracy and then falls to the
unigram level after gradient-norm jumps of 13-23x; ELECTRA's discriminator stays at an AUC of
0.51-0.55. A pilot trains both objectives' trunks (the ladder's data and seed; a linear
warmup, then a constant learning rate) for --steps steps at every setting of one of PILOTS,
two runs side by side on one core each, and applies the rule written before it ran
(docs/trunk_pilots.md, "The trunk pilot"). The `rates` pilot tries two rates at the ladder's
model and batch; the `wide` pilot, the next step when none learned, a model and batch towards
ELECTRA-Small's; the `generator` pilot, BERT alone at the shape of the wide ELECTRA's generator
(which did not learn beside its discriminator), to tell its width from its joint training:

- a setting is *stable* when electra_tf.health's gradient-explosion check, replayed over its
  logged curve, never warns (the warning the health monitor gave the ladder's trunks);
- it *learns* when, at the last step, its masked-LM accuracy (ELECTRA's generator's) is above
  LEARNS;
- each objective climbs the ladder again with its own stable setting that learns best (the
  lowest masked-LM loss) at the last step. The same grid and the same rule for both: the same
  tuning effort. ELECTRA is judged by its generator, not by the detection AUC, which is high
  while the generator's samples are rare words and falls as they become frequent ones.

Its runs are recorded in --results (default experiments/results/ladder_pilot/, or
ladder_pilot_mixed/ for --ladder mixed, with _wide appended for --pilot wide; committed):
pretrain.jsonl and curves.jsonl, as the ladder's; the DIR it shares with the ladder holds the
data (built by the ladder's data step when missing) and the runs. The table, the curves and
each objective's choice go to --report_dir/NAME.md and NAME.png (NAME: the records' folder),
redrawn from the records alone (`--report_only`), beside the ladder's own trunks (peak
learning rate 1e-3) judged at the same step from the ladder's records.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from typing import Any, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (REPO, os.path.join(REPO, "experiments")):
    if path not in sys.path:
        sys.path.insert(0, path)

import efficiency  # noqa: E402
import efficiency_plan  # noqa: E402
import ladder  # noqa: E402
import ladder_records  # noqa: E402
from ladder_report import draw_no_context, pretraining_baselines  # noqa: E402
from ladder_verdicts import NAMES  # noqa: E402
import records  # noqa: E402
import report  # noqa: E402
from efficiency import log  # noqa: E402

LEARNS = 0.20  # masked-LM accuracy: above the 1e-3 trunks' plateau of 0.17-0.18
# Each ladder's pilot records (experiments/results/...).
PILOT_RESULTS = {"full": "ladder_pilot", "mixed": "ladder_pilot_mixed"}
# The runs' logging interval (efficiency_plan.pretraining_hparams: iterations_per_loop).
LOG_EVERY = 50


@dataclasses.dataclass(frozen=True)
class Pilot:
    """What one pilot trains: the ladder's budget with `shape` replaced (model and batch), at
    each (peak learning rate, warmup steps) of `settings`."""
    shape: dict[str, Any]
    settings: tuple[tuple[float, int], ...]
    prefix: str  # of its runs' model names
    objectives: tuple[str, ...] = ladder.OBJECTIVES

    def budget(self, full: ladder.Ladder, learning_rate: float) -> efficiency_plan.Budget:
        return dataclasses.replace(full.budget, **self.shape, learning_rate=learning_rate)


PILOTS = {
    # The ladder's model and batch. Its 1e-3 divided by 3 and by 10; 500 warmup steps are
    # 1.4% of the largest rung's steps, near the original's 10,000 of 1M.
    "rates": Pilot({}, ((3e-4, 500), (1e-4, 500)), "pilot"),
    # Towards ELECTRA-Small at the ladder's 4 layers (ladder.WIDE_SHAPE): its 2,000 steps see
    # the sequences of the rates pilot's 8,000. Its runs are the mixed_wide ladder's trunks.
    "wide": Pilot(ladder.WIDE_SHAPE, ((ladder.WIDE_LEARNING_RATE, ladder.WIDE_WARMUP_STEPS),),
                  "pilot_wide"),
    # ELECTRA's wide generator (hidden 64, 1 head, FFN 256, the 128-wide tied embeddings)
    # trained alone as a masked LM, at the wide pilot's batch, rate and warmup: does it read
    # its context where the generator trained beside the discriminator did not?
    "generator": Pilot({**ladder.WIDE_SHAPE, "hidden_size": 64, "num_heads": 1},
                       ((ladder.WIDE_LEARNING_RATE, ladder.WIDE_WARMUP_STEPS),),
                       "pilot_generator", objectives=("mlm",)),
}


def model_name(pilot: Pilot, objective: str, learning_rate: float, warmup: int) -> str:
    return f"{pilot.prefix}_{objective}_lr{learning_rate:g}_w{warmup}"


def results_name(pilot: str, ladder_name: str) -> str:
    """The pilot's records' folder in experiments/results/."""
    base = PILOT_RESULTS[ladder_name]
    return base if pilot == "rates" else f"{base}_{pilot}"


def jobs(full: ladder.Ladder, pilot: Pilot,
         data_dir: str) -> list[tuple[ladder.Ladder, ladder.Climb]]:
    """(the ladder at a setting's model, batch and learning rate, a climb at its warmup):
    every objective at every setting, ELECTRA's and BERT's of one setting side by side."""
    out = []
    for learning_rate, warmup in pilot.settings:
        setting = dataclasses.replace(full, budget=pilot.budget(full, learning_rate),
                                      objectives=pilot.objectives)
        for climb in ladder.plan(setting, data_dir):
            out.append((setting, dataclasses.replace(climb, warmup_steps=warmup)))
    return out


# ----------------------------------------------------------------------------- the rule

def warnings(curve: Sequence[dict[str, Any]]) -> int:
    """How many logged intervals electra_tf.health's gradient-explosion check, replayed over
    the curve, warns at (the run's health monitor ran the same check as it trained)."""
    from electra_tf import health

    check = health.GradientExplosion(advice="")
    return sum(check(r["step"], r["scalars"]) is not None for r in curve)


@dataclasses.dataclass(frozen=True)
class Outcome:
    objective: str
    model: str
    learning_rate: float
    warmup: int
    hidden: int
    batch: int
    last: dict[str, Any]  # the last logged step's line of curves.jsonl
    jumps: int  # gradient-explosion warnings

    @property
    def stable(self) -> bool:
        return self.jumps == 0

    @property
    def learns(self) -> bool:
        return self.last["scalars"].get("masked_lm_accuracy", 0.0) > LEARNS


def outcomes(pretrain: Sequence[dict[str, Any]], curves: Sequence[dict[str, Any]],
             until: int) -> list[Outcome]:
    """Every trunk of the records whose curve reaches step `until`, judged there."""
    out = []
    for model in sorted({r["model"] for r in pretrain if r["kind"] in ("pilot", "trunk")}):
        hparams = [r["hparams"] for r in pretrain if r["model"] == model][-1]
        curve = sorted((r for r in curves if r["model"] == model and r["step"] <= until),
                       key=lambda r: r["step"])
        if curve and curve[-1]["step"] == until:
            out.append(Outcome(curve[-1]["objective"], model, hparams["learning_rate"],
                               hparams["num_warmup_steps"],
                               hparams["model_hparam_overrides"]["hidden_size"],
                               hparams["train_batch_size"], curve[-1], warnings(curve)))
    return out


def in_progress(pretrain: Sequence[dict[str, Any]],
                curves: Sequence[dict[str, Any]]) -> list[Outcome]:
    """The pilot's trunks whose longest run has not finished (a sitting stopped it), each at
    its last logged step: shown, not judged."""
    out = []
    for model in sorted({r["model"] for r in pretrain if r["kind"] == "pilot"}):
        runs = [r for r in pretrain if r["model"] == model]
        target = max(r["pretrain_steps"] for r in runs)
        steps = [r["step"] for r in curves if r["model"] == model]
        if steps and not any(r.get("finished") and r["pretrain_steps"] == target for r in runs):
            out += [o for o in outcomes(pretrain, curves, max(steps)) if o.model == model]
    return out


def choose(rows: Sequence[Outcome], objective: str) -> Outcome | None:
    """The objective's stable setting that learns best, or None."""
    fit = [o for o in rows if o.objective == objective and o.stable and o.learns]
    return min(fit, key=lambda o: o.last["scalars"]["masked_lm_loss"], default=None)


# ----------------------------------------------------------------------------- the report

SHOWN = (("masked_lm_loss", "masked-LM loss"), ("masked_lm_accuracy", "masked-LM accuracy"),
         ("masked_lm_accuracy_at_mask", "masked-LM accuracy at [MASK]"),
         ("disc_auc", "detection AUC"), ("grad_norm", "gradient norm"))
TABLE = SHOWN[:-1]  # the gradient norm is plotted only


def write_report(results: str, report_dir: str, trunks: str) -> list[str]:
    """NAME.md and NAME.png (NAME: the records' folder, e.g. ladder_pilot) from the records
    alone, beside the ladder's own trunks in the records folder `trunks`."""
    from electra_tf import files

    pretrain = records.read(os.path.join(results, "pretrain.jsonl"))
    curves = records.latest(records.read(os.path.join(results, "curves.jsonl")), "model", "step")
    lengths = sorted({r["pretrain_steps"] for r in pretrain if r.get("finished")})
    name = os.path.basename(os.path.abspath(results))
    # The ladder's own trunks (peak learning rate 1e-3), judged at each of the pilot's lengths.
    trunks = os.path.join(os.path.dirname(os.path.abspath(results)), trunks)
    curves += [r for r in records.latest(records.read(os.path.join(trunks, "curves.jsonl")),
                                         "model", "step") if r["kind"] == "trunk"]
    pretrain += [r for r in records.read(os.path.join(trunks, "pretrain.jsonl"))
                 if r["kind"] == "trunk"]
    no_context = pretraining_baselines(records.read(os.path.join(trunks, "baseline.jsonl")))
    rows = sorted((o for until in lengths for o in outcomes(pretrain, curves, until)),
                  key=lambda o: (o.last["step"], o.objective, -o.learning_rate, o.warmup))
    running = in_progress(pretrain, curves)
    head = ("| objective | hidden | batch | peak learning rate | warmup steps | step | "
            "sequences | " + " | ".join(label for _, label in TABLE) + " | gradient-norm warnings")
    lines = [head + " | stable | learns |", "|---" * (10 + len(TABLE)) + "|"]
    lines += [_row(o) + f" | {'yes' if o.stable else 'no'} | {'yes' if o.learns else 'no'} |"
              for o in rows]
    for baseline, scores in no_context.items():
        lines.append(f"| no context: {baseline} | | | | | | | " + " | ".join(
            f"{scores[tag]:.3f}" if tag in scores else "-" for tag, _ in TABLE)
            + " | | | |")
    choices = []
    for until in lengths:
        for objective in ("electra", "mlm"):
            judged = [o for o in rows if o.last["step"] == until and o.objective == objective]
            chosen = choose(judged, objective)
            choices.append(f"- at step {until}, {NAMES[objective]}: " + (
                f"peak learning rate {chosen.learning_rate:g}, {chosen.warmup} warmup steps"
                if chosen else "no setting is both stable and learning" if judged
                else "no run has reached this step"))
    os.makedirs(report_dir, exist_ok=True)
    table = os.path.join(report_dir, f"{name}.md")
    files.write_atomically(table, "\n\n".join([
        "# The trunk pilot: results",
        f"Generated by `experiments/trunk_pilot.py` from the records in "
        f"`experiments/results/{name}` alone. Each row: one trunk (the ladder's data, seed, "
        "4 layers and generator of 1/4 its width; a linear warmup, then a constant learning "
        "rate), its last logged step (each value a mean over 50 steps), after as many "
        "sequences of 128 tokens as its steps times its batch. *Stable*: the health monitor's "
        "gradient-explosion check (a gradient norm above 10x the median of up to 20 intervals "
        "before it), replayed over the curve, never warns. *Learns*: masked-LM accuracy above "
        f"{LEARNS:g} (for ELECTRA its generator's); *at [MASK]*: the same over the masked "
        "positions shown as [MASK] alone ('-' where a run did not log it). "
        "The rule: "
        "docs/trunk_pilots.md, \"The trunk pilot\". The no-context rows (the ladder's "
        "baseline.jsonl) are two masked LMs that read no context: the unigram distribution at "
        "every masked position, and what such a model scores in these training metrics, "
        "where 15% of the masked positions show their own token and it copies them. A trunk "
        "uses its context only where it does better than the second.",
        "\n".join(lines), "## Each objective's choice\n\n" + "\n".join(choices),
        *(["## Still running (stopped at the end of a sitting; not judged)\n\n"
           + "\n".join([head + " |", "|---" * (8 + len(TABLE)) + "|"]
                       + [_row(o) + " |" for o in running])] if running else [])]) + "\n")
    written = [table]
    if rows or running:
        figure = os.path.join(report_dir, f"{name}.png")
        one_per_model = list({o.model: o for o in [*rows, *running]}.values())  # each last
        plot(one_per_model, curves, no_context, figure)
        written.append(figure)
    return written


def _row(o: Outcome) -> str:
    """A trunk's table row up to its gradient-norm warnings."""
    s = o.last["scalars"]
    return (f"| {NAMES[o.objective]} | {o.hidden} | {o.batch} | {o.learning_rate:g} | "
            f"{o.warmup} | {o.last['step']} | {o.last['step'] * o.batch:,} | "
            + " | ".join(f"{s[tag]:.3f}" if tag in s else "-" for tag, _ in TABLE)
            + f" | {o.jumps}")


def plot(rows: Sequence[Outcome], curves: Sequence[dict[str, Any]],
         no_context: dict[str, dict[str, float]], path: str) -> None:
    """Each trunk's whole curve (one line per model), the no-context levels in black: a panel
    for each scalar of SHOWN that some trunk logged."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = {o.model for o in rows}
    shown = [(tag, label) for tag, label in SHOWN
             if any(tag in r["scalars"] for r in curves if r["model"] in models)]
    fig, axes = plt.subplots(1, len(shown), figsize=(3.5 * len(shown), 3.6), squeeze=False)
    axes = axes[0]
    styles = ("-", "--", ":", "-.")
    settings = sorted({(o.learning_rate, o.warmup) for o in rows}, reverse=True)
    for ax, (tag, label) in zip(axes, shown):
        for o in rows:
            points = sorted((r["step"], r["scalars"][tag]) for r in curves
                            if r["model"] == o.model and tag in r["scalars"])
            if points:
                style = styles[settings.index((o.learning_rate, o.warmup)) % len(styles)]
                ax.plot(*zip(*points), linestyle=style, linewidth=1.0,
                        color="tab:blue" if o.objective == "electra" else "tab:orange",
                        label=f"{NAMES[o.objective]} lr {o.learning_rate:g}, "
                              f"warmup {o.warmup}")
        draw_no_context(ax, no_context, tag)
        ax.set_xlabel("step")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
        if tag == "grad_norm":
            ax.set_yscale("log")
    axes[0].legend(fontsize=7)
    report._save(fig, path)


# ----------------------------------------------------------------------------- main

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the ladder's working directory")
    parser.add_argument("--ladder", default="full", choices=sorted(PILOT_RESULTS),
                        help="whose data and trunks: full (its text by source) or mixed (its "
                             "documents shuffled across the sources)")
    parser.add_argument("--pilot", default="rates", choices=sorted(PILOTS),
                        help="rates: two peak learning rates at the ladder's model and batch; "
                             "wide: hidden 256 at batch 128, towards ELECTRA-Small; "
                             "generator: the wide ELECTRA's generator alone as a masked LM")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--hours", type=float, default=None)
    parser.add_argument("--shared_data", default=os.path.join(REPO, "..", "shared", "data"))
    parser.add_argument("--results", default=None,
                        help="default: experiments/results/ladder_pilot (--ladder full) or "
                             "ladder_pilot_mixed, with _wide appended for --pilot wide")
    parser.add_argument("--report_dir", default=os.path.join(REPO, "docs"))
    parser.add_argument("--report_only", action="store_true",
                        help="redraw the report from the records; run nothing")
    args = parser.parse_args(argv)
    shortest = LOG_EVERY * 21  # the stability check's 20 intervals and one more
    if args.steps < shortest or args.steps % LOG_EVERY:
        parser.error(f"--steps must be a multiple of {LOG_EVERY} and at least "
                     f"{shortest}, got {args.steps}")
    if args.hours is not None and args.hours <= 0:
        parser.error(f"--hours must be positive, got {args.hours}")
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    args.out = os.path.abspath(args.out)
    if args.results is None:
        args.results = os.path.join(REPO, "experiments", "results",
                                    results_name(args.pilot, args.ladder))
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    trunks = ladder.LADDERS[args.ladder].results
    if not args.report_only:
        deadline = None if args.hours is None else time.time() + 3600 * args.hours
        full, pilot = ladder.LADDERS[args.ladder], PILOTS[args.pilot]
        data_dir = ladder.prepare_data(args.out, args.shared_data, full)
        efficiency.share_cores(args.workers)
        sitting = ladder.Sitting(full, data_dir, args.out, ladder_records.Store(args.results),
                                 deadline)
        try:
            efficiency.side_by_side(args.workers, lambda job: ladder.pretrain(
                dataclasses.replace(sitting, ladder=job[0]), job[1],
                model_name(pilot, job[1].objective, job[0].budget.learning_rate,
                           job[1].warmup_steps),
                args.steps, 0, "pilot"), jobs(full, pilot, data_dir))
            log("the pilot is done")
        except efficiency.Stopped as stopped:
            log(f"stopped ({stopped}); rerun the same command to continue")
    log(f"wrote {', '.join(write_report(args.results, args.report_dir, trunks))}")


if __name__ == "__main__":
    main()
