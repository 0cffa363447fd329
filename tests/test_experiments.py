"""experiments/: the downstream tasks built from real text, the equal-FLOPs plan, the report's
learning-rate selection, and the efficiency and probe-curve pipelines at their smoke budget."""

import dataclasses
import filecmp
import json
import os
import pathlib
import re
import shutil
import sys

import pytest

from conftest import REPO, SAMPLE, run_script
from electra_tf.finetuning import glue

sys.path.insert(0, str(REPO / "experiments"))
import downstream  # noqa: E402
import efficiency  # noqa: E402
import efficiency_plan  # noqa: E402
import probe_curves  # noqa: E402
import report  # noqa: E402

FIXTURE = pathlib.Path(__file__).parent / "experiments_fixture"
SIZES = {"train": 64, "dev": 32, "test": 32}


@pytest.fixture
def shared_data(tmp_path: pathlib.Path) -> pathlib.Path:
    """The shared data directory's layout, made from the shipped slices (tests read nothing
    outside the repository)."""
    shared = tmp_path / "shared"
    shutil.copytree(FIXTURE, shared)
    lines = (SAMPLE / "corpus" / "enwiki_sample.txt").read_text().splitlines()[:150]
    (shared / "corpora" / "enwiki_sample.txt").write_text("\n".join(lines) + "\n")
    (shared / "vocab").mkdir()
    shutil.copy(SAMPLE / "vocab.txt", shared / "vocab" / "bert_uncased_vocab.txt")
    return shared


def test_tasks_are_glue_files_with_disjoint_deterministic_splits(shared_data, tmp_path):
    downstream.build_tasks(str(shared_data), str(tmp_path / "a"), SIZES)
    downstream.build_tasks(str(shared_data), str(tmp_path / "b"), SIZES)
    for name in downstream.TASK_NAMES:
        files = ["train.tsv", "dev.tsv", "test.tsv", "test_labels.tsv"]
        match, mismatch, errors = filecmp.cmpfiles(tmp_path / "a" / name, tmp_path / "b" / name,
                                                   files, shallow=False)
        assert match == files, (name, mismatch, errors)

        task = glue.get_task(name)  # run_finetuning.py's reader takes them as GLUE's files
        splits = {split: task.read(str(tmp_path / "a" / name), split, double_unordered=False)
                  for split in ("train", "dev", "test")}
        assert {split: len(rows) for split, rows in splits.items()} == SIZES
        labels = (tmp_path / "a" / name / "test_labels.tsv").read_text().splitlines()[1:]
        assert len(labels) == SIZES["test"]
        assert all(e.label is None for e in splits["test"])
        texts = {split: {t for e in rows for t in (e.text_a, e.text_b) if t}
                 for split, rows in splits.items()}
        assert not texts["train"] & texts["test"] and not texts["dev"] & texts["test"], name


def test_next_sentence_text_is_held_out_of_pretraining(shared_data, tmp_path):
    downstream.pretraining_corpus(str(shared_data), str(tmp_path / "corpus"))
    downstream.build_tasks(str(shared_data), str(tmp_path / "tasks"), SIZES, ["qnli"])
    pretraining = set((tmp_path / "corpus" / "brown_head.txt").read_text().splitlines())
    task = glue.get_task("qnli")
    pairs = task.read(str(tmp_path / "tasks" / "qnli"), "train") + \
        task.read(str(tmp_path / "tasks" / "qnli"), "dev")
    assert pairs and not {e.text_a for e in pairs} & pretraining
    assert {e.label for e in pairs} == {"entailment", "not_entailment"}


def test_bert_checkpoints_cost_electras_flops():
    budget = efficiency_plan.BUDGETS["pilot"]
    budget = dataclasses.replace(budget, curve_points=3)
    electra, bert = efficiency_plan.plan_pretraining(budget, "/nonexistent", ["electra", "mlm"])
    assert bert.step_flops < electra.step_flops and bert.steps > electra.steps
    pairs = list(zip(electra.checkpoints(3), bert.checkpoints(3)))
    assert [e for e, _ in pairs] == [100, 200, 400]
    for e, b in pairs:  # equal FLOPs to within 1%
        assert b * bert.step_flops == pytest.approx(e * electra.step_flops, rel=0.01)


def _finetune_record(out: pathlib.Path, model: str, lr: float, selection: list[float],
                     test: list[float]) -> None:
    efficiency.write_json(str(out / "results" / "finetune" / f"{model}__sst__lr{lr:g}.json"), {
        "model": model, "task": "sst", "learning_rate": lr,
        "selection": [{"accuracy": v} for v in selection],
        "test": [{"accuracy": v} for v in test], "wall_seconds": 1, "cpu_seconds": 1})


def test_report_selects_the_learning_rate_on_the_selection_split(tmp_path):
    efficiency.write_json(str(tmp_path / "results" / "pretrain" / "electra.json"),
                          {"objective": "electra", "steps": 8, "step_flops": 10.0})
    # lr 1e-3 wins on the selection split, lr 1e-4 would win on the test split.
    _finetune_record(tmp_path, "electra_8", 1e-3, [80, 81, 82], [60, 61, 62])
    _finetune_record(tmp_path, "electra_8", 1e-4, [70, 71, 72], [90, 91, 92])
    _finetune_record(tmp_path, "no_pretraining", 1e-3, [50, 50, 50], [50, 51, 52])
    models = {m.name: m for m in report.load(str(tmp_path), ["sst"])}
    electra = models["electra_8"]
    assert electra.scores["sst"].learning_rate == 1e-3
    assert electra.scores["sst"].median == 61 and electra.flops == 80.0
    assert models["no_pretraining"].step == 0
    assert report.exceeds_noise([60, 61, 62, 63, 64], [50, 51, 52, 53, 54]) == \
        (pytest.approx(0.0079, abs=1e-4), True)
    assert not report.exceeds_noise([60, 61, 62], [50, 51, 52])[1]  # 3 seeds never can


def test_a_report_of_table5_objectives_alone_has_no_flops_curves(tmp_path):
    pytest.importorskip("matplotlib")
    budget = efficiency_plan.BUDGETS["smoke"]
    efficiency.write_json(str(tmp_path / "results" / "pretrain" / "electra_15.json"),
                          {"objective": "electra_15", "steps": 8, "step_flops": 10.0,
                           "wall_seconds": 1, "cpu_seconds": 1, "load_average": 0})
    _finetune_record(tmp_path, "electra_15_8", 1e-3, [60, 61, 62], [60, 61, 62])
    _finetune_record(tmp_path, "no_pretraining", 1e-3, [50, 50, 50], [50, 51, 52])
    efficiency.write_json(str(tmp_path / "results" / "probe" / "no_pretraining.json"),
                          {"model": "no_pretraining",
                           "sst": {"probe_train_accuracy": 60, "probe_dev_accuracy": 55}})
    runs = efficiency_plan.plan_pretraining(budget, "/nonexistent", ["electra_15"])
    written = report.write(str(tmp_path), str(tmp_path / "report"), budget, runs, ["sst"])
    assert sorted(map(os.path.basename, written)) == [
        "efficiency_pretraining.png", "efficiency_results.md", "efficiency_table5.png"]
    assert "| electra_15_8 | 8 |" in (tmp_path / "report" / "efficiency_results.md").read_text()


def test_objectives_are_sized_without_running_electra(capsys):
    args = efficiency.parse_args(["--out", "x", "--objectives", "electra_15,replace_mlm"])
    assert args.objectives == ["electra_15", "replace_mlm"]
    runs = efficiency_plan.plan_pretraining(efficiency_plan.BUDGETS["pilot"], "/nonexistent",
                                            args.objectives)
    assert [r.steps for r in runs] == [400, 400]  # ELECTRA's steps, as the paper's Table 5
    with pytest.raises(SystemExit):
        efficiency.parse_args(["--out", "x", "--objectives", "electra,bert"])
    assert "unknown ['bert']" in capsys.readouterr().err


@pytest.mark.slow
def test_smoke_budget_runs_the_pipeline_and_resumes(shared_data, tmp_path):
    """The whole pipeline: ELECTRA and BERT (the Table 5 objectives' steps are the same code
    path, and each is tested in test_objectives.py)."""
    pytest.importorskip("matplotlib")  # the plots' extra
    out, report_dir = tmp_path / "out", tmp_path / "report"
    command = ["experiments/efficiency.py", "--out", str(out), "--budget", "smoke",
               "--tasks", "sst", "--objectives", "electra,mlm",
               "--shared_data", str(shared_data), "--report_dir", str(report_dir),
               "--workers", "2"]
    run_script(*command, timeout=1800)  # fails the test on a non-zero exit
    table = (report_dir / "efficiency_results.md").read_text()
    for row in ("| electra_4 |", "| electra_8 |", "| mlm_", "| no_pretraining |"):
        assert row in table
    assert (report_dir / "efficiency_curve.png").stat().st_size > 0
    assert (report_dir / "efficiency_table5.png").stat().st_size > 0
    assert (report_dir / "efficiency_pretraining.png").stat().st_size > 0
    # The fixture's 64 training sentences all carry one label: no probe can be fit, and the
    # report says so instead of failing.
    assert "## Linear probe" in table and "| no_pretraining | 0 | n/a |" in table
    assert not (report_dir / "efficiency_probe.png").exists()  # nothing to plot
    raw = json.loads((out / "results" / "finetune" / "electra_8__sst__lr0.001.json").read_text())
    assert len(raw["test"]) == len(raw["selection"]) == efficiency_plan.BUDGETS["smoke"].trials

    second = run_script(*command, timeout=600)  # everything is done: nothing reruns
    assert "pretraining electra" not in second.stdout
    assert not re.search(r"fine-tuning \d+/", second.stdout) and "probed" not in second.stdout


def test_side_by_side_keeps_order_and_a_failure_cancels_what_has_not_started():
    assert efficiency.side_by_side(2, lambda x: x * x, [3, 1, 2]) == [9, 1, 4]
    started = []

    def run(item):
        started.append(item)
        if item == "bad":
            raise RuntimeError("pretraining bad failed")
        return item

    with pytest.raises(RuntimeError, match="pretraining bad failed"):
        efficiency.side_by_side(1, run, ["ok", "bad", "later", "last"])
    assert started == ["ok", "bad"]


def test_probe_curves_pair_each_electra_run_with_bert_at_its_flops():
    budget = efficiency_plan.BUDGETS["pilot"]
    runs = probe_curves.plan(budget, "/nonexistent", [(1e-3, 400), (3e-3, 100)], 100)
    assert [(r.objective, r.learning_rate) for r in runs] == [
        ("electra", 1e-3), ("mlm", 1e-3), ("electra", 3e-3), ("mlm", 3e-3)]
    assert runs[0].name == "electra_lr0.001_400" and runs[2].name == "electra_lr0.003_100"
    for electra, bert in zip(runs[::2], runs[1::2]):
        assert bert.steps > electra.steps and bert.probe_steps > electra.probe_steps
        for attribute in ("steps", "probe_steps"):  # equal FLOPs to within 1%
            assert getattr(bert, attribute) * bert.step_flops == pytest.approx(
                getattr(electra, attribute) * electra.step_flops, rel=0.01)


@pytest.mark.parametrize("bad", ["1e-3", "fast:100", "1e-3:0", "-1:100"])
def test_probe_curves_refuse_a_malformed_run(bad, capsys):
    with pytest.raises(SystemExit):
        probe_curves.parse_args(["--out", "x", "--run", bad])
    assert "--run" in capsys.readouterr().err


@pytest.mark.slow
def test_probe_curves_smoke_budget_probes_while_pretraining_and_resumes(shared_data, tmp_path):
    pytest.importorskip("matplotlib")
    out, report_dir = tmp_path / "out", tmp_path / "report"
    # qnli: the fixture's sst training sentences carry a single label, which no probe can fit.
    command = ["experiments/probe_curves.py", "--out", str(out), "--budget", "smoke",
               "--run", "1e-3:8", "--probe_steps", "4", "--probe_task", "qnli",
               "--shared_data", str(shared_data), "--report_dir", str(report_dir),
               "--workers", "2"]
    run_script(*command, timeout=1200)
    results = out / "results" / "probe_curves"
    electra = json.loads((results / "electra_lr0.001_8.json").read_text())
    steps, values = electra["scalars"]["probe_dev_accuracy"]
    assert steps == [4, 8] and all(0 <= v <= 100 for v in values)  # percent, as GLUE's
    assert electra["scalars"]["disc_auc"][0]  # the pretraining curves came along
    bert = json.loads(next(results.glob("mlm_lr0.001_*.json")).read_text())
    assert bert["steps"] * bert["step_flops"] == pytest.approx(8 * electra["step_flops"],
                                                               rel=0.15)
    table = (report_dir / "probe_curves_results.md").read_text()
    assert "| electra | 0.001 | 8 |" in table and "| mlm | 0.001 |" in table
    assert "| no pretraining (random weights) |" in table
    assert (report_dir / "probe_curves.png").stat().st_size > 0

    second = run_script(*command, timeout=600)  # everything is done: nothing reruns
    assert "pretraining electra" not in second.stdout
