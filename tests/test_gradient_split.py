"""experiments/gradient_split.py: the two losses' gradients are taken apart on a saved run's
checkpoint, each group of variables gets only the gradients that can reach it, the split
adds up to the training step's gradient, and Adam's second moment is read from the
checkpoint."""

import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, save_pretraining_run, tiny_config

sys.path.insert(0, str(REPO / "experiments"))
import gradient_split  # noqa: E402
import records  # noqa: E402


def _moments_of_the_first_generator_variable_one(state):
    """Sets Adam's second moment of the generator's first own variable to 1 (above epsilon)."""
    variable = state.model.generator_variables()[0]
    state.optimizer.second_moment(variable).assign(tf.ones(variable.shape))
    return int(np.prod(variable.shape))


def test_the_split_of_a_saved_electra_run_adds_up_to_its_training_gradient(data_dir, tmp_path):
    # ELECTRA: disc_weight 50, tied embeddings; the reference layers compile nothing.
    config = tiny_config(data_dir, kernels="reference")
    first = {}
    save_pretraining_run(data_dir, "tiny", config, step=5, edit=lambda state: first.update(
        size=_moments_of_the_first_generator_variable_one(state)))
    results = tmp_path / "gradients.jsonl"
    gradient_split.main(["--data_dir", str(data_dir), "--model_name", "tiny", "--num_batches",
                         "2", "--disc_weights", "1,50", "--recipe", "electra_seed2",
                         "--results", str(results)])
    record, = records.read(str(results))
    assert record["step"] == 5 and record["disc_weight"] == 50 and len(record["batches"]) == 2
    assert record["objective"] == "electra_seed2" and record["objective_hparam"] == "electra"

    # The shared group is what both networks use, named from both sides (not the rest of the
    # two own groups); the generator's own variables get no gradient from the objective's
    # loss and the discriminator's own none from the generator's.
    from electra_tf import data, distribution, pretraining, resume
    special = pretraining.SpecialIds.from_vocab(pretraining.load_vocab(config.vocab_file))
    states = {weight: pretraining.create_state(
        tiny_config(data_dir, kernels="reference", disc_weight=weight), special,
        tf.distribute.get_strategy()) for weight in (1.0, 50.0)}
    model = states[50.0].model
    of_generator = {id(v) for layer in model.generator_part.layers
                    for v in layer.trainable_variables}
    of_objective = {id(v) for layer in model.objective.layers for v in layer.trainable_variables}
    variables = model.trainable_variables
    group_of = ["shared" if id(v) in of_generator and id(v) in of_objective
                else "generator" if id(v) in of_generator else "discriminator" for v in variables]
    sizes = {group: 0 for group in gradient_split.GROUPS}
    for group, v in zip(group_of, variables):
        sizes[group] += int(np.prod(v.shape))
    assert record["sizes"] == sizes and all(size > 0 for size in sizes.values())
    for batch in record["batches"]:
        assert batch["generator"]["objective"] == 0 and batch["generator"]["gen"] > 0
        assert batch["discriminator"]["gen"] == 0 and batch["discriminator"]["objective"] > 0
        assert batch["shared"]["gen"] > 0 and batch["shared"]["objective"] > 0

    # A fresh run's second moments are 0, below epsilon, except the variable set to 1.
    adam = record["adam_below_epsilon"]
    assert adam["generator"] == pytest.approx(1 - first["size"] / record["sizes"]["generator"])
    assert adam["shared"] == adam["discriminator"] == 1.0
    # The weight scales only the objective's part of the shared tables' gradient.
    at_1, at_50 = (gradient_split.summary(record, w) for w in (1.0, 50.0))
    assert at_50["shared_objective_over_generator"] == pytest.approx(
        50 * at_1["shared_objective_over_generator"])

    # The split adds up: at each weight, the training step's own gradient (the run's state
    # built at that weight and restored from its checkpoint, masking, sampling and dropout
    # streams included) on the same batches has the record's global norm, and, clipped as the
    # training step clips it, the record's shares of entries below epsilon.
    files = data.check_files(config.eval_tfrecords, config.max_seq_length)
    for weight, weighted in states.items():
        resume.Checkpointer(weighted.checkpoint(), config.model_dir,
                            weighted.optimizer.iterations, None, writable=False)
        weighted_variables = weighted.model.trainable_variables
        squares = [np.zeros(v.shape) for v in weighted_variables]
        for batch, features in zip(record["batches"], data.pretraining_dataset(
                files, config.train_batch_size, config.max_seq_length, is_training=False)):
            with tf.GradientTape() as tape:
                loss = weighted.model(features, training=True)["loss"]
            grads = [tf.zeros(v.shape) if g is None else tf.convert_to_tensor(g) for g, v in
                     zip(tape.gradient(loss, weighted_variables), weighted_variables)]
            clipped, norm = tf.clip_by_global_norm(grads, distribution.CLIP_NORM)
            assert gradient_split.global_norm(batch, 1.0, weight) == pytest.approx(
                float(norm), rel=1e-4)
            for total, g in zip(squares, clipped):
                total += g.numpy().astype(np.float64) ** 2
        below = {group: 0 for group in gradient_split.GROUPS}
        for group, total in zip(group_of, squares):  # both states' variables in one order
            below[group] += int(np.sum(np.sqrt(total / len(record["batches"])) < 1e-6))
        for group, share in record["below_epsilon"][str(weight)].items():
            # float32 gradients taken whole against the split's float64 sum: an entry or two
            # at the threshold may fall either side.
            assert abs(share * sizes[group] - below[group]) <= 2, (weight, group)
            assert 0 < below[group] < sizes[group], (weight, group)  # not all or nothing


@pytest.mark.parametrize("hparams, named", [
    ({"objective": "mlm"}, "objective 'mlm' trains one network with one loss"),
    ({"uniform_generator": True}, "objective 'electra' trains one network"),
    ({"training_algorithm": "two_stage", "generator_hidden_size": 1.0},
     "training_algorithm 'two_stage' does not sum"),
    ({"precision": "mixed_bfloat16"},
     "precision 'mixed_bfloat16': only float32 runs are measured")],
    ids=["mlm", "uniform_generator", "two_stage", "mixed_bfloat16"])
def test_runs_without_two_summed_float32_losses_are_refused(data_dir, tmp_path, hparams, named):
    """Before any checkpoint is read: the run's saved config alone decides (an empty
    checkpoint file stands in for the run's, which is never opened)."""
    model_dir = data_dir / "models" / "run"
    model_dir.mkdir(parents=True)
    (model_dir / "pretrain_config.json").write_text(tiny_config(data_dir, **hparams).to_json())
    (model_dir / "ckpt-1.index").touch()  # a run's config is read once it has a checkpoint
    with pytest.raises(SystemExit, match=f"run: {named}"):
        gradient_split.main(["--data_dir", str(data_dir), "--model_name", "run",
                             "--results", str(tmp_path / "g.jsonl")])
    assert not (tmp_path / "g.jsonl").exists()


def test_fewer_batches_than_asked_is_an_error_before_any_gradient(data_dir, tmp_path, capsys):
    save_pretraining_run(data_dir, "tiny", tiny_config(data_dir), step=1)
    with pytest.raises(SystemExit, match="fewer than --num_batches 1000"):
        gradient_split.main(["--data_dir", str(data_dir), "--model_name", "tiny",
                             "--num_batches", "1000", "--results", str(tmp_path / "g.jsonl")])
    assert "batch 1/" not in capsys.readouterr().out  # no gradient was taken
    assert not (tmp_path / "g.jsonl").exists()


def test_flags_are_checked_before_anything_runs(data_dir, capsys):
    for argv, named in ((["--model_name", "absent"], "absent holds no pretraining run"),
                        (["--model_name", "x", "--model_dir", str(data_dir)],
                         "--model_dir: " + str(data_dir) + " holds no pretraining run"),
                        (["--model_name", "x", "--num_batches", "0"],
                         "--num_batches must be at least 1"),
                        (["--model_name", "x", "--disc_weights", "1,fifty"],
                         "--disc_weights: '1,fifty' is not a comma-separated list"),
                        (["--model_name", "x", "--disc_weights", "0"],
                         "--disc_weights must be positive")):
        with pytest.raises(SystemExit):
            gradient_split.parse_args(["--data_dir", str(data_dir), "--results", "r.jsonl",
                                       *argv])
        assert named in capsys.readouterr().err


def test_docstring_examples():
    import doctest

    result = doctest.testmod(gradient_split)
    assert result.attempted > 0 and result.failed == 0
