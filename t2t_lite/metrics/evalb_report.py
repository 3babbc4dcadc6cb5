"""EVALB's report: per-sentence rows, the totals row and the two summary blocks.

Report styles: "1997" reproduces `sample/sample.rsl` of the EVALB distribution byte for byte.
"2006" is what the 2006 release (quote fix, F-measure) prints, as
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

from t2t_lite.metrics.evalb_scoring import OK, EvalbResult, SentenceResult, Summary

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
