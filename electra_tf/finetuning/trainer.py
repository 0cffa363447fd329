"""Fine-tuning: the model of a run's tasks, the loss, training, and running a task's head over
a split. Tasks are known only through task.Task (see task_builder.py for the names).

The loss is the original's: each example's loss from its own task's head, *summed* over the
batch (not averaged), which matters because gradients are clipped at global norm 1.0.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Callable, Sequence

import keras
import numpy as np
import tensorflow as tf

from electra_tf import distribution, health, host_calls, modeling, optimization, resume, training
from electra_tf.finetuning import task_builder
from electra_tf.finetuning.config import FinetuningConfig
from electra_tf.finetuning.model import FinetuningModel, load_pretrained_encoder
from electra_tf.finetuning.task import INPUTS, SplitData, Task
from electra_tf.tokenization import WordPieceTokenizer


def concatenate(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Rows of several tasks in one table; a column one task lacks is 0 for its rows."""
    columns = {}
    for key in sorted({key for part in parts for key in part}):
        like = [part[key] for part in parts if key in part]
        if len({(a.shape[1:], a.dtype) for a in like}) > 1:
            raise ValueError(f"the tasks' feature {key!r} differs in shape or type between "
                             f"tasks ({[(a.shape[1:], str(a.dtype)) for a in like]}); give "
                             "task-specific features their own names")
        columns[key] = np.concatenate([
            part[key] if key in part else
            np.zeros((len(part["task_id"]), *like[0].shape[1:]), like[0].dtype)
            for part in parts])
    return columns


def make_tasks(config: FinetuningConfig) -> list[Task]:
    return [task_builder.get_task(name) for name in config.task_names]


def build_model(config: FinetuningConfig, tasks: Sequence[Task]) -> FinetuningModel:
    bert = config.bert_config()
    encoder = modeling.Encoder(**bert, embedding_size=config.embedding_size,
                               kernels=config.kernels, name="electra")
    model = FinetuningModel(encoder, {task.name: task.make_head(config) for task in tasks},
                            name="finetuning")
    model.build()
    return model


def initialise(config: FinetuningConfig, model: FinetuningModel, tasks: Sequence[Task]) -> str:
    """The encoder (and heads that come with the pretrained model) from init_checkpoint;
    returns what was read."""
    loaded = [load_pretrained_encoder(model.encoder, config.init_checkpoint)]
    for task in tasks:
        head = task.init_head(model.heads[task.name], config)
        if head is not None:
            loaded.append(f"{task.name} head: {head}")
    return "; ".join(loaded)


def example_losses(outputs: dict, batch: dict[str, tf.Tensor], tasks: Sequence[Task],
                   config: FinetuningConfig) -> tf.Tensor:
    """[B] losses: each example's loss from its own task (batch["task_id"])."""
    losses = [task.example_losses(config, outputs[task.name], batch) for task in tasks]
    return tf.reduce_sum(tf.stack(losses, -1) * tf.one_hot(batch["task_id"], len(tasks)), -1)


class FinetuningMetrics:
    """The training loss per example and the gradient norm, since the last reset; updated in
    replica context (create under the strategy scope)."""

    def __init__(self):
        self.loss_sum = keras.metrics.Sum(name="loss_sum")
        self.examples = keras.metrics.Sum(name="examples")
        self.grad_norm = keras.metrics.Mean(name="grad_norm")

    def update(self, loss_sum, num_examples, grad_norm) -> None:
        self.loss_sum.update_state(loss_sum)
        self.examples.update_state(tf.cast(num_examples, tf.float32))
        self.grad_norm.update_state(grad_norm)

    def results(self) -> dict[str, float]:
        examples = float(self.examples.result())
        if not examples:
            return {}
        return {"loss": float(self.loss_sum.result()) / examples,
                "grad_norm": float(self.grad_norm.result())}

    def reset(self) -> None:
        for metric in (self.loss_sum, self.examples, self.grad_norm):
            metric.reset_state()


@dataclasses.dataclass
class TrainState:
    """What a fine-tuning run trains and checkpoints, and its per-replica training step."""
    model: FinetuningModel
    optimizer: optimization.AdamWeightDecay
    loss_scale: distribution.DynamicLossScale | None
    metrics: FinetuningMetrics
    step_fn: Callable

    def checkpoint(self) -> tf.train.Checkpoint:
        parts = {"optimizer": self.optimizer}
        if self.loss_scale is not None:
            parts["loss_scale"] = self.loss_scale
        return resume.checkpoint(self.model, **parts)


def create_train_state(config: FinetuningConfig, model: FinetuningModel,
                       tasks: Sequence, strategy: tf.distribute.Strategy,
                       num_steps: int) -> TrainState:
    """AdamW with the warmup + linear decay schedule over `num_steps` and the layer-wise
    learning rates; the step sums the per-example losses, all-reduces and clips the
    gradients (distribution.apply_gradients) and applies them.

    The warmup is num_steps x warmup_proportion steps, a float as in the original (5 steps at
    0.1 warm up over half a step: step 0 trains at lr 0, step 1 at the full rate)."""
    variables = model.trainable_variables
    multipliers = None
    if config.layerwise_lr_decay > 0:
        multipliers = optimization.layerwise_lr_multipliers(
            [v.path for v in variables], model.encoder.num_hidden_layers,
            config.layerwise_lr_decay, config.fix_layerwise_lr_depths)
    with strategy.scope():
        optimizer = optimization.create_optimizer(
            config.learning_rate, num_steps, num_steps * config.warmup_proportion,
            config.weight_decay_rate, lr_multipliers=multipliers)
        optimizer.build(variables)
        loss_scale = (distribution.DynamicLossScale() if config.precision == "mixed_float16"
                      else None)
        metrics = FinetuningMetrics()

    def forward_backward(batch):
        with tf.GradientTape() as tape:
            outputs = model(batch, training=True)
            # Summed over the replica's examples: the replicas' sum is the global-batch sum.
            loss = tf.reduce_sum(example_losses(outputs, batch, tasks, config))
            scaled = loss * loss_scale.scale if loss_scale is not None else loss
        return tape.gradient(scaled, variables), loss

    forward_backward = distribution.maybe_jit(forward_backward,
                                              distribution.use_xla(config.jit_compile, strategy))

    def step_fn(batch):
        grads, loss = forward_backward(batch)
        norm = distribution.apply_gradients(optimizer, grads, variables, loss_scale)
        metrics.update(loss, tf.shape(batch["task_id"])[0], norm)

    return TrainState(model, optimizer, loss_scale, metrics, step_fn)


def train(config: FinetuningConfig, model: FinetuningModel, tasks: Sequence,
          train_data: dict[str, np.ndarray], strategy: tf.distribute.Strategy, model_dir: str,
          seed: int) -> int:
    """Trains for num_train_epochs over `train_data`, resuming from a checkpoint in model_dir
    when there is one (an interrupted trial); returns the number of steps. Raises
    preemption.Preempted on SIGTERM/SIGINT, after writing a checkpoint."""
    n = len(train_data["task_id"])
    num_steps = int(n // config.train_batch_size * config.num_train_epochs)
    if num_steps < 1:
        raise ValueError(f"{n} training examples make no batch of train_batch_size "
                         f"{config.train_batch_size}")
    replicas = strategy.num_replicas_in_sync
    if config.train_batch_size % replicas:
        raise ValueError(f"hparam 'train_batch_size' {config.train_batch_size} is not "
                         f"divisible by the {replicas} replicas")
    state = create_train_state(config, model, tasks, strategy, num_steps)
    checkpointer = resume.Checkpointer(
        state.checkpoint(), model_dir, state.optimizer.iterations, max_to_keep=1,
        chief=distribution.is_chief(strategy), guard_variables=model.trainable_variables)
    if checkpointer.restored:
        print(f"resuming at step {int(state.optimizer.iterations.numpy())} from "
              f"{checkpointer.restored}", flush=True)

    # As the original: the examples shuffled once, then repeated through a 100-example buffer.
    order = np.random.default_rng(seed).permutation(n)
    shuffled = {k: v[order] for k, v in train_data.items() if k != "eid"}

    def make_dataset(batch_size: int, ctx: tf.distribute.InputContext,
                     start_step: int) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices(shuffled)
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.repeat().shuffle(100, seed=seed + start_step).batch(batch_size,
                                                                      drop_remainder=True)

    loop = training.LoopConfig(
        model_dir=model_dir, num_steps=num_steps, global_batch_size=config.train_batch_size,
        iterations_per_loop=config.iterations_per_loop,
        log_steps=min(config.log_steps, config.iterations_per_loop),
        save_steps=config.save_checkpoints_steps, log_seconds=config.log_seconds,
        nonfinite_patience=config.nonfinite_patience, console_keys=("loss", "learning_rate"))
    training.train(strategy, state, state.step_fn,
                   host_calls.Batches(strategy, make_dataset, config.train_batch_size),
                   checkpointer, loop, monitor=health.finetuning_monitor())
    return num_steps


def run_head(model: FinetuningModel, task: Task, data: dict[str, np.ndarray],
             batch_size: int):
    """The task head's outputs (a tensor or dict of tensors, as numpy) for every row, in
    batches of batch_size (the last one padded, so every shape is static)."""
    n = len(data["input_ids"])
    padded = math.ceil(n / batch_size) * batch_size
    inputs = {k: np.pad(data[k], [(0, padded - n), (0, 0)]) for k in INPUTS}
    head = tf.function(lambda x: model(x, training=False, tasks=[task.name])[task.name])
    batches = [head({k: v[i:i + batch_size] for k, v in inputs.items()})
               for i in range(0, padded, batch_size)]
    return tf.nest.map_structure(lambda *parts: np.concatenate([p.numpy() for p in parts])[:n],
                                 *batches)


def make_tokenizer(config: FinetuningConfig) -> WordPieceTokenizer:
    if not tf.io.gfile.exists(config.vocab_file):
        raise FileNotFoundError(f"vocab file {config.vocab_file} not found: put the model's "
                                "vocab.txt in DATA_DIR/models/<model_name>/ or DATA_DIR/")
    return WordPieceTokenizer(config.vocab_file, do_lower_case=config.do_lower_case)


def load_split(config: FinetuningConfig, tasks: Sequence[Task], task: Task, split: str,
               tokenizer: WordPieceTokenizer) -> SplitData:
    """Reads and featurizes one split of a task, its rows marked with the task's index."""
    data = task.load(config, split, tokenizer)
    data.arrays["task_id"] = np.full(len(data), list(tasks).index(task), np.int32)
    return data


def evaluate(config: FinetuningConfig, model: FinetuningModel, data: SplitData,
             tokenizer: WordPieceTokenizer, trial: int) -> tuple[dict[str, float], Any]:
    """The split's metrics and the head's outputs. Predictions a task keeps (e.g. SQuAD's)
    go to results/<tasks>_predictions/<result name>_<trial>/."""
    outputs = run_head(model, data.task, data.arrays, config.eval_batch_size)
    output_dir = os.path.join(config.results_dir, f"{config.task_string}_predictions",
                              f"{data.task.result_name(data.split)}_{trial}")
    return data.task.evaluate(config, data, outputs, tokenizer, output_dir), outputs


def write_test_outputs(config: FinetuningConfig, model: FinetuningModel, data: SplitData,
                       tokenizer: WordPieceTokenizer, directory: str) -> tuple[list[str], Any]:
    """The task's leaderboard files for a test split (e.g. GLUE's MNLI-m.tsv); returns what
    was written and the head's outputs."""
    outputs = run_head(model, data.task, data.arrays, config.predict_batch_size)
    return data.task.write_test_outputs(config, data, outputs, tokenizer, directory), outputs


def results_path(config: FinetuningConfig, extension: str) -> str:
    return os.path.join(config.results_dir, f"{config.task_string}_results.{extension}")
