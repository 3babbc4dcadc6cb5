"""The CPU kernels (t2t_lite.kernels) compute what the plain Keras formulation computes.

Each kernel is compared, values and gradients, with the formulation it stands in for:
Keras's LayerNormalization and EinsumDense, attention computed with kernels="keras",
the label-smoothed loss differentiated by autodiff, in eager mode and under XLA; the
16-bit dropout mask has the stated keep probability and scale. Also: how "auto" picks a
kernel set, and the private Keras attributes behind `t2t_lite.kernels.keras_internals`.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from t2t_lite import kernels
from t2t_lite.kernels import cache_write, cross_entropy, keras_internals, projection
from t2t_lite.layers import masks
from t2t_lite.layers.attention import MultiHeadAttention
from t2t_lite.layers.dropout import Dropout
from t2t_lite.layers.normalization import LayerNorm
from t2t_lite.training.loss import cross_entropy_sums
from t2t_lite.training.step import _ReducedGradientAdam


def _randn(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype("float32")


def _value_and_grads(fn, x, variables, upstream, jit=False):
    """[fn(x), d<fn(x), upstream>/dx, .../d variables], eagerly or XLA-compiled."""

    def run(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        return [y, *tape.gradient(y, [x, *variables], output_gradients=upstream)]

    run = tf.function(run, jit_compile=True) if jit else run
    return [np.asarray(t) for t in run(tf.constant(x))]


def _assert_all_close(got, expected, atol):
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, atol=atol, rtol=1e-5)


# Choosing a kernel set.


def test_auto_is_cpu_kernels_on_cpus_and_keras_on_accelerators():
    assert kernels.resolve("auto", "CPU") == "cpu"
    assert kernels.resolve("auto", "GPU") == "keras"
    assert kernels.resolve("auto", "TPU") == "keras"
    assert kernels.resolve("keras", "CPU") == "keras"
    assert kernels.resolve("cpu", "GPU") == "cpu"
    with pytest.raises(ValueError, match="auto, keras, cpu"):
        kernels.resolve("fast")
    # This machine's TensorFlow has CPUs only, with or without a strategy in scope.
    assert kernels.current_device_type() == "CPU"
    with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
        assert kernels.current_device_type() == "CPU"
        assert kernels.resolve("auto") == "cpu"


def test_device_names_in_both_spellings_give_their_kind():
    assert kernels._device_kind("/job:worker/replica:0/task:0/device:GPU:1") == "GPU"
    assert kernels._device_kind("/job:localhost/replica:0/task:0/device:CPU:0") == "CPU"
    assert kernels._device_kind("tpu:3") == "TPU"


def test_layers_take_only_a_resolved_kernel_set():
    for make in (lambda k: LayerNorm(kernels=k), lambda k: Dropout(0.1, kernels=k)):
        with pytest.raises(ValueError, match="resolve 'auto'"):
            make("auto")


# LayerNorm: the written-out gradient against Keras's autodiff.


def _layer_norms(shape, dtype=None):
    """Keras's LayerNormalization and LayerNorm with each kernel set, the same weights."""
    norms = [keras.layers.LayerNormalization(epsilon=1e-6, dtype=dtype)]
    norms += [LayerNorm(epsilon=1e-6, kernels=k, dtype=dtype) for k in ("keras", "cpu")]
    for norm in norms:
        norm.build(shape)
        norm.gamma.assign(_randn(shape[-1], seed=1) + 1.0)
        norm.beta.assign(_randn(shape[-1], seed=2))
    return norms


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "xla"])
@pytest.mark.parametrize("shape", [(3, 5, 16), (7, 16)])
def test_layer_norm_kernels_equal_keras_values_and_gradients(shape, jit):
    norms = _layer_norms(shape)
    x, upstream = _randn(*shape, seed=3, scale=3.0) + 2.0, _randn(*shape, seed=4)
    expected = _value_and_grads(norms[0], x, [norms[0].gamma, norms[0].beta], upstream)
    for norm in norms:  # Keras's own (compiled, for the XLA runs), then each kernel set
        got = _value_and_grads(norm, x, [norm.gamma, norm.beta], upstream, jit)
        _assert_all_close(got, expected, atol=2e-5)


def test_layer_norm_cpu_kernel_under_tf_function_and_bfloat16_policy():
    reference = _layer_norms((4, 8))[0]
    layer = LayerNorm(epsilon=1e-6, kernels="cpu", dtype="mixed_bfloat16")
    layer.build((4, 8))
    layer.set_weights(reference.get_weights())
    x = _randn(4, 8, seed=5)
    out = tf.function(layer)(tf.constant(x))
    assert out.dtype == tf.bfloat16
    np.testing.assert_allclose(
        np.asarray(tf.cast(out, tf.float32)), np.asarray(reference(x)), atol=0.05
    )


@pytest.mark.filterwarnings("ignore:You passed `rms_scaling=True`")
def test_layer_norm_keeps_keras_config_and_falls_back_where_the_kernel_does_not_apply():
    layer = LayerNorm(epsilon=1e-3, kernels="cpu", name="norm")
    config = layer.get_config()
    assert config["kernels"] == "cpu"
    assert LayerNorm.from_config(config).get_config() == config
    x = _randn(2, 6, seed=6)
    for keras_args in ({"rms_scaling": True}, {"center": False}, {"axis": 0}):
        reference = keras.layers.LayerNormalization(**keras_args)
        kernel = LayerNorm(kernels="cpu", **keras_args)
        np.testing.assert_allclose(np.asarray(kernel(x)), np.asarray(reference(x)), atol=1e-6)


# Dropout with a 16-bit keep mask.


def test_dropout_kernel_keep_probability_and_scale():
    rate, levels = 0.1, 65536
    threshold = round(rate * levels)  # 6554
    layer = Dropout(rate, seed=11, kernels="cpu")
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


def test_dropout_kernel_gradient_uses_the_forward_mask():
    layer = Dropout(0.3, seed=2, kernels="cpu")
    x, upstream = _randn(8, 10, 64, seed=7), _randn(8, 10, 64, seed=8)
    y, dx = _value_and_grads(lambda t: layer(t, training=True), x, [], upstream)
    scale = 65536 / (65536 - round(0.3 * 65536))
    kept = y != 0
    np.testing.assert_allclose(y[kept], x[kept] * scale, rtol=1e-6)
    np.testing.assert_allclose(dx, np.where(kept, upstream * scale, 0.0), rtol=1e-6)


def test_dropout_keras_kernels_are_keras_dropout_and_cpu_falls_back_to_it():
    x = _randn(4, 6, 10, seed=9)
    expected = np.asarray(keras.layers.Dropout(0.4, seed=3)(x, training=True))
    got = np.asarray(Dropout(0.4, seed=3, kernels="keras")(x, training=True))
    np.testing.assert_array_equal(got, expected)
    odd = _randn(4, 7, seed=10)  # an odd last dimension: Keras's mask, whatever the kernels
    np.testing.assert_array_equal(
        np.asarray(Dropout(0.5, seed=4, kernels="cpu")(odd, training=True)),
        np.asarray(keras.layers.Dropout(0.5, seed=4)(odd, training=True)),
    )
    # A rate that rounds to 65536/65536 is Keras's dropout (it would divide by zero here).
    np.testing.assert_array_equal(
        np.asarray(Dropout(0.999999, seed=5, kernels="cpu")(x, training=True)),
        np.asarray(keras.layers.Dropout(0.999999, seed=5)(x, training=True)),
    )


def test_dropout_kernel_inference_identity_fresh_masks_and_config():
    x = _randn(4, 6, 10, seed=9)
    layer = Dropout(0.5, seed=3, kernels="cpu")
    np.testing.assert_array_equal(np.asarray(layer(x)), x)
    first, second = np.asarray(layer(x, training=True)), np.asarray(layer(x, training=True))
    assert not np.array_equal(first != 0, second != 0)
    np.testing.assert_array_equal(np.asarray(Dropout(0.0, kernels="cpu")(x, training=True)), x)
    assert Dropout.from_config(layer.get_config()).get_config() == layer.get_config()


# The attention's position-wise projections.


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "xla"])
@pytest.mark.parametrize(
    "equation, bias_axes, output_shape, input_shape",
    [
        ("btd,dhk->bthk", "hk", (None, 4, 3), (2, 5, 12)),  # query/key/value
        ("bthk,hkd->btd", "d", (None, 12), (2, 5, 4, 3)),  # output
    ],
)
def test_positionwise_projection_equals_einsum_dense(
    equation, bias_axes, output_shape, input_shape, jit
):
    dense = keras.layers.EinsumDense(equation, output_shape=output_shape, bias_axes=bias_axes)
    dense.build(input_shape)
    dense.bias.assign(_randn(*dense.bias.shape, seed=15))
    x = _randn(*input_shape, seed=16)
    upstream = _randn(*np.asarray(dense(x)).shape, seed=17)
    expected = _value_and_grads(dense, x, [dense.kernel, dense.bias], upstream)
    got = _value_and_grads(
        lambda t: projection.positionwise(dense, t), x, [dense.kernel, dense.bias], upstream, jit
    )
    _assert_all_close(got, expected, atol=1e-5)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "xla"])
def test_attention_kernels_give_the_same_values_gradients_and_cached_steps(jit):
    layers = [MultiHeadAttention(4, 16, kernels=k) for k in ("keras", "cpu")]
    query, memory = _randn(2, 3, 16, seed=18), _randn(2, 5, 16, seed=19)
    for layer in layers:
        layer(query, value=memory)
    # Non-zero biases, so that their gradients are compared too.
    weights = [w + 0.1 * _randn(*w.shape, seed=i) for i, w in enumerate(layers[0].get_weights())]
    for layer in layers:
        layer.set_weights(weights)
    mask = masks.attention_mask(np.array([[1, 1, 1, 0, 0], [1] * 5]) > 0, query_length=3)
    upstream = _randn(2, 3, 16, seed=21)
    keras_set, cpu_set = (
        _value_and_grads(
            lambda q, a=layer: a(q, value=memory, attention_mask=mask),
            query,
            layer.trainable_weights,
            upstream,
            jit,
        )
        for layer in layers
    )
    _assert_all_close(cpu_set, keras_set, atol=1e-5)
    cache = {"key": np.zeros((2, 4, 4, 4), "float32"), "value": np.zeros((2, 4, 4, 4), "float32")}
    steps = [
        layer(query[:, :1], cache=cache, cache_index=0, attention_mask=masks.step_mask(0, 4)[None])
        for layer in layers
    ]
    np.testing.assert_allclose(np.asarray(steps[1][0]), np.asarray(steps[0][0]), atol=1e-5)
    configs = [{**layer.get_config(), "name": None} for layer in layers]
    assert configs[1] == {**configs[0], "kernels": "cpu"}


# The loss's written-out gradient against autodiff of the textbook formula.


def _reference_loss(logits, labels, eps):
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    nll = -tf.gather(log_probs, labels, axis=-1, batch_dims=2)
    loss = (1 - eps) * nll - eps * tf.reduce_mean(log_probs, axis=-1)
    return tf.reduce_sum(loss * tf.cast(labels != 0, tf.float32))


@pytest.mark.parametrize("eps", [0.1, 0.0])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "xla"])
@pytest.mark.parametrize("kernel", [True, False], ids=["cpu_kernel", "keras"])
def test_cross_entropy_gradient_equals_autodiff(eps, jit, kernel):
    logits = tf.constant(_randn(3, 6, 50, seed=18, scale=4.0))
    labels = np.random.default_rng(19).integers(1, 50, (3, 6))
    labels[0, 4:] = 0  # padding carries neither loss nor gradient
    labels = tf.constant(labels, tf.int32)

    def both(z):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(z)
            if kernel:  # the kernel itself, below the vocabulary size it is chosen from
                loss, _ = cross_entropy.cross_entropy_sums(z, labels, eps)
            else:
                loss, _ = cross_entropy_sums(z, labels, eps, kernels="keras")
            scaled = 3.0 * loss  # an upstream gradient other than 1 (loss scaling)
            reference = 3.0 * _reference_loss(z, labels, eps)
        return loss, reference / 3.0, tape.gradient(scaled, z), tape.gradient(reference, z)

    loss, reference, grad, reference_grad = (tf.function(both, jit_compile=True) if jit else both)(
        logits
    )
    np.testing.assert_allclose(float(loss), float(reference), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(reference_grad), atol=1e-6)
    assert not np.asarray(grad)[0, 4:].any()


def test_cpu_kernels_choose_the_loss_kernel_by_vocabulary_size():
    labels = tf.constant([[3, 1]], tf.int32)
    for vocab_size in (13, cross_entropy.COMPILED_MIN_VOCAB):
        logits = tf.constant(_randn(1, 2, vocab_size, seed=22))
        sums = {
            k: [float(s) for s in cross_entropy_sums(logits, labels, 0.1, kernels=k)]
            for k in ("keras", "cpu")
        }
        np.testing.assert_allclose(sums["cpu"], sums["keras"], rtol=1e-6)
    assert not cross_entropy.applies(tf.zeros((1, 2, 13)))
    assert cross_entropy.applies(tf.zeros((1, 2, cross_entropy.COMPILED_MIN_VOCAB)))


# The private Keras attributes behind keras_internals: where this Keras keeps them.


def test_adam_slots_are_the_moment_variables_keras_adam_lists():
    weights = [keras.Variable(np.ones((3, 2), "float32"), name=n) for n in ("a", "b")]
    adam = keras.optimizers.Adam(name="adam")
    adam.build(weights)
    by_path = {v.path: v for v in adam.variables}
    for weight in weights:
        m, v = keras_internals.adam_slots(adam, weight)
        assert m is by_path[f"adam/{weight.name}_momentum"].value
        assert v is by_path[f"adam/{weight.name}_velocity"].value


def test_moved_keras_internals_fail_loudly_naming_the_version_and_attribute():
    unbuilt = keras.optimizers.Adam()  # has no moment slots yet, as a Keras that moved them
    with pytest.raises(keras_internals.KerasInternalsError) as error:
        keras_internals.adam_slots(unbuilt, keras.Variable([1.0]))
    assert f"Keras {keras.__version__}" in str(error.value)
    assert "'_momentums'" in str(error.value)

    class NotAKerasOptimizer:
        pass

    with pytest.raises(keras_internals.KerasInternalsError, match="_all_reduce_sum_gradients"):
        keras_internals.skip_gradient_all_reduce(NotAKerasOptimizer)


def _first_adam_update(gradient, learning_rate, epsilon, beta_1=0.9, beta_2=0.999):
    """Keras Adam's first update of a weight (bias-corrected rate, epsilon outside)."""
    rate = learning_rate * np.sqrt(1 - beta_2) / (1 - beta_1)
    m, v = (1 - beta_1) * gradient, (1 - beta_2) * gradient**2
    return -rate * m / (np.sqrt(v) + epsilon)


@pytest.mark.parametrize("fused", [False, True])
def test_reduced_gradient_adam_applies_each_replicas_gradient_unsummed(fused):
    # With epsilon 1, Adam's first update tells a gradient of 1 from the sum of two
    # replicas' gradients of 1, which Keras's optimizer would apply.
    unsummed, summed = (_first_adam_update(g, 0.3, 1.0) for g in (1.0, 2.0))
    assert abs(summed - unsummed) > 0.1 * abs(unsummed)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        weight = keras.Variable([0.0])
        adam = _ReducedGradientAdam(fused=fused, learning_rate=0.3, epsilon=1.0, name="adam")
        adam.build([weight])

    def replica_step():
        adam.apply([tf.constant([1.0])], [weight])  # each replica's gradient: 1

    tf.function(lambda: strategy.run(replica_step))()
    for replica_value in strategy.experimental_local_results(weight.value):
        np.testing.assert_allclose(replica_value.numpy(), [unsummed], rtol=1e-5)


# The decoding cache's in-place write against the copying scatter.


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_cache_write_equals_scatter_update_in_a_search_loop(jit):
    """Slots written in order while rows are reordered every step, as a beam search does."""
    rows, heads, length, size = 6, 2, 5, 4
    start = np.zeros((rows, heads, length, size), "float32")
    updates = tf.constant(_randn(length, rows, heads, size, seed=22))
    parents = tf.constant(np.random.default_rng(23).integers(0, rows, (length, rows)), tf.int32)

    def run(write):
        def body(i, cache):
            slots = tf.stack(
                [
                    tf.broadcast_to(tf.range(rows)[:, None], (rows, heads)),
                    tf.broadcast_to(tf.range(heads)[None, :], (rows, heads)),
                    tf.fill((rows, heads), i),
                ],
                axis=-1,
            )
            cache = write(cache, slots, updates[i])
            return i + 1, tf.gather(cache, parents[i])

        loop = tf.function(
            lambda c: tf.while_loop(lambda i, _: i < length, body, (0, c))[1], jit_compile=jit
        )
        return loop(tf.constant(start)).numpy()

    expected = start.copy()  # the same loop in NumPy: write slot i, then reorder the rows
    for i in range(length):
        expected[:, :, i] = updates[i].numpy()
        expected = expected[parents[i].numpy()]
    written = run(cache_write.write_slot)
    np.testing.assert_array_equal(written, expected)
    np.testing.assert_array_equal(run(ops.scatter_update), expected)
    np.testing.assert_array_equal(start, 0.0)  # the caller's zeros untouched
