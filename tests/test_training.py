"""training.train, the loop pretraining and fine-tuning share, on a toy regression: hooks at
multiples, progress lines by the clock, a signal's checkpoint and an exact resume, divergence;
apply_gradients' skipped steps; fine-tuning's fractional warmup."""

import os
import re
import signal
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf import (distribution, host_calls, optimization, preemption, progress, resume,
                        training)


class ToyState:
    """A linear regression with dropout, in the shape train() expects."""

    def __init__(self, seed: int = 0):
        keras.utils.set_random_seed(seed)
        inputs = keras.Input((4,))
        dropped = keras.layers.Dropout(0.3, name="dropout")(inputs)
        self.model = keras.Model(inputs, keras.layers.Dense(1, name="dense")(dropped))
        self.optimizer = optimization.create_optimizer(0.05, 12, 2)
        self.optimizer.build(self.model.trainable_variables)
        self.loss = keras.metrics.Mean(name="loss")
        self.grad_norm = keras.metrics.Mean(name="grad_norm")
        self.metrics = self

    def results(self):
        return {"loss": float(self.loss.result()), "grad_norm": float(self.grad_norm.result())}

    def reset(self):
        self.loss.reset_state()
        self.grad_norm.reset_state()

    def step_fn(self, batch):
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(batch["x"], training=True)[:, 0] -
                                            batch["y"]))
        norm = distribution.apply_gradients(self.optimizer, tape.gradient(loss, variables),
                                            variables)
        self.loss.update_state(loss)
        self.grad_norm.update_state(norm)


def _make_dataset(nan_from: int | None = None):
    def make(batch_size, context, start_step):
        x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
        y = x @ np.array([1.0, -2.0, 0.5, 3.0], "float32")
        if nan_from is not None:
            x[nan_from * batch_size:] = np.nan
        ds = tf.data.Dataset.from_tensor_slices({"x": x, "y": y})
        if nan_from is None:
            ds = ds.repeat().shuffle(16, seed=1 + start_step)
        return ds.batch(batch_size, drop_remainder=True)
    return make


def _run(model_dir, hooks=(), nan_from=None, **loop):
    state = ToyState()
    checkpointer = resume.Checkpointer(
        resume.checkpoint(state.model, optimizer=state.optimizer), str(model_dir),
        state.optimizer.iterations, max_to_keep=3,
        guard_variables=state.model.trainable_variables)
    strategy = tf.distribute.get_strategy()
    config = training.LoopConfig(**{
        "model_dir": str(model_dir), "num_steps": 12, "global_batch_size": 4,
        "iterations_per_loop": 100, "log_steps": 6, "save_steps": 5, **loop})
    results = training.train(strategy, state, state.step_fn,
                             host_calls.Batches(strategy, _make_dataset(nan_from), 4), checkpointer,
                             config, hooks)
    return state, results


def _weights(state):
    return [v.numpy() for v in state.model.weights + state.optimizer.variables]


def test_hooks_fire_at_multiples_and_lines_come_by_the_clock(tmp_path, capsys):
    fired = []
    hooks = [training.Hook("probe", 4, lambda step, state: fired.append(step) or
                           {"probe_accuracy": 0.5, "note": "**text**"}),
             training.Hook("final", 0, lambda step, state: fired.append(-step), at_end=True)]
    state, results = _run(tmp_path, hooks, log_seconds=1e-4)
    assert fired == [4, 8, 12, -12]
    out = capsys.readouterr().out
    assert "step 4 probe: probe_accuracy 0.5" in out
    assert re.search(r"^step 3/12 \(25.0%\)", out, re.M)  # a line by the clock
    assert set(results) >= {"loss", "grad_norm", "learning_rate", "skipped_steps"}
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.index")) == [
        "ckpt-10.index", "ckpt-12.index", "ckpt-5.index"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_checkpoints_the_step_and_resuming_equals_the_whole_run(tmp_path, signum):
    whole, _ = _run(tmp_path / "whole")
    sent = []

    def send(step, state):
        if not sent:
            sent.append(step)
            os.kill(os.getpid(), signum)
            time.sleep(0.5)  # the loop's watcher thread notes it meanwhile

    with pytest.raises(preemption.Preempted) as stopped:
        _run(tmp_path / "parts", [training.Hook("signal", 3, send)])
    assert stopped.value.exit_code == 128 + signum
    step = int(re.search(r"at step (\d+): checkpoint", str(stopped.value)).group(1))
    assert 3 <= step < 12 and (tmp_path / "parts" / f"ckpt-{step}.index").exists()
    assert signal.getsignal(signum) is not None  # the loop's handlers are gone again
    resumed, _ = _run(tmp_path / "parts")
    for a, b in zip(_weights(whole), _weights(resumed)):
        np.testing.assert_array_equal(a, b)


def test_divergence_stops_without_saving_and_skips_never_reach_the_weights(tmp_path, capsys):
    with pytest.raises(training.Diverged, match="3 steps in a row had a non-finite loss or "
                       r"gradient .* after step 7; the newest checkpoint, \S+ckpt-5, is from "
                       "before and holds finite weights"):
        _run(tmp_path, nan_from=7, nonfinite_patience=3)
    assert "skipped 3 non-finite steps" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.index")) == ["ckpt-5.index"]


def test_apply_gradients_skips_a_non_finite_step():
    var = keras.Variable(np.ones(2, np.float32), name="kernel")
    optimizer = optimization.AdamWeightDecay(learning_rate=0.1)
    optimizer.build([var])
    norm = distribution.apply_gradients(optimizer, [tf.constant([np.nan, 1.0])], [var])
    assert np.isnan(float(norm)) and int(optimizer.iterations) == 0
    np.testing.assert_array_equal(var.numpy(), [1.0, 1.0])
    distribution.apply_gradients(optimizer, [tf.constant([1.0, 1.0])], [var])
    assert int(optimizer.iterations) == 1 and (var.numpy() < 1.0).all()


def test_the_host_loop_traces_its_step_as_written():
    """AutoGraph converts run_steps' loop but not the step it runs (the steps branch with
    tf.cond; converting them would only add tracing time): a Python `if` on a tensor in a step
    is an error at tracing, not a silently converted tf.cond."""
    total = tf.Variable(0.0)

    def step(batch):
        if tf.reduce_sum(batch) > 0:
            total.assign_add(1.0)

    strategy = tf.distribute.get_strategy()
    data = tf.data.Dataset.from_tensor_slices(tf.ones([4, 2])).batch(2)
    loop = host_calls.run_steps(strategy, step)
    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
        loop(iter(data), tf.constant(2))
    loop = host_calls.run_steps(strategy, lambda batch: total.assign_add(tf.reduce_sum(batch)))
    assert int(loop(iter(data), tf.constant(5))) == 2 and float(total) == 8.0


def test_finetuning_warmup_keeps_the_fraction_of_a_step():
    """5 steps x warmup_proportion 0.1 warm up over 0.5 steps, as the original's
    `num_train_steps * warmup_proportion`: lr 0 at step 0, then the decayed full rate (a
    truncated warmup of 0 steps would train at the full rate at step 0)."""
    from electra_tf.finetuning import trainer
    from electra_tf.finetuning.config import from_hparams

    config = from_hparams("tiny", "/nonexistent", {
        "model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 1,
                                   "num_attention_heads": 2, "intermediate_size": 64},
        "embedding_size": 16, "task_names": ["sst"], "learning_rate": 1e-3, "vocab_size": 100,
        "layerwise_lr_decay": 0.0})
    strategy = tf.distribute.get_strategy()
    tasks = trainer.make_tasks(config)
    state = trainer.create_train_state(config, trainer.build_model(config, tasks), tasks,
                                       strategy, num_steps=5)
    schedule = state.optimizer.get_config()["learning_rate"]["config"]
    assert schedule["num_warmup_steps"] == pytest.approx(0.5)
    assert float(state.optimizer.learning_rate) == 0.0
    state.optimizer.iterations.assign(1)
    assert float(state.optimizer.learning_rate) == pytest.approx(1e-3 * (1 - 1 / 5))


def test_what_the_progress_logger_writes_is_read_back(tmp_path, capsys):
    logger = progress.ProgressLogger(str(tmp_path), total_steps=4, start_step=0,
                                     examples_per_step=8)
    logger.log(2, {"loss": 3.5}, console_keys=("loss",))
    logger.scalars(4, {"loss": 2.0})
    logger.scalars(4, {"loss": 1.5})  # a step written twice keeps its last value
    logger.note(4, "generator_too_strong: replaced_fraction 0.1")
    scalars, texts = progress.read_events(str(tmp_path))
    assert scalars["loss"] == {2: 3.5, 4: 1.5}
    assert set(scalars) == {"loss", "examples_per_second", "steps_per_second"}
    assert texts == {"health": {4: "generator_too_strong: replaced_fraction 0.1"}}
    assert "step 2/4 (50.0%)" in capsys.readouterr().out
