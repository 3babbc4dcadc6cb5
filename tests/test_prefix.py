"""Prefix-constrained search: the prefix is kept, and the rest is the search given the prefix.

The reference continuation is found independently: the same step function with the prefix
fed to it (teacher forcing), searched by plain `beam_search` from there.
"""

import numpy as np
import pytest
import tensorflow as tf
from test_lexical_constraints import history_fn, phrases_tensor

from t2t_lite.decoding import beam_search
from t2t_lite.decoding.lexical import lexically_constrained_beam_search
from t2t_lite.decoding.prefix import PrefixConstraint

VOCAB = 8


def teacher_forced(fn, prefix):
    """fn with `prefix` fed before the ids: the model conditioned on the prefix."""
    forced = tf.constant([prefix], tf.int32)

    def shifted(ids):
        # ids [N, i + 1]: column 0 stands for the prefix's last token.
        n = tf.shape(ids)[0]
        return fn(tf.concat([tf.tile(forced, [n, 1]), ids[:, 1:]], axis=1))

    return shifted


def prefix_log_prob(fn, prefix):
    total = 0.0
    for t in range(1, len(prefix)):
        total += float(tf.nn.log_softmax(fn(tf.constant([prefix[:t]])))[0, prefix[t]])
    return total


@pytest.mark.parametrize("prefix", [[4], [5, 2, 7], [3, 3]])
@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("constrained", [False, True])
def test_prefix_is_kept_and_the_continuation_is_the_search_given_the_prefix(
    prefix, beam_size, constrained
):
    fn = history_fn(VOCAB, seed=len(prefix) + beam_size)
    length = 10
    row = np.array([prefix], np.int32)
    if constrained:  # the lexical search with no phrases and a prefix
        phrases, lengths = phrases_tensor([[]])
        ids, scores, met = lexically_constrained_beam_search(
            fn, [0], beam_size, length, VOCAB, 0.0, phrases, lengths,
            prefix=row, prefix_lengths=[len(prefix)],
        )  # fmt: skip
        assert met.numpy()[0, 0]
    else:
        constraint = PrefixConstraint(row, [len(prefix)], VOCAB)
        ids, scores = beam_search(fn, [0], beam_size, length, VOCAB, 0.0, constraint=constraint)
    # Independently: start after the prefix, with the prefix teacher-forced into the model.
    rest_ids, rest_scores = beam_search(
        teacher_forced(fn, [0, *prefix]), [prefix[-1]], beam_size, length - len(prefix), VOCAB, 0.0
    )
    ids = ids.numpy()[0]
    for k in range(beam_size):
        if scores[0, k] <= -1e9:
            continue
        np.testing.assert_array_equal(ids[k, 1 : 1 + len(prefix)], prefix)
        np.testing.assert_array_equal(ids[k, len(prefix) + 1 :], rest_ids[0, k, 1:])
    # alpha 0: the score is log P(prefix) + log P(continuation | prefix).
    np.testing.assert_allclose(
        scores[0, 0], prefix_log_prob(fn, [0, *prefix]) + rest_scores[0, 0], rtol=1e-5
    )


def test_rows_with_and_without_prefixes_share_a_batch():
    fn = history_fn(VOCAB, seed=9)
    prefix = np.array([[6, 6], [0, 0], [3, 0]], np.int32)
    constraint = PrefixConstraint(prefix, [2, 0, 1], VOCAB)
    ids, _ = beam_search(fn, tf.zeros([3], tf.int32), 2, 8, VOCAB, 0.6, constraint=constraint)
    alone, _ = beam_search(fn, tf.zeros([1], tf.int32), 2, 8, VOCAB, 0.6)
    np.testing.assert_array_equal(ids[0, 0, 1:3], [6, 6])
    np.testing.assert_array_equal(ids[1], alone[0])  # no prefix: as searched alone
    assert ids[2, 0, 1] == 3


def test_a_prefix_that_already_holds_a_phrase_meets_it():
    fn = history_fn(VOCAB, seed=4)
    phrases, lengths = phrases_tensor([[[5, 6]]])
    ids, _, met = lexically_constrained_beam_search(
        fn, [0], 2, 8, VOCAB, 0.6, phrases, lengths, prefix=[[5, 6]], prefix_lengths=[2]
    )
    plain, _ = beam_search(
        fn, [0], 2, 8, VOCAB, 0.6, constraint=PrefixConstraint([[5, 6]], [2], VOCAB)
    )
    assert met.numpy()[0, 0]
    np.testing.assert_array_equal(ids[0, 0], plain[0, 0])
