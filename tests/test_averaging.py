"""Checkpoint averaging on real checkpoints: a small Keras 3 model trained with Adam, and a
t2t_lite Transformer run written by the trainer command, averaged by the averaging command
and read back by the decoder and exporter commands."""

import json
import os
import shutil
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
import warm_python
from conftest import shared_run_folder

from t2t_lite.runs import load_trained_model
from t2t_lite.runs.checkpoints import OBJECT_GRAPH_KEY
from t2t_lite.training.averaging import PROVENANCE_FILE, average_last_checkpoints

NUM_SAVES = 4
# The Transformer run: 8 steps, a checkpoint every 2 (ckpt-2 .. ckpt-8), the last 3 averaged.
TINY_HPARAMS = "hidden_size=32,filter_size=64,num_heads=2,batch_size=256,max_length=16"
TINY_STEPS, TINY_SAVE_EVERY, TINY_NUM_LAST = 8, 2, 3


def run_module(module, *args, timeout=300):
    """`python -m module args` with TensorFlow's C++ logging quiet; the CompletedProcess."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return warm_python.run(
        [sys.executable, "-m", module, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def trained_tiny_run(tmp_path_factory):
    """A transformer_tiny algorithmic_reverse run of the trainer command, once per session.

    Width 32 (the decoding tests' reverse run has 64), checkpoints at steps 2, 4, 6 and 8.
    """
    with shared_run_folder(tmp_path_factory, "algorithmic_reverse_tiny_cli_run") as output_dir:
        if tf.train.latest_checkpoint(str(output_dir)) is not None:
            return output_dir
        done = run_module(
            "t2t_lite.trainer",
            "--problem=algorithmic_reverse",
            "--hparams_set=transformer_tiny",
            f"--hparams={TINY_HPARAMS}",
            f"--output_dir={output_dir}",
            f"--train_steps={TINY_STEPS}",
            f"--save_every={TINY_SAVE_EVERY}",
            "--keep_checkpoints=10",
            f"--eval_every={TINY_STEPS}",
            "--eval_steps=1",
            f"--log_every={TINY_STEPS}",
        )
        assert done.returncode == 0, done.stderr[-3000:]
    return output_dir


def _model_and_optimizer(hidden: int = 8):
    model = keras.Sequential(
        [
            keras.Input(shape=(5,)),
            keras.layers.Dense(hidden, activation="relu"),
            keras.layers.Dense(3),
        ]
    )
    optimizer = keras.optimizers.Adam(learning_rate=0.05)
    optimizer.build(model.trainable_variables)
    return model, optimizer


def _train_and_save(output_dir, hidden: int = 8, steps: int = NUM_SAVES, first_step: int = 1):
    """Takes real Adam steps on random data and saves with a CheckpointManager after each."""
    keras.utils.set_random_seed(first_step)
    model, optimizer = _model_and_optimizer(hidden)
    step = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    manager = tf.train.CheckpointManager(checkpoint, str(output_dir), max_to_keep=10)
    rng = np.random.default_rng(first_step)
    for number in range(first_step, first_step + steps):
        x = rng.normal(size=(16, 5)).astype("float32")
        y = rng.normal(size=(16, 3)).astype("float32")
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        step.assign(number)
        manager.save(checkpoint_number=number)


def _restore(path):
    """Restores `path` into a freshly built model; returns (model, optimizer, step)."""
    model, optimizer = _model_and_optimizer()
    step = tf.Variable(-1, dtype=tf.int64)
    status = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step).restore(path)
    status.assert_consumed().assert_existing_objects_matched()
    return model, optimizer, step


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("run")
    _train_and_save(output_dir)
    return str(output_dir)


def test_average_of_last_three_restores_as_the_mean_of_the_three(run_dir):
    prefix = average_last_checkpoints(run_dir, num_last=3)
    averaged_dir = os.path.join(run_dir, "averaged")
    assert prefix == os.path.join(averaged_dir, f"ckpt-{NUM_SAVES}")
    assert tf.train.latest_checkpoint(averaged_dir) == prefix

    # Each source checkpoint read independently, by object-based restore into its own model.
    sources = [_restore(os.path.join(run_dir, f"ckpt-{n}")) for n in (2, 3, 4)]
    model, optimizer, step = _restore(prefix)

    for i, variable in enumerate(model.weights):
        values = np.stack([source[0].weights[i].numpy() for source in sources]).astype(np.float64)
        np.testing.assert_allclose(variable.numpy(), values.mean(axis=0), rtol=1e-6, atol=1e-7)
        assert not np.allclose(variable.numpy(), values[-1])  # not just the newest
    for i, variable in enumerate(optimizer.variables):
        values = [source[1].variables[i].numpy() for source in sources]
        if keras.backend.is_float_dtype(
            variable.dtype
        ):  # Adam moments and the learning rate: averaged
            expected = np.mean(np.stack(values).astype(np.float64), axis=0)
            np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-6, atol=1e-9)
        else:  # the iteration counter: copied from the newest
            assert variable.numpy() == values[-1]
    assert int(optimizer.iterations.numpy()) == NUM_SAVES
    assert int(step.numpy()) == NUM_SAVES


def test_averaged_bundle_has_the_same_keys_and_dtypes_and_means_per_key(run_dir):
    prefix = average_last_checkpoints(run_dir, num_last=3, averaged_dir=f"{run_dir}/avg3")
    averaged = tf.train.load_checkpoint(prefix)
    readers = [tf.train.load_checkpoint(os.path.join(run_dir, f"ckpt-{n}")) for n in (2, 3, 4)]
    dtypes = readers[-1].get_variable_to_dtype_map()
    assert averaged.get_variable_to_dtype_map() == dtypes
    assert averaged.get_variable_to_shape_map() == readers[-1].get_variable_to_shape_map()
    num_float = 0
    for key, dtype in dtypes.items():
        if dtype.is_floating:
            num_float += 1
            stacked = np.stack([r.get_tensor(key) for r in readers]).astype(np.float64)
            np.testing.assert_allclose(averaged.get_tensor(key), stacked.mean(axis=0), rtol=1e-6)
        else:
            np.testing.assert_array_equal(averaged.get_tensor(key), readers[-1].get_tensor(key))
    assert num_float >= 4 * 3  # 4 weights, their 2 Adam moments each
    assert averaged.get_tensor(OBJECT_GRAPH_KEY) == readers[-1].get_tensor(OBJECT_GRAPH_KEY)
    provenance = json.loads(open(os.path.join(run_dir, "avg3", PROVENANCE_FILE)).read())
    assert [os.path.basename(p) for p in provenance["sources"]] == ["ckpt-2", "ckpt-3", "ckpt-4"]


def test_fewer_checkpoints_than_asked_is_an_error_unless_allowed(run_dir, tmp_path):
    with pytest.raises(ValueError, match=r"lists 4 checkpoint\(s\).*but 10 were asked for"):
        average_last_checkpoints(run_dir, num_last=10, averaged_dir=str(tmp_path / "a"))
    prefix = average_last_checkpoints(
        run_dir, num_last=10, averaged_dir=str(tmp_path / "b"), allow_fewer=True
    )
    provenance = json.loads((tmp_path / "b" / PROVENANCE_FILE).read_text())
    assert provenance["num_averaged"] == NUM_SAVES
    key = "step/.ATTRIBUTES/VARIABLE_VALUE"
    assert tf.train.load_checkpoint(prefix).get_tensor(key) == NUM_SAVES


def test_no_checkpoints_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="No checkpoints in"):
        average_last_checkpoints(str(tmp_path), num_last=5)


def test_averaged_dir_may_not_be_the_training_dir(run_dir):
    with pytest.raises(ValueError, match="is the training directory"):
        average_last_checkpoints(run_dir, num_last=2, averaged_dir=run_dir + "/")


def test_shape_mismatch_names_the_variable_and_both_files(tmp_path):
    _train_and_save(tmp_path, hidden=8, steps=1, first_step=1)
    _train_and_save(tmp_path, hidden=6, steps=1, first_step=2)  # same directory, other width
    with pytest.raises(
        ValueError, match=r"has shape \[(5, 8|8)\] in .*ckpt-1 but \[(5, 6|6)\] in .*ckpt-2"
    ):
        average_last_checkpoints(str(tmp_path), num_last=2)


def test_command_line_writes_a_restorable_average(run_dir, tmp_path):
    averaged_dir = tmp_path / "cli"
    command = [sys.executable, "-m", "t2t_lite.avg_checkpoints", f"--output_dir={run_dir}"]
    done = warm_python.run(
        command + ["--num_last=2", f"--averaged_dir={averaged_dir}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    prefix = done.stdout.strip().splitlines()[-1]
    assert prefix == tf.train.latest_checkpoint(str(averaged_dir))
    model, _, _ = _restore(prefix)
    newest = [_restore(os.path.join(run_dir, f"ckpt-{n}"))[0] for n in (3, 4)]
    for i, variable in enumerate(model.weights):
        expected = (newest[0].weights[i].numpy() + newest[1].weights[i].numpy()) / 2
        np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-6, atol=1e-7)


def test_command_line_reports_errors_without_a_traceback(run_dir, tmp_path):
    command = [sys.executable, "-m", "t2t_lite.avg_checkpoints", f"--output_dir={run_dir}"]
    done = warm_python.run(
        command + ["--num_last=20", f"--averaged_dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "avg_checkpoints: " in done.stderr and "but 20 were asked for" in done.stderr
    assert "Traceback" not in done.stderr
    assert tf.train.latest_checkpoint(str(tmp_path)) is None


@pytest.fixture(scope="module")
def transformer_run(tmp_path_factory):
    """The tiny Transformer run and its last 3 checkpoints averaged by the command line."""
    output_dir = trained_tiny_run(tmp_path_factory)
    done = run_module(
        "t2t_lite.avg_checkpoints", f"--output_dir={output_dir}", f"--num_last={TINY_NUM_LAST}"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return output_dir, done.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_averaged_transformer_checkpoint_is_the_mean_of_the_last_three(transformer_run):
    output_dir, prefix = transformer_run
    saved = range(TINY_SAVE_EVERY, TINY_STEPS + 1, TINY_SAVE_EVERY)
    assert tf.train.get_checkpoint_state(str(output_dir)).all_model_checkpoint_paths == [
        str(output_dir / f"ckpt-{step}") for step in saved
    ]
    assert prefix == str(output_dir / "averaged" / f"ckpt-{TINY_STEPS}")
    last = [str(output_dir / f"ckpt-{step}") for step in list(saved)[-TINY_NUM_LAST:]]

    # Key by key, from the bundles themselves.
    averaged = tf.train.load_checkpoint(prefix)
    sources = [tf.train.load_checkpoint(path) for path in last]
    dtypes = sources[-1].get_variable_to_dtype_map()
    assert averaged.get_variable_to_shape_map() == sources[-1].get_variable_to_shape_map()
    for key, dtype in dtypes.items():
        if dtype.is_floating:
            stacked = np.stack([source.get_tensor(key) for source in sources]).astype(np.float64)
            np.testing.assert_allclose(
                averaged.get_tensor(key), stacked.mean(axis=0), rtol=1e-6, atol=1e-12, err_msg=key
            )
        else:
            np.testing.assert_array_equal(averaged.get_tensor(key), sources[-1].get_tensor(key))

    # Variable by variable, through the model: every weight the averaged checkpoint restores
    # is the mean of what the last three restore.
    models = [load_trained_model("algorithmic_reverse", "", str(output_dir), p).model for p in last]
    model = load_trained_model("algorithmic_reverse", "", str(output_dir), prefix).model
    assert len(model.weights) > 50
    moved = 0
    for index, variable in enumerate(model.weights):
        values = [source.weights[index].numpy() for source in models]
        if keras.backend.is_float_dtype(variable.dtype):
            mean = np.mean(np.stack(values).astype(np.float64), axis=0)
            np.testing.assert_allclose(
                variable.numpy(), mean, rtol=1e-6, atol=1e-12, err_msg=variable.path
            )
            moved += not np.array_equal(variable.numpy(), values[-1])
        else:  # seed-generator states: copied from the newest
            np.testing.assert_array_equal(variable.numpy(), values[-1])
    # Training moved the weights between saves, so the mean is not the newest checkpoint.
    assert moved > 0.9 * len(model.trainable_weights)


@pytest.mark.slow
def test_decoder_and_exporter_accept_the_averaged_checkpoint(transformer_run, tmp_path):
    output_dir, prefix = transformer_run
    folder = os.path.dirname(prefix)
    (tmp_path / "in.txt").write_text("3 1 4\n2 7\n", encoding="utf-8")
    decoded = run_module(
        "t2t_lite.decoder",
        "--problem=algorithmic_reverse",
        f"--output_dir={output_dir}",
        f"--checkpoint_path={folder}",
        f"--decode_from_file={tmp_path / 'in.txt'}",
        f"--decode_to_file={tmp_path / 'out.txt'}",
        "--beam_size=2",
    )
    assert decoded.returncode == 0, decoded.stderr[-3000:]
    assert f"decoding with {prefix}:" in decoded.stdout
    lines = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")
    assert len(lines) == 3 and lines[-1] == ""
    assert all(token.isdigit() for line in lines[:2] for token in line.split())

    exported = run_module(
        "t2t_lite.exporter",
        "--problem=algorithmic_reverse",
        f"--output_dir={output_dir}",
        f"--checkpoint_path={folder}",
        f"--export_dir={tmp_path / 'export'}",
        "--model_name=reverse",
        "--ids_model_name=",
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    saved_model = tmp_path / "export" / "reverse" / "1"
    assert f"exported version 1: {saved_model}" in exported.stdout
    assert (saved_model / "saved_model.pb").is_file()
    assert (saved_model / "variables" / "variables.index").is_file()


@pytest.mark.parametrize("damaged", ["ckpt-3.data-00000-of-00001", "ckpt-3.index"])
def test_a_truncated_checkpoint_is_named_with_what_to_do(run_dir, tmp_path, damaged):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    path = copy / damaged
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size // 2)
    done = run_module(
        "t2t_lite.avg_checkpoints", f"--output_dir={copy}", "--num_last=3",
        f"--averaged_dir={tmp_path / 'averaged'}",
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"avg_checkpoints: cannot read checkpoint {copy / 'ckpt-3'} ("), last
    assert last.endswith(
        "): its files are damaged (truncated or partly copied). Copy them again, or leave it "
        "out: lower --num_last so that it is not among the newest, or average a run folder "
        "that does not list it."
    ), last
    assert tf.train.latest_checkpoint(str(tmp_path / "averaged")) is None
    # With only ckpt-4, the newest, averaged, the same run averages.
    assert run_module("t2t_lite.avg_checkpoints", f"--output_dir={copy}", "--num_last=1",
                      f"--averaged_dir={tmp_path / 'averaged'}").returncode == 0  # fmt: skip
