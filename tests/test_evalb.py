"""EVALB scorer: the distribution's own reference outputs, hand-derived cases, the command line.

Reference outputs (../shared/data/evalb): `sample/sample.rsl` (EVALB 1997 on sample.gld/tst with
sample.prm) must come out byte for byte; `bug/bug.rsl-new` and `bug/bug.rsl-old` (the 2006
release with and without its quote fix) come out line for line once the staged files' missing
leading spaces are allowed for: every line there lost up to three leading spaces (its header
reads "Sent." where every EVALB prints "  Sent.", its rows "1   37" for "   1   37").
"""

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest

from t2t_lite import evalb as evalb_cli
from t2t_lite.metrics import evalb

EVALB_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "evalb"
SAMPLE = EVALB_DIR / "sample"
BUG = EVALB_DIR / "bug"
GOLD = "(S (A (P this)) (B (Q is) (A (R a) (T test))))"


def _matches_with_lost_indent(expected: str, actual: str) -> bool:
    """True when `expected` is `actual` with at most three leading spaces removed."""
    return any(actual == " " * k + expected for k in range(4))


def _assert_same_report(expected_text: str, actual_text: str):
    expected, actual = expected_text.splitlines(), actual_text.splitlines()
    assert len(expected) == len(actual)
    for number, (want, got) in enumerate(zip(expected, actual), start=1):
        assert _matches_with_lost_indent(want, got), f"line {number}: {want!r} vs {got!r}"


def test_sample_rsl_byte_for_byte():
    params = evalb.load_params(SAMPLE / "sample.prm")
    result = evalb.evalb_files(SAMPLE / "sample.gld", SAMPLE / "sample.tst", params)
    report = evalb.format_report(result, style="1997")
    assert report == (SAMPLE / "sample.rsl").read_text()


def test_sample_summary_numbers_and_fmeasure():
    params = evalb.load_params(SAMPLE / "sample.prm")
    result = evalb.evalb_files(SAMPLE / "sample.gld", SAMPLE / "sample.tst", params)
    # sample.rsl: 86 matched of 98 gold and 95 test brackets; without sentence 22 (44 words,
    # 34 brackets, all matched): 52 of 64 and 61. F = 2PR/(P+R) = 2 * matched / (gold + test).
    assert (result.all.matched, result.all.gold, result.all.test) == (86, 98, 95)
    assert result.all.fmeasure == pytest.approx(100 * 2 * 86 / (98 + 95))
    assert result.cutoff.fmeasure == pytest.approx(100 * 2 * 52 / (64 + 61))
    report = evalb.format_report(result)  # 2006 style
    assert report.count("Bracketing FMeasure       =  89.12\n") == 1
    assert report.count("Bracketing FMeasure       =  83.20\n") == 1
    assert "12 : Words unmatch (is|was)\n" in report
    assert "13 : Length unmatch (4|5)\n" in report
    assert result.f1 == pytest.approx(17200 / 193)


def test_bug_files_with_new_prm_reproduce_bug_rsl_new():
    """new.prm's QUOTE_LABELs resolve the quote mislabelings that made all five errors."""
    params = evalb.load_params(EVALB_DIR / "new.prm")
    result = evalb.evalb_files(BUG / "bug.gld", BUG / "bug.tst", params)
    _assert_same_report((BUG / "bug.rsl-new").read_text(), evalb.format_report(result))


def test_bug_files_without_quote_fix_reproduce_bug_rsl_old():
    """bug.rsl-old's counts (33|35) keep '.', which sample.prm does not delete."""
    params = evalb.load_params(SAMPLE / "sample.prm")
    result = evalb.evalb_files(BUG / "bug.gld", BUG / "bug.tst", params)
    _assert_same_report((BUG / "bug.rsl-old").read_text(), evalb.format_report(result))
    assert math.isnan(result.all.fmeasure) and result.f1 == 0.0


def test_bug_files_with_collins_prm_are_length_errors():
    # COLLINS.prm has no QUOTE_LABEL: gold sentence 1 has 37 words, minus `` '' , , . = 32;
    # the parser tagged the two quotes CD and NN, so its 37 words lose only , , . = 34.
    params = evalb.load_params(EVALB_DIR / "COLLINS.prm")
    result = evalb.evalb_files(BUG / "bug.gld", BUG / "bug.tst", params)
    messages = [row.message for row in result.sentences]
    assert messages[0] == "1 : Length unmatch (32|34)"
    assert [row.status for row in result.sentences] == [evalb.ERROR] * 5
    assert [row.length for row in result.sentences] == [37, 21, 47, 26, 44]


def test_parameter_files():
    assert evalb.load_params(EVALB_DIR / "COLLINS.prm") == evalb.COLLINS
    new = evalb.load_params(EVALB_DIR / "new.prm")
    assert new.quote_labels == {"``", "''", "POS", "NN", "CD", "VBZ", ":"}
    assert {"S1", "?", "!"} <= new.delete_labels
    nk = evalb.load_params(EVALB_DIR / "nk.prm")
    assert dataclasses.replace(nk, max_error=10) == new and nk.max_error == 10000
    assert evalb.parse_params("LABELED 0\nDELETE_LABEL #\n# DELETE_LABEL X\n").labeled is False
    assert evalb.parse_params("DELETE_LABEL #\n").delete_labels == {"#"}
    with pytest.raises(ValueError, match=r"p\.prm, line 2: unknown key 'LABELLED'"):
        evalb.parse_params("DEBUG 0\nLABELLED 1\n", source="p.prm")
    with pytest.raises(ValueError, match="line 1: CUTOFF_LEN takes one integer"):
        evalb.parse_params("CUTOFF_LEN forty\n")


def _one(gold: str, test: str, params=evalb.COLLINS, **options) -> evalb.SentenceResult:
    return evalb.evalb_score([gold], [test], params, **options).sentences[0]


def test_crossing_brackets_hand_derived():
    # Gold brackets S[0,4) A[0,1) B[1,4) A[2,4). Test S[0,4) X[0,2) Y[2,4): X crosses B
    # (0 < 1 < 2 < 4); Y lies inside B and on A[2,4) (another label: no match, no crossing).
    test = "(S (X (P this) (Q is)) (Y (R a) (T test)))"
    row = _one(GOLD, test)
    assert (row.gold, row.test, row.matched, row.crossing) == (4, 3, 1, 1)
    row = _one(GOLD, "(S (X (P this) (Z (Q is) (R a))) (T test))")
    # Test S[0,4) X[0,3) Z[1,3): X crosses B[1,4) and A[2,4); Z crosses A[2,4). Two brackets.
    assert (row.test, row.matched, row.crossing) == (3, 1, 2)


def test_crossing_count_equals_the_pairwise_definition_on_random_brackets():
    """EVALB's rule read pair by pair: (s, e) crosses (gs, ge) if gs < s < ge < e or s < gs < e < ge."""
    import random

    from t2t_lite.metrics.evalb_crossing import count_crossing

    generator = random.Random(7)
    for _ in range(400):
        length = generator.randint(1, 12)

        def brackets(length=length):
            spans = []
            for _ in range(generator.randint(0, 10)):
                start = generator.randint(0, length - 1)
                spans.append(("X", start, generator.randint(start + 1, length)))
            return spans

        gold, test = brackets(), brackets()
        expected = sum(
            any(gs < s < ge < e or s < gs < e < ge for _, gs, ge in gold) for _, s, e in test
        )
        assert count_crossing(gold, test) == expected, (gold, test)


@pytest.mark.timeout(20)
def test_deep_tree_is_scored_without_pairwise_work():
    """20,000 nested brackets (a pathological parser output) score in far less than the
    timeout; comparing every gold bracket with every test one took minutes under load."""
    depth = 20_000
    labels = ["NP", "VP", "PP"]
    opening = "".join(f"({labels[i % 3]} " for i in range(depth))
    tree = opening + "(DT the) (NN dog)" + ")" * depth
    row = _one(tree, tree)
    assert (row.gold, row.test, row.matched, row.crossing) == (depth, depth, depth, 0)
    # One test bracket around the first word only, inside all gold brackets: crosses none;
    # the gold spans all cover both words, so no gold span ends inside it either.
    row = _one(tree, "(S (X (DT the)) (NN dog))")
    assert (row.matched, row.crossing) == (0, 0)


def test_duplicate_brackets_match_min_of_counts():
    """README [7] 5: n gold and m test copies of a bracket give min(n, m) matches."""
    two = "(S (A (P this)) (B (Q is) (A (A (R a) (T test)))))"
    row = _one(GOLD, two)
    assert (row.gold, row.test, row.matched) == (4, 5, 4)  # precision 4/5, recall 1
    row = _one(two, GOLD)
    assert (row.gold, row.test, row.matched) == (5, 4, 4)  # precision 1, recall 4/5


def test_labels_unlabeled_equivalence_and_function_tags():
    test = "(S (C (P this)) (B (Q is) (A (R a) (T test))))"
    assert _one(GOLD, test).matched == 3
    unlabeled = dataclasses.replace(evalb.COLLINS, labeled=False)
    assert _one(GOLD, test, unlabeled).matched == 4
    equal = dataclasses.replace(evalb.COLLINS, eq_labels=(("A", "C"),))
    assert _one(GOLD, test, equal).matched == 4
    tagged = "(S (A-SBJ-1 (P this)) (B=2 (Q is) (A (R a) (T test))))"
    assert _one(tagged, GOLD).matched == 4


def test_deletion_outer_bracket_and_punctuation():
    gold = "( (S (NP (DT The) (NN dog)) (VP (VBZ barks) (NP (-NONE- *))) (. .)) )"
    test = "(TOP (S (NP (DT The) (NN dog)) (VP (VBZ barks)) (, .)))"
    row = _one(gold, test)
    # The trace NP and '.' are deleted, and TOP (a DELETE_LABEL). Gold keeps its label-less
    # outer bracket: [0,3) S[0,3) NP[0,2) VP[2,3); test S[0,3) NP[0,2) VP[2,3).
    assert (row.status, row.gold, row.test, row.matched) == (evalb.OK, 4, 3, 3)
    assert (row.length, row.words, row.correct_tags) == (4, 3, 3)
    row = _one(gold, test, ignore_outer_bracket=True)
    assert (row.status, row.gold, row.test, row.matched) == (evalb.OK, 3, 3, 3)
    row = _one(gold, "(S (NP (DT The) (NN dog)) (VP (VBZ barks) (NN .)))")
    assert row.status == evalb.ERROR and row.message == "1 : Length unmatch (3|4)"


# The same three-word sentence in PTB form (label-less outer bracket), as a plain S, and parsed
# right-branching. After '.' is deleted (COLLINS.prm) the words are The dog barks, [0,3):
#   PTB: ""[0,3) S[0,3) NP[0,2) VP[2,3)     S: S[0,3) NP[0,2) VP[2,3)
#   RB:  S[0,3) S[1,3) S[2,3)               "( RB )": ""[0,3) S[0,3) S[1,3) S[2,3)
# S[1,3) crosses NP[0,2) (0 < 1 < 2 < 3); a bracket over the whole sentence crosses nothing.
PTB = "( (S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .)) )"
PLAIN = "(S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .))"
RB = "(S (DT The) (S (NN dog) (S (VBZ barks) (. .))))"


@pytest.mark.parametrize(
    "gold, test, counted, ignored",
    [
        # Both keep it: "" and S[0,3) match. Counted: 2 of 4 and 4, R = P = F = 50.
        # Ignored: S[0,3) of 3 and 3, R = P = F = 33.33.
        (PTB, f"( {RB} )", (2, 4, 4, 1), (1, 3, 3)),
        # Gold only: "" is an unmatched gold bracket. R = 1/4 = 25, P = 1/3, F = 2/7 = 28.57.
        (PTB, RB, (1, 4, 3, 1), (1, 3, 3)),
        # Test only: an unmatched test bracket. R = 1/3, P = 1/4 = 25.
        (PLAIN, f"( {RB} )", (1, 3, 4, 1), (1, 3, 3)),
        # TOP is a DELETE_LABEL, the label-less bracket is not: as the row above.
        (f"(TOP {PLAIN})", f"( {RB} )", (1, 3, 4, 1), (1, 3, 3)),
        # "((S" reads like "( (S": label "" either way. Everything matches.
        (PTB, f"({PLAIN})", (4, 4, 4, 0), (3, 3, 3)),
        # Outer bracket around S and '.': once '.' is deleted it spans S's words, and still
        # counts (its label differs from S's). Everything matches.
        ("( (S (NP (DT The) (NN dog)) (VP (VBZ barks))) (. .) )", PTB, (4, 4, 4, 0), (3, 3, 3)),
    ],
)
def test_outer_bracket_counts_unless_ignored_hand_derived(gold, test, counted, ignored):
    """(matched, gold, test[, crossing]) with the label-less bracket counted (default), ignored."""
    row = _one(gold, test)
    assert row.status == evalb.OK
    assert (row.matched, row.gold, row.test, row.crossing) == counted
    row = _one(gold, test, ignore_outer_bracket=True)
    assert (row.matched, row.gold, row.test) == ignored


def test_outer_bracket_scores_and_unlabeled_hand_derived():
    result = evalb.evalb_score([PTB, PTB], [f"( {RB} )", RB])
    # 2 + 1 matched of 4 + 4 gold and 4 + 3 test: R = 37.5, P = 3/7, F = 2 * 3 / (8 + 7) = 40.
    assert (result.all.recall, result.all.precision) == pytest.approx((37.5, 300 / 7))
    assert result.f1 == pytest.approx(40.0)
    assert evalb.bracket_f1([PTB], [RB]) == pytest.approx(100 * 2 / 7)
    assert evalb.bracket_f1([PTB], [RB], ignore_outer_bracket=True) == pytest.approx(100 / 3)
    unlabeled = dataclasses.replace(evalb.COLLINS, labeled=False)
    # Spans only. Gold [0,3) twice ("" and S), [0,2), [2,3); test "( RB )" [0,3) twice, [1,3),
    # [2,3): min(2, 2) + 1 = 3 of 4 and 4. RB alone has [0,3) once: 1 + 1 = 2 of 4 and 3.
    row = _one(PTB, f"( {RB} )", unlabeled)
    assert (row.matched, row.gold, row.test) == (3, 4, 4)
    row = _one(PTB, RB, unlabeled)
    assert (row.matched, row.gold, row.test) == (2, 4, 3)
    row = _one(PTB, RB, unlabeled, ignore_outer_bracket=True)
    assert (row.matched, row.gold, row.test) == (2, 3, 3)


def test_inner_label_less_bracket_is_a_bracket_that_can_cross():
    gold = "(S (A (P a)) ( (B (Q b)) (C (R c))))"
    test = "(S (X (A (P a)) (B (Q b))) (C (R c)))"
    # Gold S[0,3) A[0,1) ""[1,3) B[1,2) C[2,3); test S[0,3) X[0,2) A[0,1) B[1,2) C[2,3).
    # 4 match (all but "" and X); X[0,2) crosses ""[1,3) (0 < 1 < 2 < 3). R = P = 80.
    row = _one(gold, test)
    assert (row.matched, row.gold, row.test, row.crossing) == (4, 5, 5, 1)
    row = _one(gold, test, ignore_outer_bracket=True)
    assert (row.matched, row.gold, row.test, row.crossing) == (4, 4, 5, 0)


def test_skip_cutoff_and_max_error():
    gold = [GOLD] * 5
    test = [GOLD, "", "(S (P this) (Q was) (R a) (T test))", GOLD, GOLD]
    params = dataclasses.replace(evalb.COLLINS, cutoff_len=3, max_error=1)
    result = evalb.evalb_score(gold, test, params)
    assert [row.status for row in result.sentences] == [0, 2, 1]
    assert result.stopped_early
    assert (result.all.sentences, result.all.valid, result.cutoff.sentences) == (3, 1, 0)
    result = evalb.evalb_score(gold, test, dataclasses.replace(params, max_error=2))
    assert not result.stopped_early and result.all.valid == 3
    with pytest.raises(ValueError, match="gold has 5 sentences but test has 4"):
        evalb.evalb_score(gold, test[:4])


def test_malformed_lines_name_source_and_line():
    with pytest.raises(ValueError, match=r"test, line 2: 1 bracket\(s\) never closed"):
        evalb.evalb_score([GOLD, GOLD], [GOLD, "(S (A (P this))"])
    with pytest.raises(ValueError, match=r"gold, line 1: word 'this' has no POS tag"):
        evalb.evalb_score(["(S this (Q is))"], [GOLD])


def test_bracket_f1():
    gold = [GOLD, GOLD]
    test = [GOLD, "(S (A (P this) (Q is)) (A (R a) (T test)))"]
    # 4 + 2 matched, 4 + 4 gold, 4 + 3 test brackets: F = 2 * 6 / (8 + 7).
    assert evalb.bracket_f1(gold, test) == pytest.approx(100 * 12 / 15)


def test_command_line_end_to_end(tmp_path):
    """The real module, as a user runs it, on the distribution's sample."""
    command = [sys.executable, "-m", "t2t_lite.evalb", "--style", "1997", "-p"]
    files = [str(SAMPLE / "sample.prm"), str(SAMPLE / "sample.gld"), str(SAMPLE / "sample.tst")]
    done = subprocess.run(command + files, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (SAMPLE / "sample.rsl").read_text()
    assert "20 : Words unmatch (this|That)" in done.stderr


def test_command_line_errors(tmp_path, capsys):
    prm, gold = str(SAMPLE / "sample.prm"), str(SAMPLE / "sample.gld")
    missing = str(tmp_path / "missing.tst")
    assert evalb_cli.main(["-p", prm, gold, missing]) == 2
    assert "missing.tst" in capsys.readouterr().err
    broken = tmp_path / "broken.tst"
    broken.write_text(GOLD + "\n(S (A (P this)\n")
    one_line_gold = tmp_path / "gold"
    one_line_gold.write_text(GOLD + "\n" + GOLD + "\n")
    assert evalb_cli.main(["-p", prm, str(one_line_gold), str(broken)]) == 2
    assert "broken.tst, line 2" in capsys.readouterr().err
    assert evalb_cli.main(["-e", "2", "-p", prm, gold, str(SAMPLE / "sample.tst")]) == 1
    captured = capsys.readouterr()
    assert "stopped after 2 error sentences" in captured.err
    assert "Number of sentence        =     13" in captured.out


def test_debug_lists_brackets(tmp_path, capsys):
    gold, test = tmp_path / "gold", tmp_path / "test"
    gold.write_text(GOLD + "\n")
    test.write_text("(S (X (P this) (Q is)) (Y (R a) (T test)))\n")
    assert evalb_cli.main(["-d", str(gold), str(test)]) == 0
    err = capsys.readouterr().err
    assert "  gold: S[0,4) A[0,1) B[1,4) A[2,4)\n" in err
    assert "  test: S[0,4) X[0,2) Y[2,4)\n" in err


def test_command_line_outer_bracket_flag(tmp_path, capsys):
    """The label-less bracket counted by default and dropped with --ignore_outer_bracket."""
    gold, test = tmp_path / "gold", tmp_path / "test"
    gold.write_text(f"{PTB}\n({PLAIN})\n")
    test.write_text(f"( {RB} )\n{RB}\n")
    # As in test_outer_bracket_scores_and_unlabeled_hand_derived: 3 matched of 8 gold and 7
    # test brackets, R = 37.50, P = 42.86, F = 40.00.
    assert evalb_cli.main([str(gold), str(test)]) == 0
    out = capsys.readouterr().out
    assert "Bracketing Recall         =  37.50\n" in out
    assert "Bracketing Precision      =  42.86\n" in out
    assert out.count("Bracketing FMeasure       =  40.00\n") == 2  # all and len<=40
    assert evalb_cli.main(["-d", str(gold), str(test)]) == 0
    assert "  gold: [0,3) S[0,3) NP[0,2) VP[2,3)\n" in capsys.readouterr().err
    # Ignored: 1 + 1 matched of 3 + 3 on each side, R = P = F = 33.33; as the real command.
    command = [sys.executable, "-m", "t2t_lite.evalb", "--ignore_outer_bracket"]
    done = subprocess.run(
        command + [str(gold), str(test)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    for name in ("Recall   ", "Precision", "FMeasure "):
        assert done.stdout.count(f"Bracketing {name}      =  33.33\n") == 2
    with pytest.raises(SystemExit):
        evalb_cli.main(["-h"])
    assert "--ignore_outer_bracket" in capsys.readouterr().out
