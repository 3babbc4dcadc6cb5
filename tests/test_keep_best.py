"""--keep_best and --early_stopping: the best checkpoint, its restore, stopping, resuming, refusals.

One real run in two parts: 4 steps that learn, then a resume at a learning rate that
wrecks the model, so the dev loss gets worse after the best and early stopping ends the
second part. Every expectation is derived from what the run logged to TensorBoard, not
from the code under test.
"""

import errno
import glob
import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf
import warm_python

from t2t_lite import hparams
from t2t_lite.runs import load_trained_model, run_dir
from t2t_lite.training import averaging, best, saving, trainer

# One layer each way and short examples: the run is mostly tracing, which this keeps short.
TINY = (
    "hidden_size=32,filter_size=64,num_heads=2,batch_size=256,max_length=24,"
    "num_encoder_layers=1,num_decoder_layers=1,warmup_steps=1"
)
# Adam steps of ~7 per weight: the dev loss goes from ~3 to hundreds and stays there.
WRECKING_RATE = "learning_rate=100"
PATIENCE = 2
STEPS = 20


def _hp(extra=""):
    return hparams.override(hparams.get("transformer_tiny"), ",".join(filter(None, [TINY, extra])))


def _config(output_dir, **overrides):
    values = dict(
        problem="algorithmic_copy",
        output_dir=str(output_dir),
        train_steps=4,
        eval_steps=1,
        eval_every=2,
        save_every=2,
        log_every=2,
        keep_checkpoints=10,
        eval_bleu_sentences=0,
        keep_best="loss",
        early_stopping=PATIENCE,
    )
    values.update(overrides)
    return trainer.RunConfig(**values)


def _event_values(folder, tag):
    """{step: value} of `tag` in the TensorBoard event files in `folder` (scalars; text as str)."""
    values = {}
    for path in glob.glob(os.path.join(folder, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    array = tf.make_ndarray(value.tensor)
                    values[event.step] = array.item() if array.dtype != object else array
    return values


def _no_attention_images(monkeypatch):
    # Seconds per evaluation that this file does not test (tests/test_attention.py does).
    monkeypatch.setattr(trainer, "_write_attention", lambda run: None)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("keep_best") / "run"
    first, second = [], []
    with pytest.MonkeyPatch.context() as monkeypatch:
        _no_attention_images(monkeypatch)
        trainer.train_and_evaluate(_config(output_dir), _hp(), printer=first.append)
        best_after_first = (output_dir / "best" / "best.json").read_text()
        # save_every=3: the step early stopping ends at is not a save step.
        config = _config(output_dir, train_steps=STEPS, save_every=3)
        trainer.train_and_evaluate(config, _hp(WRECKING_RATE), printer=second.append)
    losses = _event_values(output_dir / "eval", "eval/loss")
    return dict(dir=output_dir, first=first, second=second, losses=losses,
                best_after_first=best_after_first)  # fmt: skip


def _walk(losses, patience):
    """(argmin step, stop step or None, rows): a row per evaluation, in step order, of
    (step, best value so far, its step, evaluations without improvement since)."""
    best_value, best_step, count, rows, stop = None, None, 0, [], None
    for step in sorted(losses):
        if best_value is None or losses[step] < best_value:
            best_value, best_step, count = losses[step], step, 0
        else:
            count += 1
        rows.append((step, best_value, best_step, count))
        if count == patience and stop is None:
            stop = step
    return best_step, stop, rows


def _weights(output_dir, checkpoint_path):
    trained = load_trained_model("algorithmic_copy", "", str(output_dir), str(checkpoint_path))
    return trained, [v.numpy() for v in trained.model.weights]


def test_best_is_the_argmin_of_the_logged_dev_loss_and_holds_its_weights(run):
    losses = run["losses"]
    argmin, _, _ = _walk(losses, PATIENCE)
    assert argmin <= 4 < max(losses)  # the second part only made it worse
    record = json.loads((run["dir"] / "best" / "best.json").read_text())
    assert (record["metric"], record["step"]) == ("loss", argmin)
    assert record["value"] == pytest.approx(losses[argmin], rel=1e-6)  # events hold float32
    assert record["checkpoint"] == f"ckpt-{argmin}" and record["higher_is_better"] is False
    assert sorted(os.listdir(run["dir"] / "best")) == sorted(
        ["best.json", "checkpoint", f"ckpt-{argmin}.index", f"ckpt-{argmin}.data-00000-of-00001"]
    )
    assert not glob.glob(str(run["dir"] / "best.*"))  # no temporary or set-aside folder left

    _, kept = _weights(run["dir"], run["dir"] / "best")
    _, saved = _weights(run["dir"], run["dir"] / f"ckpt-{argmin}")
    _, last = _weights(run["dir"], run["dir"] / "ckpt-8")
    assert all(np.array_equal(a, b) for a, b in zip(kept, saved, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(kept, last, strict=True))


def test_early_stopping_ends_the_run_after_exactly_n_evaluations_without_improvement(run):
    losses = run["losses"]
    argmin, stop, rows = _walk(losses, PATIENCE)
    assert stop is not None and stop < STEPS
    assert max(losses) == stop  # no evaluation after it
    # The run ends as any run does, with a checkpoint of its last step (not a save step here).
    assert tf.train.latest_checkpoint(str(run["dir"])).endswith(f"ckpt-{stop}")
    reader = tf.train.load_checkpoint(str(run["dir"] / f"ckpt-{stop}"))
    step_keys = [k for k in reader.get_variable_to_shape_map() if k.startswith("optimizer/_iter")]
    assert reader.get_tensor(step_keys[0]) == stop
    lines = [line for line in run["second"] if line.startswith("early stopping")]
    assert lines == [
        f"early stopping at step {stop}: {PATIENCE} evaluations without improvement of the "
        f"dev loss (--early_stopping={PATIENCE}); the best, {losses[argmin]:.4f} at step "
        f"{argmin}, is in {run['dir'] / 'best'}"
    ]
    events = run["dir"] / "eval"
    best_logged = _event_values(events, "eval/best_loss")
    best_step_logged = _event_values(events, "eval/best_step")
    count_logged = _event_values(events, "eval/evaluations_without_improvement")
    for step, best_value, best_step, count in rows:
        assert best_logged[step] == pytest.approx(best_value, rel=1e-6), step
        assert (best_step_logged[step], count_logged[step]) == (best_step, count), step
    assert list(_event_values(events, "eval/early_stopping")) == [stop]

    record = json.loads((run["dir"] / "manifest.json").read_text())["keep_best"]
    assert record == {
        "metric": "loss",
        "early_stopping": PATIENCE,
        "best_step": argmin,
        "best_value": pytest.approx(losses[argmin], rel=1e-6),
        "without_improvement": [step for step in sorted(losses) if step > argmin],
        "stopped_early_at": stop,
    }


def test_a_resumed_run_keeps_the_better_best_and_the_count(run, capsys):
    assert any(line.startswith("resumed from") for line in run["second"])
    # The second part evaluated only worse models: the first part's best.json is untouched.
    assert (run["dir"] / "best" / "best.json").read_text() == run["best_after_first"]
    # Resuming reads the count back: all of it at the step the run stopped (so it does
    # not train on), and only the evaluations up to an earlier step resumed at.
    argmin, stop, _ = _walk(run["losses"], PATIENCE)
    config = _config(run["dir"], train_steps=STEPS)
    lines = []
    again = best.BestTracker.resume(config, str(run["dir"]), stop, False, lines.append)
    assert again.best["step"] == argmin and again.should_stop
    assert again.stopped_at == stop and "not training further" in lines[0]
    earlier = best.BestTracker.resume(config, str(run["dir"]), stop - 1, False, print)
    assert earlier.without_improvement == [s for s in run["losses"] if argmin < s < stop]
    assert not earlier.should_stop
    patient = _config(run["dir"], train_steps=STEPS, early_stopping=PATIENCE + 1)
    assert not best.BestTracker.resume(patient, str(run["dir"]), stop, False, print).should_stop


def test_decoder_restore_and_averaging_take_run_best(run, tmp_path):
    argmin, _, _ = _walk(run["losses"], PATIENCE)
    trained, kept = _weights(run["dir"], run["dir"] / "best")
    assert trained.checkpoint_path == str(run["dir"] / "best" / f"ckpt-{argmin}")
    # RUN/best has a state file, as RUN/averaged does: averaging reads it as a run.
    assert averaging.last_checkpoints(str(run["dir"] / "best"), 1) == [trained.checkpoint_path]
    prefix = averaging.average_last_checkpoints(
        str(run["dir"] / "best"), num_last=1, averaged_dir=str(tmp_path / "averaged")
    )
    _, averaged = _weights(run["dir"], prefix)
    assert all(np.array_equal(a, b) for a, b in zip(kept, averaged, strict=True))


class _Model(tf.Module):
    """A one-variable stand-in for the trainer's checkpoint, to watch what is kept."""

    def __init__(self):
        self.weight = tf.Variable(0.0)


def _tracker(tmp_path, metric, patience=0):
    folder = tmp_path / "best"
    return best.BestTracker(metric, patience, str(folder), str(tmp_path)), folder


def test_bleu_keeps_the_highest_score_and_ties_do_not_count(tmp_path):
    tracker, folder = _tracker(tmp_path, "bleu", patience=2)
    model = _Model()
    checkpoint = tf.train.Checkpoint(model=model)
    writer = tf.summary.create_file_writer(str(tmp_path / "eval"))
    for step, score in [(1, 10.0), (2, 12.0), (3, 12.0), (4, 11.0)]:
        model.weight.assign(float(step))
        tracker.observe(step, {"loss": 1.0, "bleu": score}, checkpoint, writer, print)
    assert (tracker.best["step"], tracker.best["value"]) == (2, 12.0)
    assert tracker.without_improvement == [3, 4] and tracker.should_stop
    restored = _Model()
    tf.train.Checkpoint(model=restored).restore(tf.train.latest_checkpoint(str(folder)))
    assert restored.weight.numpy() == 2.0
    assert _event_values(tmp_path / "eval", "eval/best_bleu") == {1: 10, 2: 12, 3: 12, 4: 12}
    manifest = run_dir.load_manifest(str(tmp_path))["keep_best"]
    assert (manifest["best_step"], manifest["without_improvement"]) == (2, [3, 4])


def test_a_failed_write_keeps_the_previous_best(tmp_path, monkeypatch):
    tracker, folder = _tracker(tmp_path, "loss")
    model = _Model()
    checkpoint = tf.train.Checkpoint(model=model)
    writer = tf.summary.create_file_writer(str(tmp_path / "eval"))
    model.weight.assign(1.0)
    tracker.observe(1, {"loss": 2.0}, checkpoint, writer, print)

    def full_disk(prefix):
        with open(prefix + ".index", "w") as handle:  # a partial file, then the failure
            handle.write("partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint, "write", full_disk)
    model.weight.assign(2.0)
    with pytest.raises(saving.TrainingStopped) as error:
        tracker.observe(2, {"loss": 1.0}, checkpoint, writer, print)
    message = str(error.value)
    assert "no space left on device" in message and "keeps the best of step 1" in message
    assert "\n" not in message
    assert sorted(os.listdir(tmp_path)) == ["best", "eval", "manifest.json"]
    assert best.read_best(str(folder))["step"] == 1
    restored = _Model()
    tf.train.Checkpoint(model=restored).restore(tf.train.latest_checkpoint(str(folder)))
    assert restored.weight.numpy() == 1.0


def test_a_start_clears_an_interrupted_write(tmp_path):
    tracker, folder = _tracker(tmp_path, "loss")
    checkpoint = tf.train.Checkpoint(model=_Model())
    tracker.observe(5, {"loss": 2.0}, checkpoint, tf.summary.create_file_writer(str(tmp_path)))
    # Killed between the two renames: the old best set aside, the new one not in place,
    # and a temporary folder of a write killed earlier.
    os.replace(folder, str(folder) + ".old")
    os.makedirs(tmp_path / "best.tmp-killed")
    lines = []
    best.recover(str(folder), lines.append)
    assert sorted(os.listdir(tmp_path)) == sorted(["best", "manifest.json"] + _events(tmp_path))
    assert best.read_best(str(folder))["step"] == 5
    assert len(lines) == 2 and "put back" in lines[1]


def _events(folder):
    return [name for name in os.listdir(folder) if name.startswith("events.out")]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(keep_best="none", early_stopping=2), "--early_stopping=2: needs --keep_best=loss"),
        (dict(keep_best="accuracy"), "--keep_best=accuracy: must be one of none, loss, bleu"),
        (dict(early_stopping=-1), "--early_stopping=-1: must be >= 0"),
        (dict(keep_best="bleu"), "--keep_best=bleu: problem algorithmic_copy is not scored by "),
        (
            dict(keep_best="bleu", problem="multi30k_ende", eval_bleu_sentences=0),
            "--keep_best=bleu: --eval_bleu_sentences=0 turns BLEU during training off",
        ),
    ],
)
def test_settings_that_cannot_work_are_one_line_naming_the_flag(tmp_path, overrides, message):
    output_dir = tmp_path / "run"
    # multi30k_ende has no data under data_dir: the flag is refused before the data is read.
    overrides = dict(overrides, data_dir=str(tmp_path / "no_data"))
    with pytest.raises(run_dir.RunDirError) as error:
        trainer.train_and_evaluate(_config(output_dir, **overrides), _hp())
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
    assert not output_dir.exists()  # refused up front


def test_resuming_with_another_metric_is_refused(run):
    config = _config(run["dir"], keep_best="bleu")
    with pytest.raises(run_dir.RunDirError, match=r"^--keep_best=bleu: .* holds the best by loss"):
        best.BestTracker.resume(config, str(run["dir"]), 8, False, print)


def test_the_trainer_command_names_the_flag(tmp_path):
    result = warm_python.run(
        [sys.executable, "-m", "t2t_lite.trainer", f"--output_dir={tmp_path / 'run'}",
         "--problem=algorithmic_copy", "--early_stopping=3"],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        "t2t_lite.trainer: --early_stopping=3: needs --keep_best=loss or --keep_best=bleu, "
        "the dev score it watches"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "value, shown", [('"abc"', '"abc"'), ("null", "null"), ("NaN", "NaN"), ("Infinity", "Infinity")]
)
def test_a_best_json_without_a_finite_value_is_refused_at_resume(tmp_path, value, shown):
    tracker, folder = _tracker(tmp_path, "loss")
    checkpoint = tf.train.Checkpoint(model=_Model())
    tracker.observe(2, {"loss": 2.0}, checkpoint, tf.summary.create_file_writer(str(tmp_path)))
    path = folder / "best.json"
    text = path.read_text()
    assert '"value": 2.0,' in text
    path.write_text(text.replace('"value": 2.0,', f'"value": {value},'))
    kept = sorted(os.listdir(folder))
    with pytest.raises(run_dir.RunDirError) as error:
        best.BestTracker.resume(_config(tmp_path), str(tmp_path), 2, True, print)
    assert str(error.value) == (
        f'cannot read {path} (ValueError: its "value" is {shown}, not a finite number); move '
        f"{folder} away (the run then keeps a new best) and rerun"
    )
    assert sorted(os.listdir(folder)) == kept  # the checkpoint kept there is left alone
