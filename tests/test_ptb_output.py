"""Parses in Penn Treebank form (`ptb_output`, the decoder's --ptb_output) against PTB gold.

The dev trees of the shared WSJ sample are parsed perfectly (their own linearization, written
by `WsjParsing.outputs` as the decoder writes a parse), and the parse file is scored against
the raw treebank lines, outer bracket `( (S ...) )`, traces and function tags included:
- in PTB form, `WsjParsing.score` (what the decoder prints), our `t2t_lite.evalb` command and
  the reference EVALB program (built from its C source when available) all give 100 F1 and
  100% complete match, with one matched outer bracket per sentence;
- without it, the reference figures show the missing outer bracket: no complete match, and
  recall short by one bracket per sentence.
"""

import subprocess
import sys

import pytest

from t2t_lite import problems
from t2t_lite.inference import decode
from t2t_lite.inference.text_files import DecodeError
from t2t_lite.metrics import evalb
from t2t_lite.problems import trees

PROBLEM = "wsj_parsing"


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def summary(report: str, block: str = "-- All --") -> dict:
    """{"Bracketing FMeasure": "100.00", ...}: one summary block of an EVALB report."""
    text = report.split(block, 1)[1].split("\n\n", 1)[0]
    return dict((part.strip() for part in line.split("=")) for line in text.strip().splitlines())


def totals(report: str) -> tuple:
    """(matched, gold, test) brackets from the totals row of an EVALB report."""
    counts = report.split("=" * 76)[2].split()
    return tuple(int(count) for count in counts[2:5])


@pytest.fixture(scope="module")
def dev(shared_data, tmp_path_factory):
    """Raw and preprocessed dev trees, and perfect parses written in both forms, as files."""
    folder = tmp_path_factory.mktemp("ptb_output")
    raw_dir = str(shared_data / "wsj_sample")
    plain, ptb = problems.get(PROBLEM), problems.get(PROBLEM)
    decode.use_ptb_form(ptb)
    raw = ptb.reference_trees("dev", str(folder), raw_dir, raw=True)
    preprocessed = ptb.reference_trees("dev", str(folder), raw_dir)
    assert len(raw) == len(preprocessed) == 105
    assert all(line.startswith("( (") for line in raw), "PTB files keep the outer bracket"
    words = ptb.reference_inputs(raw)
    parses = {}
    for name, problem in (("plain", plain), ("ptb", ptb)):
        parses[name] = [
            problem.outputs([" ".join(trees.linearize(trees.parse_tree(tree)))], text, gold)[0]
            for tree, text, gold in zip(preprocessed, words, raw)
        ]
    return {
        "problem": ptb,
        "raw": raw,
        "parses": parses,
        "gold_file": _write(folder / "dev.gold.mrg", raw),
        "files": {name: _write(folder / f"dev.{name}", lines) for name, lines in parses.items()},
        "preprocessed_brackets": evalb.evalb_score(preprocessed, preprocessed).all.gold,
    }


def test_ptb_form_wraps_each_tree_in_the_label_less_outer_bracket(dev):
    for plain, ptb in zip(dev["parses"]["plain"], dev["parses"]["ptb"]):
        assert ptb == f"( {plain} )"
        assert trees.parse_tree(ptb).label == ""


def test_printed_figure_equals_our_evalb_command_on_the_files(dev, shared_data):
    scores = dev["problem"].score(dev["parses"]["ptb"], dev["raw"])
    result = subprocess.run(
        [sys.executable, "-m", "t2t_lite.evalb", "-p", str(shared_data / "evalb" / "COLLINS.prm"),
         str(dev["gold_file"]), str(dev["files"]["ptb"])],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    block = summary(result.stdout)
    assert block["Bracketing FMeasure"] == f"{scores['f1']:.2f}" == "100.00"
    assert block["Complete match"] == f"{scores['complete_match']:.2f}" == "100.00"
    matched, gold, test = totals(result.stdout)
    # Every preprocessed bracket plus one outer bracket per sentence, on both sides.
    assert matched == gold == test == dev["preprocessed_brackets"] + 105


def test_reference_evalb_gives_the_printed_figures_only_in_ptb_form(
    dev, shared_data, reference_evalb
):
    prm = str(shared_data / "evalb" / "COLLINS.prm")
    reports = {
        name: subprocess.run(
            [str(reference_evalb), "-p", prm, str(dev["gold_file"]), str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout  # fmt: skip
        for name, path in dev["files"].items()
    }
    scores = dev["problem"].score(dev["parses"]["ptb"], dev["raw"])
    ptb = summary(reports["ptb"])
    assert ptb["Number of Valid sentence"] == str(scores["valid"]) == "105"
    for field, key in (
        ("Bracketing Recall", "recall"),
        ("Bracketing Precision", "precision"),
        ("Bracketing FMeasure", "f1"),
        ("Complete match", "complete_match"),
        ("Tagging accuracy", "tagging_accuracy"),
    ):
        assert ptb[field] == f"{scores[key]:.2f}" == "100.00", field
    assert totals(reports["ptb"])[0] == dev["preprocessed_brackets"] + 105
    # The same trees without the outer bracket: each sentence misses one gold bracket.
    plain = summary(reports["plain"])
    assert plain["Complete match"] == "0.00" and plain["Bracketing Precision"] == "100.00"
    matched, gold, test = totals(reports["plain"])
    assert matched == test == dev["preprocessed_brackets"] == gold - 105


def test_ptb_output_is_refused_for_a_problem_without_trees():
    with pytest.raises(DecodeError, match="--ptb_output is for parsing problems"):
        decode.use_ptb_form(problems.get("algorithmic_copy"))
