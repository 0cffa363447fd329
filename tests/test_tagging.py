"""Chunking (CoNLL-2000): reading, the BIOES label set, first-wordpiece features, conlleval's
chunk F1 against hand counts, and an end-to-end run that learns its sentences."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from conftest import TEST_DATA, TINY_FINETUNING
from electra_tf.finetuning import tagging
from electra_tf.finetuning.config import from_hparams
from electra_tf.finetuning.task import DataError

CHUNK_SAMPLE = TEST_DATA / "chunk_sample.txt"


def test_reads_conll_sentences(tmp_path):
    sentences = tagging.read_conll(str(CHUNK_SAMPLE))
    assert len(sentences) == 12 and [s.eid for s in sentences] == list(range(12))
    first = sentences[0]
    assert first.words == ("The", "cat", "sat", "on", "the", "mat", ".")
    assert first.pos[:3] == ("DT", "NN", "VBD")
    assert first.tags == ("B-NP", "I-NP", "B-VP", "B-PP", "B-NP", "I-NP", "O")
    # -DOCSTART- lines and runs of blank lines are skipped; no final blank line is needed.
    path = tmp_path / "x.txt"
    path.write_text("-DOCSTART- -X- O\n\n\nGo VB B-VP\nhome NN B-NP\n\n\nNow RB B-ADVP")
    assert [s.tags for s in tagging.read_conll(str(path))] == [("B-VP", "B-NP"), ("B-ADVP",)]


@pytest.mark.parametrize("line, message", [
    ("word NN\n", "2 fields, expected `word POS chunk-tag`"),
    ("word NN NP\n", "chunk tag 'NP' is not O or B-/I-/E-/S-"),
    ("word NN B-\n", "chunk tag 'B-' is not O"),
])
def test_bad_lines_name_the_file_and_line(tmp_path, line, message):
    path = tmp_path / "train.txt"
    path.write_text("The DT B-NP\n" + line)
    with pytest.raises(DataError, match=rf"train\.txt:2: {message}"):
        tagging.read_conll(str(path))
    with pytest.raises(DataError, match="does not exist"):
        tagging.read_conll(str(tmp_path / "missing.txt"))


def test_chunks_follow_conlleval():
    # I- after O or after another type starts a chunk; E- ends one; S- is one word.
    assert tagging.chunks(["B-NP", "I-NP", "O", "I-VP", "I-NP", "E-NP", "I-NP", "S-PP"]) == [
        ("NP", 0, 1), ("VP", 3, 3), ("NP", 4, 5), ("NP", 6, 6), ("PP", 7, 7)]
    spans = [("NP", 0, 1), ("VP", 2, 2), ("PP", 3, 5)]
    assert tagging.encode(spans, 7, "BIOES") == ["B-NP", "E-NP", "S-VP", "B-PP", "I-PP",
                                                 "E-PP", "O"]
    assert tagging.encode(spans, 7, "IOB2") == ["B-NP", "I-NP", "B-VP", "B-PP", "I-PP",
                                                "I-PP", "O"]
    assert tagging.chunks(tagging.encode(spans, 7, "BIOES")) == spans


def test_chunk_f1_against_hand_counts():
    gold = [["B-NP", "I-NP", "O", "B-VP", "B-PP", "B-NP", "I-NP"],
            ["B-NP", "I-NP", "I-NP", "B-VP", "O"]]
    predicted = [
        # NP(0,1), VP(3,3) (I- after O starts it), PP(4,4), NP(5,6) (the type changes): all 4
        # right. The original's own span reader would read PP(4,6) here.
        ["B-NP", "I-NP", "O", "I-VP", "B-PP", "I-NP", "I-NP"],
        # NP(0,1), NP(2,2), VP(3,4): none right.
        ["B-NP", "I-NP", "B-NP", "B-VP", "I-VP"],
    ]
    # 6 gold chunks, 7 predicted, 4 correct.
    precision, recall = 4 / 7, 4 / 6
    assert tagging.score(gold, predicted) == pytest.approx({
        "precision": 100 * precision, "recall": 100 * recall,
        "f1": 100 * 2 * precision * recall / (precision + recall)})
    assert tagging.score(gold, gold) == {"precision": 100.0, "recall": 100.0, "f1": 100.0}
    assert tagging.score(gold, [["O"] * 7, ["O"] * 5]) == {"precision": 0.0, "recall": 0.0,
                                                          "f1": 0.0}


def test_the_baseline_is_the_most_frequent_tag_of_the_fitted_split():
    from electra_tf.finetuning.task import SplitData

    task = tagging.TASKS[0]
    sentence = lambda eid, tags: tagging.Sentence(eid, tuple("w" * len(tags)),  # noqa: E731
                                                  tuple("NN" * len(tags)), tuple(tags))
    fit = SplitData(task, "train", {}, [sentence(0, ["B-NP", "I-NP", "B-NP", "O"]),
                                        sentence(1, ["B-NP", "B-VP"])])
    dev = SplitData(task, "dev", {}, [sentence(0, ["B-NP", "O", "B-NP", "I-NP"])])
    baseline = task.baseline(None, dev, fit, None)
    # B-NP on every word: four one-word chunks, one of them gold's (0, 0); gold has two.
    assert baseline.predicts == "most frequent tag 'B-NP' of train"
    assert baseline.metrics == pytest.approx({"precision": 25.0, "recall": 50.0,
                                              "f1": 100 / 3})


@pytest.fixture
def chunk_dir(finetuning_dir):
    directory = finetuning_dir / "finetuning_data" / "chunk"
    directory.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        shutil.copy(CHUNK_SAMPLE, directory / f"{split}.txt")
    return finetuning_dir


CHUNK_HPARAMS = {**TINY_FINETUNING, "task_names": ["chunk"], "train_batch_size": 4}


def test_labels_and_first_wordpiece_features(chunk_dir):
    from electra_tf.finetuning import trainer

    config = from_hparams("tiny", str(chunk_dir), {**CHUNK_HPARAMS, "max_seq_length": 10})
    assert config.max_seq_length == 10  # the user's value beats the task's 256
    task = tagging.ChunkTask("chunk")
    labels = task.labels(config)
    # The BIOES tags that occur in the files, sorted (no I-PP: "because of" is B-PP E-PP).
    assert labels == ("B-ADJP", "B-NP", "B-PP", "B-VP", "E-ADJP", "E-NP", "E-PP", "E-VP",
                      "I-NP", "I-VP", "O", "S-ADVP", "S-NP", "S-PP", "S-PRT", "S-SBAR", "S-VP")
    tokenizer = trainer.make_tokenizer(config)
    data = task.load(config, "dev", tokenizer)
    arrays = data.arrays
    # "The cat sat on the mat ." : one wordpiece a word, [CLS] first.
    first = data.examples[0]
    assert list(arrays["tag_positions"][0, :7]) == [1, 2, 3, 4, 5, 6, 7]
    assert [labels[i] for i in arrays["tag_labels"][0, :7]] == [
        "B-NP", "E-NP", "S-VP", "S-PP", "B-NP", "E-NP", "O"]
    assert arrays["tag_mask"][0].sum() == len(first.words)
    assert arrays["input_ids"][0, 8] == tokenizer.vocab["[SEP]"]
    assert (arrays["segment_ids"][0, :9] == 1).all() and arrays["segment_ids"][0, 9:].sum() == 0
    # Sentences longer than 10 tokens are cut: their last words have no position.
    lengths = arrays["tag_mask"].sum(-1)
    assert lengths.max() == 8 and [len(s.words) for s in data.examples][4] == 10
    # Every word's position holds its first wordpiece.
    pieces = tokenizer.tokenize_to_ids(["investors"])[0]
    row = [s.words[0] for s in data.examples].index("Investors")
    assert arrays["input_ids"][row, arrays["tag_positions"][row, 0]] == pieces[0]


def test_predictions_past_the_cut_are_o_and_counted(chunk_dir):
    from electra_tf.finetuning import trainer

    config = from_hparams("tiny", str(chunk_dir), {**CHUNK_HPARAMS, "max_seq_length": 8})
    task = tagging.ChunkTask("chunk")
    data = task.load(config, "dev", trainer.make_tokenizer(config))
    labels = task.labels(config)
    # Logits that predict every word's gold BIOES tag where it has a position.
    outputs = np.zeros((len(data), 8, len(labels)), np.float32)
    for row in range(len(data)):
        for word, position in enumerate(data.arrays["tag_positions"][row]):
            if data.arrays["tag_mask"][row, word]:
                outputs[row, position, data.arrays["tag_labels"][row, word]] = 10.0
    predicted = task.predicted_tags(config, data, outputs)
    assert [len(tags) for tags in predicted] == [len(s.words) for s in data.examples]
    gold = [s.tags for s in data.examples]
    # "The company plans to hire 200 | people next year .": 6 words fit in 8 tokens.
    assert predicted[4] == ["B-NP", "I-NP", "B-VP", "I-VP", "I-VP", "B-NP", "O", "O", "O", "O"]
    assert gold[4][5:] == ("B-NP", "I-NP", "B-NP", "I-NP", "O")
    assert tagging.score(gold, predicted)["recall"] < 100.0  # the cut words' chunks count


@pytest.mark.slow
def test_chunking_end_to_end_learns_its_sentences(chunk_dir):
    """Trained on the sample's sentences, the model chunks them (the whole path: BIOES labels,
    first-wordpiece gathering, the loss, decoding, conlleval's F1); the test file's
    predictions are written in conlleval's format."""
    import run_finetuning

    hparams = {**CHUNK_HPARAMS, "max_seq_length": 32, "num_train_epochs": 40,
               "layerwise_lr_decay": 0.0, "log_steps": 200, "write_test_outputs": True}
    results = run_finetuning.run(from_hparams("tiny", str(chunk_dir), hparams))
    assert set(results) == {"chunk"} and set(results["chunk"]) == {"precision", "recall", "f1"}
    assert results["chunk"]["f1"] >= 80.0  # chance: far below
    model_dir = chunk_dir / "models" / "tiny"
    written = (model_dir / "test_predictions" / "chunk_trial_1" / "chunk.txt").read_text()
    lines = written.split("\n")
    assert lines[0].split(" ")[:3] == ["The", "DT", "B-NP"] and len(lines[0].split()) == 4
    assert lines[7] == ""  # a blank line after each sentence
    predicted = [line.split()[3] for line in lines if line]
    gold = [line.split()[2] for line in lines if line]
    assert len(predicted) == sum(len(s.words) for s in tagging.read_conll(str(CHUNK_SAMPLE)))
    assert set(predicted) <= {"O"} | {f"{p}-{kind}" for p in "BI" for kind in (
        "NP", "VP", "PP", "ADVP", "ADJP", "SBAR", "PRT")}  # IOB2, as conlleval reads it
    assert np.mean([p == g for p, g in zip(predicted, gold)]) >= 0.8
    dev = model_dir / "results" / "chunk_predictions" / "chunk_1" / "chunk.txt"
    assert dev.read_text() == written  # the same sentences in dev and test here
    # The trial's prediction file holds each word's tag probabilities: an ensemble of the
    # trial with itself scores what the trial scored.
    from electra_tf.finetuning import ensemble

    outputs = str(model_dir / "results" / "chunk_outputs_1.npz")
    report = ensemble.run([outputs, outputs], [0.5, 0.5], str(chunk_dir / "ensemble"), {})
    assert report["tasks"]["chunk"]["splits"]["chunk"]["ensemble"] == \
        pytest.approx(results["chunk"])
    assert (chunk_dir / "ensemble" / "test_predictions" / "chunk.txt").read_text() == written
