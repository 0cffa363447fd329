"""experiments/trunk_pilot.py: the stability and learning rule on hand-made records, each
objective's choice, the report beside the ladder's own trunks, and its flags."""

import dataclasses
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "experiments"))
import records  # noqa: E402
import trunk_pilot  # noqa: E402


def _curve(model, objective, values, kind="pilot", jump_at=None):
    """A logged line every 50 steps; the gradient norm 1.0, or 30.0 at step `jump_at`."""
    return [{"objective": objective, "model": model, "kind": kind, "step": 50 * (i + 1),
             "pretrain_flops": 1e10 * (i + 1),
             "scalars": {**values, "grad_norm": 30.0 if 50 * (i + 1) == jump_at else 1.0}}
            for i in range(40)]


def _run(model, objective, learning_rate, warmup, kind="pilot", steps=2000, hidden=128,
         batch=32, finished=True):
    return {"objective": objective, "model": model, "kind": kind, "pretrain_steps": steps,
            "finished": finished, "hparams": {"learning_rate": learning_rate,
                                          "num_warmup_steps": warmup, "train_batch_size": batch,
                                          "model_hparam_overrides": {"hidden_size": hidden}}}


def test_a_jump_is_what_the_health_monitor_warns_at():
    assert trunk_pilot.warnings(_curve("m", "mlm", {}, jump_at=1500)) == 1
    assert trunk_pilot.warnings(_curve("m", "mlm", {})) == 0


def test_each_objective_takes_its_stable_setting_that_learns_best():
    pretrain = [_run("e3", "electra", 3e-4, 500), _run("e1", "electra", 1e-4, 500),
                _run("e9", "electra", 1e-4, 100),
                _run("b3", "mlm", 3e-4, 500), _run("b1", "mlm", 1e-4, 500),
                _run("b9", "mlm", 1e-3, 95)]
    curves = (_curve("e3", "electra", {"masked_lm_loss": 4.0, "masked_lm_accuracy": 0.3},
                     jump_at=1000)  # unstable
              # ELECTRA is judged by its generator: a high detection AUC does not count.
              + _curve("e1", "electra", {"masked_lm_loss": 5.0, "masked_lm_accuracy": 0.22,
                                         "disc_auc": 0.5})
              + _curve("e9", "electra", {"masked_lm_loss": 6.5, "masked_lm_accuracy": 0.1,
                                         "disc_auc": 0.85})
              + _curve("b3", "mlm", {"masked_lm_loss": 4.0, "masked_lm_accuracy": 0.3})
              + _curve("b1", "mlm", {"masked_lm_loss": 4.5, "masked_lm_accuracy": 0.25})
              + _curve("b9", "mlm", {"masked_lm_loss": 3.0, "masked_lm_accuracy": 0.19}))
    rows = trunk_pilot.outcomes(pretrain, curves, 2000)
    assert {o.model: (o.stable, o.learns) for o in rows} == {
        "e3": (False, True), "e1": (True, True), "e9": (True, False), "b3": (True, True),
        "b1": (True, True), "b9": (True, False)}  # b9: the lowest loss, but not learning
    assert trunk_pilot.choose(rows, "electra").model == "e1"
    assert trunk_pilot.choose(rows, "mlm").model == "b3"
    assert trunk_pilot.choose([o for o in rows if o.model != "e1"], "electra") is None
    # A run whose curve ends before the step judged at is left out.
    assert trunk_pilot.outcomes(pretrain, curves, 2050) == []


def test_the_report_is_redrawn_from_the_records_beside_the_ladders_trunks(tmp_path):
    pytest.importorskip("matplotlib")
    pilot, ladder_results = tmp_path / "results" / "ladder_pilot", tmp_path / "results" / "ladder"
    records.append(str(pilot / "pretrain.jsonl"), [_run("e1", "electra", 1e-4, 500),
                                                   _run("b1", "mlm", 1e-4, 500, hidden=256,
                                                        batch=128)])
    records.append(str(pilot / "curves.jsonl"),
                   _curve("e1", "electra", {"masked_lm_accuracy": 0.1, "disc_auc": 0.5})
                   + _curve("b1", "mlm", {"masked_lm_loss": 4.5, "masked_lm_accuracy": 0.25}))
    # The ladder's trunk went on past the pilot's last step and jumped after it.
    records.append(str(ladder_results / "pretrain.jsonl"),
                   [_run("trunk_mlm", "mlm", 1e-3, 95, kind="trunk", steps=3000)])
    late = _curve("trunk_mlm", "mlm", {"masked_lm_loss": 6.6, "masked_lm_accuracy": 0.05},
                  kind="trunk")
    records.append(str(ladder_results / "curves.jsonl"), late + [
        {**late[-1], "step": 2500, "scalars": {"grad_norm": 99.0}}])
    records.append(str(ladder_results / "baseline.jsonl"), [
        {"task": "pretraining", "baseline": "the kept token, else the unigram distribution",
         "split": "train", "metric": metric, "score": score}
        for metric, score in (("masked_lm_loss", 5.8), ("masked_lm_accuracy", 0.18),
                              ("masked_lm_accuracy_at_mask", 0.05))])
    # BERT's pilot run continued to step 2050, where it stops learning: judged at both.
    records.append(str(pilot / "pretrain.jsonl"), [_run("b1", "mlm", 1e-4, 500, steps=2050,
                                                        hidden=256, batch=128)])
    records.append(str(pilot / "curves.jsonl"), [
        {**_curve("b1", "mlm", {})[-1], "step": 2050,
         "scalars": {"masked_lm_loss": 5.9, "masked_lm_accuracy": 0.17,
                     "masked_lm_accuracy_at_mask": 0.06, "grad_norm": 1.0}}])
    # A run a sitting stopped at step 600 of 2000: shown, not judged.
    records.append(str(pilot / "pretrain.jsonl"), [_run("w", "electra", 5e-4, 500, hidden=256,
                                                        batch=128, finished=False)])
    records.append(str(pilot / "curves.jsonl"), _curve(
        "w", "electra", {"masked_lm_loss": 6.1, "masked_lm_accuracy": 0.15})[:12])
    written = trunk_pilot.write_report(str(pilot), str(tmp_path / "report"), "ladder")
    assert [p.rsplit("/", 1)[1] for p in written] == ["ladder_pilot.md", "ladder_pilot.png"]
    text = (tmp_path / "report" / "ladder_pilot.md").read_text()
    assert ("| BERT (MLM) | 128 | 32 | 0.001 | 95 | 2000 | 64,000 | 6.600 | 0.050 | - | - | 0 "
            "| yes | no |") in text
    assert ("| ELECTRA | 128 | 32 | 0.0001 | 500 | 2000 | 64,000 | - | 0.100 | - | 0.500 | 0 "
            "| yes | no |") in text
    assert ("| BERT (MLM) | 256 | 128 | 0.0001 | 500 | 2050 | 262,400 | 5.900 | 0.170 | 0.060 | - "
            "| 0 | yes | no |") in text
    assert ("| no context: the kept token, else the unigram distribution | | | | | | | 5.800 "
            "| 0.180 | 0.050 | - | | | |") in text
    assert "- at step 2000, ELECTRA: no setting is both stable and learning" in text
    assert "- at step 2000, BERT (MLM): peak learning rate 0.0001, 500 warmup steps" in text
    assert "- at step 2050, BERT (MLM): no setting is both stable and learning" in text
    assert "- at step 2050, ELECTRA: no run has reached this step" in text
    running = text.split("## Still running")[1]
    assert ("| ELECTRA | 256 | 128 | 0.0005 | 500 | 600 | 76,800 | 6.100 | 0.150 | - | - | 0 |"
            in running)
    assert "| 0.0005 |" not in text.split("## Still running")[0]


def test_the_wide_pilot_trains_both_objectives_at_its_shape_and_rate(tmp_path, monkeypatch):
    import ladder

    # The FLOPs of a step are counted from the config (no data read but the vocabulary's size).
    monkeypatch.setattr(ladder.efficiency_plan, "step_flops",
                        lambda budget, data_dir, objective: 1e9 * budget.hidden_size)
    wide = trunk_pilot.PILOTS["wide"]
    runs = trunk_pilot.jobs(ladder.LADDERS["mixed"], wide, str(tmp_path))
    assert [(setting.budget.hidden_size, setting.budget.num_heads, setting.budget.batch_size,
             setting.budget.learning_rate, climb.objective, climb.warmup_steps)
            for setting, climb in runs] == [(256, 4, 128, 5e-4, "electra", 500),
                                            (256, 4, 128, 5e-4, "mlm", 500)]
    # Everything else is the ladder's: the layers, the embeddings, the generator, the data.
    assert runs[0][0].budget.num_layers == ladder.LADDERS["mixed"].budget.num_layers == 4
    assert runs[0][0].shuffled_corpus
    assert trunk_pilot.model_name(wide, "mlm", 5e-4, 500) == "pilot_wide_mlm_lr0.0005_w500"
    assert trunk_pilot.results_name("wide", "mixed") == "ladder_pilot_mixed_wide"
    assert trunk_pilot.results_name("rates", "full") == "ladder_pilot"


def test_the_generator_pilot_is_bert_at_the_wide_electras_generator_shape(tmp_path,
                                                                          monkeypatch):
    import ladder
    from electra_tf import config as config_lib

    monkeypatch.setattr(ladder.efficiency_plan, "step_flops",
                        lambda budget, data_dir, objective: 1e9 * budget.hidden_size)
    (setting, climb), = trunk_pilot.jobs(ladder.LADDERS["mixed"], trunk_pilot.PILOTS["generator"],
                                         str(tmp_path))
    wide, _ = trunk_pilot.jobs(ladder.LADDERS["mixed"], trunk_pilot.PILOTS["wide"],
                               str(tmp_path))[0]
    assert climb.objective == "mlm" and climb.warmup_steps == 500
    # The BERT it trains is the wide ELECTRA's generator: the same transformer and embeddings,
    # at the same batch, rate and data.
    bert = config_lib.from_hparams("b", str(tmp_path), ladder.pretraining_hparams(
        setting, climb, 4000, 0))
    electra = config_lib.from_hparams("e", str(tmp_path), ladder.pretraining_hparams(
        wide, dataclasses.replace(climb, objective="electra"), 4000, 0))
    assert bert.bert_config() == electra.generator_bert_config()
    assert bert.resolved_embedding_size() == electra.resolved_embedding_size() == 128
    assert (bert.train_batch_size, bert.learning_rate) == (electra.train_batch_size,
                                                           electra.learning_rate) == (128, 5e-4)
    assert trunk_pilot.results_name("generator", "mixed") == "ladder_pilot_mixed_generator"


def test_the_wide_ladders_trunks_are_the_wide_pilots_runs(tmp_path, monkeypatch):
    """The mixed_wide ladder's trunks are the wide pilot's runs: the same model directories and
    the same hparams but the steps, so BERT's first fork is the pilot's step 4,000; ELECTRA
    climbs at BERT's FLOPs."""
    import ladder

    monkeypatch.setattr(ladder.efficiency_plan, "step_flops",
                        lambda budget, data_dir, objective: 1e9 * budget.hidden_size + (
                            1e8 if objective == "electra" else 0))
    wide = ladder.LADDERS["mixed_wide"]
    climbs = ladder.plan(wide, str(tmp_path))
    pilots = trunk_pilot.jobs(ladder.LADDERS["mixed"], trunk_pilot.PILOTS["wide"],
                              str(tmp_path))
    assert [c.objective for c in climbs][:2] == ["mlm", "electra"]  # the rungs in BERT's steps
    assert [c.objective for c in climbs] == list(wide.objectives)
    for trunk in climbs[:2]:
        setting, pilot = next(job for job in pilots if job[1].objective == trunk.objective)
        assert trunk.trunk == trunk_pilot.model_name(trunk_pilot.PILOTS["wide"], trunk.objective,
                                                     setting.budget.learning_rate,
                                                     pilot.warmup_steps)
        assert ladder.pretraining_hparams(wide, trunk, 4000, 0) == \
            ladder.pretraining_hparams(setting, pilot, 4000, 0)
    bert, electra = climbs[:2]
    assert [(r.steps, r.fork, r.name) for r in bert.rungs] == [
        (5000, 4000, "wide_mlm_5000"), (10000, 8000, "wide_mlm_10000")]
    assert electra.warmup_steps == 500 and electra.rungs[0].steps == round(5000 * 256 / 256.1)


@pytest.mark.parametrize("flags, message", [
    (["--steps", "1000"], "--steps must be a multiple of 50 and at least 1050"),
    (["--steps", "2010"], "--steps must be a multiple of 50"),
    (["--hours", "0"], "--hours must be positive"),
    (["--workers", "0"], "--workers must be at least 1"),
])
def test_bad_flags_fail_naming_the_flag(flags, message, capsys):
    with pytest.raises(SystemExit):
        trunk_pilot.parse_args(["--out", "x", *flags])
    assert message in capsys.readouterr().err
