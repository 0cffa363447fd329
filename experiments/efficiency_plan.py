"""The efficiency experiment's plan: the budgets that size it, the objectives it compares and
the pretraining runs, sized in FLOPs (experiments/efficiency.py runs them; experiments/report.py
and the other experiments read them).

ELECTRA runs `electra_steps`; BERT (`mlm`) runs the steps that cost the same pretraining FLOPs
(electra_tf.flops); the Table 5 objectives run ELECTRA's steps, as the paper compares them.
"""

from __future__ import annotations

import dataclasses
import fractions
from typing import Any, Callable, Sequence

import downstream

TABLE5_OBJECTIVES = ("electra_15", "replace_mlm", "all_tokens_mlm")
OBJECTIVES = ("electra", "mlm", *TABLE5_OBJECTIVES)
# The paper's Table 5 (ELECTRA-Base-sized models, GLUE dev score).
PAPER_TABLE5 = {"electra": 85.0, "all_tokens_mlm": 84.3, "replace_mlm": 82.4,
                "electra_15": 82.4, "mlm": 82.2}
PRETRAIN_SEED = 1
# disc_auc's thresholds in these experiments: a finer estimate than the original's 200, and
# the count every record so far (logged in training and under do_eval) was made with.
AUC_NUM_THRESHOLDS = 1000
# Recipes that are an objective with some hparams changed, by the name their records carry:
# (the objective, the hparams that differ from the budget's).
# ELECTRA and Table 5's objectives with a generator half the discriminator's width (the
# paper's Figure 3 tries 1/4 to 1): the wide ladder's 1/4 generator stays at the no-context
# level (docs/trunk_pilots.md, "The generator pilot").
HALF_GENERATOR = {"generator_hidden_size": 0.5}
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    f"{objective}_half": (objective, HALF_GENERATOR)
    for objective in ("electra", *TABLE5_OBJECTIVES)}
# Replace MLM and ELECTRA with each other's loss weight (docs/reproduction.md, "The weighting
# confound"): the weight decides how much of the shared embeddings' gradient, and of what the
# global-norm clipping leaves, goes to the generator.
WEIGHT_SWAPPED = {"replace_mlm_w50": ("replace_mlm", {"disc_weight": 50.0}),
                  "electra_w1": ("electra", {"disc_weight": 1.0})}
VARIANTS.update(WEIGHT_SWAPPED)
# ELECTRA and Replace MLM pretrained again from another seed (docs/reproduction.md,
# "Pretraining seeds"): the seed draws the initial weights, the masking, the generator's samples
# and dropout, and shuffles the training files and a small buffer of examples; every other run
# draws them from PRETRAIN_SEED, so the fine-tuning seeds' spread leaves this noise out. Replace
# MLM at weight 50 from that seed repeats the weight's effect in a second pretraining run
# ("The run after the seeds").
RESEEDED = {**{f"{objective}_seed2": (objective, {"seed": 2})
               for objective in ("electra", "replace_mlm")},
            "replace_mlm_w50_seed2": ("replace_mlm", {"disc_weight": 50.0, "seed": 2})}
VARIANTS.update(RESEEDED)
# Replace MLM at weight 1 with embeddings of its own for the generator and for the model
# ("The run after the seeds"): the model's tables then take its own loss's gradient alone, as
# at weight 50 they nearly do, with the clipping and epsilon of weight 1.
UNTIED = {"replace_mlm_untied": ("replace_mlm", {"embedding_sharing": "untied"})}
VARIANTS.update(UNTIED)
# Table 5's objectives (and their variants), each climbed at the steps of the ELECTRA recipe
# with the same generator and compared with it there, as the paper compares them.
TABLE5_REFERENCE = {**{objective: "electra" for objective in TABLE5_OBJECTIVES},
                    **{f"{objective}_half": "electra_half" for objective in TABLE5_OBJECTIVES},
                    "replace_mlm_w50": "electra", "replace_mlm_seed2": "electra_seed2",
                    "replace_mlm_w50_seed2": "electra_seed2", "replace_mlm_untied": "electra"}
# How reports name each objective, and each variant by what it changes.
NAMES = {"electra": "ELECTRA", "electra_15": "ELECTRA 15%", "replace_mlm": "Replace MLM",
         "all_tokens_mlm": "All-Tokens MLM", "mlm": "BERT (MLM)"}
CHANGE_NAMES: dict[str, Callable[[Any], str]] = {
    "generator_hidden_size": lambda v: f"generator {fractions.Fraction(v).limit_denominator(16)}",
    "disc_weight": lambda v: f"disc_weight {v:g}",
    "embedding_sharing": lambda v: f"embeddings {v}",
    "seed": lambda v: f"pretraining seed {v}"}
NAMES.update({name: ", ".join([NAMES[objective], *(CHANGE_NAMES[key](value)
                                                   for key, value in changed.items())])
              for name, (objective, changed) in VARIANTS.items()})


def one_change_bases(recipe: str) -> list[tuple[str, str]]:
    """The recipes of the same objective that `recipe` changes in one other hparam: (that
    recipe, the hparam), e.g. a reseeded run's first run, or the first run at the other loss
    weight.

    >>> one_change_bases("replace_mlm_w50_seed2")
    [('replace_mlm_w50', 'seed'), ('replace_mlm_seed2', 'disc_weight')]
    >>> one_change_bases("replace_mlm")
    []
    """
    objective, changed = VARIANTS.get(recipe, (recipe, {}))
    out = []
    for base in (*OBJECTIVES, *VARIANTS):
        base_objective, base_changed = VARIANTS.get(base, (base, {}))
        differ = [key for key in changed if base_changed.get(key) != changed[key]]
        if base_objective == objective and len(differ) == 1 and \
                base_changed.items() <= changed.items():
            out.append((base, differ[0]))
    return out


@dataclasses.dataclass(frozen=True)
class Budget:
    """Everything that sizes the experiment; every objective gets the same."""
    hidden_size: int
    num_layers: int
    num_heads: int
    embedding_size: int
    generator_fraction: float  # the generator's hidden size as a share of the discriminator's
    seq_length: int
    batch_size: int
    electra_steps: int  # ELECTRA's pretraining steps; the Table 5 objectives run the same
    curve_points: int  # FLOP budgets on the curve: electra_steps / 2^k, k < curve_points
    learning_rate: float  # pretraining
    warmup_fraction: float
    task_sizes: dict[str, int]  # train/dev/test examples per built task
    trials: int  # fine-tuning seeds per (checkpoint, task, learning rate)
    finetune_lrs: tuple[float, ...]
    finetune_epochs: float
    finetune_seq_length: int
    finetune_batch_size: int
    # None: BERT's uncased WordPiece vocabulary (30,522 tokens); a number: a vocabulary of about
    # that size learned from the pretraining text by pretrain_data/build_vocab.py.
    vocab_size: int | None = None

    def model_hparams(self) -> dict[str, Any]:
        """The transformer shape, as run_pretraining.py and run_finetuning.py take it."""
        return {"model_size": "small", "embedding_size": self.embedding_size,
                "model_hparam_overrides": {"hidden_size": self.hidden_size,
                                           "num_hidden_layers": self.num_layers,
                                           "num_attention_heads": self.num_heads,
                                           "intermediate_size": 4 * self.hidden_size}}


BUDGETS = {
    # The pipeline end to end in about a minute and a half (CI): a tiny model, one task.
    "smoke": Budget(hidden_size=32, num_layers=2, num_heads=2, embedding_size=32,
                    generator_fraction=0.25, seq_length=128, batch_size=8, electra_steps=8,
                    curve_points=2, learning_rate=1e-3, warmup_fraction=0.1,
                    task_sizes={"train": 64, "dev": 32, "test": 32}, trials=2,
                    finetune_lrs=(1e-3,), finetune_epochs=1.0, finetune_seq_length=64,
                    finetune_batch_size=32),
    # A first look at ELECTRA against BERT at the full run's model size: the end of each run.
    "pilot": Budget(hidden_size=128, num_layers=4, num_heads=2, embedding_size=128,
                    generator_fraction=0.25, seq_length=128, batch_size=32, electra_steps=400,
                    curve_points=1, learning_rate=1e-3, warmup_fraction=0.1,
                    task_sizes=downstream.DEFAULT_SIZES, trials=3, finetune_lrs=(3e-4,),
                    finetune_epochs=2.0, finetune_seq_length=64, finetune_batch_size=32),
    # A learned 8k vocabulary: with BERT's 30,522 tokens the output layer is a third of a step
    # and the pilot's models never left the unigram stage.
    "full": Budget(hidden_size=128, num_layers=4, num_heads=2, embedding_size=128,
                   generator_fraction=0.25, seq_length=128, batch_size=32, electra_steps=1600,
                   curve_points=4, learning_rate=1e-3, warmup_fraction=0.1,
                   task_sizes=downstream.DEFAULT_SIZES, trials=5, finetune_lrs=(3e-4, 1e-3),
                   finetune_epochs=2.0, finetune_seq_length=64, finetune_batch_size=32,
                   vocab_size=8192),
}


@dataclasses.dataclass(frozen=True)
class PretrainRun:
    objective: str
    steps: int
    save_every: int
    step_flops: float

    @property
    def name(self) -> str:
        return f"pretrain_{self.objective}"

    def checkpoints(self, curve_points: int) -> list[int]:
        """The kept steps: the run's last `curve_points` halvings (only the end for runs
        compared at equal steps)."""
        if self.save_every == self.steps:
            return [self.steps]
        return [self.steps >> k for k in reversed(range(curve_points))]


def pretraining_hparams(budget: Budget, objective: str, steps: int,
                        save_every: int) -> dict[str, Any]:
    """run_pretraining.py's hparams for `objective`, an objective or a VARIANTS name."""
    objective, changed = VARIANTS.get(objective, (objective, {}))
    return {**budget.model_hparams(), "objective": objective,
            "generator_hidden_size": budget.generator_fraction,
            "max_seq_length": budget.seq_length, "train_batch_size": budget.batch_size,
            "num_train_steps": steps, "num_warmup_steps": round(budget.warmup_fraction * steps),
            "learning_rate": budget.learning_rate, "save_checkpoints_steps": save_every,
            "keep_checkpoint_max": 0, "iterations_per_loop": min(50, save_every),
            "text_summary_steps": 0, "seed": PRETRAIN_SEED,
            "auc_num_thresholds": AUC_NUM_THRESHOLDS, **changed}


def step_flops(budget: Budget, data_dir: str, objective: str) -> float:
    from electra_tf import config as config_lib
    from electra_tf import flops

    config = config_lib.from_hparams("flops", data_dir,
                                     pretraining_hparams(budget, objective, 1, 1))
    return flops.pretraining_step_flops(config)


def plan_pretraining(budget: Budget, data_dir: str, objectives: Sequence[str]) -> list[PretrainRun]:
    """ELECTRA and BERT with checkpoints at equal FLOPs; the others at ELECTRA's steps.
    ELECTRA's steps must halve evenly curve_points - 1 times; BERT's checkpoint interval is
    the whole number of its steps closest to ELECTRA's in FLOPs, so each of its checkpoints
    costs ELECTRA's FLOPs to within half a step per interval (the report gives the exact
    FLOPs of every checkpoint)."""
    unit = budget.electra_steps >> (budget.curve_points - 1)
    if unit << (budget.curve_points - 1) != budget.electra_steps:
        raise ValueError(f"electra_steps {budget.electra_steps} does not halve evenly "
                         f"{budget.curve_points - 1} times")
    electra_flops = step_flops(budget, data_dir, "electra")
    runs = []
    for objective in objectives:
        flops = step_flops(budget, data_dir, objective)
        if objective == "electra":
            runs.append(PretrainRun(objective, budget.electra_steps, unit, flops))
        elif objective == "mlm":
            bert_unit = round(unit * electra_flops / flops)
            runs.append(PretrainRun(objective, bert_unit << (budget.curve_points - 1),
                                    bert_unit, flops))
        else:
            runs.append(PretrainRun(objective, budget.electra_steps, budget.electra_steps,
                                    flops))
    return runs
