"""EVALB bracketing scores (Sekine & Collins 1997), written from EVALB's README and its outputs.

Input: one bracketed sentence per line (gold and test, line i against line i); an empty test line
is a parse failure. Per sentence, as the README (sections 6 and 7) describes:
- Preterminals whose tag is a DELETE_LABEL (COLLINS.prm: punctuation, `-NONE-`) are removed with
  their word; brackets whose label is a DELETE_LABEL (`TOP`) are removed but keep their children;
  brackets left without words are removed.
- The label-less outer bracket `( (S ...) )` (or `((S ...))`) of PTB files is a constituent
  with the empty label "", as in EVALB: no DELETE_LABEL names it, so it counts like any other
  bracket, on whichever side has it. When both files keep it, it adds one matched gold and test
  bracket per sentence; when only the gold file does, one unmatched gold bracket (and likewise
  for the test file). Use the default to report EVALB's figures. `ignore_outer_bracket=True`
  (command line: `--ignore_outer_bracket`) drops every label-less bracket instead, as if it
  were `TOP`: the scores then equal those of the same trees with the outer bracket stripped
  (as preprocessed trees have it), e.g. to compare raw PTB gold with such trees.
- Function tags and indices are cut from phrasal labels (`NP-SBJ-1`, `NP=2` -> `NP`); labels
  that begin and end with `-` (`-NONE-`, `-LRB-`) are kept whole.
- Sentence length ("Len", used for the length cut-off) counts the gold words whose tag is not a
  DELETE_LABEL_FOR_LENGTH; "Words" counts the gold words left after deletion.
- Status 2 (skip): an empty gold or test line. Status 1 (error): different numbers of words
  after deletion ("Length unmatch (gold|test)") or different words ("Words unmatch"); EQ_WORD
  pairs count as equal. With QUOTE_LABEL entries (the 2006 bug fix, new.prm), a length mismatch
  caused by a word deleted on one side only, whose tags on both sides are QUOTE_LABELs (a quote
  tagged NN by a parser, say), is resolved by keeping that word on both sides.
- A bracket is (label, first word, last word + 1) over the remaining words. Matching is by span
  and label (EQ_LABEL classes; span only with LABELED 0) with multiplicity: n gold and m test
  copies of a bracket give min(n, m) matches. A test bracket crosses when it overlaps a gold
  bracket without nesting; "Cross Bracket" counts test brackets crossing at least one.
- Tag accuracy compares the tags of the remaining words (EQ_LABEL classes apply).
Summaries score valid (status 0) sentences only; processing stops once MAX_ERROR sentences are
errors.

Report styles (`format_report`): "1997" reproduces `sample/sample.rsl` of the EVALB
distribution byte for byte. "2006" is what the 2006 release (quote fix, F-measure) prints, as
far as its staged outputs `bug/bug.rsl-old` and `bug/bug.rsl-new` show it: a "Bracketing
FMeasure" line after precision (`nan` when P + R = 0; some C libraries print `-nan`), a
different spacing of the totals row, error rows with 0 words, and each error's message
("12 : Words unmatch (is|was)") on its own line before its row. With no valid sentence, the
totals row holds only the word counts and is followed by an empty line (bug.rsl-old).
Choices where no reference output decides: the words column of 1997 error rows counts the
gold words after deletion (sample.rsl cannot tell this from Len), a sentence with no gold and
no test brackets is a complete match, recall/precision of 0/0 are printed as 0.00, and the
word-mismatch message reads like the length one (only "Length unmatch" appears in a staged file).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence

_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_FUNCTION_TAG = re.compile(r"[-=]")
OK, ERROR, SKIP = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class EvalbParams:
    """The settings of an EVALB parameter (.prm) file; field names follow its keys."""

    debug: int = 0
    max_error: int = 10
    cutoff_len: int = 40
    labeled: bool = True
    delete_labels: frozenset = frozenset()
    delete_labels_for_length: frozenset = frozenset()
    quote_labels: frozenset = frozenset()
    eq_labels: tuple = ()  # ((label, label), ...)
    eq_words: tuple = ()  # ((word, word), ...)


COLLINS = EvalbParams(
    delete_labels=frozenset(["TOP", "-NONE-", ",", ":", "``", "''", "."]),
    delete_labels_for_length=frozenset(["-NONE-"]),
    eq_labels=(("ADVP", "PRT"),),
)
_INT_KEYS = {"DEBUG": "debug", "MAX_ERROR": "max_error", "CUTOFF_LEN": "cutoff_len"}
_SET_KEYS = {
    "DELETE_LABEL": "delete_labels",
    "DELETE_LABEL_FOR_LENGTH": "delete_labels_for_length",
    "QUOTE_LABEL": "quote_labels",
}
_PAIR_KEYS = {"EQ_LABEL": "eq_labels", "EQ_WORD": "eq_words"}


def parse_params(text: str, source: str = "<params>") -> EvalbParams:
    """Parses the text of an EVALB parameter file (`KEY value...` lines, `#` comments).

    Raises:
        ValueError: On an unknown key or a malformed value, naming the source and line.
    """
    values = {"debug": 0, "max_error": 10, "cutoff_len": 40, "labeled": True}
    sets = {name: set() for name in _SET_KEYS.values()}
    pairs = {name: [] for name in _PAIR_KEYS.values()}
    for number, line in enumerate(text.splitlines(), start=1):
        # Only whole lines are comments: "#" is also a POS tag (DELETE_LABEL # is valid).
        fields = [] if line.lstrip().startswith("#") else line.split()
        if not fields:
            continue
        key, args = fields[0], fields[1:]
        where = f"{source}, line {number}"
        if key in _INT_KEYS or key == "LABELED":
            if len(args) != 1 or not re.fullmatch(r"-?\d+", args[0]):
                raise ValueError(f"{where}: {key} takes one integer, got {' '.join(args)!r}")
            if key == "LABELED":
                values["labeled"] = int(args[0]) != 0
            else:
                values[_INT_KEYS[key]] = int(args[0])
        elif key in _SET_KEYS:
            if len(args) != 1:
                raise ValueError(f"{where}: {key} takes one label, got {' '.join(args)!r}")
            sets[_SET_KEYS[key]].add(args[0])
        elif key in _PAIR_KEYS:
            if len(args) != 2:
                raise ValueError(f"{where}: {key} takes two values, got {' '.join(args)!r}")
            pairs[_PAIR_KEYS[key]].append((args[0], args[1]))
        else:
            known = sorted([*_INT_KEYS, "LABELED", *_SET_KEYS, *_PAIR_KEYS])
            raise ValueError(f"{where}: unknown key {key!r}; EVALB knows {', '.join(known)}")
    return EvalbParams(
        **values,
        **{name: frozenset(labels) for name, labels in sets.items()},
        **{name: tuple(found) for name, found in pairs.items()},
    )


def load_params(path: str | os.PathLike) -> EvalbParams:
    """Reads an EVALB parameter file such as COLLINS.prm."""
    with open(path, encoding="utf-8") as handle:
        return parse_params(handle.read(), source=os.fspath(path))


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


@dataclasses.dataclass(frozen=True)
class SentenceResult:
    """One row of the report; bracket counts are zero for error and skip sentences.

    Attributes:
        sent_id: 1-based line number. length: Len (see the module docstring).
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


@dataclasses.dataclass(frozen=True)
class _Sentence:
    """A sentence as EVALB sees it: leaves in order and phrasal spans over leaf indices."""

    words: tuple
    tags: tuple
    spans: tuple  # ((label without function tags, first leaf, last leaf + 1), ...); "" label-less


def _strip_function_tags(label: str) -> str:
    if len(label) > 1 and label.startswith("-") and label.endswith("-"):
        return label
    match = _FUNCTION_TAG.search(label, 1)
    return label[: match.start()] if match else label


def _read_sentence(text: str, where: str) -> _Sentence | None:
    """Parses one line (a tree, or several side by side); None when it holds no brackets."""
    tokens = _TOKEN.findall(text)
    if not tokens:
        return None
    words, tags, spans, stack = [], [], [], []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token == "(":
            label = tokens[index + 1] if index + 1 < len(tokens) else ")"
            label = "" if label in ("(", ")") else label
            index += 1 if label else 0
            ahead = tokens[index + 1 : index + 3]
            if label and len(ahead) == 2 and ahead[0] not in ("(", ")") and ahead[1] == ")":
                words.append(ahead[0])
                tags.append(label)
                index += 2
            else:
                stack.append((label, len(words)))
        elif token == ")":
            if not stack:
                raise ValueError(f"{where}: ')' closes nothing; the brackets are unbalanced")
            label, start = stack.pop()
            spans.append((_strip_function_tags(label), start, len(words)))
        else:
            raise ValueError(
                f"{where}: word {token!r} has no POS tag; EVALB needs (TAG word) for every word"
            )
        index += 1
    if stack:
        raise ValueError(
            f"{where}: {len(stack)} bracket(s) never closed; EVALB reads one tree per line"
        )
    return _Sentence(tuple(words), tuple(tags), tuple(spans))


class _Scorer:
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

    def keep_quotes(self, gold: _Sentence, test: _Sentence, gold_keep: list, test_keep: list):
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

    def brackets(self, sentence: _Sentence, keep: list) -> list:
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

    def score(self, sent_id: int, gold: _Sentence | None, test: _Sentence | None):
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
        crossing = sum(
            any(gs < s < ge < e or s < gs < e < ge for _, gs, ge in gold_brackets)
            for _, s, e in test_brackets
        )
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


def _summarize(rows: Sequence) -> Summary:
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


def evalb_score(
    gold_trees: Sequence,
    test_trees: Sequence,
    params: EvalbParams = COLLINS,
    sources: tuple = ("gold", "test"),
    *,
    ignore_outer_bracket: bool = False,
) -> EvalbResult:
    """Scores test trees against gold trees as EVALB does.

    Args:
        gold_trees: One bracketed sentence per item (`str`, or any object whose `str()` is the
            bracket format, such as `t2t_lite.problems.trees.Tree`); "" for none.
        test_trees: The parser's output, aligned with `gold_trees`; "" for a parse failure.
        params: Parameter-file settings, e.g. `COLLINS` or `load_params(path)`.
        sources: Names of the two inputs for error messages (file names).
        ignore_outer_bracket: Drop label-less brackets such as the outer `( (S ...) )` of PTB
            files instead of counting them as EVALB does (see the module docstring).

    Returns:
        The per-sentence rows and summaries. Processing stops once MAX_ERROR sentences are
        errors (`stopped_early` then tells whether sentences were left out).

    Raises:
        ValueError: If the inputs differ in length or a sentence is malformed (unbalanced
            brackets, a word without a POS tag); the message names the source and line.
    """
    if len(gold_trees) != len(test_trees):
        raise ValueError(
            f"{sources[0]} has {len(gold_trees)} sentences but {sources[1]} has "
            f"{len(test_trees)}; EVALB pairs them line by line (use an empty line for a "
            "sentence the parser failed on)"
        )
    scorer = _Scorer(params, ignore_outer_bracket)
    rows, errors = [], 0
    for number, (gold_text, test_text) in enumerate(zip(gold_trees, test_trees), start=1):
        gold = _read_sentence(str(gold_text), f"{sources[0]}, line {number}")
        test = _read_sentence(str(test_text), f"{sources[1]}, line {number}")
        rows.append(scorer.score(number, gold, test))
        errors += rows[-1].status == ERROR
        if errors >= params.max_error:
            break
    cut = [row for row in rows if row.length <= params.cutoff_len]
    return EvalbResult(
        sentences=tuple(rows),
        all=_summarize(rows),
        cutoff=_summarize(cut),
        cutoff_len=params.cutoff_len,
        stopped_early=len(rows) < len(gold_trees),
    )


def _lines(path: str | os.PathLike) -> list:
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def evalb_files(
    gold_path: str | os.PathLike,
    test_path: str | os.PathLike,
    params: EvalbParams = COLLINS,
    *,
    ignore_outer_bracket: bool = False,
) -> EvalbResult:
    """Scores two files of one tree per line; blank lines at the end of the longer file that
    have no counterpart are ignored. `ignore_outer_bracket` as in `evalb_score`. Raises OSError
    on unreadable files."""
    gold, test = _lines(gold_path), _lines(test_path)
    for longer, other in ((gold, test), (test, gold)):
        while len(longer) > len(other) and not longer[-1].strip():
            longer.pop()
    sources = (os.fspath(gold_path), os.fspath(test_path))
    return evalb_score(
        gold, test, params, sources=sources, ignore_outer_bracket=ignore_outer_bracket
    )


def bracket_f1(
    gold_strings: Sequence,
    test_strings: Sequence,
    params: EvalbParams = COLLINS,
    *,
    ignore_outer_bracket: bool = False,
) -> float:
    """EVALB bracketing F-measure (percent) of test trees against gold trees.

    Test trees must carry POS tags comparable to the gold ones: COLLINS.prm deletes punctuation
    by tag, and a sentence whose counts of remaining words differ is an error, not scored.
    Returns 0.0 when precision and recall are both 0 (EVALB prints nan). `ignore_outer_bracket`
    as in `evalb_score`.
    """
    result = evalb_score(
        gold_strings, test_strings, params, ignore_outer_bracket=ignore_outer_bracket
    )
    return result.f1


_HEADER = (
    "  Sent.                        Matched  Bracket   Cross        Correct Tag\n"
    " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy\n"
)
_RULE = "=" * 76
STYLES = ("2006", "1997")


def _row(row: SentenceResult, style: str) -> str:
    words = row.words if row.status == OK or style == "1997" else 0
    return (
        f"{row.sent_id:4d} {row.length:4d} {row.status:4d} {row.recall:7.2f} "
        f"{row.precision:6.2f} {row.matched:5d} {row.gold:6d} {row.test:4d} "
        f"{row.crossing:6d} {words:6d} {row.correct_tags:5d} {row.tag_accuracy:8.2f}"
    )


def _totals(total: Summary, style: str) -> str:
    """The totals row. Its "Cross Bracket" column holds the number of sentences without
    crossing brackets (16 in sample.rsl, 0 in bug.rsl-new), not the sum of crossings."""
    word_part = f" {total.words:6d} {total.correct_tags:5d} {total.tagging_accuracy:8.2f}"
    if not total.valid:
        return "   " + word_part + "\n"
    counts = (
        f"{total.matched:6d} {total.gold:6d} {total.test:4d}"
        if style == "1997"
        else f"{total.matched:5d} {total.gold:5d} {total.test:5d}"
    )
    return (
        f"{'':16}{total.recall:6.2f} {total.precision:6.2f} {counts} "
        f"{total.no_crossing_sentences:6d}{word_part}"
    )


_BLOCK = (
    ("Number of sentence", "sentences", "6d"),
    ("Number of Error sentence", "errors", "6d"),
    ("Number of Skip  sentence", "skips", "6d"),
    ("Number of Valid sentence", "valid", "6d"),
    ("Bracketing Recall", "recall", "6.2f"),
    ("Bracketing Precision", "precision", "6.2f"),
    ("Bracketing FMeasure", "fmeasure", "6.2f"),  # 2006 only
    ("Complete match", "complete_match", "6.2f"),
    ("Average crossing", "average_crossing", "6.2f"),
    ("No crossing", "no_crossing", "6.2f"),
    ("2 or less crossing", "two_or_less_crossing", "6.2f"),
    ("Tagging accuracy", "tagging_accuracy", "6.2f"),
)


def _block(title: str, summary: Summary, style: str) -> list:
    return [title] + [
        f"{name:<26}= {getattr(summary, field):{spec}}"
        for name, field, spec in _BLOCK
        if style == "2006" or field != "fmeasure"
    ]


def format_report(result: EvalbResult, style: str = "2006") -> str:
    """EVALB's report: per-sentence rows, the totals row, the two summary blocks.

    Args:
        result: From `evalb_score`.
        style: "2006" (with F-measure; error messages inline, as the 2006 release prints
            them) or "1997" (exactly `sample.rsl`; messages are left to the caller).

    Returns:
        The report text, ending with a newline.
    """
    if style not in STYLES:
        raise ValueError(f"unknown report style {style!r}; choose one of {', '.join(STYLES)}")
    lines = [_HEADER + _RULE]
    for row in result.sentences:
        if row.message and style == "2006":
            lines.append(row.message)
        lines.append(_row(row, style))
    lines += [_RULE, _totals(result.all, style), "=== Summary ===", ""]
    lines += _block("-- All --", result.all, style) + [""]
    lines += _block(f"-- len<={result.cutoff_len} --", result.cutoff, style)
    return "\n".join(lines) + "\n"


def format_debug(result: EvalbResult) -> str:
    """Per-sentence bracket lists (`label[start,end)` over kept words, outer first), for DEBUG.

    A label-less bracket shows as `[start,end)`.
    """

    def spans(brackets: tuple) -> str:
        # Brackets are listed as they close, so of two with one span the later is the outer.
        ordered = sorted(enumerate(brackets), key=lambda item: (item[1][1], -item[1][2], -item[0]))
        return " ".join(f"{label}[{start},{end})" for _, (label, start, end) in ordered) or "-"

    lines = []
    for row in result.sentences:
        lines.append(f"sentence {row.sent_id}: status {row.status} {row.message}".rstrip())
        lines.append(f"  gold: {spans(row.gold_brackets)}")
        lines.append(f"  test: {spans(row.test_brackets)}")
    return "\n".join(lines) + "\n"
