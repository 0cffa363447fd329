"""The ladder's data (experiments/ladder.py, step 1), apart from the ladder that sizes it: the
files the data step reads from --shared_data and the pretraining text it builds from them (the
ladder's prepare_data builds the rest: the vocabulary, the TFRecords, the tasks); the SHA-256
of the data built (data_fingerprint), which check_data holds the records to and the ladder its
saved trunks; and the no-context baselines of baseline.jsonl, measured on it (the
most-frequent-tag tagger, the unigram masked LMs)."""

from __future__ import annotations

import os

import downstream
import efficiency
from efficiency import log
from ladder_records import Store

FETCH_COMMAND = "python experiments/fetch_corpora.py --out DIR"
# What the data step reads from --shared_data (and every corpora/tech/*.txt there).
SHARED_FILES = ("corpora/brown_tagged/ca01", "corpora/enwiki_sample.txt",
                "corpora/tech/python3.11-doc.txt", "classification/movie_review_snippets.tsv")


# ----------------------------------------------------------------------------- the text

def check_shared_data(shared_data: str) -> None:
    """One line naming the fetch command when --shared_data lacks a file the data step reads."""
    missing = [f for f in SHARED_FILES if not os.path.exists(os.path.join(shared_data, f))]
    if missing:
        raise SystemExit(f"error: --shared_data {shared_data} lacks {missing[0]}"
                         + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                         + f": fetch and convert the corpora with `{FETCH_COMMAND}` and pass "
                         "--shared_data DIR")


def build_corpus(out: str, shared_data: str, shuffled: bool = False) -> str:
    """OUT/corpus/, the pretraining text and nothing else (the builders read every file in
    it); what went in is in OUT/corpus_summary.json, written last."""
    corpus = os.path.join(out, "corpus")
    summary_path = os.path.join(out, "corpus_summary.json")
    if not os.path.exists(summary_path):
        summary = downstream.ladder_corpus(shared_data, corpus, shuffled)
        efficiency.write_json(summary_path, summary)
        log(f"pretraining text -> {corpus}: {summary['total_words']:,} words")
    return corpus


# ----------------------------------------------------------------------------- the fingerprints

def data_fingerprint(data_dir: str, tasks: bool = False) -> dict[str, str]:
    """What a trunk's checkpoint depends on beyond its hparams, by SHA-256: the vocabulary and
    each pretraining TFRecords file (their bytes: the input position counts records in them);
    with `tasks`, also every fine-tuning file, on which the rest of the records depend."""
    import glob

    from fetch_corpora import file_sha256

    tfrecords = sorted(glob.glob(os.path.join(data_dir, "pretrain_tfrecords",
                                              "pretrain_data.tfrecord*")))
    task_files = sorted(glob.glob(os.path.join(data_dir, "finetuning_data", "*", "*"))) \
        if tasks else []
    return {os.path.relpath(path, data_dir): file_sha256(path)
            for path in [os.path.join(data_dir, "vocab.txt"), *tfrecords, *task_files]}


def check_data(results: str, data_dir: str) -> None:
    """The records' data is the data they were made on: RESULTS/data.json (committed beside
    them) holds data_fingerprint(tasks=True) of the first data a sitting used for them. Data
    built again (a new machine) that hashes otherwise, because the corpora or the code that
    builds it changed, stops the sitting before anything is trained or scored on it."""
    path = os.path.join(results, "data.json")
    current = data_fingerprint(data_dir, tasks=True)
    if not os.path.exists(path):
        os.makedirs(results, exist_ok=True)
        efficiency.write_json(path, current)
        log(f"the data's SHA-256 -> {path}: later sittings for these records check theirs")
        return
    expected = efficiency.read_json(path)
    differ = sorted(name for name in expected.keys() | current.keys()
                    if expected.get(name) != current.get(name))
    if differ:
        raise SystemExit(
            f"error: {data_dir} is not the data the records in {results} were made on "
            f"({len(differ)} file(s) differ from {path}, e.g. {', '.join(differ[:3])}): build "
            "it with the code and corpora of those records (git log names when they began), "
            "or start new records with --results DIR")


# ----------------------------------------------------------------------------- the baselines

def record_baselines(store: Store, data_dir: str) -> None:
    """baseline.jsonl: the pos scores of tagging every word with train.txt's most frequent tag,
    on dev and test, so that the report can tell a fine-tuned tagger from one that collapsed
    to that tag (whose unseen-word accuracy is the share of unseen words with that tag)."""
    from electra_tf.finetuning import pos
    from electra_tf.finetuning.task import most_frequent
    from electra_tf.tokenization import WordPieceTokenizer

    if store.has("baseline", task="pos"):
        return
    directory = os.path.join(data_dir, "finetuning_data", "pos")
    if not os.path.exists(os.path.join(directory, "train.txt")):
        return
    train = pos.read_task_file(os.path.join(directory, "train.txt"))
    tag = most_frequent(t for sentence in train for t in sentence.tags)
    normalize = WordPieceTokenizer(os.path.join(data_dir, "vocab.txt"), True).normalize
    lines = []
    for split in ("dev", "test"):
        sentences = pos.read_task_file(os.path.join(directory, f"{split}.txt"))
        scores = pos.accuracies([s.tags for s in sentences], [[tag] * len(s.tags)
                                                              for s in sentences],
                                pos.unseen_words(train, sentences, normalize))
        lines += [{"task": "pos", "baseline": f"most frequent tag {tag}", "split": split,
                   "metric": metric, "score": score} for metric, score in scores.items()]
    store.append("baseline", lines)


# The two no-context masked LMs of baseline.jsonl (task "pretraining").
UNIGRAM = "unigram distribution"
KEPT_OR_UNIGRAM = "the kept token, else the unigram distribution"
BASELINE_SEED = 0  # the masking draws of KEPT_OR_UNIGRAM's measurement


def record_unigram_baseline(store: Store, data_dir: str, max_seq_length: int) -> None:
    """baseline.jsonl: the masked-LM loss (nats) and accuracy of two masked LMs that read no
    context, each a level a masked LM stays at until it uses the context:

    - UNIGRAM predicts every masked token from the pretraining text's unigram distribution
      (the tokens other than [PAD], [CLS] and [SEP], from which the masked positions are drawn);
    - KEPT_OR_UNIGRAM is what the training metrics show of such a model: the original's
      masking leaves 15% of the masked positions showing their own token (masking.py,
      REPLACE_WITH_MASK_PROB), which it copies (probability 1, loss 0), and predicts the
      unigram distribution at the [MASK]s. Measured over the whole text with
      electra_tf.masking.mask itself (its duplicated draws included) at the runs' mask_prob
      and max_predictions_per_seq (the config's defaults at max_seq_length).

    Both also get masked_lm_accuracy_at_mask, the training metric over the [MASK]s alone: the
    unigram distribution's top-1 share for either, the level a masked LM leaves only by
    reading its context."""
    import numpy as np
    import tensorflow as tf
    from electra_tf import config as config_lib
    from electra_tf import data, masking
    from electra_tf.tokenization import read_vocab

    if store.has("baseline", task="pretraining", baseline=KEPT_OR_UNIGRAM,
                 metric="masked_lm_accuracy_at_mask"):
        return
    vocab_file = os.path.join(data_dir, "vocab.txt")
    vocab = read_vocab(vocab_file)
    files = data.check_files(
        os.path.join(data_dir, "pretrain_tfrecords", "pretrain_data.tfrecord*"), max_seq_length)
    records = tf.data.TFRecordDataset(files).batch(1024).map(
        lambda r: data.decode_record(r, max_seq_length))
    counts = np.zeros(len(vocab), np.int64)
    for batch in records.as_numpy_iterator():
        counts += np.bincount(batch["input_ids"].ravel(), minlength=len(vocab))
    for special in ("[PAD]", "[CLS]", "[SEP]"):
        counts[vocab.index(special)] = 0
    p = counts / counts.sum()
    seen = p[p > 0]
    special = masking.SpecialIds.from_vocab(masking.load_vocab(vocab_file), vocab_file)
    rng = tf.random.Generator.from_seed(BASELINE_SEED)
    config = config_lib.from_hparams("baseline", data_dir, {"max_seq_length": max_seq_length})
    weight = kept = unigram_loss = unigram_correct = 0.0
    for batch in records:
        masked = masking.mask(batch["input_ids"], batch["input_mask"], config.mask_prob,
                              config.max_predictions_per_seq, special, rng)
        shown = tf.gather(masked.input_ids, masked.masked_lm_positions, batch_dims=1).numpy()
        labels, weights = masked.masked_lm_ids.numpy(), masked.masked_lm_weights.numpy()
        at_mask = (shown == special.mask) * weights
        weight += float(weights.sum())
        kept += float(((shown != special.mask) * weights).sum())
        unigram_loss += float((-np.log(np.maximum(p[labels], 1e-30)) * at_mask).sum())
        unigram_correct += float(((labels == p.argmax()) * at_mask).sum())
    scores = {UNIGRAM: {"masked_lm_loss": float(-(seen * np.log(seen)).sum()),
                        "masked_lm_accuracy": float(seen.max()),
                        "masked_lm_accuracy_at_mask": float(seen.max())},
              KEPT_OR_UNIGRAM: {"masked_lm_loss": unigram_loss / weight,
                                "masked_lm_accuracy": (kept + unigram_correct) / weight,
                                "masked_lm_accuracy_at_mask":
                                    unigram_correct / (weight - kept)}}
    store.append("baseline", [
        {"task": "pretraining", "baseline": name, "split": "train", "metric": metric,
         "score": score, "tokens": int(counts.sum())}
        for name, by_metric in scores.items() for metric, score in by_metric.items()
        if not store.has("baseline", task="pretraining", baseline=name, metric=metric)])
