"""The pos task (electra_tf.finetuning.pos): the Brown tag mapping, the file split, the task
files, the task's metrics and an end-to-end run on the shipped Brown slice."""

from __future__ import annotations

import collections

import pytest

from conftest import TEST_DATA
from electra_tf.finetuning import pos

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
    (bad / "ca02").write_text("The/at cat\n")
    with pytest.raises(ValueError, match=r"ca02:1: token 'cat' is not word/tag"):
        pos.write_task_files(str(bad), str(tmp_path / "pos"), train_sentences=2)
    assert not (tmp_path / "pos").exists() or not any((tmp_path / "pos").iterdir())
