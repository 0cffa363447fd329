"""Pre-trains an ELECTRA model (the original's run_pretraining.py, on TF2 and Keras 3).

  python run_pretraining.py --data_dir DATA_DIR --model_name NAME [--hparams JSON_OR_FILE]

Reads DATA_DIR/pretrain_tfrecords/pretrain_data.tfrecord* and DATA_DIR/vocab.txt; writes
checkpoints, TensorBoard events, the resolved config and, at the end, the discriminator and
generator as .keras models into DATA_DIR/models/NAME/. Rerunning the same command resumes from
the latest checkpoint. `{"do_train": false, "do_eval": true}` evaluates the latest checkpoint and
writes DATA_DIR/models/NAME/results/unsup_results.txt.
"""

from __future__ import annotations

import json
import os
import pickle
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's C++ start-up chatter

from electra_tf import hardware  # noqa: E402  (first: decides oneDNN before TensorFlow loads)
from absl import app, flags, logging

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "Location of data files (TFRecords, vocab, models).")
flags.DEFINE_string("model_name", None, "The name of the model being pre-trained.")
flags.DEFINE_string("hparams", "{}", "JSON dict of hyperparameters, or a path to a .json file.")
flags.DEFINE_integer("num_cpu_devices", 0, "Split the host CPU into this many logical devices "
                     "(to try the mirrored strategy without GPUs).")
# The original's README spells the flags with dashes.
flags.DEFINE_alias("data-dir", "data_dir")
flags.DEFINE_alias("model-name", "model_name")


def _example_markdown(inv_vocab, out: dict, index: int) -> str:
    """One example as a Markdown table: token, masked input, generator sample, verdict."""
    length = int(sum(out["input_mask"][index]))
    has_disc = "disc_probs" in out
    rows = ["| pos | original | masked input | " +
            ("generator sample | replaced | p(replaced) |" if has_disc else "prediction |"),
            "|---|---|---|" + ("---|---|---|" if has_disc else "---|")]
    predictions = dict(zip(out["masked_lm_positions"][index].tolist(),
                           out["masked_lm_preds"][index].tolist()))
    for pos in range(length):
        original = inv_vocab.get(int(out["input_ids"][index][pos]), "?")
        masked = inv_vocab.get(int(out["masked_input_ids"][index][pos]), "?")
        row = f"| {pos} | {original} | {masked} |"
        if has_disc:
            sample = inv_vocab.get(int(out["fake_input_ids"][index][pos]), "?")
            label = int(out["disc_labels"][index][pos])
            verdict = float(out["disc_probs"][index][pos])
            row += f" {sample} | {'yes' if label else ''} | {verdict:.2f}"
            row += " (fake)" if verdict > 0.5 else ""
            row += " |"
        else:
            pred = predictions.get(pos)
            row += f" {inv_vocab.get(pred, '') if pred is not None and pos else ''} |"
        rows.append(row)
    return "\n".join(rows)


def train_or_eval(config) -> dict[str, float]:
    """Trains (do_train) or evaluates the latest checkpoint (do_eval); returns the metrics of
    the last logging interval or of the evaluation."""
    import tensorflow as tf

    from electra_tf import config as config_lib
    from electra_tf import data, pretraining, training

    vocab = pretraining.load_vocab(config.vocab_file)
    special = pretraining.SpecialIds.from_vocab(vocab, config.vocab_file)
    if len(vocab) > config.vocab_size:
        raise config_lib.ConfigError(
            f"hparam 'vocab_size' is {config.vocab_size} but {config.vocab_file} has "
            f"{len(vocab)} tokens; remove vocab_size to take it from the file")
    files = data.check_files(config.pretrain_tfrecords if config.do_train
                             else config.eval_tfrecords, config.max_seq_length)

    strategy = training.make_strategy(config.strategy, config.tpu_name, config.tpu_zone,
                                      config.gcp_project)
    replicas = strategy.num_replicas_in_sync
    batch_size = config.train_batch_size if config.do_train else config.eval_batch_size
    batch_key = "train_batch_size" if config.do_train else "eval_batch_size"
    if batch_size % replicas:
        raise config_lib.ConfigError(
            f"hparam {batch_key!r} = {batch_size} is not divisible by the {replicas} replicas "
            f"of strategy {config.strategy!r}")
    jit = training.use_xla(config.jit_compile, strategy)

    print("=" * 30 + " Config " + "=" * 30)
    print(config.to_json())
    print(hardware.banner(), flush=True)
    print(f"strategy {config.strategy} with {replicas} replica(s), precision {config.precision}"
          f", XLA {'on' if jit else 'off'}, {len(files)} input file(s)", flush=True)
    tf.io.gfile.makedirs(config.model_dir)
    saved_config = os.path.join(config.model_dir, "pretrain_config.json")
    if tf.train.latest_checkpoint(config.model_dir) and tf.io.gfile.exists(saved_config):
        with tf.io.gfile.GFile(saved_config) as f:
            config_lib.check_resumable(config, json.load(f), saved_config)
    if config.do_train:
        with tf.io.gfile.GFile(saved_config, "w") as f:
            f.write(config.to_json())

    state = pretraining.create_state(config, special, strategy)
    model, optimizer, metrics = state.model, state.optimizer, state.metrics
    checkpoint = state.checkpoint()
    manager = tf.train.CheckpointManager(
        checkpoint, config.model_dir, max_to_keep=config.keep_checkpoint_max or None,
        step_counter=optimizer.iterations)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
        print(f"restored step {int(optimizer.iterations.numpy())} from {manager.latest_checkpoint}",
              flush=True)
    elif config.do_eval:
        raise FileNotFoundError(f"do_eval needs a checkpoint in {config.model_dir}; train first "
                                "or point model_dir at a pretraining run")
    elif config.init_checkpoint:
        for line in pretraining.initialize_from(model, config.init_checkpoint):
            print(line, flush=True)

    per_replica_batch = batch_size // replicas
    dataset = strategy.distribute_datasets_from_function(
        lambda ctx: data.pretraining_dataset(files, per_replica_batch, config.max_seq_length,
                                             is_training=config.do_train, input_context=ctx,
                                             seed=config.seed))
    iterator = iter(dataset)

    if config.do_eval:
        return _evaluate(config, strategy, model, metrics, iterator)

    train_step = state.make_train_step(replicas, jit)
    train_loop = training.run_steps(strategy, train_step)
    inspect = tf.function(lambda batch: strategy.run(
        lambda features: model(features, training=False), args=(batch,)))
    inv_vocab = {i: t for t, i in vocab.items()}

    step = int(optimizer.iterations.numpy())
    logger = training.ProgressLogger(config.model_dir, config.num_train_steps, step,
                                     config.train_batch_size)
    log_every = config.log_steps or config.iterations_per_loop
    console = ("loss", "masked_lm_loss", "disc_loss", "masked_lm_accuracy", "disc_auc",
               "learning_rate")
    results: dict[str, float] = {}
    next_text = step + 1 if config.text_summary_steps else None
    start = time.time()
    while step < config.num_train_steps:
        boundaries = [config.num_train_steps, (step // log_every + 1) * log_every,
                      (step // config.save_checkpoints_steps + 1) * config.save_checkpoints_steps,
                      step + config.iterations_per_loop]
        train_loop(iterator, tf.constant(min(boundaries) - step))
        step = int(optimizer.iterations.numpy())
        if step % log_every == 0 or step == config.num_train_steps:
            results = metrics.results()
            results["learning_rate"] = float(optimizer.learning_rate.numpy())
            if state.loss_scale is not None:
                results["loss_scale"] = float(state.loss_scale.scale.numpy())
            logger.log(step, results, console)
            metrics.reset()
        if step % config.save_checkpoints_steps == 0 or step == config.num_train_steps:
            manager.save(checkpoint_number=step)
        if next_text is not None and step >= next_text:
            out = strategy.experimental_local_results(inspect(next(iterator)))[0]
            out = {k: v.numpy() for k, v in out.items()}
            logger.text(step, "example", _example_markdown(inv_vocab, out, 0))
            next_text = step + config.text_summary_steps
    print(f"trained to step {step} in {training.format_duration(time.time() - start)}; "
          f"checkpoints in {config.model_dir}", flush=True)
    _export(config, model)
    return results


def _evaluate(config, strategy, model, metrics, iterator) -> dict[str, float]:
    import tensorflow as tf

    from electra_tf import training

    def eval_step(features):
        metrics.update(model(features, training=False))

    training.run_steps(strategy, eval_step)(iterator, tf.constant(config.num_eval_steps))
    results = metrics.results()
    results.pop("grad_norm", None)
    tf.io.gfile.makedirs(os.path.dirname(config.results_txt))
    with tf.io.gfile.GFile(config.results_txt, "w") as f:
        for key in sorted(results):
            f.write(f"{key} = {results[key]}\n")
    with tf.io.gfile.GFile(config.results_pkl, "wb") as f:
        pickle.dump(results, f)
    print("=" * 30 + " Evaluation " + "=" * 30)
    for key in sorted(results):
        print(f"  {key} = {results[key]:.4f}")
    print(f"results written to {config.results_txt}", flush=True)
    return results


def _export(config, model) -> None:
    """The discriminator and generator as standalone .keras models for fine-tuning, with the
    tokenizer beside them."""
    from electra_tf import pretraining

    for path in pretraining.export(model, config.model_dir, config.vocab_file,
                                   config.do_lower_case):
        print(f"exported {path}", flush=True)


def main(argv) -> None:
    logging.set_verbosity(logging.WARNING)
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    from electra_tf import config as config_lib
    from electra_tf import data, training

    try:
        config = config_lib.from_hparams(FLAGS.model_name, FLAGS.data_dir, FLAGS.hparams)
        training.split_cpu(FLAGS.num_cpu_devices)
        train_or_eval(config)
    except (config_lib.ConfigError, data.InputError, FileNotFoundError) as e:
        raise app.UsageError(str(e)) from None


if __name__ == "__main__":
    app.run(main)
