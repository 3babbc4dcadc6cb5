"""Mixed precision and XLA in the training step: fewer bits, the same updates.

- A mixed_bfloat16 run's and a mixed_float16 run's per-token loss track the float32 run's
  pass by pass over the same batches from the same initial weights, while all fall far
  below where they began.
- Under mixed_float16, dynamic loss scaling skips an update whose gradients overflow
  (weights, step and Adam's moments untouched), halves the scale, and doubles it again
  after a run of finite updates.
- Under mixed_bfloat16 the matrix products run in bfloat16 but every softmax (attention
  weights, and the loss's compiled forward and backward programs) runs in float32, and the
  loss equals a float64 recomputation from the model's own logits.
- The XLA-compiled step makes the same update as the plain TensorFlow step, the step
  with CPU kernels the same as the step with the Keras formulation (plain and XLA), and
  the optimizer's fused Adam kernel the same update as Keras's Adam.

(That the trainer's XLA step compiles once per batch shape, counted from XLA's own dump,
is tests/test_trainer.py's.)
"""

from __future__ import annotations

import dataclasses
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import hparams
from t2t_lite.models import build_transformer
from t2t_lite.training.loss import COMPILED_MIN_VOCAB, token_statistics
from t2t_lite.training.step import TrainStep, make_optimizer

VOCAB = 24
HP = hparams.override(
    hparams.get("transformer_tiny"),
    "hidden_size=32,filter_size=64,num_heads=2,dropout=0.0,label_smoothing=0.1",
)
LEARNING_RATE = 3e-3
TRACKING_STEPS = 40
# Largest gap allowed between the bfloat16 (or float16) and float32 per-token losses, in
# nats, each averaged over one pass through the run's 4 batches. bfloat16 keeps 8
# significant bits (relative rounding 2^-9 = 0.2%); the loss falls by more than 1 nat.
# Single updates are compared through the pass average because late in this run the
# copy task is being learnt in jumps, and rounding moves a jump by an update or two
# (per-update gaps then reach ~0.09 nats while the passes agree within ~0.03).
LOSS_TOLERANCE = 0.04


def _copy_batch(rng, sentences: int, length: int) -> dict:
    """A copy-task batch: random symbols, EOS (1), zero padding; targets = inputs."""
    ids = np.zeros((sentences, length), np.int64)
    for row in range(sentences):
        size = int(rng.integers(2, length))
        ids[row, : size - 1] = rng.integers(2, VOCAB, size - 1)
        ids[row, size - 1] = 1
    return {"inputs": ids, "targets": ids.copy()}


def _batches(count: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [_copy_batch(rng, 16, 12) for _ in range(count)]


@pytest.fixture(scope="module")
def initial_weights():
    keras.utils.set_random_seed(0)
    return build_transformer(HP, VOCAB).get_weights()


def _train(hp, weights, batches, jit_compile=False, snapshots=None, **optimizer_args):
    """Trains a fresh model from `weights`, one update per batch on one device.

    Args:
        snapshots: if a list, the model's weights before each update are appended to it.

    Returns:
        (the model, per update the step's result as Python floats).
    """
    model = build_transformer(hp, VOCAB)
    model.set_weights(weights)
    optimizer = make_optimizer(hp, LEARNING_RATE, **optimizer_args)
    optimizer.build(model.trainable_variables)
    step = TrainStep(
        model, optimizer, tf.distribute.get_strategy(), hp.label_smoothing, jit_compile=jit_compile
    )
    spec = {key: tf.TensorSpec([None, None], tf.int64) for key in batches[0]}
    dataset = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)
    iterator = iter(dataset)
    results = []
    for _ in batches:
        if snapshots is not None:
            snapshots.append(model.get_weights())
        results.append({key: float(value) for key, value in step.train(iterator).items()})
    return model, results


@pytest.fixture(scope="module")
def float32_losses(initial_weights):
    """Per-token loss of every update of the float32 run over the tracking batches."""
    _, full = _train(HP, initial_weights, _batches(4) * (TRACKING_STEPS // 4))
    return np.array([r["loss"] / r["tokens"] for r in full])


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_loss_tracks_float32(policy, initial_weights, float32_losses):
    batches = _batches(4) * (TRACKING_STEPS // 4)
    hp = dataclasses.replace(HP, dtype_policy=policy)
    # float16: a loss scale low enough that no update of this short run overflows (the
    # overflow path has its own test below), so the runs stay update for update aligned.
    args = {"initial_loss_scale": 2.0**8} if policy == "mixed_float16" else {}
    model, mixed = _train(hp, initial_weights, batches, **args)
    assert model.compute_dtype == policy.removeprefix("mixed_")
    assert model.variable_dtype == "float32"
    if policy == "mixed_float16":
        assert all(np.isfinite(r["grad_norm"]) and r["loss_scale"] == 2.0**8 for r in mixed)
    else:
        assert all("loss_scale" not in r for r in mixed)
    mixed_loss = np.array([r["loss"] / r["tokens"] for r in mixed])
    assert float32_losses[0] - float32_losses[-1] > 1.0, float32_losses
    gap = np.abs(mixed_loss - float32_losses)
    passes = np.abs(mixed_loss - float32_losses).reshape(-1, 4)  # per pass over the batches
    pass_gap = np.abs((mixed_loss - float32_losses).reshape(-1, 4).mean(axis=1))
    assert pass_gap.max() < LOSS_TOLERANCE, (pass_gap, passes)
    # The low-precision type really is in use: the runs differ beyond float32 rounding.
    assert gap.max() > 1e-4, gap


def test_float16_overflow_skips_the_update_and_halves_the_loss_scale(initial_weights):
    hp = dataclasses.replace(HP, dtype_policy="mixed_float16")
    model = build_transformer(hp, VOCAB)
    model.set_weights(initial_weights)
    # 2^24 times a summed loss: the backward pass overflows float16 (max 65,504).
    optimizer = make_optimizer(hp, LEARNING_RATE, initial_loss_scale=2.0**24,
                               loss_scale_growth_steps=3)  # fmt: skip
    optimizer.build(model.trainable_variables)
    step = TrainStep(model, optimizer, tf.distribute.get_strategy(), hp.label_smoothing)
    batches = _batches(30, seed=2)
    spec = {key: tf.TensorSpec([None, None], tf.int64) for key in batches[0]}
    iterator = iter(tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec))
    results = []
    while int(optimizer.iterations.numpy()) == 0:
        results.append({key: float(value) for key, value in step.train(iterator).items()})
        if len(results) == 1:  # skipped: weights, step and Adam's moments untouched
            for weight, start in zip(model.get_weights(), initial_weights):
                np.testing.assert_array_equal(weight, start)
            moments = [
                v for v in optimizer.inner_optimizer.variables if "momentum" in v.path or
                "velocity" in v.path
            ]  # fmt: skip
            assert len(moments) == 2 * len(model.trainable_variables)
            assert not any(np.any(v.numpy()) for v in moments)
        assert len(results) < 20, results
    skipped = len(results) - 1
    assert skipped >= 1
    # Each skipped update halved the scale; the first finite one ran at the halved scale
    # and reports its true (unscaled) gradient norm.
    assert [r["loss_scale"] for r in results] == [2.0 ** (24 - i) for i in range(skipped + 1)]
    assert all(not np.isfinite(r["grad_norm"]) for r in results[:-1])
    assert 0 < results[-1]["grad_norm"] < 100
    moved = max(np.abs(w - s).max() for w, s in zip(model.get_weights(), initial_weights))
    assert moved > 1e-4
    # Three finite updates in a row double the scale.
    scale = results[-1]["loss_scale"]
    step.train(iterator), step.train(iterator)
    assert int(optimizer.iterations.numpy()) == 3
    assert float(optimizer.dynamic_scale.numpy()) == 2 * scale


def _op_dtypes(graph: tf.Graph, op_types: set) -> list:
    """(op type, dtype attribute T) of every op of `op_types` in `graph`."""
    return [(op.type, op.get_attr("T")) for op in graph.get_operations() if op.type in op_types]


@pytest.mark.parametrize("kernels", ["cpu", "keras"])
def test_softmax_and_loss_run_in_float32_under_mixed_bfloat16(kernels):
    # A vocabulary for which the CPU kernels compute the loss with their XLA programs.
    hp = dataclasses.replace(HP, dtype_policy="mixed_bfloat16", kernels=kernels)
    keras.utils.set_random_seed(5)
    model = build_transformer(hp, COMPILED_MIN_VOCAB)
    batch = _batches(1)[0]
    spec = {key: tf.TensorSpec([None, None], tf.int64) for key in batch}

    @tf.function(input_signature=[spec])
    def loss_and_gradients(features):
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            stats = token_statistics(logits, features["targets"], 0.1, kernels=kernels)
        return stats, tape.gradient(stats["loss"], model.trainable_variables)

    graph = loss_and_gradients.get_concrete_function().graph
    softmaxes = _op_dtypes(graph, {"Softmax", "LogSoftmax", "SoftmaxCrossEntropyWithLogits"})
    products = _op_dtypes(graph, {"MatMul", "BatchMatMulV2", "Einsum"})
    # 2 encoder + 2 x 2 decoder attention blocks.
    assert len(softmaxes) >= 6
    assert {dtype for _, dtype in softmaxes} == {tf.float32}
    assert tf.bfloat16 in {dtype for _, dtype in products}
    loss_calls = [
        op
        for op in graph.get_operations()
        if "f" in op.node_def.attr
        and re.search(r"_(forward|backward)", op.node_def.attr["f"].func.name)
    ]
    if kernels == "cpu":
        # The loss's compiled forward and backward programs take float32 logits.
        assert len(loss_calls) == 2
        assert all(op.inputs[0].dtype == tf.float32 for op in loss_calls)
    else:
        # Plain ops: the loss's log-softmax (listed above) and its gradient in float32.
        assert not loss_calls
        assert ("LogSoftmax", tf.float32) in softmaxes
        assert {dtype for _, dtype in _op_dtypes(graph, {"Exp"})} == {tf.float32}

    logits = model(batch, training=False)
    assert logits.dtype == tf.float32
    stats = token_statistics(logits, batch["targets"], 0.1)
    z = logits.numpy().astype(np.float64)
    log_p = z - z.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    labels = batch["targets"]
    nll = -np.take_along_axis(log_p, labels[..., None], -1)[..., 0]
    loss = 0.9 * nll - 0.1 * log_p.mean(-1)
    expected = float((loss * (labels != 0)).sum())
    assert float(stats["loss"]) == pytest.approx(expected, rel=1e-5)


def test_xla_step_makes_the_same_update_as_the_plain_step(initial_weights):
    # Adam's first steps move a weight by lr * g / (|g| + eps): with the default 1e-9, a
    # gradient that is zero up to rounding (the key biases', to which softmax is
    # invariant) would become a full +-lr step whose sign is rounding noise.
    hp = dataclasses.replace(HP, adam_epsilon=1e-4)
    batches = _batches(2, seed=1)
    plain_model, plain = _train(hp, initial_weights, batches, jit_compile=False)
    xla_model, xla = _train(hp, initial_weights, batches, jit_compile=True)
    for a, b in zip(plain, xla, strict=True):
        assert a["tokens"] == b["tokens"]
        for key in ("loss", "nll", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-4), key
    start = [w for w in initial_weights]
    moved = max(np.abs(p - w).max() for p, w in zip(plain_model.get_weights(), start))
    gap = max(
        np.abs(p - x).max() for p, x in zip(plain_model.get_weights(), xla_model.get_weights())
    )
    assert moved > 1e-3
    assert gap < 1e-3 * moved


@pytest.mark.parametrize("kernels, fused_ops", [("cpu", 3), ("keras", 0)])
def test_adam_of_either_kernel_set_matches_keras_adam(kernels, fused_ops):
    shapes = [(5, 3), (7,), (2, 3, 4)]
    rng = np.random.default_rng(4)
    start = [rng.normal(size=shape).astype(np.float32) for shape in shapes]
    ours_vars = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(start)]
    keras_vars = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(start)]
    ours = make_optimizer(dataclasses.replace(HP, kernels=kernels), 1e-2)
    stock = keras.optimizers.Adam(
        1e-2, beta_1=HP.adam_beta1, beta_2=HP.adam_beta2, epsilon=HP.adam_epsilon
    )
    ours.build(ours_vars)
    stock.build(keras_vars)
    apply = tf.function(lambda grads: ours.apply(grads, ours_vars))
    for _ in range(3):
        grads = [tf.constant(rng.normal(size=shape), tf.float32) for shape in shapes]
        apply(grads)
        stock.apply(grads, keras_vars)
    graph = apply.get_concrete_function(grads).graph
    assert [op.type for op in graph.get_operations()].count("ResourceApplyAdam") == fused_ops
    for a, b, w in zip(ours_vars, keras_vars, start):
        # Weights move by about lr = 1e-2 per step; rounding differs at 1e-4 of that.
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-6)
        assert np.abs(a.numpy() - w).max() > 1e-2
    # The same optimizer variables (moments of the same weights), whatever the kernels.
    assert [v.name for v in ours.variables] == [v.name for v in stock.variables]
    for a, b in zip(ours.variables, stock.variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-8)


# Smallest |ReLU pre-activation| the kernel-set comparison below needs. ReLU's derivative
# jumps at 0, so a unit whose pre-activation lies within float rounding of 0 can be on in
# one run and off in the other: that token's whole gradient through the unit then differs,
# and Adam's normalised first steps turn this into up to a full step of the affected
# weights. The kernel sets' forward passes differ by rounding only (up to ~1e-6 in the
# pre-activations, the most under XLA, whose CPU code, and so whose rounding, depends on
# the instruction set: AVX2, AVX-512, ...); batches whose pre-activations all keep 10x
# that from 0 compare the kernels alone, on every CPU.
RELU_MARGIN = 1e-5


def _relu_margin(weights_and_batches) -> float:
    """Smallest |pre-activation| of any feed-forward ReLU at a non-padding position, over
    (weights, batch) pairs, computed with the Keras formulation. (Padding positions reach
    no loss: they are masked out of attention and of the loss.)"""
    model = build_transformer(dataclasses.replace(HP, kernels="keras"), VOCAB)
    seen = []
    for key, layers in (("inputs", model.encoder_layers), ("targets", model.decoder_layers)):
        for layer in layers:
            dense = layer.feed_forward.filter_dense  # its activation gets [B*T, d_ff]
            dense.activation = lambda x, key=key, relu=dense.activation: (
                seen.append((key, x)) or relu(x)
            )
    margin = np.inf
    for weights, batch in weights_and_batches:
        model.set_weights(weights)
        seen.clear()
        model(batch, training=True)
        for key, x in seen:
            margin = min(margin, np.abs(x.numpy()[batch[key].reshape(-1) != 0]).min())
    return margin


@pytest.mark.parametrize("jit_compile", [False, True], ids=["plain", "xla"])
def test_cpu_kernel_step_makes_the_same_update_as_the_keras_step(initial_weights, jit_compile):
    # Dropout 0 (HP): the kernel sets' random masks differ. Epsilon as in the XLA test above.
    hp = dataclasses.replace(HP, adam_epsilon=1e-4)
    # Batches chosen for their ReLU margin (6e-5; see RELU_MARGIN). With seed=3 a decoder
    # pre-activation is 7e-8, and its sign under XLA varies with formulation and CPU.
    batches = _batches(2, seed=11)
    before_updates = []
    runs = {
        kernels: _train(dataclasses.replace(hp, kernels=kernels), initial_weights, batches,
                        jit_compile=jit_compile,
                        snapshots=before_updates if kernels == "keras" else None)
        for kernels in ("keras", "cpu")
    }  # fmt: skip
    margin = _relu_margin(zip(before_updates, batches))
    assert margin > RELU_MARGIN, f"a ReLU pre-activation within {margin:.1e} of 0: other batches"
    for a, b in zip(runs["keras"][1], runs["cpu"][1], strict=True):
        assert a["tokens"] == b["tokens"]
        for key in ("loss", "nll", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-4), key
    keras_weights, cpu_weights = (runs[k][0].get_weights() for k in ("keras", "cpu"))
    moved = max(np.abs(w - s).max() for w, s in zip(keras_weights, initial_weights))
    gap = max(np.abs(a - b).max() for a, b in zip(keras_weights, cpu_weights))
    assert moved > 1e-3
    assert gap < 1e-3 * moved
