"""Token ids identical to the original's tokenizer on every line of the real corpora."""

import re
import sys
import unicodedata

import pytest
from official.nlp.tools import tokenization as reference

from conftest import BERT_VOCAB, SAMPLE, TEST_DATA
from electra_tf.tokenization import WordPieceTokenizer

CORPORA = [SAMPLE / "corpus" / "enwiki_sample.txt", TEST_DATA / "brown_sample.txt",
           TEST_DATA / "tokenizer_hard_cases.txt"]


def _electra_is_control(char: str) -> bool:
    """ELECTRA's model/tokenization.py drops every C* character; tf-models-official's copy of
    BERT's tokenizer only Cc and Cf."""
    return char not in "\t\n\r" and unicodedata.category(char).startswith("C")


@pytest.fixture
def original(monkeypatch):
    """tf-models-official's FullTokenizer with ELECTRA's two differences from it."""
    monkeypatch.setattr(reference, "_is_control", _electra_is_control)

    def make(lower: bool) -> reference.FullTokenizer:
        tokenizer = reference.FullTokenizer(str(BERT_VOCAB), do_lower_case=lower)
        tokenizer.wordpiece_tokenizer.max_input_chars_per_word = 200  # tf-models: 400
        return tokenizer
    return make


def _lines(path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")  # "\n" only: \u2028 etc. stay in-line


@pytest.mark.parametrize("lower", [True, False], ids=["uncased", "cased"])
@pytest.mark.parametrize("corpus", CORPORA, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_ids_match_the_original_on_every_line(corpus, lower, original):
    lines = _lines(corpus)
    ref = original(lower)
    expected = [ref.convert_tokens_to_ids(ref.tokenize(line)) for line in lines]
    got = WordPieceTokenizer(str(BERT_VOCAB), do_lower_case=lower).tokenize_to_ids(lines)
    mismatches = [(line[:80], ref.tokenize(line)[:20]) for line, g, e
                  in zip(lines, got, expected) if g != e]
    assert not mismatches, f"{len(mismatches)} of {len(lines)} lines differ: {mismatches[:3]}"


def test_the_hard_cases_exercise_every_path():
    lines = _lines(TEST_DATA / "tokenizer_hard_cases.txt")
    tokenizer = WordPieceTokenizer(str(BERT_VOCAB))
    ids = dict(zip(lines, tokenizer.tokenize_to_ids(lines)))
    assert ids["a" * 201 + " over the limit"][0] == tokenizer.vocab["[UNK]"]
    assert ids["b" * 200 + " exactly at the limit"][0] != tokenizer.vocab["[UNK]"]
    assert ids["é" * 150 + " multibyte word under the limit in characters"][0] != \
        tokenizer.vocab["[UNK]"]
    assert ids[""] == [] and ids["   "] == []


def test_normalization_matches_the_original_on_every_code_point(original):
    basic = original(True).basic_tokenizer
    text = "".join(chr(code) for code in range(sys.maxunicode + 1)
                   if not 0xD800 <= code < 0xE000)
    expected = basic._run_strip_accents(basic._clean_text(text).lower())
    # Ours also maps U+2028/U+2029 to a space, which the original splits words on later.
    expected = expected.replace("\u2028", " ").replace("\u2029", " ")
    assert WordPieceTokenizer(str(BERT_VOCAB)).normalize(text) == expected
    cased = WordPieceTokenizer(str(BERT_VOCAB), do_lower_case=False)
    assert cased.normalize(text) == basic._clean_text(text).replace("\u2028", " ").replace(
        "\u2029", " ")


def test_vocab_without_special_tokens_fails(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\nhello\n")
    with pytest.raises(ValueError, match=r"lacks the special tokens \['\[CLS\]', '\[SEP\]'"):
        WordPieceTokenizer(str(vocab))


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world"]


def test_vocab_with_a_token_twice_fails_naming_the_file_and_lines(tmp_path):
    """TensorFlow Text refuses it with "Tokens in the vocabulary must be unique", naming nothing;
    lines equal once stripped count as the same token, as the original reads them."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB + ["hello "]) + "\n")
    with pytest.raises(ValueError, match=rf"{re.escape(str(vocab))} holds the token 'hello' on "
                                         r"lines 6 and 8 .*\[unusedN\]"):
        WordPieceTokenizer(str(vocab))


def _originals_size(path) -> int:
    """The ids BERT's (and ELECTRA's) load_vocab gives: one per line read, each stripped; a
    blank line holds an id too (its dict keeps the last "" only, so count by the ids)."""
    return max(reference.load_vocab(str(path)).values()) + 1


@pytest.mark.parametrize("text", [
    "\n".join(VOCAB) + "\n", "\n".join(VOCAB), "\n".join(VOCAB) + "\n\n",
    "\n".join(VOCAB) + "\n\n\n", "\n".join(VOCAB) + "\n  \n", "\r\n".join(VOCAB) + "\r\n\r\n"],
    ids=["newline", "no_final_newline", "a_trailing_blank_line", "two_trailing_blank_lines",
         "a_trailing_space_line", "crlf_with_a_trailing_blank_line"])
def test_the_vocabulary_is_counted_one_way_as_the_originals_load_vocab(tmp_path, text):
    """Every line is a token, stripped, trailing blank ones too: read_vocab and the
    pretraining and fine-tuning configs' vocab_size agree with the original (fine-tuning's
    count once dropped trailing blank lines)."""
    from electra_tf import config
    from electra_tf.finetuning import config as finetuning_config
    from electra_tf.tokenization import read_vocab
    path = tmp_path / "vocab.txt"
    path.write_bytes(text.encode())
    size = _originals_size(path)
    assert len(read_vocab(str(path))) == size
    assert read_vocab(str(path))[:len(VOCAB)] == VOCAB
    assert config.from_hparams("m", str(tmp_path)).vocab_size == size
    assert finetuning_config.from_hparams("m", str(tmp_path), {
        "task_names": ["sst"], "vocab_file": str(path)}).vocab_size == size


def test_convert_checkpoint_counts_a_trailing_blank_line_as_a_token(tmp_path):
    from conftest import save_discriminator, tiny_config
    from convert_checkpoint import convert
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n\n")
    save_discriminator(tmp_path, "run", tiny_config(tmp_path, vocab_size=len(VOCAB)))
    with pytest.raises(ValueError, match=rf"^{path} has {len(VOCAB) + 1} tokens but the "
                       rf"model's vocab_size is {len(VOCAB)}: "):
        convert(str(tmp_path / "models" / "run"), str(tmp_path / "out"), "keras",
                vocab_file=str(path))
