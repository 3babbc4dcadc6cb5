"""The distributed training step makes the update of one big batch on one device.

On a tiny Transformer with dropout 0 (so every run is deterministic):
- two replicas fed unevenly padded halves of a global batch end with the weights,
  loss and gradient norm of one device fed the whole batch (1e-5, two Adam updates);
- gradient accumulation over micro-batches equals one update on their union, on one
  device and on two replicas;
- the update is normalised by the global count of target tokens, which differs from
  the average of per-replica means when replicas hold different numbers of tokens;
- evaluation on two replicas sums the loss, NLL and argmax hits of the whole batch;
- two worker processes under MultiWorkerMirroredStrategy end with identical weights.
The references are plain Keras: a GradientTape over `keras.losses.categorical_crossentropy`
and a stock `keras.optimizers.Adam`, independent of `TrainStep` and `token_statistics`.
"""

import dataclasses
import functools
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import hparams
from t2t_lite.models import build_transformer
from t2t_lite.training import distribute
from t2t_lite.training.step import TrainStep, make_optimizer

REPO = Path(__file__).resolve().parents[1]
VOCAB = 12  # ids 0 (padding), 1 (EOS), symbols 2..11
EOS = 1
LEARNING_RATE = 0.01
TOLERANCE = 1e-5
# With the paper's epsilon of 1e-9, Adam's first updates are lr * sign(g) whatever the
# gradient's size, so a wrongly scaled gradient would go unseen; epsilon 1e-3 makes
# the update depend on the gradient's magnitude as well as its direction.
HP = hparams.override(
    hparams.get("transformer_tiny"),
    "num_encoder_layers=1,num_decoder_layers=1,hidden_size=32,filter_size=64,num_heads=4,"
    "dropout=0.0,attention_dropout=0.0,relu_dropout=0.0,label_smoothing=0.1,adam_epsilon=0.001",
)

# (source length, target length) of each sentence, EOS included; one row per update,
# one tuple of sentences per replica. Replica 0 holds 3 + 5 = 8 target tokens and
# replica 1 holds 11 + 6 = 17 in the first update (13 and 5 in the second), and their
# padded lengths differ, so a mean of per-replica means weighs tokens unequally.
UNEVEN_STEPS = (
    (((4, 3), (2, 5)), ((9, 11), (7, 6))),
    (((6, 9), (8, 4)), ((3, 2), (5, 3))),
)


def _sentences(lengths, seed):
    """Random (inputs, targets) id lists of the given lengths, each ending in EOS."""
    rng = np.random.default_rng(seed)
    return [
        (
            list(rng.integers(2, VOCAB, size=s - 1)) + [EOS],
            list(rng.integers(2, VOCAB, size=t - 1)) + [EOS],
        )
        for s, t in lengths
    ]


def _batch(sentences, extra_padding=0):
    """{"inputs": int64 [B, S], "targets": int64 [B, T]}, padded with 0 to the longest + extra."""
    batch = {}
    for index, key in enumerate(("inputs", "targets")):
        length = max(len(sentence[index]) for sentence in sentences) + extra_padding
        rows = [sentence[index] + [0] * (length - len(sentence[index])) for sentence in sentences]
        batch[key] = tf.constant(rows, dtype=tf.int64)
    return batch


@functools.cache
def _mirrored():
    # One strategy for the whole module: its collectives are numbered per strategy, and
    # two strategies in one process would reuse numbers for differently shaped tensors.
    strategy = distribute.make_strategy("mirrored", cpu_replicas=2)
    assert strategy.num_replicas_in_sync == 2
    return strategy


@pytest.fixture(scope="module")
def initial_weights():
    keras.utils.set_random_seed(0)
    return build_transformer(HP, VOCAB).get_weights()


def _model(strategy, weights, hp=HP):
    with strategy.scope():
        model = build_transformer(hp, VOCAB)
    model.set_weights(weights)
    return model


def _values(model):
    return [variable.numpy() for variable in model.trainable_variables]


def _train(strategy, steps, weights, accumulation_steps=1, hp=HP, **optimizer_args):
    """Runs one `TrainStep.train` per entry of `steps`, starting from `weights`.

    Args:
        steps: per update, the batches in the order the distributed iterator hands them
            out: replica 0, replica 1, ... for each of the `accumulation_steps` rounds.

    Returns:
        (per update: the trainable weights after it, and its result as Python floats).
    """
    model = _model(strategy, weights, hp)
    with strategy.scope():
        optimizer = make_optimizer(hp, LEARNING_RATE, **optimizer_args)
        optimizer.build(model.trainable_variables)
    batches = [tf.data.Dataset.from_tensors(batch) for step in steps for batch in step]
    dataset = functools.reduce(lambda a, b: a.concatenate(b), batches)
    iterator = iter(strategy.distribute_datasets_from_function(lambda _: dataset))
    train_step = TrainStep(model, optimizer, strategy, HP.label_smoothing, accumulation_steps)
    updates = []
    for _ in steps:
        result = {key: float(value) for key, value in train_step.train(iterator).items()}
        updates.append((_values(model), result))
    for variable in model.trainable_variables:
        copies = strategy.experimental_local_results(variable.value)
        for copy in copies[1:]:
            np.testing.assert_array_equal(copy.numpy(), copies[0].numpy())
    return updates


def _max_difference(weights_a, weights_b):
    return max(float(np.max(np.abs(a - b))) for a, b in zip(weights_a, weights_b, strict=True))


def _reference_statistics(model, batch):
    """Token means of the training loss, NLL and accuracy, and the loss's gradient.

    Plain Keras: Keras's label smoothing is q' = (1 - eps) * one_hot + eps / V, the
    paper's; means run over the non-padding target tokens of the whole `batch`.
    """
    labels = batch["targets"]
    weights = tf.cast(labels != 0, tf.float32)  # [B, T]
    tokens = tf.reduce_sum(weights)
    with tf.GradientTape() as tape:
        logits = model(batch, training=True)  # [B, T, V]
        smoothed = keras.losses.categorical_crossentropy(
            tf.one_hot(labels, VOCAB),
            logits,
            from_logits=True,
            label_smoothing=HP.label_smoothing,
        )  # [B, T]
        loss = tf.reduce_sum(smoothed * weights) / tokens
    gradient = tape.gradient(loss, model.trainable_variables)
    nll = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    hits = tf.cast(tf.argmax(logits, axis=-1) == labels, tf.float32)
    means = {
        "loss": float(loss),
        "nll": float(tf.reduce_sum(nll * weights) / tokens),
        "correct": float(tf.reduce_sum(hits * weights) / tokens),
        "tokens": float(tokens),
        "grad_norm": float(tf.linalg.global_norm(gradient)),
    }
    return means, gradient


def _reference_training(global_batches, weights):
    """One device, plain Keras: per batch, the gradient of the token-mean loss, then a
    stock Adam step. Returns per update (weights after it, statistics)."""
    model = _model(tf.distribute.get_strategy(), weights)
    adam = keras.optimizers.Adam(
        LEARNING_RATE, beta_1=HP.adam_beta1, beta_2=HP.adam_beta2, epsilon=HP.adam_epsilon
    )
    updates = []
    for batch in global_batches:
        means, gradient = _reference_statistics(model, batch)
        adam.apply(gradient, model.trainable_variables)
        updates.append((_values(model), means))
    return updates


def _assert_same_training(updates, reference, weights):
    """Weights after every update within 1e-5, and the same token-mean statistics."""
    for (values, result), (expected_values, expected) in zip(updates, reference, strict=True):
        assert _max_difference(values, expected_values) < TOLERANCE
        assert result["tokens"] == expected["tokens"]
        assert "correct" not in result  # training counts no argmax hits
        for key in ("loss", "nll"):
            assert result[key] / result["tokens"] == pytest.approx(expected[key], rel=TOLERANCE)
        assert result["grad_norm"] == pytest.approx(expected["grad_norm"], rel=TOLERANCE)
    # Each Adam step moves weights by up to LEARNING_RATE: far more than the tolerance.
    assert _max_difference(reference[-1][0], weights) > 100 * TOLERANCE


def _uneven_steps():
    """Per update: the sentences of each replica, and its (replica 0, replica 1) batches."""
    steps = []
    for number, replicas in enumerate(UNEVEN_STEPS):
        parts = [_sentences(lengths, seed=10 * number + r) for r, lengths in enumerate(replicas)]
        # Replica 1 gets three extra padding columns on top of its own longest sentence.
        steps.append((parts, (_batch(parts[0]), _batch(parts[1], extra_padding=3))))
    return steps


@pytest.fixture(scope="module")
def two_replica_run(initial_weights):
    """Two updates by MirroredStrategy over two CPUs on the batches of `_uneven_steps`."""
    return _train(_mirrored(), [batches for _, batches in _uneven_steps()], initial_weights)


def test_two_replicas_match_one_device_with_uneven_padding(initial_weights, two_replica_run):
    steps = _uneven_steps()
    shapes = [(tuple(b["inputs"].shape), tuple(b["targets"].shape)) for b in steps[0][1]]
    assert shapes == [((2, 4), (2, 5)), ((2, 12), (2, 14))]
    global_batches = [_batch(parts[0] + parts[1]) for parts, _ in steps]
    one_device = _train(
        tf.distribute.get_strategy(), [[b] for b in global_batches], initial_weights
    )
    for (two_values, two), (one_values, one) in zip(two_replica_run, one_device, strict=True):
        assert _max_difference(two_values, one_values) < TOLERANCE
        assert two["tokens"] == one["tokens"]
        for key in ("loss", "grad_norm"):
            assert two[key] == pytest.approx(one[key], rel=TOLERANCE)
    # Token counts by hand (UNEVEN_STEPS); the rest from the plain-Keras reference.
    assert [result["tokens"] for _, result in two_replica_run] == [25.0, 18.0]
    reference = _reference_training(global_batches, initial_weights)
    _assert_same_training(two_replica_run, reference, initial_weights)
    _assert_same_training(one_device, reference, initial_weights)


def test_evaluation_on_two_replicas_sums_the_whole_batch(initial_weights):
    (parts, batches), _ = _uneven_steps()
    strategy = _mirrored()
    model = _model(strategy, initial_weights)
    with strategy.scope():
        optimizer = make_optimizer(HP, LEARNING_RATE)
    dataset = tf.data.Dataset.from_tensors(batches[0]).concatenate(
        tf.data.Dataset.from_tensors(batches[1])
    )
    distributed = strategy.distribute_datasets_from_function(lambda _: dataset)
    batch = next(iter(distributed))
    step = TrainStep(model, optimizer, strategy, HP.label_smoothing)
    evaluate = step.evaluate_for(distributed.element_spec)
    result = {key: float(value) for key, value in evaluate(batch).items()}
    expected, _ = _reference_statistics(
        _model(tf.distribute.get_strategy(), initial_weights), _batch(parts[0] + parts[1])
    )
    assert result["tokens"] == expected["tokens"] == 25.0
    for key in ("loss", "nll", "correct"):
        assert result[key] / result["tokens"] == pytest.approx(expected[key], rel=TOLERANCE)
    assert 0 < result["correct"] < result["tokens"]  # some hits, some misses: a real count


def test_update_uses_global_token_count_not_mean_of_replica_means(initial_weights, two_replica_run):
    (parts, batches), _ = _uneven_steps()
    model = _model(tf.distribute.get_strategy(), initial_weights)
    global_means, global_gradient = _reference_statistics(model, _batch(parts[0] + parts[1]))
    _, gradient_0 = _reference_statistics(model, batches[0])
    _, gradient_1 = _reference_statistics(model, batches[1])
    # Global mean = (8 * mean_0 + 17 * mean_1) / 25, not (mean_0 + mean_1) / 2.
    for a, b, c in zip(gradient_0, gradient_1, global_gradient, strict=True):
        np.testing.assert_allclose((8 * a + 17 * b) / 25, c, atol=1e-6)
    mean_of_means = [(a + b) / 2 for a, b in zip(gradient_0, gradient_1)]
    norm = global_means["grad_norm"]
    assert abs(float(tf.linalg.global_norm(mean_of_means)) - norm) > 1e-3 * norm
    values, result = two_replica_run[0]
    assert result["grad_norm"] == pytest.approx(norm, rel=TOLERANCE)
    [(right, _)] = _reference_training([_batch(parts[0] + parts[1])], initial_weights)
    assert _max_difference(values, right) < TOLERANCE
    wrong = _model(tf.distribute.get_strategy(), initial_weights)
    keras.optimizers.Adam(
        LEARNING_RATE, beta_1=HP.adam_beta1, beta_2=HP.adam_beta2, epsilon=HP.adam_epsilon
    ).apply(mean_of_means, wrong.trainable_variables)
    assert _max_difference(values, _values(wrong)) > 100 * TOLERANCE


def test_float16_loss_scaling_on_two_replicas(initial_weights):
    hp = dataclasses.replace(HP, dtype_policy="mixed_float16")
    steps = _uneven_steps() * 4
    replica_batches = [batches for _, batches in steps]
    global_batches = [[_batch(parts[0] + parts[1])] for parts, _ in steps]
    # 2^16 times a summed loss overflows float16 in the backward pass: both replicas skip
    # the update together (their copies stay equal: `_train` checks) and halve the scale
    # until it fits. Where an overflow happens depends on each replica's own batch.
    high = {"initial_loss_scale": 2.0**16, "loss_scale_growth_steps": 1000}
    two = _train(_mirrored(), replica_batches, initial_weights, hp=hp, **high)
    finite = [bool(np.isfinite(result["grad_norm"])) for _, result in two]
    assert not finite[0] and any(finite), finite
    scales = [result["loss_scale"] for _, result in two]
    assert scales[0] == 2.0**16
    for scale, next_scale, applied in zip(scales, scales[1:], finite):
        assert next_scale == (scale if applied else scale / 2)
    assert _max_difference(two[0][0], initial_weights) == 0.0
    assert _max_difference(two[-1][0], initial_weights) > 1e-4
    # With a scale that never overflows, two replicas make one device's float16 updates.
    low = {"initial_loss_scale": 2.0**4}
    two = _train(_mirrored(), replica_batches, initial_weights, hp=hp, **low)
    one = _train(tf.distribute.get_strategy(), global_batches, initial_weights, hp=hp, **low)
    for (_, two_result), (_, one_result) in zip(two, one, strict=True):
        assert np.isfinite(two_result["grad_norm"]) and np.isfinite(one_result["grad_norm"])
        assert two_result["loss_scale"] == one_result["loss_scale"] == 2.0**4
        # float16 rounds per-replica and whole-batch sums differently (and Adam's
        # normalised steps carry that into near-zero gradients' weights), so the runs
        # agree to float16 precision in their losses, not bit for bit in every weight.
        assert two_result["tokens"] == one_result["tokens"]
        assert two_result["loss"] == pytest.approx(one_result["loss"], rel=1e-2)
    assert two[0][1]["grad_norm"] == pytest.approx(one[0][1]["grad_norm"], rel=1e-2)
    assert two[-2][1]["loss"] < 0.9 * two[0][1]["loss"]  # the same batch, 3 rounds later


def test_accumulation_matches_one_big_batch_on_one_device(initial_weights):
    # Micro-batches A (2 sentences) and B (3 sentences) of different padded lengths.
    steps = [
        (_sentences([(5, 4), (3, 7)], seed=1), _sentences([(10, 12), (2, 2), (6, 3)], seed=2)),
        (_sentences([(8, 2), (4, 9)], seed=3), _sentences([(3, 3), (7, 5), (9, 6)], seed=4)),
    ]
    accumulated = _train(
        tf.distribute.get_strategy(),
        [[_batch(a), _batch(b)] for a, b in steps],
        initial_weights,
        accumulation_steps=2,
    )
    assert [result["tokens"] for _, result in accumulated] == [28.0, 25.0]
    reference = _reference_training([_batch(a + b) for a, b in steps], initial_weights)
    _assert_same_training(accumulated, reference, initial_weights)


def test_two_replicas_with_accumulation_match_one_device_on_the_union(initial_weights):
    lengths = [
        # Rounds 1 and 2, replica 0 then replica 1: every micro-batch padded differently.
        [(3, 2), (5, 4)],
        [(9, 11), (2, 3)],
        [(6, 6), (7, 8)],
        [(4, 5), (12, 13)],
        [(8, 3), (2, 9)],
        [(5, 5), (3, 2)],
        [(10, 4), (6, 7)],
        [(2, 2), (11, 10)],
    ]
    micro = [_sentences(pair, seed=20 + i) for i, pair in enumerate(lengths)]
    steps = [micro[:4], micro[4:]]
    accumulated = _train(
        _mirrored(),
        [[_batch(m) for m in step] for step in steps],
        initial_weights,
        accumulation_steps=2,
    )
    assert [result["tokens"] for _, result in accumulated] == [52.0, 42.0]
    reference = _reference_training([_batch(sum(step, [])) for step in steps], initial_weights)
    _assert_same_training(accumulated, reference, initial_weights)


def test_cpu_replicas_sum_by_one_add_without_a_collective():
    # Logical CPU devices share host memory: the sum is one add (on the first device),
    # which the other replica reads, not a ring collective over both.
    strategy = _mirrored()
    values = strategy.experimental_distribute_values_from_function(
        lambda context: tf.fill([3], float(context.replica_id_in_sync_group + 1))
    )

    def replica(value):
        return tf.distribute.get_replica_context().all_reduce("sum", value)

    reduce = tf.function(lambda values: strategy.run(replica, args=(values,)))
    for result in strategy.experimental_local_results(reduce(values)):
        assert result.numpy().tolist() == [3.0, 3.0, 3.0]
    operations = reduce.get_concrete_function(values).graph.get_operations()
    assert not [op.type for op in operations if op.type.startswith("Collective")]
    assert [op.type for op in operations if op.type in ("AddN", "AddV2")] == ["AddN"]


def test_make_strategy_refuses_contradictory_flags():
    with pytest.raises(ValueError, match="cpu_replicas=2.*one_device"):
        distribute.make_strategy("one_device", cpu_replicas=2)
    with pytest.raises(ValueError, match="unknown strategy 'gpu'"):
        distribute.make_strategy("gpu")
    with pytest.raises(ValueError, match="num_gpus=1"):
        distribute.make_strategy("auto", num_gpus=1)  # this machine has no GPU


WORKER_HPARAMS = (
    "num_encoder_layers=1,num_decoder_layers=1,hidden_size=32,filter_size=64,dropout=0.0,"
    "batch_size=256"
)
TINY_WORKER_HP = hparams.override(hparams.get("transformer_tiny"), WORKER_HPARAMS)


def _free_ports(count):
    """Ports the kernel handed out for port 0 (closed again for the workers to bind)."""
    ports = []
    for _ in range(count):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
    return ports


def _run_workers(output_dir, logs, steps, timeout):
    """Runs the trainer as worker 0 and worker 1 of one cluster on 127.0.0.1.

    Every worker is killed if any of them fails to start, fails, or outlives `timeout`.
    """
    cluster = {"worker": [f"127.0.0.1:{port}" for port in _free_ports(2)]}
    command = [
        sys.executable,
        "-m",
        "t2t_lite.trainer",
        "--strategy=multi_worker",
        "--problem=algorithmic_reverse",
        "--hparams_set=transformer_tiny",
        f"--hparams={WORKER_HPARAMS}",
        f"--output_dir={output_dir}",
        f"--train_steps={steps}",
        f"--save_every={steps}",
        "--eval_steps=1",
        "--log_every=1",
    ]
    deadline = time.monotonic() + timeout
    workers = []
    try:
        for index, log in enumerate(logs):
            config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
            env = dict(os.environ, TF_CONFIG=json.dumps(config), TF_CPP_MIN_LOG_LEVEL="2")
            with open(log, "w") as handle:
                workers.append(
                    subprocess.Popen(
                        command, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT
                    )
                )
        for worker in workers:
            worker.wait(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the workers did not finish in {timeout} s; logs: {logs}")
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    for worker, log in zip(workers, logs):
        if worker.returncode != 0:
            tail = Path(log).read_text()[-3000:]
            pytest.fail(f"worker exited with {worker.returncode}; end of {log}:\n{tail}")


@pytest.mark.slow
def test_two_workers_end_with_identical_weights(tmp_path):
    output_dir, steps = tmp_path / "run", 3
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    _run_workers(output_dir, logs, steps, timeout=240)
    # The chief (worker 0) owns output_dir; worker 1 saved the same checkpoint elsewhere.
    checkpoints = {path.parent for path in output_dir.rglob("checkpoint")}
    assert output_dir in checkpoints and len(checkpoints) == 2, checkpoints
    readers = [tf.train.load_checkpoint(str(folder)) for folder in sorted(checkpoints)]
    shapes = readers[0].get_variable_to_shape_map()
    assert shapes == readers[1].get_variable_to_shape_map()
    names = [name for name in shapes if not name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")]
    for name in names:
        np.testing.assert_array_equal(
            readers[0].get_tensor(name), readers[1].get_tensor(name), err_msg=name
        )
    # What was compared covers the weights and Adam's two moments of each of them.
    parameters = build_transformer(TINY_WORKER_HP, 12).count_params()  # 10 symbols + 2
    assert sum(int(np.prod(shapes[name])) for name in names) >= 3 * parameters
    step_names = [name for name in names if "iterations" in name]
    assert [int(readers[0].get_tensor(name)) for name in step_names] == [steps]
