"""GLUE tasks: the readers (columns, headers, eids, labels), metrics, submission files, bad
input, and the same examples from a tensorflow-datasets data_dir prepared offline."""

from __future__ import annotations

import importlib.resources
import math
import sys
import warnings

import numpy as np
import pytest
import tensorflow as tf

from conftest import TEST_DATA
from electra_tf.finetuning import glue
from electra_tf.finetuning.glue import DataError, Example

SNIPPETS = TEST_DATA / "movie_review_snippets.tsv"

# Hand-made sentence pairs; the quotes must stay text (GLUE's files are not quoted CSV).
PAIRS = [
    ("A man is playing a guitar.", "A man plays the guitar."),
    ("The cat sat on the mat.", "A dog ran through the park."),
    ("Stocks fell sharply on Monday.", "Markets dropped at the start of the week."),
    ('He said "hello to everyone.', "Nobody said anything."),
    ("The bank raised interest rates.", "Borrowing became more expensive."),
    ("She is reading a book.", "A woman reads."),
    ("Two kids are playing soccer.", "Children play football."),
    ("The meeting was cancelled.", "The meeting took place as planned."),
    ("How do I learn Python?", "What is the best way to learn Python?"),
    ("Where is the Eiffel Tower?", "The Eiffel Tower is in Paris."),
    ("A plane is taking off.", "An air plane is taking off."),
    ("The 'quick' fox jumped.", "A fox jumped quickly."),
    ("It rained all day.", "The weather was dry."),
    ("The company hired 200 people.", "The company grew its workforce."),
    ("Every dog barks.", "Some dog barks."),
    ("The door is open.", "The door is not closed."),
]
# Where each file's rows start in PAIRS and how many it has.
SLICES = {"train": (0, 4), "dev": (4, 3), "dev_matched": (4, 3), "dev_mismatched": (7, 3),
          "test": (10, 2), "test_matched": (10, 2), "test_mismatched": (12, 2), "AX": (14, 2)}
LABELS = {"cola": ["1", "0"], "mrpc": ["1", "0", "0"], "sts": ["5.000", "0.250", "3.800", "1.6"],
          "qqp": ["0", "1"], "mnli": ["neutral", "contradiction", "entailment"],
          "qnli": ["not_entailment", "entailment"], "rte": ["entailment", "not_entailment"],
          "wnli": ["1", "0"]}
FILES = {"mnli": ["train", "dev_matched", "dev_mismatched", "test_matched", "test_mismatched"],
         "ax": ["AX"]}
SINGLE_SENTENCE = ("cola", "sst")

_MNLI = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
         "sentence1_parse\tsentence2_parse\tsentence1\tsentence2")
_STS = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
_PAIR = "index\tsentence1\tsentence2"
# GLUE's headers: (labelled files, test files); None: no header.
HEADERS = {
    "cola": (None, "index\tsentence"),
    "sst": ("sentence\tlabel", "index\tsentence"),
    "mrpc": ("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
             "index\t#1 ID\t#2 ID\t#1 String\t#2 String"),
    "sts": (_STS + "\tscore", _STS),
    "qqp": ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", "id\tquestion1\tquestion2"),
    "qnli": ("index\tquestion\tsentence\tlabel", "index\tquestion\tsentence"),
    "rte": (_PAIR + "\tlabel", _PAIR),
    "wnli": (_PAIR + "\tlabel", _PAIR),
    "ax": (None, _PAIR),
}


def _header(task: str, file: str) -> str | None:
    if task == "mnli":
        if file.startswith("test"):
            return _MNLI
        return _MNLI + ("\tlabel1\tgold_label" if file == "train" else
                        "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label")
    return HEADERS[task][_unlabelled(file)]


def _unlabelled(file: str) -> bool:
    return file.startswith("test") or file == "AX"


def _row(task: str, file: str, i: int, a: str, b: str | None, y: str | None) -> list[str]:
    """Row i as GLUE writes it (y None in test files)."""
    if task == "cola":  # [source, label, original label, sentence]
        return [str(i), a] if y is None else ["gj04", y, "" if y == "1" else "*", a]
    if task == "sst":
        return [str(i), a] if y is None else [a, y]
    if task == "mrpc":
        return [str(i) if y is None else y, str(1000 + i), str(2000 + i), a, b]
    if task == "sts":
        row = [str(i), "main-captions", "MSRvid", "2012test", f"{i:04d}", "none", "none", a, b]
        return row if y is None else row + [y]
    if task == "qqp":
        return [str(i), a, b] if y is None else [str(i), str(2 * i + 1), str(2 * i + 2), a, b, y]
    if task == "mnli":
        row = [str(i), str(100 + i), f"{100 + i}e", "fiction", f"( {a} )", f"( {b} )",
               f"(ROOT {a})", f"(ROOT {b})", a, b]
        if y is None:
            return row
        return row + ([y] if file == "train" else [y, y, "neutral", y, y]) + [y]
    return [str(i), a, b] + ([] if y is None else [y])  # qnli, rte, wnli, ax


def _snippets() -> list[tuple[str, str]]:
    """Real sentences with SST-2 labels: score > 0 positive "1", < 0 negative "0"."""
    rows = []
    for line in SNIPPETS.read_text(encoding="utf-8").splitlines():
        _, score, sentence = line.split("\t")
        if float(score) != 0:
            rows.append((sentence, "1" if float(score) > 0 else "0"))
        if len(rows) == 16:
            return rows


def _source(task: str, file: str) -> list[tuple[str, str | None, str | None]]:
    """(text a, text b, label) of each row of a file."""
    start, count = SLICES[file]
    if task == "sst":
        rows = [(s, None, y) for s, y in _snippets()[start:start + count]]
    else:
        labels = LABELS.get(task, [None])
        rows = [(a, None if task in SINGLE_SENTENCE else b, labels[i % len(labels)])
                for i, (a, b) in enumerate(PAIRS[start:start + count])]
    return [(a, b, None if _unlabelled(file) else y) for a, b, y in rows]


def write_tsv(path, rows: list[list[str]], header: str | None = None, newline: str = "\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ([header] if header else []) + ["\t".join(row) for row in rows]
    path.write_bytes(newline.join(lines).encode("utf-8") + newline.encode())
    return path


def write_task(directory, task: str) -> None:
    """All of a task's files in GLUE's layout."""
    for file in FILES.get(task, ["train", "dev", "test"]):
        rows = [_row(task, file, i, a, b, y) for i, (a, b, y) in enumerate(_source(task, file))]
        write_tsv(directory / f"{file}.tsv", rows, _header(task, file))


def expected(task: str, file: str) -> list[Example]:
    return [Example(i, a, b, float(y) if task == "sts" and y is not None else y)
            for i, (a, b, y) in enumerate(_source(task, file))]


@pytest.fixture
def glue_dir(tmp_path):
    """DATA_DIR/finetuning_data with every task's files, and GLUE's ax/AX.tsv."""
    root = tmp_path / "finetuning_data"
    for task in [*glue.TASKS, "ax"]:
        write_task(root / task, task)
    return root


SPLIT_FILES = {"mnli": {"train": "train", "dev": "dev_matched", "dev_mismatched": "dev_mismatched",
                        "test": "test_matched", "test_mismatched": "test_mismatched"}}
READS = [(task, split) for task in LABELS.keys() | {"sst"}
         for split in SPLIT_FILES.get(task, {"train": 0, "dev": 0, "test": 0})]


@pytest.mark.parametrize("task,split", sorted(READS))
def test_reads_each_split(glue_dir, task, split):
    file = SPLIT_FILES.get(task, {}).get(split, split)
    examples = glue.get_task(task).read(str(glue_dir / task), split, double_unordered=False)
    assert examples == expected(task, file)
    assert [e.eid for e in examples] == list(range(len(examples)))


def test_reads_literal_values(glue_dir):
    """A few values spelled out, independent of the helpers above."""
    cola = glue.get_task("cola").read(str(glue_dir / "cola"), "train")  # no header: row 0 kept
    assert cola[0] == Example(0, "A man is playing a guitar.", None, "1")
    assert cola[1] == Example(1, "The cat sat on the mat.", None, "0")
    sst = glue.get_task("sst").read(str(glue_dir / "sst"), "train")
    assert sst[0].text_a.startswith("The Rock is destined") and sst[0].label == "1"
    assert sst[2] == Example(2, "Effective but too tepid biopic", None, "0")
    mrpc = glue.get_task("mrpc").read(str(glue_dir / "mrpc"), "train", double_unordered=False)
    assert mrpc[3] == Example(3, 'He said "hello to everyone.', "Nobody said anything.", "1")
    sts = glue.get_task("sts").read(str(glue_dir / "sts"), "train", double_unordered=False)
    assert [e.label for e in sts] == [5.0, 0.25, 3.8, 1.6]
    mnli = glue.get_task("mnli").read(str(glue_dir / "mnli"), "dev")  # dev_matched.tsv
    assert mnli[0] == Example(0, "The bank raised interest rates.",
                              "Borrowing became more expensive.", "neutral")
    mismatched = glue.get_task("mnli").read(str(glue_dir / "mnli"), "dev_mismatched")
    assert mismatched[0].text_a == "The meeting was cancelled."
    qqp_test = glue.get_task("qqp").read(str(glue_dir / "qqp"), "test")
    assert qqp_test[1] == Example(1, "The 'quick' fox jumped.", "A fox jumped quickly.", None)


def test_quotes_are_text_and_crlf_is_dropped(tmp_path):
    rows = [['"Quoted" at the start', "1"], ['an unbalanced "quote', "0"], ["it's fine", "1"]]
    write_tsv(tmp_path / "train.tsv", rows, "sentence\tlabel", newline="\r\n")
    examples = glue.get_task("sst").read(str(tmp_path), "train")
    assert [(e.text_a, e.label) for e in examples] == [tuple(row) for row in rows]


def test_mnli_diagnostic_default_location(glue_dir):
    # GLUE's own layout: finetuning_data/ax/AX.tsv beside finetuning_data/mnli/.
    for data_dir in (str(glue_dir / "mnli"), str(glue_dir / "mnli") + "/"):
        assert glue.get_task("mnli").read(data_dir, "diagnostic") == expected("ax", "AX")


@pytest.mark.parametrize("location", ["mnli/diagnostic.tsv", "mnli/AX.tsv", "ax/AX.tsv"])
def test_mnli_diagnostic_locations(tmp_path, location):
    rows = [_row("ax", "AX", i, a, b, None) for i, (a, b, _) in enumerate(_source("ax", "AX"))]
    write_tsv(tmp_path / location, rows, _PAIR)
    (tmp_path / "mnli").mkdir(exist_ok=True)
    assert glue.get_task("mnli").read(str(tmp_path / "mnli"), "diagnostic") == expected("ax", "AX")


def test_mnli_diagnostic_prefers_the_originals_name(glue_dir):
    """mnli/diagnostic.tsv, then mnli/AX.tsv, then ax/AX.tsv (which glue_dir has)."""
    mnli = glue.get_task("mnli")
    write_tsv(glue_dir / "mnli" / "AX.tsv", [["0", "GLUE's name.", "Read second."]], _PAIR)
    assert mnli.read(str(glue_dir / "mnli"), "diagnostic") == [
        Example(0, "GLUE's name.", "Read second.", None)]
    write_tsv(glue_dir / "mnli" / "diagnostic.tsv", [["0", "Original name.", "Read first."]],
              _PAIR)
    assert mnli.read(str(glue_dir / "mnli"), "diagnostic") == [
        Example(0, "Original name.", "Read first.", None)]


def test_splits():
    for name, task in glue.TASKS.items():
        if name == "mnli":
            assert task.dev_splits() == ["dev", "dev_mismatched"]
            assert task.test_splits() == ["test", "test_mismatched", "diagnostic"]
        else:
            assert task.dev_splits() == ["dev"] and task.test_splits() == ["test"]


@pytest.mark.parametrize("task", ["mrpc", "sts"])
def test_double_unordered_swaps_training_pairs(glue_dir, task):
    originals = expected(task, "train")
    examples = glue.get_task(task).read(str(glue_dir / task), "train")
    assert examples[:4] == originals
    assert examples[4:] == [Example(4 + e.eid, e.text_b, e.text_a, e.label) for e in originals]
    assert glue.get_task(task).read(str(glue_dir / task), "train",
                                    double_unordered=False) == originals
    assert glue.get_task(task).read(str(glue_dir / task), "dev") == expected(task, "dev")


@pytest.mark.parametrize("task", ["rte", "qqp", "mnli", "qnli", "wnli"])
def test_other_pair_tasks_are_not_doubled(glue_dir, task):
    assert len(glue.get_task(task).read(str(glue_dir / task), "train")) == 4


def test_labels_and_label_ids():
    assert {name: task.labels for name, task in glue.TASKS.items()} == {
        "cola": ("0", "1"), "sst": ("0", "1"), "mrpc": ("0", "1"), "sts": None,
        "qqp": ("0", "1"), "mnli": ("contradiction", "entailment", "neutral"),
        "qnli": ("entailment", "not_entailment"), "rte": ("entailment", "not_entailment"),
        "wnli": ("0", "1")}
    assert [name for name, task in glue.TASKS.items() if task.is_regression] == ["sts"]
    mnli = glue.get_task("mnli")
    assert [mnli.label_id(y) for y in ("contradiction", "entailment", "neutral")] == [0, 1, 2]
    assert glue.get_task("rte").label_id("not_entailment") == 1
    assert glue.get_task("sst").label_id("1") == 1
    sts = glue.get_task("sts")
    assert sts.label_id(3.8) == pytest.approx(0.76) and sts.label_id("5.0") == 1.0
    assert sts.label_id(0.0) == 0.0
    with pytest.raises(ValueError, match="'maybe' is not a rte label"):
        glue.get_task("rte").label_id("maybe")


# 8 binary examples: TP 3 (0-2), FN 1 (3), FP 2 (4, 5), TN 2 (6, 7).
Y_TRUE = [1, 1, 1, 1, 0, 0, 0, 0]
Y_PRED = [1, 1, 1, 0, 1, 1, 0, 0]
TP, FN, FP, TN = 3, 1, 2, 2


def test_accuracy_and_f1_against_the_confusion_matrix():
    precision, recall = TP / (TP + FP), TP / (TP + FN)  # 0.6 and 0.75
    f1 = 2 * precision * recall / (precision + recall)
    for name in ("mrpc", "qqp"):
        results = glue.get_task(name).score(Y_TRUE, np.array(Y_PRED))
        assert results == pytest.approx({"accuracy": 62.5, "precision": 60.0, "recall": 75.0,
                                         "f1": 100 * f1})
        # The original's F1Scorer would give recall == precision (60); this is the real one.
        assert results["recall"] != results["precision"]
    for name in ("sst", "rte", "qnli", "mnli", "wnli"):
        assert glue.get_task(name).score(Y_TRUE, Y_PRED) == {"accuracy": 62.5}
    assert glue.get_task("mnli").score([0, 1, 2, 2], [0, 2, 2, 1]) == {"accuracy": 50.0}


def test_mcc_against_the_confusion_matrix():
    mcc = (TP * TN - FP * FN) / math.sqrt((TP + FP) * (TP + FN) * (TN + FP) * (TN + FN))
    results = glue.get_task("cola").score(Y_TRUE, Y_PRED)
    assert results == pytest.approx({"accuracy": 62.5, "mcc": 100 * mcc})
    assert results["mcc"] == pytest.approx(25.819889, abs=1e-6)  # 4 / sqrt(240)


def test_regression_metrics_against_formulas():
    labels = np.array([0.0, 0.2, 0.4, 0.6, 1.0])
    preds = np.array([0.1, 0.1, 0.5, 0.4, 0.9])

    def pearson(x, y):
        x, y = x - x.mean(), y - y.mean()
        return (x * y).sum() / math.sqrt((x * x).sum() * (y * y).sum())

    # Ranks by hand; the two 0.1s share ranks 1 and 2.
    spearman = pearson(np.array([1, 2, 3, 4, 5.0]), np.array([1.5, 1.5, 4, 3, 5]))
    results = glue.get_task("sts").score(labels, preds)
    assert results == pytest.approx({"pearson": 100 * pearson(labels, preds),
                                     "spearman": 100 * spearman, "mse": 0.08 / 5})
    assert glue.get_task("sts").main_metric(results) == pytest.approx(100 * spearman)


def test_degenerate_metrics_are_zero_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cola = glue.get_task("cola")
        assert cola.score([1, 1, 1], [1, 0, 1]) == pytest.approx({"accuracy": 200 / 3, "mcc": 0})
        assert cola.score([1, 0, 1], [1, 1, 1])["mcc"] == 0.0
        sts = glue.get_task("sts")
        assert sts.score([0.1, 0.5, 0.9], [0.4, 0.4, 0.4]) == pytest.approx(
            {"pearson": 0.0, "spearman": 0.0, "mse": (0.09 + 0.01 + 0.25) / 3})
        assert sts.score([0.2, 0.2], [0.1, 0.3])["pearson"] == 0.0
        assert glue.get_task("mrpc").score([1, 0], [0, 0]) == {
            "accuracy": 50.0, "precision": 0.0, "recall": 0.0, "f1": 0.0}
    with pytest.raises(ValueError, match="equally long"):
        glue.get_task("sst").score([0, 1], [0])
    with pytest.raises(ValueError, match="non-empty"):
        glue.get_task("sst").score([], [])


def test_main_metric_and_glue_score():
    assert glue.get_task("cola").main_metric({"accuracy": 80.0, "mcc": 55.0}) == 55.0
    assert glue.get_task("sts").main_metric({"pearson": 88.0, "spearman": 87.0}) == 87.0
    assert glue.get_task("mrpc").main_metric({"accuracy": 86.0, "f1": 90.0}) == 86.0
    results = {"cola": {"accuracy": 80.0, "mcc": 50.0}, "sts": {"pearson": 1.0, "spearman": 80.0},
               "sst": {"accuracy": 90.0}, "wnli": {"accuracy": 10.0}, "squad": {"f1": 1.0}}
    assert glue.glue_score(results) == pytest.approx((50 + 80 + 90) / 3)
    with pytest.raises(ValueError, match="no GLUE task"):
        glue.glue_score({"wnli": {"accuracy": 56.0}})


def test_submission_names():
    names = {"cola": "CoLA.tsv", "sst": "SST-2.tsv", "mrpc": "MRPC.tsv", "sts": "STS-B.tsv",
             "qqp": "QQP.tsv", "qnli": "QNLI.tsv", "rte": "RTE.tsv", "wnli": "WNLI.tsv"}
    for name, file in names.items():
        assert glue.get_task(name).submission_name("test") == file
    mnli = glue.get_task("mnli")
    assert [mnli.submission_name(s) for s in mnli.test_splits()] == [
        "MNLI-m.tsv", "MNLI-mm.tsv", "AX.tsv"]
    with pytest.raises(ValueError, match="not submitted"):
        mnli.submission_name("dev")


def test_write_submission(tmp_path):
    path = tmp_path / "out" / "test" / "MNLI-m.tsv"  # directories are created
    glue.get_task("mnli").write_submission(str(path), [2, 0, 1], np.array([1, 0, 2]))
    assert path.read_text() == "index\tprediction\n0\tcontradiction\n1\tneutral\n2\tentailment\n"
    glue.get_task("rte").write_submission(str(path), np.array([0, 1]), [1, 0])  # overwrites
    assert path.read_text() == "index\tprediction\n0\tnot_entailment\n1\tentailment\n"
    glue.get_task("sst").write_submission(str(path), [1, 0], np.array([0, 1], np.int64))
    assert path.read_text() == "index\tprediction\n0\t1\n1\t0\n"
    # STS-B: back on the 0-5 scale, clipped, 3 decimals.
    glue.get_task("sts").write_submission(str(path), [0, 1, 2, 3],
                                          np.array([0.5, 1.2, -0.1, 0.12345], np.float32))
    assert path.read_text() == ("index\tprediction\n0\t2.500\n1\t5.000\n2\t0.000\n"
                                "3\t0.617\n")
    assert [p.name for p in path.parent.iterdir()] == ["MNLI-m.tsv"]  # no temporary left


def test_write_submission_rejects_bad_input(tmp_path):
    path = tmp_path / "RTE.tsv"
    rte = glue.get_task("rte")
    with pytest.raises(ValueError, match="not a label id"):
        rte.write_submission(str(path), [0, 1], [0, 2])
    with pytest.raises(ValueError, match="same eid appears twice"):
        rte.write_submission(str(path), [0, 0], [0, 1])
    with pytest.raises(ValueError, match="2 eids but 1 predictions"):
        rte.write_submission(str(path), [0, 1], [0])
    assert not path.exists()


def test_write_submission_is_never_half_written(tmp_path, monkeypatch):
    path = tmp_path / "RTE.tsv"
    path.write_text("old\n")

    def failing_rename(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(tf.io.gfile, "rename", failing_rename)
    with pytest.raises(OSError, match="disk full"):
        glue.get_task("rte").write_submission(str(path), [0], [1])
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["RTE.tsv"]


_STS_ROW = "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane.\tAn air plane."
_STS_ROW_SHORT = _STS_ROW.replace("none\t", "", 1)  # a field missing
BAD_INPUT = [
    # (task, file, text, line, what): some real QQP train rows miss fields, like line 3 here.
    ("qqp", "train", f"{HEADERS['qqp'][0]}\n0\t1\t2\tHow?\tWhy?\t0\n1\t3\t4\tWhat is it?\t1\n",
     3, "5 tab-separated columns, expected at least 6"),
    ("rte", "dev", f"{_PAIR}\tlabel\n0\tA cat.\tAn animal.\tmaybe\n", 2,
     "unknown label 'maybe'; rte labels are ['entailment', 'not_entailment']"),
    ("mnli", "dev_matched", _header("mnli", "dev_matched") + "\n" + "\t".join(
        _row("mnli", "dev_matched", 0, "A.", "B.", "neutral")) + "\n" + "\t".join(
        _row("mnli", "dev_matched", 1, "A.", "B.", "Neutral")) + "\n", 3, "unknown label"),
    ("sst", "train", "sentence\tlabel\ngood\t1\n  \t0\n", 3, "empty text in column 0"),
    ("mrpc", "train", f"{HEADERS['mrpc'][0]}\n1\t1\t2\tA man.\t\n", 2, "empty text in column 4"),
    ("sts", "train", f"{_STS}\tscore\n{_STS_ROW}\t5.5\n", 2, "score '5.5' is outside [0, 5]"),
    ("sts", "train", f"{_STS}\tscore\n{_STS_ROW}\t-0.1\n", 2, "score '-0.1' is outside"),
    ("sts", "dev", f"{_STS}\tscore\n{_STS_ROW}\t4.0\n{_STS_ROW}\tn/a\n", 3,
     "score 'n/a' is not a number"),
    ("sts", "train", f"{_STS}\tscore\n{_STS_ROW}\tnan\n", 2, "outside"),
    # A missing field where columns are counted from the end would shift silently.
    ("sts", "train", f"{_STS}\tscore\n{_STS_ROW_SHORT}\t4.0\n", 2,
     "9 tab-separated columns, expected at least 10"),
    # CoLA train has no header: its first line is row 0, and a header there is a bad label.
    ("cola", "train", "gj04\t1\t\tGood.\ngj04\t1\tBad row.\n", 2, "3 tab-separated columns"),
    ("cola", "dev", "source\tlabel\toriginal\tsentence\ngj04\t1\t\tGood.\n", 1,
     "unknown label 'label'"),
]


@pytest.mark.parametrize("task,file,text,line,what", BAD_INPUT)
def test_bad_input_names_file_and_line(tmp_path, task, file, text, line, what):
    path = tmp_path / task / f"{file}.tsv"
    path.parent.mkdir()
    path.write_text(text, encoding="utf-8")
    split = {"dev_matched": "dev"}.get(file, file)
    with pytest.raises(DataError) as error:
        glue.get_task(task).read(str(path.parent), split)
    assert f"{path}:{line}: " in str(error.value) and what in str(error.value)


def test_non_utf8_names_the_line(tmp_path):
    (tmp_path / "train.tsv").write_bytes(b"sentence\tlabel\ngood\t1\nbad \xff\xfe\t0\n")
    with pytest.raises(DataError, match=r"train\.tsv:3: not UTF-8"):
        glue.get_task("sst").read(str(tmp_path), "train")


def test_csv_errors_name_the_line(tmp_path):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\ngood\t1\n" + "x" * 200_000 + "\t0\n")
    with pytest.raises(DataError, match=r"train\.tsv:3: field larger than field limit"):
        glue.get_task("sst").read(str(tmp_path), "train")


def test_file_without_examples(tmp_path):
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\n")
    with pytest.raises(DataError, match=r"dev\.tsv holds no examples"):
        glue.get_task("sst").read(str(tmp_path), "dev")


def test_missing_files_say_where_glue_goes(tmp_path):
    with pytest.raises(DataError) as error:
        glue.get_task("rte").read(str(tmp_path / "rte"), "train")
    assert str(tmp_path / "rte" / "train.tsv") in str(error.value)
    assert "DATA_DIR/finetuning_data/rte/" in str(error.value)
    with pytest.raises(DataError) as error:
        glue.get_task("mnli").read(str(tmp_path / "mnli"), "diagnostic")
    for path in (tmp_path / "mnli" / "diagnostic.tsv", tmp_path / "mnli" / "AX.tsv",
                 tmp_path / "ax" / "AX.tsv"):
        assert str(path) in str(error.value)


@pytest.mark.parametrize("task, folder", [
    ("cola", "CoLA"), ("sst", "SST-2"), ("mrpc", "MRPC"), ("sts", "STS-B"), ("qqp", "QQP"),
    ("mnli", "MNLI"), ("qnli", "QNLI"), ("rte", "RTE"), ("wnli", "WNLI")])
def test_glues_own_folder_names_are_read(tmp_path, task, folder):
    """finetuning_data/SST-2/ as GLUE's download script names it; ours wins when both exist."""
    from electra_tf.finetuning.config import from_hparams

    write_task(tmp_path / "finetuning_data" / folder, task)
    config = from_hparams("m", str(tmp_path), {"task_names": [task]})
    dev = glue.get_task(task).dev_splits()[0]
    assert len(glue.get_task(task).read_split(config, dev)) == SLICES["dev"][1]
    write_task(tmp_path / "finetuning_data" / task, task)
    assert glue.get_task(task).data_dir(config) == str(tmp_path / "finetuning_data" / task)


def test_the_baseline_predicts_the_majority_class_or_the_mean_score():
    """Fitted on the training split's labels, scored on the dev split by the task's metrics;
    regression reports the MSE (a constant has no correlation); zero-shot tasks take their
    GLUE task's."""
    from electra_tf.finetuning import zero_shot
    from electra_tf.finetuning.task import SplitData

    def split(task, name, labels, text_b=None):
        return SplitData(task, name, {}, [Example(i, "text", text_b, label)
                                          for i, label in enumerate(labels)])

    sst = glue.get_task("sst")
    baseline = sst.baseline(None, split(sst, "dev", ["1", "0", "0", "0"]),
                            split(sst, "train", ["1", "1", "0"]), None)
    assert baseline.predicts == "majority class '1' of train"
    assert baseline.metrics == {"accuracy": 25.0}
    cola = glue.get_task("cola")
    assert cola.baseline(None, split(cola, "dev", ["1", "1", "0"]),
                         split(cola, "train", ["1", "0"]), None).metrics == {  # a tie: the first
        "accuracy": pytest.approx(100 / 3), "mcc": 0.0}
    sts = glue.get_task("sts")
    baseline = sts.baseline(None, split(sts, "dev", [0.0, 5.0], "b"),
                            split(sts, "train", [1.0, 3.0], "b"), None)
    # The mean 2.0 is 0.4 on the 0-1 scale: ((0.4 - 0)^2 + (0.4 - 1)^2) / 2.
    assert baseline.predicts == "mean score 2.00 of train"
    assert baseline.metrics == {"mse": pytest.approx(0.26)}
    zero = zero_shot.TASKS[0]
    dev = split(zero, "dev", ["0", "1", "1"])
    assert zero.baseline(None, dev, dev, None) == sst.baseline(None, dev, dev, None)
    assert zero.baseline(None, dev, dev, None).predicts == "majority class '1' of dev"


def test_unknown_task_and_split(glue_dir):
    with pytest.raises(ValueError, match=r"unknown GLUE task 'sst2'; valid tasks: \['cola', "
                                         r"'sst', 'mrpc', 'sts', 'qqp', 'mnli', 'qnli', 'rte', "
                                         r"'wnli'\]"):
        glue.get_task("sst2")
    with pytest.raises(ValueError, match="rte has no split 'validation'"):
        glue.get_task("rte").read(str(glue_dir / "rte"), "validation")
    with pytest.raises(ValueError, match="has no split 'dev_mismatched'"):
        glue.get_task("rte").read(str(glue_dir / "rte"), "dev_mismatched")


# tensorflow-datasets

@pytest.fixture(scope="module")
def tfds_glue(tmp_path_factory):
    """glue/sst2, glue/mnli and glue/ax prepared by tfds's own builder from GLUE files on disk
    (its download step answered locally: no network), and the same files as read() wants."""
    import tensorflow_datasets as tfds

    root = tmp_path_factory.mktemp("tfds_glue")
    downloads, data_dir = root / "downloads", root / "finetuning_data"
    for task, glue_name in (("sst", "SST-2"), ("mnli", "MNLI")):
        write_task(downloads / glue_name, task)
        write_task(data_dir / task, task)
    write_task(downloads, "ax")
    write_task(data_dir / "ax", "ax")
    with pytest.MonkeyPatch.context() as patch:
        try:
            import importlib_resources  # noqa: F401  (tfds's builder code needs it)
        except ImportError:
            patch.setitem(sys.modules, "importlib_resources", importlib.resources)
        patch.setattr(tfds.download.DownloadManager, "download_and_extract",
                      lambda self, url: str(downloads))
        patch.setattr(tfds.download.DownloadManager, "download",
                      lambda self, url: str(downloads / "AX.tsv"))
        config = tfds.download.DownloadConfig(compute_stats=tfds.download.ComputeStatsMode.SKIP)
        for name in ("glue/sst2", "glue/mnli", "glue/ax"):
            tfds.builder(name, data_dir=str(root / "tfds")).download_and_prepare(
                download_config=config)
    return str(root / "tfds"), data_dir


@pytest.mark.xdist_group("tfds_glue")  # one test process prepares the datasets (-n 2)
@pytest.mark.parametrize("task,split", [
    ("sst", "train"), ("sst", "dev"), ("sst", "test"), ("mnli", "train"), ("mnli", "dev"),
    ("mnli", "dev_mismatched"), ("mnli", "test"), ("mnli", "test_mismatched"),
    ("mnli", "diagnostic")])
def test_read_tfds_gives_the_files_examples(tfds_glue, task, split):
    tfds_dir, data_dir = tfds_glue
    examples = glue.read_tfds(glue.get_task(task), split, tfds_dir)
    assert examples == glue.get_task(task).read(str(data_dir / task), split)
    assert len(examples) >= 2 and examples[0].text_a


def test_read_tfds_maps_labels_and_swaps(monkeypatch):
    """tfds numbers labels its own way (MNLI: entailment, neutral, contradiction; WNLI:
    not_entailment, entailment): rows fed through mock_data come back as GLUE's strings."""
    import tensorflow_datasets as tfds

    rows = {  # (config, split) -> (text a, text b, label, idx), shuffled as tfds stores them
        ("wnli", "validation"): [("It fits.", "It is small.", 1, 1), ("X.", "Y.", 0, 0)],
        ("qnli", "train"): [("Who?", "Nobody.", 1, 0), ("What?", "That.", 0, 1)],
        ("mnli", "validation_mismatched"): [("A.", "B.", 0, 0), ("C.", "D.", 2, 1),
                                            ("E.", "F.", 1, 2)],
        ("stsb", "train"): [("Same.", "Also same.", 3.8, 1), ("One.", "Other.", 0.25, 0)],
        ("rte", "test"): [("A.", "B.", -1, 0)],
        ("sst2", "train"): [("Fine.", None, -1, 0)],
    }
    keys = {"wnli": ("sentence1", "sentence2"), "qnli": ("question", "sentence"),
            "mnli": ("premise", "hypothesis"), "stsb": ("sentence1", "sentence2"),
            "rte": ("sentence1", "sentence2"), "sst2": ("sentence", None)}

    def as_dataset(builder, split, **kwargs):
        config = builder.builder_config.name
        a, b = keys[config]
        data = rows[(config, str(split))]
        columns = {a: [r[0] for r in data], "label": [r[2] for r in data],
                   "idx": np.array([r[3] for r in data], np.int32)}
        if b:
            columns[b] = [r[1] for r in data]
        columns["label"] = np.array(columns["label"],
                                    np.float32 if config == "stsb" else np.int64)
        return tf.data.Dataset.from_tensor_slices(columns)

    with tfds.testing.mock_data(as_dataset_fn=as_dataset,
                                policy=tfds.testing.MockPolicy.USE_CODE):
        read = glue.read_tfds
        assert read(glue.get_task("wnli"), "dev", None) == [
            Example(0, "X.", "Y.", "0"), Example(1, "It fits.", "It is small.", "1")]
        assert [e.label for e in read(glue.get_task("qnli"), "train", None)] == [
            "not_entailment", "entailment"]
        assert [e.label for e in read(glue.get_task("mnli"), "dev_mismatched", None)] == [
            "entailment", "contradiction", "neutral"]
        sts = read(glue.get_task("sts"), "train", "/unused")
        assert sts == [Example(0, "One.", "Other.", 0.25), Example(1, "Same.", "Also same.", 3.8),
                       Example(2, "Other.", "One.", 0.25), Example(3, "Also same.", "Same.", 3.8)]
        assert len(read(glue.get_task("sts"), "train", None, double_unordered=False)) == 2
        assert read(glue.get_task("rte"), "test", None) == [Example(0, "A.", "B.", None)]
        with pytest.raises(DataError, match=r"glue/sst2 train idx 0: unknown label '-1'"):
            read(glue.get_task("sst"), "train", None)


def test_read_tfds_never_downloads(tmp_path):
    with pytest.raises(DataError) as error:
        glue.read_tfds(glue.get_task("rte"), "train", str(tmp_path))
    assert "glue/rte is not prepared in" in str(error.value)
    assert "tfds build glue/rte --data_dir=DIR" in str(error.value)
    assert not any(tmp_path.iterdir())
