"""A self-attention cache grown in blocks finds the hypotheses of the full-size cache.

A search outside XLA starts the decoder's self-attention cache at
`CACHE_BLOCK` positions and adds a block whenever a step reaches its end
(`model_search.search_inputs(cache_block=...)`), so a step's work follows the length decoded
so far. Masked slots get zero attention weight, so the search must find the same
hypotheses as with the cache of the whole maximum length, with and without a tree
constraint, whatever the block size, on random models and inputs.
"""

import importlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import hparams
from t2t_lite.decoding.constraints import BracketConstraint
from t2t_lite.models import build_transformer
from t2t_lite.problems.tree_constraint import TreeConstraint
from t2t_lite.search import (
    SearchConfig,
    Translator,
    compiled,
    guidance_batch,
    model_beam_search,
    model_search,
    pad_batch,
)

# The module (the package's `beam_search` is its function).
beam_search_lib = importlib.import_module("t2t_lite.decoding.beam_search")
VOCAB = 40
# Ids 2-7 open and close three labels; the rest are words (each one piece).
PIECES = ["<pad>", "<EOS>", "▁(A", "▁(B", "▁(C", "▁)A", "▁)B", "▁)C"]
PIECES += [f"▁w{n}" for n in range(len(PIECES), VOCAB)]


def random_model(seed):
    keras.utils.set_random_seed(seed)
    hp = hparams.override(hparams.get("transformer_tiny"), "hidden_size=32,filter_size=64")
    return build_transformer(hp, VOCAB)


def sentences(seed):
    """Batches of random word ids (0-padded, EOS-terminated) [B, S]."""
    rng = np.random.default_rng(seed)
    return [
        pad_batch([list(rng.integers(8, VOCAB, n)) for n in lengths])
        for lengths in ([3, 1, 6], [5, 2], [7])
    ]


@pytest.mark.parametrize("constrained", [False, True])
@pytest.mark.parametrize("block", [1, 3, 8])
def test_a_grown_cache_finds_the_full_size_caches_hypotheses(constrained, block):
    model = random_model(seed=5)
    constraint = TreeConstraint(PIECES, "word", max_open_run=3) if constrained else None
    search = tf.function(
        lambda ids, cache_block: model_beam_search(
            model, ids, 4, 0.6, 14, constraint=constraint, cache_block=cache_block
        ),
        reduce_retracing=True,
    )
    for batch in sentences(seed=6):
        full_ids, full_scores = search(tf.constant(batch), None)
        ids, scores = search(tf.constant(batch), block)
        np.testing.assert_array_equal(ids.numpy(), full_ids.numpy())
        np.testing.assert_allclose(scores.numpy(), full_scores.numpy(), rtol=1e-5)
        assert np.all(full_scores.numpy()[:, 0] > -1e8), "every row finds a hypothesis"


def test_the_translator_grows_the_cache_of_every_search_outside_xla(monkeypatch):
    monkeypatch.setattr(compiled, "CACHE_BLOCK", 4)
    model = random_model(seed=7)
    constraint = TreeConstraint(PIECES, "word", max_open_run=3)
    beam = SearchConfig(beam_size=4, alpha=0.6, extra_length=40)
    greedy = SearchConfig("greedy", extra_length=40)
    sizes = []  # the cache size each step reads, as the search runs
    decode_step = model.decode_step

    def recording_step(ids, i, cache, constants=None):
        if constants is not None:
            size = tf.shape(cache["decoder_layer_0"]["self_attention"]["key"])[2]
            tf.py_function(lambda n: sizes.append(int(n)), [size], [])
        return decode_step(ids, i, cache, constants)

    model.decode_step = recording_step
    batch = sentences(seed=8)[0]
    decode_length = batch.shape[1] + 40
    prefixes = [[9, 10], [11], [12, 13, 14]]
    guidance = guidance_batch([[] for _ in prefixes], prefixes)
    full_size = {  # each search's ids with the cache of the whole maximum length
        "tree": lambda: model_beam_search(model, batch, 4, 0.6, 40, constraint=constraint)[0],
        "beam": lambda: model_beam_search(model, batch, 4, 0.6, 40)[0],
        "greedy": lambda: model_search.model_greedy_search(model, batch, greedy)[0][:, None],
        "guided": lambda: model_search.model_guided_search(model, batch, 4, 0.6, 40, guidance)[0],
    }
    searches = {
        "tree": lambda: Translator(model, beam, jit_compile=False, constraint=constraint).search(
            batch
        )[0],
        "beam": lambda: Translator(model, beam, jit_compile=False).search(batch)[0],
        "greedy": lambda: Translator(model, greedy, jit_compile=False).search(batch)[0],
        "guided": lambda: Translator(model, beam, jit_compile=False).search_guided(batch, guidance)[
            0
        ],
    }
    for name, search in searches.items():
        sizes.clear()
        ids = search()
        # Slots 0..i are needed at step i, in blocks of 4.
        assert sizes == [min(4 * (i // 4 + 1), decode_length) for i in range(len(sizes))], name
        assert len(sizes) > 4, name
        if name == "tree":  # the constraint's length bound stops it before the maximum length
            assert len(sizes) < decode_length
        sizes.clear()
        np.testing.assert_array_equal(ids.numpy(), full_size[name]().numpy(), err_msg=name)
        assert set(sizes) == {decode_length}, name
    # Under XLA the cache keeps its full, static size.
    assert Translator(model, beam, jit_compile=True).function._cache_block() is None


def test_grown_adds_a_block_of_zero_slots_when_a_step_reaches_the_end():
    key = tf.reshape(tf.range(2 * 2 * 4 * 3, dtype=tf.float32), [2, 2, 4, 3]) + 1.0  # [N, H, C, Dh]
    states = {"layer": {"self_attention": {"key": key}}, "pointer": tf.constant([1, 2])}
    for i, decode_length, size in ((3, 10, 4), (4, 10, 7), (4, 6, 6)):
        grown = model_search._grown(states, tf.constant(i), 3, tf.constant(decode_length))
        cache = grown["layer"]["self_attention"]["key"].numpy()
        assert cache.shape == (2, 2, size, 3)
        np.testing.assert_array_equal(cache[:, :, :4], key.numpy())
        assert not cache[:, :, 4:].any()
        np.testing.assert_array_equal(grown["pointer"].numpy(), [1, 2])


class _WithoutLengthBound:
    """A constraint's masks and states, without its `max_final_lengths`."""

    def __init__(self, constraint):
        self.initial_state = constraint.initial_state
        self.allowed = constraint.allowed
        self.update = constraint.update


def test_the_constraints_length_bound_keeps_the_best_trees():
    model = random_model(seed=9)
    trees = TreeConstraint(PIECES, "word", max_open_run=3)
    for batch in sentences(seed=10):
        found = {}
        for bounded in (True, False):
            constraint = trees if bounded else lambda *a: _WithoutLengthBound(trees(*a))
            found[bounded] = model_beam_search(
                model, tf.constant(batch), 4, 1.5, 60, constraint=constraint
            )
        (ids, scores), (loose_ids, loose_scores) = found[True], found[False]
        np.testing.assert_array_equal(ids.numpy()[:, 0], loose_ids.numpy()[:, 0])
        np.testing.assert_array_equal(scores.numpy()[:, 0], loose_scores.numpy()[:, 0])


def test_a_row_whose_alive_trees_are_complete_is_done_at_once():
    """Finished: a tree of 4 tokens with log P -3.0. Alive: another complete tree of 3 tokens
    with log P -3.1, which can only take EOS: at most -3.1 / lp(4), below the finished score,
    while the row's limit (100 tokens) would allow -3.1 / lp(100), above it."""
    trees = TreeConstraint(PIECES, "word", max_open_run=3)
    constraint = BracketConstraint(
        [[8]], [1], [[True]], [100], trees.open_labels, trees.close_labels, max_open_run=3
    )
    alpha, neg_inf = 0.6, beam_search_lib.NEG_INF
    state = beam_search_lib._initial_state(tf.constant([0]), 2, 100, None, constraint)
    state = state._replace(
        i=tf.constant(3),
        lengths=tf.constant([3]),
        alive_log_probs=tf.constant([[-3.1, neg_inf]]),
        finished_scores=tf.constant([[-3.0 / ((5 + 4) / 6) ** alpha, neg_inf]]),
        finished_flags=tf.constant([[True, False]]),
        constraint_states={
            **state.constraint_states,
            "placed": tf.constant([1, 0]),
            "started": tf.constant([True, False]),
        },
    )
    limits = tf.constant([100])
    np.testing.assert_array_equal(constraint.max_final_lengths(state.constraint_states, 3), [4, 11])
    assert beam_search_lib._rows_done(state, limits, alpha, True, constraint).numpy()[0]
    assert not beam_search_lib._rows_done(state, limits, alpha, True, None).numpy()[0]
