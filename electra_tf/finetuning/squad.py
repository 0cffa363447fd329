"""SQuAD 1.1 / 2.0 (and MRQA) data for fine-tuning: reading, windowed features,
post-processing, scoring.

This is the model-independent half of the original's finetune/qa (qa_tasks.py, qa_metrics.py,
squad_official_eval*.py); the Keras head and training loop consume it:

    examples = read_squad(path, is_training, version_2)  # or read_mrqa(path, is_training)
    features = featurize(examples, tokenizer, max_seq_length, doc_stride, max_query_length,
                         is_training)
    ...  run the model, one RawResult per feature, in the order of `features`  ...
    preds, null_odds, nbest = postprocess(examples, features, results, n_best_size,
                                          max_answer_length, joint_prediction,
                                          answerable_classifier, version_2, tokenizer=tokenizer)
    metrics = evaluate(path, preds, null_odds, version_2)

Follows the original exactly in: splitting contexts into words (its is_whitespace, with
U+202F), taking the first answer for training and dropping those whose text is not found at
answer_start, wordpiece tokenisation per word, query truncation, the doc_stride windows,
_improve_answer_span, _check_is_max_context, training targets (0, the [CLS], for a window
without the answer and for impossible questions), and all of write_predictions: candidate
filtering, joint (beam) and independent start/end scoring, the n-best merged across windows,
get_final_text, the null score (the [CLS] logits, or the answerability logit) and the null odds.
v2.0 "exact"/"f1" are taken at the original's qa_na_threshold (-2.75 by default), and
best_exact/best_f1 over all thresholds, as its modified official script does.

MRQA's jsonl(.gz) files (a header line, then one context per line with its `qas`, each with a
`qid` and `detected_answers` character spans) are read into the same examples, as the original's
MRQATask: training takes the first detected answer at its first span.

Deliberate differences:
  * Bad input raises ValueError naming the file and the question (the original raised bare
    KeyErrors). Training answers that cannot be located are reported in one warning with
    their count and a few examples, not one log line each; when more than
    `max_unfound_fraction` of a file's answerable questions cannot be located the file is
    refused (answer offsets counted some other way, e.g. in bytes or from 1, not a few odd
    characters). Question ids must be unique in evaluation files: predictions and the
    official scorers are keyed by id, so duplicates would be scored once.
  * A training answer whose answer_start is negative or on whitespace before the first word,
    or whose text is empty, is skipped too: the original kept these with negative or inverted
    word positions (Python's negative indexing hid the error).
  * Examples keep is_impossible from the data in evaluation as well (informational; features
    for evaluation do not use it). Impossible training questions have start/end None and
    answer text None (the original: -1, -1, "").
  * Features carry example_index/window_index instead of the original's eid
    1000 * example + window, and results are matched to features by position.
  * The words of a document, its questions and answers are tokenised in one batched call, and
    the max-context window of each token is found once per example, not per window (same
    result, without the original's cost quadratic in the number of windows).
  * featurize refuses settings that leave no room for the document (the original looped
    forever).
  * postprocess takes the tokenizer, for the wordpiece strings and the words of the context
    get_final_text aligns with (its BasicTokenizer split, with the tokenizer's lower-casing and
    accent settings; the original always stripped accents there).
  * The original's debug-only nonce candidate for SQuAD 2.0 is not reproduced.
  * Scores come from tf-models-official's official scorers, renamed to the original's keys
    (v1.1: exact_match and f1 in percent; v2.0: best_* for its final_*). Its v2.0 scorer
    thresholds the odds at a fixed 1.0, so evaluate() applies na_threshold itself first; the
    result equals the original's script (checked on random predictions and odds).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import gzip
import os
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import tensorflow as tf
from absl import logging
from official.nlp.tools import squad_evaluate_v1_1, squad_evaluate_v2_0

from electra_tf import files
from electra_tf.tokenization import WordPieceTokenizer

DEFAULT_NA_THRESHOLD = -2.75  # the original's qa_na_threshold
DEFAULT_MAX_UNFOUND_FRACTION = 0.1
_NULL_SCORE_INIT = 1000000.0  # the original's "large and positive" starting minimum
_MAX_IDS_IN_WARNING = 5


@dataclasses.dataclass
class QAExample:
    """One question on one context."""
    qas_id: str
    question_text: str
    doc_tokens: list[str]  # the context split on whitespace (shared by a paragraph's questions)
    orig_answer_text: str | None = None  # training only, as are the word positions
    start_position: int | None = None  # index in doc_tokens of the answer's first word
    end_position: int | None = None  # ... and of its last word (inclusive)
    is_impossible: bool = False
    context: str = ""


@dataclasses.dataclass
class QAFeature:
    """One doc_stride window of one example: [CLS] query [SEP] window [SEP], zero-padded."""
    example_index: int
    window_index: int
    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    token_to_orig_map: dict[int, int]  # feature position of a document token -> word index
    token_is_max_context: dict[int, bool]  # this window is the token's max-context window
    start_position: int  # training targets; 0 ([CLS]) if the answer is not in this window
    end_position: int
    is_impossible: bool


@dataclasses.dataclass
class RawResult:
    """The model's outputs for one feature (numpy arrays or lists).

    Independent start/end (joint_prediction=False): start_logits and end_logits, each
    [max_seq_length], masked outside the document and [CLS] as the original's head does.
    Joint prediction (the original's default): start_top_log_probs/start_top_index [beam] and
    end_top_log_probs/end_top_index [beam, beam], the end beam conditioned on each start.
    answerable_logit: the answerability classifier's logit, trained with label is_impossible,
    so POSITIVE MEANS UNANSWERABLE despite the original's name.
    """
    start_logits: np.ndarray | None = None
    end_logits: np.ndarray | None = None
    start_top_log_probs: np.ndarray | None = None
    start_top_index: np.ndarray | None = None
    end_top_log_probs: np.ndarray | None = None
    end_top_index: np.ndarray | None = None
    answerable_logit: float = 0.0


# ---------------------------------------------------------------------------------------------
# Reading


def _is_whitespace(char: str) -> bool:
    """The original's word separators; other Unicode spaces (e.g. U+00A0) stay inside words."""
    return char in " \t\r\n" or ord(char) == 0x202F


def _split_words(context: str) -> tuple[list[str], list[int]]:
    """Words of the context and, for each character, the index of its word (-1 before any)."""
    words: list[str] = []
    char_to_word: list[int] = []
    previous_is_space = True
    for char in context:
        if _is_whitespace(char):
            previous_is_space = True
        else:
            if previous_is_space:
                words.append(char)
            else:
                words[-1] += char
            previous_is_space = False
        char_to_word.append(len(words) - 1)
    return words, char_to_word


def _load_json(path: str) -> Any:
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"SQuAD file {path} not found")
    with tf.io.gfile.GFile(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON: {e}") from None


def _get(obj: Any, key: str, kind: type, path: str, where: str) -> Any:
    """obj[key], failing with the file and the place in it when missing or mistyped."""
    if not isinstance(obj, dict) or key not in obj:
        raise ValueError(f"{path}: {where} has no {key!r}")
    value = obj[key]
    # bool is an int subclass: an answer_start of true is an error, not 1.
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ValueError(f"{path}: {where}: {key!r} should be {kind.__name__}, not "
                         f"{type(value).__name__} {value!r}")
    return value


def _paragraphs(data: Any, path: str) -> Iterator[tuple[str, dict]]:
    """(place, paragraph) of every paragraph of a SQuAD file's contents."""
    for a, article in enumerate(_get(data, "data", list, path, "the file")):
        for p, paragraph in enumerate(_get(article, "paragraphs", list, path, f"article {a}")):
            yield f"article {a} paragraph {p}", paragraph


def _squad_answer(qa: dict, path: str, where: str) -> tuple[str, int]:
    """The first answer's text and character offset, SQuAD's way."""
    answers = _get(qa, "answers", list, path, where)
    if not answers:
        raise ValueError(f"{path}: {where} has no answers and is not is_impossible")
    return (_get(answers[0], "text", str, path, f"{where} answer 0"),
            _get(answers[0], "answer_start", int, path, f"{where} answer 0"))


def _mrqa_answer(qa: dict, path: str, where: str) -> tuple[str, int]:
    """The first detected answer's text and the start of its first character span."""
    detected = _get(qa, "detected_answers", list, path, where)
    if not detected:
        raise ValueError(f"{path}: {where} has no detected_answers")
    spans = _get(detected[0], "char_spans", list, path, f"{where} detected answer 0")
    if not spans or not isinstance(spans[0], list) or not spans[0] or \
            not isinstance(spans[0][0], int):
        raise ValueError(f"{path}: {where} detected answer 0: 'char_spans' should be a list "
                         f"of [start, end] character offsets, not {spans!r}")
    return _get(detected[0], "text", str, path, f"{where} detected answer 0"), spans[0][0]


def read_squad(path: str, is_training: bool, version_2: bool,
               max_unfound_fraction: float = DEFAULT_MAX_UNFOUND_FRACTION) -> list[QAExample]:
    """The questions of a SQuAD json file (official schema).

    For training, each question takes its first answer, located by word; questions whose
    answer_start does not locate the answer text are skipped, counted in one warning, and the
    file is refused when they are more than max_unfound_fraction of the answerable ones.
    For evaluation every question is kept, without answer positions, and ids must be unique."""
    return _read_questions(path, _paragraphs(_load_json(path), path), is_training, version_2,
                           "id", _squad_answer, max_unfound_fraction)


def read_mrqa(path: str, is_training: bool,
              max_unfound_fraction: float = DEFAULT_MAX_UNFOUND_FRACTION) -> list[QAExample]:
    """The questions of an MRQA 2019 shared-task file (.jsonl, or .jsonl.gz), as read_squad
    reads SQuAD 1.1: the header line is skipped, questions are keyed by `qid`."""
    return _read_questions(path, _mrqa_paragraphs(path), is_training, False, "qid",
                           _mrqa_answer, max_unfound_fraction)


def _mrqa_lines(path: str) -> Iterator[tuple[int, str]]:
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"MRQA file {path} not found")
    with tf.io.gfile.GFile(path, "rb") as raw:
        lines = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw
        try:
            for number, line in enumerate(lines, start=1):
                yield number, line.decode("utf-8")
        except (OSError, EOFError, UnicodeDecodeError) as e:  # a damaged gzip or bad bytes
            raise ValueError(f"{path}: cannot be read ({e})") from None


def _mrqa_paragraphs(path: str) -> Iterator[tuple[str, dict]]:
    """(place, context line) of every line of an MRQA file but its header."""
    for number, line in _mrqa_lines(path):
        if not line.strip():
            continue
        try:
            paragraph = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{number}: not valid JSON ({e})") from None
        if isinstance(paragraph, dict) and "header" in paragraph:
            continue
        yield f"line {number}", paragraph


def _read_questions(path: str, paragraphs: Iterator[tuple[str, dict]], is_training: bool,
                    version_2: bool, id_key: str,
                    first_answer: Callable[[dict, str, str], tuple[str, int]],
                    max_unfound_fraction: float) -> list[QAExample]:
    """QAExamples of every question of every paragraph (the original's _add_examples)."""
    examples: list[QAExample] = []
    unfound: list[str] = []
    num_answerable = 0
    for where, paragraph in paragraphs:
        context = _get(paragraph, "context", str, path, where)
        doc_tokens, char_to_word = _split_words(context)
        for q, qa in enumerate(_get(paragraph, "qas", list, path, where)):
            qas_id = _get(qa, id_key, str, path, f"{where} question {q}")
            where_q = f"question {qas_id!r}"
            question = _get(qa, "question", str, path, where_q)
            is_impossible = False
            if version_2 and (is_training or "is_impossible" in qa):
                is_impossible = _get(qa, "is_impossible", bool, path, where_q)
            example = QAExample(qas_id=qas_id, question_text=question, doc_tokens=doc_tokens,
                                is_impossible=is_impossible, context=context)
            if is_training and not is_impossible:
                num_answerable += 1
                text, offset = first_answer(qa, path, where_q)
                located = _locate_answer(doc_tokens, char_to_word, text, offset)
                if located is None:
                    unfound.append(f"{qas_id} ({text[:40]!r} at {offset}: the context has "
                                   f"{context[max(offset, 0):max(offset, 0) + 40]!r})")
                    continue
                example.orig_answer_text = text
                example.start_position, example.end_position = located
            examples.append(example)
    if unfound:
        _report_unfound(path, unfound, num_answerable, max_unfound_fraction)
    if not is_training:
        _check_unique_ids(path, [e.qas_id for e in examples], id_key)
    return examples


def _report_unfound(path: str, unfound: list[str], num_answerable: int,
                    max_fraction: float) -> None:
    """Warns about answers that are not at their offset; fails when they are too many for a
    few odd characters (the offsets are then likely counted another way)."""
    message = (f"{path}: {len(unfound)} of {num_answerable} answerable training questions "
               f"({100 * len(unfound) / num_answerable:.1f}%) give an answer text that is not "
               f"at its character offset in the context, e.g. "
               f"{'; '.join(unfound[:_MAX_IDS_IN_WARNING])}")
    if len(unfound) > max_fraction * num_answerable:
        raise ValueError(f"{message}. That is more than max_unfound_fraction "
                         f"({max_fraction:g}): check that offsets count characters from 0 in "
                         "the context, or raise max_unfound_fraction to train on the rest")
    logging.warning("%s; training without them", message)


def _check_unique_ids(path: str, ids: list[str], id_key: str) -> None:
    counts = collections.Counter(ids)
    repeated = [qid for qid, count in counts.items() if count > 1]
    if repeated:
        raise ValueError(
            f"{path}: {len(repeated)} question {id_key}s appear more than once "
            f"({len(ids)} questions, {len(counts)} distinct {id_key}s), e.g. "
            f"{', '.join(repr(qid) for qid in repeated[:_MAX_IDS_IN_WARNING])}; predictions "
            f"and the official scorer are keyed by {id_key}, so each question needs its own")


def _locate_answer(doc_tokens: list[str], char_to_word: list[int], text: str,
                   offset: int) -> tuple[int, int] | None:
    """Word indices of the answer's first and last words, or None where the original could
    not recover the text there (plus empty or out-of-document spans, which it mishandled)."""
    end_char = offset + len(text) - 1
    if not text or offset < 0 or end_char >= len(char_to_word):
        return None
    start, end = char_to_word[offset], char_to_word[end_char]
    if start < 0:  # answer_start on whitespace before the first word
        return None
    # As the original: the whitespace-normalised, lower-cased answer must occur in its words.
    found = " ".join(doc_tokens[start:end + 1]).lower()
    wanted = " ".join(text.split()).lower()
    if found.find(wanted) == -1:
        return None
    return start, end


# ---------------------------------------------------------------------------------------------
# Features


def _doc_windows(num_tokens: int, max_tokens: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) windows of the document's wordpieces, as the original's doc_spans."""
    windows = []
    start = 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens)
        windows.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, stride)
    return windows


def _max_context_windows(windows: list[tuple[int, int]], num_tokens: int) -> list[int]:
    """For each token the window giving it the most context (the original's
    _check_is_max_context: max of min(left, right) + 0.01 * length, earliest on ties)."""
    owner = [-1] * num_tokens
    best = [float("-inf")] * num_tokens
    for index, (start, length) in enumerate(windows):
        end = start + length - 1
        for position in range(start, end + 1):
            score = min(position - start, end - position) + 0.01 * length
            if score > best[position]:
                best[position], owner[position] = score, index
    return owner


def _improve_answer_span(doc_ids: list[int], start: int, end: int,
                         answer_ids: list[int]) -> tuple[int, int]:
    """The first sub-span of [start, end] whose wordpieces are exactly the answer's, e.g.
    "1895" inside the word "(1895-1943)."; unchanged when there is none (e.g. "Japan" in
    "Japanese"). Compares ids, which is the original's comparison of token strings."""
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if doc_ids[new_start:new_end + 1] == answer_ids:
                return new_start, new_end
    return start, end


def featurize(examples: Sequence[QAExample], tokenizer: WordPieceTokenizer, max_seq_length: int,
              doc_stride: int, max_query_length: int, is_training: bool) -> list[QAFeature]:
    """One feature per doc_stride window of each example, in example order."""
    if doc_stride < 1 or max_query_length < 0:
        raise ValueError(f"doc_stride must be >= 1 (got {doc_stride}) and max_query_length "
                         f">= 0 (got {max_query_length})")
    if max_seq_length - max_query_length - 3 < 1:
        # The original looped forever when no document token fitted.
        raise ValueError(f"max_seq_length {max_seq_length} leaves no room for the document "
                         f"after a {max_query_length}-token query, [CLS] and two [SEP]s")
    cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
    features: list[QAFeature] = []
    begin = 0
    while begin < len(examples):
        # The questions of one paragraph share its words: tokenise them once, in one batch.
        doc_tokens = examples[begin].doc_tokens
        stop = begin + 1
        while stop < len(examples) and (examples[stop].doc_tokens is doc_tokens
                                        or examples[stop].doc_tokens == doc_tokens):
            stop += 1
        group = range(begin, stop)
        with_answer = [i for i in group if is_training and not examples[i].is_impossible]
        for i in with_answer:
            if examples[i].start_position is None or examples[i].orig_answer_text is None:
                raise ValueError(f"example {examples[i].qas_id!r} has no answer position; "
                                 "read it with is_training=True")
        ids = tokenizer.tokenize_to_ids(
            list(doc_tokens) + [examples[i].question_text for i in group]
            + [examples[i].orig_answer_text for i in with_answer])
        word_ids = ids[:len(doc_tokens)]
        query_ids = dict(zip(group, ids[len(doc_tokens):len(doc_tokens) + len(group)]))
        answer_ids = dict(zip(with_answer, ids[len(doc_tokens) + len(group):]))

        doc_ids: list[int] = []
        tok_to_orig: list[int] = []
        orig_to_tok: list[int] = []
        for word_index, pieces in enumerate(word_ids):
            orig_to_tok.append(len(doc_ids))
            doc_ids.extend(pieces)
            tok_to_orig.extend([word_index] * len(pieces))

        for i in group:
            features.extend(_example_features(
                i, examples[i], query_ids[i][:max_query_length], doc_ids, tok_to_orig,
                orig_to_tok, answer_ids.get(i), cls_id, sep_id, max_seq_length, doc_stride))
        begin = stop
    return features


def _example_features(example_index: int, example: QAExample, query: list[int],
                      doc_ids: list[int], tok_to_orig: list[int], orig_to_tok: list[int],
                      answer_ids: list[int] | None, cls_id: int, sep_id: int,
                      max_seq_length: int, doc_stride: int) -> list[QAFeature]:
    """The windows of one example; answer_ids (training) are the wordpieces of its answer."""
    answer_span = None  # the answer in document wordpiece positions
    if answer_ids is not None:
        tok_start = orig_to_tok[example.start_position]
        if example.end_position < len(example.doc_tokens) - 1:
            tok_end = orig_to_tok[example.end_position + 1] - 1
        else:
            tok_end = len(doc_ids) - 1
        answer_span = _improve_answer_span(doc_ids, tok_start, tok_end, answer_ids)

    windows = _doc_windows(len(doc_ids), max_seq_length - len(query) - 3, doc_stride)
    owner = _max_context_windows(windows, len(doc_ids))
    doc_offset = len(query) + 2  # [CLS] query [SEP]
    features = []
    for window_index, (start, length) in enumerate(windows):
        input_ids = [cls_id] + query + [sep_id] + doc_ids[start:start + length] + [sep_id]
        segment_ids = [0] * doc_offset + [1] * (length + 1)
        input_mask = [1] * len(input_ids)
        padding = [0] * (max_seq_length - len(input_ids))
        token_to_orig_map = {doc_offset + k: tok_to_orig[start + k] for k in range(length)}
        token_is_max_context = {doc_offset + k: owner[start + k] == window_index
                                for k in range(length)}
        # [CLS] is the target when there is nothing to point at in this window.
        start_position = end_position = 0
        if answer_span is not None and start <= answer_span[0] and \
                answer_span[1] <= start + length - 1:
            start_position = answer_span[0] - start + doc_offset
            end_position = answer_span[1] - start + doc_offset
        features.append(QAFeature(
            example_index=example_index, window_index=window_index,
            input_ids=input_ids + padding, input_mask=input_mask + padding,
            segment_ids=segment_ids + padding, token_to_orig_map=token_to_orig_map,
            token_is_max_context=token_is_max_context, start_position=start_position,
            end_position=end_position, is_impossible=example.is_impossible))
    return features


# ---------------------------------------------------------------------------------------------
# Post-processing


def get_final_text(pred_text: str, orig_text: str, orig_words: Sequence[str]) -> str:
    """The part of orig_text (original words joined by spaces) that pred_text (the de-pieced,
    normalised prediction) came from, keeping the original's casing and punctuation:
    "steve smith" in "Steve Smith's" -> "Steve Smith". orig_words is orig_text split as the
    tokenizer's BasicTokenizer splits it (WordPieceTokenizer.split_words). Falls back to
    orig_text when the character alignment fails, as the original does."""

    def without_spaces(text: str) -> tuple[str, dict[int, int]]:
        kept = [(i, c) for i, c in enumerate(text) if c != " "]
        return "".join(c for _, c in kept), {k: i for k, (i, _) in enumerate(kept)}

    tok_text = " ".join(orig_words)
    start = tok_text.find(pred_text)
    if start == -1:
        return orig_text
    end = start + len(pred_text) - 1

    orig_ns, orig_ns_to_s = without_spaces(orig_text)
    tok_ns, tok_ns_to_s = without_spaces(tok_text)
    if len(orig_ns) != len(tok_ns):  # normalisation changed the length: no 1:1 alignment
        return orig_text
    tok_s_to_ns = {s: ns for ns, s in tok_ns_to_s.items()}
    if start not in tok_s_to_ns or end not in tok_s_to_ns:
        return orig_text
    orig_start = orig_ns_to_s.get(tok_s_to_ns[start])
    orig_end = orig_ns_to_s.get(tok_s_to_ns[end])
    if orig_start is None or orig_end is None:
        return orig_text
    return orig_text[orig_start:orig_end + 1]


def _best_indexes(logits: Any, n_best_size: int) -> list[int]:
    """Positions of the n largest logits, earlier first on ties (a stable sort, as the original)."""
    return np.argsort(-np.asarray(logits, np.float64), kind="stable")[:n_best_size].tolist()


def _softmax(scores: list[float]) -> list[float]:
    if not scores:
        return []
    exp = np.exp(np.asarray(scores, np.float64) - max(scores))
    return (exp / exp.sum()).tolist()


def _require(result: RawResult, names: Sequence[str], position: int, mode: str) -> None:
    missing = [name for name in names if getattr(result, name) is None]
    if missing:
        raise ValueError(f"result {position} lacks {missing}, needed for {mode}")


_Candidate = collections.namedtuple(
    "_Candidate", ["feature", "start_index", "end_index", "start_logit", "end_logit"])


def postprocess(examples: Sequence[QAExample], features: Sequence[QAFeature],
                results: Sequence[RawResult], n_best_size: int, max_answer_length: int,
                joint_prediction: bool, answerable_classifier: bool, version_2: bool, *,
                tokenizer: WordPieceTokenizer,
                ) -> tuple[dict[str, str], dict[str, float], dict[str, list[dict]]]:
    """Answer text per question from the model's outputs (the original's write_predictions).

    results[i] belongs to features[i]. Returns (predictions, null_odds, nbest), keyed by qas_id.
    SQuAD 2.0 predictions are the best non-null span, never "": apply_na_threshold() (or
    evaluate()) turns those with null odds above the threshold into "". null_odds is empty for
    1.1. Each n-best entry has text, probability, start_logit and end_logit."""
    if len(features) != len(results):
        raise ValueError(f"{len(results)} results for {len(features)} features")
    span_fields = (("start_top_log_probs", "start_top_index", "end_top_log_probs",
                    "end_top_index") if joint_prediction else ("start_logits", "end_logits"))
    windows: dict[int, list[tuple[QAFeature, RawResult]]] = collections.defaultdict(list)
    for position, (feature, result) in enumerate(zip(features, results)):
        _require(result, span_fields, position,
                 "joint prediction" if joint_prediction else "independent start/end")
        if version_2 and not answerable_classifier:
            _require(result, ("start_logits",), position, "the [CLS] null score")
        windows[feature.example_index].append((feature, result))

    predictions: dict[str, str] = {}
    null_odds: dict[str, float] = {}
    all_nbest: dict[str, list[dict]] = {}
    for example_index, example in enumerate(examples):
        pairs = windows.get(example_index, [])
        candidates = []
        score_null = _NULL_SCORE_INIT  # the lowest null score over the windows
        for feature, result in pairs:
            if joint_prediction:
                starts = np.asarray(result.start_top_index).tolist()
                ends = np.asarray(result.end_top_index).tolist()
                start_scores = np.asarray(result.start_top_log_probs, np.float64)
                end_scores = np.asarray(result.end_top_log_probs, np.float64)
            else:
                starts = _best_indexes(result.start_logits, n_best_size)
                ends = _best_indexes(result.end_logits, n_best_size)
                start_scores = np.asarray(result.start_logits, np.float64)
                end_scores = np.asarray(result.end_logits, np.float64)
            if version_2:
                if answerable_classifier:
                    null_score = float(result.answerable_logit)
                else:
                    # The original's joint head outputs end_logits of zeros at prediction time,
                    # so its null score there is the [CLS] start logit alone.
                    end_null = 0.0 if result.end_logits is None else result.end_logits[0]
                    null_score = float(result.start_logits[0]) + float(end_null)
                score_null = min(score_null, null_score)
            num_tokens = sum(feature.input_mask)
            for i, start in enumerate(starts):
                for j, end in enumerate(ends[i] if joint_prediction else ends):
                    # Only spans inside the document part of the window, starting where this
                    # window has the most context for the start token.
                    if start >= num_tokens or end >= num_tokens or start == 0:
                        continue
                    if start not in feature.token_to_orig_map or \
                            end not in feature.token_to_orig_map:
                        continue
                    if not feature.token_is_max_context.get(start, False):
                        continue
                    if end < start or end - start + 1 > max_answer_length:
                        continue
                    candidates.append(_Candidate(
                        feature, start, end,
                        float(start_scores[i] if joint_prediction else start_scores[start]),
                        float(end_scores[i, j] if joint_prediction else end_scores[end])))
        candidates.sort(key=lambda c: c.start_logit + c.end_logit, reverse=True)

        def orig_text(candidate: _Candidate) -> str:
            first = candidate.feature.token_to_orig_map[candidate.start_index]
            last = candidate.feature.token_to_orig_map[candidate.end_index]
            return " ".join(example.doc_tokens[first:last + 1])

        # The candidates' original words, split by the tokenizer in one batch.
        texts = list(dict.fromkeys(orig_text(c) for c in candidates))
        words = dict(zip(texts, tokenizer.split_words(texts)))
        nbest: list[dict] = []
        seen: set[str] = set()
        for candidate in candidates:
            if len(nbest) >= n_best_size:
                break
            feature = candidate.feature
            pieces = tokenizer.convert_ids_to_tokens(
                feature.input_ids[candidate.start_index:candidate.end_index + 1])
            pred_text = " ".join(pieces).replace(" ##", "").replace("##", "")
            pred_text = " ".join(pred_text.split())
            original = orig_text(candidate)
            text = get_final_text(pred_text, original, words[original])
            if text in seen:  # the same answer from another window or span: keep the best
                continue
            seen.add(text)
            nbest.append({"text": text, "start_logit": candidate.start_logit,
                          "end_logit": candidate.end_logit})
        if not nbest:  # the original's placeholder, so that there is always a prediction
            nbest.append({"text": "empty", "start_logit": 0.0, "end_logit": 0.0})
        totals = [entry["start_logit"] + entry["end_logit"] for entry in nbest]
        for entry, probability in zip(nbest, _softmax(totals)):
            entry["probability"] = probability
        all_nbest[example.qas_id] = [
            {key: entry[key] for key in ("text", "probability", "start_logit", "end_logit")}
            for entry in nbest]

        if not version_2:
            predictions[example.qas_id] = nbest[0]["text"]
            continue
        best = next((entry for entry in nbest if entry["text"]), None)
        if best is None:  # cannot happen with non-empty words; the original would crash
            best = {"text": "", "start_logit": 0.0, "end_logit": 0.0}
        predictions[example.qas_id] = best["text"]
        if answerable_classifier:
            null_odds[example.qas_id] = float(score_null)
        else:
            null_odds[example.qas_id] = float(score_null - best["start_logit"] - best["end_logit"])
    return predictions, null_odds, all_nbest


def apply_na_threshold(predictions: dict[str, str], null_odds: dict[str, float],
                       threshold: float = DEFAULT_NA_THRESHOLD) -> dict[str, str]:
    """Predictions with "" (no answer) where the null odds exceed the threshold, as the
    original writes SQuAD 2.0 test predictions (questions without null odds are kept)."""
    return {qid: "" if qid in null_odds and null_odds[qid] > threshold else text
            for qid, text in predictions.items()}


def _write_json(path: str, obj: Any) -> None:
    files.write_atomically(path, json.dumps(obj))


def write_predictions(directory: str, predictions: dict[str, str],
                      null_odds: dict[str, float] | None,
                      nbest: dict[str, list[dict]] | None = None) -> None:
    """predictions.json (qas_id -> text), null_odds.json (qas_id -> odds, the official
    scorer's na-prob file) and optionally nbest_predictions.json into directory."""
    tf.io.gfile.makedirs(directory)
    _write_json(os.path.join(directory, "predictions.json"), dict(predictions))
    if null_odds is not None:
        _write_json(os.path.join(directory, "null_odds.json"),
                    {qid: float(odds) for qid, odds in null_odds.items()})
    if nbest is not None:
        _write_json(os.path.join(directory, "nbest_predictions.json"), nbest)


# ---------------------------------------------------------------------------------------------
# Scoring


def evaluate(dataset_path: str, predictions: dict[str, str], null_odds: dict[str, float] | None,
             version_2: bool, *, na_threshold: float = DEFAULT_NA_THRESHOLD) -> dict[str, float]:
    """Official SQuAD scores of the predictions (tf-models-official's scorers).

    v1.1: exact_match, f1 (percent; null_odds ignored). v2.0: exact, f1, total and their
    HasAns_/NoAns_ versions with "" predicted where null_odds > na_threshold (the original's
    qa_na_threshold); with null_odds also best_exact, best_f1 (over all thresholds), their
    thresholds, and the scorer's pr_*_ap. Questions without a prediction are logged; the v1.1
    scorer counts them as wrong, the v2.0 scorer leaves them out."""
    data = _load_json(dataset_path)
    question_ids = [_get(qa, "id", str, dataset_path, f"{where} question {q}")
                    for where, paragraph in _paragraphs(data, dataset_path)
                    for q, qa in enumerate(_get(paragraph, "qas", list, dataset_path, where))]
    dataset = data["data"]
    missing = [qid for qid in question_ids if qid not in predictions]
    if len(missing) == len(question_ids):
        raise ValueError(f"none of the {len(question_ids)} questions of {dataset_path} has a "
                         "prediction")
    if missing:
        logging.warning("%d of %d questions of %s have no prediction (e.g. %s)", len(missing),
                        len(question_ids), dataset_path, ", ".join(missing[:_MAX_IDS_IN_WARNING]))
    if not version_2:
        scores = squad_evaluate_v1_1.evaluate(dataset, predictions)
        return {"exact_match": 100.0 * scores["exact_match"], "f1": 100.0 * scores["final_f1"]}

    if null_odds is None:
        return {k: float(v) for k, v in squad_evaluate_v2_0.evaluate(dataset, predictions).items()
                if not k.startswith(("final_", "pr_"))}
    lacking = [qid for qid in predictions if qid not in null_odds]
    if lacking:
        raise ValueError(f"{len(lacking)} predictions have no null odds (e.g. {lacking[0]!r})")
    # The scorer's own threshold is fixed at 1.0 (for probabilities); the original thresholds
    # its logit odds at qa_na_threshold. So threshold first and score those predictions with no
    # na-probs (nothing further is nulled), then score the raw predictions with the odds for the
    # threshold-free best_* (which is what the original's best_* are computed from).
    thresholded = squad_evaluate_v2_0.evaluate(
        dataset, apply_na_threshold(predictions, null_odds, na_threshold))
    swept = squad_evaluate_v2_0.evaluate(dataset, predictions, dict(null_odds))
    metrics = {k: float(v) for k, v in thresholded.items()
               if not k.startswith(("final_", "pr_"))}
    for key, value in swept.items():
        if key.startswith("final_"):
            metrics["best_" + key[len("final_"):]] = float(value)
        elif key.startswith("pr_"):
            metrics[key] = float(value)
    return metrics


def evaluate_mrqa(path: str, predictions: dict[str, str]) -> dict[str, float]:
    """The MRQA shared task's official scores of the predictions (percent): each question's
    exact match and F1 are the best over all its gold `answers`, as in SQuAD 1.1's scorer,
    which the MRQA script adapts and which computes them here. Questions without a
    prediction score 0 and are logged."""
    questions = []
    for where, paragraph in _mrqa_paragraphs(path):
        for q, qa in enumerate(_get(paragraph, "qas", list, path, where)):
            qid = _get(qa, "qid", str, path, f"{where} question {q}")
            answers = _get(qa, "answers", list, path, f"question {qid!r}")
            if not answers or not all(isinstance(a, str) for a in answers):
                raise ValueError(f"{path}: question {qid!r}: 'answers' should be a non-empty "
                                 f"list of strings, not {answers!r}")
            questions.append({"id": qid, "answers": [{"text": a} for a in answers]})
    if not questions:
        raise ValueError(f"{path} holds no questions")
    missing = [qa["id"] for qa in questions if qa["id"] not in predictions]
    if len(missing) == len(questions):
        raise ValueError(f"none of the {len(questions)} questions of {path} has a prediction")
    if missing:
        logging.warning("%d of %d questions of %s have no prediction (e.g. %s)", len(missing),
                        len(questions), path, ", ".join(missing[:_MAX_IDS_IN_WARNING]))
    scores = squad_evaluate_v1_1.evaluate([{"paragraphs": [{"qas": questions}]}], predictions)
    return {"exact_match": 100.0 * scores["exact_match"], "f1": 100.0 * scores["final_f1"]}


def tfds_to_json(name: str, split: str, tfds_data_dir: str | None, path: str) -> str:
    """Writes tensorflow-datasets' `name` (squad/v1.1 or squad/v2.0, already prepared in
    tfds_data_dir: nothing is downloaded) split in the official json schema to `path`, so that
    reading, featurizing and the official scorer run as on the json files. Returns `path`."""
    import tensorflow_datasets as tfds

    builder = tfds.builder(name, data_dir=tfds_data_dir)
    try:
        dataset = builder.as_dataset(split=split, shuffle_files=False)
    except AssertionError:  # how tfds says the data is not there
        raise ValueError(f"{name} is not prepared in {builder.data_dir}; nothing is downloaded "
                         f"here. Prepare it where there is internet (`tfds build {name} "
                         "--data_dir=DIR`), copy DIR here and pass it as tfds_data_dir") from None
    paragraphs: dict[tuple[str, str], list[dict]] = {}
    for row in tfds.as_numpy(dataset):
        text = lambda value: value.decode("utf-8")  # noqa: E731
        answers = [{"text": text(t), "answer_start": int(a)} for t, a in
                   zip(row["answers"]["text"], row["answers"]["answer_start"])]
        question = {"id": text(row["id"]), "question": text(row["question"]), "answers": answers}
        if "is_impossible" in row:
            question["is_impossible"] = bool(row["is_impossible"])
        paragraphs.setdefault((text(row["title"]), text(row["context"])), []).append(question)
    titles: dict[str, list[dict]] = {}
    for (title, context), questions in paragraphs.items():
        titles.setdefault(title, []).append({"context": context, "qas": questions})
    data = {"version": name.split("/")[-1],
            "data": [{"title": title, "paragraphs": ps} for title, ps in titles.items()]}
    tf.io.gfile.makedirs(os.path.dirname(path))
    _write_json(path, data)
    return path
