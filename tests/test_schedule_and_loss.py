import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.kernels import cross_entropy
from t2t_lite.training import TransformerSchedule
from t2t_lite.training.loss import COMPILED_MIN_VOCAB, token_statistics


@pytest.mark.parametrize(
    "step, expected",
    [
        # lrate = 512^-0.5 * min(step^-0.5, step * 4000^-1.5), worked out by hand:
        # 512^-0.5 = 0.04419417, 4000^-1.5 = 3.952847e-06, 4000^-0.5 = 0.01581139.
        (1, 0.04419417 * 3.952847e-06),  # warmup: 1.746928e-07
        (4000, 0.04419417 * 0.01581139),  # the peak: 6.987712e-04
        (100000, 0.04419417 * 0.003162278),  # decay: 1.397542e-04
    ],
)
def test_schedule_matches_equation_3(step, expected):
    schedule = TransformerSchedule(512, 4000)
    assert float(schedule(step)) == pytest.approx(expected, rel=1e-5)


def test_schedule_is_safe_at_step_zero_and_peaks_at_warmup():
    schedule = TransformerSchedule(512, 4000)
    assert float(schedule(0)) == pytest.approx(float(schedule(1)))
    rates = [float(schedule(s)) for s in (3999, 4000, 4001)]
    assert rates[1] == max(rates)


@pytest.mark.parametrize(
    "step, factor",
    [
        # d_model 128, warmup 200, scale 0.5, a run of 1,000 updates cooling down over its
        # last 800: the factor is min(1, (1000 - step) / 800).
        (100, 1.0),  # before the cooldown: eq. 3 alone
        (200, 1.0),  # the cooldown's first step: (1000 - 200) / 800 = 1
        (600, 0.5),  # (1000 - 600) / 800
        (999, 1 / 800),  # the last update's rate
        (1000, 0.0),  # past the run (a resumed run with more steps would change the plan)
    ],
)
def test_cooldown_scales_equation_3_linearly_to_zero_at_the_runs_end(step, factor):
    # Eq. 3 by hand: 0.5 * 128^-0.5 * min(step^-0.5, step * 200^-1.5).
    eq3 = 0.5 * 128**-0.5 * min(step**-0.5, step * 200**-1.5)
    schedule = TransformerSchedule(128, 200, 0.5, total_steps=1000, cooldown_steps=800)
    assert float(schedule(step)) == pytest.approx(eq3 * factor, rel=1e-5, abs=1e-12)
    # Without a cooldown the same schedule is eq. 3.
    assert float(TransformerSchedule(128, 200, 0.5)(step)) == pytest.approx(eq3, rel=1e-5)


def test_schedule_serialises():
    schedule = TransformerSchedule(1024, 8000, scale=2.0, total_steps=9000, cooldown_steps=300)
    restored = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule)
    )
    assert isinstance(restored, TransformerSchedule)
    assert restored.get_config() == schedule.get_config()
    assert float(restored(123)) == pytest.approx(float(schedule(123)))


@pytest.mark.parametrize("kernel", [True, False], ids=["cpu_kernel", "keras"])
def test_label_smoothed_loss_by_hand(kernel):
    # Both ways of computing the sums: the CPU kernel's XLA programs and plain ops.
    # One sentence, vocabulary 3, eps = 0.1.
    # Token 1: uniform logits, label 2: -log p = log 3 for every class, so every term is log 3.
    # Token 2: logits (0, log 2, 0) -> p = (1/4, 1/2, 1/4), label 1:
    #   nll = log 2; the uniform term, mean of -log p, = (2 log 4 + log 2) / 3 = (5/3) log 2.
    # Token 3: label 0 is padding and must not count.
    logits = tf.constant([[[0.0, 0.0, 0.0], [0.0, math.log(2), 0.0], [5.0, -1.0, 2.0]]])
    labels = tf.constant([[2, 1, 0]])
    stats = token_statistics(logits, labels, label_smoothing=0.1)
    if kernel:  # the kernel itself: the cpu kernel set uses it from COMPILED_MIN_VOCAB on
        loss, nll = cross_entropy.cross_entropy_sums(logits, labels, 0.1)
        stats.update(loss=loss, nll=nll)
    log2, log3 = math.log(2), math.log(3)
    expected_loss = log3 + (0.9 * log2 + 0.1 * (5.0 / 3.0) * log2)
    assert float(stats["tokens"]) == 2.0
    assert float(stats["nll"]) == pytest.approx(log3 + log2, rel=1e-6)
    assert float(stats["loss"]) == pytest.approx(expected_loss, rel=1e-6)
    # Argmax hits: token 1 is a three-way tie (argmax 0, label 2), token 2 hits.
    assert float(stats["correct"]) == 1.0


def _compiled_programs(vocab_size: int, kernels: str) -> set:
    """Names of the XLA-compiled functions a traced loss and gradient call."""
    logits = tf.TensorSpec([None, None, vocab_size], tf.float32)

    @tf.function(input_signature=[logits, tf.TensorSpec([None, None], tf.int32)])
    def loss_and_gradient(z, labels):
        with tf.GradientTape() as tape:
            tape.watch(z)
            loss = token_statistics(z, labels, 0.1, accuracy=False, kernels=kernels)["loss"]
        return tape.gradient(loss, z)

    graph = loss_and_gradient.get_concrete_function().graph.as_graph_def()
    return {
        function.signature.name
        for function in graph.library.function
        if function.attr["_XlaMustCompile"].b
    }


def test_cpu_kernels_compile_the_loss_only_for_a_real_vocabulary():
    # A dozen symbols: plain ops, nothing compiled per batch shape. A subword vocabulary:
    # the forward and the written-out backward programs. The Keras formulation: never.
    assert _compiled_programs(13, "cpu") == set()
    assert len(_compiled_programs(COMPILED_MIN_VOCAB, "cpu")) == 2
    assert _compiled_programs(COMPILED_MIN_VOCAB, "keras") == set()


def test_loss_ignores_padding_columns():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 4, 7)).astype(np.float32)
    labels = np.array([[3, 4, 1, 0], [5, 1, 0, 0]])
    padded_logits = np.concatenate([logits, rng.normal(size=(2, 3, 7)).astype(np.float32)], 1)
    padded_labels = np.concatenate([labels, np.zeros((2, 3), np.int64)], 1)
    a = token_statistics(tf.constant(logits), tf.constant(labels), 0.1)
    b = token_statistics(tf.constant(padded_logits), tf.constant(padded_labels), 0.1)
    for key in a:
        assert float(a[key]) == pytest.approx(float(b[key]), rel=1e-6)
