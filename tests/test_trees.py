"""Constituency trees: parsing, preprocessing, linearization round trips and repair."""

import random
import re
from pathlib import Path

import pytest

from t2t_lite.metrics import evalb
from t2t_lite.problems import trees

WSJ = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "data"
    / "wsj_sample"
    / "wsj_0001-0179.oneline.mrg"
)
JOHN = "(S (NP (NNP John)) (VP (VBZ sleeps)) (. .))"


@pytest.fixture(scope="module")
def wsj_lines():
    return WSJ.read_text().splitlines()


@pytest.fixture(scope="module")
def wsj_trees(wsj_lines):
    return trees.parse_trees("\n".join(wsj_lines), source=str(WSJ))


def test_parse_odd_whitespace_multiline_and_outer_bracket():
    text = "  ( (S\n\t(NP (DT the)   (NN dog))\n\n  (VP (VBZ barks))) )\n((S (NP (PRP it))))\r\n"
    first, second = trees.parse_trees(text)
    assert first.label == "" and str(first) == "( (S (NP (DT the) (NN dog)) (VP (VBZ barks))))"
    assert trees.words(first) == ["the", "dog", "barks"]
    assert str(second) == "( (S (NP (PRP it))))"
    assert trees.parse_tree(JOHN) == trees.Tree(
        "S",
        (
            trees.Tree("NP", (trees.preterminal("NNP", "John"),)),
            trees.Tree("VP", (trees.preterminal("VBZ", "sleeps"),)),
            trees.preterminal(".", "."),
        ),
    )


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "(S (NP (DT a)))\n(S (NP (DT a))))",
            r"f\.mrg, tree 2, line 2: '\)' after this tree closes nothing",
        ),
        ("(S (A (B x)))\n\n(S\n (NP (DT a)\n", r"f\.mrg, tree 2, line 3: .*2 open bracket"),
        ("(S (A (B x))) stray", r"f\.mrg, tree 2, line 1: word 'stray' outside any bracket"),
        ("(S\n (NP (DT a) b))", r"f\.mrg, tree 1, line 2: constituent 'NP' mixes words"),
        ("(S (NP (DT a)) (VP ))", r"f\.mrg, tree 1, line 1: constituent 'VP' has no children"),
    ],
)
def test_parse_errors_name_tree_and_line(text, message):
    with pytest.raises(ValueError, match=message):
        trees.parse_trees(text, source="f.mrg")


def test_printing_reproduces_the_treebank_lines(wsj_lines, wsj_trees):
    assert len(wsj_trees) == len(wsj_lines) == 3669
    for line, tree in zip(wsj_lines, wsj_trees):
        assert trees.to_string(tree).replace("( (", "((", 1) == line


def test_preprocess_readme_example_and_labels():
    raw = (
        "( (S (NP-SBJ-1 (PRP He)) (VP (VBD reported) (SBAR (-NONE- 0) (S (-NONE- *T*-1)))) "
        "(PRT|ADVP (RP up)) (NP=2 (-LRB- -LRB-) (NN x)) (ADVP-PRD-LOC=3 (RB here)) (. .)) )"
    )
    tree = trees.preprocess(trees.parse_tree(raw))
    assert str(tree) == (
        "(S (NP (PRP He)) (VP (VBD reported)) (PRT (RP up)) (NP (-LRB- -LRB-) (NN x)) "
        "(ADVP (RB here)) (. .))"
    )
    assert trees.strip_function_tags("NP-SBJ=1-3") == "NP"
    assert trees.strip_function_tags("-NONE-") == "-NONE-"
    assert trees.strip_function_tags("ADVP|PRT") == "ADVP"
    # The outer root goes only when it wraps one phrase; TOP is treated the same way.
    assert str(trees.preprocess(trees.parse_tree("(TOP (S (NN a)))"))) == "(S (NN a))"
    assert str(trees.preprocess(trees.parse_tree("( (NN Yes) )"))) == "( (NN Yes))"
    with pytest.raises(ValueError, match="only empty elements"):
        trees.preprocess(trees.parse_tree("(S (NP (-NONE- *)))"))


def test_preprocessed_wsj_matches_evalb_view_of_raw_trees(wsj_lines, wsj_trees):
    """Preprocessing keeps exactly the words and brackets that EVALB scores on raw gold."""
    processed = [trees.preprocess(tree) for tree in wsj_trees]
    text = "\n".join(str(tree) for tree in processed)
    assert "-NONE-" not in text and not re.search(r"\((?!-)[^\s()]*[-=|][^\s()]* \(", text)
    preterminal = re.compile(r"\((?!-NONE-)[^\s()]+ [^\s()]+\)")
    raw_words = sum(len(preterminal.findall(line)) for line in wsj_lines)
    assert sum(len(trees.words(tree)) for tree in processed) == raw_words
    # Preprocessing also removes the label-less outer bracket, which EVALB counts: one gold
    # bracket per raw line that the processed trees cannot match.
    counted = evalb.evalb_score(wsj_lines, processed, evalb.COLLINS)
    result = evalb.evalb_score(wsj_lines, processed, evalb.COLLINS, ignore_outer_bracket=True)
    assert counted.all.gold - result.all.gold == len(wsj_lines)
    assert (counted.all.matched, counted.all.test) == (result.all.matched, result.all.test)
    # Outer bracket aside, identical but for the one disjunctive label ADVP|PRT, which EVALB
    # keeps as a label.
    assert (result.all.errors, result.all.gold - result.all.matched) == (0, 1)
    assert wsj_lines[result.sentences[2560].sent_id - 1].count("ADVP|PRT") == 1
    assert result.sentences[2560].matched == result.sentences[2560].gold - 1


def test_linearize_hand_example():
    tree = trees.parse_tree(JOHN)
    assert trees.linearize(tree) == "(S (NP XX )NP (VP XX )VP XX )S".split()
    assert trees.linearize(tree, keep_pos=True) == "(S (NP NNP )NP (VP VBZ )VP . )S".split()
    assert trees.linearize(tree, leaves="word") == "(S (NP John )NP (VP sleeps )VP . )S".split()
    with pytest.raises(ValueError, match="leaves must be one of"):
        trees.linearize(tree, leaves="pos")
    # In order: each opening token right after its constituent's first child.
    assert trees.linearize(tree, leaves="word", order="in_order") == (
        "John (NP )NP (S sleeps (VP )VP . )S".split()
    )
    deeper = trees.parse_tree("(S (NP (DT The) (NN dog)) (VP (VBZ eats) (NP (NNS bones))))")
    assert trees.linearize(deeper, order="in_order") == (
        "XX (NP XX )NP (S XX (VP XX (NP )NP )VP )S".split()
    )
    with pytest.raises(ValueError, match="order must be one of"):
        trees.linearize(tree, order="bottom_up")
    assert trees.tagged_words(tree) == [("John", "NNP"), ("sleeps", "VBZ"), (".", ".")]


def test_round_trip_on_all_wsj_trees(wsj_trees):
    for tree in map(trees.preprocess, wsj_trees):
        words, tags = trees.words(tree), trees.tags(tree)
        assert trees.delinearize(trees.linearize(tree, keep_pos=True), words) == tree
        placeholder = trees.linearize(tree)
        assert trees.delinearize(placeholder, words, tags=tags) == tree
        assert trees.linearize(trees.delinearize(placeholder, words)) == placeholder
        lexicalized = trees.linearize(tree, leaves="word")
        assert [t for t in lexicalized if t not in trees.bracket_symbols(lexicalized)] == words
        assert trees.delinearize(lexicalized, words, tags=tags) == tree
        in_order = trees.linearize(tree, leaves="word", order="in_order")
        assert sorted(in_order) == sorted(lexicalized)  # the same tokens, in another order
        assert trees.delinearize(in_order, words, tags=tags, order="in_order") == tree
        in_order = trees.linearize(tree, keep_pos=True, order="in_order")
        assert trees.delinearize(in_order, words, order="in_order") == tree


@pytest.mark.parametrize(
    "tokens, expected",
    [
        # Closing brackets with nothing open are ignored; what follows the closed root goes,
        # with it, under a new root. Missing closing brackets are added.
        ("(S (NP XX )NP )S )S )NP (VP XX )VP", "(S (S (NP (XX a))) (VP (XX b)))"),
        ("(S (NP XX (VP XX", "(S (NP (XX a) (VP (XX b))))"),
        # A mismatched closing label closes the innermost constituent.
        ("(S (NP XX )VP (VP XX )NP )S", "(S (NP (XX a)) (VP (XX b)))"),
        # Too many preterminals: the extra ones (and what they alone fill) are dropped.
        ("(S (NP XX XX )NP (VP XX )VP )S", "(S (NP (XX a) (XX b)))"),
        # Too few: the words left over join the root.
        ("(S (NP XX )NP )S", "(S (NP (XX a)) (XX b))"),
        # No tokens, or pieces without a common root: a new root holds them.
        ("", "(S (XX a) (XX b))"),
        ("(NP XX )NP (VP XX )VP", "(S (NP (XX a)) (VP (XX b)))"),
        # Unwritable labels and tags are replaced.
        ("( (( NN x(y", "(X (X (NN a) (XX b)))"),
    ],
)
def test_delinearize_repairs(tokens, expected):
    assert str(trees.delinearize(tokens.split(), ["a", "b"])) == expected


@pytest.mark.parametrize(
    "tokens, expected",
    [
        # An opening token takes the last finished piece at its level as its first child.
        ("XX (NP )NP (S XX (VP )VP )S", "(S (NP (XX a)) (VP (XX b)))"),
        ("XX (NP XX )NP", "(NP (XX a) (XX b))"),
        # Nothing finished before it: the constituent starts empty.
        ("(S XX XX )S", "(S (XX a) (XX b))"),
        # Missing closing brackets are added; pieces without a common root get one.
        ("XX (NP XX", "(NP (XX a) (XX b))"),
        ("XX XX", "(S (XX a) (XX b))"),
        ("XX (NP )NP XX (VP )VP", "(S (NP (XX a)) (VP (XX b)))"),
    ],
)
def test_in_order_delinearize_repairs(tokens, expected):
    assert str(trees.delinearize(tokens.split(), ["a", "b"], order="in_order")) == expected


def test_delinearize_any_garbage_gives_a_tree_over_the_words():
    rng = random.Random(1234)
    vocab = ["(S", "(NP", "(VP", "(PP", ")S", ")NP", ")VP", ")", "(", "XX", "NN", ".", "<unk>"]
    for _ in range(2000):
        words = [f"w{i}" for i in range(rng.randint(1, 12))]
        tokens = [rng.choice(vocab) for _ in range(rng.randint(0, 40))]
        tree = trees.delinearize(tokens, words)
        assert trees.words(tree) == words
        assert trees.parse_tree(str(tree)) == tree  # valid bracket format, nothing empty
        tree = trees.delinearize(tokens, words, tags=["T"] * len(words))
        assert trees.tags(tree) == ["T"] * len(words)
        tree = trees.delinearize(tokens, words, order="in_order")
        assert trees.words(tree) == words
        assert trees.parse_tree(str(tree)) == tree
    with pytest.raises(ValueError, match="at least one word"):
        trees.delinearize(["(S", ")S"], [])
    with pytest.raises(ValueError, match="got 1 tags for 2 words"):
        trees.delinearize([], ["a", "b"], tags=["NN"])
    with pytest.raises(ValueError, match="order must be one of"):
        trees.delinearize([], ["a"], order="bottom_up")


def test_right_branching_baseline():
    assert str(trees.right_branching(["a", "b", "c", "d"])) == (
        "(S (XX a) (S (XX b) (S (XX c) (XX d))))"
    )
    assert str(trees.right_branching(["a"], tags=["NN"])) == "(S (NN a))"
    tree = trees.right_branching(["a", "b", "c"], tags=["DT", "NN", "."], label="X")
    assert str(tree) == "(X (DT a) (X (NN b) (. c)))"
