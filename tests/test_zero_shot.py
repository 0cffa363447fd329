"""Zero-shot classification with the replaced-token-detection head: templates, the decision
rule on crafted logits, and an end-to-end run whose predictions equal the pretrained
discriminator's own verdicts computed here independently.

No trained ELECTRA discriminator can be had offline (none is shipped in a package), so accuracy
above chance on real sentiment is not checked here; docs/finetuning.md says what was checked."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from conftest import BERT_VOCAB, TINY_FINETUNING
from electra_tf.finetuning import zero_shot
from electra_tf.finetuning.config import from_hparams
from electra_tf.finetuning.task import SplitData
from electra_tf.hparam_parsing import ConfigError
from electra_tf.tokenization import WordPieceTokenizer

ZERO_SHOT = {**TINY_FINETUNING, "task_names": ["sst_zeroshot"], "max_seq_length": 128}


@pytest.mark.parametrize("template, message", [
    ("It was {word}.", r"must hold \{sentence\} once, not 0 times"),
    ("{sentence} {word} and {word}", r"must hold \{word\} once, not 2 times"),
    ("{sentence} [SEP] x [SEP] {word}", r"must hold \[SEP\] at most once"),
    ("{sentence} It was {word}ly.", r"\{word\} touches a letter"),
    ("{sentence}It was {word}.", r"\{sentence\} touches a letter"),
])
def test_bad_templates_fail_at_start(template, message):
    with pytest.raises(ConfigError, match="hparam 'zero_shot_template': .*" + message):
        from_hparams("m", "/nonexistent", {"task_names": ["sst_zeroshot"],
                                           "zero_shot_template": template})
    zero_shot.check_template("{sentence} [SEP] ({word})!")  # punctuation and [SEP] are fine


def test_label_words_and_training_are_checked():
    with pytest.raises(ConfigError, match=r"needs a word for each sst label \['0', '1'\]"):
        from_hparams("m", "/nonexistent", {"task_names": ["sst_zeroshot"],
                                           "zero_shot_label_words": {"1": "good"}})
    with pytest.raises(ConfigError, match="are not trained"):
        from_hparams("m", "/nonexistent", {"task_names": ["sst_zeroshot"], "do_train": True})
    with pytest.raises(ConfigError, match="cannot share a run with tasks that train"):
        from_hparams("m", "/nonexistent", {"task_names": ["sst_zeroshot", "sst"]})
    config = from_hparams("m", "/nonexistent", {"task_names": ["sst_zeroshot", "cola_zeroshot"]})
    assert not config.do_train and config.do_eval


def test_the_least_replaced_word_wins():
    """A crafted case: rows are (sentence, label) in label order; the word spans' mean logit
    decides, lowest wins."""
    task = zero_shot.TASKS[0]
    examples = [None, None, None]
    # Three sentences x labels ("0": terrible, "1": great); logits [6 rows, 5 positions].
    outputs = np.zeros((6, 5), np.float32)
    outputs[0, 3], outputs[1, 3] = 2.0, -1.0  # "great" looks original: label 1
    outputs[2, 3], outputs[3, 3] = -3.0, 0.5  # "terrible" looks original: label 0
    outputs[4, 2:4], outputs[5, 3] = [-4.0, 3.0], 0.0  # a two-piece word: mean -0.5 < 0
    arrays = {"word_start": np.array([3, 3, 3, 3, 2, 3]), "word_end": np.array([4, 4, 4, 4, 4, 4])}
    data = SplitData(task, "dev", arrays, examples)
    assert task.predictions(data, outputs).tolist() == [1, 0, 0]


@pytest.fixture
def tokenizer():
    return WordPieceTokenizer(str(BERT_VOCAB))


def test_rows_tokenize_as_the_whole_filled_template(finetuning_dir, tokenizer):
    config = from_hparams("tiny", str(finetuning_dir), ZERO_SHOT)
    data = zero_shot.TASKS[0].load(config, "dev", tokenizer)
    assert len(data) == 2 * len(data.examples) == 80
    for row in (0, 1, 17, 79):
        example = data.examples[row // 2]
        word = ("terrible", "great")[row % 2]
        whole = tokenizer.tokenize_to_ids([f"{example.text_a} It was {word}."])[0]
        n = int(data.arrays["input_mask"][row].sum())
        ids = data.arrays["input_ids"][row, :n].tolist()
        assert ids == [tokenizer.vocab["[CLS]"], *whole, tokenizer.vocab["[SEP]"]]
        start, end = data.arrays["word_start"][row], data.arrays["word_end"][row]
        assert tokenizer.convert_ids_to_tokens(ids[start:end]) == [word]
        assert not data.arrays["segment_ids"][row].any()
    # "[SEP]" starts segment B; a long sentence is cut, the template kept.
    config = from_hparams("tiny", str(finetuning_dir), {
        **ZERO_SHOT, "max_seq_length": 12,
        "zero_shot_template": "{sentence} [SEP] all in all , {word} !",
        "zero_shot_label_words": {"0": "bad", "1": "wonderful"}})
    data = zero_shot.TASKS[0].load(config, "dev", tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(data.arrays["input_ids"][1])
    assert tokens[-8:] == ["[SEP]", "all", "in", "all", ",", "wonderful", "!", "[SEP]"]
    assert data.arrays["segment_ids"][1].tolist() == [0] * 5 + [1] * 7
    # Its rows' ids carry their tokens: an ensemble of two templates is refused, not averaged
    # at unrelated positions.
    ids = zero_shot.TASKS[0].row_ids(data)
    assert ids[1].startswith("1#") and len(set(ids)) == len(ids)
    plain = zero_shot.TASKS[0].load(from_hparams("tiny", str(finetuning_dir), ZERO_SHOT), "dev",
                                    tokenizer)
    assert not set(ids) & set(zero_shot.TASKS[0].row_ids(plain))


def test_zero_shot_end_to_end_equals_the_discriminators_verdicts(finetuning_dir, tokenizer):
    """run_finetuning evaluates the pretrained discriminator as it is (no training) and its
    accuracy and SST-2 submission equal the verdicts of the saved discriminator.keras on the
    filled templates, computed here without the task's code."""
    import keras

    import run_finetuning

    config = from_hparams("tiny", str(finetuning_dir), {**ZERO_SHOT, "write_test_outputs": True})
    results = run_finetuning.run(config)
    model_dir = finetuning_dir / "models" / "tiny"
    discriminator = keras.saving.load_model(model_dir / "discriminator.keras")

    def verdicts(sentences: list[str]) -> list[int]:
        """Each sentence's label: the template word the discriminator finds less likely
        replaced, scored in one batch of rows padded with input_mask 0."""
        rows = [[101, *ids, 102] for ids in tokenizer.tokenize_to_ids(
            [f"{sentence} It was {word}." for sentence in sentences
             for word in ("terrible", "great")])]
        ids = np.zeros((len(rows), max(map(len, rows))), np.int32)
        mask = np.zeros_like(ids)
        for i, row in enumerate(rows):
            ids[i, :len(row)], mask[i, :len(row)] = row, 1
        logits = discriminator({"input_ids": ids, "input_mask": mask,
                                "segment_ids": np.zeros_like(ids)})["logits"].numpy()
        # The word's score: it is followed by "." and [SEP].
        scores = np.array([logits[i, len(row) - 3] for i, row in enumerate(rows)])
        return [int(i) for i in scores.reshape(-1, 2).argmin(1)]

    sst = finetuning_dir / "finetuning_data" / "sst"
    dev = [line.split("\t") for line in (sst / "dev.tsv").read_text().splitlines()[1:]]
    expected = verdicts([sentence for sentence, _ in dev])
    accuracy = 100 * np.mean([p == int(label) for p, (_, label) in zip(expected, dev)])
    assert results == {"sst_zeroshot": {"accuracy": pytest.approx(accuracy)}}
    summary = json.loads((model_dir / "results" / "sst_zeroshot_results.json").read_text())
    assert summary["median"]["sst_zeroshot"]["accuracy"] == pytest.approx(accuracy)
    assert "glue_score_median" not in summary  # zero-shot is not a GLUE submission score
    test = [line.split("\t")[1] for line in (sst / "test.tsv").read_text().splitlines()[1:]]
    written = (model_dir / "test_predictions" / "sst_zeroshot_trial_1" / "SST-2.tsv")
    assert [int(line.split("\t")[1]) for line in written.read_text().splitlines()[1:]] == \
        verdicts(test)
    assert not (model_dir / "finetuning_models").exists()  # nothing was trained or saved


def test_a_checkpoint_without_the_head_is_refused(finetuning_dir):
    """A bare encoder (e.g. Hugging Face ElectraModel, or BERT) has no replaced-token head:
    zero-shot would classify with random weights, so it stops."""
    import keras

    import run_finetuning
    from electra_tf import checkpoint_names

    disc = keras.saving.load_model(finetuning_dir / "models" / "tiny" / "discriminator.keras")
    names = checkpoint_names.encoder_variables(disc.encoder, "electra")
    prefix = str(finetuning_dir / "bare" / "model.ckpt")
    tf.io.gfile.makedirs(str(finetuning_dir / "bare"))
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=sorted(names),
                      shape_and_slices=[""] * len(names),
                      tensors=[tf.convert_to_tensor(names[n]) for n in sorted(names)])
    (finetuning_dir / "bare" / "checkpoint").write_text('model_checkpoint_path: "model.ckpt"\n')
    config = from_hparams("tiny", str(finetuning_dir),
                          {**ZERO_SHOT, "init_checkpoint": str(finetuning_dir / "bare")})
    with pytest.raises(ValueError, match="has no replaced-token-detection head"):
        run_finetuning.run(config)
