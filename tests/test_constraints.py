"""The bracket constraints of beam search: their masks step by step, and searches under them.

Vocabulary of these tests: 0 pad, 1 EOS, 2 `(S`, 3 `)S`, 4 `(NP`, 5 `)NP`, 6 `a`, 7 `b`,
8 `c` (a piece that continues a word). Every expected mask and score below is worked out by
hand from the rules in the docstrings of `BracketConstraint` and `InOrderBracketConstraint`.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.decoding import beam_search
from t2t_lite.decoding.constraints import (
    BracketConstraint,
    InOrderBracketConstraint,
    hypothesis_rows,
)
from t2t_lite.problems import trees

V = 9
OPEN = [-1, -1, 0, -1, 1, -1, -1, -1, -1]  # (S -> label 0, (NP -> label 1
CLOSE = [-1, -1, -1, 0, -1, 1, -1, -1, -1]


def constraint(rows, limits, boundaries=None, kind=BracketConstraint):
    """A BracketConstraint (or `kind`) over leaf rows of different lengths (padded with 0)."""
    width = max(len(row) for row in rows) or 1
    leaves = [row + [0] * (width - len(row)) for row in rows]
    boundaries = boundaries or [[True] * len(row) for row in rows]
    boundary = [b + [False] * (width - len(b)) for b in boundaries]
    return kind(
        tf.constant(leaves, tf.int32),
        tf.constant([len(row) for row in rows]),
        tf.constant(boundary),
        tf.constant(limits),
        OPEN,
        CLOSE,
    )


def masks_along(c, tokens):
    """The allowed token ids before each token of `tokens` (batch of one), then at the end."""
    state, found = c.initial_state(), []
    for i, token in enumerate(tokens + [None]):
        found.append(sorted(np.nonzero(c.allowed(state, tf.constant(i)).numpy()[0])[0].tolist()))
        if token is not None:
            state = c.update(state, tf.constant([token]))
    return found


def test_masks_of_a_two_word_tree():
    # (S a b )S EOS with room to spare: opens anywhere a leaf is still to come, leaves in
    # order, the root closes only once both leaves are placed, then EOS alone.
    assert masks_along(constraint([[6, 7]], [10]), [2, 6, 7, 3]) == [
        [2, 4],  # the root: any opening bracket
        [2, 4, 6],  # no close right after an open; the first leaf
        [2, 4, 7],  # the root cannot close with b still to place
        [3],  # no open once every leaf is placed; )S matches (S, )NP does not
        [1],  # the tree is complete: EOS only
    ]


def test_a_close_must_match_the_innermost_label():
    # (S (NP a -> )NP closes NP; )S would not match; b may follow inside NP.
    masks = masks_along(constraint([[6, 7]], [20]), [2, 4, 6, 5, 7, 3, 1])
    assert masks[3] == [2, 4, 5, 7]
    assert masks[4] == [2, 4, 7]  # back in S: b, or open; S cannot close yet
    assert masks[5] == [3]


def test_opens_stop_when_the_tree_could_no_longer_close_in_the_limit():
    # One leaf, limit 5 tokens: (S a )S EOS is 4. At step 0: 1 used + open's close + leaf +
    # EOS = 4 <= 5, so open. After (S: 2 used + (S's close, the new close, the leaf, EOS)
    # = 6 > 5: no second open, only the leaf.
    masks = masks_along(constraint([[6]], [5]), [2, 6, 3, 1])
    assert masks[:2] == [[2, 4], [6]]
    # With limit 6 one nested constituent fits: (S (S a )S )S EOS is 6 tokens.
    assert masks_along(constraint([[6]], [6]), [2, 2, 6, 3, 3, 1])[:3] == [[2, 4], [2, 4, 6], [6]]


def test_no_bracket_inside_a_word_of_several_pieces():
    # Leaves a c b where c continues a's word: after a only c (no bracket, no close).
    c = constraint([[6, 8, 7]], [20], boundaries=[[True, False, True]])
    masks = masks_along(c, [2, 6, 8, 7, 3, 1])
    assert masks[2] == [8]
    assert masks[3] == [2, 4, 7]


def test_a_row_without_leaves_may_only_end():
    assert masks_along(constraint([[]], [5]), [1])[0] == [1]


def test_each_hypothesis_reads_the_constants_of_its_own_row():
    # Rows a b (limit 10) and b (limit 4), two hypotheses each, both opened with (S / (NP.
    # Hypotheses 0, 1 are row 0's: 2 used + 2 leaves + 1 close + EOS + a new close = 7 <= 10,
    # so they may open, or place a. Hypotheses 2, 3 are row 1's: 2 + 1 + 1 + 1 + 1 = 6 > 4,
    # so only b. Reading by n % B instead would give hypothesis 1 row 1's mask.
    np.testing.assert_array_equal(hypothesis_rows(6, 2).numpy(), [0, 0, 0, 1, 1, 1])
    assert hypothesis_rows(0, 0).numpy().tolist() == []
    c = constraint([[6, 7], [7]], [10, 4])
    state = {k: tf.repeat(v, 2, axis=0) for k, v in c.initial_state().items()}
    state = c.update(state, tf.constant([2, 4, 2, 4]))
    masks = [np.nonzero(row)[0].tolist() for row in c.allowed(state, tf.constant(1)).numpy()]
    assert masks == [[2, 4, 6], [2, 4, 6], [7], [7]]


def fixed_step(log_probs):
    """A step function giving every hypothesis the same log-probabilities, whatever its ids."""
    table = tf.constant(np.log(np.asarray(log_probs, np.float32)))

    def step(ids):
        return tf.tile(table[tf.newaxis], [tf.shape(ids)[0], 1])

    return step


def test_beam_search_returns_the_best_trees_with_hand_computed_scores():
    # One leaf a, limit 5 (room for no nesting): the only trees are (S a )S and (NP a )NP.
    probs = [1e-9, 0.4, 0.1, 0.1, 0.15, 0.05, 0.1, 0.05, 0.05]
    alpha = 0.6
    penalty = ((5 + 4) / 6) ** alpha  # 4 tokens, EOS included
    s_tree = (math.log(0.1) + math.log(0.1) + math.log(0.1) + math.log(0.4)) / penalty
    np_tree = (math.log(0.15) + math.log(0.1) + math.log(0.05) + math.log(0.4)) / penalty
    ids, scores = beam_search(
        fixed_step(probs), tf.constant([0]), 2, 4, V, alpha, constraint=constraint([[6]], [5])
    )
    assert ids.numpy()[0].tolist() == [[0, 2, 6, 3, 1], [0, 4, 6, 5, 1]]
    np.testing.assert_allclose(scores.numpy()[0], [s_tree, np_tree], rtol=1e-6)
    # Unconstrained, EOS at once wins: log 0.4 over one token.
    ids, scores = beam_search(fixed_step(probs), tf.constant([0]), 2, 4, V, alpha)
    assert ids.numpy()[0, 0].tolist() == [0, 1, 0, 0, 0]
    np.testing.assert_allclose(scores.numpy()[0, 0], math.log(0.4) / (6 / 6) ** alpha, rtol=1e-6)


def well_formed(tokens, leaves):
    """True when `tokens` (EOS-ended) is one tree whose leaves are `leaves`, labels matching."""
    stack, placed, ended = [], [], False
    for position, token in enumerate(tokens):
        if token == 1:
            ended = position == len(tokens) - 1
            break
        if OPEN[token] >= 0:
            if not stack and position:
                return False  # a second root
            stack.append((OPEN[token], position))
        elif CLOSE[token] >= 0:
            if not stack or stack[-1][0] != CLOSE[token] or stack[-1][1] == position - 1:
                return False
            stack.pop()
        else:
            if not stack:
                return False
            placed.append(token)
    return ended and not stack and placed == leaves


class RandomModel:
    """A stateful step function with log-probabilities drawn per (step, last token)."""

    def __init__(self, seed, steps):
        rng = np.random.default_rng(seed)
        self.table = tf.constant(rng.normal(0, 3, [steps + 1, V, V]).astype(np.float32))

    def __call__(self, ids, i, states):
        return tf.gather(self.table[i], ids[:, i]), states


@pytest.mark.parametrize("seed", range(6))
def test_every_hypothesis_under_the_constraint_is_a_tree_over_the_leaves(seed):
    rng = np.random.default_rng(100 + seed)
    rows = [rng.choice([6, 7], size=n).tolist() for n in (1, 3, 5, 2)]
    limits = [len(row) * 3 + 2 for row in rows]  # tight: little room for unary chains
    ids, scores = random_search(seed, constraint(rows, limits), limits)
    for row, leaves in enumerate(rows):
        # One leaf in 5 tokens has only two trees, (S a )S and (NP a )NP: the other slots
        # stay empty. Longer rows have more trees than the beam holds.
        found = scores.numpy()[row] > -1e8
        assert found.sum() == (2 if len(leaves) == 1 else 4)
        for beam in np.nonzero(found)[0]:
            tokens = ids.numpy()[row, beam, 1:].tolist()
            assert well_formed(tokens[: tokens.index(1) + 1], leaves), (tokens, leaves)
            assert tokens.index(1) + 1 <= limits[row]


def random_search(seed, constraint, limits):
    """Beam 4 over a `RandomModel` under `constraint`, each row to its limit; every beam
    exact (`stop_early=False`), so every slot is filled where trees remain."""
    decode_length = max(limits)
    return beam_search(
        RandomModel(seed, decode_length),
        tf.zeros([len(limits)], tf.int32),
        4,
        decode_length,
        V,
        0.6,
        states={},
        padded_ids=True,
        max_lengths=tf.constant(limits),
        constraint=constraint,
        stop_early=False,
    )


class AllowAll:
    """A constraint that allows every token, with a state that counts steps."""

    def initial_state(self):
        return {"steps": tf.zeros([2], tf.int32)}

    def allowed(self, state, i):
        return tf.ones([tf.shape(state["steps"])[0], V], tf.bool)

    def update(self, state, tokens):
        return {"steps": state["steps"] + 1}


def test_a_constraint_that_allows_everything_changes_nothing():
    model = RandomModel(7, 12)
    common = dict(states={}, padded_ids=True, max_lengths=tf.constant([12, 7]))
    start = tf.zeros([2], tf.int32)
    plain = beam_search(model, start, 3, 12, V, 0.6, **common)
    allowed = beam_search(model, start, 3, 12, V, 0.6, constraint=AllowAll(), **common)
    np.testing.assert_array_equal(plain[0].numpy(), allowed[0].numpy())
    np.testing.assert_array_equal(plain[1].numpy(), allowed[1].numpy())


def test_the_search_compiles_with_xla_under_the_constraint():
    rows, limits = [[6, 7, 6], [7]], [11, 5]
    model = RandomModel(3, 11)

    @tf.function(jit_compile=True)
    def search():
        return beam_search(
            model, tf.zeros([2], tf.int32), 3, 11, V, 0.6, states={}, padded_ids=True,
            max_lengths=tf.constant(limits), constraint=constraint(rows, limits),
        )  # fmt: skip

    ids, _ = search()
    eager, _ = beam_search(
        model, tf.zeros([2], tf.int32), 3, 11, V, 0.6, states={}, padded_ids=True,
        max_lengths=tf.constant(limits), constraint=constraint(rows, limits),
    )  # fmt: skip
    np.testing.assert_array_equal(ids.numpy(), eager.numpy())


def test_bad_vocabulary_tables_are_refused():
    with pytest.raises(ValueError, match="both open and close"):
        BracketConstraint([[6]], [1], [[True]], [5], [0, -1, 0], [0, -1, -1])
    with pytest.raises(ValueError, match="EOS"):
        BracketConstraint([[6]], [1], [[True]], [5], [-1, 0, -1], [-1, -1, 0])


def in_order(rows, limits, boundaries=None):
    return constraint(rows, limits, boundaries, kind=InOrderBracketConstraint)


def test_in_order_masks_of_a_two_word_tree():
    # a (NP )NP (S b )S EOS is (S (NP a) b), with room to spare.
    assert masks_along(in_order([[6, 7]], [12]), [6, 4, 5, 2, 7, 3, 1]) == [
        [6],  # the first leaf comes first
        [2, 4],  # a finished word: only an opening token may take it (no second top piece)
        [5, 7],  # (NP holds a: close it (one child) or place b inside
        [2, 4],  # the finished NP at the top: a constituent must take it
        [3, 7],  # (S holds NP: b inside, or close S
        [2, 3, 4],  # b ends a piece: open over it, or close S
        [1, 2, 4],  # the tree is complete: EOS, or a new root over it
        [],  # nothing after EOS
    ]


def test_in_order_tokens_stop_when_the_tree_could_no_longer_end_in_the_limit():
    # Two leaves, limit 5 tokens: a (S b )S EOS is the shortest tree. After a (S, closing S
    # (3 used) would need an opening, b, its close and EOS (7 > 5): only b. After b (4
    # used), an opening would need its close, )S and EOS (7 > 5): only )S, then only EOS.
    masks = masks_along(in_order([[6, 7]], [5]), [6, 2, 7, 3, 1])
    assert masks == [[6], [2, 4], [7], [3], [1], []]


def test_in_order_no_bracket_inside_a_word_of_several_pieces():
    c = in_order([[6, 8, 7]], [20], boundaries=[[True, False, True]])
    masks = masks_along(c, [6, 8, 2, 7, 3, 1])
    assert masks[:3] == [[6], [8], [2, 4]]  # c continues a; then a whole word is finished


def test_in_order_a_row_without_leaves_may_only_end():
    assert masks_along(in_order([[]], [5]), [1])[0] == [1]


def test_in_order_openings_between_two_leaves_are_capped():
    # max_open_run 2: after a (S )S, one opening since the leaf, so a second may come;
    # after (NP, two: no third, and closing NP would leave a piece at the top that no
    # opening could take any more: only b.
    c = InOrderBracketConstraint(
        tf.constant([[6, 7]]), tf.constant([2]), tf.constant([[True, True]]),
        tf.constant([30]), OPEN, CLOSE, max_open_run=2,
    )  # fmt: skip
    masks = masks_along(c, [6, 2, 3, 4, 7])
    assert masks[3] == [2, 4]
    assert masks[4] == [7]


def in_order_well_formed(tokens, leaves):
    """True when `tokens` (EOS-ended) is one in-order tree over `leaves`, labels matching,
    each opening token right after a finished piece (a leaf ending a word, or a close)."""
    levels, labels, placed = [[]], [], []
    previous = None
    for position, token in enumerate(tokens):
        if token == 1:
            return (
                position == len(tokens) - 1
                and not labels
                and len(levels[0]) == 1
                and levels[0][0] == "tree"
                and placed == leaves
            )
        if OPEN[token] >= 0:
            if previous is None or OPEN[previous] >= 0 or not levels[-1]:
                return False
            first = levels[-1].pop()
            levels.append([first])
            labels.append(OPEN[token])
        elif CLOSE[token] >= 0:
            if not labels or labels[-1] != CLOSE[token]:
                return False
            labels.pop()
            levels.pop()
            levels[-1].append("tree")
        else:
            if not labels and levels[0]:
                return False  # a second piece at the top
            levels[-1].append("leaf")
            placed.append(token)
        previous = token
    return False


@pytest.mark.parametrize("seed", range(6))
def test_every_hypothesis_under_the_in_order_constraint_is_a_tree_over_the_leaves(seed):
    rng = np.random.default_rng(200 + seed)
    rows = [rng.choice([6, 7], size=n).tolist() for n in (1, 3, 5, 2)]
    limits = [len(row) * 3 + 3 for row in rows]  # tight: little room for unary chains
    ids, scores = random_search(seed, in_order(rows, limits), limits)
    for row, leaves in enumerate(rows):
        found = scores.numpy()[row] > -1e8
        assert found.sum() == 4  # even one leaf has more than 4 trees in 6 tokens
        for beam in np.nonzero(found)[0]:
            tokens = ids.numpy()[row, beam, 1:].tolist()
            tokens = tokens[: tokens.index(1) + 1]
            assert in_order_well_formed(tokens, leaves), (tokens, leaves)
            assert len(tokens) <= limits[row]


def test_every_sample_tree_is_admitted_in_order_and_its_length_bounded(shared_data):
    # The first 300 trees of the WSJ sample, in order, as rows of one batch: each row's
    # token is allowed at every step, and no completion is longer than the bound said.
    sample = []
    for path in sorted((shared_data / "wsj_sample").glob("wsj_*.mrg"))[:20]:
        sample += [trees.preprocess(tree) for tree in trees.read_trees(path)]
    sample = sample[:300]
    labels = sorted({t[1:] for tree in sample for t in trees.bracket_symbols(
        trees.linearize(tree))})  # fmt: skip
    words = sorted({word for tree in sample for word in trees.words(tree)})
    open_ids = {label: 2 + 2 * n for n, label in enumerate(labels)}
    word_ids = {word: 2 + 2 * len(labels) + n for n, word in enumerate(words)}
    vocab = 2 + 2 * len(labels) + len(words)
    open_labels, close_labels = [-1] * vocab, [-1] * vocab
    for n, label in enumerate(labels):
        open_labels[open_ids[label]], close_labels[open_ids[label] + 1] = n, n

    def token_id(token):
        if token[0] in "()":
            return open_ids[token[1:]] + (token[0] == ")")
        return word_ids[token]

    sequences = [
        [token_id(t) for t in trees.linearize(tree, leaves="word", order="in_order")] + [1]
        for tree in sample
    ]
    leaves = [[word_ids[w] for w in trees.words(tree)] for tree in sample]
    width, steps = max(map(len, leaves)), max(map(len, sequences))
    limits = [len(row) + 300 for row in leaves]
    c = InOrderBracketConstraint(
        tf.constant([row + [0] * (width - len(row)) for row in leaves]),
        tf.constant([len(row) for row in leaves]),
        tf.ones([len(leaves), width], tf.bool),
        tf.constant(limits),
        open_labels,
        close_labels,
        max_open_run=8,
    )
    padded = np.array([seq + [1] * (steps - len(seq)) for seq in sequences])
    state = c.initial_state()
    lengths = np.array([len(seq) for seq in sequences])
    for i in range(steps):
        live = i < lengths
        allowed = c.allowed(state, tf.constant(i)).numpy()
        assert allowed[np.arange(len(sample)), padded[:, i]][live].all(), i
        bound = c.max_final_lengths(state, tf.constant(i)).numpy()
        assert (bound[live] >= lengths[live]).all(), i
        state = c.update(state, tf.constant(padded[:, i]))
