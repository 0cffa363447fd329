"""The pos task (electra_tf.finetuning.pos): the Brown tag mapping, the file split, the task
files, the task's metrics and an end-to-end run on the shipped Brown slice."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from conftest import TEST_DATA, TINY_FINETUNING
from electra_tf.finetuning import pos
from electra_tf.finetuning.config import from_hparams
from electra_tf.finetuning.task import DataError

BROWN = TEST_DATA / "brown_tagged"  # the first 20 sentences of ca01..ca07 and cn01..cn07


def test_every_tag_of_the_corpus_maps():
    """brown_tags.tsv: each of the 472 tag strings of the whole corpus with its count. Every
    one maps, and the coarse tags' totals are those docs/finetuning.md gives."""
    totals: dict[str, int] = collections.Counter()
    rows = [line.split("\t") for line in (TEST_DATA / "brown_tags.tsv").read_text().splitlines()]
    assert len(rows) == 472
    for tag, count in rows:
        totals[pos.coarse_tag(tag)] += int(count)
    assert sum(totals.values()) == 1_161_192
    assert totals == {"NOUN": 272_967, "VERB": 182_751, "ADJ": 83_731, "ADV": 56_287,
                      "PRON": 71_311, "DET": 125_738, "ADP": 144_766, "NUM": 14_879,
                      "CONJ": 38_151, "PRT": 21_034, ".": 147_565, "X": 2_012}


@pytest.mark.parametrize("tag, coarse", [
    ("nn", "NOUN"), ("np$", "NOUN"), ("nns$-tl-hl", "NOUN"), ("nr", "NOUN"),
    ("nn-tl", "NOUN"), ("nn-hl", "NOUN"), ("nn-nc", "NOUN"),
    ("pps+bez", "PRON"), ("ppss+md", "PRON"), ("vb+ppo", "VERB"), ("ex+bez", "DET"),
    ("dod*", "VERB"), ("md*-hl", "VERB"), ("*", "ADV"), ("*-tl", "ADV"),
    ("fw-nn", "X"), ("fw-in+at-tl", "X"), ("fw-*", "X"), ("fw-in+at-t", "X"),
    ("pp$", "PRON"), ("pp$$", "PRON"), ("wp$", "PRON"), ("pn", "PRON"),
    ("at", "DET"), ("abn", "DET"), ("abl", "DET"), ("ap", "ADJ"), ("od", "ADJ"),
    ("cs", "ADP"), ("in", "ADP"), ("cc", "CONJ"), ("to", "PRT"), ("rp", "PRT"),
    ("ql", "ADV"), ("rn", "ADV"), ("cd-tl", "NUM"), ("uh", "X"), ("nil", "X"),
    (".", "."), ("--", "."), ("---hl", "."), ("``", "."), ("''", "."), ("(-hl", "."),
    ("ppss+ber-n", "PRON"), ("wdt+ber+pp", "DET"),
])
def test_coarse_tag_rules(tag, coarse):
    assert pos.coarse_tag(tag) == coarse


@pytest.mark.parametrize("tag", ["xx", "nn+xx", "fw-xx", "NN", "", "-tl", "nn-xy"])
def test_unknown_tags_fail(tag):
    with pytest.raises(ValueError, match="is not a Brown tag"):
        pos.coarse_tag(tag)


def test_file_split_rule():
    names = [f"c{g}{i:02d}" for g, n in (("a", 44), ("m", 6), ("r", 9)) for i in range(1, n + 1)]
    split = pos.brown_file_split(reversed(names))  # the order given does not matter
    assert split == pos.brown_file_split(names)
    # 0-based index 3 of every 7 (ca04, ca11, ...) is dev, index 6 (ca07, ca14, ...) test.
    assert split["dev"] == ["ca04", "ca11", "ca18", "ca25", "ca32", "ca39", "cm04", "cr04"]
    assert split["test"] == ["ca07", "ca14", "ca21", "ca28", "ca35", "ca42", "cr07"]
    assert len(split["train"]) == len(names) - 15
    assert sorted(sum(split.values(), [])) == sorted(names)
    # Paths keep their directories; the genre is read from the base name.
    assert pos.brown_file_split(["x/ca01", "x/ca02", "x/ca03", "x/ca04"])["dev"] == ["x/ca04"]
    with pytest.raises(ValueError, match="'README' is not a Brown file name"):
        pos.brown_file_split(["ca01", "README"])
    with pytest.raises(ValueError, match="given twice"):
        pos.brown_file_split(["ca01", "x/ca01"])


def test_file_split_of_the_corpus_names():
    """The 500 file names of the corpus (the genres' file counts from its NOTES.md): every
    genre has a dev file, every genre but m (6 files) a test file, about 1 in 7 each."""
    counts = {"a": 44, "b": 27, "c": 17, "d": 17, "e": 36, "f": 48, "g": 75, "h": 30, "j": 80,
              "k": 29, "l": 24, "m": 6, "n": 29, "p": 29, "r": 9}
    names = [f"c{g}{i:02d}" for g, n in counts.items() for i in range(1, n + 1)]
    split = pos.brown_file_split(names)
    # Per genre, dev: the i < n with i % 7 == 3; test: i % 7 == 6 (a: 44 files -> 6 and 6).
    assert [len(split[s]) for s in ("train", "dev", "test")] == [366, 69, 65]
    assert {pos.genre(n) for n in split["dev"]} == set(counts)
    assert {pos.genre(n) for n in split["test"]} == set(counts) - {"m"}


def _read_task_file(path):
    sentences, current = [], []
    for line in path.read_text().split("\n")[:-1]:
        if line:
            word, tag = line.split(" ")
            current.append((word, tag))
        else:
            sentences.append(current)
            current = []
    assert not current  # every sentence ends with a blank line
    return sentences


def test_writes_the_task_files(tmp_path):
    counts = pos.write_task_files(str(BROWN), str(tmp_path / "pos"), train_sentences=50)
    # Genres a and n, 7 files each: ca04/cn04 dev, ca07/cn07 test; 20 sentences a file.
    assert counts == {
        "train": {"files": 10, "sentences": 50, "words": counts["train"]["words"]},
        # dev and test: all their sentences, fewer than the cap (2,000)
        "dev": {"files": 2, "sentences": 40, "words": counts["dev"]["words"]},
        "test": {"files": 2, "sentences": 40, "words": counts["test"]["words"]}}
    written = {s: _read_task_file(tmp_path / "pos" / f"{s}.txt") for s in counts}
    assert {s: len(v) for s, v in written.items()} == {"train": 50, "dev": 40, "test": 40}
    assert {s: sum(map(len, v)) for s, v in written.items()} == {
        s: counts[s]["words"] for s in counts}
    # dev: ca04's sentences, then cn04's, in file order, each word with its coarse tag.
    ca04 = pos.read_brown_file(str(BROWN / "ca04"))
    assert written["dev"][0] == [(w, pos.coarse_tag(t)) for w, t in ca04[0]]
    assert written["dev"][:20] == [[(w, pos.coarse_tag(t)) for w, t in s] for s in ca04]
    assert {tag for v in written.values() for s in v for _, tag in s} <= set(pos.COARSE_TAGS)
    # Train sentences come from the train files only.
    held_out = {tuple(w for w, _ in s) for name in ("ca04", "ca07", "cn04", "cn07")
                for s in pos.read_brown_file(str(BROWN / name))}
    assert not held_out & {tuple(w for w, _ in s) for s in written["train"]}
    # Deterministic: the same arguments write the same bytes; another seed other sentences.
    again = pos.write_task_files(str(BROWN), str(tmp_path / "again"), train_sentences=50,
                                 eval_sentences=0)
    assert again == counts
    for split in counts:
        assert (tmp_path / "again" / f"{split}.txt").read_bytes() == \
            (tmp_path / "pos" / f"{split}.txt").read_bytes()
    pos.write_task_files(str(BROWN), str(tmp_path / "seed1"), train_sentences=50, seed=1,
                         eval_sentences=0)
    assert (tmp_path / "seed1" / "train.txt").read_bytes() != \
        (tmp_path / "pos" / "train.txt").read_bytes()
    assert (tmp_path / "seed1" / "dev.txt").read_bytes() == \
        (tmp_path / "pos" / "dev.txt").read_bytes()  # all of dev: the seed does not matter


def test_task_files_are_stratified_by_genre(tmp_path):
    pos.write_task_files(str(BROWN), str(tmp_path), train_sentences=31, eval_sentences=9)
    index = {}
    for name in pos.brown_files(str(BROWN)):
        for sentence in pos.read_brown_file(str(BROWN / name)):
            index[" ".join(w for w, _ in sentence)] = pos.genre(name)
    for split, expected in (("train", (16, 15)), ("dev", (5, 4)), ("test", (5, 4))):
        genres = collections.Counter(index[" ".join(w for w, _ in s)]
                                     for s in _read_task_file(tmp_path / f"{split}.txt"))
        # Equal shares; the odd sentence goes to the larger remainder, a tie to genre a.
        assert (genres["a"], genres["n"]) == expected, split


def test_task_file_errors(tmp_path):
    with pytest.raises(ValueError, match="train: 201 sentences asked for, its 10 Brown files"):
        pos.write_task_files(str(BROWN), str(tmp_path / "pos"), train_sentences=201)
    with pytest.raises(ValueError, match="holds no tagged Brown files"):
        pos.write_task_files(str(tmp_path), str(tmp_path / "pos"))
    bad = tmp_path / "bad"
    bad.mkdir()
    for i in range(1, 8):
        (bad / f"ca0{i}").write_text("The/at cat/nn\n\nsat/vbd ./.\n")
    for content, message in (("The/at cat\n", r"ca02:1: token 'cat' is not word/tag"),
                             ("\nThe/at cat/xx\n", r"ca02:2: 'xx' is not a Brown tag"),
                             ("The/at caf\xc3\xa9/nn\n", r"ca02:1: not ASCII")):
        (bad / "ca02").write_bytes(content.encode("latin-1"))
        with pytest.raises(ValueError, match=message):
            pos.write_task_files(str(bad), str(tmp_path / "pos"), train_sentences=2)
    assert not (tmp_path / "pos").exists() or not any((tmp_path / "pos").iterdir())


def test_unseen_words_and_accuracies_by_hand():
    from electra_tf.finetuning.tagging import Sentence

    train = [Sentence(0, ("The", "dog", "barked"), (), ("DET", "NOUN", "VERB"))]
    dev = [Sentence(0, ("the", "Cat", "barked", "loudly"), (), ("DET", "NOUN", "VERB", "ADV")),
           Sentence(1, ("A", "DOG"), (), ("DET", "NOUN"))]
    unseen = pos.unseen_words(train, dev, str.lower)
    assert unseen == [[False, True, False, True], [True, False]]
    # Case counts when the vocabulary is cased.
    assert pos.unseen_words(train, dev, str)[1] == [True, True]
    predicted = [["DET", "VERB", "VERB", "ADV"], ["DET", "NOUN"]]
    # 6 words, 5 right; unseen: Cat (wrong), loudly (right), A (right).
    assert pos.accuracies([s.tags for s in dev], predicted, unseen) == pytest.approx(
        {"accuracy": 500 / 6, "unseen_accuracy": 200 / 3})
    scores = pos.accuracies([s.tags for s in dev], predicted, [[False] * 4, [False] * 2])
    assert scores["accuracy"] == pytest.approx(500 / 6) and np.isnan(scores["unseen_accuracy"])
    with pytest.raises(ValueError, match="same lengths"):
        pos.accuracies([s.tags for s in dev], [["DET"], ["DET", "NOUN"]], unseen)


def test_reads_task_files_and_names_bad_lines(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("The DET\ndog NOUN\n\n\nRan VERB\n")
    sentences = pos.read_task_file(str(path))
    assert [(s.eid, s.words, s.tags) for s in sentences] == [
        (0, ("The", "dog"), ("DET", "NOUN")), (1, ("Ran",), ("VERB",))]
    for line, message in (("dog NN\n", "got 'dog NN'"), ("dog NOUN x\n", "got 'dog NOUN x'")):
        path.write_text("The DET\n" + line)
        with pytest.raises(DataError, match=rf"train\.txt:2: expected `word TAG` .*{message}"):
            pos.read_task_file(str(path))
    with pytest.raises(DataError, match="does not exist; write the pos task's files"):
        pos.read_task_file(str(tmp_path / "missing.txt"))


@pytest.fixture
def pos_dir(finetuning_dir):
    """DATA_DIR with finetuning_data/pos/ written from the shipped Brown slice: 120 train
    sentences, dev and test 40 each (ca04 + cn04, ca07 + cn07)."""
    pos.write_task_files(str(BROWN), str(finetuning_dir / "finetuning_data" / "pos"),
                         train_sentences=120)
    return finetuning_dir


POS_HPARAMS = {**TINY_FINETUNING, "task_names": ["pos"], "train_batch_size": 8}


def test_the_task_reads_features_and_scores(pos_dir):
    from electra_tf.finetuning import task_builder, trainer

    task = task_builder.get_task("pos")
    config = from_hparams("tiny", str(pos_dir), POS_HPARAMS)
    assert config.max_seq_length == 32  # the user's value beats the task's 128
    assert from_hparams("tiny", str(pos_dir), {k: v for k, v in POS_HPARAMS.items()
                                               if k != "max_seq_length"}).max_seq_length == 128
    assert task.labels(config) == pos.COARSE_TAGS
    assert task.dev_splits(config) == ["dev", "test"] and task.result_name("test") == "pos-test"
    tokenizer = trainer.make_tokenizer(config)
    data = task.load(config, "dev", tokenizer)
    first = data.examples[0]
    assert first.words == ("Oslo",)  # a headline: np-hl
    assert data.examples[1].words[:4] == ("The", "most", "positive", "element")
    assert [pos.COARSE_TAGS[i] for i in data.arrays["tag_labels"][1, :4]] == [
        "DET", "ADV", "ADJ", "NOUN"]
    # Logits that predict each word's gold tag: 100% where a word fits; the words past
    # max_seq_length (32 tokens) are predicted NOUN and count.
    outputs = np.zeros((len(data), 32, len(pos.COARSE_TAGS)), np.float32)
    for row in range(len(data)):
        for word, position in enumerate(data.arrays["tag_positions"][row]):
            if data.arrays["tag_mask"][row, word]:
                outputs[row, position, data.arrays["tag_labels"][row, word]] = 10.0
    scores = task.evaluate(config, data, outputs, tokenizer, str(pos_dir / "out"))
    gold = [t for s in data.examples for t in s.tags]
    fits = data.arrays["tag_mask"].sum()
    cut = [t for row, s in enumerate(data.examples)
           for t in s.tags[int(data.arrays["tag_mask"][row].sum()):]]
    assert fits < len(gold)  # some sentences were cut
    assert scores["accuracy"] == pytest.approx(100 * (fits + cut.count("NOUN")) / len(gold))
    assert 0 < scores["unseen_accuracy"] <= 100
    written = (pos_dir / "out" / "pos.txt").read_text().split("\n")
    assert written[:3] == ["Oslo NOUN NOUN", "", "The DET DET"]
    # The baseline is scored in the task's own metrics (the tagging machinery's default is
    # chunk F1, which means nothing for word tags).
    train = task.load(config, "train", tokenizer)
    baseline = task.baseline(config, data, train, tokenizer)
    assert baseline.predicts == "most frequent tag 'NOUN' of train"
    nouns = np.array([tag == "NOUN" for tag in gold])
    unseen = np.array([u for sentence in pos.unseen_words(train.examples, data.examples,
                                                          tokenizer.normalize)
                       for u in sentence])
    assert baseline.metrics == pytest.approx({"accuracy": 100 * nouns.mean(),
                                              "unseen_accuracy": 100 * nouns[unseen].mean()})


@pytest.mark.slow
def test_pos_end_to_end_learns_its_sentences(pos_dir):
    """run_finetuning on the task: both splits' accuracy and unseen-word accuracy in the
    results, dev tagged far above the share of the commonest tag, the test predictions written
    as `word gold predicted`."""
    import json

    import run_finetuning

    hparams = {**POS_HPARAMS, "max_seq_length": 64, "num_train_epochs": 30,
               "layerwise_lr_decay": 0.0, "log_steps": 200, "write_test_outputs": True}
    results = run_finetuning.run(from_hparams("tiny", str(pos_dir), hparams))
    assert set(results) == {"pos", "pos-test"}
    for metrics in results.values():
        assert list(metrics) == ["accuracy", "unseen_accuracy"]
        assert all(0 <= v <= 100 for v in metrics.values())
    dev = pos.read_task_file(str(pos_dir / "finetuning_data" / "pos" / "dev.txt"))
    tags = [t for s in dev for t in s.tags]
    majority = 100 * max(tags.count(t) for t in set(tags)) / len(tags)
    assert results["pos"]["accuracy"] >= majority + 30
    model_dir = pos_dir / "models" / "tiny"
    saved = json.loads((model_dir / "results" / "pos_results.json").read_text())
    assert saved["median"] == results
    lines = (model_dir / "test_predictions" / "pos_trial_1" / "pos.txt").read_text().split("\n")
    test = pos.read_task_file(str(pos_dir / "finetuning_data" / "pos" / "test.txt"))
    assert len([line for line in lines if line]) == sum(len(s.words) for s in test)
    word, gold, predicted = lines[0].split(" ")
    assert (word, gold) == (test[0].words[0], test[0].tags[0]) and predicted in pos.COARSE_TAGS
