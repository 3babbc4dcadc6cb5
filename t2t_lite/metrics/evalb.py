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

This module scores (`evalb_score`, `evalb_files`, `bracket_f1`) and gathers the public names
of the modules that do the parts, so callers need only it: `evalb_params` (parameter files),
`evalb_trees` (reading lines), `evalb_scoring` (matching, summaries) and `evalb_report` (the
report and its "2006" and "1997" styles).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from t2t_lite.metrics.evalb_params import COLLINS, EvalbParams, load_params, parse_params
from t2t_lite.metrics.evalb_report import STYLES, format_debug, format_report
from t2t_lite.metrics.evalb_scoring import (
    ERROR,
    OK,
    SKIP,
    EvalbResult,
    Scorer,
    SentenceResult,
    Summary,
    summarize,
)
from t2t_lite.metrics.evalb_trees import read_lines, read_sentence

__all__ = [
    "COLLINS",
    "ERROR",
    "OK",
    "SKIP",
    "STYLES",
    "EvalbParams",
    "EvalbResult",
    "SentenceResult",
    "Summary",
    "bracket_f1",
    "evalb_files",
    "evalb_score",
    "format_debug",
    "format_report",
    "load_params",
    "parse_params",
]


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
    scorer = Scorer(params, ignore_outer_bracket)
    rows, errors = [], 0
    for number, (gold_text, test_text) in enumerate(zip(gold_trees, test_trees), start=1):
        gold = read_sentence(str(gold_text), f"{sources[0]}, line {number}")
        test = read_sentence(str(test_text), f"{sources[1]}, line {number}")
        rows.append(scorer.score(number, gold, test))
        errors += rows[-1].status == ERROR
        if errors >= params.max_error:
            break
    cut = [row for row in rows if row.length <= params.cutoff_len]
    return EvalbResult(
        sentences=tuple(rows),
        all=summarize(rows),
        cutoff=summarize(cut),
        cutoff_len=params.cutoff_len,
        stopped_early=len(rows) < len(gold_trees),
    )


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
    gold, test = read_lines(gold_path), read_lines(test_path)
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
