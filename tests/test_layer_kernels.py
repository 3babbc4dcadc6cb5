"""The hand-written fast paths equal what they replace: Keras's LayerNormalization and
Dense, EinsumDense's own call, the label-smoothed loss differentiated by autodiff; the
16-bit dropout mask has the stated keep probability and scale."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.layers.attention import _positionwise
from t2t_lite.layers.dropout import Dropout
from t2t_lite.layers.feed_forward import TransposedDense
from t2t_lite.layers.normalization import LayerNorm, position_sums_by_reduction
from t2t_lite.training.loss import cross_entropy_sums


def _randn(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype("float32")


def _value_and_grads(fn, x, variables, upstream):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    grads = tape.gradient(y, [x, *variables], output_gradients=tf.constant(upstream))
    return [np.asarray(y)] + [np.asarray(g) for g in grads]


def _assert_all_close(got, expected, atol):
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, atol=atol, rtol=1e-5)


# LayerNorm: the written-out gradient against Keras's autodiff.


@pytest.mark.parametrize("shape", [(3, 5, 16), (7, 16)])
def test_layer_norm_values_and_gradients_equal_keras(shape):
    reference = keras.layers.LayerNormalization(epsilon=1e-6)
    layer = LayerNorm(epsilon=1e-6)
    for norm in (reference, layer):
        norm.build(shape)
        norm.gamma.assign(_randn(shape[-1], seed=1) + 1.0)
        norm.beta.assign(_randn(shape[-1], seed=2))
    x, upstream = _randn(*shape, seed=3, scale=3.0) + 2.0, _randn(*shape, seed=4)
    expected = _value_and_grads(reference, x, [reference.gamma, reference.beta], upstream)
    got = _value_and_grads(layer, x, [layer.gamma, layer.beta], upstream)
    _assert_all_close(got, expected, atol=2e-5)


def test_layer_norm_under_tf_function_and_bfloat16_policy():
    reference = keras.layers.LayerNormalization(epsilon=1e-6)
    layer = LayerNorm(epsilon=1e-6, dtype="mixed_bfloat16")
    for norm in (reference, layer):
        norm.build((4, 8))
    x = _randn(4, 8, seed=5)
    out = tf.function(layer)(tf.constant(x))
    assert out.dtype == tf.bfloat16
    np.testing.assert_allclose(
        np.asarray(tf.cast(out, tf.float32)), np.asarray(reference(x)), atol=0.05
    )


@pytest.mark.parametrize("by_reduction", [False, True])
def test_layer_norm_under_xla_with_either_way_of_summing_positions(by_reduction):
    reference = keras.layers.LayerNormalization(epsilon=1e-6)
    layer = LayerNorm(epsilon=1e-6)
    for norm in (reference, layer):
        norm.build((6, 16))
        norm.gamma.assign(_randn(16, seed=1) + 1.0)
        norm.beta.assign(_randn(16, seed=2))
    x, upstream = _randn(6, 16, seed=3, scale=3.0) + 2.0, _randn(6, 16, seed=4)
    expected = _value_and_grads(reference, x, [reference.gamma, reference.beta], upstream)

    @tf.function(jit_compile=True)
    def compiled(x):
        with position_sums_by_reduction(by_reduction):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = layer(x)
            grads = tape.gradient(y, [x, layer.gamma, layer.beta], output_gradients=upstream)
        return [y, *grads]

    got = [np.asarray(t) for t in compiled(tf.constant(x))]
    _assert_all_close(got, expected, atol=2e-5)
    graph = compiled.get_concrete_function(tf.constant(x)).graph
    # The forward has no product: a MatMul is there exactly when the sums are products.
    assert any(op.type == "MatMul" for op in graph.get_operations()) != by_reduction


@pytest.mark.filterwarnings("ignore:You passed `rms_scaling=True`")
def test_layer_norm_keeps_keras_config_and_falls_back_for_rms_scaling():
    layer = LayerNorm(epsilon=1e-3, name="norm")
    assert LayerNorm.from_config(layer.get_config()).get_config() == layer.get_config()
    reference = keras.layers.LayerNormalization(rms_scaling=True)
    rms = LayerNorm(rms_scaling=True)
    x = _randn(2, 6, seed=6)
    np.testing.assert_allclose(np.asarray(rms(x)), np.asarray(reference(x)), atol=1e-6)


# Dropout with a 16-bit keep mask.


def test_dropout_keep_probability_and_scale():
    rate, levels = 0.1, 65536
    threshold = round(rate * levels)  # 6554
    layer = Dropout(rate, seed=11)
    ones = np.ones((64, 128, 512), "float32")  # 4,194,304 units
    out = np.asarray(layer(ones, training=True))
    kept = out != 0
    # Kept units carry 1 / P(keep) exactly, so E[out] = in.
    np.testing.assert_allclose(out[kept], levels / (levels - threshold), rtol=1e-6)
    # Keep fraction within 5 standard deviations of 1 - 6554 / 65536.
    p = 1 - threshold / levels
    sigma = np.sqrt(p * (1 - p) / kept.size)
    assert abs(kept.mean() - p) < 5 * sigma
    # Both 16-bit halves of each 32-bit draw are used: even and odd columns keep alike.
    assert abs(kept[..., 0::2].mean() - kept[..., 1::2].mean()) < 10 * sigma


def test_dropout_gradient_uses_the_forward_mask():
    layer = Dropout(0.3, seed=2)
    x, upstream = _randn(8, 10, 64, seed=7), _randn(8, 10, 64, seed=8)
    y, dx = _value_and_grads(lambda t: layer(t, training=True), x, [], upstream)
    scale = 65536 / (65536 - round(0.3 * 65536))
    kept = y != 0
    np.testing.assert_allclose(y[kept], x[kept] * scale, rtol=1e-6)
    np.testing.assert_allclose(dx, np.where(kept, upstream * scale, 0.0), rtol=1e-6)


def test_dropout_inference_identity_fresh_masks_and_fallbacks():
    x = _randn(4, 6, 10, seed=9)
    layer = Dropout(0.5, seed=3)
    np.testing.assert_array_equal(np.asarray(layer(x)), x)
    first, second = np.asarray(layer(x, training=True)), np.asarray(layer(x, training=True))
    assert not np.array_equal(first != 0, second != 0)
    np.testing.assert_array_equal(np.asarray(Dropout(0.0)(x, training=True)), x)
    odd = np.asarray(Dropout(0.5, seed=4)(_randn(4, 7, seed=10), training=True))  # Keras's mask
    assert 0 < (odd == 0).mean() < 1
    # A rate that rounds to 65536/65536 is Keras's dropout (it would divide by zero here).
    np.testing.assert_array_less(
        np.abs(np.asarray(Dropout(0.999999, seed=5)(x, training=True))), np.abs(x) * 1e6 + 1
    )
    assert Dropout.from_config(layer.get_config()).get_config() == layer.get_config()


# TransposedDense and the attention's position-wise projection.


def test_transposed_dense_equals_dense_with_transposed_kernel():
    dense = keras.layers.Dense(24, activation="relu")
    dense.build((None, None, 16))
    layer = TransposedDense(24, activation="relu")
    layer.build((None, None, 16))
    dense.kernel.assign(_randn(16, 24, seed=11))
    dense.bias.assign(_randn(24, seed=12))
    layer.kernel.assign(np.asarray(dense.kernel).T)
    layer.bias.assign(np.asarray(dense.bias))
    x, upstream = _randn(3, 5, 16, seed=13), _randn(3, 5, 24, seed=14)
    expected = _value_and_grads(dense, x, [dense.kernel, dense.bias], upstream)
    got = _value_and_grads(layer, x, [layer.kernel, layer.bias], upstream)
    got[2] = got[2].T  # d kernel, stored [units, input_dim]
    _assert_all_close(got, expected, atol=1e-5)
    assert layer.count_params() == dense.count_params()
    assert TransposedDense.from_config(layer.get_config()).get_config() == layer.get_config()


@pytest.mark.parametrize(
    "equation, bias_axes, output_shape, input_shape",
    [
        ("btd,dhk->bthk", "hk", (None, 4, 3), (2, 5, 12)),  # query/key/value
        ("bthk,hkd->btd", "d", (None, 12), (2, 5, 4, 3)),  # output
    ],
)
def test_positionwise_projection_equals_einsum_dense(
    equation, bias_axes, output_shape, input_shape
):
    dense = keras.layers.EinsumDense(equation, output_shape=output_shape, bias_axes=bias_axes)
    dense.build(input_shape)
    dense.bias.assign(_randn(*dense.bias.shape, seed=15))
    x = _randn(*input_shape, seed=16)
    upstream = _randn(*np.asarray(dense(x)).shape, seed=17)
    expected = _value_and_grads(dense, x, [dense.kernel, dense.bias], upstream)
    got = _value_and_grads(
        lambda t: _positionwise(dense, t), x, [dense.kernel, dense.bias], upstream
    )
    _assert_all_close(got, expected, atol=1e-5)


# The loss's written-out gradient against autodiff of the textbook formula.


def _reference_loss(logits, labels, eps):
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    nll = -tf.gather(log_probs, labels, axis=-1, batch_dims=2)
    loss = (1 - eps) * nll - eps * tf.reduce_mean(log_probs, axis=-1)
    return tf.reduce_sum(loss * tf.cast(labels != 0, tf.float32))


@pytest.mark.parametrize("eps", [0.1, 0.0])
@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("compiled", [True, False], ids=["xla_programs", "plain_ops"])
def test_cross_entropy_gradient_equals_autodiff(eps, jit, compiled):
    logits = tf.constant(_randn(3, 6, 50, seed=18, scale=4.0))
    labels = np.random.default_rng(19).integers(1, 50, (3, 6))
    labels[0, 4:] = 0  # padding carries neither loss nor gradient
    labels = tf.constant(labels, tf.int32)

    def both(z):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(z)
            loss, nll = cross_entropy_sums(z, labels, eps, compiled)
            scaled = 3.0 * loss  # an upstream gradient other than 1 (loss scaling)
            reference = 3.0 * _reference_loss(z, labels, eps)
        return loss, reference / 3.0, tape.gradient(scaled, z), tape.gradient(reference, z)

    loss, reference, grad, reference_grad = (tf.function(both, jit_compile=True) if jit else both)(
        logits
    )
    np.testing.assert_allclose(float(loss), float(reference), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(reference_grad), atol=1e-6)
    assert not np.asarray(grad)[0, 4:].any()
