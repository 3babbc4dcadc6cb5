"""EVALB's scoring: bracket matching per sentence pair, and the summaries over sentences.

`Scorer.score` applies the per-sentence rules listed in `t2t_lite.metrics.evalb` (deletion,
the quote fix, word checks, matching with multiplicity, crossing brackets, tags); `summarize`
computes one summary block with EVALB's formulas.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable, Sequence

from t2t_lite.metrics.evalb_crossing import count_crossing
from t2t_lite.metrics.evalb_params import EvalbParams
from t2t_lite.metrics.evalb_trees import Sentence

OK, ERROR, SKIP = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class SentenceResult:
    """One row of the report; bracket counts are zero for error and skip sentences.

    Attributes:
        sent_id: 1-based line number. length: Len (see `t2t_lite.metrics.evalb`).
        status: 0 valid, 1 error, 2 skip. message: why it is an error, else "".
        words: Gold words after deletion. correct_tags: Words whose test tag is right.
        gold_brackets, test_brackets: `(label, start, end)` tuples, for debugging.
    """

    sent_id: int
    length: int
    status: int
    matched: int = 0
    gold: int = 0
    test: int = 0
    crossing: int = 0
    words: int = 0
    correct_tags: int = 0
    message: str = ""
    gold_brackets: tuple = ()
    test_brackets: tuple = ()

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold if self.gold else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test if self.test else 0.0

    @property
    def tag_accuracy(self) -> float:
        return 100.0 * self.correct_tags / self.words if self.words else 0.0


@dataclasses.dataclass(frozen=True)
class Summary:
    """One summary block: counts over all sentences, scores over valid ones (percent)."""

    sentences: int
    errors: int
    skips: int
    valid: int
    matched: int
    gold: int
    test: int
    no_crossing_sentences: int
    words: int
    correct_tags: int
    recall: float
    precision: float
    fmeasure: float  # nan when precision + recall == 0, as EVALB prints it
    complete_match: float
    average_crossing: float
    no_crossing: float
    two_or_less_crossing: float
    tagging_accuracy: float


@dataclasses.dataclass(frozen=True)
class EvalbResult:
    """Per-sentence rows and the two summary blocks of an EVALB run."""

    sentences: tuple
    all: Summary
    cutoff: Summary
    cutoff_len: int
    stopped_early: bool = False

    @property
    def f1(self) -> float:
        """Bracketing F-measure over all valid sentences (0.0 when undefined)."""
        value = self.all.fmeasure
        return 0.0 if math.isnan(value) else value


def _classes(pairs: Iterable) -> dict:
    """Maps each member of an equivalence pair to one representative of its class."""
    parent = {}

    def find(item):
        while parent.setdefault(item, item) != item:
            item = parent[item]
        return item

    for left, right in pairs:
        parent[find(left)] = find(right)
    return {item: find(item) for item in parent}


class Scorer:
    """Scores sentence pairs under fixed parameters (equivalence classes computed once)."""

    def __init__(self, params: EvalbParams, ignore_outer_bracket: bool = False):
        self.params = params
        self.deleted = params.delete_labels | ({""} if ignore_outer_bracket else set())
        self.label_class = _classes(params.eq_labels)
        self.word_class = _classes(params.eq_words)

    def same_label(self, left: str, right: str) -> bool:
        return self.label_class.get(left, left) == self.label_class.get(right, right)

    def same_word(self, left: str, right: str) -> bool:
        return self.word_class.get(left, left) == self.word_class.get(right, right)

    def keep_quotes(self, gold: Sentence, test: Sentence, gold_keep: list, test_keep: list):
        """The 2006 fix: keeps words deleted on one side only when both tags are QUOTE_LABELs.

        The two word sequences are aligned left to right, stepping over deleted words (traces,
        punctuation) that have no counterpart on the other side.
        """
        quotes = self.params.quote_labels
        i = j = 0
        while i < len(gold.words) and j < len(test.words):
            if self.same_word(gold.words[i], test.words[j]):
                if (
                    gold_keep[i] != test_keep[j]
                    and gold.tags[i] in quotes
                    and test.tags[j] in quotes
                ):
                    gold_keep[i] = test_keep[j] = True
                i, j = i + 1, j + 1
            elif not gold_keep[i]:
                i += 1
            elif not test_keep[j]:
                j += 1
            else:
                return

    def brackets(self, sentence: Sentence, keep: list) -> list:
        """`(label, start, end)` over kept words, without deleted labels and empty spans."""
        position = [0]
        for kept in keep:
            position.append(position[-1] + kept)
        found = []
        for label, start, end in sentence.spans:
            if label not in self.deleted and position[start] < position[end]:
                found.append((label, position[start], position[end]))
        return found

    def mismatch(self, sent_id: int, gold_words: list, test_words: list) -> str:
        """EVALB's message when the kept `(word, tag)` lists differ in length or words, else ""."""
        if len(gold_words) != len(test_words):
            return f"{sent_id} : Length unmatch ({len(gold_words)}|{len(test_words)})"
        for (gold_word, _), (test_word, _) in zip(gold_words, test_words):
            if not self.same_word(gold_word, test_word):
                return f"{sent_id} : Words unmatch ({gold_word}|{test_word})"
        return ""

    def score(self, sent_id: int, gold: Sentence | None, test: Sentence | None):
        """Returns the `SentenceResult` of one sentence pair."""
        params = self.params
        gold_tags = () if gold is None else gold.tags
        length = sum(tag not in params.delete_labels_for_length for tag in gold_tags)
        gold_keep = [tag not in params.delete_labels for tag in gold_tags]
        if gold is None or test is None:
            return SentenceResult(sent_id, length, SKIP, words=sum(gold_keep))
        test_keep = [t not in params.delete_labels for t in test.tags]
        if sum(gold_keep) != sum(test_keep) and params.quote_labels:
            self.keep_quotes(gold, test, gold_keep, test_keep)
        gold_words = [(w, t) for w, t, k in zip(gold.words, gold.tags, gold_keep) if k]
        test_words = [(w, t) for w, t, k in zip(test.words, test.tags, test_keep) if k]
        message = self.mismatch(sent_id, gold_words, test_words)
        if message:
            return SentenceResult(sent_id, length, ERROR, words=len(gold_words), message=message)
        correct_tags = sum(self.same_label(g[1], t[1]) for g, t in zip(gold_words, test_words))
        gold_brackets = self.brackets(gold, gold_keep)
        test_brackets = self.brackets(test, test_keep)

        def key(bracket):
            label = self.label_class.get(bracket[0], bracket[0]) if params.labeled else ""
            return (label, bracket[1], bracket[2])

        matched = sum(
            (Counter(map(key, gold_brackets)) & Counter(map(key, test_brackets))).values()
        )
        crossing = count_crossing(gold_brackets, test_brackets)
        return SentenceResult(
            sent_id,
            length,
            OK,
            matched=matched,
            gold=len(gold_brackets),
            test=len(test_brackets),
            crossing=crossing,
            words=len(gold_words),
            correct_tags=correct_tags,
            gold_brackets=tuple(gold_brackets),
            test_brackets=tuple(test_brackets),
        )


def _percent(numerator: float, denominator: float, scale: float = 100.0) -> float:
    return scale * numerator / denominator if denominator else 0.0


def summarize(rows: Sequence) -> Summary:
    """The summary block of `rows` (EVALB's formulas; scores over valid sentences only)."""
    valid = [row for row in rows if row.status == OK]
    matched = sum(row.matched for row in valid)
    gold = sum(row.gold for row in valid)
    test = sum(row.test for row in valid)
    words = sum(row.words for row in valid)
    correct_tags = sum(row.correct_tags for row in valid)
    recall, precision = _percent(matched, gold), _percent(matched, test)
    no_crossing = sum(row.crossing == 0 for row in valid)
    return Summary(
        sentences=len(rows),
        errors=sum(row.status == ERROR for row in rows),
        skips=sum(row.status == SKIP for row in rows),
        valid=len(valid),
        matched=matched,
        gold=gold,
        test=test,
        no_crossing_sentences=no_crossing,
        words=words,
        correct_tags=correct_tags,
        recall=recall,
        precision=precision,
        fmeasure=2 * precision * recall / (precision + recall) if precision + recall else math.nan,
        complete_match=_percent(
            sum(row.matched == row.gold == row.test for row in valid), len(valid)
        ),
        average_crossing=_percent(sum(row.crossing for row in valid), len(valid), scale=1.0),
        no_crossing=_percent(no_crossing, len(valid)),
        two_or_less_crossing=_percent(sum(row.crossing <= 2 for row in valid), len(valid)),
        tagging_accuracy=_percent(correct_tags, words),
    )
