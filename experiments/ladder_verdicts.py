"""The ladder's decision rule (docs/reproduction.md, "The budget ladder's decision rule"),
applied to its fine-tuning records: the statistics experiments/ladder_report.py draws.

Each model (an objective at a pretraining budget, or `none`: random weights) chooses its
fine-tuning learning rate per task and metric: the rate with the best median over seeds on dev.
The numbers shown are that rate's test scores over the seeds: median, interquartile range,
min-max. A model enters the tables only once its sweep is complete (every learning rate and seed
the records hold for that task, on dev and test); until then the report names it as not
complete.
The decision rule (docs/reproduction.md), applied per budget on pos's test accuracy on words
unseen in its training sentences (`unseen_accuracy`):
- "pretraining transfers at B" when the better of ELECTRA and BERT at B (the higher median)
  has a higher median than no pretraining and a two-sided Mann-Whitney U test over their seeds
  gives p < 0.05;
- "ELECTRA beats BERT at B" when ELECTRA's median is higher than BERT's with p < 0.05. A
  variant of ELECTRA the ladder climbs (a generator of 1/2, a loss weight of 1) is compared
  with BERT and with ELECTRA the same way, and is not among the objectives the first verdict
  chooses from; the Table 5 objectives and their variants, climbed at the steps of the ELECTRA
  recipe with their generator (electra or electra_half), are compared with it there.
With 5 seeds a side the smallest possible p is 0.008; with 3, 0.1 (never a verdict).
Beside the rule, not in it (docs/reproduction.md, "Added after the 4.6e13 result"): collapsed()
names the models whose pos test accuracy is within COLLAPSE_MARGIN of the most-frequent-tag
tagger's (baseline.jsonl).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Iterable, Sequence

import numpy as np

import efficiency_plan
import report

VERDICT_TASK, VERDICT_METRIC = "pos", "unseen_accuracy"
NONE = "none"
BERT = "mlm"  # every other objective is compared with it
# The objectives the rule's first verdict (transfer) chooses from, as it was written; the
# others a ladder climbs are only compared with BERT (docs/reproduction.md).
TRANSFER_CANDIDATES = ("electra", BERT)
# Climbed at the steps of the ELECTRA recipe with their generator, as the paper's Table 5
# compares them: compared with that recipe at its steps (efficiency_plan.TABLE5_REFERENCE), not
# with BERT at equal FLOPs.
AT_ELECTRAS_STEPS = tuple(efficiency_plan.TABLE5_REFERENCE)
NAMES = {**efficiency_plan.NAMES, NONE: "no pretraining"}
# Each objective's colour on the curves; the tables' and legends' order.
COLORS = {"electra": "tab:blue", "electra_half": "tab:green", "electra_15": "tab:purple",
          "replace_mlm": "tab:brown", "all_tokens_mlm": "tab:pink", "electra_15_half": "tab:red",
          "replace_mlm_half": "tab:olive", "all_tokens_mlm_half": "tab:cyan",
          "electra_w1": "tab:gray", "replace_mlm_w50": "gold", "electra_seed2": "navy",
          "replace_mlm_seed2": "saddlebrown", "replace_mlm_w50_seed2": "darkgoldenrod",
          "replace_mlm_untied": "teal", BERT: "tab:orange"}


def rank(objective: str) -> tuple[int, str]:
    """An objective's place in the reports' order: COLORS', any others after it by name."""
    known = list(COLORS)
    return (known.index(objective) if objective in known else len(known), objective)


def ordered(objectives: Iterable[str]) -> list[str]:
    """Objectives in the reports' order (rank)."""
    return sorted(set(objectives), key=rank)


@dataclasses.dataclass
class Scores:
    """One model on one task and metric, at the learning rate dev chose."""
    objective: str
    pretrain_steps: int
    pretrain_flops: float
    learning_rate: float
    dev_median: float
    test: list[float]  # one per seed

    @property
    def median(self) -> float:
        return float(np.median(self.test))


Runs = dict[tuple, dict[str, dict[int, float]]]


def _runs(lines: Sequence[dict[str, Any]], task: str, metric: str) -> tuple[Runs, dict]:
    """(objective, pretrain_steps, learning_rate) -> split -> seed -> score, and each model's
    FLOPs."""
    runs: Runs = collections.defaultdict(lambda: {"dev": {}, "test": {}})
    flops = {}
    for line in lines:
        if line["task"] != task or line["metric"] != metric:
            continue
        model = (line["objective"], line["pretrain_steps"])
        runs[(*model, line["learning_rate"])][line["split"]][line["seed"]] = line["score"]
        flops[model] = line["pretrain_flops"]
    return runs, flops


def incomplete(lines: Sequence[dict[str, Any]], task: str, metric: str) -> list[tuple]:
    """The models (objective, pretrain_steps) whose sweep is not all in yet: a learning rate
    some model has, or a seed, missing on dev or test. A sitting can stop between the runs of
    one model's sweep; choosing its learning rate from part of the sweep would judge it on
    another protocol than the rest."""
    return _partial(_runs(lines, task, metric)[0])


def _partial(runs: Runs) -> list[tuple]:
    """incomplete() on runs already gathered."""
    rates = {rate for *_, rate in runs}
    seeds = {seed for splits in runs.values() for split in splits.values() for seed in split}
    models = {(objective, steps) for objective, steps, _ in runs}
    return sorted(model for model in models if not all(
        set(runs.get((*model, rate), {}).get(split, {})) == seeds
        for rate in rates for split in ("dev", "test")))


def select(lines: Sequence[dict[str, Any]], task: str, metric: str) -> dict[tuple, Scores]:
    """(objective, pretrain_steps) -> Scores: for each model whose sweep is complete (every
    learning rate and seed of the records, on dev and test), the learning rate with the best
    median dev score (ties: the smaller rate) and its test scores, seeds in order."""
    runs, flops = _runs(lines, task, metric)
    partial = set(_partial(runs))
    best: dict[tuple, Scores] = {}
    for (objective, steps, learning_rate), splits in sorted(runs.items()):
        if (objective, steps) in partial:
            continue
        dev = float(np.median(list(splits["dev"].values())))
        current = best.get((objective, steps))
        if current is None or dev > current.dev_median:
            best[(objective, steps)] = Scores(
                objective, steps, flops[(objective, steps)], learning_rate, dev,
                [splits["test"][seed] for seed in sorted(splits["test"])])
    return best


@dataclasses.dataclass
class Budget:
    """One rung: the scores there of each pretrained objective that has them yet."""
    flops: float
    models: dict[str, Scores]


def _same_budget(a: Scores, b: Scores) -> bool:
    """Each objective's steps are the whole number closest to a budget's FLOPs: two
    checkpoints of one budget differ by at most half a step of each."""
    half_steps = 0.5 * (a.pretrain_flops / a.pretrain_steps + b.pretrain_flops / b.pretrain_steps)
    return abs(a.pretrain_flops - b.pretrain_flops) <= half_steps


def budgets(scores: dict[tuple, Scores]) -> list[Budget]:
    """The pretrained checkpoints grouped by FLOPs (one budget's), smallest first; those
    climbed at ELECTRA's steps are left to table5()."""
    out: list[Budget] = []
    for s in sorted((s for s in scores.values()
                     if s.objective != NONE and s.objective not in AT_ELECTRAS_STEPS),
                    key=lambda s: s.pretrain_flops):
        budget = next((b for b in out if s.objective not in b.models and
                       all(_same_budget(s, other) for other in b.models.values())), None)
        if budget is None:
            out.append(Budget(s.pretrain_flops, {s.objective: s}))
        else:
            budget.models[s.objective] = s
    return out


@dataclasses.dataclass
class Comparison:
    """One objective against another (BERT, or ELECTRA) by the rule's test."""
    p: float
    verdict: str  # the winner's name, or "no difference"


@dataclasses.dataclass
class Verdict:
    flops: float
    models: dict[str, Scores]  # by objective
    none: Scores | None
    better: Scores | None  # of TRANSFER_CANDIDATES, the one with the higher median
    transfer_p: float | None
    transfers: bool
    # The rule's words (docs/reproduction.md): "transfers", "hurts" or "no difference".
    transfer_verdict: str = "-"
    against_bert: dict[str, Comparison] = dataclasses.field(default_factory=dict)
    # ELECTRA's variants (efficiency_plan.VARIANTS) against ELECTRA itself.
    against_electra: dict[str, Comparison] = dataclasses.field(default_factory=dict)


def compare(a: Scores, b: Scores) -> Comparison:
    p, significant = report.exceeds_noise(a.test, b.test)
    if not significant or a.median == b.median:
        return Comparison(p, "no difference")
    winner = a if a.median > b.median else b
    return Comparison(p, NAMES.get(winner.objective, winner.objective))


def verdicts(scores: dict[tuple, Scores]) -> list[Verdict]:
    """The decision rule at every budget with scores."""
    none = scores.get((NONE, 0))
    out = []
    for b in budgets(scores):
        candidates = [b.models[o] for o in TRANSFER_CANDIDATES if o in b.models]
        # The higher median; a tie goes to the higher mean.
        better = max(candidates, key=lambda s: (s.median, float(np.mean(s.test)))) \
            if candidates else None
        transfer_p, transfers, transfer_verdict = None, False, "-"
        if better is not None and none is not None:
            transfer_p, significant = report.exceeds_noise(better.test, none.test)
            transfers = significant and better.median > none.median
            transfer_verdict = "no difference" if not significant or \
                better.median == none.median else \
                "transfers" if transfers else "hurts"
        bert, electra = b.models.get(BERT), b.models.get("electra")
        against_bert = {} if bert is None else {
            objective: compare(s, bert) for objective, s in b.models.items() if s is not bert}
        against_electra = {} if electra is None else {
            objective: compare(s, electra) for objective, s in b.models.items()
            if efficiency_plan.VARIANTS.get(objective, ("",))[0] == "electra"}
        out.append(Verdict(b.flops, dict(b.models), none, better, transfer_p, transfers,
                           transfer_verdict, against_bert, against_electra))
    return out


@dataclasses.dataclass
class Table5Row:
    """An ELECTRA recipe's steps at a rung, the recipe there (None: not yet), and each
    objective climbed beside it at those steps, compared with it when both are in."""
    reference: str  # the ELECTRA recipe (efficiency_plan.TABLE5_REFERENCE)
    steps: int
    reference_scores: Scores | None
    models: dict[str, Scores]
    against_reference: dict[str, Comparison]


def table5(scores: dict[tuple, Scores]) -> list[Table5Row]:
    """Every ELECTRA recipe and step count some objective of AT_ELECTRAS_STEPS reached: the
    recipes in the reports' order, each's steps smallest first."""
    reference = efficiency_plan.TABLE5_REFERENCE
    rows = []
    for electra_recipe in ordered(reference[o] for o, _ in scores if o in reference):
        for steps in sorted({steps for o, steps in scores
                             if reference.get(o) == electra_recipe}):
            electra = scores.get((electra_recipe, steps))
            models = {o: scores[(o, steps)] for o in AT_ELECTRAS_STEPS
                      if reference[o] == electra_recipe and (o, steps) in scores}
            rows.append(Table5Row(electra_recipe, steps, electra, models, {} if electra is None
                                  else {o: compare(s, electra) for o, s in models.items()}))
    return rows


@dataclasses.dataclass
class OneChange:
    """A recipe beside one it changes in one hparam (efficiency_plan.one_change_bases), at the
    same steps, compared by the rule's test."""
    variant: str
    base: str
    changed: str  # the hparam
    steps: int
    scores: Scores
    base_scores: Scores
    comparison: Comparison


def one_change(scores: dict[tuple, Scores]) -> list[OneChange]:
    """Every recipe with scores beside each recipe it changes in one hparam that has scores at
    its steps, in the reports' order."""
    out = []
    for variant in ordered(o for o, _ in scores if o in efficiency_plan.VARIANTS):
        for base, changed in efficiency_plan.one_change_bases(variant):
            for steps in sorted(steps for o, steps in scores if o == variant):
                if (base, steps) in scores:
                    ours, theirs = scores[(variant, steps)], scores[(base, steps)]
                    out.append(OneChange(variant, base, changed, steps, ours, theirs,
                                         compare(ours, theirs)))
    return out


# A tagger within this many points of the most-frequent-tag baseline's accuracy has collapsed
# to that tag: its unseen-word accuracy is then the baseline's, not a sign of transfer.
COLLAPSE_MARGIN = 1.0


def collapsed(models: dict[str, Scores], finetune: Sequence[dict[str, Any]],
              baseline: float | None) -> list[str]:
    """Those of `models` (by objective) whose pos test accuracy median, at the learning rate
    their verdict used, is at the most-frequent-tag baseline's (baseline.jsonl)."""
    if baseline is None:
        return []
    out = []
    for scores in (models[o] for o in ordered(models)):
        overall = [r["score"] for r in finetune if r["task"] == VERDICT_TASK and
                   r["split"] == "test" and r["metric"] == "accuracy" and
                   r["objective"] == scores.objective and
                   r["pretrain_steps"] == scores.pretrain_steps and
                   r["learning_rate"] == scores.learning_rate]
        if overall and float(np.median(overall)) <= baseline + COLLAPSE_MARGIN:
            out.append(f"{NAMES[scores.objective]} (pos accuracy "
                       f"{float(np.median(overall)):.1f} at lr {scores.learning_rate:g})")
    return out


def baseline_score(lines: Sequence[dict[str, Any]], metric: str) -> float | None:
    return next((r["score"] for r in lines if r["task"] == VERDICT_TASK and
                 r["split"] == "test" and r["metric"] == metric), None)
