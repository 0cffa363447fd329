"""experiments/ladder.py (with its ladder_data.py and ladder_records.py): the corpus without the
held-out Brown files, the plan (log-spaced budgets, equal FLOPs, forks), the records (atomic
appends, torn lines), resuming from the records, the decision rule on hand-made records, and the
smoke ladder end to end (slow)."""

import dataclasses
import json
import pathlib
import re
import shutil
import sys

import pytest

from conftest import REPO, run_script
from test_experiments import shared_data  # noqa: F401  (a fixture)

sys.path.insert(0, str(REPO / "experiments"))
import downstream  # noqa: E402
import efficiency  # noqa: E402
import efficiency_plan  # noqa: E402
import ladder  # noqa: E402
import ladder_data  # noqa: E402
import ladder_records  # noqa: E402
import ladder_report  # noqa: E402
import ladder_verdicts  # noqa: E402
import records  # noqa: E402

BROWN = pathlib.Path(__file__).parent / "data" / "brown_tagged"


@pytest.fixture
def ladder_shared(shared_data):  # noqa: F811
    """The shared data's layout with the tagged Brown slice the repository ships."""
    shutil.copytree(BROWN, shared_data / "corpora" / "brown_tagged")
    return shared_data


# ----------------------------------------------------------------------------- the corpus

def test_corpus_holds_the_train_brown_files_as_plain_text_and_never_dev_or_test(ladder_shared,
                                                                               tmp_path):
    from electra_tf.finetuning import pos

    summary = downstream.ladder_corpus(str(ladder_shared), str(tmp_path / "corpus"))
    split = pos.brown_file_split(pos.brown_files(str(BROWN)))
    assert split["dev"] and split["test"]
    assert summary["brown_train_files"] == len(split["train"])
    assert sorted(summary["brown_held_out_files"]) == sorted(split["dev"] + split["test"])
    text = (tmp_path / "corpus" / "brown_train.txt").read_text()
    documents = text.rstrip("\n").split("\n\n")
    assert len(documents) == len(split["train"])  # a document per file
    assert "/" not in text.replace(" / ", "")  # no word/tag token is left
    assert "``" not in text and "''" not in text
    for name in split["train"]:
        assert downstream.brown_paragraphs(str(BROWN / name))[0] in text
    for name in split["dev"] + split["test"]:  # no held-out paragraph, not even a sentence
        for paragraph in downstream.brown_paragraphs(str(BROWN / name)):
            assert paragraph not in text, name
    for source in ("enwiki_sample.txt", "python3.11-doc.txt"):
        assert (tmp_path / "corpus" / source).exists()
    assert summary["total_words"] == sum(summary["words"].values())


def test_the_corpus_directory_holds_only_the_text_the_builders_read(ladder_shared, tmp_path):
    corpus = ladder_data.build_corpus(str(tmp_path), str(ladder_shared))
    assert sorted(p.name for p in pathlib.Path(corpus).iterdir()) == [
        "brown_train.txt", "enwiki_sample.txt", "python3.11-doc.txt"]
    summary = json.loads((tmp_path / "corpus_summary.json").read_text())
    assert summary["total_words"] > 0


def test_the_shuffled_corpus_deals_every_document_of_every_source_into_its_shards(
        ladder_shared, tmp_path):
    by_source = downstream.ladder_corpus(str(ladder_shared), str(tmp_path / "by_source"))
    shuffled = downstream.ladder_corpus(str(ladder_shared), str(tmp_path / "shuffled"), True)
    assert shuffled["words"] == by_source["words"]
    assert shuffled["order"] == "shuffled documents" and by_source["order"] == "by source"

    def documents(directory):
        return sorted(d for path in sorted(directory.iterdir())
                      for d in path.read_text().strip("\n").split("\n\n") if d.strip())

    shards = sorted(p.name for p in (tmp_path / "shuffled").iterdir())
    assert shards == [f"shard_{k:03d}.txt" for k in range(downstream.SHARDS)]
    assert documents(tmp_path / "shuffled") == documents(tmp_path / "by_source")
    assert sum(shuffled["documents"].values()) == len(documents(tmp_path / "shuffled"))
    first = (tmp_path / "shuffled" / "shard_000.txt").read_text()
    assert downstream.ladder_corpus(str(ladder_shared), str(tmp_path / "again"), True) and \
        (tmp_path / "again" / "shard_000.txt").read_text() == first  # a fixed seed
    # The by-source layout copies the other sources byte for byte.
    assert (tmp_path / "by_source" / "enwiki_sample.txt").read_bytes() == (
        ladder_shared / "corpora" / "enwiki_sample.txt").read_bytes()


def test_brown_paragraphs_join_a_paragraphs_sentences_and_drop_the_tags(tmp_path):
    path = tmp_path / "ca01"
    path.write_text("\n\n\tThe/at jury/nn said/vbd ``/`` yes/rb ''/'' ./.\n"
                    "It/pps ended/vbd ./.\n\n\n\tA/at 1/2/cd cup/nn ./.\n")
    assert downstream.brown_paragraphs(str(path)) == [
        'The jury said " yes " . It ended .', "A 1/2 cup ."]
    path.write_text("The/at jury\n")
    with pytest.raises(ValueError, match=r"ca01:1: token 'jury' is not word/tag"):
        downstream.brown_paragraphs(str(path))


def test_missing_shared_data_names_the_fetch_command(tmp_path):
    with pytest.raises(SystemExit) as stopped:
        ladder_data.check_shared_data(str(tmp_path))
    message = str(stopped.value)
    assert "\n" not in message and "lacks corpora/brown_tagged/ca01 (and 3 more)" in message
    assert "python experiments/fetch_corpora.py --out DIR" in message
    with pytest.raises(SystemExit, match="fetch_corpora.py"):  # before anything is written
        ladder.prepare_data(str(tmp_path / "out"), str(tmp_path), ladder.LADDERS["full"])
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- the plan

def test_the_full_ladder_is_log_spaced_at_equal_flops_and_costs_about_1_2x():
    full = ladder.LADDERS["full"]
    electra, bert = ladder.plan(full, "/nonexistent")
    budgets = full.rung_flops("/nonexistent")
    assert len(budgets) >= 6 and budgets[0] == pytest.approx(1e13)
    assert budgets[-1] >= 1e15 * (1 - 1e-9)
    ratios = [b / a for a, b in zip(budgets, budgets[1:])]
    assert ratios == pytest.approx([ratios[0]] * len(ratios))  # log-spaced
    for e, b in zip(electra.rungs, bert.rungs):
        # Each at the rung's FLOPs to within half of its own step.
        for rung, budget in ((e, budgets[e.index]), (b, budgets[b.index])):
            assert abs(rung.flops - budget) <= rung.step_flops / 2
        # The same share of decay, and the fork where the decay starts.
        assert e.decay_steps / e.steps == pytest.approx(0.2, abs=0.01)
        assert b.decay_steps / b.steps == pytest.approx(0.2, abs=0.01)
        assert e.fork == e.steps - e.decay_steps
    assert bert.step_flops < electra.step_flops and bert.rungs[-1].steps > electra.rungs[-1].steps
    # The same warmup FLOPs for both, ending before the smallest rung's decay.
    assert electra.warmup_steps * electra.step_flops == pytest.approx(
        bert.warmup_steps * bert.step_flops, rel=0.01)
    assert electra.warmup_steps < electra.rungs[0].fork
    for climb in (electra, bert):
        assert 1.1 < climb.cost_flops() / climb.rungs[-1].flops < 1.25


def test_trunk_and_branch_hparams_are_valid_wsd_runs():
    from electra_tf import config

    full = ladder.LADDERS["full"]
    electra, _ = ladder.plan(full, "/nonexistent")
    rung = electra.rungs[2]
    trunk = config.from_hparams("t", "/nonexistent",
                                ladder.pretraining_hparams(full, electra, rung.fork, 0))
    branch = config.from_hparams("b", "/nonexistent", ladder.pretraining_hparams(
        full, electra, rung.steps, rung.decay_steps))
    assert trunk.lr_schedule == branch.lr_schedule == "wsd" and trunk.lr_decay_steps == 0
    assert branch.num_train_steps - branch.lr_decay_steps == trunk.num_train_steps
    assert trunk.num_warmup_steps == branch.num_warmup_steps == electra.warmup_steps
    assert trunk.learning_rate == branch.learning_rate == 1e-3


def test_a_variant_climbs_as_its_objective_with_its_own_hparams_and_name(tmp_path):
    """The wide ladder's second ELECTRA: the objective electra with a generator of 1/2, its
    records and trunk under its own name, at BERT's FLOPs like the first."""
    from electra_tf import config, flops

    wide = ladder.LADDERS["mixed_wide"]
    (tmp_path / "vocab.txt").write_text("\n".join(f"t{i}" for i in range(8000)) + "\n")
    bert, quarter, half = ladder.plan(wide, str(tmp_path))[:3]
    assert (quarter.objective, half.objective) == ("electra", "electra_half")
    assert half.trunk == "pilot_wide_electra_half_lr0.0005_w500"
    assert half.rungs[0].name == "wide_electra_half_" + str(half.rungs[0].steps)
    hparams = ladder.pretraining_hparams(wide, half, 1000, 0)
    built = config.from_hparams("h", str(tmp_path), hparams)
    assert built.objective == "electra" and built.generator_hidden_size == 0.5
    assert {k: v for k, v in hparams.items() if k != "generator_hidden_size"} == {
        k: v for k, v in ladder.pretraining_hparams(wide, quarter, 1000, 0).items()
        if k != "generator_hidden_size"}
    # A wider generator costs more a step, so fewer steps reach the same FLOPs.
    assert half.step_flops == flops.pretraining_step_flops(built) > quarter.step_flops
    for climb in (quarter, half):
        assert abs(climb.rungs[0].flops - bert.rungs[0].flops) <= climb.step_flops / 2
    with pytest.raises(ValueError, match="not an objective or a variant"):
        dataclasses.replace(wide, objectives=("mlm", "electra_third"))


def test_table5_objectives_climb_at_electras_steps(tmp_path):
    """Each at the steps of the ELECTRA recipe with its generator: the paper's 1/4, or 1/2."""
    from electra_tf import config

    wide = ladder.LADDERS["mixed_wide"]
    (tmp_path / "vocab.txt").write_text("\n".join(f"t{i}" for i in range(8000)) + "\n")
    climbs = {c.objective: c for c in ladder.plan(wide, str(tmp_path))}
    electra = climbs["electra"]
    assert climbs["electra_half"].rungs[0].steps < electra.rungs[0].steps
    for objective, generator in [(o, 0.25) for o in efficiency_plan.TABLE5_OBJECTIVES] + [
            (f"{o}_half", 0.5) for o in efficiency_plan.TABLE5_OBJECTIVES]:
        climb, reference = climbs[objective], climbs[efficiency_plan.TABLE5_REFERENCE[objective]]
        assert [(r.steps, r.fork, r.decay_steps) for r in climb.rungs] == [
            (r.steps, r.fork, r.decay_steps) for r in reference.rungs]
        assert climb.warmup_steps == reference.warmup_steps
        assert climb.rungs[0].name == f"wide_{objective}_{reference.rungs[0].steps}"
        built = config.from_hparams("t", str(tmp_path),
                                    ladder.pretraining_hparams(wide, climb, 1000, 0))
        assert built.objective == objective.removesuffix("_half")
        assert built.generator_hidden_size == generator
    # Their own FLOPs: All-Tokens MLM's output layer at every position costs more.
    assert climbs["all_tokens_mlm"].rungs[0].flops > 1.2 * electra.rungs[0].flops
    assert climbs["electra_15"].rungs[0].flops == electra.rungs[0].flops
    with pytest.raises(ValueError, match="must be among the objectives"):
        dataclasses.replace(wide, objectives=("mlm", "replace_mlm"))
    with pytest.raises(ValueError, match="which must hold the ELECTRA recipe"):
        dataclasses.replace(wide, objectives=("mlm", *efficiency_plan.TABLE5_OBJECTIVES),
                            equal_steps=efficiency_plan.TABLE5_OBJECTIVES)
    with pytest.raises(ValueError, match="which must hold the ELECTRA recipe"):
        dataclasses.replace(wide, objectives=("mlm", "electra", "electra_15_half"),
                            equal_steps=("electra_15_half",))


def test_rungs_too_close_for_their_decays_are_refused():
    crowded = ladder.Ladder(budget=efficiency_plan.BUDGETS["smoke"], min_flops=1e10,
                            max_flops=1.05e10, rungs=3, tasks=())
    with pytest.raises(ValueError, match="must rise and start after the warmup"):
        ladder.plan(crowded, "/nonexistent")


# ----------------------------------------------------------------------------- records

def test_records_append_read_and_repair_a_torn_last_line(tmp_path, capsys):
    path = str(tmp_path / "r" / "finetune.jsonl")
    records.append(path, [{"a": 1}, {"a": 2}])
    with open(path, "a") as f:
        f.write('{"a": 3, "sc')  # a crash in the middle of an append
    assert records.read(path) == [{"a": 1}, {"a": 2}]
    assert "its last line is torn (12 bytes without a newline" in capsys.readouterr().err
    records.append(path, [{"a": 4}])
    assert "removing its torn last line" in capsys.readouterr().err
    assert records.read(path) == [{"a": 1}, {"a": 2}, {"a": 4}]
    assert open(path).read().count("\n") == 3
    with open(path, "a") as f:
        f.write("not json\n")
    records.append(path, [{"a": 5}])
    with pytest.raises(records.RecordsError, match=r"finetune.jsonl:4: not a JSON record"):
        records.read(path)
    assert records.read(str(tmp_path / "none.jsonl")) == []


def _sitting(tmp_path, deadline=None):
    return ladder.Sitting(ladder.LADDERS["smoke"], str(tmp_path / "nonexistent_data"),
                          str(tmp_path / "out"), ladder_records.Store(str(tmp_path / "results")),
                          deadline)


def test_a_recorded_run_is_skipped_and_none_starts_after_the_deadline(tmp_path):
    """The data directory does not exist: any run that started would fail."""
    sitting = _sitting(tmp_path)
    task = sitting.ladder.tasks[0]
    sitting.store.append("finetune", [
        {"objective": "electra", "pretrain_steps": 8, "pretrain_flops": 9.5e9,
         "task": task.name, "learning_rate": 1e-3, "seed": 0, "split": "dev",
         "metric": "accuracy", "score": 50.0}])
    ladder.finetune(sitting, "electra", 8, 9.5e9, "electra_8", task, 1e-3)  # skipped
    electra = ladder.plan(sitting.ladder, "/nonexistent")[0]
    sitting.store.append("pretrain", [{"objective": "electra", "model": electra.trunk,
                                       "kind": "trunk", "pretrain_steps": electra.rungs[0].fork,
                                       "finished": True}])
    ladder.pretrain(sitting, electra, electra.trunk, electra.rungs[0].fork, 0, "trunk")
    # An unfinished piece (stopped at a deadline) is not a finished one.
    sitting.store.append("pretrain", [{"objective": "electra", "kind": "branch",
                                       "pretrain_steps": electra.rungs[0].steps,
                                       "finished": False}])
    late = _sitting(tmp_path, deadline=0.0)
    with pytest.raises(efficiency.Stopped):
        ladder.pretrain(late, electra, electra.rungs[0].name, electra.rungs[0].steps,
                        electra.rungs[0].decay_steps, "branch", electra.rungs[0])
    with pytest.raises(efficiency.Stopped):
        ladder.finetune(late, "electra", 8, 9.5e9, "electra_8", task, 3e-4)


def test_a_discriminator_is_judged_against_bigram_counts_once_and_others_never(
        tmp_path, monkeypatch):
    sitting = _sitting(tmp_path)
    judged = []
    monkeypatch.setattr(ladder.detection_baselines, "judge", lambda data_dir, model, step,
                        batch_size, seed: (
        judged.append((model, seed)) or {"model": model, "step": step, "seed": seed,
                                         "auc": {"discriminator": [0.7]}}))
    _fake_checkpoint(pathlib.Path(ladder.model_dir(sitting, "electra_half_9")), 9)
    _fake_checkpoint(pathlib.Path(ladder.model_dir(sitting, "electra_15_9")), 9)
    _fake_checkpoint(pathlib.Path(ladder.model_dir(sitting, "mlm_9")), 9)
    ladder.detect(sitting, "electra_half", 9, "electra_half_9")
    ladder.detect(sitting, "electra_half", 9, "electra_half_9")  # recorded: skipped
    ladder.detect(sitting, "electra_15", 9, "electra_15_9")  # judges the masked positions only
    ladder.detect(sitting, "mlm", 9, "mlm_9")
    ladder.detect(sitting, "electra", 9, "electra_9")  # no model here: not made for this
    assert judged == [("electra_half_9", seed) for seed in ladder.DETECTION_SEEDS]
    assert [(r["model"], r["seed"]) for r in sitting.store.read("detection")] == judged


def test_a_rungs_checkpoint_is_evaluated_once_and_only_at_its_step(tmp_path, monkeypatch):
    sitting = _sitting(tmp_path, deadline=4.0e9)  # far ahead: every run may start
    evaluated = []

    def evaluate(data_dir, model, batches, log_path, deadline):
        evaluated.append((model, batches, deadline))
        step = 8 if model == "electra_w1_9" else 9  # its checkpoint at 9 could not be read
        return {"model": model, "objective": "electra", "objective_hparam": "electra",
                "step": step, "wall_seconds": 1.0}

    monkeypatch.setattr(ladder.checkpoint_eval, "evaluate", evaluate)
    _fake_checkpoint(pathlib.Path(ladder.model_dir(sitting, "electra_half_9")), 9)
    ladder.evaluate_checkpoint(sitting, "electra_half", 9, "electra_half_9")
    ladder.evaluate_checkpoint(sitting, "electra_half", 9, "electra_half_9")  # recorded
    # Not evaluated: a latest checkpoint past the rung's step, or before it; no model here.
    for model, kept in (("electra_9", (9, 12)), ("electra_12", (9,))):
        for step in kept:
            _fake_checkpoint(pathlib.Path(ladder.model_dir(sitting, model)), step)
    ladder.evaluate_checkpoint(sitting, "electra", 9, "electra_9")
    ladder.evaluate_checkpoint(sitting, "electra", 12, "electra_12")
    ladder.evaluate_checkpoint(sitting, "mlm", 9, "mlm_9")
    assert evaluated == [("electra_half_9", ladder.EVAL_BATCHES, sitting.deadline)]
    # The record names the variant as the ladder's other records do, and the run's objective.
    record, = sitting.store.read("eval")
    assert (record["objective"], record["objective_hparam"]) == ("electra_half", "electra")
    # do_eval fell back to an older checkpoint: nothing recorded.
    _fake_checkpoint(pathlib.Path(ladder.model_dir(sitting, "electra_w1_9")), 9)
    ladder.evaluate_checkpoint(sitting, "electra_w1", 9, "electra_w1_9")
    # Text shorter than a batch: said, nothing recorded, and the sitting goes on.
    _fake_checkpoint(pathlib.Path(ladder.model_dir(sitting, "electra_15_9")), 9)

    def too_little(*args):
        raise ladder.checkpoint_eval.NothingEvaluated("electra_15_9: do_eval read no example")

    monkeypatch.setattr(ladder.checkpoint_eval, "evaluate", too_little)
    ladder.evaluate_checkpoint(sitting, "electra_15", 9, "electra_15_9")
    assert [r["model"] for r in sitting.store.read("eval")] == ["electra_half_9"]


def _fake_checkpoint(directory: pathlib.Path, step: int, payload: bytes = b"w") -> None:
    """A checkpoint's files as resume.checkpoint_steps and resume.fork see them."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"ckpt-{step}.index").write_bytes(b"index")
    (directory / f"ckpt-{step}.data-00000-of-00001").write_bytes(payload)
    (directory / "pretrain_config.json").write_text("{}")


def _data(directory: pathlib.Path, vocab: str = "[PAD]\n[CLS]\n[SEP]\n") -> pathlib.Path:
    (directory / "pretrain_tfrecords").mkdir(parents=True)
    (directory / "vocab.txt").write_text(vocab)
    (directory / "pretrain_tfrecords" / "pretrain_data.tfrecord-0-of-1").write_bytes(b"r")
    return directory


def test_a_run_left_alone_takes_every_core(tmp_path):
    """--workers 2 keeps two runs side by side only while two pieces of work are left."""
    sitting = _sitting(tmp_path)
    electra, bert = ladder.plan(sitting.ladder, "/nonexistent")[:2]
    assert ladder.unfinished(sitting, [electra, bert], 1) == [electra, bert]
    assert ladder.runs_at_once(sitting, [electra, bert], 2) == 2
    assert ladder.runs_at_once(sitting, [electra], 2) == 2  # random weights beside it
    sitting.store.append("probe", [{"objective": "none", "pretrain_steps": 0}])
    sitting.store.append("finetune", [
        {"objective": "none", "pretrain_steps": 0, "task": task.name, "learning_rate": lr}
        for task in sitting.ladder.tasks for lr in sitting.ladder.budget.finetune_lrs])
    assert ladder.runs_at_once(sitting, [electra], 2) == 1
    assert ladder.runs_at_once(sitting, [], 2) == ladder.runs_at_once(sitting, [bert], 1) == 1
    steps = electra.rungs[0].steps
    sitting.store.append("probe", [{"objective": "electra", "pretrain_steps": steps}])
    sitting.store.append("finetune", [
        {"objective": "electra", "pretrain_steps": steps, "task": task.name,
         "learning_rate": lr}
        for task in sitting.ladder.tasks for lr in sitting.ladder.budget.finetune_lrs])
    assert ladder.unfinished(sitting, [electra, bert], 1) == [bert]
    assert ladder.unfinished(sitting, [electra, bert], 2) == [electra, bert]


def test_a_trunk_is_saved_with_the_records_and_continued_from_there_on_another_machine(
        tmp_path):
    from electra_tf import resume

    sitting = dataclasses.replace(_sitting(tmp_path), data_dir=str(_data(tmp_path / "data")))
    electra = ladder.plan(sitting.ladder, "/nonexistent")[0]
    trunk = pathlib.Path(ladder.model_dir(sitting, electra.trunk))
    _fake_checkpoint(trunk, 3, b"old")
    ladder.save_trunk(sitting, electra)
    _fake_checkpoint(trunk, 7, b"new")
    ladder.save_trunk(sitting, electra)  # replaces the saved step 3
    saved = pathlib.Path(ladder.trunk_snapshot(sitting, electra))
    assert resume.checkpoint_steps(str(saved)) == [7]
    assert json.loads((saved / "data.json").read_text()) == ladder_data.data_fingerprint(
        sitting.data_dir)
    assert sorted(p.name for p in saved.parent.iterdir()) == ["electra"]  # no staging left

    shutil.rmtree(trunk)  # another machine: the trunk starts from the saved step
    ladder.restore_trunk(sitting, electra)
    assert (trunk / "ckpt-7.data-00000-of-00001").read_bytes() == b"new"
    ladder.restore_trunk(sitting, electra)  # as new as the saved one: left as it is

    shutil.rmtree(trunk)  # an older trunk there is moved aside, not deleted
    _fake_checkpoint(trunk, 3, b"old")
    ladder.restore_trunk(sitting, electra)
    assert resume.checkpoint_steps(str(trunk)) == [7]
    assert resume.checkpoint_steps(str(trunk) + ".stale-3") == [3]

    shutil.rmtree(trunk)  # other data: an error that names the saved trunk and the fix
    (tmp_path / "data" / "vocab.txt").write_text("[PAD]\n[CLS]\n[SEP]\nother\n")
    with pytest.raises(SystemExit, match=r"trained on other data.*rebuild the data"):
        ladder.restore_trunk(sitting, electra)
    assert not trunk.exists()


def test_data_built_again_must_be_the_data_the_records_were_made_on(tmp_path):
    """The first sitting writes the data's hashes beside the records; a sitting on data that
    hashes otherwise (rebuilt by changed code, say) stops, naming a file that differs."""
    data, results = _data(tmp_path / "data"), tmp_path / "results"
    (data / "finetuning_data" / "pos").mkdir(parents=True)
    (data / "finetuning_data" / "pos" / "train.txt").write_text("The/at dog/nn\n")
    ladder_data.check_data(str(results), str(data))
    saved = json.loads((results / "data.json").read_text())
    assert sorted(saved) == ["finetuning_data/pos/train.txt",
                             "pretrain_tfrecords/pretrain_data.tfrecord-0-of-1", "vocab.txt"]
    ladder_data.check_data(str(results), str(data))  # the same data: nothing to say
    (data / "finetuning_data" / "pos" / "train.txt").write_text("The/at cat/nn\n")
    with pytest.raises(SystemExit, match=r"is not the data the records in .* were made on "
                                         r"\(1 file\(s\) differ .*e\.g\. finetuning_data/pos/"
                                         r"train\.txt\).*--results DIR"):
        ladder_data.check_data(str(results), str(data))
    assert json.loads((results / "data.json").read_text()) == saved  # left as it was


def test_a_branch_lost_with_another_machine_is_made_again_only_while_it_is_needed(
        tmp_path, monkeypatch):
    sitting = _sitting(tmp_path)
    electra = ladder.plan(sitting.ladder, "/nonexistent")[0]
    rung = electra.rungs[0]
    calls = []
    monkeypatch.setattr(ladder, "pretrain", lambda s, c, name, steps, decay, kind, rung=None,
                        again=False: calls.append((kind, steps, again)))
    monkeypatch.setattr(ladder, "evaluate", lambda *args: calls.append("evaluate"))
    monkeypatch.setattr("electra_tf.resume.fork", lambda *args: calls.append("fork"))
    sitting.store.append("pretrain", [
        {"objective": "electra", "kind": kind, "pretrain_steps": steps, "finished": True}
        for kind, steps in (("trunk", rung.fork), ("branch", rung.steps))])
    ladder.climb(sitting, electra, 0)  # recorded, but neither checkpoint is on this machine
    assert calls == [("trunk", rung.fork, True), "fork", ("branch", rung.steps, True),
                     "evaluate"]

    calls.clear()  # the trunk's checkpoint at the fork is here: only the branch again
    _fake_checkpoint(pathlib.Path(ladder.model_dir(sitting, electra.trunk)), rung.fork)
    ladder.climb(sitting, electra, 0)
    assert calls == [("trunk", rung.fork, False), "fork", ("branch", rung.steps, True),
                     "evaluate"]

    calls.clear()  # evaluated: nothing is made again
    sitting.store.append("probe", [{"objective": "electra", "pretrain_steps": rung.steps}])
    sitting.store.append("finetune", [
        {"objective": "electra", "pretrain_steps": rung.steps, "task": task.name,
         "learning_rate": lr} for task in sitting.ladder.tasks
        for lr in sitting.ladder.budget.finetune_lrs])
    ladder.climb(sitting, electra, 0)
    assert calls == ["evaluate"]


def test_a_fork_the_trunk_has_passed_without_a_checkpoint_is_refused(tmp_path, monkeypatch):
    """A trunk continued from elsewhere (a saved or another experiment's) keeps only its
    newest checkpoints: a rung forking before them cannot be made, and nothing runs."""
    sitting = _sitting(tmp_path)
    electra = ladder.plan(sitting.ladder, "/nonexistent")[0]
    rung = electra.rungs[0]
    monkeypatch.setattr(ladder, "pretrain", lambda *args, **kwargs: pytest.fail("ran"))
    _fake_checkpoint(pathlib.Path(ladder.model_dir(sitting, electra.trunk)), rung.fork + 1)
    with pytest.raises(SystemExit, match=rf"{rung.name} forks from the trunk at step "
                       rf"{rung.fork}, and the trunk .* is past it with no checkpoint there "
                       rf"\(it keeps \[{rung.fork + 1}\]\)"):
        ladder.climb(sitting, electra, 0)


def test_the_learning_curve_of_a_piece_is_recorded_once_without_the_rates(tmp_path):
    from electra_tf.progress import ProgressLogger

    sitting = _sitting(tmp_path)
    electra = ladder.plan(sitting.ladder, "/nonexistent")[0]
    directory = ladder.model_dir(sitting, electra.trunk)
    logger = ProgressLogger(directory, 4, 0, 8)
    logger.scalars(2, {"masked_lm_loss": 9.0, "examples_per_second": 50.0})
    ladder.record_curve(sitting, electra, electra.trunk, "trunk")
    logger.scalars(4, {"masked_lm_loss": 8.5, "disc_auc": 0.625})
    ladder.record_curve(sitting, electra, electra.trunk, "trunk")
    ladder.record_curve(sitting, electra, electra.trunk, "trunk")
    assert [(r["step"], r["scalars"]) for r in sitting.store.read("curves")] == [
        (2, {"masked_lm_loss": 9.0}), (4, {"masked_lm_loss": 8.5, "disc_auc": 0.625})]
    assert sitting.store.read("curves")[1]["pretrain_flops"] == 4 * electra.step_flops


def test_a_piece_pretrained_again_after_its_checkpoints_were_lost_records_its_own_curve(
        tmp_path):
    """A trunk restarted from step 0 on a new machine logs its steps again; a step whose values
    differ from the lost run's is recorded again, and readers take the last line of each step."""
    from electra_tf.progress import ProgressLogger

    sitting = _sitting(tmp_path)
    electra = ladder.plan(sitting.ladder, "/nonexistent")[0]
    directory = ladder.model_dir(sitting, electra.trunk)
    lost = ProgressLogger(directory, 4, 0, 8)
    lost.scalars(2, {"masked_lm_loss": 9.0})
    lost.scalars(4, {"masked_lm_loss": 8.5})
    ladder.record_curve(sitting, electra, electra.trunk, "trunk")
    shutil.rmtree(directory)
    again = ProgressLogger(directory, 4, 0, 8)
    again.scalars(2, {"masked_lm_loss": 9.0})
    again.scalars(4, {"masked_lm_loss": 8.25})
    again.scalars(6, {"masked_lm_loss": 8.0})
    ladder.record_curve(sitting, electra, electra.trunk, "trunk")
    lines = sitting.store.read("curves")
    assert [(r["step"], r["scalars"]["masked_lm_loss"]) for r in lines] == [
        (2, 9.0), (4, 8.5), (4, 8.25), (6, 8.0)]
    kept = records.latest(lines, "model", "step")
    assert sorted((r["step"], r["scalars"]["masked_lm_loss"]) for r in kept) == [
        (2, 9.0), (4, 8.25), (6, 8.0)]


def test_the_no_context_baselines_count_every_token_but_padding_and_separators(tmp_path):
    """The unigram distribution over the maskable tokens; and what a masked LM that reads no
    context scores in the training metrics: the kept token copied (15% of the masked
    positions), the unigram distribution at the [MASK]s."""
    import math

    import tensorflow as tf

    data = tmp_path / "data"
    (data / "pretrain_tfrecords").mkdir(parents=True)
    (data / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\n")
    rows = [[2, 5, 5, 3, 6, 3, 0, 0], [2, 5, 3, 5, 3, 0, 0, 0]] * 200  # a: 4, b: 1
    with tf.io.TFRecordWriter(str(data / "pretrain_tfrecords" /
                                  "pretrain_data.tfrecord-0-of-1")) as writer:
        for ids in rows:
            mask = [int(i != 0) for i in ids]
            feature = {name: tf.train.Feature(int64_list=tf.train.Int64List(value=values))
                       for name, values in (("input_ids", ids), ("input_mask", mask),
                                            ("segment_ids", [0] * 8))}
            writer.write(tf.train.Example(features=tf.train.Features(
                feature=feature)).SerializeToString())
    store = ladder_records.Store(str(tmp_path / "results"))
    ladder_data.record_unigram_baseline(store, str(data), 8)
    ladder_data.record_unigram_baseline(store, str(data), 8)  # a rerun appends nothing
    scores = ladder_report.pretraining_baselines(store.read("baseline"))
    assert len(store.read("baseline")) == 6
    unigram = scores[ladder_data.UNIGRAM]
    assert unigram["masked_lm_accuracy"] == pytest.approx(0.8)
    assert unigram["masked_lm_loss"] == pytest.approx(-(0.8 * math.log(0.8)
                                                        + 0.2 * math.log(0.2)))
    # One masked position per row (its 5 or 6 tokens x 0.15, rounded), drawn from the a, a, b
    # of the first row and the a, a of the second (an a 5 times in 6); a [MASK] there 85% of
    # the time. The copies are right; a [MASK] is right when it hides an a.
    from electra_tf.masking import REPLACE_WITH_MASK_PROB as MASKED
    kept = scores[ladder_data.KEPT_OR_UNIGRAM]
    assert kept["masked_lm_accuracy"] == pytest.approx(1 - MASKED + MASKED * 5 / 6, abs=0.03)
    assert kept["masked_lm_loss"] == pytest.approx(
        MASKED * (5 / 6 * -math.log(0.8) + 1 / 6 * -math.log(0.2)), abs=0.03)
    # At the [MASK]s alone both are the unigram distribution, right when it hides an a.
    assert unigram["masked_lm_accuracy_at_mask"] == pytest.approx(0.8)
    assert kept["masked_lm_accuracy_at_mask"] == pytest.approx(5 / 6, abs=0.04)
    # Records of the two first metrics alone (before the third was measured) get the third.
    first = [r for r in store.read("baseline") if r["metric"] != "masked_lm_accuracy_at_mask"]
    older = ladder_records.Store(str(tmp_path / "older"))
    older.append("baseline", first)
    ladder_data.record_unigram_baseline(older, str(data), 8)
    assert sorted(older.read("baseline"), key=str) == sorted(store.read("baseline"), key=str)
    # It reads the files as pretraining does: not a build whose move was interrupted.
    from electra_tf import data as data_lib
    (data / "pretrain_tfrecords" / "incomplete").mkdir()
    (data / "pretrain_tfrecords" / data_lib.PUBLISHING_SUMMARY).write_text("{}")
    with pytest.raises(data_lib.InputError, match="interrupted"):
        ladder_data.record_unigram_baseline(ladder_records.Store(str(tmp_path / "new")), str(data),
                                            8)


def test_finetune_and_probe_lines_carry_every_field():
    summary = {"trials": [{"pos": {"accuracy": 90.0, "unseen_accuracy": 40.0},
                           "pos-test": {"accuracy": 89.0, "unseen_accuracy": 38.0}}] * 2}
    key = {"objective": "mlm", "pretrain_steps": 9, "pretrain_flops": 1e10, "task": "pos",
           "learning_rate": 1e-3}
    lines = ladder.finetune_lines("pos", summary, None, key, {"wall_seconds": 3,
                                                               "cpu_seconds": 2})
    assert len(lines) == 2 * 2 * 2  # seeds x splits x metrics
    assert {(r["seed"], r["split"], r["metric"]) for r in lines} == {
        (s, sp, m) for s in (0, 1) for sp in ("dev", "test")
        for m in ("accuracy", "unseen_accuracy")}
    assert set(lines[0]) >= {"objective", "pretrain_steps", "pretrain_flops", "task", "seed",
                             "learning_rate", "split", "metric", "score"}
    sst = ladder.finetune_lines("sst", {"trials": [{"sst": {"accuracy": 60.0}}]},
                                [{"accuracy": 55.0}], dict(key, task="sst"),
                                {"wall_seconds": 3, "cpu_seconds": 2})
    assert [(r["split"], r["score"]) for r in sst] == [("dev", 60.0), ("test", 55.0)]
    with pytest.raises(ValueError, match="no test split"):
        ladder.finetune_lines("sst", {"trials": [{"sst": {"accuracy": 60.0}}]}, None, key,
                              {"wall_seconds": 3, "cpu_seconds": 2})
    probe = ladder.probe_lines({"model": "x", "sst": None, "pos": {
        "probe_train_accuracy": 95.0, "probe_dev_accuracy": 90.0,
        "probe_dev_unseen_accuracy": 41.0}}, {"objective": "mlm"})
    assert {(r["task"], r["split"], r["metric"]) for r in probe} == {
        ("pos", "train", "accuracy"), ("pos", "dev", "accuracy"),
        ("pos", "dev", "unseen_accuracy")}


# ----------------------------------------------------------------------------- the report

SWEEP = (1e-3, 3e-4)  # the hand-made records' learning rates


def _runs(objective, steps, flops, lr, dev, test, metric="unseen_accuracy", other=None):
    """A model's records over the whole SWEEP: `dev` and `test` at `lr`, and at the other
    rate `other` (dev, test), by default dev 10 points lower (never chosen) and the same test."""
    other_dev, other_test = other or ([d - 10 for d in dev], test)
    return [{"objective": objective, "pretrain_steps": steps, "pretrain_flops": flops,
             "task": "pos", "learning_rate": rate, "seed": seed, "split": split,
             "metric": metric, "score": score, "run_wall_seconds": 10, "run_cpu_seconds": 20}
            for rate, rate_dev, rate_test in ((lr, dev, test), (
                next(r for r in SWEEP if r != lr), other_dev, other_test))
            for split, scores in (("dev", rate_dev), ("test", rate_test))
            for seed, score in enumerate(scores)]


def _hand_made(tmp_path):
    lines = (
        # 3e-4 is best on test, not chosen on dev.
        _runs("none", 0, 0.0, 1e-3, [30] * 5, [30, 31, 32, 33, 34], other=([20] * 5, [90] * 5))
        # Budget 1: BERT clearly above random weights, ELECTRA not above BERT (their FLOPs
        # differ by 8%, less than half a step of each: the same budget).
        + _runs("electra", 10, 1e13, 1e-3, [31] * 5, [30, 32, 31, 33, 35])
        + _runs("mlm", 11, 1.08e13, 1e-3, [40] * 5, [40, 41, 42, 43, 44])
        # Budget 2: ELECTRA above both, beyond the noise.
        + _runs("electra", 200, 2e13, 1e-3, [50] * 5, [50, 51, 52, 53, 54])
        + _runs("mlm", 218, 2.002e13, 1e-3, [45] * 5, [44, 45, 46, 47, 51])
        # Budget 3: BERT only so far.
        + _runs("mlm", 436, 4e13, 1e-3, [35] * 5, [33, 36, 34, 35, 30]))
    path = tmp_path / "results"
    records.append(str(path / "finetune.jsonl"), lines)
    return path


def test_verdicts_follow_the_decision_rule_on_hand_made_records(tmp_path):
    path = _hand_made(tmp_path)
    scores = ladder_verdicts.select(records.read(str(path / "finetune.jsonl")), "pos",
                                    "unseen_accuracy")
    assert scores[("none", 0)].learning_rate == 1e-3  # chosen on dev, not test
    assert scores[("none", 0)].median == 32
    rows = ladder_verdicts.verdicts(scores)
    assert [round(v.flops / 1e13) for v in rows] == [1, 2, 4]
    first, second, third = rows
    assert first.better.objective == "mlm" and first.transfers
    assert first.transfer_p == pytest.approx(0.0079, abs=1e-4)
    electra = first.against_bert["electra"]
    assert electra.verdict == "BERT (MLM)" and electra.p < 0.05  # BERT is the higher
    assert second.better.objective == "electra" and second.transfers
    electra = second.against_bert["electra"]
    assert electra.verdict == "ELECTRA" and electra.p == pytest.approx(0.028, abs=1e-3)
    assert set(third.models) == {"mlm"} and third.better.objective == "mlm"
    assert not third.transfers and third.transfer_p > 0.05  # 34 against 32: noise
    assert [(v.transfer_verdict, {o: c.verdict for o, c in v.against_bert.items()})
            for v in rows] == [("transfers", {"electra": "BERT (MLM)"}),
                               ("transfers", {"electra": "ELECTRA"}), ("no difference", {})]
    table = ladder_report.verdict_table(rows)
    assert "| 1e+13 | 32.0 [31.0, 33.0] (30.0-35.0) (lr 0.001) (10) |" in table
    assert "| ELECTRA against BERT (p) |" in table.splitlines()[0]
    assert table.count("**transfers**") == 2 and "**BERT (MLM)** (" in table and \
        "**ELECTRA** (" in table
    # Below no pretraining beyond the noise, the rule says pretraining hurts.
    worse = {key: dataclasses.replace(value, test=[t - 30 for t in value.test])
             if key[0] == "mlm" else value for key, value in scores.items()
             if key[0] != "electra"}
    assert ladder_verdicts.verdicts(worse)[0].transfer_verdict == "hurts"


def _hand_made_and(tmp_path, lines):
    """The hand-made records and `lines`: their folder and pos unseen-word scores."""
    path = _hand_made(tmp_path)
    records.append(str(path / "finetune.jsonl"), lines)
    return path, ladder_verdicts.select(records.read(str(path / "finetune.jsonl")), "pos",
                                        "unseen_accuracy")


def test_every_objective_a_ladder_climbs_is_judged_against_bert_at_its_budget(tmp_path):
    # A second ELECTRA recipe at budgets 1 and 2 (FLOPs within half a step of the others'),
    # beyond the noise above BERT at the first and level with it at the second.
    _, scores = _hand_made_and(
        tmp_path, _runs("electra_half", 9, 1.04e13, 1e-3, [60] * 5, [60, 61, 62, 63, 64])
        + _runs("electra_half", 180, 2.01e13, 1e-3, [45] * 5, [44, 45, 46, 47, 51]))
    first, second, third = ladder_verdicts.verdicts(scores)
    assert set(first.models) == set(second.models) == {"electra", "electra_half", "mlm"}
    # The rule's transfer verdict still chooses between ELECTRA and BERT as written.
    assert first.better.objective == "mlm" and first.transfer_p == pytest.approx(0.0079, abs=1e-4)
    assert first.against_bert["electra_half"].verdict == "ELECTRA, generator 1/2"
    assert second.against_bert["electra_half"].verdict == "no difference"
    assert first.against_bert["electra"].verdict == "BERT (MLM)"
    # ... and against the paper's 1/4 generator: ahead at budget 1, behind at budget 2.
    assert first.against_electra["electra_half"].verdict == "ELECTRA, generator 1/2"
    assert second.against_electra["electra_half"].verdict == "ELECTRA"
    assert set(first.against_electra) == {"electra_half"}
    table = ladder_report.verdict_table([first, second, third])
    header = table.splitlines()[0]
    assert header.index("| ELECTRA (steps)") < header.index("| ELECTRA, generator 1/2 (steps)") \
        < header.index("| BERT (MLM) (steps)")
    assert header.endswith("| ELECTRA against BERT (p) | ELECTRA, generator 1/2 against BERT (p) "
                           "| ELECTRA, generator 1/2 against ELECTRA (p) |")
    # The budget BERT alone has reached shows no comparison yet.
    assert table.splitlines()[-1].endswith("| - (-) | - (-) | - (-) |")


def test_an_exact_tie_for_the_transfer_verdict_goes_to_electra(tmp_path):
    # At budget 3, an ELECTRA with BERT's very scores: the rule's tie-break names ELECTRA,
    # whichever of the two has fewer FLOPs.
    _, scores = _hand_made_and(tmp_path, _runs("electra", 400, 4.005e13, 1e-3, [35] * 5,
                                               [33, 36, 34, 35, 30]))
    assert ladder_verdicts.verdicts(scores)[2].better.objective == "electra"


def test_table5_objectives_are_compared_with_electra_at_its_steps(tmp_path):
    # At ELECTRA's 200 steps (budget 2): Replace MLM below it beyond the noise, All-Tokens MLM
    # level with it; their FLOPs are not BERT's, and they stay out of the rule's table.
    path, scores = _hand_made_and(
        tmp_path, _runs("replace_mlm", 200, 2.05e13, 1e-3, [40] * 5, [40, 41, 42, 43, 44])
        + _runs("all_tokens_mlm", 200, 2.5e13, 1e-3, [50] * 5, [50, 52, 51, 53, 55]))
    assert [set(v.models) for v in ladder_verdicts.verdicts(scores)] == [
        {"electra", "mlm"}, {"electra", "mlm"}, {"mlm"}]
    row, = ladder_verdicts.table5(scores)
    assert row.steps == row.reference_scores.pretrain_steps == 200
    assert set(row.models) == {"replace_mlm", "all_tokens_mlm"}
    assert row.against_reference["replace_mlm"].verdict == "ELECTRA"
    assert row.against_reference["replace_mlm"].p == pytest.approx(0.0079, abs=1e-4)
    assert row.against_reference["all_tokens_mlm"].verdict == "no difference"
    table = ladder_report.table5_table([row])
    assert table.splitlines()[0] == (
        "| steps | ELECTRA (FLOPs) | Replace MLM (FLOPs) | against ELECTRA (p) | "
        "All-Tokens MLM (FLOPs) | against ELECTRA (p) |")
    assert "| 200 | 52.0 [51.0, 53.0] (50.0-54.0) (lr 0.001) (2e+13) |" in table
    assert "ELECTRA 85.0, All-Tokens MLM 84.3" in table
    ladder_report.write(str(path), str(tmp_path / "report"))
    assert "## Table 5 at ELECTRA's steps" in (tmp_path / "report" / "ladder_results.md").read_text()


def test_a_model_whose_sweep_is_half_done_is_left_out_and_named(tmp_path):
    """A sitting can stop between one model's learning rates (or before its last seeds): its
    verdict waits for the whole sweep, and the report says it is under way."""
    lines = [line for line in _runs("electra_15", 200, 2e13, 1e-3, [40] * 5, [40] * 5)
             if line["learning_rate"] == 1e-3]  # 3e-4 not run yet
    lines += [line for line in _runs("replace_mlm", 200, 2e13, 1e-3, [40] * 5, [40] * 5)
              if line["seed"] < 3]  # two seeds missing
    path, scores = _hand_made_and(tmp_path, lines)
    every = records.read(str(path / "finetune.jsonl"))
    assert ladder_verdicts.incomplete(every, "pos", "unseen_accuracy") == [
        ("electra_15", 200), ("replace_mlm", 200)]
    assert ("electra_15", 200) not in scores and ("replace_mlm", 200) not in scores
    assert ladder_verdicts.table5(scores) == []
    ladder_report.write(str(path), str(tmp_path / "report"))
    text = (tmp_path / "report" / "ladder_results.md").read_text()
    assert "## Table 5 at ELECTRA's steps" not in text
    assert ("Fine-tuning sweeps not complete, left out of the tables of their task and metric "
            "above until each of their learning rates and seeds is in") in text
    assert text.count("ELECTRA 15% at 200 steps (pos unseen_accuracy); "
                      "Replace MLM at 200 steps (pos unseen_accuracy).") == 1


def test_the_tables_list_models_in_the_reports_order_not_by_name(tmp_path):
    _, scores = _hand_made_and(
        tmp_path, _runs("all_tokens_mlm", 200, 2.5e13, 1e-3, [50] * 5, [50] * 5)
        + _runs("replace_mlm", 200, 2.05e13, 1e-3, [40] * 5, [40] * 5))
    names = [line.split(" | ")[0][2:] for line in
             ladder_report.scores_table(scores).splitlines()[2:]]
    assert list(dict.fromkeys(names)) == ["ELECTRA", "Replace MLM", "All-Tokens MLM",
                                          "BERT (MLM)", "no pretraining"]


def test_a_table5_objective_ahead_of_electra_is_shown_and_collapses_are_named(tmp_path):
    # ELECTRA 15% at steps ELECTRA has not reached yet, and at ELECTRA's 10 steps with a tagger
    # collapsed to the most frequent tag (pos accuracy 24.0, the baseline 23.7).
    path, scores = _hand_made_and(
        tmp_path, _runs("electra_15", 9154, 9e14, 1e-3, [40] * 5, [40] * 5)
        + _runs("electra_15", 10, 1e13, 1e-3, [40] * 5, [40, 41, 42, 43, 44])
        + _runs("electra_15", 10, 1e13, 1e-3, [24] * 5, [24] * 5, metric="accuracy"))
    first, second = ladder_verdicts.table5(scores)
    assert first.steps == 10 and second.steps == 9154 and second.reference_scores is None
    assert first.against_reference["electra_15"].verdict == "ELECTRA 15%"
    assert second.against_reference == {}
    assert ladder_report.table5_table([first, second]).splitlines()[3].startswith(
        "| 9154 | - | 40.0 [40.0, 40.0] (40.0-40.0) (lr 0.001) (9e+14) | - (-) |")
    records.append(str(path / "baseline.jsonl"), [
        {"task": "pos", "split": "test", "metric": metric, "score": score}
        for metric, score in (("accuracy", 23.7), ("unseen_accuracy", 57.9))])
    ladder_report.write(str(path), str(tmp_path / "report"))
    text = (tmp_path / "report" / "ladder_results.md").read_text()
    assert "| ELECTRA 15% (pos accuracy 24.0 at lr 0.001) |" in text


def test_table5_with_the_half_generator_is_compared_with_electra_with_it(tmp_path):
    # ELECTRA with a 1/2 generator at its 9 steps, and ELECTRA 15% with that generator beside it
    # (below it beyond the noise); ELECTRA 15% with the 1/4 generator beside ELECTRA's 10 steps.
    path, scores = _hand_made_and(
        tmp_path, _runs("electra_half", 9, 1.04e13, 1e-3, [60] * 5, [60, 61, 62, 63, 64])
        + _runs("electra_15_half", 9, 1.04e13, 1e-3, [50] * 5, [50, 51, 52, 53, 54])
        + _runs("electra_15", 10, 1e13, 1e-3, [40] * 5, [40, 41, 42, 43, 44]))
    quarter, half = ladder_verdicts.table5(scores)
    assert (quarter.reference, quarter.steps, set(quarter.models)) == (
        "electra", 10, {"electra_15"})
    assert (half.reference, half.steps, set(half.models)) == (
        "electra_half", 9, {"electra_15_half"})
    assert half.reference_scores.objective == "electra_half"
    assert half.against_reference["electra_15_half"].verdict == "ELECTRA, generator 1/2"
    # Neither is in the rule's table; electra_half is, beside BERT at its FLOPs.
    assert all("electra_15_half" not in v.models for v in ladder_verdicts.verdicts(scores))
    first, second = ladder_report.table5_table([quarter, half]).split("\n\n")[:2]
    assert first.splitlines()[0].startswith("| steps | ELECTRA (FLOPs) | ELECTRA 15% (FLOPs) |")
    assert second.splitlines()[0] == (
        "| steps | ELECTRA, generator 1/2 (FLOPs) | ELECTRA 15%, generator 1/2 (FLOPs) | "
        "against ELECTRA, generator 1/2 (p) |")
    assert "| 9 | 62.0 [61.0, 63.0] (60.0-64.0) (lr 0.001) (1.04e+13) |" in second


def test_the_report_is_redrawn_from_the_records_alone(tmp_path):
    pytest.importorskip("matplotlib")
    path = _hand_made(tmp_path)
    records.append(str(path / "pretrain.jsonl"), [
        {"objective": "electra", "kind": "trunk", "pretrain_steps": 80, "finished": False,
         "wall_seconds": 3600, "cpu_seconds": 3600}])
    written = ladder_report.write(str(path), str(tmp_path / "report"))
    assert [pathlib.Path(p).name for p in written] == ["ladder_results.md", "ladder_curve.png"]
    text = (tmp_path / "report" / "ladder_results.md").read_text()
    assert text.startswith("# Ladder: results\n")  # its one record gives no shape
    assert "## The decision rule per budget (pos unseen_accuracy, test)" in text
    assert "| pretraining ELECTRA trunk | 1.00 | 1.00 |" in text
    assert (tmp_path / "report" / "ladder_curve.png").stat().st_size > 0
    # Another ladder's report beside it in the same folder (docs/): its own file names.
    ladder_report.main(["--results", str(path), "--report_dir",
                                  str(tmp_path / "report"), "--name", "ladder_mixed_wide"])
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == [
        "ladder_curve.png", "ladder_mixed_wide_curve.png", "ladder_mixed_wide_results.md",
        "ladder_results.md"]


def test_the_report_sets_each_discriminator_beside_the_bigram_detector(tmp_path):
    pytest.importorskip("matplotlib")
    path = _hand_made(tmp_path)
    records.append(str(path / "pretrain.jsonl"), [
        {"objective": "electra_half", "kind": "branch", "model": "wide_electra_half_90",
         "pretrain_steps": 90, "finished": True, "wall_seconds": 60, "cpu_seconds": 60}])
    auc = {"discriminator": [0.7, 0.8], "the token alone": [0.5, 0.52],
           "the token and its neighbours' bigrams": [0.9, 0.92],
           "bigrams and the discriminator": [0.95, 0.93]}
    other_seed = {name: [a + 0.01 for a in folds] for name, folds in auc.items()}
    records.append(str(path / "detection.jsonl"), [
        {"model": "wide_electra_half_90", "objective": "electra", "step": 90, "seed": seed,
         "positions": positions, "replaced_share": 0.12, "auc": aucs}
        for seed, positions, aucs in ((1, 1010, other_seed), (0, 1000, auc))])
    ladder_report.write(str(path), str(tmp_path / "report"))
    text = (tmp_path / "report" / "ladder_results.md").read_text()
    # One row for the model: the mean over both seeds' folds, the lowest and highest fold.
    assert ("| ELECTRA, generator 1/2 | 90 | 0, 1 | 1005 | 0.120 | 0.755 (0.700, 0.810) | "
            "0.515 (0.500, 0.530) | 0.915 (0.900, 0.930) | 0.945 (0.930, 0.960) |") in text


def test_the_report_tabulates_evaluated_checkpoints_with_each_objectives_own_metrics(tmp_path):
    pytest.importorskip("matplotlib")
    path = _hand_made(tmp_path)
    records.append(str(path / "eval.jsonl"), [
        {"model": "wide_all_tokens_mlm_90", "objective": "all_tokens_mlm", "step": 90,
         "metrics": {"num_examples": 256.0, "disc_auc": 0.7, "copy_probability": 0.88,
                     "all_tokens_mlm_fake_accuracy": 0.001,
                     "all_tokens_mlm_softmax_fake_accuracy": 0.066}},
        {"model": "wide_electra_90", "objective": "electra", "step": 90,
         "metrics": {"num_examples": 256.0, "disc_auc": 0.71,
                     "masked_lm_accuracy_at_mask": 0.0612}}])
    ladder_report.write(str(path), str(tmp_path / "report"))
    text = (tmp_path / "report" / "ladder_results.md").read_text()
    assert "## Checkpoints evaluated after pretraining" in text
    rows = [line for line in text.splitlines() if line.startswith("| wide_")]
    # In the report's order of objectives; a metric the objective does not have is "-".
    assert rows == ["| wide_electra_90 | ELECTRA | 90 | 256 | 0.061 | 0.710 | - | - | - | - |",
                    "| wide_all_tokens_mlm_90 | All-Tokens MLM | 90 | 256 | - | 0.700 | - | "
                    "0.001 | 0.066 | 0.880 |"]


def test_the_report_tabulates_the_gradient_split_at_each_weight(tmp_path):
    pytest.importorskip("matplotlib")
    path = _hand_made(tmp_path)
    batch = {"generator": {"gen": 0.6, "objective": 0.0, "dot": 0.0},
             "shared": {"gen": 0.8, "objective": 0.05, "dot": 0.02},
             "discriminator": {"gen": 0.0, "objective": 0.1, "dot": 0.0}}
    records.append(str(path / "gradients.jsonl"), [
        {"model": "wide_replace_mlm_90", "objective": "replace_mlm", "step": 90,
         "gen_weight": 1.0, "disc_weight": 1.0, "clip_norm": 1.0, "batches": [batch],
         "below_epsilon": {"50.0": {"generator": 0.5, "shared": 0.25, "discriminator": 0.0},
                           "1.0": {"generator": 0.125, "shared": 0.25, "discriminator": 0.0}},
         "adam_below_epsilon": {"generator": 0.1, "shared": 0.2, "discriminator": 0.0}}])
    ladder_report.write(str(path), str(tmp_path / "report"))
    text = (tmp_path / "report" / "ladder_results.md").read_text()
    assert "## Where the two losses meet" in text
    rows = [line for line in text.splitlines() if line.startswith("| wide_")]
    # Weight 1: norms sqrt(0.36 + 0.64 + 0.0025 + 2 * 0.02 + 0.01) = 1.026, clipped by
    # 1 / 1.026; weight 50: sqrt(0.36 + 0.64 + 6.25 + 100 * 0.02 + 25) = 5.85. The cosine is
    # 0.02 / (0.8 * 0.05). Adam's shares only at the trained weight.
    assert rows == [
        "| wide_replace_mlm_90 | Replace MLM | 90 | 1 | 1 | 1.03 | 0.975 | 0.0625 | 0.50 | "
        "0.125 (0.100) | 0.250 (0.200) | 0.000 (0.000) |",
        "| wide_replace_mlm_90 | Replace MLM | 90 | 1 | 50 | 5.85 | 0.171 | 3.12 | 0.50 | "
        "0.500 | 0.250 | 0.000 |"]


def test_the_costs_count_every_kind_of_run_once_and_say_which_went_untimed():
    pretrain = [{"objective": "mlm", "kind": "trunk", "cpu_seconds": 36, "wall_seconds": 18},
                *[{"objective": "electra", "kind": "trunk", "cpu_seconds": 3600,
                   "wall_seconds": 1800}] * 2,
                {"objective": "electra", "kind": "branch", "cpu_seconds": 72, "wall_seconds": 36}]
    # Fine-tuning and probe lines repeat their run's time on each metric's line.
    finetune = [{"objective": "electra", "pretrain_steps": 9, "task": "pos", "learning_rate": lr,
                 "metric": metric, "run_cpu_seconds": 720, "run_wall_seconds": 360}
                for lr in (1e-4, 3e-4) for metric in ("accuracy", "unseen_accuracy")]
    probe = [{"objective": "electra", "pretrain_steps": 9, "metric": metric,
              "run_cpu_seconds": 360, "run_wall_seconds": 180}
             for metric in ("accuracy", "unseen_accuracy")]
    probe.append({"objective": "mlm", "pretrain_steps": 9, "metric": "accuracy"})  # untimed
    detection = [{"seed": seed, "cpu_seconds": 36, "wall_seconds": 18} for seed in (0, 1)]
    evaluated = [{"model": "electra_9", "cpu_seconds": 36, "wall_seconds": 18}]
    table = ladder_report.costs_table(pretrain, finetune, probe, detection, evaluated)
    # In a run's order of life, objectives as the report's other tables list them.
    assert table.splitlines()[2:] == [
        "| pretraining ELECTRA trunk | 2.00 | 1.00 |",
        "| pretraining ELECTRA branch | 0.02 | 0.01 |",
        "| pretraining BERT (MLM) trunk | 0.01 | 0.01 |",
        "| fine-tuning pos | 0.40 | 0.20 |",
        "| probing (1 of 2 runs timed) | 0.10 | 0.05 |",
        "| judging discriminators against bigram counts | 0.02 | 0.01 |",
        "| evaluating checkpoints under do_eval | 0.01 | 0.01 |",
        "| **total** | 2.56 | 1.28 |"]


def test_a_reports_title_names_its_ladders_shape_when_the_records_agree_on_one():
    def line(hidden, batch=128):
        return {"hparams": {"train_batch_size": batch, "max_seq_length": 128,
                            "model_hparam_overrides": {"hidden_size": hidden,
                                                       "num_hidden_layers": 4}}}

    assert ladder_report.model_shape([line(256), line(256)]) == (
        "hidden 256, 4 layers, batch 128, seq 128")
    assert ladder_report.model_shape([line(256), line(128, 32)]) == ""
    assert ladder_report.model_shape([{"objective": "electra"}]) == ""
    assert ladder_report.model_shape([]) == ""


def test_several_ladders_share_one_curve(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    small, wide = _hand_made(tmp_path / "small"), _hand_made(tmp_path / "wide")
    drawn = []
    monkeypatch.setattr(ladder_report.report, "_save", lambda fig, path: drawn.append(
        (path, fig.axes[0].get_legend_handles_labels()[1])))
    ladder_report.main(["--combined", str(tmp_path / "both.png"),
                        "--ladder", f"small={small}", "--ladder", f"wide={wide}"])
    (path, labels), = drawn
    assert path == str(tmp_path / "both.png")
    # Each ladder's objectives and random weights, under its own label.
    for label in ("ELECTRA, small", "BERT (MLM), wide", "no pretraining, small",
                  "no pretraining, wide"):
        assert label in labels
    with pytest.raises(SystemExit):
        ladder_report.main(["--combined", str(tmp_path / "x.png"), "--ladder", str(small)])
    assert "--combined needs one --ladder LABEL=DIR or more" in capsys.readouterr().err


def test_a_variant_is_drawn_hollow_so_that_it_does_not_hide_its_recipes_point(
        tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    # The 1/2 generator with ELECTRA's very scores at budget 1: the two points coincide.
    path, _ = _hand_made_and(
        tmp_path, _runs("electra_half", 9, 1.04e13, 1e-3, [31] * 5, [30, 32, 31, 33, 35]))
    drawn = {}
    monkeypatch.setattr(ladder_report.report, "_save", lambda fig, _: drawn.update(
        zip(*reversed(fig.axes[0].get_legend_handles_labels()))))
    ladder_report.write(str(path), str(tmp_path / "report"))
    variant, recipe = (drawn[name].lines[0] for name in ("ELECTRA, generator 1/2", "ELECTRA"))
    assert variant.get_markerfacecolor() == "none"
    assert recipe.get_markerfacecolor() != "none"
    assert variant.get_markersize() > recipe.get_markersize()


def test_the_report_shows_where_each_budget_left_pretraining_against_the_unigram_level(
        tmp_path):
    pytest.importorskip("matplotlib")
    path = _hand_made(tmp_path)
    records.append(str(path / "pretrain.jsonl"), [
        {"objective": objective, "kind": "branch", "model": model, "pretrain_steps": steps,
         "finished": finished, "wall_seconds": 60, "cpu_seconds": 60}
        for objective, model, steps, finished in (("electra", "electra_100", 100, True),
                                                  ("mlm", "mlm_110", 110, True),
                                                  ("electra_half", "electra_half_120", 120,
                                                   False))])
    records.append(str(path / "curves.jsonl"), [
        {"objective": objective, "model": model, "kind": kind, "step": step,
         "pretrain_flops": step * 3e10, "scalars": scalars}
        for objective, model, kind, step, scalars in (
            ("electra", "trunk_electra", "trunk", 50, {"masked_lm_loss": 7.0, "disc_auc": 0.5}),
            # A branch stopped by a sitting before its budget's end is not shown.
            ("electra_half", "electra_half_120", "branch", 105, {"masked_lm_loss": 6.0}),
            ("electra", "electra_100", "branch", 90, {"masked_lm_loss": 6.5, "disc_auc": 0.6}),
            ("electra", "electra_100", "branch", 100, {"masked_lm_loss": 6.1, "disc_auc": 0.7}),
            ("mlm", "mlm_110", "branch", 110, {"masked_lm_loss": 5.9,
                                               "masked_lm_accuracy": 0.21,
                                               "masked_lm_accuracy_at_mask": 0.08}))])
    records.append(str(path / "baseline.jsonl"), [
        {"task": "pretraining", "baseline": name, "split": "train", "metric": metric,
         "score": score}
        for name, metric, score in (
            (ladder_data.UNIGRAM, "masked_lm_loss", 6.2),
            (ladder_data.UNIGRAM, "masked_lm_accuracy", 0.05),
            (ladder_data.UNIGRAM, "masked_lm_accuracy_at_mask", 0.05),
            (ladder_data.KEPT_OR_UNIGRAM, "masked_lm_loss", 5.3),
            (ladder_data.KEPT_OR_UNIGRAM, "masked_lm_accuracy", 0.19))])
    written = ladder_report.write(str(path), str(tmp_path / "report"))
    assert pathlib.Path(written[-1]).name == "ladder_pretraining.png"
    assert pathlib.Path(written[-1]).stat().st_size > 0
    text = (tmp_path / "report" / "ladder_results.md").read_text()
    assert "| ELECTRA | 100 | 3e+12 | 6.100 | - | - | 0.700 |" in text  # the branch's last step
    assert "| BERT (MLM) | 110 | 3.3e+12 | 5.900 | 0.210 | 0.080 | - |" in text
    assert "| ELECTRA, generator 1/2 |" not in text.split("## Pretraining")[1].split("##")[0]
    assert "| no context: unigram distribution | | | 6.200 | 0.050 | 0.050 | - |" in text
    assert ("| no context: the kept token, else the unigram distribution | | | 5.300 | 0.190 "
            "| - | - |") in text
    assert "trunk_electra" not in text


def test_the_pretraining_plot_draws_a_panel_for_each_scalar_the_curves_log(tmp_path,
                                                                             monkeypatch):
    pytest.importorskip("matplotlib")
    # Runs from before accuracy at [MASK] was logged: no empty panel for it.
    curves = [{"objective": "mlm", "model": "trunk_mlm", "kind": "trunk", "step": step,
               "pretrain_flops": step * 3e10,
               "scalars": {"masked_lm_loss": 6.0, "masked_lm_accuracy": 0.2}}
              for step in (100, 110)]
    titles = []
    monkeypatch.setattr(ladder_report.report, "_save", lambda fig, _: titles.extend(
        ax.get_title() for ax in fig.axes))
    ladder_report.plot_pretraining(curves, {}, str(tmp_path / "p.png"))
    assert titles == ["masked-LM loss (nats)", "masked-LM accuracy"]


def test_the_pretraining_plots_one_legend_sits_beside_the_panels_not_on_a_curve(tmp_path,
                                                                               monkeypatch):
    pytest.importorskip("matplotlib")
    curves = [{"objective": objective, "model": f"trunk_{objective}", "kind": "trunk",
               "step": step, "pretrain_flops": step * 3e10,
               "scalars": {"masked_lm_loss": 6.0, "masked_lm_accuracy": 0.2,
                           **({"disc_auc": 0.6} if objective == "electra" else {})}}
              for objective in ("electra", "mlm") for step in (100, 110)]
    baselines = {"unigram": {"masked_lm_loss": 6.7, "masked_lm_accuracy": 0.05}}
    figures = []
    monkeypatch.setattr(ladder_report.report, "_save", lambda fig, _: figures.append(fig))
    ladder_report.plot_pretraining(curves, baselines, str(tmp_path / "p.png"))
    fig, = figures
    fig.canvas.draw()
    legends = [(ax, ax.get_legend()) for ax in fig.axes if ax.get_legend()]
    assert len(legends) == 1
    ax, legend = legends[0]
    assert ax is fig.axes[-1]
    assert legend.get_window_extent().x0 > ax.get_window_extent().x1
    labels = [text.get_text() for text in legend.get_texts()]
    assert labels.count("ELECTRA") == 1 and labels.count("BERT (MLM)") == 1
    assert any(label.startswith("no context") for label in labels)
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_a_tagger_collapsed_to_the_most_frequent_tag_is_named_beside_its_verdict(tmp_path):
    """A pretrained tagger that tags every word NOUN scores the NOUN share of the unseen words,
    which can beat random weights on the rule's metric: the report names it."""
    path = _hand_made(tmp_path)
    records.append(str(path / "finetune.jsonl"),
                   _runs("mlm", 11, 1.08e13, 1e-3, [24] * 5, [23.5, 23.7, 24, 23.6, 23.8],
                         metric="accuracy")
                   + _runs("electra", 200, 2e13, 1e-3, [80] * 5, [80] * 5, metric="accuracy"))
    records.append(str(path / "baseline.jsonl"), [
        {"task": "pos", "baseline": "most frequent tag NOUN", "split": "test",
         "metric": metric, "score": score}
        for metric, score in (("accuracy", 23.7), ("unseen_accuracy", 57.9))])
    lines = records.read(str(path / "finetune.jsonl"))
    rows = ladder_verdicts.verdicts(ladder_verdicts.select(lines, "pos", "unseen_accuracy"))
    assert [ladder_verdicts.collapsed(v.models, lines, 23.7) for v in rows] == [
        ["BERT (MLM) (pos accuracy 23.7 at lr 0.001)"], [], []]
    ladder_report.write(str(path), str(tmp_path / "report"))
    text = (tmp_path / "report" / "ladder_results.md").read_text()
    assert "scores 23.7 on test and 57.9 on its unseen words" in text
    assert "| BERT (MLM) (pos accuracy 23.7 at lr 0.001) |" in text


def test_the_baselines_are_recorded_once_from_the_pos_task_files(tmp_path):
    data = tmp_path / "data"
    (data / "finetuning_data" / "pos").mkdir(parents=True)
    (data / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ndog\n")
    splits = {"train": "The DET\ndog NOUN\nbarks VERB\n\nA DET\ncat NOUN\n",
              "dev": "The DET\nfox NOUN\n", "test": "Dogs NOUN\nrun VERB\n"}
    for split, text in splits.items():
        (data / "finetuning_data" / "pos" / f"{split}.txt").write_text(text)
    store = ladder_records.Store(str(tmp_path / "results"))
    ladder_data.record_baselines(store, str(data))
    ladder_data.record_baselines(store, str(data))  # a rerun appends nothing
    scores = {(r["split"], r["metric"]): r["score"] for r in store.read("baseline")}
    assert len(store.read("baseline")) == 4
    # NOUN and DET are tied at 2 in train: the smaller name, DET, is the repeatable choice.
    assert scores == {("dev", "accuracy"): 50.0, ("dev", "unseen_accuracy"): 0.0,
                      ("test", "accuracy"): 0.0, ("test", "unseen_accuracy"): 0.0}


# ----------------------------------------------------------------------------- end to end

@pytest.mark.slow
def test_smoke_ladder_runs_the_pipeline_and_resumes(ladder_shared, tmp_path):
    pytest.importorskip("matplotlib")
    out, results = tmp_path / "out", tmp_path / "results"
    command = ["experiments/ladder.py", "--out", str(out), "--ladder", "smoke",
               "--shared_data", str(ladder_shared), "--results", str(results),
               "--report_dir", str(tmp_path / "report"), "--workers", "2"]
    first = run_script(*command, timeout=1800)
    assert "the ladder is done" in first.stdout
    pretrain = records.read(str(results / "pretrain.jsonl"))
    climbs = ladder.plan(ladder.LADDERS["smoke"], str(out / "data"))
    for climb in climbs:
        done = {(r["kind"], r["pretrain_steps"]) for r in pretrain
                if r["objective"] == climb.objective and r["finished"]}
        assert done == {(k, s) for rung in climb.rungs
                        for k, s in (("trunk", rung.fork), ("branch", rung.steps))}
        for rung in climb.rungs:  # each branch forked from the trunk at its decay's start
            changes = json.loads((out / "data" / "models" / rung.name /
                                  "hparam_changes.json").read_text())
            assert changes[0]["step"] == rung.fork
            assert changes[0]["changed"]["lr_decay_steps"] == [0, rung.decay_steps]
    finetune = records.read(str(results / "finetune.jsonl"))
    models = {(r["objective"], r["pretrain_steps"]) for r in finetune}
    assert models == {("none", 0)} | {(c.objective, r.steps) for c in climbs for r in c.rungs}
    trials = efficiency_plan.BUDGETS["smoke"].trials
    pos_test = [r for r in finetune if r["task"] == "pos" and r["split"] == "test"
                and r["metric"] == "unseen_accuracy"]
    assert len(pos_test) == len(models) * trials
    assert {r["task"] for r in finetune} == {"pos", "sst"}
    probe = records.read(str(results / "probe.jsonl"))
    assert {(r["objective"], r["pretrain_steps"]) for r in probe} == models
    assert any(r["task"] == "pos" and r["metric"] == "unseen_accuracy" for r in probe)
    # Every rung's checkpoint under do_eval, or the smoke text too short for a batch, said.
    evaluated = {r["model"] for r in records.read(str(results / "eval.jsonl"))}
    assert all(r.name in evaluated or f"{r.name} is not evaluated: " in first.stdout
               for c in climbs for r in c.rungs), first.stdout[-3000:]
    detection = records.read(str(results / "detection.jsonl"))  # ELECTRA's discriminators
    assert sorted((r["model"], r["step"], r["seed"]) for r in detection) == sorted(
        (r.name, r.steps, seed) for c in climbs if c.objective == "electra" for r in c.rungs
        for seed in ladder.DETECTION_SEEDS), first.stdout[-3000:]
    text = (tmp_path / "report" / "ladder_results.md").read_text()
    assert "## The decision rule per budget" in text
    assert (tmp_path / "report" / "ladder_curve.png").stat().st_size > 0

    second = run_script(*command, timeout=600)  # everything is recorded: nothing reruns
    assert not re.search(r"^\[[\d:]+\] (pretraining|fine-tuning|probed|evaluated) ",
                         second.stdout,
                         re.MULTILINE), second.stdout
    assert records.read(str(results / "finetune.jsonl")) == finetune
    assert re.search(r"the ladder is done", second.stdout)


def test_a_run_still_going_at_the_deadline_gets_sigterm_and_its_usage_is_kept(tmp_path):
    """run_pretraining.py writes a checkpoint on SIGTERM and exits 143; this stands in for it."""
    import time

    script = ("import signal, sys, time\n"
              "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n"
              "time.sleep(60)\n")
    start = time.time()
    with pytest.raises(efficiency.Stopped) as stopped:
        efficiency.run_logged([sys.executable, "-c", script], str(tmp_path / "log.txt"),
                              deadline=time.time() + 2)
    assert time.time() - start < 30
    assert set(stopped.value.usage) == {"wall_seconds", "cpu_seconds", "load_average"}
    # A run the signal reaches before it has installed its handler (still importing) ends by
    # the signal itself; it is stopped at the deadline all the same, not a failure.
    with pytest.raises(efficiency.Stopped):
        efficiency.run_logged([sys.executable, "-c", "import time; time.sleep(60)"],
                              str(tmp_path / "log3.txt"), deadline=time.time() + 0.5)
    # A run that ends before the deadline is not stopped.
    assert efficiency.run_logged([sys.executable, "-c", "pass"], str(tmp_path / "log2.txt"),
                                 deadline=time.time() + 600)["wall_seconds"] >= 0


@pytest.mark.parametrize("flags, message", [
    (["--hours", "0"], "--hours must be positive"),
    (["--max_rung", "8"], "--max_rung must be in [1, 7]"),
    (["--workers", "0"], "--workers must be at least 1"),
    (["--objectives", "electra,rtd"], "--objectives must name some of the ladder's electra,mlm"),
    (["--objectives", ","], "got none"),
])
def test_bad_flags_fail_naming_the_flag(flags, message, capsys):
    with pytest.raises(SystemExit):
        ladder.parse_args(["--out", "x", *flags])
    assert message in capsys.readouterr().err


def test_the_full_ladder_writes_its_records_into_the_repository():
    args = ladder.parse_args(["--out", "x"])
    assert args.results == str(REPO / "experiments" / "results" / "ladder")
    assert args.objectives == ("electra", "mlm")
    assert ladder.parse_args(["--out", "x", "--ladder", "mixed_wide", "--objectives",
                              "electra"]).objectives == ("electra",)
    assert ladder.parse_args(["--out", "x", "--ladder", "mixed_wide"]).objectives == (
        "mlm", "electra", "electra_half", "electra_w1", "electra_seed2", "electra_15",
        "replace_mlm", "all_tokens_mlm", "electra_15_half", "replace_mlm_half",
        "all_tokens_mlm_half", "replace_mlm_w50", "replace_mlm_seed2", "replace_mlm_w50_seed2",
        "replace_mlm_untied")
    assert ladder.parse_args(["--out", "x", "--ladder", "smoke"]).results.endswith(
        "x/results")


def test_the_weight_swapped_variants_climb_as_electra_and_replace_mlm_with_one_hparam_changed(
        tmp_path):
    """The weighting confound's two runs: ELECTRA at disc_weight 1 at ELECTRA's FLOPs, and
    Replace MLM at disc_weight 50 at ELECTRA's steps, every other hparam their objective's."""
    from electra_tf import config

    wide = ladder.LADDERS["mixed_wide"]
    (tmp_path / "vocab.txt").write_text("\n".join(f"t{i}" for i in range(8000)) + "\n")
    climbs = {c.objective: c for c in ladder.plan(wide, str(tmp_path))}
    for variant, objective, weight in [("electra_w1", "electra", 1.0),
                                       ("replace_mlm_w50", "replace_mlm", 50.0)]:
        climb, recipe = climbs[variant], climbs[objective]
        assert [(r.steps, r.fork) for r in climb.rungs] == [
            (r.steps, r.fork) for r in climbs["electra"].rungs]
        assert climb.trunk == f"pilot_wide_{variant}_lr0.0005_w500"
        hparams = ladder.pretraining_hparams(wide, climb, 1000, 0)
        built = config.from_hparams("h", str(tmp_path), hparams)
        assert (built.objective, built.disc_weight) == (objective, weight)
        default = config.from_hparams(
            "h", str(tmp_path), ladder.pretraining_hparams(wide, recipe, 1000, 0)).disc_weight
        assert default == 50.0 / weight  # each takes the other's
        assert {k: v for k, v in hparams.items() if k != "disc_weight"} == \
            ladder.pretraining_hparams(wide, recipe, 1000, 0)
    assert efficiency_plan.TABLE5_REFERENCE["replace_mlm_w50"] == "electra"
    assert efficiency_plan.NAMES["electra_w1"] == "ELECTRA, disc_weight 1"


def test_the_reseeded_runs_change_only_the_seed_and_climb_as_their_objectives(tmp_path):
    from electra_tf import config

    wide = ladder.LADDERS["mixed_wide"]
    (tmp_path / "vocab.txt").write_text("\n".join(f"t{i}" for i in range(8000)) + "\n")
    climbs = {c.objective: c for c in ladder.plan(wide, str(tmp_path))}
    for variant, objective in [("electra_seed2", "electra"), ("replace_mlm_seed2", "replace_mlm")]:
        climb, recipe = climbs[variant], climbs[objective]
        assert [(r.steps, r.fork) for r in climb.rungs] == [
            (r.steps, r.fork) for r in recipe.rungs]
        hparams = ladder.pretraining_hparams(wide, climb, 1000, 0)
        first = ladder.pretraining_hparams(wide, recipe, 1000, 0)
        assert (hparams["seed"], first["seed"]) == (2, efficiency_plan.PRETRAIN_SEED)
        assert {k: v for k, v in hparams.items() if k != "seed"} == \
            {k: v for k, v in first.items() if k != "seed"}
        assert config.from_hparams("h", str(tmp_path), hparams).seed == 2
    # Replace MLM's second run is judged against ELECTRA's second, at its steps.
    assert efficiency_plan.TABLE5_REFERENCE["replace_mlm_seed2"] == "electra_seed2"
    assert efficiency_plan.NAMES["electra_seed2"] == "ELECTRA, pretraining seed 2"


def test_each_run_is_judged_against_the_runs_its_recipe_changes_in_one_hparam(tmp_path):
    # ELECTRA's second seed level with its first; Replace MLM's second seed below its first
    # beyond the noise, and ahead of ELECTRA's second; Replace MLM at weight 50 from seed 2
    # beside both the runs it changes in one hparam.
    path, scores = _hand_made_and(
        tmp_path, _runs("electra_seed2", 10, 1e13, 1e-3, [31] * 5, [31, 32, 30, 33, 34])
        + _runs("replace_mlm", 10, 1.02e13, 1e-3, [60] * 5, [60, 61, 62, 63, 64])
        + _runs("replace_mlm_seed2", 10, 1.02e13, 1e-3, [50] * 5, [50, 51, 52, 53, 54])
        + _runs("replace_mlm_w50_seed2", 10, 1.02e13, 1e-3, [70] * 5, [70, 71, 72, 73, 74]))
    electra, replace, *weight_50 = ladder_verdicts.one_change(scores)
    assert (electra.variant, electra.base, electra.changed, electra.steps) == (
        "electra_seed2", "electra", "seed", 10)
    assert electra.comparison.verdict == "no difference"
    assert (replace.base, replace.changed) == ("replace_mlm", "seed")
    assert replace.comparison.verdict == "Replace MLM"
    assert replace.comparison.p == pytest.approx(0.0079, abs=1e-4)
    # replace_mlm_w50 has no records: only the seed-2 run at weight 1 is beside it.
    assert [(r.base, r.changed, r.comparison.verdict) for r in weight_50] == [
        ("replace_mlm_seed2", "disc_weight", "Replace MLM, disc_weight 50, pretraining seed 2")]
    first = ladder_verdicts.verdicts(scores)[0]
    assert first.against_electra["electra_seed2"].verdict == "no difference"
    row, = [r for r in ladder_verdicts.table5(scores) if r.reference == "electra_seed2"]
    assert row.against_reference["replace_mlm_seed2"].verdict == \
        "Replace MLM, pretraining seed 2"
    ladder_report.write(str(path), str(tmp_path / "report"))
    text = (tmp_path / "report" / "ladder_results.md").read_text()
    assert "## One change at a time (pos unseen_accuracy, test)" in text
    assert "| Replace MLM, pretraining seed 2 | Replace MLM | `seed` | 10 | 52.0 [51.0, 53.0] " \
        "(50.0-54.0) (lr 0.001) | 62.0 [61.0, 63.0] (60.0-64.0) (lr 0.001) | **Replace MLM** " \
        "(0.008) | -10.0 |" in text
    assert "| ELECTRA, pretraining seed 2 | ELECTRA | `seed` | 10 | 32.0 [31.0, 33.0] " \
        "(30.0-34.0) (lr 0.001) | " in text
    assert "| Replace MLM, disc_weight 50, pretraining seed 2 | Replace MLM, pretraining seed 2 " \
        "| `disc_weight` | 10 | " in text
    assert "| ELECTRA, pretraining seed 2 (FLOPs) |" in text  # its own Table 5


def test_the_run_after_the_seeds_changes_one_hparam_of_replace_mlm(tmp_path):
    """replace_mlm_untied: Replace MLM's hparams but embedding_sharing untied;
    replace_mlm_w50_seed2: replace_mlm_w50's but the seed; both at ELECTRA's steps."""
    from electra_tf import config

    wide = ladder.LADDERS["mixed_wide"]
    (tmp_path / "vocab.txt").write_text("\n".join(f"t{i}" for i in range(8000)) + "\n")
    climbs = {c.objective: c for c in ladder.plan(wide, str(tmp_path))}
    for variant, base, changed in [("replace_mlm_untied", "replace_mlm", "embedding_sharing"),
                                   ("replace_mlm_w50_seed2", "replace_mlm_w50", "seed")]:
        climb, recipe = climbs[variant], climbs[base]
        assert [(r.steps, r.fork) for r in climb.rungs] == [
            (r.steps, r.fork) for r in recipe.rungs]
        hparams = ladder.pretraining_hparams(wide, climb, 1000, 0)
        first = ladder.pretraining_hparams(wide, recipe, 1000, 0)
        assert {k: v for k, v in hparams.items() if k != changed} == \
            {k: v for k, v in first.items() if k != changed}
    assert efficiency_plan.one_change_bases("replace_mlm_untied") == [
        ("replace_mlm", "embedding_sharing")]
    built = config.from_hparams("h", str(tmp_path), ladder.pretraining_hparams(
        wide, climbs["replace_mlm_untied"], 1000, 0))
    assert (built.objective, built.embedding_sharing, built.disc_weight) == (
        "replace_mlm", "untied", 1.0)
    built = config.from_hparams("h", str(tmp_path), ladder.pretraining_hparams(
        wide, climbs["replace_mlm_w50_seed2"], 1000, 0))
    assert (built.objective, built.seed, built.disc_weight) == ("replace_mlm", 2, 50.0)
    assert efficiency_plan.NAMES["replace_mlm_untied"] == "Replace MLM, embeddings untied"
    assert efficiency_plan.TABLE5_REFERENCE["replace_mlm_w50_seed2"] == "electra_seed2"


def test_efficiency_plan_docstring_examples():
    import doctest

    result = doctest.testmod(efficiency_plan)
    assert result.attempted > 0 and result.failed == 0


def test_the_weight_swapped_variants_are_judged_against_electra(tmp_path):
    # ELECTRA at loss weight 1 at ELECTRA's budget-1 FLOPs (ahead of it beyond the noise), and
    # Replace MLM at loss weight 50 at ELECTRA's 10 steps (level with it).
    _, scores = _hand_made_and(
        tmp_path, _runs("electra_w1", 10, 1e13, 1e-3, [60] * 5, [60, 61, 62, 63, 64])
        + _runs("replace_mlm_w50", 10, 1.02e13, 1e-3, [31] * 5, [30, 32, 31, 33, 35]))
    first = ladder_verdicts.verdicts(scores)[0]
    assert "replace_mlm_w50" not in first.models  # at ELECTRA's steps, not in the rule's table
    assert first.against_electra["electra_w1"].verdict == "ELECTRA, disc_weight 1"
    assert first.against_bert["electra_w1"].verdict == "ELECTRA, disc_weight 1"
    assert "| ELECTRA, disc_weight 1 against ELECTRA (p) |" in \
        ladder_report.verdict_table([first]).splitlines()[0]
    row, = [r for r in ladder_verdicts.table5(scores) if r.reference == "electra"]
    assert (row.steps, set(row.models)) == (10, {"replace_mlm_w50"})
    assert row.against_reference["replace_mlm_w50"].verdict == "no difference"
