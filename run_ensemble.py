"""Ensembles fine-tuned models of one task from their prediction files.

  python run_ensemble.py --output_dir DIR --weights fit \\
      --predictions RESULTS/sst_outputs_1.npz,RESULTS/sst_outputs_2.npz,RESULTS/sst_outputs_3.npz

run_finetuning.py writes a prediction file per trial, RESULTS/<tasks>_outputs_<trial>.npz
(RESULTS is DATA_DIR/models/NAME/results/): the raw outputs of the dev splits, and of the test
splits when it writes test outputs. The files may come from the trials of one run or from runs of
different pretrained models or objectives, as long as they are of the same tasks and data.
Each task's outputs are averaged with the weights (class probabilities; regression scores;
SQuAD's start/end logits per window, before the answer search; tagging's per-word tag
probabilities), scored on every dev split with the task's own metric beside each member, the
members' median and the best member, and the test splits' leaderboard files are written as
run_finetuning.py's write_test_outputs writes them. DIR gets results.txt, results.json,
dev_predictions/ and test_predictions/; it must not exist.

--weights: "uniform" (the default), numbers >= 0 summing to 1 (one per file, in order), or
"fit": per task, forward selection (Caruana et al., 2004) on the task's first dev split, 10
rounds, by the task's main metric. Fitted weights never see a test split; the dev score of a
fitted ensemble is the split it was fitted on, so it is optimistic: report a split it was not
fitted on (e.g. a labelled test split).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's C++ start-up chatter

from absl import app, flags  # noqa: E402

import command_line  # noqa: E402  (electra_tf, and TensorFlow, load after the flags are parsed)

FLAGS = flags.FLAGS
flags.DEFINE_list("predictions", None, "Comma-separated prediction files (.npz) of "
                  "run_finetuning.py, at least two.")
flags.DEFINE_string("weights", "uniform", "'uniform', 'fit' (on the dev split) or one weight "
                    "per prediction file, comma-separated, >= 0, summing to 1.")
flags.DEFINE_string("output_dir", None, "A new directory for the results and leaderboard files.")
flags.DEFINE_string("hparams", "{}", "JSON dict of fine-tuning hparams that replace the "
                    "members' saved ones (e.g. data_dir when the data moved), or a .json path.")


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    if not FLAGS.predictions:
        raise app.UsageError("--predictions: name at least two prediction files")
    if not FLAGS.output_dir:
        raise app.UsageError("--output_dir: name a new directory for the results")
    from electra_tf.finetuning import ensemble
    from electra_tf.finetuning.task import DataError
    from electra_tf.hparam_parsing import ConfigError, load_hparams

    try:
        weights = ensemble.parse_weights(FLAGS.weights, len(FLAGS.predictions))
        overrides = load_hparams(FLAGS.hparams)
        ensemble.run(FLAGS.predictions, weights, FLAGS.output_dir, overrides)
    except (ensemble.EnsembleError, ConfigError, DataError, FileNotFoundError) as e:
        raise app.UsageError(str(e)) from None


if __name__ == "__main__":
    command_line.run(main, "docs/finetuning.md#ensembles")
