"""Tests of t2t_lite.layers against literal values, numpy formulas and equivalences."""

import math

import keras
import numpy as np
import pytest

from t2t_lite.layers import (
    FeedForwardNetwork,
    LearnedPositionEmbedding,
    MultiHeadAttention,
    SinusoidalPositionEncoding,
    TokenEmbedding,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
    masks,
)

D, H, F = 16, 4, 32


def _rng(seed=0):
    return np.random.default_rng(seed)


def _randn(*shape, seed=0, scale=1.0):
    return (_rng(seed).standard_normal(shape) * scale).astype("float32")


# Masks.


def test_padding_mask_on_literal_batch():
    ids = np.array([[5, 7, 1, 0, 0], [3, 0, 0, 0, 0], [2, 9, 4, 6, 1]])
    expected = np.array(
        [
            [True, True, True, False, False],
            [True, False, False, False, False],
            [True, True, True, True, True],
        ]
    )
    np.testing.assert_array_equal(np.asarray(masks.padding_mask(ids)), expected)


def test_causal_mask_4x4_literal():
    expected = np.array(
        [
            [True, False, False, False],
            [True, True, False, False],
            [True, True, True, False],
            [True, True, True, True],
        ]
    )
    np.testing.assert_array_equal(np.asarray(masks.causal_mask(4)), expected)


def test_step_mask_is_the_causal_row_over_the_cache():
    np.testing.assert_array_equal(
        np.asarray(masks.step_mask(2, 5)), [[True, True, True, False, False]]
    )


def test_attention_mask_combines_padding_and_causal():
    key_mask = np.array([[True, True, False], [True, True, True]])
    combined = np.asarray(masks.attention_mask(key_mask, causal=masks.causal_mask(3)))
    np.testing.assert_array_equal(
        combined[0], [[True, False, False], [True, True, False], [True, True, False]]
    )
    np.testing.assert_array_equal(
        combined[1], [[True, False, False], [True, True, False], [True, True, True]]
    )
    padding_only = np.asarray(masks.attention_mask(key_mask, query_length=2))
    assert padding_only.shape == (2, 2, 3)
    np.testing.assert_array_equal(padding_only[0], [[True, True, False], [True, True, False]])
    with pytest.raises(ValueError, match="query_length"):
        masks.attention_mask(key_mask)


# Positions.


def test_sinusoid_matches_the_papers_formula():
    width = 8
    layer = SinusoidalPositionEncoding()
    encoding = np.asarray(layer(np.zeros((1, 60, width), "float32")))
    assert encoding.shape == (60, width)
    for pos in (0, 1, 7, 59):
        for i in range(width // 2):
            angle = pos / 10000 ** (2 * i / width)
            assert encoding[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-5)
            assert encoding[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-5)
    # A hand-computed row: pos 1, D = 8 -> angles 1, 0.1, 0.01, 0.001.
    row = [math.sin(1), math.cos(1), math.sin(0.1), math.cos(0.1)]
    row += [math.sin(0.01), math.cos(0.01), math.sin(0.001), math.cos(0.001)]
    np.testing.assert_allclose(encoding[1], row, atol=1e-6)


def test_sinusoid_offset_gives_the_later_rows():
    layer = SinusoidalPositionEncoding()
    full = np.asarray(layer(np.zeros((1, 12, D), "float32")))
    shifted = np.asarray(layer(np.zeros((1, 3, D), "float32"), start_index=np.int32(9)))
    np.testing.assert_allclose(shifted, full[9:12], atol=1e-6)


def test_learned_positions_take_table_rows_with_offset():
    layer = LearnedPositionEmbedding(max_position=10, hidden_size=D)
    full = np.asarray(layer(np.zeros((2, 10, D), "float32")))
    table = layer.embeddings.numpy()
    np.testing.assert_array_equal(full, table)
    step = np.asarray(layer(np.zeros((2, 1, D), "float32"), start_index=np.int32(7)))
    np.testing.assert_array_equal(step, table[7:8])
    with pytest.raises(ValueError, match="max_position"):
        layer(np.zeros((1, 11, D), "float32"))


# Embedding.


def test_embedding_scales_by_sqrt_d_and_zeroes_padding():
    layer = TokenEmbedding(vocab_size=12, hidden_size=D)
    ids = np.array([[3, 11, 0]])
    out = np.asarray(layer(ids))
    table = layer.embeddings.numpy()
    np.testing.assert_allclose(out[0, 0], table[3] * math.sqrt(D), rtol=1e-6)
    np.testing.assert_allclose(out[0, 1], table[11] * math.sqrt(D), rtol=1e-6)
    np.testing.assert_array_equal(out[0, 2], np.zeros(D))


def test_embedding_attend_is_the_transposed_matrix_without_bias():
    layer = TokenEmbedding(vocab_size=12, hidden_size=D)
    layer.build()
    x = _randn(2, 3, D)
    np.testing.assert_allclose(
        np.asarray(layer.attend(x)), x @ layer.embeddings.numpy().T, rtol=1e-5, atol=1e-5
    )
    assert len(layer.weights) == 1


def test_embedding_initialiser_has_std_d_to_minus_half():
    layer = TokenEmbedding(vocab_size=4000, hidden_size=64)
    layer.build()
    table = layer.embeddings.numpy()
    assert abs(table.mean()) < 0.002
    assert table.std() == pytest.approx(64**-0.5, rel=0.02)


# Attention and feed-forward against numpy.


def _numpy_attention(layer, query, memory, mask):
    """Eq. 1 per head with numpy, softmax over the allowed keys only."""

    def project(dense, x):
        kernel = dense.kernel.numpy().reshape(x.shape[-1], -1)
        return x @ kernel + dense.bias.numpy().reshape(-1)

    heads, size = layer.num_heads, layer.head_size
    q = project(layer.query_dense, query).reshape(*query.shape[:2], heads, size)
    k = project(layer.key_dense, memory).reshape(*memory.shape[:2], heads, size)
    v = project(layer.value_dense, memory).reshape(*memory.shape[:2], heads, size)
    context = np.zeros(q.shape)
    for b in range(q.shape[0]):
        for t in range(q.shape[1]):
            allowed = np.flatnonzero(mask[b, t])
            for h in range(heads):
                scores = k[b, allowed, h] @ q[b, t, h] / math.sqrt(size)
                weights = np.exp(scores - scores.max())
                weights /= weights.sum()
                context[b, t, h] = weights @ v[b, allowed, h]
    output_kernel = layer.output_dense.kernel.numpy().reshape(heads * size, -1)
    return context.reshape(*q.shape[:2], -1) @ output_kernel + layer.output_dense.bias.numpy()


def test_attention_equals_numpy_eq1_and_ignores_masked_keys():
    layer = MultiHeadAttention(num_heads=H, hidden_size=D)
    query, memory = _randn(2, 3, D, seed=1), _randn(2, 5, D, seed=2)
    key_mask = np.array([[True, True, True, False, False], [True, True, True, True, True]])
    mask = np.asarray(masks.attention_mask(key_mask, query_length=3))
    out = np.asarray(layer(query, value=memory, attention_mask=mask))
    for name in ("query_dense", "key_dense", "value_dense", "output_dense"):
        assert getattr(layer, name).bias is not None
    np.testing.assert_allclose(out, _numpy_attention(layer, query, memory, mask), atol=1e-5)
    changed = memory.copy()
    changed[0, 3:] = 100.0
    np.testing.assert_array_equal(
        np.asarray(layer(query, value=changed, attention_mask=mask))[0], out[0]
    )
    assert layer.count_params() == 4 * (D * D + D)


def test_attention_cached_steps_equal_causal_self_attention():
    layer = MultiHeadAttention(num_heads=H, hidden_size=D)
    x = _randn(2, 4, D, seed=3)
    full = np.asarray(layer(x, attention_mask=masks.causal_mask(4)[None]))
    np.testing.assert_allclose(
        full, _numpy_attention(layer, x, x, np.tril(np.ones((2, 4, 4), bool))), atol=1e-5
    )
    cache = {"key": np.zeros((2, H, 6, D // H), "float32")}
    cache["value"] = cache["key"]
    for i in range(4):
        step, cache = layer(
            x[:, i : i + 1],
            attention_mask=masks.step_mask(np.int32(i), 6)[None],
            cache=cache,
            cache_index=np.int32(i),
        )
        np.testing.assert_allclose(np.asarray(step)[:, 0], full[:, i], atol=1e-5)
    assert np.asarray(cache["key"]).shape == (2, H, 6, D // H)
    np.testing.assert_array_equal(np.asarray(cache["key"])[:, :, 4:], 0.0)


def test_attention_with_precomputed_key_value_equals_full():
    layer = MultiHeadAttention(num_heads=H, hidden_size=D)
    query, memory = _randn(2, 3, D, seed=4), _randn(2, 5, D, seed=5)
    full = np.asarray(layer(query, value=memory))
    precomputed = layer(query, key_value=layer.compute_key_value(memory))
    np.testing.assert_allclose(np.asarray(precomputed), full, atol=1e-6)


def test_attention_weights_dropout_only_in_training():
    layer = MultiHeadAttention(num_heads=H, hidden_size=D, dropout=0.5)
    x = _randn(2, 6, D, seed=6)
    np.testing.assert_array_equal(np.asarray(layer(x)), np.asarray(layer(x, training=False)))
    assert not np.allclose(np.asarray(layer(x, training=True)), np.asarray(layer(x)))


def test_feed_forward_is_eq2():
    layer = FeedForwardNetwork(hidden_size=D, filter_size=F)
    x = _randn(2, 3, D, seed=7)
    out = np.asarray(layer(x))
    # W_1 is stored transposed: [d_ff, D].
    w1, b1 = layer.filter_dense.kernel.numpy().T, layer.filter_dense.bias.numpy()
    w2, b2 = layer.output_dense.kernel.numpy(), layer.output_dense.bias.numpy()
    np.testing.assert_allclose(out, np.maximum(0, x @ w1 + b1) @ w2 + b2, atol=1e-5)
    assert layer.count_params() == (D * F + F) + (F * D + D)


# Encoder and decoder layers: residual/LayerNorm structure.


def _encoder(normalize_first, **kwargs):
    return TransformerEncoderLayer(D, F, H, normalize_first=normalize_first, **kwargs)


def _decoder(normalize_first, **kwargs):
    return TransformerDecoderLayer(D, F, H, normalize_first=normalize_first, **kwargs)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_encoder_layer_composes_sublayers_as_the_paper_says(normalize_first):
    layer = _encoder(normalize_first)
    x = _randn(2, 5, D, seed=8, scale=3.0) + 2.0
    mask = masks.attention_mask(np.array([[1, 1, 1, 0, 0], [1] * 5]) > 0, query_length=5)
    out = np.asarray(layer(x, attention_mask=mask))
    attend = lambda y: layer.self_attention(y, attention_mask=mask)  # noqa: E731
    norm1, norm2 = layer.self_attention_layer_norm, layer.feed_forward_layer_norm
    if normalize_first:
        h = x + attend(norm1(x))
        expected = h + layer.feed_forward(norm2(h))
    else:
        h = norm1(x + attend(x))
        expected = norm2(h + layer.feed_forward(h))
    np.testing.assert_allclose(out, np.asarray(expected), atol=1e-5)


def test_post_norm_output_is_normalized_and_pre_norm_is_not():
    x = _randn(2, 5, D, seed=9, scale=3.0) + 2.0
    post = np.asarray(_encoder(False)(x))
    np.testing.assert_allclose(post.mean(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(post.std(-1), 1.0, atol=1e-3)
    pre = np.asarray(_encoder(True)(x))
    assert np.abs(pre.mean(-1)).max() > 0.5  # the residual stream keeps the input's offset
    post_decoder = np.asarray(_decoder(False)(x, encoder_output=x))
    np.testing.assert_allclose(post_decoder.std(-1), 1.0, atol=1e-3)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_decoder_layer_composes_sublayers_and_is_causal(normalize_first):
    layer = _decoder(normalize_first)
    x, memory = _randn(2, 4, D, seed=10), _randn(2, 3, D, seed=11)
    cross_mask = masks.attention_mask(np.array([[1, 1, 0], [1, 1, 1]]) > 0, query_length=4)
    out = np.asarray(layer(x, encoder_output=memory, cross_attention_mask=cross_mask))
    causal = masks.causal_mask(4)[None]
    blocks = [
        (layer.self_attention_layer_norm, lambda y: layer.self_attention(y, attention_mask=causal)),
        (
            layer.cross_attention_layer_norm,
            lambda y: layer.cross_attention(y, value=memory, attention_mask=cross_mask),
        ),
        (layer.feed_forward_layer_norm, layer.feed_forward),
    ]
    h = x
    for norm, sublayer in blocks:
        h = h + sublayer(norm(h)) if normalize_first else norm(h + sublayer(h))
    np.testing.assert_allclose(out, np.asarray(h), atol=1e-5)
    later_changed = x.copy()
    later_changed[:, 2:] += 5.0
    changed = np.asarray(
        layer(later_changed, encoder_output=memory, cross_attention_mask=cross_mask)
    )
    np.testing.assert_allclose(changed[:, :2], out[:, :2], atol=1e-5)
    assert not np.allclose(changed[:, 2:], out[:, 2:])


def test_decoder_layer_cached_steps_equal_full_sequence():
    layer = _decoder(False)
    x, memory = _randn(2, 4, D, seed=12), _randn(2, 3, D, seed=13)
    full = np.asarray(layer(x, encoder_output=memory))
    cache = {"key": np.zeros((2, H, 5, D // H), "float32")}
    cache["value"] = cache["key"]
    cross = layer.compute_cross_key_value(memory)
    for i in range(4):
        step, cache = layer(x[:, i : i + 1], cross_key_value=cross, cache=cache, cache_index=i)
        np.testing.assert_allclose(np.asarray(step)[:, 0], full[:, i], atol=1e-5)


def test_residual_dropout_only_in_training():
    layer = _encoder(False, dropout=0.5)
    x = _randn(2, 5, D, seed=14)
    np.testing.assert_array_equal(np.asarray(layer(x)), np.asarray(layer(x, training=False)))
    assert not np.allclose(np.asarray(layer(x, training=True)), np.asarray(layer(x)))


# Config round-trips.


def _round_trip_cases():
    x = _randn(2, 3, D, seed=15)
    ids = np.array([[4, 2, 0], [1, 3, 5]])
    return [
        (lambda: MultiHeadAttention(H, D, dropout=0.1, kernels="cpu", name="mha"), {"query": x}),
        (lambda: FeedForwardNetwork(D, F, relu_dropout=0.2, kernels="cpu"), {"inputs": x}),
        (lambda: TokenEmbedding(8, D), {"inputs": ids}),
        (lambda: SinusoidalPositionEncoding(max_wavelength=500.0), {"inputs": x}),
        (lambda: LearnedPositionEmbedding(7, D), {"inputs": x}),
        (lambda: _encoder(True, dropout=0.1, attention_dropout=0.2, kernels="cpu"), {"inputs": x}),
        (
            lambda: _decoder(False, relu_dropout=0.3, layer_norm_epsilon=1e-5),
            {"inputs": x, "encoder_output": x[:, :2]},
        ),
    ]


@pytest.mark.parametrize("case", range(7))
def test_layer_config_round_trip_gives_same_config_and_outputs(case):
    make, inputs = _round_trip_cases()[case]
    layer = make()
    out = np.asarray(layer(**inputs))
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    clone(**inputs)
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(np.asarray(clone(**inputs)), out, atol=1e-6)
    serialized = keras.saving.serialize_keras_object(layer)
    assert keras.saving.deserialize_keras_object(serialized).get_config() == config


def test_sublayer_names_equal_attributes():
    layer = _decoder(False)
    layer(_randn(1, 2, D), encoder_output=_randn(1, 2, D))
    for sublayer in layer._layers:
        assert getattr(layer, sublayer.name) is sublayer
    paths = [w.path.split("/", 1)[1] for w in layer.weights]
    assert "cross_attention/key_dense/kernel" in paths
    assert "feed_forward_layer_norm/gamma" in paths


def test_mixed_bfloat16_layers_compute_in_bfloat16_with_float32_weights():
    x = _randn(2, 4, D, seed=16)
    reference = _encoder(False)
    expected = np.asarray(reference(x))
    layer = _encoder(False, dtype="mixed_bfloat16")
    layer(x)  # builds
    layer.set_weights(reference.get_weights())
    out = layer(x)
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    assert all(w.dtype == "float32" for w in layer.weights)
    np.testing.assert_allclose(np.asarray(keras.ops.cast(out, "float32")), expected, atol=0.1)
