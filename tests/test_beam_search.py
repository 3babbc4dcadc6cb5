"""Beam search against hand-derived scores, exhaustive enumeration and its own invariants.

Most tests use a Markov "model": the next-token distribution depends only on the last token.
Ids: 0 = pad, 1 = EOS, 2 = "a", 3 = "b".
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.decoding import NEG_INF, beam_search

PAD, EOS, A, B = 0, 1, 2, 3

# Row = last token, column = next token (pad, EOS, a, b).
MARKOV = np.full([4, 4], 0.25)
MARKOV[PAD] = [0.02, 0.08, 0.80, 0.10]
MARKOV[A] = [0.04, 0.50, 0.06, 0.40]
MARKOV[B] = [0.02, 0.90, 0.03, 0.05]
# The same model with "a" and "b" swapped: it must decode to the swapped ids, same scores.
SWAP = np.array([PAD, EOS, B, A])
MARKOV_SWAPPED = MARKOV[np.ix_(SWAP, SWAP)]


def stateless_markov_fn(probabilities, calls=None):
    """tensor2tensor's contract: fn(ids [N, i + 1]) -> logits [N, V]."""
    log_table = tf.constant(np.log(probabilities), tf.float32)

    def fn(ids):
        if calls is not None:
            calls.append(ids.shape[1])
        return tf.gather(log_table, ids[:, -1])

    return fn


def per_row_markov_fn(tables):
    """Stateful contract; states["row"] [N] says which batch row's table [V, V] to use."""
    log_tables = tf.constant(np.log(np.stack(tables)), tf.float32)  # [B, V, V]

    def fn(ids, i, states):
        current = ids[:, i]  # [N]; the last token with or without padded ids
        logits = tf.gather_nd(log_tables, tf.stack([states["row"], current], axis=1))
        return logits, states

    return fn


def test_alpha_favours_the_longer_less_probable_hypothesis():
    # beam 2, decode_length 3, alpha 3.5; lp(n) = ((5 + n) / 6) ** 3.5.
    # Step 1 (from [0]): a .8, b .1, EOS .08, pad .02 -> alive {a .8, b .1}; finished {[EOS] .08}.
    # Step 2: a.EOS .4, a.b .32, b.EOS .09, a.a .048 -> alive {ab .32, aa .048};
    #   finished {a.EOS: log .4 / lp(2) = -0.534, b.EOS: log .09 / lp(2) = -1.404}.
    #   Bound for alive: log .32 / lp(3) = -0.416 > -0.534, so the search goes on.
    # Step 3: ab.EOS .288, aa.EOS .024, aa.b .0192, ab.b .016 -> finished candidates
    #   ab.EOS: log .288 / lp(3) = -0.455, aa.EOS: log .024 / lp(3) = -1.363.
    #   Best two finished: ab.EOS (-0.455) then a.EOS (-0.534).
    ids, scores = beam_search(stateless_markov_fn(MARKOV), [PAD], 2, 3, 4, alpha=3.5)
    np.testing.assert_array_equal(ids, [[[PAD, A, B, EOS], [PAD, A, EOS, PAD]]])
    expected = [np.log(0.8 * 0.4 * 0.9) / (8 / 6) ** 3.5, np.log(0.8 * 0.5) / (7 / 6) ** 3.5]
    np.testing.assert_allclose(scores, [expected], rtol=1e-6)


def test_alpha_zero_prefers_the_shorter_hypothesis_and_stops_early():
    # Same steps 1-2 as above with lp = 1: finished {a.EOS .4, b.EOS .09}; the best alive,
    # ab .32, can only lose probability, and .32 < .4: the search stops after step 2. Had it
    # gone on, ab.EOS (.288) would have replaced b.EOS (.09) in the second slot.
    calls = []
    ids, scores = beam_search(stateless_markov_fn(MARKOV, calls), [PAD], 2, 3, 4, alpha=0.0)
    np.testing.assert_array_equal(ids, [[[PAD, A, EOS, PAD], [PAD, B, EOS, PAD]]])
    np.testing.assert_allclose(scores, [[np.log(0.8 * 0.5), np.log(0.1 * 0.9)]], rtol=1e-6)
    assert calls == [1, 2]  # ids of length 1 then 2: two steps, not three


def test_stop_early_false_makes_every_beam_exact():
    # Without early stopping, the search goes on while the worst finished (b.EOS .09) can be
    # beaten by ab (.32). Step 3 brings ab.EOS .288; finished {a.EOS .4, ab.EOS .288}; the best
    # alive, aa.b .0192, cannot reach .288, so the search ends.
    calls = []
    fn = stateless_markov_fn(MARKOV, calls)
    ids, scores = beam_search(fn, [PAD], 2, 3, 4, alpha=0.0, stop_early=False)
    np.testing.assert_array_equal(ids, [[[PAD, A, EOS, PAD], [PAD, A, B, EOS]]])
    np.testing.assert_allclose(scores, [[np.log(0.8 * 0.5), np.log(0.8 * 0.4 * 0.9)]], rtol=1e-6)
    assert calls == [1, 2, 3]


def test_initial_id_is_column_zero_and_empty_slots_are_padding():
    # Start from "a": EOS .5, b .4, a .06, pad .04 -> finished {a.EOS .5}, alive {b .4, a .06}.
    # .5 beats every alive bound, so the search stops with one finished hypothesis; the
    # second slot stays empty.
    ids, scores = beam_search(stateless_markov_fn(MARKOV), [A], 2, 2, 4, alpha=0.0)
    np.testing.assert_array_equal(ids, [[[A, EOS, PAD], [PAD, PAD, PAD]]])
    np.testing.assert_allclose(scores, [[np.log(0.5), NEG_INF]], rtol=1e-6)


def test_rows_without_eos_return_alive_hypotheses_scored_with_the_penalty():
    # EOS has probability 0 (logit -inf); after two tokens the best are a.b (.6 * .7 = .42)
    # and b.a (.3 * .5 = .15), normalised by lp(2) = (7/6) ** alpha.
    table = np.full([4, 4], 0.25)
    table[PAD] = [0.1, 0.0, 0.6, 0.3]
    table[A] = [0.1, 0.0, 0.2, 0.7]
    table[B] = [0.1, 0.0, 0.5, 0.4]
    with np.errstate(divide="ignore"):
        ids, scores = beam_search(stateless_markov_fn(table), [PAD], 2, 2, 4, alpha=1.0)
    np.testing.assert_array_equal(ids, [[[PAD, A, B], [PAD, B, A]]])
    np.testing.assert_allclose(
        scores, [[np.log(0.42) / (7 / 6), np.log(0.15) / (7 / 6)]], rtol=1e-6
    )


def test_alive_slots_without_a_possible_hypothesis_are_padding():
    # Only a (.6) and b (.4) have non-zero probability, so the third of three beams has no
    # real hypothesis after one step; it must not show an extension of a padding beam.
    table = np.full([4, 4], 0.25)
    table[PAD] = [0.0, 0.0, 0.6, 0.4]
    with np.errstate(divide="ignore"):
        ids, scores = beam_search(stateless_markov_fn(table), [PAD], 3, 1, 4, alpha=1.0)
    np.testing.assert_array_equal(ids, [[[PAD, A], [PAD, B], [PAD, PAD]]])
    np.testing.assert_allclose(scores, [[np.log(0.6), np.log(0.4), NEG_INF]], rtol=1e-6)


def test_batch_rows_decode_independently_with_their_own_tables():
    fn = per_row_markov_fn([MARKOV, MARKOV_SWAPPED])
    states = {"row": tf.constant([0, 1])}
    ids, scores = beam_search(fn, [PAD, PAD], 2, 3, 4, alpha=3.5, states=states)
    # Row 0 is the first test's answer; row 1 the same with a and b swapped.
    expected_row0 = np.array([[PAD, A, B, EOS], [PAD, A, EOS, PAD]])
    np.testing.assert_array_equal(ids, [expected_row0, SWAP[expected_row0]])
    expected = [np.log(0.8 * 0.4 * 0.9) / (8 / 6) ** 3.5, np.log(0.8 * 0.5) / (7 / 6) ** 3.5]
    np.testing.assert_allclose(scores, [expected, expected], rtol=1e-6)


def test_states_are_tiled_by_row_and_follow_their_beams():
    # A "cache" that records every token the model was shown must, after the search reorders
    # beams, still agree with the ids of the hypothesis it now belongs to.
    beam, length = 3, 5
    seen = []
    log_table = tf.constant(np.log(MARKOV), tf.float32)

    def fn(ids, i, states):
        history = states["history"]  # [N, L]
        seen.append((ids.numpy(), history.numpy(), int(i), states["row"].numpy()))
        history = tf.where(tf.range(length) == i, ids[:, i : i + 1], history)
        return tf.gather(log_table, ids[:, i]), {"row": states["row"], "history": history}

    states = {"row": tf.constant([0, 1]), "history": tf.zeros([2, length], tf.int32)}
    beam_search(fn, [PAD, A], beam, length - 1, 4, 0.0, states=states, stop_early=False)
    assert len(seen) >= 2
    for ids, history, i, row in seen:
        np.testing.assert_array_equal(row, [0, 0, 0, 1, 1, 1])  # row b * beam + k is batch b
        np.testing.assert_array_equal(history[:, :i], ids[:, :i])


def test_beam_of_one_keeps_a_finished_hypothesis_better_than_the_greedy_path():
    # From [0]: a .6, EOS .35 -> alive {a}, finished {[EOS] .35}. Then a.b .24 < .35: stop.
    # Greedy decoding would go on to a.b.EOS (.6 * .4 * .8 = .192).
    table = np.full([4, 4], 0.25)
    table[PAD] = [0.05, 0.35, 0.6, 0.0]
    table[A] = [0.1, 0.3, 0.2, 0.4]
    table[B] = [0.1, 0.8, 0.05, 0.05]
    with np.errstate(divide="ignore"):
        ids, scores = beam_search(stateless_markov_fn(table), [PAD], 1, 3, 4, alpha=0.0)
    np.testing.assert_array_equal(ids, [[[PAD, EOS, PAD, PAD]]])
    np.testing.assert_allclose(scores, [[np.log(0.35)]], rtol=1e-6)


# Exhaustive comparison: V = 5, logits conditioned on the last two tokens.
V, DECODE_LENGTH, WIDE_BEAM = 5, 4, 160  # 2 * 160 >= 64 alive prefixes * 5 tokens
LOGITS2 = np.random.default_rng(20170612).normal(scale=2.0, size=[V, V, V]).astype(np.float32)


def enumerate_finished(alpha):
    """Every EOS-ended sequence of <= DECODE_LENGTH tokens -> its normalised score."""
    z = LOGITS2.astype(np.float64)
    log_probs = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    scores = {}
    for length in range(1, DECODE_LENGTH + 1):
        for body in itertools.product([t for t in range(V) if t != EOS], repeat=length - 1):
            seq = (*body, EOS)
            context, total = (PAD, PAD), 0.0  # initial id 0, and 0 before it
            for token in seq:
                total += log_probs[context[0], context[1], token]
                context = (context[1], token)
            scores[seq] = total / ((5 + length) / 6) ** alpha
    return scores


def two_token_fn(ids, i, states):
    """Reads the last token from ids and the one before it from the gathered state only."""
    history = states["history"]  # [N, L]
    history = tf.where(tf.range(DECODE_LENGTH + 1) == i, ids[:, i : i + 1], history)
    previous = tf.where(i > 0, tf.gather(history, tf.maximum(i - 1, 0), axis=1), PAD)
    logits = tf.gather_nd(tf.constant(LOGITS2), tf.stack([previous, ids[:, i]], axis=1))
    return logits, {"history": history}


def wide_search(alpha, stop_early, jit=False):
    def run():
        states = {"history": tf.zeros([1, DECODE_LENGTH + 1], tf.int32)}
        return beam_search(
            two_token_fn, tf.constant([PAD]), WIDE_BEAM, DECODE_LENGTH, V, alpha,
            states=states, stop_early=stop_early, padded_ids=True,
        )  # fmt: skip

    ids, scores = tf.function(run, jit_compile=jit)() if jit else run()
    return ids.numpy()[0], scores.numpy()[0]


def as_sequence(row):
    """Generated tokens up to and including EOS."""
    tokens = list(row[1:])
    return tuple(tokens[: tokens.index(EOS) + 1])


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_wide_beam_finds_every_finished_sequence_in_score_order(alpha):
    expected = enumerate_finished(alpha)  # 1 + 4 + 16 + 64 = 85 sequences
    ids, scores = wide_search(alpha, stop_early=False)
    found = {as_sequence(row): score for row, score in zip(ids[: len(expected)], scores)}
    assert found.keys() == expected.keys()
    for seq, score in found.items():
        np.testing.assert_allclose(score, expected[seq], rtol=1e-5, err_msg=str(seq))
    assert np.all(np.diff(scores[: len(expected)]) <= 0)
    np.testing.assert_array_equal(ids[len(expected) :], 0)
    np.testing.assert_array_equal(scores[len(expected) :], NEG_INF)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_early_stopping_keeps_the_best_sequence(alpha, jit):
    expected = enumerate_finished(alpha)
    best = max(expected, key=expected.get)
    ids, scores = wide_search(alpha, stop_early=True, jit=jit)
    assert as_sequence(ids[0]) == best
    np.testing.assert_allclose(scores[0], expected[best], rtol=1e-5)


def test_runs_in_tf_function_with_static_shapes():
    fn = stateless_markov_fn(MARKOV)
    run = tf.function(lambda initial: beam_search(fn, initial, 2, 3, 4, alpha=3.5))
    concrete = run.get_concrete_function(tf.TensorSpec([None], tf.int32))
    ids_spec, scores_spec = concrete.structured_outputs
    assert ids_spec.shape.as_list() == [None, 2, 4]
    assert scores_spec.shape.as_list() == [None, 2]
    ids, scores = run(tf.constant([PAD]))
    np.testing.assert_array_equal(ids, [[[PAD, A, B, EOS], [PAD, A, EOS, PAD]]])
    # A maximum length computed in the graph (e.g. input length + 50) works too.
    dynamic = tf.function(lambda length: beam_search(fn, [PAD], 2, length, 4, alpha=3.5))
    ids, _ = dynamic(tf.constant(3))
    np.testing.assert_array_equal(ids, [[[PAD, A, B, EOS], [PAD, A, EOS, PAD]]])


def test_runs_under_xla_with_padded_ids():
    fn = per_row_markov_fn([MARKOV, MARKOV_SWAPPED])
    states = {"row": tf.constant([0, 1])}

    @tf.function(jit_compile=True)
    def run():
        return beam_search(fn, [PAD, PAD], 2, 3, 4, 3.5, states=states, padded_ids=True)

    ids, scores = run()
    expected_ids, expected_scores = beam_search(fn, [PAD, PAD], 2, 3, 4, 3.5, states=states)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-6)


def test_growing_ids_under_xla_are_refused():
    # XLA would pad the growing prefix to its bound, and ids[:, -1] would read padding.
    fn = stateless_markov_fn(MARKOV)
    run = tf.function(lambda: beam_search(fn, [PAD], 2, 3, 4, 0.0), jit_compile=True)
    with pytest.raises(ValueError, match="padded_ids=True"):
        run()


def test_bad_arguments_and_step_functions_are_explained():
    fn = stateless_markov_fn(MARKOV)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(fn, [PAD], 0, 3, 4, 0.0)
    with pytest.raises(ValueError, match="alpha"):
        beam_search(fn, [PAD], 2, 3, 4, -0.5)
    with pytest.raises(ValueError, match="vocab_size=5"):
        beam_search(fn, [PAD], 2, 3, 5, 0.0)
    with pytest.raises(ValueError, match="padded_ids=True needs"):
        beam_search(fn, [PAD], 2, 3, 4, 0.0, padded_ids=True)

    def growing_cache(ids, i, states):
        grown = tf.concat([states["k"], tf.cast(ids[:, -1:], tf.float32)], axis=1)
        return tf.gather(tf.math.log(MARKOV.astype(np.float32)), ids[:, -1]), {"k": grown}

    with pytest.raises(ValueError, match="keep their shapes"):
        beam_search(growing_cache, [PAD], 2, 3, 4, 0.0, states={"k": tf.zeros([1, 1])})


def random_tables(rng, rows, vocab_size):
    """Per batch row a random Markov table [V, V] whose EOS probability stays moderate."""
    tables = rng.dirichlet(np.ones(vocab_size), size=(rows, vocab_size))
    return list(tables)


@pytest.mark.parametrize("stop_early", [True, False])
def test_each_row_searches_as_alone_with_its_own_max_length(stop_early):
    """max_lengths: a batch gives every row exactly what a search of that row alone gives."""
    rng = np.random.default_rng(5)
    tables = random_tables(rng, 4, 6)
    max_lengths = [2, 7, 4, 5]
    ids, scores = beam_search(
        per_row_markov_fn(tables), tf.zeros([4], tf.int32), 3, 7, 6, 0.8,
        states={"row": tf.range(4)}, stop_early=stop_early, padded_ids=True,
        max_lengths=tf.constant(max_lengths),
    )  # fmt: skip
    assert ids.shape == (4, 3, 8)
    for row, length in enumerate(max_lengths):
        alone_ids, alone_scores = beam_search(
            per_row_markov_fn([tables[row]]), tf.zeros([1], tf.int32), 3, length, 6, 0.8,
            states={"row": tf.zeros([1], tf.int32)}, stop_early=stop_early, padded_ids=True,
        )  # fmt: skip
        np.testing.assert_array_equal(ids[row, :, : length + 1], alone_ids[0])
        assert not ids[row, :, length + 1 :].numpy().any()
        np.testing.assert_allclose(scores[row], alone_scores[0], rtol=1e-6)
    # The short row really was cut: no hypothesis of row 0 is longer than 2 tokens.
    assert not ids[0, :, 3:].numpy().any()


def test_rows_stopped_at_their_max_length_score_alive_hypotheses_at_that_length():
    """A row where EOS is impossible returns alive hypotheses normalised at its own length."""
    never_ends = np.full([4, 4], 0.5)
    never_ends[:, [PAD, EOS]] = 0.0  # only "a" and "b", each 1/2
    with np.errstate(divide="ignore"):
        fn = per_row_markov_fn([never_ends, never_ends])
    ids, scores = beam_search(
        fn, tf.zeros([2], tf.int32), 2, 5, 4, 1.0,
        states={"row": tf.range(2)}, padded_ids=True, max_lengths=tf.constant([2, 5]),
    )  # fmt: skip
    # Every alive hypothesis has log P = n log(1/2) after n tokens; lp = (5 + n) / 6.
    np.testing.assert_allclose(scores[0], [2 * np.log(0.5) / (7 / 6)] * 2, rtol=1e-6)
    np.testing.assert_allclose(scores[1], [5 * np.log(0.5) / (10 / 6)] * 2, rtol=1e-6)
    assert ids[0, :, 1:3].numpy().all() and not ids[0, :, 3:].numpy().any()
    assert ids[1, :, 1:].numpy().all()
