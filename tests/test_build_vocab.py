"""Vocabulary learning: corpus -> vocab.txt -> tokenizer -> TFRecords -> pretraining config."""

import pytest

from conftest import SAMPLE, own_flags, tiny_config, usage_error
from electra_tf.tokenization import WordPieceTokenizer
from pretrain_data import build_pretraining_dataset as builder
from pretrain_data import build_vocab
from pretrain_data.build_vocab import learn_vocab


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    directory = tmp_path_factory.mktemp("corpus")
    # 100,000 characters: enough words seen 10 times for 600-700 tokens; the learner's time
    # grows with the distinct words.
    text = (SAMPLE / "corpus" / "enwiki_sample.txt").read_text(encoding="utf-8")[:100000]
    (directory / "a.txt").write_text(text, encoding="utf-8")
    return directory


def test_learned_vocab_round_trip(corpus, tmp_path):
    vocab = learn_vocab([str(corpus / "a.txt")], 1500)
    assert len(vocab) == len(set(vocab)) and 500 < len(vocab) <= 1500
    assert [vocab.index(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == \
        [0, 100, 101, 102, 103]  # BERT's ids
    assert "the" in vocab and any(t.startswith("##") for t in vocab)
    assert all(t == t.lower() for t in vocab if not t.startswith("["))
    path = tmp_path / "vocab.txt"
    path.write_text("".join(t + "\n" for t in vocab), encoding="utf-8")

    lines = (corpus / "a.txt").read_text(encoding="utf-8").split("\n")
    ids = [i for row in WordPieceTokenizer(str(path)).tokenize_to_ids(lines) for i in row]
    assert ids.count(vocab.index("[UNK]")) < 0.01 * len(ids)

    data_dir = tmp_path / "data"
    summary = builder.build(str(corpus), str(path), str(data_dir / "pretrain_tfrecords"),
                            max_seq_length=32, num_out_files=2, show_progress=False)
    assert summary["examples"] > 100
    (data_dir / "vocab.txt").write_bytes(path.read_bytes())
    config = tiny_config(data_dir)
    assert config.vocab_size == len(vocab)  # taken from the file


def test_cli(corpus, tmp_path, capsys, caplog):
    """The command in this process, cased, in the compact layout with one more reserved token
    (BERT's layout is test_learned_vocab_round_trip's; tests/test_cli.py starts it as a
    script), its flags its own (conftest.own_flags)."""
    out = tmp_path / "vocab.txt"
    with own_flags(build_vocab) as flag_values:
        assert flag_values["bert_layout"].default is True
        build_vocab.main(flag_values([
            "build_vocab.py", f"--corpus-dir={corpus}", f"--output-file={out}",
            "--vocab-size=600", "--nodo-lower-case", "--nobert_layout",
            "--reserved_tokens=[URL],[MASK]"]))
        flag_values.unparse_flags()
        printed = capsys.readouterr()
        tokens = out.read_text(encoding="utf-8").split("\n")[:-1]
        # What it is doing while it works, then the result once.
        assert printed.out.splitlines() == [
            f"counting words: file 1/1, {corpus / 'a.txt'}",
            next(line for line in printed.out.splitlines()
                 if line.startswith("learning up to 600 tokens from ")),
            f"wrote {len(tokens)} tokens to {out}"]
        assert str(out) not in printed.err and str(out) not in caplog.text
        assert tokens[:6] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[URL]"]
        assert any(t != t.lower() for t in tokens)  # cased
        # The usage errors (conftest.usage_error).
        assert "exists; pass --overwrite" in usage_error(
            build_vocab, f"--corpus_dir={corpus}", f"--output_file={out}")
        assert "--vocab_size 50 leaves no room" in usage_error(
            build_vocab, f"--corpus_dir={corpus}", f"--output_file={tmp_path / 'small.txt'}",
            "--vocab_size=50")
