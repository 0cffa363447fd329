"""Pre-trains an ELECTRA model (the original's run_pretraining.py, on TF2 and Keras 3).

  python run_pretraining.py --data_dir DATA_DIR --model_name NAME [--hparams JSON_OR_FILE]

Reads DATA_DIR/pretrain_tfrecords/pretrain_data.tfrecord* and DATA_DIR/vocab.txt; writes
checkpoints, TensorBoard events, the resolved config and, at the end, the discriminator and
generator as .keras models into DATA_DIR/models/NAME/. Rerunning the same command resumes from
the latest checkpoint; SIGTERM or Ctrl-C writes one first. `{"do_train": false, "do_eval":
true}` evaluates the latest checkpoint and writes DATA_DIR/models/NAME/results/unsup_results.txt.
"""

from __future__ import annotations

import json
import os
import pickle

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's C++ start-up chatter

from absl import flags  # noqa: E402

import command_line  # noqa: E402  (electra_tf, and TensorFlow, load after the flags are parsed)

FLAGS = flags.FLAGS
command_line.define_run_flags("Location of data files (TFRecords, vocab, models).",
                               "The name of the model being pre-trained.")

CONSOLE_KEYS = ("loss", "masked_lm_loss", "disc_loss", "masked_lm_accuracy", "disc_auc",
                "learning_rate")


def _example_markdown(inv_vocab, out: dict, index: int) -> str:
    """One example as a Markdown table: token, masked input, generator sample, verdict. A "|"
    token (BERT's vocabulary has one) is escaped so that it stays inside its cell."""
    inv_vocab = {i: token.replace("|", "\\|") for i, token in inv_vocab.items()}
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


def _text_sample(config, strategy, state, files: list[str], vocab: dict[str, int]):
    """The TensorBoard text sample (a Hook): the first example of the first input file through
    the model. It uses the training random stream and puts its state back, so that it never
    changes the training run."""
    import tensorflow as tf

    from electra_tf import data

    batch = next(iter(data.pretraining_dataset(files[:1], 1, config.max_seq_length,
                                               is_training=False)))
    inspect = tf.function(lambda features: strategy.run(
        lambda f: state.model(f, training=False), args=(features,)))
    inv_vocab = {i: t for t, i in vocab.items()}

    def sample(step, state) -> dict[str, str]:
        rng_state = tf.identity(state.rng.state)
        out = strategy.experimental_local_results(inspect(batch))[0]
        state.rng.state.assign(rng_state)
        return {"example": _example_markdown(inv_vocab, {k: v.numpy() for k, v in out.items()},
                                             0)}

    return sample


def _probe(config):
    """The linear probe (a Hook) of the discriminator on `probe_task`; the task is read now, so
    that a bad task directory fails before training. It runs the model without dropout and
    draws no random numbers, so it never changes the training run."""
    from electra_tf import probe, tokenization

    linear = probe.LinearProbe.from_directory(
        config.probe_task, tokenization.WordPieceTokenizer(config.vocab_file,
                                                           config.do_lower_case),
        config.max_seq_length, config.probe_examples)
    return lambda step, state: linear(state.model.encoder)


def _read_saved_config(path: str) -> dict | None:
    """pretrain_config.json of an earlier run; None (saying so) when it is damaged."""
    from electra_tf import files

    try:
        return files.read_json(path)
    except ValueError as e:
        print(f"{e}: the run's earlier hparams cannot be compared; it is rewritten from this "
              "run's", flush=True)
        return None


def _record_changes(config, saved: dict, step: int) -> None:
    """Logs the hparams a resumed run changes (e.g. a longer num_train_steps, a lower
    learning_rate) and appends them to hparam_changes.json. They are allowed, not refused:
    continuing longer or at a lower rate after a spike is how long runs are nursed; hparams
    that would not restore are refused earlier (config.check_resumable)."""
    import tensorflow as tf

    from electra_tf.files import write_atomically

    ours = json.loads(config.to_json())
    changed = {k: [saved.get(k), v] for k, v in ours.items() if saved.get(k, v) != v}
    if not changed:
        return
    path = os.path.join(config.model_dir, "hparam_changes.json")
    history = []
    if tf.io.gfile.exists(path):
        try:
            with tf.io.gfile.GFile(path) as f:
                history = json.load(f)
            if not isinstance(history, list):
                raise ValueError("not a list")
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
            damaged = f"{path}.damaged-at-step-{step}"
            tf.io.gfile.rename(path, damaged, overwrite=True)
            print(f"{path} is damaged ({e}): kept as {damaged}; a new history starts",
                  flush=True)
            history = []
    history.append({"step": step, "changed": changed})
    write_atomically(path, json.dumps(history, indent=2))
    print(f"resuming at step {step} with changed hparams: " +
          ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changed.items()) +
          f" (recorded in {path})", flush=True)


def train_or_eval(config, strategy) -> dict[str, float]:
    """Trains (do_train) or evaluates the latest checkpoint (do_eval); returns the metrics of
    the last logging interval or of the evaluation."""
    import tensorflow as tf

    from electra_tf import config as config_lib
    from electra_tf import (data, distribution, hardware, health, host_calls, pretraining, resume,
                            shared_hparams, training)
    from electra_tf.files import write_atomically
    from electra_tf.hparam_parsing import ConfigError

    shared_hparams.check_data_dir(config.data_dir, [config.vocab_file, config.pretrain_tfrecords])
    vocab = pretraining.load_vocab(config.vocab_file)
    special = pretraining.SpecialIds.from_vocab(vocab, config.vocab_file)
    if len(vocab) > config.vocab_size:
        raise ConfigError(
            f"hparam 'vocab_size' is {config.vocab_size} but {config.vocab_file} has "
            f"{len(vocab)} tokens; remove vocab_size to take it from the file")
    pattern = config.pretrain_tfrecords if config.do_train else config.eval_tfrecords
    files = data.check_files(pattern, config.max_seq_length)
    data.check_vocabulary(files, config.vocab_file)

    replicas = strategy.num_replicas_in_sync
    batch_size = config.train_batch_size if config.do_train else config.eval_batch_size
    batch_key = "train_batch_size" if config.do_train else "eval_batch_size"
    if batch_size % replicas:
        raise ConfigError(
            f"hparam {batch_key!r} = {batch_size} is not divisible by the {replicas} replicas "
            f"of strategy {config.strategy!r}")
    jit = distribution.use_xla(config.jit_compile, strategy)
    chief = distribution.is_chief(strategy)

    print(hardware.banner(), flush=True)
    print(f"strategy {config.strategy} with {replicas} replica(s), precision {config.precision}"
          f", XLA {'for the whole step' if jit else 'only for the small fused functions'}, "
          f"{len(files)} input file(s)", flush=True)
    saved_path = os.path.join(config.model_dir, "pretrain_config.json")
    saved = _read_saved_config(saved_path)
    if saved is not None and tf.io.gfile.glob(os.path.join(config.model_dir, "ckpt-*.index")):
        config_lib.check_resumable(config, saved, saved_path)

    state = pretraining.create_state(config, special, strategy)
    checkpointer = resume.Checkpointer(
        state.checkpoint(), config.model_dir, state.optimizer.iterations,
        config.keep_checkpoint_max, chief=chief, writable=config.do_train,
        guard_variables=state.model.trainable_variables)
    step = int(state.optimizer.iterations.numpy())
    if checkpointer.restored:
        print(f"restored step {step} from {checkpointer.restored}", flush=True)
    if config.do_eval:
        return _evaluate(config, strategy, state, checkpointer, files)
    if checkpointer.restored and saved is not None:
        config, notes = config_lib.as_started(config, saved, step)
        for line in notes:
            print(line, flush=True)
        _record_changes(config, saved, step)
    if not checkpointer.restored and config.init_checkpoint:
        for line in pretraining.initialize_from(
                state.model, config.init_checkpoint,
                state.optimizer if config.init_optimizer_state else None):
            print(line, flush=True)
        start = int(state.optimizer.iterations.numpy())
        if start >= config.num_train_steps:
            raise ConfigError(
                f"hparam 'num_train_steps' is {config.num_train_steps}, but init_checkpoint is "
                f"at step {start}: nothing would train. With init_optimizer_state the steps "
                f"count on from the checkpoint's, as in the original: {start + 10000} trains "
                "10,000 more")
    # Written once init_checkpoint is taken, so a run refused for it leaves no config behind.
    if chief:
        write_atomically(saved_path, config.to_json())
        print(f"config: {saved_path}", flush=True)

    input_ = host_calls.Batches(
        strategy, lambda batch, context, start: data.pretraining_dataset(
            files, batch, config.max_seq_length, input_context=context,
            seed=None if config.seed is None else config.seed + start),
        config.train_batch_size)
    hooks = [training.Hook("text sample", config.text_summary_steps,
                           _text_sample(config, strategy, state, files, vocab))]
    if config.probe_task:
        hooks.append(training.Hook("probe", config.probe_steps, _probe(config), at_end=True))
    log_steps = config.log_steps or config.iterations_per_loop
    # After the warmup and five logging intervals: a run's first noisy intervals never warn.
    health_start = max(config.num_warmup_steps, 5 * log_steps)
    if health_start >= config.num_train_steps:
        print(f"warning: the health monitor's model checks start at step {health_start}, after "
              f"the warmup (num_warmup_steps {config.num_warmup_steps}) and five logging "
              f"intervals, and this run ends at step {config.num_train_steps}: they never run"
              + (", and the learning rate never reaches learning_rate; set num_warmup_steps "
                 "to about 10% of num_train_steps"
                 if config.num_warmup_steps >= config.num_train_steps else ""), flush=True)
    monitor = health.pretraining_monitor(config.mask_prob, config.vocab_size, health_start,
                                         config.objective)
    loop = training.LoopConfig(
        model_dir=config.model_dir, num_steps=config.num_train_steps,
        global_batch_size=config.train_batch_size,
        iterations_per_loop=config.iterations_per_loop, log_steps=log_steps,
        save_steps=config.save_checkpoints_steps, log_seconds=config.log_seconds,
        nonfinite_patience=config.nonfinite_patience, console_keys=CONSOLE_KEYS,
        final_bytes=pretraining.export_size(state.model, config.vocab_file))
    try:
        results = training.train(strategy, state, state.make_train_step(replicas, jit), input_,
                                 checkpointer, loop, hooks, monitor)
    except training.InputDataError as e:
        bad = data.find_unreadable(files)
        if bad is None:
            raise
        raise training.InputDataError(f"{bad[0]} cannot be read ({bad[1]}): remove it from "
                                      f"the input or rebuild it. {e}") from None
    if chief:
        _export(config, state.model, checkpointer)
    return results


def _evaluate(config, strategy, state, checkpointer, files: list[str]) -> dict[str, float]:
    """The original's do_eval: the metrics of the restored checkpoint over num_eval_steps
    batches of eval_tfrecords (fewer when the files end first: they are read once)."""
    from electra_tf import data, distribution, host_calls, training
    from electra_tf.files import write_atomically

    if not checkpointer.restored:
        raise FileNotFoundError(f"do_eval needs a checkpoint in {config.model_dir}; train first "
                                "or point model_dir at a pretraining run")
    where = ("the training files: set eval_tfrecords to held-out TFRecords for a held-out "
             "evaluation" if config.eval_tfrecords == config.pretrain_tfrecords
             else "eval_tfrecords")
    print(f"evaluating {checkpointer.restored} (step {int(state.optimizer.iterations.numpy())})"
          f" on up to {config.num_eval_steps} batches of {config.eval_batch_size} examples from "
          f"{len(files)} file(s) matching {config.eval_tfrecords} ({where})", flush=True)

    def eval_step(features):
        state.metrics.update(state.model(features, training=False))

    input_ = host_calls.Batches(
        strategy, lambda batch, context, start: data.pretraining_dataset(
            files, batch, config.max_seq_length, is_training=False, input_context=context),
        config.eval_batch_size)
    batches = training.evaluate(strategy, eval_step, input_, config.num_eval_steps,
                                config.log_seconds)
    results = state.metrics.results()
    results.pop("grad_norm", None)
    results["num_examples"] = float(batches * config.eval_batch_size)
    if distribution.is_chief(strategy):
        write_atomically(config.results_txt, "".join(
            f"{key} = {results[key]}\n" for key in sorted(results)))
        write_atomically(config.results_pkl, pickle.dumps(results))
        config_path = os.path.join(os.path.dirname(config.results_txt), "eval_config.json")
        write_atomically(config_path, config.to_json())
        print(f"config: {config_path}", flush=True)
    print("=" * 30 + " Evaluation " + "=" * 30)
    for key in sorted(results):
        print(f"  {key} = {results[key]:.4f}")
    print(f"evaluated {batches * config.eval_batch_size} examples ({batches} batches); results "
          f"written to {config.results_txt}", flush=True)
    return results


def _export(config, model, checkpointer) -> None:
    """The discriminator and generator as standalone .keras models for fine-tuning, with the
    tokenizer beside them. Training is complete by now: a disk too full for them asks only for
    their space, and a rerun writes them."""
    from electra_tf import pretraining, resume

    checkpointer.check_space(saves=0, then=pretraining.export_size(model, config.vocab_file))
    with resume.writing(f"the exported models into {config.model_dir}",
                        f"; nothing half-written is left, and training is complete "
                        f"({checkpointer.latest}): free some space and rerun the same command, "
                        "which only writes the exports"):
        for path in pretraining.export(model, config.model_dir, config.vocab_file,
                                       config.do_lower_case):
            print(f"exported {path}", flush=True)


def main(argv) -> None:
    from electra_tf import cli, data
    from electra_tf import config as config_lib

    cli.run_training_command(argv, config_lib.from_hparams, train_or_eval, (data.InputError,))


if __name__ == "__main__":
    command_line.run(main, "docs/pretraining.md")
