"""Search over the real Transformer: cached == uncached, beam == brute force, greedy vs beam 1.

The uncached reference reruns the full `model.decode` on the whole prefix at every step, so it
shares nothing with the cache (`init_cache` / `decode_step`) that the Translator uses.
"""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import readme_main_job_run

from t2t_lite import hparams
from t2t_lite.decoding import NEG_INF, beam_search
from t2t_lite.ids import PAD_ID
from t2t_lite.models import build_transformer
from t2t_lite.runs import load_trained_model
from t2t_lite.search import SearchConfig, Translator, row_limits

EOS = 1
SMALL = "hidden_size=32,filter_size=64,num_heads=2"


def trained_reverse_run(tmp_path_factory):
    """The README main job's algorithmic_reverse run, trained once per test session.

    transformer_algorithmic reaches >= 99% dev token accuracy on inputs of up to 40
    symbols there, so the tests' short inputs come back reversed.
    """
    run, result = readme_main_job_run(tmp_path_factory)
    if result["returncode"] != 0 or tf.train.latest_checkpoint(str(run)) is None:
        pytest.fail(f"the README main job did not train {run}: {result['stderr'][-3000:]}")
    return run


@pytest.fixture(scope="module")
def trained_model(tmp_path_factory):
    return load_trained_model("algorithmic_reverse", "", str(trained_reverse_run(tmp_path_factory)))


def random_model(vocab_size, seed, overrides=SMALL):
    keras.utils.set_random_seed(seed)
    hp = hparams.override(hparams.get("transformer_tiny"), overrides)
    return build_transformer(hp, vocab_size)


def random_inputs(rng, vocab_size, lengths):
    """EOS-terminated, 0-padded int32 [B, max(lengths) + 1] of random symbols."""
    batch = np.zeros([len(lengths), max(lengths) + 1], np.int32)
    for row, length in enumerate(lengths):
        batch[row, :length] = rng.integers(2, vocab_size, size=length)
        batch[row, length] = EOS
    return batch


def full_decode_log_probs(model, inputs, decoder_inputs):
    """log P of every next token, from the uncached decoder: [B, T, V] numpy."""
    encoder_output, encoder_mask = model.encode(tf.constant(inputs))
    logits = model.decode(tf.constant(decoder_inputs, tf.int32), encoder_output, encoder_mask)
    return tf.nn.log_softmax(logits).numpy()


def uncached_beam_search(model, inputs, beam_size, alpha, extra_length):
    """tensor2tensor's slow path: every step reruns `model.decode` on the prefix [N, i + 1]."""

    def step(ids, i, states):
        del i
        logits = model.decode(ids, states["encoder_output"], states["encoder_mask"])
        return logits[:, -1, :], states  # [N, V]

    @tf.function
    def search(inputs):
        encoder_output, encoder_mask = model.encode(inputs)
        return beam_search(
            step,
            tf.zeros([tf.shape(inputs)[0]], tf.int32),
            beam_size,
            tf.shape(inputs)[1] + extra_length,
            model.vocab_size,
            alpha,
            states={"encoder_output": encoder_output, "encoder_mask": encoder_mask},
            max_lengths=row_limits(inputs, extra_length),
            pad_id=PAD_ID,
        )

    ids, scores = search(tf.constant(inputs))
    return ids.numpy(), scores.numpy()


def assert_same_search(cached, uncached):
    (cached_ids, cached_scores), (ids, scores) = cached, uncached
    np.testing.assert_array_equal(cached_ids, ids)
    np.testing.assert_allclose(cached_scores, scores, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("beam_size, alpha", [(3, 0.6), (1, 0.0), (4, 2.0)])
def test_cached_beam_search_equals_uncached_on_a_random_model(beam_size, alpha):
    model = random_model(vocab_size=13, seed=beam_size)
    inputs = random_inputs(np.random.default_rng(beam_size), 13, [5, 2, 7])
    config = SearchConfig(beam_size=beam_size, alpha=alpha, extra_length=4)
    ids, scores = Translator(model, config).search(tf.constant(inputs))
    assert ids.shape == (3, beam_size, 8 + 4 + 1)
    assert_same_search(
        (ids.numpy(), scores.numpy()), uncached_beam_search(model, inputs, beam_size, alpha, 4)
    )


@pytest.mark.slow
def test_cached_beam_search_equals_uncached_on_a_trained_model(trained_model):
    model = trained_model.model
    inputs = random_inputs(np.random.default_rng(7), 12, [1, 4, 9, 6, 3])
    translator = Translator(model, SearchConfig(beam_size=4, extra_length=5))
    ids, scores = (t.numpy() for t in translator.search(inputs))
    # The trained model ends its best hypotheses with EOS: finished hypotheses are compared
    # (with early stopping, slots that no finished hypothesis filled stay at NEG_INF).
    assert (scores[:, 0] > NEG_INF / 2).all()
    assert [(row[1:] == EOS).any() for row in ids[:, 0]] == [True] * 5
    assert_same_search((ids, scores), uncached_beam_search(model, inputs, 4, 0.6, 5))
    # And it learned the task: most short inputs come back reversed (all 32 in one run).
    lengths = np.random.default_rng(8).integers(1, 7, size=32)
    short = random_inputs(np.random.default_rng(9), 12, lengths)
    best = translator.search(short)[0][:, 0]
    reversed_rows = [
        list(best[row, 1 : length + 2]) == [*short[row, :length][::-1], EOS]
        for row, length in enumerate(lengths)
    ]
    assert sum(reversed_rows) >= 0.75 * len(reversed_rows), reversed_rows


def finished_sequences(vocab_size, decode_length):
    """Every sequence of 1..decode_length tokens that ends with EOS and has no EOS before."""
    others = [token for token in range(vocab_size) if token != EOS]
    for length in range(1, decode_length + 1):
        for prefix in itertools.product(others, repeat=length - 1):
            yield (*prefix, EOS)


def brute_force(model, inputs, vocab_size, decode_length, alpha):
    """Per row: every finished sequence with its score log P / ((5 + n) / 6)^alpha, best first."""
    sequences = list(finished_sequences(vocab_size, decode_length))
    decoder_inputs = np.zeros([len(sequences), decode_length], np.int32)  # [M, L], shifted right
    for index, sequence in enumerate(sequences):
        decoder_inputs[index, 1 : len(sequence)] = sequence[:-1]
    count = len(sequences)
    repeated = np.repeat(inputs, count, axis=0)  # [B * M, S]: row b's M copies together
    log_probs = full_decode_log_probs(model, repeated, np.tile(decoder_inputs, [len(inputs), 1]))
    ranked = []
    for row in range(inputs.shape[0]):
        scored = []
        for index, sequence in enumerate(sequences):
            steps = log_probs[row * count + index]  # [L, V]
            log_p = sum(steps[t, token] for t, token in enumerate(sequence))
            scored.append((log_p / ((5.0 + len(sequence)) / 6.0) ** alpha, sequence))
        ranked.append(sorted(scored, reverse=True))
    return ranked


def cached_exhaustive_beam_search(model, inputs, beam_size, decode_length, alpha):
    """Beam search through the model's cached step, without early stopping."""
    encoder_output, encoder_mask = model.encode(tf.constant(inputs))
    cache = model.init_cache(encoder_output, encoder_mask, decode_length)

    def step(ids, i, states):
        return model.decode_step(ids[:, i], i, states)

    ids, scores = beam_search(
        step, tf.zeros([inputs.shape[0]], tf.int32), beam_size, decode_length,
        model.vocab_size, alpha, states=cache, stop_early=False, padded_ids=True,
    )  # fmt: skip
    return ids.numpy(), scores.numpy()


@pytest.mark.parametrize("vocab_size, alpha", [(4, 0.0), (4, 0.6), (5, 2.0)])
def test_beam_search_over_the_real_model_equals_brute_force(vocab_size, alpha):
    """A beam wide enough to keep every candidate is exact: it must rank like enumeration."""
    decode_length = 3
    # Step t has (V - 1)^t alive prefixes and V times as many candidates; top-k takes 2 * beam.
    beam_size = (vocab_size - 1) ** (decode_length - 1) * vocab_size // 2
    model = random_model(vocab_size, seed=vocab_size, overrides=SMALL + ",num_encoder_layers=1")
    inputs = np.array([[2, EOS], [3, EOS], [vocab_size - 1, EOS]], np.int32)
    expected = brute_force(model, inputs, vocab_size, decode_length, alpha)
    # Sequences ending in EOS: (V - 1)^(n - 1) of each length n.
    finished = sum((vocab_size - 1) ** (n - 1) for n in range(1, decode_length + 1))
    assert all(len(rows) == finished for rows in expected)

    ids, scores = cached_exhaustive_beam_search(model, inputs, beam_size, decode_length, alpha)
    for row in range(inputs.shape[0]):
        got = [
            (float(score), tuple(ids[row, k, 1 : 1 + list(ids[row, k, 1:]).index(EOS) + 1]))
            for k, score in enumerate(scores[row])
            if score > NEG_INF / 2
        ]
        assert [sequence for _, sequence in got] == [seq for _, seq in expected[row]]
        np.testing.assert_allclose(
            [s for s, _ in got], [s for s, _ in expected[row]], rtol=1e-5, atol=1e-5
        )

    # The Translator (early stopping on) finds the same best hypothesis.
    config = SearchConfig(
        beam_size=beam_size, alpha=alpha, extra_length=decode_length - inputs.shape[1]
    )
    best_ids, best_scores = Translator(model, config).search(tf.constant(inputs))
    for row in range(inputs.shape[0]):
        score, sequence = expected[row][0]
        assert tuple(best_ids.numpy()[row, 0, 1 : 1 + len(sequence)]) == sequence
        assert best_scores.numpy()[row, 0] == pytest.approx(score, rel=1e-5, abs=1e-5)


def greedy_and_expected_beam1(model, inputs, limits):
    """Greedy decoding by full decodes, and what beam 1 (alpha 0) must return.

    Row b generates at most limits[b] tokens (its own length + extra, as decoded alone).

    Beam 1 follows the greedy path, but at every step the two best candidates are kept
    apart: when EOS is the runner-up, prefix + EOS enters the finished set. So beam 1
    returns the most probable of {greedy output} and {greedy prefix + EOS where EOS ranked
    second}, which is the greedy output unless such an early ending is more probable.
    """
    rows = inputs.shape[0]
    prefixes = np.zeros([rows, 1], np.int32)  # [B, t + 1]: 0, then the greedy tokens
    log_p, candidates, done = np.zeros(rows), [[] for _ in range(rows)], [False] * rows
    for step in range(max(limits)):
        log_probs = full_decode_log_probs(model, inputs, prefixes)[:, -1]  # [B, V]
        log_probs[:, PAD_ID] = -np.inf  # padding is never chosen
        top2 = np.argsort(-log_probs, axis=1)[:, :2]
        for row in range(rows):
            done[row] = done[row] or step >= limits[row]
            if done[row]:
                top2[row, 0] = 0  # nothing more for this row
                continue
            sequence = tuple(int(t) for t in prefixes[row, 1:])
            if EOS in top2[row]:
                candidates[row].append((log_p[row] + log_probs[row, EOS], (*sequence, EOS)))
            log_p[row] += log_probs[row, top2[row, 0]]
            done[row] = top2[row, 0] == EOS
        prefixes = np.concatenate([prefixes, top2[:, :1].astype(np.int32)], axis=1)
        if all(done):
            break
    greedy, expected = [], []
    for row in range(rows):
        tokens = [int(t) for t in prefixes[row, 1:]]
        if EOS in tokens:
            tokens = tokens[: tokens.index(EOS) + 1]
        tokens = tokens[: limits[row]]
        greedy.append((log_p[row], tuple(tokens)))
        expected.append(max(candidates[row]) if candidates[row] else greedy[-1])
    return greedy, expected


@pytest.mark.parametrize("which", ["random", pytest.param("trained", marks=pytest.mark.slow)])
def test_greedy_equals_an_independent_greedy_and_beam_1_follows_it(which, request):
    if which == "random":
        model, vocab_size = random_model(vocab_size=6, seed=11), 6
    else:
        model, vocab_size = request.getfixturevalue("trained_model").model, 12
    inputs = random_inputs(np.random.default_rng(3), vocab_size, [3, 6, 1, 5])
    extra = 4
    # Each row's own limit: its length with EOS, + extra (rows of 3, 6, 1, 5 symbols).
    limits = [int((row != 0).sum()) + extra for row in inputs]
    assert limits == [8, 11, 6, 10]
    greedy, expected = greedy_and_expected_beam1(model, inputs, limits)

    ids, scores = Translator(model, SearchConfig("greedy", extra_length=extra)).search(inputs)
    beam_ids, beam_scores = Translator(
        model, SearchConfig("beam", beam_size=1, alpha=0.0, extra_length=extra)
    ).search(inputs)
    for row in range(inputs.shape[0]):
        for (log_p, sequence), got_ids, got_score in (
            (greedy[row], ids.numpy()[row, 0], scores.numpy()[row, 0]),
            (expected[row], beam_ids.numpy()[row, 0], beam_scores.numpy()[row, 0]),
        ):
            assert tuple(got_ids[1 : 1 + len(sequence)]) == sequence
            assert not got_ids[1 + len(sequence) :].any()
            assert got_score == pytest.approx(log_p, rel=1e-5, abs=1e-5)
    if which == "trained":
        # A model that knows the task never prefers an early ending: greedy == beam 1.
        assert greedy == expected


def sample_config(**kwargs):
    return SearchConfig("sample", extra_length=5, **kwargs)


def ranks_and_log_probs(model, inputs, ids):
    """Per drawn token (EOS included) its rank in the uncached model's distribution at its
    step over the tokens a search may draw (0 = the most probable; the padding id is never
    drawn), and per row the summed log-probability of its tokens.

    `ids` is a `sample_config()` search's [B, 1, L]; the full decode of its prefix gives
    every step at once.
    """
    log_probs = full_decode_log_probs(model, inputs, ids[:, 0, :-1])  # [B, L - 1, V]
    choosable = log_probs.copy()
    choosable[..., PAD_ID] = -np.inf
    limits = row_limits(inputs, sample_config().extra_length).numpy()
    ranks, sums = [], []
    for row in range(inputs.shape[0]):
        drawn = list(ids[row, 0, 1:])
        # A row ends at its EOS, or without one at its own length limit (padding after).
        end = drawn.index(EOS) + 1 if EOS in drawn[: limits[row]] else limits[row]
        assert not any(drawn[end:])  # padding after the end
        steps = [(step, token) for step, token in enumerate(drawn[:end])]
        assert PAD_ID not in drawn[:end]
        ranks += [int(np.sum(choosable[row, t] > log_probs[row, t, token])) for t, token in steps]
        sums.append(sum(log_probs[row, t, token] for t, token in steps))
    return np.array(ranks), np.array(sums)


@pytest.mark.slow
def test_sampling_through_the_cached_step_of_a_trained_model(trained_model):
    model = trained_model.model
    lengths = np.random.default_rng(21).integers(1, 9, size=24)
    inputs = random_inputs(np.random.default_rng(22), 12, lengths)

    # top_k=1 leaves one token to draw: sampling is greedy decoding, whatever the seed.
    greedy = Translator(model, SearchConfig("greedy", extra_length=5)).search(inputs)
    for seed in (0, 1):
        ids, scores = Translator(model, sample_config(top_k=1, seed=seed)).search(inputs)
        np.testing.assert_array_equal(ids, greedy[0])
        np.testing.assert_array_equal(scores, greedy[1])

    # A seed reproduces the draws, in a new Translator (a new trace) too; another seed differs.
    hot = sample_config(temperature=4.0, top_k=3, seed=17)
    ids, scores = (t.numpy() for t in Translator(model, hot).search(inputs))
    again = Translator(model, hot).search(inputs)
    np.testing.assert_array_equal(again[0], ids)
    np.testing.assert_array_equal(again[1], scores)
    other = Translator(model, sample_config(temperature=4.0, top_k=3, seed=18)).search(inputs)
    assert not np.array_equal(other[0], ids)

    # Every drawn token is among the 3 best of the uncached model's distribution at its step,
    # and the score is the model's (untempered) log-probability of the drawn tokens.
    ranks, sums = ranks_and_log_probs(model, inputs, ids)
    assert ranks.max() <= 2, np.bincount(ranks)
    np.testing.assert_allclose(scores[:, 0], sums, rtol=1e-4, atol=1e-4)
    # The check has teeth: at this temperature the runners-up are drawn often, and without
    # the cut tokens ranked below the top 3 are drawn too.
    assert np.mean(ranks > 0) >= 0.1, np.bincount(ranks)
    free = Translator(model, sample_config(temperature=4.0, seed=17)).search(inputs)[0].numpy()
    assert ranks_and_log_probs(model, inputs, free)[0].max() >= 3
