"""Downstream tasks in GLUE's file formats, built from the real data in ../shared/data.

  python experiments/downstream.py --shared_data ../shared/data --out DIR

writes DIR/<task>/{train,dev,test}.tsv in the layout run_finetuning.py reads (GLUE's), plus
DIR/<task>/test_labels.tsv ("index<TAB>label", the labels GLUE keeps hidden), and
DIR/build_summary.json:

  sst   movie-review sentiment (SST-2's format): the Pang & Lee snippets with their crowd score,
        positive when the score is above 0 (the 37 snippets scored exactly 0 are dropped).
  sts   sentiment similarity (STS-B's format, scores 0-5): two snippets, scored
        5 x (1 - |score_a - score_b| / 8) from their crowd scores in [-4, 4]. Every snippet is
        in at most one pair, and the splits' snippets are disjoint.
  qnli  next sentence (QNLI's format, "entailment" = sentence B follows sentence A in the text):
        consecutive Brown-corpus sentences against a sentence from another passage of the same
        split. Built from the last HELD_OUT_BROWN_FRACTION of brown.txt, which
        pretraining_corpus() leaves out of the pretraining text; the splits are disjoint
        passages of BROWN_PASSAGE sentences.

The splits: train.tsv trains, dev.tsv is the selection split (learning rates are chosen on it)
and test.tsv with test_labels.tsv is the reported split, so nothing reported was tuned on.
Everything is deterministic (a fixed seed); the same input gives byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from typing import Any, Sequence

HELD_OUT_BROWN_FRACTION = 0.15
BROWN_PASSAGE = 20  # sentences per passage of the next-sentence task
SEED = 17
SENTIMENT_RANGE = 8.0  # crowd scores lie in [-4, 4]
SPLITS = ("train", "dev", "test")
DEFAULT_SIZES = {"train": 2000, "dev": 800, "test": 1600}


def _clean(text: str) -> str:
    """One line of TSV text: tabs and line breaks become spaces."""
    return " ".join(text.split())


def _write_tsv(path: str, header: Sequence[str], rows: Sequence[Sequence]) -> None:
    lines = ["\t".join(header)] + ["\t".join(str(v) for v in row) for row in rows]
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)


def _write_task(out: str, name: str, columns: Sequence[str], label: str,
                splits: dict[str, list[tuple]], indexed: bool) -> dict[str, int]:
    """GLUE's files for one task: labelled train/dev with a header (and an index column first
    where GLUE's have one), test without labels and with an index column, test_labels.tsv
    beside it. Each row is (*texts, label)."""
    directory = os.path.join(out, name)
    os.makedirs(directory, exist_ok=True)
    for split in ("train", "dev"):
        header = ["index", *columns, label] if indexed else [*columns, label]
        rows = [(i, *row) for i, row in enumerate(splits[split])] if indexed else splits[split]
        _write_tsv(os.path.join(directory, f"{split}.tsv"), header, rows)
    test = splits["test"]
    _write_tsv(os.path.join(directory, "test.tsv"), ["index", *columns],
               [(i, *row[:-1]) for i, row in enumerate(test)])
    _write_tsv(os.path.join(directory, "test_labels.tsv"), ["index", "label"],
               [(i, row[-1]) for i, row in enumerate(test)])
    return {split: len(rows) for split, rows in splits.items()}


def _take(items: list, sizes: dict[str, int], what: str) -> dict[str, list]:
    need = sum(sizes.values())
    if len(items) < need:
        raise ValueError(f"{what}: {len(items)} available, the split sizes {sizes} need {need}; "
                         "pass smaller --train/--dev/--test sizes")
    out, start = {}, 0
    for split in SPLITS:
        out[split] = items[start:start + sizes[split]]
        start += sizes[split]
    return out


def read_snippets(path: str) -> list[tuple[str, float]]:
    """(sentence, crowd score) per row of movie_review_snippets.tsv (id, score, sentence)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 3:
                raise ValueError(f"{path}:{number}: expected id<TAB>score<TAB>sentence")
            rows.append((_clean(fields[2]), float(fields[1])))
    return rows


def sentiment_task(snippets: list[tuple[str, float]], sizes: dict[str, int]) -> dict:
    """SST-2: (sentence, "1" if positive else "0"), scores of exactly 0 dropped."""
    rows = [(text, "1" if score > 0 else "0") for text, score in snippets if score != 0]
    random.Random(SEED).shuffle(rows)
    return _take(rows, sizes, "sst: snippets with a non-zero score")


def similarity_task(snippets: list[tuple[str, float]], sizes: dict[str, int]) -> dict:
    """STS-B: (sentence1, sentence2, score 0-5) from two snippets' sentiment distance."""
    rows = list(snippets)
    random.Random(SEED + 1).shuffle(rows)
    pairs = [(a, b, f"{5.0 * (1.0 - abs(sa - sb) / SENTIMENT_RANGE):.3f}")
             for (a, sa), (b, sb) in zip(rows[0::2], rows[1::2])]
    return _take(pairs, sizes, "sts: snippet pairs")


def read_brown(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [_clean(line) for line in f if line.strip()]


def brown_split_point(num_lines: int) -> int:
    """Lines before this index are pretraining text; from it on, the held-out tail."""
    return num_lines - int(round(num_lines * HELD_OUT_BROWN_FRACTION))


def next_sentence_task(held_out: list[str], sizes: dict[str, int]) -> dict:
    """QNLI: (sentence A, sentence B, label), half "entailment" (B follows A) and half
    "not_entailment" (B from another passage of the same split). Passages of BROWN_PASSAGE
    consecutive sentences are dealt to the splits in proportion to their sizes, so no text is
    shared between splits."""
    rng = random.Random(SEED + 2)
    passages = [held_out[i:i + BROWN_PASSAGE] for i in range(0, len(held_out), BROWN_PASSAGE)]
    passages = [p for p in passages if len(p) >= 2]
    rng.shuffle(passages)
    total = sum(sizes.values())
    out, start = {}, 0
    for split in SPLITS:
        count = round(len(passages) * sizes[split] / total)
        mine = passages[start:start + count] if split != "test" else passages[start:]
        start += count
        if len(mine) < 2:
            raise ValueError(f"qnli: {len(mine)} passage(s) of held-out Brown text for {split}; "
                             "negatives need two: pass smaller sizes or more text")
        rows = []
        for index, passage in enumerate(mine):
            others = [s for j, p in enumerate(mine) if j != index for s in p]
            for a, b in zip(passage, passage[1:]):
                if rng.random() < 0.5:
                    rows.append((a, b, "entailment"))
                else:
                    rows.append((a, rng.choice(others), "not_entailment"))
        rng.shuffle(rows)
        if len(rows) < sizes[split]:
            raise ValueError(f"qnli: {len(rows)} {split} pairs in the held-out Brown text, "
                             f"{sizes[split]} asked; pass smaller sizes")
        out[split] = rows[:sizes[split]]
    return out


CORPUS_FILES = ("enwiki_sample.txt", "brown_head.txt")


def pretraining_corpus(shared_data: str, out_dir: str) -> dict[str, int]:
    """The pretraining text: Wikipedia whole, Brown without its held-out tail. Writes
    out_dir/{enwiki_sample,brown_head}.txt for build_pretraining_dataset.py."""
    os.makedirs(out_dir, exist_ok=True)
    corpora = os.path.join(shared_data, "corpora")
    with open(os.path.join(corpora, "enwiki_sample.txt"), encoding="utf-8") as f:
        wiki = f.read()
    brown = read_brown(os.path.join(corpora, "brown.txt"))
    head = brown[:brown_split_point(len(brown))]
    for name, text in zip(CORPUS_FILES, (wiki, "\n".join(head) + "\n")):
        path = os.path.join(out_dir, name)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
    return {"brown_lines": len(head), "brown_held_out_lines": len(brown) - len(head)}


# Brown's quotation marks are `` and ''; the plain text has the ASCII quote.
_BROWN_QUOTES = {"``": '"', "''": '"'}


def brown_paragraphs(path: str) -> list[str]:
    """A tagged Brown file (`word/tag` tokens, a sentence a line, blank lines between
    paragraphs) as plain text: its paragraphs, each one line of its words joined by spaces,
    the tags dropped (split at a token's last `/`) and `` and '' turned into "."""
    paragraphs, words = [], []
    with open(path, encoding="ascii") as f:
        for number, line in enumerate(f, start=1):
            tokens = line.split()
            if not tokens:
                if words:
                    paragraphs.append(" ".join(words))
                    words = []
                continue
            for token in tokens:
                word, slash, _ = token.rpartition("/")
                if not slash or not word:
                    raise ValueError(f"{path}:{number}: token {token!r} is not word/tag")
                words.append(_BROWN_QUOTES.get(word, word))
    if words:
        paragraphs.append(" ".join(words))
    return paragraphs


# The shuffled corpus's files: a few dozen documents each, so that the builder, which reads
# its input files one after another in a shuffled order, mixes the sources all along.
SHARDS = 256


def ladder_corpus(shared_data: str, out_dir: str, shuffled: bool = False) -> dict[str, Any]:
    """The ladder's pretraining text in out_dir, in the builder's layout (a paragraph a line, a
    blank line between documents): the tagged Brown files of the pos task's train split
    (electra_tf.finetuning.pos.brown_file_split; each file one document), the Wikipedia sample
    and every corpora/tech/*.txt. The dev and test Brown files are never written.

    By source (the default): brown_train.txt, and the other files copied as they are. The
    builder writes its examples in the order it reads its input files, so training then runs
    through one source after another. `shuffled`: every document of every source, in an order
    shuffled with a fixed seed, dealt into SHARDS files (shard_000.txt, ...), so that every
    stretch of training sees every source. Returns what went in: words (and, shuffled,
    documents) per source, and the Brown files held out."""
    import shutil

    from electra_tf.finetuning import pos

    os.makedirs(out_dir, exist_ok=True)
    corpora = os.path.join(shared_data, "corpora")
    brown_dir = os.path.join(corpora, "brown_tagged")
    split = pos.brown_file_split(pos.brown_files(brown_dir))
    sources = {"brown_train.txt": ["\n".join(brown_paragraphs(os.path.join(brown_dir, name)))
                                   for name in split["train"]]}
    copied = [os.path.join(corpora, "enwiki_sample.txt")] + sorted(
        os.path.join(corpora, "tech", n) for n in os.listdir(os.path.join(corpora, "tech"))
        if n.endswith(".txt"))
    for path in copied:
        with open(path, encoding="utf-8") as f:
            sources[os.path.basename(path)] = [d.strip("\n") for d in f.read().split("\n\n")
                                               if d.strip()]
    summary: dict[str, Any] = {"brown_train_files": len(split["train"]),
                               "brown_held_out_files": split["dev"] + split["test"],
                               "order": "shuffled documents" if shuffled else "by source",
                               "words": {name: sum(len(d.split()) for d in documents)
                                         for name, documents in sources.items()}}
    if shuffled:
        documents = [d for name in sorted(sources) for d in sources[name]]
        random.Random(SEED + 3).shuffle(documents)
        files = {f"shard_{k:03d}.txt": documents[k::SHARDS] for k in range(SHARDS)}
        summary["documents"] = {name: len(docs) for name, docs in sources.items()}
    else:  # the other sources byte for byte, as the first ladder's data was made
        files = {"brown_train.txt": sources["brown_train.txt"]}
        for path in copied:
            target = os.path.join(out_dir, os.path.basename(path))
            shutil.copyfile(path, target + ".tmp")
            os.replace(target + ".tmp", target)
    for name, documents in files.items():
        path = os.path.join(out_dir, name)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write("\n\n".join(documents) + "\n")
        os.replace(path + ".tmp", path)
    summary["total_words"] = sum(summary["words"].values())
    return summary


TASK_NAMES = ("sst", "sts", "qnli")


def build_tasks(shared_data: str, out: str, sizes: dict[str, int] | None = None,
                tasks: Sequence[str] = TASK_NAMES) -> dict:
    """Writes the tasks into out/<task>/ and out/build_summary.json; returns the summary."""
    sizes = sizes or DEFAULT_SIZES
    unknown = sorted(set(tasks) - set(TASK_NAMES))
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; this builder makes {list(TASK_NAMES)}")
    snippets = read_snippets(os.path.join(shared_data, "classification",
                                          "movie_review_snippets.tsv"))
    summary: dict = {"seed": SEED, "sizes": sizes, "tasks": {}}
    if "sst" in tasks:
        summary["tasks"]["sst"] = _write_task(out, "sst", ["sentence"], "label",
                                              sentiment_task(snippets, sizes), indexed=False)
    if "sts" in tasks:
        summary["tasks"]["sts"] = _write_task(out, "sts", ["sentence1", "sentence2"], "score",
                                              similarity_task(snippets, sizes), indexed=True)
    if "qnli" in tasks:
        brown = read_brown(os.path.join(shared_data, "corpora", "brown.txt"))
        held_out = brown[brown_split_point(len(brown)):]
        summary["tasks"]["qnli"] = _write_task(out, "qnli", ["question", "sentence"], "label",
                                               next_sentence_task(held_out, sizes), indexed=True)
    with open(os.path.join(out, "build_summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return summary


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared_data", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data"))
    parser.add_argument("--out", required=True, help="directory for <task>/*.tsv")
    parser.add_argument("--tasks", default=",".join(TASK_NAMES))
    for split in SPLITS:
        parser.add_argument(f"--{split}", type=int, default=DEFAULT_SIZES[split],
                            help=f"examples in {split}.tsv")
    args = parser.parse_args(argv)
    sizes = {split: getattr(args, split) for split in SPLITS}
    summary = build_tasks(args.shared_data, args.out, sizes, args.tasks.split(","))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
