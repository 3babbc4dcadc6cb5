"""Tests of t2t_lite.models.transformer: sizes from the paper, cached == full decoding,
masking, config round-trips and mixed precision."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import hparams
from t2t_lite.models import Transformer, build_transformer, shift_targets_right, source_pointer

VOCAB, TARGET_VOCAB = 40, 30


def _paper_parameter_count(vocab, width, filter_size, layers):
    """Parameters of the paper's model with one shared, tied embedding matrix."""
    attention = 4 * (width * width + width)  # W^Q, W^K, W^V, W^O with biases
    feed_forward = (width * filter_size + filter_size) + (filter_size * width + width)
    layer_norm = 2 * width  # gain and bias
    encoder_layer = attention + feed_forward + 2 * layer_norm
    decoder_layer = 2 * attention + feed_forward + 3 * layer_norm
    return vocab * width + layers * (encoder_layer + decoder_layer)


@pytest.mark.parametrize(
    "name, expected, quoted",
    [("transformer_base", 63_082_496, 63.1e6), ("transformer_big", 214_245_376, 214.2e6)],
)
def test_parameter_counts_match_the_paper(name, expected, quoted):
    hp = hparams.get(name)
    derived = _paper_parameter_count(37000, hp.hidden_size, hp.filter_size, hp.num_encoder_layers)
    assert derived == expected
    model = build_transformer(hp, 37000)
    assert model.count_params() == expected
    assert abs(model.count_params() - quoted) / quoted < 0.005
    matrices = [w for w in model.weights if w.shape == (37000, hp.hidden_size)]
    assert len(matrices) == 1


def _tiny(**overrides):
    base = dataclasses.replace(
        hparams.get("transformer_tiny"),
        hidden_size=32,
        filter_size=64,
        num_heads=4,
        dropout=0.0,
        max_position=64,
    )
    return dataclasses.replace(base, **overrides)


def _batch(seed=0, source_length=7, target_length=6, target_vocab=VOCAB):
    rng = np.random.default_rng(seed)
    inputs = rng.integers(2, VOCAB, (3, source_length)).astype("int32")
    inputs[0, 4:] = 0
    inputs[2, 6:] = 0
    targets = rng.integers(2, target_vocab, (3, target_length)).astype("int32")
    targets[1, 3] = 1
    targets[1, 4:] = 0
    return inputs, targets


def test_separate_vocabularies_tie_only_target_and_softmax():
    hp = _tiny()
    model = build_transformer(hp, VOCAB, TARGET_VOCAB)
    shared = build_transformer(hp, VOCAB)
    width = hp.hidden_size
    assert model.count_params() - shared.count_params() == TARGET_VOCAB * width
    assert model.source_embedding.embeddings.shape == (VOCAB, width)
    assert model.target_embedding.embeddings.shape == (TARGET_VOCAB, width)
    inputs, targets = _batch(target_vocab=TARGET_VOCAB)
    assert model({"inputs": inputs, "targets": targets}).shape == (3, 6, TARGET_VOCAB)
    unshared = build_transformer(dataclasses.replace(hp, shared_embedding=False), VOCAB)
    assert unshared.count_params() - shared.count_params() == VOCAB * width


def test_call_is_decode_of_targets_shifted_right():
    np.testing.assert_array_equal(
        np.asarray(shift_targets_right(np.array([[5, 6, 7, 1], [8, 1, 0, 0]]))),
        [[0, 5, 6, 7], [0, 8, 1, 0]],
    )
    model = build_transformer(_tiny(), VOCAB)
    inputs, targets = _batch()
    logits = model({"inputs": inputs, "targets": targets})
    assert logits.dtype == "float32"
    encoder_output, encoder_mask = model.encode(inputs)
    np.testing.assert_array_equal(np.asarray(encoder_mask), inputs != 0)
    shifted = np.pad(targets, ((0, 0), (1, 0)))[:, :-1]
    direct = model.decode(shifted, encoder_output, encoder_mask)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(direct), atol=1e-6)


def test_source_padding_and_future_targets_do_not_change_logits():
    model = build_transformer(_tiny(), VOCAB)
    inputs, targets = _batch()
    logits = np.asarray(model({"inputs": inputs, "targets": targets}))
    padded = np.pad(inputs, ((0, 0), (0, 3)))
    np.testing.assert_allclose(
        np.asarray(model({"inputs": padded, "targets": targets})), logits, atol=1e-5
    )
    changed = targets.copy()
    changed[:, 3:] = 7  # targets from 3 on feed decoder positions 4 and later
    after = np.asarray(model({"inputs": inputs, "targets": changed}))
    np.testing.assert_allclose(after[:, :4], logits[:, :4], atol=1e-5)
    assert not np.allclose(after[:, 4:], logits[:, 4:])


def _step_logits(model, inputs, targets, step_fn=None, cache_length=None):
    """Logits of every position from the cached step, fed the shifted-right targets."""
    encoder_output, encoder_mask = model.encode(inputs)
    cache = model.init_cache(encoder_output, encoder_mask, cache_length or targets.shape[1])
    step_fn = step_fn or model.decode_step
    decoder_input = np.pad(targets, ((0, 0), (1, 0)))[:, :-1]
    rows = []
    for i in range(targets.shape[1]):
        logits, cache = step_fn(tf.constant(decoder_input[:, i]), tf.constant(i), cache)
        rows.append(np.asarray(logits))
    return np.stack(rows, axis=1), cache


@pytest.mark.parametrize(
    "overrides, target_vocab",
    [
        ({}, None),
        ({"normalize_first": True}, None),
        ({"position_encoding": "learned"}, None),
        ({"normalize_first": True, "position_encoding": "learned"}, TARGET_VOCAB),
        ({}, TARGET_VOCAB),
        ({"shared_embedding": False, "num_decoder_layers": 3}, None),
    ],
)
def test_cached_decoding_equals_full_decoding(overrides, target_vocab):
    model = build_transformer(_tiny(**overrides), VOCAB, target_vocab)
    inputs, targets = _batch(target_vocab=target_vocab or VOCAB)
    full = np.asarray(model({"inputs": inputs, "targets": targets}))
    stepped, _ = _step_logits(model, inputs, targets, cache_length=9)
    np.testing.assert_allclose(stepped, full, atol=1e-5, rtol=0)


def test_cached_step_under_xla_equals_full_decoding():
    model = build_transformer(_tiny(normalize_first=True), VOCAB)
    inputs, targets = _batch(seed=1)
    full = np.asarray(model({"inputs": inputs, "targets": targets}))
    step = tf.function(model.decode_step, jit_compile=True)
    stepped, cache = _step_logits(model, inputs, targets, step_fn=step)
    np.testing.assert_allclose(stepped, full, atol=1e-5, rtol=0)
    assert step.experimental_get_tracing_count() == 1  # static shapes: one compilation


def test_graph_decoding_with_unknown_shapes_equals_full_decoding():
    model = build_transformer(_tiny(position_encoding="learned"), VOCAB)
    spec = tf.TensorSpec([None, None], tf.int32)

    @tf.function(input_signature=[spec, spec])
    def stepped_logits(inputs, targets):
        encoder_output, encoder_mask = model.encode(inputs)
        length = tf.shape(targets)[1]
        cache = model.init_cache(encoder_output, encoder_mask, length)  # dynamic L
        decoder_input = shift_targets_right(targets)

        def body(i, rows, cache):
            logits, cache = model.decode_step(decoder_input[:, i], i, cache)
            return i + 1, rows.write(i, logits), cache

        rows = tf.TensorArray(tf.float32, size=length)
        _, rows, _ = tf.while_loop(lambda i, *_: i < length, body, (0, rows, cache))
        return tf.transpose(rows.stack(), (1, 0, 2))  # [B, T, V]

    inputs, targets = _batch(seed=4)
    full = np.asarray(model({"inputs": inputs, "targets": targets}))
    np.testing.assert_allclose(stepped_logits(inputs, targets).numpy(), full, atol=1e-5)


def test_tf_checkpoint_tracks_every_weight(tmp_path):
    model = build_transformer(_tiny(), VOCAB)
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    saved = [name for name, _ in tf.train.list_variables(path) if name.startswith("model/")]
    assert len(saved) == len(model.weights)
    restored = build_transformer(_tiny(), VOCAB)
    tf.train.Checkpoint(model=restored).restore(path).assert_consumed()
    features = dict(zip(("inputs", "targets"), _batch()))
    np.testing.assert_array_equal(np.asarray(restored(features)), np.asarray(model(features)))


def test_cache_leaves_lead_with_batch_and_survive_beam_tiling():
    hp = _tiny()
    model = build_transformer(hp, VOCAB)
    inputs, targets = _batch(seed=2)
    encoder_output, encoder_mask = model.encode(inputs)
    cache = model.init_cache(encoder_output, encoder_mask, 8)
    head_size = hp.hidden_size // hp.num_heads
    layer = cache["decoder_layer_1"]
    assert tuple(layer["self_attention"]["key"].shape) == (3, hp.num_heads, 8, head_size)
    assert tuple(layer["cross_attention"]["value"].shape) == (3, hp.num_heads, 7, head_size)
    assert all(leaf.shape[0] == 3 for leaf in tf.nest.flatten(cache))
    beams = 2
    tiled = tf.nest.map_structure(lambda t: keras.ops.repeat(t, beams, axis=0), cache)
    ids = np.repeat(np.array([0, 0, 0], "int32"), beams)
    logits, new_cache = model.decode_step(ids, 0, tiled)
    reference, _ = model.decode_step(np.zeros(3, "int32"), 0, cache)
    np.testing.assert_allclose(
        np.asarray(logits), np.repeat(np.asarray(reference), beams, axis=0), atol=1e-6
    )
    tf.nest.assert_same_structure(new_cache, tiled)


def test_dropout_is_active_only_in_training():
    model = build_transformer(_tiny(dropout=0.3), VOCAB)
    features = dict(zip(("inputs", "targets"), _batch()))
    eval_logits = np.asarray(model(features))
    np.testing.assert_array_equal(np.asarray(model(features, training=False)), eval_logits)
    assert not np.allclose(np.asarray(model(features, training=True)), eval_logits)


def test_model_config_round_trip_and_stable_weight_names():
    model = build_transformer(_tiny(normalize_first=True, position_encoding="learned"), VOCAB)
    config = model.get_config()
    clone = Transformer.from_config(config)
    assert clone.get_config() == config
    clone.build()
    clone.set_weights(model.get_weights())
    features = dict(zip(("inputs", "targets"), _batch()))
    np.testing.assert_allclose(np.asarray(clone(features)), np.asarray(model(features)), atol=1e-6)
    paths = {w.path for w in model.weights}
    for path in (
        "transformer/token_embedding/embeddings",
        "transformer/position_embedding/embeddings",
        "transformer/encoder_layer_0/self_attention/query_dense/kernel",
        "transformer/decoder_layer_1/cross_attention/output_dense/bias",
        "transformer/decoder_layer_1/feed_forward/filter_dense/kernel",
        "transformer/decoder_layer_norm/gamma",
    ):
        assert path in paths


def test_missing_feature_is_named():
    model = build_transformer(_tiny(), VOCAB)
    with pytest.raises(KeyError, match="targets"):
        model({"inputs": np.ones((1, 3), "int32")})


def test_mixed_bfloat16_returns_float32_logits_close_to_float32():
    reference = build_transformer(_tiny(), VOCAB)
    model = build_transformer(_tiny(dtype_policy="mixed_bfloat16"), VOCAB)
    assert all(w.dtype == "float32" for w in model.weights)
    model.set_weights(reference.get_weights())
    inputs, targets = _batch(seed=3)
    expected = np.asarray(reference({"inputs": inputs, "targets": targets}))
    logits = model({"inputs": inputs, "targets": targets})
    assert logits.dtype == "float32"
    scale = np.abs(expected).max()
    assert np.abs(np.asarray(logits) - expected).max() < 0.05 * scale
    encoder_output, encoder_mask = model.encode(inputs)
    assert encoder_output.dtype == "bfloat16"
    cache = model.init_cache(encoder_output, encoder_mask, 6)
    step_logits, cache = model.decode_step(np.zeros(3, "int32"), 0, cache)
    assert step_logits.dtype == "float32"
    assert cache["decoder_layer_0"]["self_attention"]["key"].dtype == "bfloat16"
    assert np.abs(np.asarray(step_logits) - expected[:, 0]).max() < 0.05 * scale


BRACKETS = (2, 3, 4)  # the non-copy ids of the source-pointer tests


def test_source_pointer_reads_the_next_source_token_to_copy():
    table = source_pointer.non_copy_table(BRACKETS, VOCAB)
    assert table.tolist() == [0, 0, 1, 1, 1] + [0] * (VOCAB - 5)
    # Decoder input 0 ( a ( b ) c: copies are a, b, c (ids >= 2, not brackets), so the
    # next source position at each input is 0 0 1 1 2 2 3 (by hand).
    decoder_input = np.array([[0, 2, 9, 3, 10, 4, 11]], np.int32)
    pointer = np.cumsum(np.asarray(source_pointer.copies(decoder_input, table)), axis=1)
    assert pointer.tolist() == [[0, 0, 1, 1, 2, 2, 3]]
    encoder_output = np.arange(1 * 3 * 2, dtype=np.float32).reshape(1, 3, 2)
    pointed = np.asarray(source_pointer.read(encoder_output, pointer))
    # Past the last source position the pointer stays on it (EOS in real inputs).
    np.testing.assert_array_equal(pointed[0], encoder_output[0, [0, 0, 1, 1, 2, 2, 2]])


def test_source_pointer_rows_of_a_beam_read_their_sentence():
    # Two sentences of 3 positions, 3 hypotheses each (rows 0-2 sentence 0, rows 3-5
    # sentence 1): row n reads sentence n // 3 at its own position, clipped to the last.
    encoder_output = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    positions = np.array([[0], [2], [5], [1], [0], [2]], np.int32)
    pointed = np.asarray(source_pointer.read(encoder_output, positions))
    expected = [encoder_output[n // 3, min(p, 2)] for n, (p,) in enumerate(positions.tolist())]
    np.testing.assert_array_equal(pointed[:, 0], np.stack(expected))
    # The same as reading an encoder output repeated for every hypothesis.
    repeated = np.asarray(source_pointer.read(np.repeat(encoder_output, 3, axis=0), positions))
    np.testing.assert_array_equal(pointed, repeated)


def test_source_pointer_cached_decoding_equals_full_decoding_and_uses_the_source():
    hp = _tiny(source_pointer=True, normalize_first=True)
    model = build_transformer(hp, VOCAB, None, BRACKETS)
    inputs, targets = _batch(seed=5)
    targets[:, 1] = 2  # a bracket among the copies
    full = np.asarray(model({"inputs": inputs, "targets": targets}))
    stepped, cache = _step_logits(model, inputs, targets, cache_length=9)
    np.testing.assert_allclose(stepped, full, atol=1e-5, rtol=0)
    assert cache["pointer"].numpy().tolist() == [
        sum(1 for t in row[:-1] if t > 1 and t not in BRACKETS) for row in targets
    ]
    step = tf.function(model.decode_step, jit_compile=True)
    compiled, _ = _step_logits(model, inputs, targets, step_fn=step, cache_length=9)
    np.testing.assert_allclose(compiled, full, atol=1e-5, rtol=0)
    # The same weights without the pointer give other logits from position 1 on.
    plain = Transformer.from_config({**model.get_config(), "source_pointer": False})
    plain.build()
    plain.set_weights(model.get_weights())
    without = np.asarray(plain({"inputs": inputs, "targets": targets}))
    assert not np.allclose(without[:, 1:], full[:, 1:], atol=1e-3)
    with pytest.raises(ValueError, match="non_copy_ids"):
        build_transformer(hp, VOCAB)


# Kernel sets: the same variables, the same function, checkpoints that move between them.


def _both_kernel_sets(hp=None, vocab=VOCAB):
    """Models built with kernels "keras" and "cpu" from one seed: the same weights."""
    models = []
    for kernels in ("keras", "cpu"):
        keras.utils.set_random_seed(7)
        models.append(build_transformer(dataclasses.replace(hp or _tiny(), kernels=kernels), vocab))
    assert [m.kernels for m in models] == ["keras", "cpu"]
    return models


def _loss_and_gradients(model, features, jit):
    def run(features):
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            loss = tf.reduce_sum(tf.square(logits)) * 1e-3
        return [logits, *tape.gradient(loss, model.trainable_variables)]

    run = tf.function(run, jit_compile=True) if jit else run
    return [np.asarray(t) for t in run(features)]


def test_build_transformer_resolves_auto_kernels_for_this_machine():
    assert build_transformer(_tiny(), VOCAB).kernels == "cpu"  # this machine has CPUs only
    assert build_transformer(_tiny(kernels="keras"), VOCAB).kernels == "keras"
    with pytest.raises(ValueError, match="kernels"):
        Transformer(VOCAB, kernels="auto")


@pytest.mark.parametrize("normalize_first", [False, True])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "xla"])
def test_kernel_sets_have_the_same_variables_and_compute_the_same_model(normalize_first, jit):
    models = _both_kernel_sets(_tiny(normalize_first=normalize_first))
    variables = [[(w.path, tuple(w.shape)) for w in m.weights] for m in models]
    assert variables[0] == variables[1]
    for a, b in zip(*(m.get_weights() for m in models), strict=True):
        np.testing.assert_array_equal(a, b)
    features = dict(zip(("inputs", "targets"), _batch(seed=6)))
    keras_set, cpu_set = (_loss_and_gradients(m, features, jit) for m in models)
    for a, b in zip(keras_set, cpu_set, strict=True):
        np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-4)
    # Cached decoding, as the decoder and the exporter run it.
    inputs, targets = _batch(seed=6)
    steps = [_step_logits(m, inputs, targets, cache_length=8)[0] for m in models]
    np.testing.assert_allclose(steps[1], steps[0], atol=1e-5)


@pytest.mark.parametrize("writer", ["keras", "cpu"])
def test_a_checkpoint_of_one_kernel_set_restores_into_the_other(tmp_path, writer):
    hp = _tiny(normalize_first=True)
    keras.utils.set_random_seed(8)
    written = build_transformer(dataclasses.replace(hp, kernels=writer), VOCAB)
    path = tf.train.Checkpoint(model=written).save(str(tmp_path / "ckpt"))
    reader = "cpu" if writer == "keras" else "keras"
    keras.utils.set_random_seed(9)  # other initial weights, all overwritten by the restore
    restored = build_transformer(dataclasses.replace(hp, kernels=reader), VOCAB)
    tf.train.Checkpoint(model=restored).restore(path).assert_consumed()
    features = dict(zip(("inputs", "targets"), _batch(seed=7)))
    np.testing.assert_allclose(
        np.asarray(restored(features)), np.asarray(written(features)), atol=1e-5
    )


def _layout_of_earlier_releases(hp, vocab):
    """{checkpoint key: shape} of a shared-vocabulary pre-norm model as t2t_lite wrote it
    before kernel sets existed: Keras's EinsumDense and Dense keep their kernels as
    `_kernel`, the FFN's first layer as `kernel` [d_ff, D]."""
    d, f, h = hp.hidden_size, hp.filter_size, hp.num_heads
    attention = {f"{name}_dense/_kernel": [d, h, d // h] for name in ("query", "key", "value")}
    attention.update({f"{name}_dense/bias": [h, d // h] for name in ("query", "key", "value")})
    attention.update({"output_dense/_kernel": [h, d // h, d], "output_dense/bias": [d]})
    feed_forward = {
        "filter_dense/kernel": [f, d],
        "filter_dense/bias": [f],
        "output_dense/_kernel": [f, d],
        "output_dense/bias": [d],
    }
    norm = {"gamma": [d], "beta": [d]}
    blocks = {"encoder": ("self_attention",), "decoder": ("self_attention", "cross_attention")}
    layout = {"token_embedding/embeddings": [vocab, d]}
    for stack, attentions in blocks.items():
        layout.update({f"{stack}_layer_norm/{k}": v for k, v in norm.items()})
        for i in range(hp.num_encoder_layers if stack == "encoder" else hp.num_decoder_layers):
            layer = f"{stack}_layer_{i}"
            for block in attentions:
                layout.update({f"{layer}/{block}/{k}": v for k, v in attention.items()})
            layout.update({f"{layer}/feed_forward/{k}": v for k, v in feed_forward.items()})
            for block in (*attentions, "feed_forward"):
                layout.update({f"{layer}/{block}_layer_norm/{k}": v for k, v in norm.items()})
    return layout


@pytest.mark.parametrize("kernels", ["keras", "cpu"])
def test_checkpoints_keep_the_layout_of_earlier_releases(tmp_path, kernels):
    hp = _tiny(normalize_first=True, num_encoder_layers=2, kernels=kernels)
    model = build_transformer(hp, VOCAB)
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    suffix = "/.ATTRIBUTES/VARIABLE_VALUE"
    saved = {
        name.removeprefix("model/").removesuffix(suffix): shape
        for name, shape in tf.train.list_variables(path)
        if name.startswith("model/")
    }
    assert saved == _layout_of_earlier_releases(hp, VOCAB)
