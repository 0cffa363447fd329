"""Warnings when a run looks sick, from the metrics it already computes (warnings only: no
run is ever stopped by them).

Every logging interval, each check looks at the interval's means. It warns once when its
condition starts (on the console and as TensorBoard text `health`), says when it clears, and
writes the scalar `health/<check>` (1 while it holds, else 0). docs/pretraining.md ("Health
warnings") has the table of checks and what to do about each. The pretraining checks, after
the learning-rate warmup, and where their thresholds come from:

- generator_too_strong: replaced_fraction < 0.15, i.e. the generator's sample is the original
  token at more than 85% of the masked positions. The paper (Sec. 3.2, Fig. 3) finds
  generators 1/4-1/2 the discriminator's size best and a too strong generator harmful; its
  first author: "if the generator gets too good too quickly the discriminator fails to learn
  anything" (google-research/electra#37). A healthy run keeps ~6% of all tokens replaced at 15%
  masking (#49), i.e. replaced_fraction ~0.4.
- discriminator_one_class: disc_recall < 0.01 (every token called original) or
  disc_accuracy < 0.5 (most tokens called replaced, when at most mask_prob are). Accuracy alone
  stays ~94% (#49) while the verdicts carry nothing.
- trivial_loss: disc_loss >= 0.98 x H(p), the loss of always predicting the share
  p = share x replaced_fraction of replaced tokens, `share` the objective's
  (objectives.Objective.judged_replaced_share: mask_prob for ELECTRA, 1 for ELECTRA 15%, judged
  at the masked positions only; Electric's noise-contrastive loss has no such base rate and is
  not checked); or masked_lm_loss >= 0.98 x ln(vocab_size), a uniform guess. A model there has
  learned nothing beyond the base rate; the paper's curves (#3) fall well below both.
- gradient_explosion: grad_norm (before the clipping at 1.0) > 10 x the median of the previous
  (at least 5) intervals; sudden norm growth precedes the NaN losses reported for Base models
  on GPUs (#36, #70).

The discriminator's checks wait for its stage in two-stage training (`stage` 2).

>>> monitor = pretraining_monitor(mask_prob=0.15, vocab_size=30522, start_step=0)
>>> monitor.update(1000, {"replaced_fraction": 0.4, "disc_loss": 0.1})
[]
>>> print(*monitor.update(2000, {"replaced_fraction": 0.05, "disc_loss": 0.01}))
WARNING (health): the generator's samples are the original token at 95% of the masked positions ...
>>> monitor.scalars()["health/generator_too_strong"]
1.0
"""


from __future__ import annotations

import math
import statistics
from typing import Callable, Mapping, Sequence

from electra_tf import objectives

REPLACED_FRACTION_MIN = 0.15
RECALL_MIN = 0.01
ACCURACY_MIN = 0.5
TRIVIAL_LOSS_SHARE = 0.98  # within 2% of a trivial predictor's loss
GRAD_NORM_JUMP = 10.0
GRAD_NORM_HISTORY = 20  # intervals the median is taken over
GRAD_NORM_MIN_HISTORY = 5

Scalars = Mapping[str, float]
Condition = Callable[[Scalars], "str | None"]


class Check:
    """A named condition on one interval's metrics; `condition` returns the warning text while
    the run is sick, else None. Not looked at before `start_step`."""

    def __init__(self, name: str, condition: Condition, advice: str, start_step: int = 0):
        self.name = name
        self.condition = condition
        self.advice = advice
        self.start_step = start_step
        self.active = False

    def __call__(self, step: int, scalars: Scalars) -> str | None:
        if step < self.start_step:
            return None
        return self.condition(scalars)


class GradientExplosion(Check):
    """grad_norm above GRAD_NORM_JUMP x the median of the previous intervals."""

    def __init__(self, advice: str):
        super().__init__("gradient_explosion", self._explodes, advice)
        self.history: list[float] = []

    def _explodes(self, scalars: Scalars) -> str | None:
        norm = scalars.get("grad_norm")
        if norm is None or not math.isfinite(norm):
            return None
        history = self.history[-GRAD_NORM_HISTORY:]
        self.history.append(norm)
        if len(history) < GRAD_NORM_MIN_HISTORY:
            return None
        median = statistics.median(history)
        if norm > GRAD_NORM_JUMP * median and norm > 1.0:
            self.history.pop()  # a spike does not raise the baseline
            return (f"the gradient norm jumped to {norm:.3g}, {norm / median:.0f}x its median "
                    f"{median:.3g} over the last {len(history)} intervals")
        return None


class Monitor:
    """Runs the checks on each interval's metrics and reports changes."""

    def __init__(self, checks: Sequence[Check]):
        self.checks = list(checks)

    def update(self, step: int, scalars: Scalars) -> list[str]:
        """The messages for this interval: a warning for each check that starts to hold, a
        note for each that stops."""
        messages = []
        for check in self.checks:
            problem = check(step, scalars)
            if problem and not check.active:
                messages.append(f"WARNING (health): {problem}. {check.advice}")
            elif check.active and not problem:
                messages.append(f"health: {check.name} cleared")
            check.active = bool(problem)
        return messages

    def scalars(self) -> dict[str, float]:
        return {f"health/{check.name}": float(check.active) for check in self.checks}


def _binary_entropy(p: float) -> float:
    if p <= 0.0 or p >= 1.0:
        return 0.0
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def _generator_too_strong(scalars: Scalars) -> str | None:
    replaced = scalars.get("replaced_fraction")
    if replaced is None or replaced >= REPLACED_FRACTION_MIN:
        return None
    return (f"the generator's samples are the original token at {1 - replaced:.0%} of the "
            f"masked positions (replaced_fraction {replaced:.3f} < {REPLACED_FRACTION_MIN}): "
            "the discriminator sees few replaced tokens")


def _discriminator_trains(scalars: Scalars) -> bool:
    """False in two-stage training's first stage, where the discriminator's metrics are
    weighted out."""
    return scalars.get("stage", 2.0) >= 2.0


def _discriminator_one_class(scalars: Scalars) -> str | None:
    if not _discriminator_trains(scalars):
        return None
    recall, accuracy = scalars.get("disc_recall"), scalars.get("disc_accuracy")
    if recall is not None and recall < RECALL_MIN:
        return (f"the discriminator calls (almost) every token original (disc_recall "
                f"{recall:.3f} < {RECALL_MIN})")
    if accuracy is not None and accuracy < ACCURACY_MIN:
        return (f"the discriminator calls most tokens replaced (disc_accuracy {accuracy:.3f} "
                f"< {ACCURACY_MIN})")
    return None


def _trivial_loss(mask_prob: float, vocab_size: int, objective: str) -> Condition:
    judged_share = objectives.REGISTRY[objective].judged_replaced_share(mask_prob)

    def condition(scalars: Scalars) -> str | None:
        disc, replaced = scalars.get("disc_loss"), scalars.get("replaced_fraction")
        if (disc is not None and replaced is not None and judged_share is not None
                and _discriminator_trains(scalars)):
            trivial = _binary_entropy(judged_share * replaced)
            if trivial and disc >= TRIVIAL_LOSS_SHARE * trivial:
                return (f"disc_loss {disc:.4f} is at the loss of always predicting the share of "
                        f"replaced tokens ({trivial:.4f})")
        mlm = scalars.get("masked_lm_loss")
        uniform = math.log(vocab_size)
        if mlm is not None and mlm >= TRIVIAL_LOSS_SHARE * uniform:
            return (f"masked_lm_loss {mlm:.3f} is at the loss of a uniform guess over the "
                    f"vocabulary ({uniform:.3f})")
        return None
    return condition


def pretraining_monitor(mask_prob: float, vocab_size: int, start_step: int,
                        objective: str = "electra") -> Monitor:
    """The checks of the module docstring for the run's `objective` (config.OBJECTIVES); the
    model checks start at `start_step` (the end of the learning-rate warmup)."""
    see = " (docs/pretraining.md, \"Health warnings\")"
    return Monitor([
        Check("generator_too_strong", _generator_too_strong,
              "Make the generator smaller (generator_hidden_size 0.25-0.5) or sample at a "
              "higher temperature" + see, start_step),
        Check("discriminator_one_class", _discriminator_one_class,
              "Check learning_rate and num_warmup_steps, and the generator (above)" + see,
              start_step),
        Check("trivial_loss", _trivial_loss(mask_prob, vocab_size, objective),
              "The model is not learning: check the input (TensorBoard's text sample), the "
              "learning rate and the vocabulary" + see, start_step),
        GradientExplosion("Lower learning_rate or lengthen num_warmup_steps; under "
                          "mixed_float16, try float32 or mixed_bfloat16" + see),
    ])


def finetuning_monitor() -> Monitor:
    """Fine-tuning's metrics are its loss and gradient norm: the gradient check only."""
    return Monitor([GradientExplosion("Lower learning_rate or raise warmup_proportion "
                                      "(docs/finetuning.md)")])
