"""Fine-tuning: features for GLUE-style tasks, the loss, training and prediction for GLUE and
SQuAD.

GLUE features as the original's classification_tasks.SingleOutputTask.featurize: [CLS] A [SEP]
(B [SEP]), segment 0 then 1, the pair truncated one token at a time from the longer side to
max_seq_length - 3, a single text to max_seq_length - 2. Loss as the original's: per-example
cross-entropy (classification) or squared error on the label scaled to [0, 1] (regression),
each example scored by its own task's head, *summed* over the batch (not averaged), which
matters because gradients are clipped at global norm 1.0.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import typing
from typing import Callable, Sequence

import keras
import numpy as np
import tensorflow as tf

from electra_tf import modeling, optimization, training
from electra_tf.finetuning import glue, squad
from electra_tf.finetuning.config import FinetuningConfig
from electra_tf.finetuning.model import ClassificationHead, FinetuningModel, SquadHead
from electra_tf.tokenization import WordPieceTokenizer

INPUTS = ("input_ids", "input_mask", "segment_ids")
SQUAD_TASKS = ("squad", "squadv1")


def truncate_pair(a: list[int], b: list[int], max_length: int) -> None:
    """The original's _truncate_seq_pair: pops from the longer list until both fit."""
    while len(a) + len(b) > max_length:
        (a if len(a) > len(b) else b).pop()


def featurize(task: glue.GlueTask, task_id: int, examples: Sequence[glue.Example],
              tokenizer: WordPieceTokenizer, max_seq_length: int) -> dict[str, np.ndarray]:
    """Examples -> int32 input arrays [N, L], `task_id` [N], float32 `label` [N] (class id or
    scaled score; 0 where there is none) and int `eid` [N]."""
    ids_a = tokenizer.tokenize_to_ids([e.text_a for e in examples])
    ids_b = tokenizer.tokenize_to_ids([e.text_b or "" for e in examples])
    cls, sep = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
    n = len(examples)
    arrays = {name: np.zeros((n, max_seq_length), np.int32) for name in INPUTS}
    for row, (example, a, b) in enumerate(zip(examples, ids_a, ids_b)):
        if example.text_b:
            truncate_pair(a, b, max_seq_length - 3)
        else:
            a, b = a[:max_seq_length - 2], []
        ids = [cls] + a + [sep] + (b + [sep] if b else [])
        arrays["input_ids"][row, :len(ids)] = ids
        arrays["input_mask"][row, :len(ids)] = 1
        arrays["segment_ids"][row, len(a) + 2:len(ids)] = 1
    arrays["task_id"] = np.full(n, task_id, np.int32)
    arrays["label"] = np.array([0.0 if e.label is None else task.label_id(e.label)
                                for e in examples], np.float32)
    arrays["eid"] = np.array([e.eid for e in examples], np.int64)
    return arrays


def featurize_squad(task_id: int, features: Sequence[squad.QAFeature]) -> dict[str, np.ndarray]:
    """squad.featurize's windows -> int32 arrays, with the original's span targets."""
    arrays = {name: np.array([getattr(f, name) for f in features], np.int32)
              for name in (*INPUTS, "is_impossible")}
    arrays["start_positions"] = np.array([f.start_position for f in features], np.int32)
    arrays["end_positions"] = np.array([f.end_position for f in features], np.int32)
    arrays["task_id"] = np.full(len(features), task_id, np.int32)
    return arrays


def concatenate(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Rows of several tasks in one table; a column one task lacks is 0 for its rows."""
    columns = {}
    for key in sorted({key for part in parts for key in part}):
        like = next(part[key] for part in parts if key in part)
        columns[key] = np.concatenate([
            part[key] if key in part else
            np.zeros((len(part["task_id"]), *like.shape[1:]), like.dtype) for part in parts])
    return columns


@dataclasses.dataclass(frozen=True)
class SquadTask:
    """SQuAD under the original's names: "squad" is 2.0, "squadv1" is 1.1. Data in
    DATA_DIR/finetuning_data/<name>/{train,dev}.json (and test.json for test outputs)."""
    name: str
    is_regression: typing.ClassVar[bool] = False

    @property
    def version_2(self) -> bool:
        return self.name == "squad"


def make_tasks(config: FinetuningConfig) -> list:
    return [SquadTask(name) if name in SQUAD_TASKS else glue.get_task(name)
            for name in config.task_names]


def build_model(config: FinetuningConfig, tasks: Sequence) -> FinetuningModel:
    bert = config.bert_config()
    encoder = modeling.Encoder(**bert, embedding_size=config.embedding_size, name="electra")
    heads = {}
    for task in tasks:
        if isinstance(task, SquadTask):
            heads[task.name] = SquadHead(config.beam_size, config.joint_prediction,
                                         config.answerable_classifier,
                                         config.answerable_uses_start_logits, name=task.name)
        else:
            heads[task.name] = ClassificationHead(
                1 if task.is_regression else len(task.labels), name=task.name)
    model = FinetuningModel(encoder, heads, name="finetuning")
    model.build()
    return model


def _cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """-log softmax(logits)[label], as the original writes it (one-hot times log-probs)."""
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    return -tf.reduce_sum(tf.one_hot(labels, tf.shape(logits)[-1]) * log_probs, axis=-1)


def example_losses(outputs: dict[str, tf.Tensor], batch: dict[str, tf.Tensor],
                   tasks: Sequence, config: FinetuningConfig) -> tf.Tensor:
    """[B] losses: each example's own task's cross-entropy, squared error, or for SQuAD the
    mean of the start and end cross-entropies plus answerable_weight x the answerability
    classifier's sigmoid cross-entropy."""
    losses = []
    for task in tasks:
        logits = outputs[task.name]
        if isinstance(logits, dict):  # SQuAD
            loss = (_cross_entropy(logits["start_logits"], batch["start_positions"]) +
                    _cross_entropy(logits["end_logits"], batch["end_positions"])) / 2.0
            if "answerable_logit" in logits:
                loss += config.answerable_weight * tf.nn.sigmoid_cross_entropy_with_logits(
                    labels=tf.cast(batch["is_impossible"], tf.float32),
                    logits=logits["answerable_logit"])
            losses.append(loss)
        elif task.is_regression:
            losses.append(tf.square(logits[:, 0] - batch["label"]))
        else:
            losses.append(_cross_entropy(logits, tf.cast(batch["label"], tf.int32)))
    return tf.reduce_sum(tf.stack(losses, -1) * tf.one_hot(batch["task_id"], len(tasks)), -1)


@dataclasses.dataclass
class TrainState:
    """What a fine-tuning run trains with: the optimizer, the loss scale (mixed_float16), the
    summed loss since the last read, and the host-side loop running `n` steps per call."""
    optimizer: optimization.AdamWeightDecay
    loss_scale: training.DynamicLossScale | None
    loss_sum: keras.metrics.Sum
    loop: Callable


def create_train_state(config: FinetuningConfig, model: FinetuningModel,
                       tasks: Sequence, strategy: tf.distribute.Strategy,
                       num_steps: int) -> TrainState:
    """AdamW with the warmup + linear decay schedule over `num_steps` and the layer-wise
    learning rates; the step sums the per-example losses, all-reduces and clips the
    gradients (training.apply_gradients) and applies them."""
    variables = model.trainable_variables
    multipliers = None
    if config.layerwise_lr_decay > 0:
        multipliers = optimization.layerwise_lr_multipliers(
            [v.path for v in variables], model.encoder.num_hidden_layers,
            config.layerwise_lr_decay, config.fix_layerwise_lr_depths)
    with strategy.scope():
        optimizer = optimization.create_optimizer(
            config.learning_rate, num_steps, int(num_steps * config.warmup_proportion),
            config.weight_decay_rate, lr_multipliers=multipliers)
        optimizer.build(variables)
        loss_scale = (training.DynamicLossScale() if config.precision == "mixed_float16"
                      else None)
        loss_sum = keras.metrics.Sum(name="loss")

    def forward_backward(batch):
        with tf.GradientTape() as tape:
            outputs = model(batch, training=True)
            # Summed over the replica's examples: the replicas' sum is the global-batch sum.
            loss = tf.reduce_sum(example_losses(outputs, batch, tasks, config))
            scaled = loss * loss_scale.scale if loss_scale is not None else loss
        return tape.gradient(scaled, variables), loss

    forward_backward = training.maybe_jit(forward_backward,
                                          training.use_xla(config.jit_compile, strategy))

    def step_fn(batch):
        grads, loss = forward_backward(batch)
        training.apply_gradients(optimizer, grads, variables, loss_scale)
        loss_sum.update_state(loss)

    return TrainState(optimizer, loss_scale, loss_sum, training.run_steps(strategy, step_fn))


def train(config: FinetuningConfig, model: FinetuningModel, tasks: Sequence,
          train_data: dict[str, np.ndarray], strategy: tf.distribute.Strategy, model_dir: str,
          seed: int) -> int:
    """Trains for num_train_epochs over `train_data`; returns the number of steps."""
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

    # As the original: the examples shuffled once, then repeated through a 100-example buffer.
    order = np.random.default_rng(seed).permutation(n)
    shuffled = {k: v[order] for k, v in train_data.items() if k != "eid"}
    per_replica = config.train_batch_size // replicas

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices(shuffled)
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.repeat().shuffle(100, seed=seed).batch(per_replica, drop_remainder=True)

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    checkpoint = training.checkpoint(model, optimizer=state.optimizer)
    manager = tf.train.CheckpointManager(checkpoint, model_dir, max_to_keep=1,
                                         step_counter=state.optimizer.iterations)
    logger = training.ProgressLogger(model_dir, num_steps, 0, config.train_batch_size)
    step, log_every = 0, min(config.log_steps, config.iterations_per_loop)
    start = time.time()
    while step < num_steps:
        state.loop(iterator,
                   tf.constant(min(num_steps, (step // log_every + 1) * log_every) - step))
        new_step = int(state.optimizer.iterations.numpy())
        per_example = float(state.loss_sum.result().numpy()) / (
            (new_step - step) * config.train_batch_size)
        state.loss_sum.reset_state()
        logger.log(new_step, {"loss": per_example,
                              "learning_rate": float(state.optimizer.learning_rate.numpy())},
                   ("loss", "learning_rate"))
        step = new_step
        if step % config.save_checkpoints_steps == 0 or step == num_steps:
            manager.save(checkpoint_number=step)
    print(f"trained {num_steps} steps in {training.format_duration(time.time() - start)}",
          flush=True)
    return num_steps


def run_head(model: FinetuningModel, task, data: dict[str, np.ndarray],
             batch_size: int) -> dict[str, np.ndarray] | np.ndarray:
    """The task head's outputs for every row, in batches of batch_size (the last one padded,
    so every shape is static)."""
    n = len(data["task_id"])
    padded = math.ceil(n / batch_size) * batch_size
    inputs = {k: np.pad(data[k], [(0, padded - n), (0, 0)]) for k in INPUTS}
    head = tf.function(lambda x: model(x, training=False)[task.name])
    batches = [head({k: v[i:i + batch_size] for k, v in inputs.items()})
               for i in range(0, padded, batch_size)]
    if isinstance(batches[0], dict):
        return {k: np.concatenate([b[k].numpy() for b in batches])[:n] for k in batches[0]}
    return np.concatenate([b.numpy() for b in batches])[:n]


def predict(model: FinetuningModel, task: glue.GlueTask, data: dict[str, np.ndarray],
            batch_size: int) -> np.ndarray:
    """Predicted label ids (classification) or scaled scores (regression) for every row."""
    outputs = run_head(model, task, data, batch_size)
    return outputs[:, 0] if task.is_regression else outputs.argmax(-1)


def squad_results(model: FinetuningModel, task: SquadTask, data: dict[str, np.ndarray],
                  batch_size: int) -> list[squad.RawResult]:
    """One squad.RawResult per feature row."""
    outputs = run_head(model, task, data, batch_size)
    fields = [f.name for f in dataclasses.fields(squad.RawResult)]
    return [squad.RawResult(**{k: outputs[k][i] for k in fields if k in outputs})
            for i in range(len(data["task_id"]))]


def make_tokenizer(config: FinetuningConfig) -> WordPieceTokenizer:
    if not tf.io.gfile.exists(config.vocab_file):
        raise FileNotFoundError(f"vocab file {config.vocab_file} not found: put the model's "
                                "vocab.txt in DATA_DIR/models/<model_name>/ or DATA_DIR/")
    return WordPieceTokenizer(config.vocab_file, do_lower_case=config.do_lower_case)


@dataclasses.dataclass
class SplitData:
    """One split of one task, featurized: the model's input rows plus what scoring needs."""
    task: glue.GlueTask | SquadTask
    split: str
    arrays: dict[str, np.ndarray]
    examples: list  # glue.Example or squad.QAExample
    features: list | None = None  # SQuAD: the windows behind the rows
    path: str | None = None  # SQuAD: the json file, for the official scorer


def load_split(config: FinetuningConfig, tasks: Sequence, task, split: str,
               tokenizer: WordPieceTokenizer) -> SplitData:
    """Reads and featurizes one split: GLUE from its TSVs (or tfds), SQuAD from
    finetuning_data/<task>/<split>.json."""
    task_id = list(tasks).index(task)
    if isinstance(task, SquadTask):
        path = os.path.join(config.raw_data_dir(task.name), f"{split}.json")
        if config.data_source == "tfds":  # converted to the official json, next to the model
            path = squad.tfds_to_json(
                "squad/v2.0" if task.version_2 else "squad/v1.1",
                {"train": "train", "dev": "validation"}[split], config.tfds_data_dir,
                os.path.join(config.pretrained_model_dir, "finetuning_data_tfds", task.name,
                             f"{split}.json"))
        training_split = split == "train"
        examples = squad.read_squad(path, training_split, task.version_2)
        features = squad.featurize(examples, tokenizer, config.max_seq_length, config.doc_stride,
                                   config.max_query_length, training_split)
        return SplitData(task, split, featurize_squad(task_id, features), examples, features,
                         path)
    if config.data_source == "tfds":
        examples = glue.read_tfds(task, split, config.tfds_data_dir, config.double_unordered)
    else:
        examples = task.read(config.raw_data_dir(task.name), split, config.double_unordered)
    if config.log_examples and examples:
        print(f"{task.name} {split}: {len(examples)} examples, e.g. {examples[0]}", flush=True)
    return SplitData(task, split, featurize(task, task_id, examples, tokenizer,
                                            config.max_seq_length), examples)


def dev_splits(task) -> list[str]:
    return ["dev"] if isinstance(task, SquadTask) else task.dev_splits()


def test_splits(config: FinetuningConfig, task) -> list[str]:
    """GLUE's test splits; SQuAD's only when test.json is there (the official test set is
    hidden)."""
    if isinstance(task, SquadTask):
        path = os.path.join(config.raw_data_dir(task.name), "test.json")
        return ["test"] if config.data_source == "files" and tf.io.gfile.exists(path) else []
    return task.test_splits()


def squad_predictions(config: FinetuningConfig, model: FinetuningModel, data: SplitData,
                      tokenizer: WordPieceTokenizer):
    """(predictions, null odds, n-best) of a SQuAD split, by the original's post-processing."""
    results = squad_results(model, data.task, data.arrays, config.eval_batch_size)
    return squad.postprocess(data.examples, data.features, results, config.n_best_size,
                             config.max_answer_length, config.joint_prediction,
                             config.answerable_classifier, data.task.version_2,
                             tokenizer=tokenizer)


def evaluate(config: FinetuningConfig, model: FinetuningModel, data: SplitData,
             tokenizer: WordPieceTokenizer, trial: int) -> dict[str, float]:
    """The split's metrics; SQuAD's predictions and null odds are also written, as the
    original's qa_preds_file / qa_na_file, to results/<tasks>_qa/<task>_<split>_<trial>/."""
    task = data.task
    if isinstance(task, SquadTask):
        predictions, null_odds, nbest = squad_predictions(config, model, data, tokenizer)
        squad.write_predictions(
            os.path.join(config.results_dir, f"{config.task_string}_qa",
                         f"{task.name}_{data.split}_{trial}"), predictions,
            null_odds if task.version_2 else None, nbest)
        return squad.evaluate(data.path, predictions, null_odds, task.version_2,
                              na_threshold=config.qa_na_threshold)
    labels = data.arrays["label"]
    predictions = predict(model, task, data.arrays, config.eval_batch_size)
    return task.score(labels if task.is_regression else labels.astype(int), predictions)


def write_test_outputs(config: FinetuningConfig, model: FinetuningModel, data: SplitData,
                       tokenizer: WordPieceTokenizer, directory: str) -> str:
    """GLUE: the leaderboard TSV (e.g. MNLI-m.tsv). SQuAD: <task>_predictions.json with ""
    where the null odds exceed qa_na_threshold (as the original) and <task>_null_odds.json.
    Returns what was written."""
    task = data.task
    if isinstance(task, SquadTask):
        predictions, null_odds, _ = squad_predictions(config, model, data, tokenizer)
        if task.version_2:
            predictions = squad.apply_na_threshold(predictions, null_odds,
                                                   config.qa_na_threshold)
        out = os.path.join(directory, task.name)
        squad.write_predictions(out, predictions, null_odds if task.version_2 else None)
        return out
    predictions = predict(model, task, data.arrays, config.predict_batch_size)
    path = os.path.join(directory, task.submission_name(data.split))
    task.write_submission(path, data.arrays["eid"].tolist(), predictions.tolist())
    return path


def results_path(config: FinetuningConfig, extension: str) -> str:
    return os.path.join(config.results_dir, f"{config.task_string}_results.{extension}")
