"""What a pretrained discriminator detects: its replaced-token AUC beside detectors that read
no more of the sentence than a token and its two neighbours.

  python experiments/detection_baselines.py --data_dir DATA_DIR --model_name NAME
      [--step N] [--batches 16] [--batch_size B] [--seed 0]
      --results experiments/results/LADDER/detection.jsonl

A discriminator's training AUC says how well it tells generator samples from the text, not what
it reads to do so. This runs a pretraining run's generator and discriminator (the checkpoint,
inference mode, the run's own masking and sampling from --seed) on --batches batches of the
first pretraining TFRecord files (as few as hold them), and scores every real token of the
corrupted input by:

- the discriminator: its logit, the training metric disc_auc's score;
- the token alone: how often that token id was a replacement, counted on the other fold;
- the token and its neighbours' bigrams: a logistic regression on the token alone's rate, the
  pointwise mutual information of (left neighbour, token) and of (token, right neighbour),
  and whether each of those bigrams is missing from the other TFRecord files' text;
- bigrams and the discriminator: the same regression with the discriminator's logit added.

The last detector gains over the discriminator alone by what bigrams know and it missed. The
bigram and unigram counts come from the pretraining files after the judged ones: other
examples, though often of the same documents (the builder deals a document's examples across
its files), so the counts have not read the sentences judged, while the discriminator trained
on them. The token's rate and the regressions are fitted on labelled positions of the same
generator's samples (the other fold); the discriminator is not refitted.
Positions are those disc_auc counts: every real token, [CLS] and [SEP] included. The batches
are split in two folds by parity; each detector is fitted on one and scored on the other, and
a record holds both folds' AUCs. Each run appends one record to --results (JSON Lines), which
experiments/ladder_report.py tabulates.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any, Sequence

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (REPO, os.path.join(REPO, "experiments")):
    if path not in sys.path:
        sys.path.insert(0, path)

import records  # noqa: E402

DISCRIMINATOR = "discriminator"
TOKEN = "the token alone"
BIGRAMS = "the token and its neighbours' bigrams"
BIGRAMS_AND_DISCRIMINATOR = "bigrams and the discriminator"
DETECTORS = (DISCRIMINATOR, TOKEN, BIGRAMS, BIGRAMS_AND_DISCRIMINATOR)
# Pseudo-counts pulling a token's replaced rate towards the fold's rate: a token seen a few
# times gets little more than the base rate.
TOKEN_PRIOR = 10.0
# Dirichlet smoothing of P(token | neighbour) towards P(token), in pseudo-counts.
BIGRAM_PRIOR = 10.0
EDGE = -1  # the neighbour of a sequence's first and last token


class TooLittleText(ValueError):
    """The pretraining files are too few or too small for two folds and the counts."""


@dataclasses.dataclass
class Counts:
    """Unigram and bigram counts of token ids: `pairs` the sorted keys left * vocab + right."""
    vocab_size: int
    unigrams: np.ndarray
    pairs: np.ndarray
    pair_counts: np.ndarray

    @classmethod
    def of(cls, sequences: Sequence[tuple[np.ndarray, np.ndarray]], vocab_size: int) -> Counts:
        """Counts over (input_ids, input_mask) batches: each real token and each pair of
        adjacent real tokens."""
        unigrams = np.zeros(vocab_size, np.int64)
        keys = []
        for ids, mask in sequences:
            ids = ids.astype(np.int64)
            real = mask.astype(bool)
            unigrams += np.bincount(ids[real], minlength=vocab_size)
            both = real[:, :-1] & real[:, 1:]
            keys.append(ids[:, :-1][both] * vocab_size + ids[:, 1:][both])
        if not unigrams.any():
            raise TooLittleText("the counted pretraining files hold no text")
        pairs, pair_counts = np.unique(np.concatenate(keys), return_counts=True)
        return cls(vocab_size, unigrams, pairs, pair_counts)

    def bigram(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """How often `right` followed `left` (0 with an EDGE)."""
        keys = np.where((left < 0) | (right < 0), -1,
                        left.astype(np.int64) * self.vocab_size + right)
        at = np.clip(np.searchsorted(self.pairs, keys), 0, len(self.pairs) - 1)
        return np.where(self.pairs[at] == keys, self.pair_counts[at], 0)

    def pmi(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """log P(right | left) / P(right), P(right | left) smoothed towards P(right); 0 at an
        EDGE (no evidence either way)."""
        p = (self.unigrams + 1.0) / (self.unigrams.sum() + self.vocab_size)
        p_right = p[np.maximum(right, 0)]
        given = (self.bigram(left, right) + BIGRAM_PRIOR * p_right) / (
            self.unigrams[np.maximum(left, 0)] + BIGRAM_PRIOR)
        return np.where((left < 0) | (right < 0), 0.0, np.log(given / p_right))


@dataclasses.dataclass
class Positions:
    """The real tokens of the corrupted batches, flattened: token, neighbours, label (replaced
    and different from the original), the discriminator's logit, and the batch index."""
    token: np.ndarray
    left: np.ndarray
    right: np.ndarray
    label: np.ndarray
    logit: np.ndarray
    batch: np.ndarray

    @classmethod
    def of(cls, outputs: Sequence[dict[str, np.ndarray]]) -> Positions:
        """From the pretraining model's outputs (fake_input_ids, input_mask, disc_labels,
        disc_logits) of each batch."""
        parts = []
        for index, out in enumerate(outputs):
            ids, real = out["fake_input_ids"].astype(np.int64), out["input_mask"].astype(bool)
            edge = np.full((len(ids), 1), EDGE, np.int64)
            left = np.concatenate([edge, np.where(real, ids, EDGE)[:, :-1]], 1)
            right = np.concatenate([np.where(real, ids, EDGE)[:, 1:], edge], 1)
            parts.append((ids[real], left[real], right[real], out["disc_labels"][real],
                          out["disc_logits"][real], np.full(real.sum(), index)))
        return cls(*(np.concatenate(column) for column in zip(*parts)))

    def take(self, where: np.ndarray) -> Positions:
        """The positions where `where` (a boolean mask or indices) selects."""
        return Positions(*(getattr(self, f.name)[where] for f in dataclasses.fields(self)))


def token_rate(fit: Positions, tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """Each token's replaced rate in `fit`, smoothed towards fit's overall rate."""
    base = fit.label.mean()
    replaced = np.bincount(fit.token, weights=fit.label, minlength=vocab_size)
    seen = np.bincount(fit.token, minlength=vocab_size)
    return ((replaced + TOKEN_PRIOR * base) / (seen + TOKEN_PRIOR))[tokens]


def _halves(positions: Positions) -> tuple[np.ndarray, np.ndarray]:
    half = (positions.batch // 2) % 2 == 0
    return half, ~half


def cross_fitted_rate(positions: Positions, vocab_size: int) -> np.ndarray:
    """token_rate for every position, counted on the other half of `positions` (by batch),
    so that no position's rate has seen its own label."""
    rate = np.empty(len(positions.label))
    for part in _halves(positions):
        rate[part] = token_rate(positions.take(~part), positions.token[part], vocab_size)
    return rate


def half_rate(fit: Positions, tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """The mean of the token rates counted on each half of `fit`: rates smoothed as much as
    the cross-fitted ones a regression was fitted on."""
    return np.mean([token_rate(fit.take(part), tokens, vocab_size) for part in _halves(fit)],
                   axis=0)


def features(positions: Positions, rate: np.ndarray, counts: Counts,
             with_logit: bool) -> np.ndarray:
    """The bigram detector's inputs (see the module docstring), the logit last if asked."""
    rate = np.clip(rate, 1e-6, 1 - 1e-6)
    columns = [np.log(rate / (1 - rate)),
               counts.pmi(positions.left, positions.token),
               counts.pmi(positions.token, positions.right),
               (counts.bigram(positions.left, positions.token) == 0) & (positions.left >= 0),
               (counts.bigram(positions.token, positions.right) == 0) & (positions.right >= 0)]
    if with_logit:
        columns.append(positions.logit)
    return np.stack(columns, 1).astype(np.float64)


def fold_aucs(positions: Positions, counts: Counts) -> dict[str, list[float]]:
    """Each detector's AUC on each fold (batches of even, then odd index), fitted on the other."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    aucs: dict[str, list[float]] = {name: [] for name in DETECTORS}
    for held_out in (0, 1):
        test = positions.take(positions.batch % 2 == held_out)
        fit = positions.take(positions.batch % 2 != held_out)
        if len(set(test.label)) < 2 or len(set(fit.label)) < 2:
            raise TooLittleText("a fold has no replaced token or only replaced tokens: read "
                                "more batches (--batches)")
        aucs[DISCRIMINATOR].append(roc_auc_score(test.label, test.logit))
        test_rate = token_rate(fit, test.token, counts.vocab_size)
        aucs[TOKEN].append(roc_auc_score(test.label, test_rate))
        fit_rate = cross_fitted_rate(fit, counts.vocab_size)
        scored_rate = half_rate(fit, test.token, counts.vocab_size)
        for name, with_logit in ((BIGRAMS, False), (BIGRAMS_AND_DISCRIMINATOR, True)):
            regression = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
            regression.fit(features(fit, fit_rate, counts, with_logit), fit.label)
            scores = regression.decision_function(features(test, scored_rate, counts,
                                                           with_logit))
            aucs[name].append(roc_auc_score(test.label, scores))
    return {name: [float(a) for a in values] for name, values in aucs.items()}


# ----------------------------------------------------------------------------- running a model

def judges(objective: str) -> bool:
    """Whether `objective` (the hparam) trains a discriminator that judges every token against
    the labels this diagnostic scores (replaced and different from the original): ELECTRA's,
    not ELECTRA 15%'s (the masked positions only), Electric's (every draw is fake, and its
    score holds the generator's) nor a masked LM's."""
    from electra_tf import objectives

    cls = objectives.REGISTRY.get(objective)
    return (cls is not None and issubclass(cls, objectives.ReplacedTokenDetection)
            and not cls.masked_only and not cls.all_replaced_are_fake)


def judge(data_dir: str, model_name: str, step: int | None = None, batches: int = 16,
          batch_size: int | None = None, seed: int = 0) -> dict[str, Any]:
    """detection.jsonl's record of one pretraining run (the module docstring); batch_size
    defaults to the run's eval_batch_size."""
    stopwatch = records.Stopwatch()
    about, outputs, counts = run_model(data_dir, model_name, step, batches, batch_size, seed)
    positions = Positions.of(outputs)
    aucs = fold_aucs(positions, counts)
    return {**about, "positions": int(len(positions.label)),
            "replaced_share": float(positions.label.mean()), "auc": aucs,
            **stopwatch.spent()}


def leading_files(files: Sequence[str], examples: int) -> list[str]:
    """The fewest of `files`, from the first, that hold `examples` records, leaving one file
    or more for the counts."""
    import tensorflow as tf

    if len(files) < 2:
        raise TooLittleText(f"{', '.join(files) or 'no file'}: the pretraining text needs two "
                            "files or more (the first are judged, the others counted)")
    held = 0
    for n, path in enumerate(files[:-1], 1):
        held += sum(1 for _ in tf.data.TFRecordDataset(path))
        if held >= examples:
            break
    return list(files[:n])


def run_model(data_dir: str, model_name: str, step: int | None, batches: int,
              batch_size: int | None, seed: int
              ) -> tuple[dict[str, Any], list[dict[str, np.ndarray]], Counts]:
    """What the record says of the run, its outputs on `batches` batches of the leading
    pretraining files (leading_files), and the counts of the other files."""
    import tensorflow as tf
    from electra_tf import config as config_lib
    from electra_tf import data, pretraining, resume

    config = config_lib.from_hparams(model_name, data_dir, {"seed": seed})
    if not judges(config.objective):
        raise SystemExit(f"--model_name {model_name}: its objective {config.objective!r} "
                         "trains no detector of every token; choose an ELECTRA run")
    steps = resume.checkpoint_steps(config.model_dir)
    if not steps or (step is not None and step not in steps):
        raise SystemExit(f"--step: {config.model_dir} has checkpoints at steps {steps}")
    step = max(steps) if step is None else step
    files = data.check_files(config.pretrain_tfrecords, config.max_seq_length)
    batch_size = batch_size or config.eval_batch_size
    judged_files = leading_files(files, batches * batch_size)
    special = pretraining.SpecialIds.from_vocab(pretraining.load_vocab(config.vocab_file),
                                                config.vocab_file)
    state = pretraining.create_state(config, special, tf.distribute.get_strategy())
    resume.checkpoint(state.model).restore(
        os.path.join(config.model_dir, f"ckpt-{step}")).expect_partial()

    keys = ("fake_input_ids", "input_mask", "disc_labels", "disc_logits")
    judged = data.pretraining_dataset(judged_files, batch_size, config.max_seq_length,
                                      is_training=False).take(batches)
    outputs = [{k: v.numpy() for k, v in state.model(features, training=False).items()
                if k in keys} for features in judged]
    if len(outputs) < 4:
        raise TooLittleText(f"{', '.join(judged_files)} hold fewer than four batches of "
                            f"{batch_size}: judge smaller batches (--batch_size)")
    text = tf.data.TFRecordDataset(files[len(judged_files):]).batch(1024).map(
        lambda r: data.decode_record(r, config.max_seq_length))
    counts = Counts.of([(b["input_ids"], b["input_mask"]) for b in text.as_numpy_iterator()],
                       config.vocab_size)
    about = {"model": model_name, "step": step, "objective": config.objective,
             "generator_hidden_size": config.generator_hidden_size, "seed": seed,
             "batches": len(outputs), "batch_size": batch_size,
             "judged_files": [os.path.basename(f) for f in judged_files],
             "counted_tokens": int(counts.unigrams.sum())}
    return about, outputs, counts


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", required=True,
                        help="the run's DATA_DIR (pretrain_tfrecords/, vocab.txt, models/)")
    parser.add_argument("--model_name", required=True,
                        help="the ELECTRA run under DATA_DIR/models")
    parser.add_argument("--step", type=int, default=None,
                        help="the checkpoint's step (default: the latest)")
    parser.add_argument("--batches", type=int, default=16,
                        help="batches judged (at least 4: two folds, each fitted on halves "
                             "of the other)")
    parser.add_argument("--batch_size", type=int, default=None,
                        help="examples a batch (default: the run's eval_batch_size)")
    parser.add_argument("--seed", type=int, default=0, help="the masking's and sampling's")
    parser.add_argument("--results", required=True, help="the JSON Lines file appended to")
    args = parser.parse_args(argv)
    if args.batches < 4:
        parser.error(f"--batches must be at least 4 (two folds, each fitted on halves of the "
                     f"other), got {args.batches}")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    from electra_tf.data import InputError

    try:
        record = judge(args.data_dir, args.model_name, args.step, args.batches,
                       args.batch_size, args.seed)
    except (TooLittleText, InputError) as e:
        raise SystemExit(f"error: {e}") from None
    records.append(args.results, [record])
    for name, values in record["auc"].items():
        print(f"{name}: AUC {np.mean(values):.3f} (folds {values[0]:.3f}, {values[1]:.3f})")
    print(f"appended to {args.results}")


if __name__ == "__main__":
    main()
