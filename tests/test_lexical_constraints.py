"""Lexically constrained beam search against hand-worked cases, the plain search and its guarantee.

Ids: 0 = pad, 1 = EOS, then words. "Models" are tables of probabilities, so every expected
hypothesis and score below is worked out by hand or by enumeration, not by the search.
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.decoding import beam_search
from t2t_lite.decoding.lexical import lexically_constrained_beam_search as constrained_search
from t2t_lite.decoding.phrase_tracker import PhraseTracker

PAD, EOS, X, C = 0, 1, 2, 3


def positional_fn(probabilities):
    """fn(ids, i, states): the next token's probabilities depend only on the step i."""
    table = np.asarray(probabilities, np.float64)
    log_table = np.where(table > 0, np.log(np.maximum(table, 1e-30)), -1e10).astype(np.float32)
    log_table = tf.constant(log_table)

    def fn(ids, i, states):
        return tf.tile(log_table[i][tf.newaxis], [tf.shape(ids)[0], 1]), states

    return fn


def history_fn(vocab_size, seed=0, buckets=13):
    """fn(ids [N, i + 1]): probabilities picked by a hash of the whole history."""
    rng = np.random.default_rng(seed)
    table = rng.dirichlet(np.full(vocab_size, 0.6), size=buckets)
    table[:, PAD] = 0.0
    table /= table.sum(axis=1, keepdims=True)
    log_table = tf.constant(np.log(np.maximum(table, 1e-30)), tf.float32)

    def fn(ids):
        weights = tf.range(1, tf.shape(ids)[1] + 1)[tf.newaxis, :]
        return tf.gather(log_table, tf.reduce_sum(ids * weights, axis=1) % buckets)

    return fn


def phrases_tensor(rows):
    """[[phrase ids, ...] per row] -> (phrases [B, P, W], lengths [B, P])."""
    num = max([len(row) for row in rows] + [0])
    width = max([len(p) for row in rows for p in row] + [0])
    phrases = np.zeros([len(rows), num, width], np.int32)
    lengths = np.zeros([len(rows), num], np.int32)
    for b, row in enumerate(rows):
        for p, phrase in enumerate(row):
            phrases[b, p, : len(phrase)] = phrase
            lengths[b, p] = len(phrase)
    return phrases, lengths


def contains(sequence, phrase):
    return any(
        list(sequence[s : s + len(phrase)]) == list(phrase)
        for s in range(len(sequence) - len(phrase) + 1)
    )


def generated(row):
    """The tokens of a hypothesis [L] (column 0 the start id) up to its EOS."""
    tokens = list(np.asarray(row)[1:])
    return tokens[: tokens.index(EOS)] if EOS in tokens else [t for t in tokens if t]


# Step 0: EOS .5, x .4, c .1; step 1: EOS .6, x .1, c .3; step 2: EOS .9, x .05, c .05.
STEPS = [[0, 0.5, 0.4, 0.1], [0, 0.6, 0.1, 0.3], [0, 0.9, 0.05, 0.05]]


def test_a_constraint_goes_where_the_model_likes_it_not_first():
    # Must contain c, at most 3 tokens with EOS, beam 2, alpha 0.6:
    #   c EOS .1*.6 = .06; x c EOS .4*.3*.9 = .108; c c EOS .027; c x EOS .009.
    # Step 0: bank 1 {c .1}, bank 0 {x .4} (EOS refused: c not met) -> alive {c, x}.
    # Step 1: bank 1 {x.c .12, c.EOS .06, c.c .03, c.x .01}; x.x refused (no room left for
    #   c and EOS) -> finished {c EOS}; alive {x c, c c}.
    # Step 2: x c EOS .108 and c c EOS .027 finish; best two: x c EOS, then c EOS.
    phrases, lengths = phrases_tensor([[[C]]])
    ids, scores, met = constrained_search(
        positional_fn(STEPS), [PAD], 2, 3, 4, 0.6, phrases, lengths, states={}, padded_ids=True
    )
    np.testing.assert_array_equal(ids[0], [[PAD, X, C, EOS], [PAD, C, EOS, PAD]])
    np.testing.assert_allclose(
        scores[0],
        [np.log(0.4 * 0.3 * 0.9) / (8 / 6) ** 0.6, np.log(0.1 * 0.6) / (7 / 6) ** 0.6],
        rtol=1e-6,
    )
    np.testing.assert_array_equal(met, [[True, True]])
    # Unconstrained, the same model stops at once.
    plain, _ = beam_search(positional_fn(STEPS), [PAD], 2, 3, 4, 0.6, states={}, padded_ids=True)
    np.testing.assert_array_equal(plain[0, 0], [PAD, EOS, PAD, PAD])


def test_a_two_token_phrase_and_a_word_are_both_placed():
    # V: pad, EOS, x, c, d. Phrase "c d" and word "x"; 4 tokens at most (3 + EOS), beam 4.
    # Only orders with both: x c d EOS, c d x EOS. Step probabilities (pad, EOS, x, c, d):
    steps = [[0, 0.1, 0.3, 0.5, 0.1], [0, 0.1, 0.1, 0.2, 0.6], [0, 0.2, 0.5, 0.1, 0.2],
             [0, 0.7, 0.1, 0.1, 0.1]]  # fmt: skip
    # x c d EOS: .3 * .2 * .2 * .7 = .0084;  c d x EOS: .5 * .6 * .5 * .7 = .105.
    phrases, lengths = phrases_tensor([[[C, 4], [X]]])
    ids, scores, met = constrained_search(
        positional_fn(steps), [PAD], 4, 4, 5, 0.0, phrases, lengths, states={}, padded_ids=True
    )
    np.testing.assert_array_equal(ids[0, 0], [PAD, C, 4, X, EOS])
    np.testing.assert_allclose(scores[0, 0], np.log(0.5 * 0.6 * 0.5 * 0.7), rtol=1e-6)
    np.testing.assert_array_equal(ids[0, 1], [PAD, X, C, 4, EOS])
    np.testing.assert_allclose(scores[0, 1], np.log(0.3 * 0.2 * 0.2 * 0.7), rtol=1e-6)
    assert met[0, :2].numpy().all() and not met[0, 2:].numpy().any()  # two possible outputs


@pytest.mark.parametrize("beam_size", [1, 2, 4])
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_without_phrases_it_is_beam_search_exactly(beam_size, alpha):
    fn = history_fn(7, seed=beam_size)
    start = tf.zeros([3], tf.int32)
    limits = tf.constant([4, 9, 6])
    expected_ids, expected_scores = beam_search(
        fn, start, beam_size, 9, 7, alpha, max_lengths=limits
    )
    phrases, lengths = phrases_tensor([[], [], []])
    ids, scores, met = constrained_search(
        fn, start, beam_size, 9, 7, alpha, phrases, lengths, max_lengths=limits
    )
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_array_equal(scores, expected_scores)
    np.testing.assert_array_equal(met, expected_scores.numpy() > -1e9)


@pytest.mark.parametrize("seed", range(6))
def test_every_output_contains_its_phrases(seed):
    rng = np.random.default_rng(seed)
    vocab, batch, beam_size = 9, 4, 3
    rows = [
        [list(rng.integers(2, vocab, size=rng.integers(1, 3))) for _ in range(rng.integers(0, 3))]
        for _ in range(batch)
    ]
    phrases, lengths = phrases_tensor(rows)
    ids, _, met = constrained_search(
        history_fn(vocab, seed=seed), tf.zeros([batch], tf.int32), beam_size, 12, vocab, 0.6,
        phrases, lengths, stop_early=False,
    )  # fmt: skip
    for b, row in enumerate(rows):
        for k in range(beam_size):
            if met[b, k]:
                output = generated(ids[b, k])
                assert all(contains(output, phrase) for phrase in row), (row, output)
        assert met[b, 0], f"row {b}: {row} fits in 12 tokens, so the best output must meet it"


def test_best_output_is_the_best_constrained_sequence_found_by_enumeration():
    # A beam as wide as the number of sequences finds the exact constrained optimum.
    vocab, limit = 5, 4
    fn = history_fn(vocab, seed=3)
    phrases, lengths = phrases_tensor([[[3, 4]]])
    ids, scores, _ = constrained_search(
        fn, [PAD], 64, limit, vocab, 0.0, phrases, lengths, stop_early=False
    )
    best = -np.inf
    for n in range(1, limit):
        for body in itertools.product(range(2, vocab), repeat=n):
            if contains(body, [3, 4]):
                seq = tf.constant([[PAD, *body, EOS]])
                log_p = sum(
                    float(tf.nn.log_softmax(fn(seq[:, : t + 1]))[0, seq[0, t + 1]])
                    for t in range(n + 1)
                )
                best = max(best, log_p)
    np.testing.assert_allclose(scores[0, 0], best, rtol=1e-5)
    assert contains(generated(ids[0, 0]), [3, 4])


def test_phrases_that_cannot_fit_are_reported_and_the_row_searched_without_them():
    fn = history_fn(6, seed=1)
    start = tf.zeros([2], tf.int32)
    limits = tf.constant([3, 8])
    # Row 0: 3 phrase tokens + EOS > 3; row 1 fits.
    phrases, lengths = phrases_tensor([[[2, 3], [4]], [[5, 4]]])
    ids, scores, met = constrained_search(
        fn, start, 2, 8, 6, 0.6, phrases, lengths, max_lengths=limits
    )
    plain_ids, plain_scores = beam_search(fn, start, 2, 8, 6, 0.6, max_lengths=limits)
    np.testing.assert_array_equal(ids[0], plain_ids[0])
    np.testing.assert_array_equal(scores[0], plain_scores[0])
    assert not met[0].numpy().any()
    assert met[1, 0] and contains(generated(ids[1, 0]), [5, 4])


def test_tracker_counts_needed_tokens_and_resets_on_a_wrong_token():
    phrases, lengths = phrases_tensor([[[2, 3, 4], [5]]])
    tracker = PhraseTracker(phrases, lengths, [10], vocab_size=6)
    state = tracker.initial_state()
    needed = []
    for token in [2, 3, 2, 3, 4, 5]:
        needed.append(int(tracker.needed(state)[0]))
        state = tracker.update(state, tf.constant([token]))
    needed.append(int(tracker.needed(state)[0]))
    # 4 needed; "2" -> 3; "3" -> 2; "2" restarts -> 3; "3" -> 2; "4" meets "2 3 4" -> 1; "5" -> 0.
    assert needed == [4, 3, 2, 3, 2, 1, 0]
    np.testing.assert_array_equal(
        tracker.needed_after(tracker.initial_state())[0], [4, 4, 3, 4, 4, 3]
    )


def test_runs_inside_a_tf_function_with_dynamic_shapes():
    fn = history_fn(6, seed=2)
    search = tf.function(
        lambda start, phrases, lengths: constrained_search(
            fn, start, 2, 7, 6, 0.6, phrases, lengths
        )
    )
    phrases, lengths = phrases_tensor([[[4, 5]], [[3]]])
    ids, _, met = search(tf.zeros([2], tf.int32), phrases, lengths)
    assert met.numpy()[:, 0].all()
    assert contains(generated(ids[0, 0]), [4, 5]) and contains(generated(ids[1, 0]), [3])


def test_the_padding_id_is_never_chosen():
    # (pad, EOS, x, c) by step; must contain c, 3 tokens at most, alpha 0. Without pad:
    #   c EOS .1 * .3 = .03, x c EOS .3 * .1 * .4 = .012; with it "pad c EOS" and "c pad EOS"
    #   (.02 each) come second.
    steps = [[0.5, 0.1, 0.3, 0.1], [0.5, 0.3, 0.1, 0.1], [0.5, 0.4, 0.05, 0.05]]
    phrases, lengths = phrases_tensor([[[C]]])
    args = (positional_fn(steps), [PAD], 4, 3, 4, 0.0, phrases, lengths)
    ids, scores, met = constrained_search(*args, states={}, padded_ids=True, pad_id=PAD)
    assert all(PAD not in generated(row) for row in ids[0].numpy())
    np.testing.assert_array_equal(ids[0, :2], [[PAD, C, EOS, PAD], [PAD, X, C, EOS]])
    np.testing.assert_allclose(scores[0, :2], np.log([0.1 * 0.3, 0.3 * 0.1 * 0.4]), rtol=1e-6)
    unmasked, _, _ = constrained_search(*args, states={}, padded_ids=True)
    assert PAD in generated(unmasked[0, 1].numpy())
