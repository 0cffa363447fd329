"""experiments/checkpoint_eval.py: a saved pretraining run is evaluated by run_pretraining.py's
do_eval with the run's own hparams, and one record of its metrics is appended."""

import sys

import pytest

from conftest import REPO, save_pretraining_run, tiny_config

sys.path.insert(0, str(REPO / "experiments"))
import checkpoint_eval  # noqa: E402
import records  # noqa: E402


def test_a_saved_run_is_evaluated_with_its_own_hparams_and_one_record_appended(data_dir,
                                                                               tmp_path):
    save_pretraining_run(data_dir, "tiny_atm", tiny_config(data_dir, objective="all_tokens_mlm",
                                                           eval_batch_size=4), step=7)
    run = data_dir / "models" / "tiny_atm"
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    results = tmp_path / "eval.jsonl"
    checkpoint_eval.main(["--data_dir", str(data_dir), "--model_name", "tiny_atm",
                          "--num_eval_steps", "3", "--results", str(results)])
    record, = records.read(str(results))
    # Nothing but do_eval and the step count was given: the objective, its metrics and the
    # batch size are the saved run's.
    assert record["model"] == "tiny_atm" and record["step"] == 7
    assert record["objective"] == record["objective_hparam"] == "all_tokens_mlm"
    assert record["eval_batch_size"] == 4 and record["auc_num_thresholds"] == 200
    assert record["metrics"]["num_examples"] == 12
    assert 0 <= record["metrics"]["all_tokens_mlm_softmax_fake_accuracy"] <= 1
    assert record["eval_tfrecords"] == "pretrain_tfrecords/pretrain_data.tfrecord*"
    assert record["wall_seconds"] > 0 and record["cpu_seconds"] > 0
    # The run's directory is as it was, but for the log beside it: its results went to a
    # scratch file, and do_eval rewrote no config and touched no checkpoint.
    after = {p.name: p.read_bytes() for p in run.iterdir()}
    assert "eval.log" in after
    del after["eval.log"]
    assert after == before


def test_files_shorter_than_a_batch_are_an_error_not_an_empty_record(data_dir, tmp_path):
    save_pretraining_run(data_dir, "tiny", tiny_config(data_dir, eval_batch_size=128), step=3)
    results = tmp_path / "eval.jsonl"
    with pytest.raises(SystemExit, match="tiny: do_eval read no example"):
        checkpoint_eval.main(["--data_dir", str(data_dir), "--model_name", "tiny",
                              "--num_eval_steps", "2", "--results", str(results)])
    assert not results.exists()


def test_the_log_names_the_evaluated_step_or_the_run_failed():
    assert checkpoint_eval.evaluated_step(
        "restored step 9 from d/ckpt-9\nevaluating d/ckpt-9 (step 9) on up to 3 batches", "x") == 9
    assert checkpoint_eval.evaluated_step(  # a path with a space
        "evaluating /my runs/ckpt-4 (step 4) on up to 3 batches of 8 examples", "x") == 4
    with pytest.raises(RuntimeError, match="x.log names no evaluated checkpoint"):
        checkpoint_eval.evaluated_step("training ...", "x.log")


def test_flags_are_checked_before_anything_runs(data_dir, capsys):
    for argv, named in ((["--model_name", "absent"], "absent holds no pretraining run"),
                        (["--model_name", "absent", "--num_eval_steps", "0"],
                         "--num_eval_steps must be at least 1")):
        with pytest.raises(SystemExit):
            checkpoint_eval.parse_args(["--data_dir", str(data_dir), "--results", "r.jsonl",
                                        *argv])
        assert named in capsys.readouterr().err


def test_docstring_examples():
    import doctest

    result = doctest.testmod(checkpoint_eval)
    assert result.attempted > 0 and result.failed == 0
