"""The original's optimizer (model/optimization.py) as Keras 3 optimizers.

- WarmupPolynomialDecay: lr * (1 - min(step, T) / T) ** power, times min(1, step / warmup).
  Warmup *overlaps* the decay (the peak is never reached exactly), and step 0 trains at lr 0,
  both as the original.
- WarmupStableDecay (ours, `lr_schedule: "wsd"`; Hagele et al. 2024): linear warmup, the peak
  held, then a decay to 0 over the last `decay_steps` steps. The schedule before the decay does
  not depend on where the run ends, so one run at the peak (the trunk) can be continued by
  short decays that end at several budgets.
- AdamWeightDecay: Adam with beta1 0.9, beta2 0.999, epsilon 1e-6 and *no* bias correction,
  plus decoupled weight decay (update += rate * param) skipped for LayerNorm and bias variables.
- Layer-wise learning-rate decay for fine-tuning (`layerwise_lr_multipliers`): lr x
  decay^(depth from the top), with the original's depths by default.
- Frozen variables (`AdamWeightDecay.freeze`): on the steps a condition names, a variable and
  its moments stay as they are (no update, no weight decay); two-stage pretraining freezes each
  network during the other's stage.
- Lamb (ours, for large batches): the same update scaled per variable by the trust ratio
  ||param|| / ||update|| (You et al., 2020); LayerNorm and bias variables are not adapted.

Gradient clipping (global norm 1.0) happens in the training step on the all-reduced gradient,
see distribution.apply_gradients.

>>> import numpy as np, keras
>>> schedule = WarmupPolynomialDecay(1e-3, num_train_steps=100, num_warmup_steps=10)
>>> [round(float(schedule(s)), 6) for s in (0, 5, 10, 50, 100)]
[0.0, 0.000475, 0.0009, 0.0005, 0.0]
>>> var = keras.Variable(np.ones(2, "float32"), name="kernel")
>>> opt = AdamWeightDecay(learning_rate=0.1, weight_decay_rate=0.0)
>>> opt.apply([np.array([1.0, -1.0], "float32")], [var])
>>> [round(float(x), 4) for x in var.numpy()]  # moves lr * 0.1g / (sqrt(0.001g^2) + eps)
[0.6838, 1.3162]
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, Sequence

import keras
import tensorflow as tf
from keras import ops

EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
SLOT_NAMES = ("adam_m", "adam_v")  # Adam's m and v, named as the original's checkpoints name them

register = keras.saving.register_keras_serializable(package="electra_tf")


@register
class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """tf.train.polynomial_decay to 0 over num_train_steps, times min(1, step / warmup)."""

    def __init__(self, learning_rate: float, num_train_steps: int, num_warmup_steps: float = 0,
                 power: float = 1.0):
        self.learning_rate = learning_rate
        self.num_train_steps = num_train_steps
        self.num_warmup_steps = num_warmup_steps
        self.power = power

    def __call__(self, step):
        step = ops.cast(step, "float32")
        progress = ops.minimum(step, float(self.num_train_steps)) / float(self.num_train_steps)
        lr = self.learning_rate * ops.power(1.0 - progress, self.power)
        if self.num_warmup_steps > 0:
            lr = lr * ops.minimum(1.0, step / float(self.num_warmup_steps))
        return lr

    def get_config(self) -> dict[str, Any]:
        return {"learning_rate": self.learning_rate, "num_train_steps": self.num_train_steps,
                "num_warmup_steps": self.num_warmup_steps, "power": self.power}


@register
class WarmupStableDecay(keras.optimizers.schedules.LearningRateSchedule):
    """min(1, step / warmup) x lr until num_train_steps - decay_steps, then
    lr x (1 - progress) ** power over the decay, progress going from 0 to 1 at num_train_steps.
    decay_steps 0: the peak is held to the end (a trunk that decay branches continue).

    >>> schedule = WarmupStableDecay(1.0, num_train_steps=100, num_warmup_steps=10,
    ...                              decay_steps=20)
    >>> [round(float(schedule(s)), 2) for s in (0, 5, 10, 80, 90, 100)]
    [0.0, 0.5, 1.0, 1.0, 0.5, 0.0]
    """

    def __init__(self, learning_rate: float, num_train_steps: int, num_warmup_steps: float = 0,
                 decay_steps: int = 0, power: float = 1.0):
        self.learning_rate = learning_rate
        self.num_train_steps = num_train_steps
        self.num_warmup_steps = num_warmup_steps
        self.decay_steps = decay_steps
        self.power = power

    def __call__(self, step):
        step = ops.cast(step, "float32")
        lr = ops.convert_to_tensor(self.learning_rate, "float32")
        if self.decay_steps > 0:
            start = float(self.num_train_steps - self.decay_steps)
            progress = ops.clip((step - start) / float(self.decay_steps), 0.0, 1.0)
            lr = lr * ops.power(1.0 - progress, self.power)
        if self.num_warmup_steps > 0:
            lr = lr * ops.minimum(1.0, step / float(self.num_warmup_steps))
        return lr

    def get_config(self) -> dict[str, Any]:
        return {"learning_rate": self.learning_rate, "num_train_steps": self.num_train_steps,
                "num_warmup_steps": self.num_warmup_steps, "decay_steps": self.decay_steps,
                "power": self.power}


@register
class RestartingSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`schedule` run again from its step 0 every `period` steps (each stage of two-stage
    pretraining has its own warmup and decay).

    >>> inner = WarmupPolynomialDecay(1.0, num_train_steps=10)
    >>> [round(float(RestartingSchedule(inner, 10)(s)), 2) for s in (0, 5, 10, 15)]
    [1.0, 0.5, 1.0, 0.5]
    """

    def __init__(self, schedule: keras.optimizers.schedules.LearningRateSchedule, period: int):
        self.schedule = schedule
        self.period = period

    def __call__(self, step):
        return self.schedule(ops.mod(ops.cast(step, "int64"), self.period))

    def get_config(self) -> dict[str, Any]:
        return {"schedule": keras.saving.serialize_keras_object(self.schedule),
                "period": self.period}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> RestartingSchedule:
        return cls(keras.saving.deserialize_keras_object(config["schedule"]), config["period"])


@functools.cache
def fused_adam_update(beta_1: float, beta_2: float, epsilon: float, weight_decay_rate: float,
                      multipliers: tuple[float, ...], decays: tuple[bool, ...],
                      gated: tuple[bool, ...]) -> Callable:
    """AdamWeightDecay's update of a list of variables as one XLA computation: (params, m, v,
    gradients, lr, freezes) -> [(param, m, v)] per variable, `freezes` one boolean per gated
    variable. A pure function of its arguments and these constants, so every optimizer with the
    same constants shares it and, for the same shapes, its compiled executable: a process that
    builds optimizers again, as trials do, compiles it once."""

    @tf.function(jit_compile=True, autograph=False)  # Python loops and ifs only
    def update(params, ms, vs, gradients, lr, freezes):
        out, freezes = [], iter(freezes)
        for p, m, v, g, mult, decay, gate in zip(params, ms, vs, gradients, multipliers,
                                                 decays, gated):
            g = tf.cast(g, p.dtype)
            new_m = beta_1 * m + (1.0 - beta_1) * g
            new_v = beta_2 * v + (1.0 - beta_2) * tf.square(g)
            step = new_m / (tf.sqrt(new_v) + epsilon)
            if decay:
                step += weight_decay_rate * p
            new = (p - tf.cast(lr, p.dtype) * mult * step, new_m, new_v)
            if gate:
                freeze = next(freezes)
                new = tuple(tf.where(freeze, old, n) for old, n in zip((p, m, v), new))
            out.append(new)
        return out

    return update


@register
class AdamWeightDecay(keras.optimizers.Optimizer):
    """The original's AdamWeightDecayOptimizer.

    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  u = m / (sqrt(v) + eps) [+ rate * param]
    param -= lr * u.  No bias correction. Variables whose path matches any of
    `exclude_from_weight_decay` (regular expressions) get no decay. Slots are named adam_m and
    adam_v, as the original's checkpoints name them.
    """

    def __init__(self, learning_rate=1e-3, weight_decay_rate: float = 0.0, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-6,
                 exclude_from_weight_decay: Sequence[str] = EXCLUDE_FROM_WEIGHT_DECAY,
                 lr_multipliers: dict[str, float] | None = None, fused: bool = False,
                 name: str = "AdamWeightDecay", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.lr_multipliers = dict(lr_multipliers or {})
        self.fused = fused
        self.weight_decay_rate = weight_decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.exclude_from_weight_decay = tuple(exclude_from_weight_decay)
        self._frozen_when: dict[int, Callable[[], Any]] = {}  # variable index -> condition

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._adam_m, self._adam_v = self.add_optimizer_variables(var_list, list(SLOT_NAMES))
        # By index: update_step may receive the backend variable, which has no Keras path.
        self._multipliers = [self.lr_multipliers.get(v.path, 1.0) for v in var_list]

    def freeze(self, variables: Sequence, condition: Callable[[], Any]) -> None:
        """Leaves `variables` and their moments unchanged on every step where `condition()`
        (a boolean scalar, read before the step's update, e.g. from `iterations`) is true.
        Call after build()."""
        for variable in variables:
            self._frozen_when[self._get_variable_index(variable)] = condition

    def tracks(self, variable) -> bool:
        """Whether this optimizer trains `variable` (holds its slots)."""
        try:
            self._get_variable_index(variable)
        except KeyError:
            return False
        return True

    def moments(self, variable) -> tuple[keras.Variable, keras.Variable]:
        """Adam's m and v of `variable` (its slots, SLOT_NAMES)."""
        index = self._get_variable_index(variable)
        return self._adam_m[index], self._adam_v[index]

    def second_moment(self, variable) -> keras.Variable:
        """Adam's v of `variable` (its adam_v slot): the running mean of its squared
        (clipped) gradient."""
        return self.moments(variable)[1]

    def _frozen(self, index: int):
        """The boolean scalar that freezes variable `index` this step, or None."""
        condition = self._frozen_when.get(index)
        return None if condition is None else condition()

    def is_excluded(self, variable) -> bool:
        """LayerNorm and bias variables (by default): no weight decay, no LAMB adaptation."""
        name = getattr(variable, "path", variable.name)
        return any(re.search(pattern, name) for pattern in self.exclude_from_weight_decay)

    def uses_weight_decay(self, variable) -> bool:
        return bool(self.weight_decay_rate) and not self.is_excluded(variable)

    def _adam_update(self, gradient, variable):
        """Updates the moments; returns the step direction m / (sqrt(v) + eps) [+ decay]."""
        index = self._get_variable_index(variable)
        m, v = self._adam_m[index], self._adam_v[index]
        gradient = ops.cast(gradient, variable.dtype)
        next_m = self.beta_1 * m + (1.0 - self.beta_1) * gradient
        next_v = self.beta_2 * v + (1.0 - self.beta_2) * ops.square(gradient)
        self.assign(m, next_m)
        self.assign(v, next_v)
        update = next_m / (ops.sqrt(next_v) + self.epsilon)
        if self.uses_weight_decay(variable):
            update = update + self.weight_decay_rate * variable
        return update

    def _lr(self, learning_rate, variable):
        multiplier = self._multipliers[self._get_variable_index(variable)]
        return ops.cast(learning_rate, variable.dtype) * multiplier

    def update_step(self, gradient, variable, learning_rate):
        frozen = self._frozen(self._get_variable_index(variable))
        if frozen is None:
            self._update(gradient, variable, learning_rate)
        else:
            tf.cond(frozen, lambda: None, lambda: self._update(gradient, variable, learning_rate))

    def _update(self, gradient, variable, learning_rate):
        self.assign_sub(variable, self._lr(learning_rate, variable) *
                        self._adam_update(gradient, variable))

    def _distributed_tf_update_step(self, distribution, grads_and_vars, learning_rate):
        """With `fused` on one replica, every variable's update runs in one XLA computation
        instead of ~15 small ops per variable (the same arithmetic)."""
        if not self.fused or distribution.num_replicas_in_sync > 1:
            return super()._distributed_tf_update_step(distribution, grads_and_vars,
                                                       learning_rate)
        grads, variables = zip(*grads_and_vars)
        index = [self._get_variable_index(v) for v in variables]
        moments = [(self._adam_m[i], self._adam_v[i]) for i in index]
        frozen = [self._frozen(i) for i in index]
        update = fused_adam_update(self.beta_1, self.beta_2, self.epsilon,
                                   self.weight_decay_rate,
                                   tuple(self._multipliers[i] for i in index),
                                   tuple(self.uses_weight_decay(v) for v in variables),
                                   tuple(f is not None for f in frozen))
        new = update([v.read_value() for v in variables], [m.value for m, _ in moments],
                     [v.value for _, v in moments], list(grads), learning_rate,
                     [f for f in frozen if f is not None])
        for variable, (m, v), (new_p, new_m, new_v) in zip(variables, moments, new):
            variable.assign(new_p)
            m.assign(new_m)
            v.assign(new_v)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "weight_decay_rate": self.weight_decay_rate,
                "lr_multipliers": self.lr_multipliers, "fused": self.fused,
                "beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon,
                "exclude_from_weight_decay": list(self.exclude_from_weight_decay)}


@register
class Lamb(AdamWeightDecay):
    """AdamWeightDecay's direction scaled per variable by ||param|| / ||update|| (1 when either
    norm is 0). Variables excluded from weight decay are not adapted either."""

    def __init__(self, learning_rate=1e-3, name: str = "Lamb", **kwargs):
        if kwargs.get("fused"):
            raise ValueError("Lamb has no fused update (its trust ratio is per variable)")
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)

    def _update(self, gradient, variable, learning_rate):
        lr = self._lr(learning_rate, variable)
        update = self._adam_update(gradient, variable)
        if not self.is_excluded(variable):
            w_norm = ops.norm(ops.reshape(variable, (-1,)))
            u_norm = ops.norm(ops.reshape(update, (-1,)))
            ratio = ops.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, 1.0)
            lr = lr * ratio
        self.assign_sub(variable, lr * update)


def layer_depth(path: str, num_layers: int, fixed: bool = False) -> int:
    """A fine-tuning variable's depth: 0 for the embedding block (and its projection),
    i + 1 for transformer layer i, and for anything else (the task heads) n + 2 as the original's
    _get_layer_lrs, or n + 1 when `fixed`."""
    parts = path.split("/")
    if "embeddings" in parts or "embeddings_project" in parts:
        return 0
    for part in parts:
        if part.startswith("layer_") and part[6:].isdigit():
            return int(part[6:]) + 1
    return num_layers + 1 if fixed else num_layers + 2


def layerwise_lr_multipliers(paths: Sequence[str], num_layers: int, decay: float,
                             fixed: bool = False) -> dict[str, float]:
    """path -> decay^(n + 2 - depth), the original's layer-wise learning rates.

    The original gives its task heads depth n + 2 while the top transformer layer has depth n,
    so the top layer already trains at decay^2 and the embeddings at decay^(n + 2): an
    off-by-one kept here by default for fidelity. `fixed` gives the heads depth n + 1 (top
    layer decay^1, embeddings decay^(n + 1))."""
    top = num_layers + 1 if fixed else num_layers + 2
    return {path: decay ** (top - layer_depth(path, num_layers, fixed)) for path in paths}


def create_optimizer(learning_rate: float, num_train_steps: int, num_warmup_steps: float = 0,
                     weight_decay_rate: float = 0.0, lr_decay_power: float = 1.0,
                     optimizer: str = "adamw", lr_multipliers: dict[str, float] | None = None,
                     fused: bool = True, restart_every: int | None = None,
                     lr_schedule: str = "polynomial", lr_decay_steps: int = 0) -> AdamWeightDecay:
    """The original's create_optimizer, minus the clipping (done on the reduced gradient).
    `fused`: AdamW updates every variable in one XLA computation on a single replica (LAMB,
    whose trust ratio is per variable, never does). `restart_every`: the schedule (warmup,
    then decay over `num_train_steps`) starts again every that many steps. `lr_schedule`:
    "polynomial" (the original's, decay over the whole run) or "wsd" (WarmupStableDecay, the
    decay over the last `lr_decay_steps`)."""
    if lr_schedule == "wsd":
        schedule = WarmupStableDecay(learning_rate, num_train_steps, num_warmup_steps,
                                     lr_decay_steps, lr_decay_power)
    elif lr_schedule == "polynomial":
        schedule = WarmupPolynomialDecay(learning_rate, num_train_steps, num_warmup_steps,
                                         lr_decay_power)
    else:
        raise ValueError(f"lr_schedule {lr_schedule!r}: use 'polynomial' or 'wsd'")
    if restart_every:
        schedule = RestartingSchedule(schedule, restart_every)
    cls = {"adamw": AdamWeightDecay, "lamb": Lamb}[optimizer]
    return cls(learning_rate=schedule, weight_decay_rate=weight_decay_rate,
               lr_multipliers=lr_multipliers, fused=fused and optimizer == "adamw")
