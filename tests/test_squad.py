"""SQuAD data: reading, windowed features, post-processing of hand-built outputs, scoring."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

import numpy as np
import pytest

from conftest import BERT_VOCAB, TEST_DATA
from electra_tf.finetuning import squad
from electra_tf.tokenization import WordPieceTokenizer

SAMPLE_V1 = TEST_DATA / "squad_v1_sample.json"

# The sample's five questions: id -> first answer text.
GOLD = {
    "5733be284776f41900661182": "Saint Bernadette Soubirous",
    "5733be284776f4190066117e": "a golden statue of the Virgin Mary",
    "5733b1da4776f41900661068": "1882",
    "5733b1da4776f4190066106b": "Father Julius Nieuwl",  # ends inside the word "Nieuwland"
    "5733b1da4776f41900661067": "an early wind tunnel",
}


@pytest.fixture(scope="module")
def tokenizer() -> WordPieceTokenizer:
    return WordPieceTokenizer(str(BERT_VOCAB))


def load_sample() -> dict:
    return json.loads(SAMPLE_V1.read_text())


def write_json(path: pathlib.Path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def sample_v2(tmp_path: pathlib.Path) -> str:
    """The sample plus two unanswerable questions, in SQuAD 2.0 form."""
    data = load_sample()
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["is_impossible"] = False
    data["data"][0]["paragraphs"][0]["qas"].append(
        {"id": "imp-1", "question": "Who built the Main Building's copper dome?", "answers": [],
         "is_impossible": True})
    data["data"][0]["paragraphs"][1]["qas"].append(
        {"id": "imp-2", "question": "In what year did the wind tunnel close?", "answers": [],
         "is_impossible": True})
    return write_json(tmp_path / "v2.json", data)


# ---------------------------------------------------------------------------------------------
# Reading


def test_read_training_locates_answers_by_word():
    examples = squad.read_squad(str(SAMPLE_V1), is_training=True, version_2=False)
    assert [e.qas_id for e in examples] == list(GOLD)
    for example in examples:
        words = example.doc_tokens[example.start_position:example.end_position + 1]
        assert GOLD[example.qas_id] in " ".join(words)
        assert example.orig_answer_text == GOLD[example.qas_id]
        assert example.doc_tokens == example.context.split()
    by_id = {e.qas_id: e for e in examples}
    # "In 1882, Albert Zahm": the answer is the second word, punctuation included.
    year = by_id["5733b1da4776f41900661068"]
    assert (year.start_position, year.end_position) == (1, 1)
    assert year.doc_tokens[1] == "1882,"
    partial = by_id["5733b1da4776f4190066106b"]
    assert partial.doc_tokens[partial.start_position:partial.end_position + 1] == [
        "Father", "Julius", "Nieuwland"]
    # A paragraph's questions share one word list.
    assert examples[0].doc_tokens is examples[1].doc_tokens
    assert examples[2].doc_tokens is not examples[0].doc_tokens


def test_read_evaluation_keeps_every_question_without_positions():
    examples = squad.read_squad(str(SAMPLE_V1), is_training=False, version_2=False)
    assert len(examples) == 5
    assert all(e.start_position is None and e.orig_answer_text is None for e in examples)
    assert examples[2].context.startswith("In 1882, Albert Zahm")


def test_context_is_split_on_the_originals_whitespace(tmp_path):
    context = "one\u202ftwo\u00a0three \t\nfour"
    words, char_to_word = squad._split_words(context)
    assert words == ["one", "two\u00a0three", "four"]  # U+202F splits, U+00A0 does not
    assert char_to_word[:5] == [0, 0, 0, 0, 1]
    data = {"data": [{"paragraphs": [{"context": context, "qas": [
        {"id": "q", "question": "?", "answers": [{"text": "four",
                                                  "answer_start": context.index("four")}]}]}]}]}
    (example,) = squad.read_squad(write_json(tmp_path / "ws.json", data), True, False)
    assert (example.start_position, example.end_position) == (2, 2)


def test_unfound_answers_are_skipped_with_one_warning_or_refused(tmp_path, monkeypatch):
    data = load_sample()
    qas = data["data"][0]["paragraphs"][1]["qas"]
    qas[0]["answers"][0]["answer_start"] = 60  # "1882" is not there
    qas[2]["answers"][0]["answer_start"] = 10_000  # beyond the context
    path = write_json(tmp_path / "bad.json", data)
    warnings = []
    monkeypatch.setattr(squad.logging, "warning", lambda msg, *args: warnings.append(msg % args))
    examples = squad.read_squad(path, is_training=True, version_2=False,
                                max_unfound_fraction=0.4)
    assert len(examples) == 3
    assert qas[0]["id"] not in {e.qas_id for e in examples}
    assert len(warnings) == 1
    assert "2 of 5 answerable training questions (40.0%)" in warnings[0]
    assert f"{qas[0]['id']} ('1882' at 60: the context has 'nd tunnel" in warnings[0]
    assert qas[2]["id"] in warnings[0]
    # Above the fraction (0.1 by default) the file is refused: a set that trains on the few
    # questions left is not what anyone asked for.
    with pytest.raises(ValueError, match=r"bad.json: 2 of 5 answerable .* more than "
                                         r"max_unfound_fraction \(0.1\)"):
        squad.read_squad(path, is_training=True, version_2=False)
    # Evaluation keeps them all, and warns about nothing.
    assert len(squad.read_squad(path, is_training=False, version_2=False)) == 5
    assert len(warnings) == 1


def test_duplicate_question_ids_fail_in_evaluation(tmp_path):
    data = load_sample()
    paragraphs = data["data"][0]["paragraphs"]
    paragraphs[0]["qas"].append(dict(paragraphs[0]["qas"][0]))  # the same id twice
    path = write_json(tmp_path / "dup.json", data)
    with pytest.raises(ValueError, match=r"dup.json: 1 question ids appear more than once \(6 "
                                         r"questions, 5 distinct ids\), e.g. "
                                         r"'5733be284776f41900661182'"):
        squad.read_squad(path, is_training=False, version_2=False)
    # Training does not key anything by id: every question trains.
    assert len(squad.read_squad(path, is_training=True, version_2=False)) == 6


def test_malformed_files_raise_naming_file_and_question(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [')
    with pytest.raises(ValueError, match="broken.json.*not valid JSON"):
        squad.read_squad(str(broken), True, False)

    data = load_sample()
    del data["data"][0]["paragraphs"][0]["qas"][1]["answers"]
    path = write_json(tmp_path / "no_answers.json", data)
    with pytest.raises(ValueError, match="no_answers.json.*5733be284776f4190066117e.*'answers'"):
        squad.read_squad(path, True, False)
    assert len(squad.read_squad(path, False, False)) == 5  # evaluation does not need them

    data = load_sample()
    del data["data"][0]["paragraphs"][1]["qas"][2]["id"]
    path = write_json(tmp_path / "no_id.json", data)
    with pytest.raises(ValueError, match="no_id.json: article 0 paragraph 1 question 2 has no"):
        squad.read_squad(path, False, False)

    data = load_sample()
    data["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = "515"
    with pytest.raises(ValueError, match="'answer_start' should be int, not str '515'"):
        squad.read_squad(write_json(tmp_path / "str.json", data), True, False)

    with pytest.raises(FileNotFoundError):
        squad.read_squad(str(tmp_path / "missing.json"), True, False)


def test_read_v2_impossible_questions(tmp_path):
    path = sample_v2(tmp_path)
    examples = squad.read_squad(path, is_training=True, version_2=True)
    assert len(examples) == 7
    impossible = [e for e in examples if e.is_impossible]
    assert [e.qas_id for e in impossible] == ["imp-1", "imp-2"]
    assert all(e.start_position is None and e.orig_answer_text is None for e in impossible)
    # v2 training requires is_impossible, as the original does.
    data = json.loads(pathlib.Path(path).read_text())
    del data["data"][0]["paragraphs"][0]["qas"][0]["is_impossible"]
    with pytest.raises(ValueError, match="5733be284776f41900661182.*'is_impossible'"):
        squad.read_squad(write_json(tmp_path / "v2bad.json", data), True, True)


# ---------------------------------------------------------------------------------------------
# Features


def test_feature_layout(tokenizer):
    examples = squad.read_squad(str(SAMPLE_V1), True, False)
    features = squad.featurize(examples, tokenizer, 384, 128, 64, is_training=True)
    assert [f.example_index for f in features] == [0, 1, 2, 3, 4]  # all fit in one window
    cls, sep = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
    for feature, example in zip(features, examples):
        query = tokenizer.tokenize_to_ids([example.question_text])[0]
        n = sum(feature.input_mask)
        assert feature.input_ids[0] == cls and feature.input_ids[len(query) + 1] == sep
        assert feature.input_ids[n - 1] == sep and feature.input_ids[1:len(query) + 1] == query
        assert feature.segment_ids[:n] == [0] * (len(query) + 2) + [1] * (n - len(query) - 2)
        assert len(feature.input_ids) == len(feature.segment_ids) == 384
        assert feature.input_ids[n:] == feature.segment_ids[n:] == [0] * (384 - n)
        assert sorted(feature.token_to_orig_map) == list(range(len(query) + 2, n - 1))
        assert all(feature.token_is_max_context.values())
    # Queries are truncated to max_query_length.
    short = squad.featurize(examples[:1], tokenizer, 64, 16, 5, is_training=False)
    assert short[0].input_ids[6] == sep and min(short[0].token_to_orig_map) == 7


def detokenize(tokenizer, ids) -> str:
    return " ".join(tokenizer.convert_ids_to_tokens(ids)).replace(" ##", "")


@pytest.mark.parametrize("max_seq_length,doc_stride", [(384, 128), (48, 8), (40, 16)])
def test_training_targets_map_back_to_the_gold_words(tokenizer, max_seq_length, doc_stride):
    examples = squad.read_squad(str(SAMPLE_V1), True, False)
    features = squad.featurize(examples, tokenizer, max_seq_length, doc_stride, 10, True)
    containing = {i: 0 for i in range(len(examples))}
    for feature in features:
        example = examples[feature.example_index]
        if feature.start_position == 0:
            assert feature.end_position == 0
            continue
        containing[feature.example_index] += 1
        first = feature.token_to_orig_map[feature.start_position]
        last = feature.token_to_orig_map[feature.end_position]
        assert example.start_position <= first <= last <= example.end_position
        span = detokenize(tokenizer, feature.input_ids[feature.start_position:
                                                        feature.end_position + 1])
        answer = detokenize(tokenizer, tokenizer.tokenize_to_ids([example.orig_answer_text])[0])
        # Tightened to the answer's own wordpieces (_improve_answer_span): "1882" without the
        # word's comma, "nieuwl" as "ni ##eu ##wl" without the word's "##and".
        assert span == answer
        assert (first, last) == (example.start_position, example.end_position)
    assert all(count >= 1 for count in containing.values())
    if max_seq_length < 384:
        assert len(features) > 3 * len(examples)  # several windows each


def test_answer_inside_a_wordpiece_keeps_the_whole_word(tokenizer):
    # The original's example: "Japan" is a character span of "Japanese", one wordpiece.
    context = "The Japanese electronics industry is the largest."
    example = squad.QAExample(qas_id="j", question_text="Which country?",
                              doc_tokens=context.split(), orig_answer_text="Japan",
                              start_position=1, end_position=1, context=context)
    (feature,) = squad.featurize([example], tokenizer, 32, 8, 8, is_training=True)
    assert tokenizer.convert_ids_to_tokens(
        feature.input_ids[feature.start_position:feature.end_position + 1]) == ["japanese"]


def test_each_token_has_exactly_one_max_context_window(tokenizer):
    examples = squad.read_squad(str(SAMPLE_V1), False, False)
    stride = 8
    features = squad.featurize(examples, tokenizer, 40, stride, 10, is_training=False)
    for index, example in enumerate(examples):
        windows = [f for f in features if f.example_index == index]
        assert [f.window_index for f in windows] == list(range(len(windows)))
        assert len(windows) > 3
        owners: dict[int, list[int]] = {}
        doc_ids: dict[int, int] = {}
        for window in windows:
            offset = min(window.token_to_orig_map)
            for position, is_max in window.token_is_max_context.items():
                # Full windows start every `stride` document tokens.
                token = window.window_index * stride + position - offset
                assert doc_ids.setdefault(token, window.input_ids[position]) == \
                    window.input_ids[position]
                if is_max:
                    owners.setdefault(token, []).append(window.window_index)
        assert sorted(owners) == sorted(doc_ids) == list(range(len(doc_ids)))
        assert all(len(w) == 1 for w in owners.values())
        assert windows[-1].token_to_orig_map[max(windows[-1].token_to_orig_map)] == \
            len(example.doc_tokens) - 1
    # The original's rule: with a 10-token query, windows hold 40 - 13 = 27 document tokens
    # and start every 8, so token 20 is in windows 0, 1 and 2, where min(left, right context)
    # is min(20, 6), min(12, 14) and min(4, 22): window 1 has the most.
    first = [f for f in features if f.example_index == 0]
    offset = min(first[1].token_to_orig_map)
    assert first[1].token_is_max_context[20 - 8 + offset]
    assert not first[0].token_is_max_context[20 + offset]
    assert not first[2].token_is_max_context[20 - 16 + offset]


def test_featurize_rejects_settings_that_leave_no_room(tokenizer):
    examples = squad.read_squad(str(SAMPLE_V1), False, False)
    with pytest.raises(ValueError, match="no room"):
        squad.featurize(examples, tokenizer, 20, 8, 17, False)
    with pytest.raises(ValueError, match="doc_stride"):
        squad.featurize(examples, tokenizer, 64, 0, 8, False)


# ---------------------------------------------------------------------------------------------
# Post-processing on hand-built outputs

CONTEXT = ("The Denver Broncos defeated the Carolina Panthers 24\u201310 at Levi's Stadium in "
           "Santa Clara, Califérnia (1895-1943).")


def hand_example(question: str = "Who won the Panthers game?") -> squad.QAExample:
    words, _ = squad._split_words(CONTEXT)
    return squad.QAExample(qas_id="q", question_text=question, doc_tokens=words,
                           context=CONTEXT)


def position(tokenizer, feature: squad.QAFeature, piece: str, in_document: bool = True) -> int:
    """The feature position of a wordpiece, in the document (segment 1) or the query."""
    tokens = tokenizer.convert_ids_to_tokens(feature.input_ids)
    for i, token in enumerate(tokens):
        if token == piece and (i in feature.token_to_orig_map) == in_document:
            return i
    raise AssertionError(f"{piece} not in the feature")


def logits(length: int, peaks: dict[int, float], base: float = -5.0) -> np.ndarray:
    out = np.full(length, base, np.float32)
    for i, value in peaks.items():
        out[i] = value
    return out


def run(tokenizer, examples, features, results, *, joint=False, classifier=False, v2=False,
        n_best=20, max_answer_length=30):
    return squad.postprocess(examples, features, results, n_best, max_answer_length, joint,
                             classifier, v2, tokenizer=tokenizer)


def test_answer_is_taken_only_from_the_document(tokenizer):
    example = hand_example()
    (feature,) = squad.featurize([example], tokenizer, 64, 32, 16, False)
    n = sum(feature.input_mask)
    denver, broncos = (position(tokenizer, feature, word) for word in ("denver", "broncos"))
    query_panthers = position(tokenizer, feature, "panthers", in_document=False)
    first_sep = feature.input_ids.index(tokenizer.vocab["[SEP]"])
    # The highest scores are on [CLS], the query, the [SEP]s and padding: all must be skipped.
    start = logits(64, {0: 50, query_panthers: 40, first_sep: 40, n - 1: 40, n + 2: 40, denver: 3})
    end = logits(64, {0: 50, query_panthers: 40, first_sep: 40, n - 1: 40, n + 2: 40, broncos: 3})
    preds, null_odds, nbest = run(tokenizer, [example], [feature],
                                  [squad.RawResult(start_logits=start, end_logits=end)])
    assert preds == {"q": "Denver Broncos"}  # the original casing, from the context
    assert null_odds == {}
    assert nbest["q"][0] == {"text": "Denver Broncos", "probability": pytest.approx(
        nbest["q"][0]["probability"]), "start_logit": 3.0, "end_logit": 3.0}
    assert all(entry["text"] in CONTEXT for entry in nbest["q"])
    assert sum(entry["probability"] for entry in nbest["q"]) == pytest.approx(1.0)
    assert len(nbest["q"]) == len({entry["text"] for entry in nbest["q"]})


def test_max_answer_length(tokenizer):
    example = hand_example()
    (feature,) = squad.featurize([example], tokenizer, 64, 32, 16, False)
    the, panthers = position(tokenizer, feature, "the"), position(tokenizer, feature, "panthers")
    carolina = position(tokenizer, feature, "carolina")
    # Best pair is "The ... Panthers" (7 tokens, 18); next "Carolina Panthers" (14).
    start = logits(64, {the: 9, carolina: 5})
    end = logits(64, {panthers: 9})
    results = [squad.RawResult(start_logits=start, end_logits=end)]
    preds, _, _ = run(tokenizer, [example], [feature], results, max_answer_length=30)
    assert preds["q"] == "The Denver Broncos defeated the Carolina Panthers"
    preds, _, nbest = run(tokenizer, [example], [feature], results, max_answer_length=6)
    assert preds["q"] == "Carolina Panthers"
    assert all(len(tokenizer.tokenize_to_ids([e["text"]])[0]) <= 6 for e in nbest["q"])


def test_get_final_text_recovers_original_text(tokenizer):
    cased = WordPieceTokenizer(str(BERT_VOCAB), do_lower_case=False)

    def final(pred_text: str, orig_text: str, words_from=tokenizer) -> str:
        return squad.get_final_text(pred_text, orig_text, words_from.split_words([orig_text])[0])

    assert final("denver broncos", "Denver Broncos") == "Denver Broncos"
    assert final("steve smith", "Steve Smith's") == "Steve Smith"
    assert final("1895", "(1895-1943).") == "1895"
    assert final("california", "Califérnia") == "Califérnia"  # accent kept
    assert final("levi ' s stadium", "Levi's Stadium,") == "Levi's Stadium"
    # No alignment: the original words are returned whole.
    assert final("[UNK] x", "日本 x") == "日本 x"
    # Cased models: no lower-casing, so a lower-cased prediction does not align.
    assert final("denver", "Denver", cased) == "Denver"
    assert final("Den", "Denver", cased) == "Den"


def test_split_words_is_the_originals_basic_tokenizer(tokenizer, monkeypatch):
    """get_final_text aligns with the words of BERT's BasicTokenizer: the project's tokenizer
    gives them exactly, on SQuAD's contexts and the tokenizer's hard cases."""
    import unicodedata

    from official.nlp.tools import tokenization as reference
    # ELECTRA's tokenizer drops every C* character; tf-models-official's only Cc and Cf.
    monkeypatch.setattr(reference, "_is_control", lambda c: c not in "\t\n\r" and
                        unicodedata.category(c).startswith("C"))
    lines = (TEST_DATA / "tokenizer_hard_cases.txt").read_text(encoding="utf-8").split("\n")
    lines += [p["context"] for a in load_sample()["data"] for p in a["paragraphs"]]
    lines += [CONTEXT, "Levi's Stadium, (1895-1943)."]
    for lower in (True, False):
        ours = WordPieceTokenizer(str(BERT_VOCAB), do_lower_case=lower).split_words(lines)
        original = reference.BasicTokenizer(do_lower_case=lower)
        assert ours == [original.tokenize(line) for line in lines]


def test_answer_text_keeps_context_punctuation_and_accents(tokenizer):
    example = hand_example("When?")
    (feature,) = squad.featurize([example], tokenizer, 64, 32, 16, False)
    year = position(tokenizer, feature, "1895")
    cal = position(tokenizer, feature, "cal")
    nia = position(tokenizer, feature, "##nia")
    preds, _, _ = run(tokenizer, [example], [feature], [squad.RawResult(
        start_logits=logits(64, {year: 5}), end_logits=logits(64, {year: 5}))])
    assert preds["q"] == "1895"  # not the whole word "(1895-1943)."
    preds, _, _ = run(tokenizer, [example], [feature], [squad.RawResult(
        start_logits=logits(64, {cal: 5}), end_logits=logits(64, {nia: 5}))])
    assert preds["q"] == "Califérnia"


def test_nbest_is_merged_across_windows(tokenizer):
    example = hand_example("Who?")
    features = squad.featurize([example], tokenizer, 24, 8, 4, False)
    assert len(features) >= 3
    first, second = features[0], features[1]
    denver = position(tokenizer, first, "denver")
    santa, clara = position(tokenizer, second, "santa"), position(tokenizer, second, "clara")
    assert second.token_is_max_context[santa] and denver in first.token_is_max_context
    results = [squad.RawResult(start_logits=logits(24, {}), end_logits=logits(24, {}))
               for _ in features]
    # Window 0: "Denver" scores 4 + 4; window 1: "Santa Clara" scores 5 + 5.
    results[0] = squad.RawResult(start_logits=logits(24, {denver: 4}),
                                 end_logits=logits(24, {denver: 4}))
    results[1] = squad.RawResult(start_logits=logits(24, {santa: 5}),
                                 end_logits=logits(24, {clara: 5}))
    preds, _, nbest = run(tokenizer, [example], features, results)
    assert preds["q"] == "Santa Clara"  # the word is "Clara,"
    texts = [entry["text"] for entry in nbest["q"]]
    assert texts[:2] == ["Santa Clara", "Denver"]
    # A start outside the window's max context is ignored however high it scores: window 1's
    # first document token has more context in window 0.
    edge = min(second.token_to_orig_map)
    assert not second.token_is_max_context[edge]
    results[1] = squad.RawResult(start_logits=logits(24, {edge: 50, santa: 5}),
                                 end_logits=logits(24, {edge: 50, clara: 5}))
    preds, _, _ = run(tokenizer, [example], features, results)
    assert preds["q"] == "Santa Clara"
    # Raise window 0's score above it: window 0 wins.
    results[0] = squad.RawResult(start_logits=logits(24, {denver: 6}),
                                 end_logits=logits(24, {denver: 6}))
    assert run(tokenizer, [example], features, results)[0]["q"] == "Denver"


def test_joint_prediction_uses_the_beams(tokenizer):
    example = hand_example()
    (feature,) = squad.featurize([example], tokenizer, 64, 32, 16, False)
    denver, broncos = (position(tokenizer, feature, word) for word in ("denver", "broncos"))
    carolina, panthers = position(tokenizer, feature, "carolina"), position(tokenizer, feature,
                                                                             "panthers")
    query_won = position(tokenizer, feature, "won", in_document=False)
    result = squad.RawResult(
        # beam 3: starts [query "won" (invalid), carolina, denver]
        start_top_index=np.array([query_won, carolina, denver]),
        start_top_log_probs=np.array([-0.1, -1.0, -1.2], np.float32),
        # the end beam of each start; the first start's ends are never used
        end_top_index=np.array([[query_won, 0, 1], [broncos, panthers, 0],
                                [broncos, denver, 0]]),
        end_top_log_probs=np.array([[-0.1, -0.2, -0.3], [-2.0, -0.5, -0.6],
                                    [-0.1, -0.9, -1.0]], np.float32))
    preds, _, nbest = run(tokenizer, [example], [feature], [result], joint=True)
    # carolina->broncos is end < start; carolina->panthers scores -1.5; denver->broncos -1.3.
    assert preds["q"] == "Denver Broncos"
    assert [e["text"] for e in nbest["q"]] == ["Denver Broncos", "Carolina Panthers", "Denver"]
    assert nbest["q"][1]["start_logit"] == pytest.approx(-1.0)
    assert nbest["q"][1]["end_logit"] == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="end_top_index"):
        run(tokenizer, [example], [feature], [squad.RawResult(
            start_top_index=result.start_top_index, start_top_log_probs=result.start_top_log_probs,
            end_top_log_probs=result.end_top_log_probs)], joint=True)
    with pytest.raises(ValueError, match="start_logits"):  # non-joint needs the logits
        run(tokenizer, [example], [feature], [result], joint=False)


def test_null_answer_by_classifier_and_by_cls_score(tokenizer):
    example = hand_example()
    (feature,) = squad.featurize([example], tokenizer, 64, 32, 16, False)
    denver, broncos = (position(tokenizer, feature, word) for word in ("denver", "broncos"))
    start = logits(64, {0: 2.0, denver: 3.0})
    end = logits(64, {0: 1.5, broncos: 2.5})
    # The classifier's logit is the null odds (positive = unanswerable).
    for logit, expected in ((5.0, ""), (-5.0, "Denver Broncos")):
        result = squad.RawResult(start_logits=start, end_logits=end, answerable_logit=logit)
        preds, odds, _ = run(tokenizer, [example], [feature], [result], classifier=True, v2=True)
        assert preds == {"q": "Denver Broncos"}  # the best non-null span, before thresholding
        assert odds == {"q": logit}
        assert squad.apply_na_threshold(preds, odds, -2.75) == {"q": expected}
    # Without it: [CLS] start + end minus the best span's score, 3.5 - 5.5.
    result = squad.RawResult(start_logits=start, end_logits=end, answerable_logit=99.0)
    preds, odds, _ = run(tokenizer, [example], [feature], [result], v2=True)
    assert odds["q"] == pytest.approx(-2.0)
    assert squad.apply_na_threshold(preds, odds, -2.75) == {"q": ""}
    assert squad.apply_na_threshold(preds, odds, -1.0) == {"q": "Denver Broncos"}
    # Joint mode without the classifier: the original's head emits zero end logits, so the
    # null score is the [CLS] start logit alone (minus the best span's log-probs).
    joint = squad.RawResult(start_logits=start, start_top_index=np.array([denver]),
                            start_top_log_probs=np.array([-0.5]),
                            end_top_index=np.array([[broncos]]),
                            end_top_log_probs=np.array([[-0.25]]))
    preds, odds, _ = run(tokenizer, [example], [feature], [joint], joint=True, v2=True)
    assert odds["q"] == pytest.approx(2.0 + 0.75)


def test_null_score_is_the_minimum_over_windows_and_nonce_when_nothing_is_valid(tokenizer):
    example = hand_example("Who?")
    features = squad.featurize([example], tokenizer, 24, 8, 4, False)
    results = [squad.RawResult(start_logits=logits(24, {}), end_logits=logits(24, {}),
                               answerable_logit=float(i + 1)) for i in range(len(features))]
    _, odds, _ = run(tokenizer, [example], features, results, classifier=True, v2=True)
    assert odds["q"] == 1.0
    # No valid span at all (every start in the query): the original's "empty" placeholder.
    only_query = [squad.RawResult(start_top_index=np.array([1]),
                                  start_top_log_probs=np.array([0.]),
                                  end_top_index=np.array([[1]]),
                                  end_top_log_probs=np.array([[0.]])) for _ in features]
    preds, _, nbest = run(tokenizer, [example], features, only_query, joint=True)
    assert preds["q"] == "empty" and nbest["q"][0]["probability"] == 1.0


def test_results_must_match_features(tokenizer):
    example = hand_example()
    features = squad.featurize([example], tokenizer, 64, 32, 16, False)
    with pytest.raises(ValueError, match="0 results for 1 features"):
        run(tokenizer, [example], features, [])


def test_oracle_outputs_recover_the_gold_answers(tokenizer, tmp_path):
    """Read, featurize, put all the mass on the training targets, post-process and score."""
    examples = squad.read_squad(str(SAMPLE_V1), True, False)
    features = squad.featurize(examples, tokenizer, 40, 8, 10, True)
    results = []
    for feature in features:
        chosen = feature.start_position and feature.token_is_max_context[feature.start_position]
        peaks = {feature.start_position: 10.0} if chosen else {0: 10.0}
        end_peaks = {feature.end_position: 10.0} if chosen else {0: 10.0}
        results.append(squad.RawResult(start_logits=logits(40, peaks, 0.0),
                                       end_logits=logits(40, end_peaks, 0.0)))
    preds, _, nbest = run(tokenizer, examples, features, results)
    # Exactly the gold texts, "Nieuwl" (a wordpiece prefix of "Nieuwland") included.
    assert preds == GOLD
    squad.write_predictions(str(tmp_path / "out"), preds, None, nbest)
    assert json.loads((tmp_path / "out" / "predictions.json").read_text()) == GOLD
    assert squad.evaluate(str(SAMPLE_V1), preds, None, version_2=False) == {
        "exact_match": 100.0, "f1": 100.0}


# ---------------------------------------------------------------------------------------------
# Writing and scoring


def test_write_predictions(tmp_path):
    directory = tmp_path / "a" / "b"
    squad.write_predictions(str(directory), {"q": "x"}, {"q": np.float32(1.5)},
                            {"q": [{"text": "x", "probability": 1.0, "start_logit": 0.0,
                                    "end_logit": 0.0}]})
    assert sorted(os.listdir(directory)) == ["nbest_predictions.json", "null_odds.json",
                                             "predictions.json"]
    assert json.loads((directory / "null_odds.json").read_text()) == {"q": 1.5}
    squad.write_predictions(str(directory), {"q": "y"}, None)  # overwrites in place
    assert json.loads((directory / "predictions.json").read_text()) == {"q": "y"}
    assert len(os.listdir(directory)) == 3


def test_official_v1_scores():
    assert squad.evaluate(str(SAMPLE_V1), dict(GOLD), None, False) == {"exact_match": 100.0,
                                                                          "f1": 100.0}
    wrong = dict(GOLD, **{"5733b1da4776f41900661067": "an early wind"})
    # "early wind" vs "early wind tunnel" (articles dropped): P 1, R 2/3, F1 0.8.
    assert squad.evaluate(str(SAMPLE_V1), wrong, None, False) == pytest.approx(
        {"exact_match": 80.0, "f1": 100 * 4.8 / 5})
    # Any gold answer counts: the second question's third answer is the whole context.
    other = dict(GOLD, **{"5733be284776f4190066117e": load_sample()["data"][0]["paragraphs"][0][
        "context"]})
    assert squad.evaluate(str(SAMPLE_V1), other, None, False)["exact_match"] == 100.0


def test_official_v2_scores_with_threshold(tmp_path):
    path = sample_v2(tmp_path)
    preds = dict(GOLD, **{"imp-1": "Saint Bernadette", "imp-2": "1936"})
    odds = {qid: -5.0 for qid in GOLD}
    odds.update({"imp-1": 3.0, "imp-2": 0.5})
    metrics = squad.evaluate(path, preds, odds, version_2=True)
    assert metrics["exact"] == metrics["f1"] == 100.0
    assert metrics["HasAns_exact"] == metrics["NoAns_exact"] == 100.0
    assert metrics["HasAns_total"] == 5 and metrics["NoAns_total"] == 2
    assert metrics["best_exact"] == 100.0 and metrics["best_exact_thresh"] == -5.0
    assert {"best_f1", "best_f1_thresh", "NoAns_f1", "HasAns_f1", "total"} <= set(metrics)
    # With imp-2's odds below the -2.75 threshold its span stands, and is wrong: 6/7 (the best
    # threshold, just above the answerable questions' -5, still gets all 7).
    odds["imp-2"] = -3.0
    metrics = squad.evaluate(path, preds, odds, version_2=True)
    assert metrics["exact"] == pytest.approx(100 * 6 / 7)
    assert metrics["NoAns_exact"] == 50.0 and metrics["HasAns_exact"] == 100.0
    assert metrics["best_exact"] == 100.0 and metrics["best_exact_thresh"] == -5.0
    metrics = squad.evaluate(path, preds, odds, version_2=True, na_threshold=-4.0)
    assert metrics["exact"] == pytest.approx(100 * 7 / 7)
    # Already-thresholded predictions and no odds score as given.
    final = squad.apply_na_threshold(preds, odds, -4.0)
    assert final["imp-2"] == "" and final["imp-1"] == ""
    assert squad.evaluate(path, final, None, True)["exact"] == 100.0
    with pytest.raises(ValueError, match="no null odds"):
        squad.evaluate(path, preds, {"imp-1": 0.0}, True)


# ---------------------------------------------------------------------------------------------
# MRQA


def write_mrqa(path: pathlib.Path, data: dict, dataset: str = "NewsQA") -> str:
    """A SQuAD-schema dict in the MRQA shared task's format: a header line, then one context
    per line with `qas` holding `qid`, `answers` (all gold texts) and `detected_answers`
    (text and inclusive [start, end] character spans); gzipped for a .gz path."""
    lines = [json.dumps({"header": {"dataset": dataset, "split": "dev"}})]
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            qas = []
            for qa in paragraph["qas"]:
                first = qa["answers"][0]
                start = first["answer_start"]
                qas.append({"qid": qa["id"], "question": qa["question"],
                            "answers": [a["text"] for a in qa["answers"]],
                            "detected_answers": [{
                                "text": context[start:start + len(first["text"])],
                                "char_spans": [[start, start + len(first["text"]) - 1]],
                                "token_spans": [[0, 0]]}]})
            lines.append(json.dumps({"id": "ctx", "context": context, "qas": qas,
                                     "context_tokens": [[word, 0] for word in context.split()]}))
    text = "\n".join(lines) + "\n"
    if path.suffix == ".gz":
        import gzip
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("name", ["dev.jsonl", "dev.jsonl.gz"])
def test_read_mrqa_gives_the_squad_examples(tmp_path, name):
    path = write_mrqa(tmp_path / name, load_sample())
    for is_training in (True, False):
        mrqa = squad.read_mrqa(path, is_training)
        reference = squad.read_squad(str(SAMPLE_V1), is_training, False)
        assert [dataclasses.astuple(e) for e in mrqa] == \
            [dataclasses.astuple(e) for e in reference]


def test_read_mrqa_bad_input(tmp_path):
    data = load_sample()
    path = tmp_path / "bad.jsonl"
    write_mrqa(path, data)
    lines = path.read_text().split("\n")
    path.write_text("\n".join([lines[0], lines[1], "{not json", *lines[2:]]))
    with pytest.raises(ValueError, match=r"bad.jsonl:3: not valid JSON"):
        squad.read_mrqa(str(path), False)
    line = json.loads(lines[1])
    line["qas"][0]["detected_answers"][0]["char_spans"] = [515]
    path.write_text("\n".join([lines[0], json.dumps(line)]))
    with pytest.raises(ValueError, match=r"'char_spans' should be a list of \[start, end\]"):
        squad.read_mrqa(str(path), True)
    (tmp_path / "broken.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(ValueError, match=r"broken.jsonl.gz: cannot be read"):
        squad.read_mrqa(str(tmp_path / "broken.jsonl.gz"), False)


def test_mrqa_scores_against_hand_counts(tmp_path):
    """Exact match and F1 are each the best over a question's gold answers (the official
    MRQA script); missing predictions score 0."""
    context = "The Denver Broncos won in Santa Clara, California in 1895."
    qas = [
        {"qid": "q1", "question": "Who won?", "answers": ["Denver Broncos", "the Broncos"]},
        {"qid": "q2", "question": "Where?", "answers": ["Santa Clara, California"]},
        {"qid": "q3", "question": "When?", "answers": ["1895", "in 1895"]},
        {"qid": "q4", "question": "Whose?", "answers": ["Denver"]},
    ]
    path = tmp_path / "dev.jsonl"
    path.write_text(json.dumps({"header": {"dataset": "X", "split": "dev"}}) + "\n" +
                    json.dumps({"context": context, "qas": qas}) + "\n")
    predictions = {"q1": "Broncos",  # = "the Broncos" once articles go: EM 1, F1 1
                   "q2": "Santa Clara",  # P 1, R 2/3: F1 0.8
                   "q3": "1943",  # nothing in common
                   "q4": "Denver!"}  # punctuation goes: EM 1
    assert squad.evaluate_mrqa(str(path), predictions) == pytest.approx(
        {"exact_match": 100 * 2 / 4, "f1": 100 * (1 + 0.8 + 0 + 1) / 4})
    del predictions["q4"]
    assert squad.evaluate_mrqa(str(path), predictions) == pytest.approx(
        {"exact_match": 100 * 1 / 4, "f1": 100 * 1.8 / 4})
    with pytest.raises(ValueError, match="none of the 4 questions"):
        squad.evaluate_mrqa(str(path), {})
