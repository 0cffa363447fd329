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

    # Every trainable variable is in one group; the generator's own variables get no gradient
    # from the objective's loss and the discriminator's own none from the generator's.
    from electra_tf import data, pretraining, resume
    special = pretraining.SpecialIds.from_vocab(pretraining.load_vocab(config.vocab_file))
    state = pretraining.create_state(config, special, tf.distribute.get_strategy())
    assert sum(record["sizes"].values()) == sum(
        int(np.prod(v.shape)) for v in state.model.trainable_variables)
    assert all(record["sizes"][g] > 0 for g in gradient_split.GROUPS)
    for batch in record["batches"]:
        assert batch["generator"]["objective"] == 0 and batch["generator"]["gen"] > 0
        assert batch["discriminator"]["gen"] == 0 and batch["discriminator"]["objective"] > 0
        assert batch["shared"]["gen"] > 0 and batch["shared"]["objective"] > 0

    # A fresh run's second moments are 0, below epsilon, except the variable set to 1.
    adam = record["adam_below_epsilon"]
    assert adam["generator"] == pytest.approx(1 - first["size"] / record["sizes"]["generator"])
    assert adam["shared"] == adam["discriminator"] == 1.0
    for weight in ("1.0", "50.0"):
        assert all(0 <= share <= 1 for share in record["below_epsilon"][weight].values())
    # The weight scales only the objective's part of the shared tables' gradient.
    at_1, at_50 = (gradient_split.summary(record, w) for w in (1.0, 50.0))
    assert at_50["shared_objective_over_generator"] == pytest.approx(
        50 * at_1["shared_objective_over_generator"])
    assert at_50["global_norm"] > at_1["global_norm"]

    # The split adds up: at the run's weight, the groups' norms give the global norm of the
    # gradient of the run's loss as the training step takes it, on the same first batch from
    # the same restored state (masking, sampling and dropout streams included).
    resume.Checkpointer(state.checkpoint(), config.model_dir, state.optimizer.iterations, None,
                        writable=False)
    files = data.check_files(config.eval_tfrecords, config.max_seq_length)
    features = next(iter(data.pretraining_dataset(files, config.train_batch_size,
                                                  config.max_seq_length, is_training=False)))

    with tf.GradientTape() as tape:
        loss = state.model(features, training=True)["loss"]
    direct = float(tf.sqrt(tf.add_n([
        tf.reduce_sum(tf.square(tf.convert_to_tensor(g)))
        for g in tape.gradient(loss, state.model.trainable_variables) if g is not None])))
    norms = gradient_split.weighted_norms(record["batches"][0], 1.0, 50.0)
    assert sum(n * n for n in norms.values()) ** 0.5 == pytest.approx(direct, rel=1e-4)


def test_one_loss_is_refused(data_dir, tmp_path):
    save_pretraining_run(data_dir, "bert", tiny_config(data_dir, objective="mlm"), step=1)
    with pytest.raises(SystemExit, match="bert: objective 'mlm' trains one network"):
        gradient_split.main(["--data_dir", str(data_dir), "--model_name", "bert",
                             "--results", str(tmp_path / "g.jsonl")])
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
