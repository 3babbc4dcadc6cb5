"""Greedy decoding and sampling against hand-derived paths and known distributions.

Ids: 0 = pad, 1 = EOS, 2 = "a", 3 = "b", 4 = "c". Models are Markov tables: the next-token
distribution depends only on the last token.
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.decoding import beam_search, greedy_search, sample

PAD, EOS, A, B, C = 0, 1, 2, 3, 4

# Row = last token, column = next token (pad, EOS, a, b).
MARKOV = np.full([4, 4], 0.25)
MARKOV[PAD] = [0.02, 0.08, 0.80, 0.10]
MARKOV[A] = [0.04, 0.50, 0.06, 0.40]
MARKOV[B] = [0.02, 0.90, 0.03, 0.05]

# EOS is never the most probable token: the argmax path is pad -> a -> b -> a -> b ...
NO_EOS = np.array(
    [
        [0.1, 0.1, 0.6, 0.2],
        [0.25, 0.25, 0.25, 0.25],
        [0.1, 0.2, 0.3, 0.4],
        [0.1, 0.1, 0.7, 0.1],
    ]
)


def stateless_fn(probabilities):
    """fn(ids [B, i + 1]) -> logits [B, V]."""
    log_table = tf.constant(np.log(probabilities), tf.float32)
    return lambda ids: tf.gather(log_table, ids[:, -1])


def stateful_fn(probabilities):
    """fn(ids, i, states) -> (logits, states); works with padded and growing ids."""
    log_table = tf.constant(np.log(probabilities), tf.float32)
    return lambda ids, i, states: (tf.gather(log_table, ids[:, i]), states)


def random_table(seed, vocab=5, eos_logit=None):
    logits = np.random.default_rng(seed).normal(scale=2.0, size=[vocab, vocab])
    if eos_logit is not None:
        logits[:, EOS] = eos_logit
    probabilities = np.exp(logits)
    return probabilities / probabilities.sum(axis=1, keepdims=True)


def argmax_path(probabilities, initial_id, decode_length):
    """Greedy decoding in plain Python: (tokens after the initial id, summed log-prob)."""
    tokens, total, last = [], 0.0, initial_id
    for _ in range(decode_length):
        following = int(np.argmax(probabilities[last]))
        total += np.log(probabilities[last, following])
        tokens.append(following)
        last = following
        if following == EOS:
            break
    return tokens, total


def padded(initial_id, tokens, decode_length):
    return [initial_id, *tokens] + [PAD] * (decode_length - len(tokens))


def test_greedy_follows_the_argmax_path_and_pads_after_eos():
    # Row 0: pad -> a (.8) -> EOS (.5). Row 1 starts at b: EOS (.9) at once, then padding
    # while row 0 is still decoding.
    ids, scores = greedy_search(stateless_fn(MARKOV), [PAD, B], 3)
    np.testing.assert_array_equal(ids, [[PAD, A, EOS, PAD], [B, EOS, PAD, PAD]])
    np.testing.assert_allclose(scores, [np.log(0.8 * 0.5), np.log(0.9)], rtol=1e-6)


def test_greedy_stops_at_decode_length_without_eos():
    # pad -> a (.6) -> b (.4) -> a (.7) -> b (.4).
    ids, scores = greedy_search(stateless_fn(NO_EOS), [PAD], 4)
    np.testing.assert_array_equal(ids, [[PAD, A, B, A, B]])
    np.testing.assert_allclose(scores, [np.log(0.6 * 0.4 * 0.7 * 0.4)], rtol=1e-6)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_greedy_matches_a_plain_python_argmax(seed):
    table = random_table(seed)
    initial = [PAD, A, B, C]
    ids, scores = greedy_search(stateless_fn(table), initial, 6)
    for row, start in enumerate(initial):
        tokens, total = argmax_path(table, start, 6)
        np.testing.assert_array_equal(ids[row], padded(start, tokens, 6))
        np.testing.assert_allclose(scores[row], total, rtol=1e-5)


def test_greedy_equals_beam_search_with_one_beam():
    # Hand case: beam 1 finishes a.EOS (.4) and stops since a.b (.32) cannot beat it.
    greedy_ids, greedy_scores = greedy_search(stateless_fn(MARKOV), [PAD], 3)
    beam_ids, beam_scores = beam_search(stateless_fn(MARKOV), [PAD], 1, 3, 4, alpha=0.0)
    np.testing.assert_array_equal(beam_ids[:, 0], greedy_ids)
    np.testing.assert_allclose(beam_scores[:, 0], greedy_scores, rtol=1e-6)
    # Random models where EOS is never among the two best tokens, so one beam can never keep
    # a finished hypothesis that outscores the greedy path (see test_beam_search for that).
    for seed in range(4):
        table = random_table(seed, eos_logit=-30.0)
        greedy_ids, greedy_scores = greedy_search(stateless_fn(table), [PAD, A, C], 5)
        beam_ids, beam_scores = beam_search(stateless_fn(table), [PAD, A, C], 1, 5, 5, 0.0)
        np.testing.assert_array_equal(beam_ids[:, 0], greedy_ids)
        np.testing.assert_allclose(beam_scores[:, 0], greedy_scores, rtol=1e-5)


def test_greedy_state_follows_its_row():
    # The state counts how often each row was shown "a"; the model reads the count instead of
    # the ids: after the first "a", only EOS can follow.
    def fn(ids, i, states):
        seen_a = states["seen_a"] + tf.cast(tf.equal(ids[:, i], A), tf.int32)  # [B]
        logits = tf.where(seen_a[:, None] > 0, [[-9.0, 9.0, -9.0, -9.0]], [[-9.0, -9.0, 9.0, 0.0]])
        return logits, {"seen_a": seen_a}

    states = {"seen_a": tf.zeros([3], tf.int32)}
    ids, _ = greedy_search(fn, [PAD, A, B], 4, states=states)
    expected = [[PAD, A, EOS, PAD, PAD], [A, EOS, PAD, PAD, PAD], [B, A, EOS, PAD, PAD]]
    np.testing.assert_array_equal(ids, expected)


@pytest.mark.parametrize("jit", [False, True])
def test_greedy_in_tf_function(jit):
    table = random_table(7)
    run = tf.function(
        lambda: greedy_search(stateful_fn(table), [PAD, A], 6, states={}, padded_ids=jit),
        jit_compile=jit,
    )
    ids, scores = run()
    expected_ids, expected_scores = greedy_search(stateless_fn(table), [PAD, A], 6)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-5)


def test_sampling_with_top_k_one_or_zero_temperature_is_greedy():
    table = random_table(11)
    initial = [PAD, A, B, C] * 4
    expected_ids, expected_scores = greedy_search(stateless_fn(table), initial, 6)
    for kwargs in [dict(top_k=1), dict(temperature=0.0), dict(temperature=1e-3)]:
        for seed in [0, 1]:
            ids, scores = sample(stateless_fn(table), initial, 6, seed=seed, **kwargs)
            np.testing.assert_array_equal(ids, expected_ids, err_msg=str(kwargs))
            np.testing.assert_allclose(scores, expected_scores, rtol=1e-5)
    # temperature 1e-3 is greedy only because the best token leads by more than 1e-3 * 50
    # nats everywhere: the runner-up's odds are then below exp(-50).
    log_table = np.sort(np.log(table), axis=1)
    assert np.min(log_table[:, -1] - log_table[:, -2]) > 0.05


def test_sampling_is_reproducible_with_a_seed():
    table = random_table(5)
    initial = [PAD] * 64
    first = sample(stateless_fn(table), initial, 5, seed=42)
    again = sample(stateless_fn(table), initial, 5, seed=42)
    in_graph = tf.function(lambda: sample(stateless_fn(table), initial, 5, seed=42))()
    other = sample(stateless_fn(table), initial, 5, seed=43)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(in_graph[0], first[0])
    assert not np.array_equal(other[0], first[0])


def test_sample_scores_are_the_model_log_probs_of_the_drawn_tokens():
    table = random_table(3)
    initial = [PAD, A, B, C] * 8
    ids, scores = sample(stateless_fn(table), initial, 5, seed=9, temperature=1.7)
    for row, score in zip(ids.numpy(), scores.numpy()):
        tokens = list(row[1:])
        end = tokens.index(EOS) + 1 if EOS in tokens else len(tokens)
        assert all(token == PAD for token in tokens[end:])
        path = [row[0], *tokens[:end]]
        expected = sum(np.log(table[prev, nxt]) for prev, nxt in zip(path, path[1:]))
        np.testing.assert_allclose(score, expected, rtol=1e-5)


# One step from a known distribution; counts must lie within 5 standard deviations (seeded, so
# the outcome is fixed; 5 sigma keeps it far from the edge).
DISTRIBUTION = np.array([0.1, 0.2, 0.3, 0.4])
DRAWS = 20000


def assert_counts_match(tokens, probabilities):
    counts = np.bincount(np.asarray(tokens).ravel(), minlength=len(probabilities))
    expected = DRAWS * probabilities
    sigma = np.sqrt(DRAWS * probabilities * (1 - probabilities))
    assert np.all(np.abs(counts - expected) <= 5 * sigma + 1e-9), (counts, expected)


@pytest.mark.parametrize(
    "temperature, top_k, probabilities",
    [
        (1.0, 0, DISTRIBUTION),
        (0.5, 0, DISTRIBUTION**2 / np.sum(DISTRIBUTION**2)),  # p ** (1 / T), renormalised
        (1.0, 2, np.array([0.0, 0.0, 3 / 7, 4 / 7])),  # the two best, renormalised
    ],
)
def test_sampled_frequencies_follow_the_distribution(temperature, top_k, probabilities):
    table = np.tile(DISTRIBUTION, [4, 1])
    ids, _ = sample(
        stateless_fn(table), [PAD] * DRAWS, 1, temperature=temperature, top_k=top_k, seed=2017
    )
    assert_counts_match(ids[:, 1], probabilities)


@pytest.mark.parametrize("jit", [False, True])
def test_steps_draw_independently(jit):
    # Without EOS, every step draws from the same distribution; pairs (t1, t2) must follow the
    # product distribution, which fails if the steps reuse their random numbers.
    distribution = np.array([0.1, 0.0, 0.3, 0.6])
    table = np.tile(distribution, [4, 1])
    with np.errstate(divide="ignore"):
        fn = stateful_fn(table)
    run = tf.function(
        lambda: sample(fn, [PAD] * DRAWS, 2, states={}, seed=5, padded_ids=jit), jit_compile=jit
    )
    ids = run()[0].numpy()
    assert_counts_match(ids[:, 1] * 4 + ids[:, 2], np.outer(distribution, distribution).ravel())
    np.testing.assert_array_equal(run()[0], ids)  # same seed, same draws under XLA too


def test_bad_sampling_arguments_are_explained():
    with pytest.raises(ValueError, match="temperature"):
        sample(stateless_fn(MARKOV), [PAD], 3, temperature=-1.0)
    with pytest.raises(ValueError, match="top_k"):
        sample(stateless_fn(MARKOV), [PAD], 3, top_k=-2)
    run = tf.function(lambda: greedy_search(stateless_fn(MARKOV), [PAD], 3), jit_compile=True)
    with pytest.raises(ValueError, match="padded_ids=True"):
        run()


def test_unpadded_ids_under_xla_are_refused_before_they_read_padding():
    # The check reads a private TensorFlow function; a release that moves it must fail here,
    # not let XLA's padded prefix be read as the current token.
    table = random_table(7)
    run = tf.function(lambda: greedy_search(stateless_fn(table), [PAD, A], 6), jit_compile=True)
    with pytest.raises(ValueError, match="running under XLA"):
        run()
    tf.function(lambda: greedy_search(stateless_fn(table), [PAD, A], 6))()  # no XLA: allowed


# PAD is the most probable next token everywhere; without it: start -> a .3, a -> b .2,
# b -> EOS .35 (columns pad, EOS, a, b).
PAD_FIRST = np.array(
    [
        [0.50, 0.10, 0.30, 0.10],
        [0.25, 0.25, 0.25, 0.25],
        [0.60, 0.15, 0.05, 0.20],
        [0.40, 0.35, 0.10, 0.15],
    ]
)


def test_greedy_and_sampling_never_choose_the_padding_id_and_keep_the_models_log_probs():
    fn = stateful_fn(PAD_FIRST)
    start = tf.zeros([1], tf.int32)
    ids, scores = greedy_search(fn, start, 3, states={}, padded_ids=True, pad_id=PAD)
    np.testing.assert_array_equal(ids[0], [PAD, A, B, EOS])
    # Not renormalised over the other tokens: the score is the model's own log P.
    np.testing.assert_allclose(scores[0], np.log(0.30 * 0.20 * 0.35), rtol=1e-6)
    unmasked, _ = greedy_search(fn, start, 3, states={}, padded_ids=True)
    assert unmasked[0, 1] == PAD  # without pad_id the table's argmax wins

    rows = tf.zeros([400], tf.int32)
    drawn, drawn_scores = sample(fn, rows, 3, states={}, padded_ids=True, seed=5, pad_id=PAD)
    for row, score in zip(drawn.numpy(), drawn_scores.numpy()):
        tokens = list(row[1:])
        end = tokens.index(EOS) + 1 if EOS in tokens else len(tokens)
        assert PAD not in tokens[:end] and set(tokens[end:]) <= {PAD}
        path = [PAD, *tokens[:end]]
        expected = sum(np.log(PAD_FIRST[a, b]) for a, b in zip(path, path[1:]))
        assert score == pytest.approx(expected, rel=1e-5)
    free, _ = sample(fn, rows, 3, states={}, padded_ids=True, seed=5)
    assert (free.numpy()[:, 1] == PAD).any()  # the table does draw it when allowed


def test_beam_search_never_chooses_the_padding_id_and_ranks_like_enumeration_without_it():
    # Every finished sequence over {a, b} of at most 3 tokens with its EOS, scored by the
    # table's own log P and the length penalty, best first.
    alpha, decode_length = 0.6, 3
    candidates = []
    for length in range(decode_length):
        for body in itertools.product([A, B], repeat=length):
            path = [PAD, *body, EOS]
            log_p = sum(np.log(PAD_FIRST[a, b]) for a, b in zip(path, path[1:]))
            candidates.append((log_p / ((5.0 + length + 1) / 6.0) ** alpha, path[1:]))
    candidates.sort(key=lambda pair: -pair[0])
    # Beam 6 keeps every alive prefix ({a, b}^2 = 4) and 2 * 6 candidates of the 4 x 3 allowed.
    ids, scores = beam_search(
        stateful_fn(PAD_FIRST), tf.zeros([1], tf.int32), 6, decode_length, 4, alpha,
        states={}, stop_early=False, padded_ids=True, pad_id=PAD,
    )  # fmt: skip
    found = [list(row[1 : list(row).index(EOS) + 1]) for row in ids.numpy()[0]]
    assert found == [tokens for _, tokens in candidates[:6]]
    np.testing.assert_allclose(scores[0], [score for score, _ in candidates[:6]], rtol=1e-5)
