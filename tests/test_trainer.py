"""The trainer end to end on a generated problem: files, events, resume, refusals, errors."""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import keras
import pytest
import tensorflow as tf

from t2t_lite import hparams, problems
from t2t_lite.layers import feed_forward
from t2t_lite.training import run_dir, trainer
from t2t_lite.training.progress import Progress

TINY = "hidden_size=32,filter_size=64,num_heads=2,batch_size=256,max_length=48"


def _hp(extra=""):
    return hparams.override(hparams.get("transformer_tiny"), ",".join(filter(None, [TINY, extra])))


def _config(output_dir, **overrides):
    values = dict(
        problem="algorithmic_copy",
        output_dir=str(output_dir),
        train_steps=6,
        eval_steps=2,
        eval_every=3,
        save_every=3,
        log_every=2,
        keep_checkpoints=5,
    )
    values.update(overrides)
    return trainer.RunConfig(**values)


def _events(folder):
    """{tag: [steps]} read back from the TensorBoard event files in `folder`."""
    tags = {}
    for path in glob.glob(os.path.join(folder, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append(event.step)
    return tags


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("run")
    lines = []
    metrics = trainer.train_and_evaluate(_config(output_dir), _hp(), printer=lines.append)
    return output_dir, lines, metrics


def test_run_writes_checkpoints_hparams_and_manifest(finished_run):
    output_dir, _, metrics = finished_run
    assert tf.train.latest_checkpoint(str(output_dir)).endswith("ckpt-6")
    reader = tf.train.load_checkpoint(str(output_dir))
    steps = [k for k in reader.get_variable_to_shape_map() if k.startswith("optimizer/_iterations")]
    assert steps and reader.get_tensor(steps[0]) == 6
    assert hparams.HParams.from_json((output_dir / "hparams.json").read_text()) == _hp()
    manifest = json.loads((output_dir / "manifest.json").read_text())
    assert manifest["problem"] == "algorithmic_copy"
    assert manifest["hparams"]["hidden_size"] == 32
    for key in ("seed", "data_fingerprint", "t2t_lite_version", "command_line", "parameters"):
        assert key in manifest
    assert 0.0 <= metrics["accuracy"] <= 1.0 and metrics["perplexity"] >= 1.0


def test_tensorboard_events_have_tags_and_steps(finished_run):
    output_dir, _, _ = finished_run
    train = _events(output_dir / "train")
    for tag in ("loss", "lr", "grad_norm", "tokens_per_sec"):
        assert train[tag] == [2, 4, 6], tag
    evaluation = _events(output_dir / "eval")
    for tag in ("loss", "accuracy", "perplexity"):
        assert evaluation[tag] == [3, 6], tag


def test_progress_lines_show_step_loss_rate_and_eta(finished_run):
    _, lines, _ = finished_run
    assert any(line.startswith("batching: 256 tokens per replica x 1 replicas") for line in lines)
    progress = [line for line in lines if line.startswith("step ")]
    assert len(progress) == 3
    assert all("loss" in line and "tok/s" in line and "ETA" in line for line in progress)


def test_eta_is_the_sooner_of_the_step_and_time_budgets(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    lines = []
    # 10 steps in 10 s: 990 steps left take 990 s (16m30s); a budget ending in 60 s is sooner.
    by_steps = Progress(1000, 0, lines.append)
    by_time = Progress(1000, 0, lines.append, deadline=1070.0)
    clock[0] = 1010.0
    by_steps.report(10, {})
    by_time.report(10, {})
    assert lines[0].endswith("ETA 16m30s") and lines[1].endswith("ETA 1m00s")


def test_default_on_cpu_is_one_traced_step_without_xla(finished_run):
    _, lines, _ = finished_run
    assert "train step: tf.function without XLA, traced once for all batch shapes" in lines
    assert sum(line.startswith("first update: ") for line in lines) == 1
    assert not any(line.startswith("XLA: ") for line in lines)


@pytest.mark.slow
def test_xla_run_reports_its_bounded_compilations(tmp_path):
    # max_length 10: buckets [8, 9, 10], batch sizes 25, 28, 25 (256 tokens).
    lines = []
    config = _config(tmp_path, train_steps=12, log_every=3, eval_every=12, jit_compile=True)
    trainer.train_and_evaluate(config, _hp("max_length=10"), printer=lines.append)
    assert (
        lines.count(
            "train step: XLA, compiled once per batch shape: at most 3 shapes "
            "(one per length bucket; inputs and targets padded to its boundary)"
        )
        == 1
    )
    first = [line for line in lines if line.startswith("first update: ")]
    assert len(first) == 1 and first[0].endswith("including tracing and 1 XLA compilation(s)")
    counts = [
        int(re.fullmatch(r"XLA: (\d+) of at most 3 batch shapes compiled so far", line)[1])
        for line in lines
        if line.startswith("XLA: ")
    ]
    # Copy examples of 1..40 symbols + EOS, filtered to <= 10 tokens: all three buckets
    # come up within 12 updates, each compiled once, reported when the count grows.
    assert counts == sorted(set(counts)) and counts[-1] == 3
    compiled = _events(tmp_path / "train")["xla_compilations"]
    assert compiled == [3, 6, 9, 12]


def test_float16_run_logs_its_loss_scale_and_counts_only_applied_updates(tmp_path):
    lines = []
    hp = _hp("dtype_policy=mixed_float16")
    trainer.train_and_evaluate(_config(tmp_path, eval_every=6), hp, printer=lines.append)
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-6")
    reader = tf.train.load_checkpoint(str(tmp_path))
    # The global step is Adam's own counter, inside Keras's loss-scale wrapper.
    assert (
        reader.get_tensor("optimizer/inner_optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") == 6
    )
    progress = [line for line in lines if re.match(r"step \d+/6 \|", line)]
    assert [line.split(" |")[0] for line in progress] == ["step 2/6", "step 4/6", "step 6/6"]
    scales = [float(re.search(r"loss_scale (\S+)", line)[1]) for line in progress]
    # Dynamic loss scaling starts at 2^15 and only halves (skips) within 2,000 updates;
    # skipped updates are found and reported at the next log, save or evaluation step.
    skips = [
        re.fullmatch(r"(\d+) update\(s\) skipped before step \d: non-finite gradients; "
                     r"loss scale lowered to (\d+)", line)
        for line in lines
        if "skipped" in line
    ]  # fmt: skip
    skipped = sum(int(match[1]) for match in skips)
    assert scales[-1] == 2.0 ** (15 - skipped)
    if skips:
        assert float(skips[-1][2]) == scales[-1]
    assert _events(tmp_path / "train")["loss_scale"] == [2, 4, 6]


def test_rerun_resumes_at_the_saved_step(finished_run, tmp_path):
    output_dir, _, _ = finished_run
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(output_dir), str(copy)], check=True)
    saved = tf.train.load_checkpoint(str(copy))
    lines = []
    trainer.train_and_evaluate(_config(copy, train_steps=8), _hp(), printer=lines.append)
    assert any("resumed from" in line and "at step 6" in line for line in lines)
    assert [line.split()[1] for line in lines if line.startswith("step ")] == ["8/8"]
    resumed = tf.train.load_checkpoint(str(copy))
    key = next(
        k
        for k in saved.get_variable_to_shape_map()
        if "token_embedding" in k and k.endswith("VARIABLE_VALUE") and "optimizer" not in k
    )
    assert not (saved.get_tensor(key) == resumed.get_tensor(key)).all()


def test_resume_with_other_model_hparams_is_refused(finished_run):
    output_dir, _, _ = finished_run
    with pytest.raises(run_dir.RunDirError, match="hidden_size: 32 -> 64"):
        trainer.train_and_evaluate(_config(output_dir), _hp("hidden_size=64"))


def test_resume_with_another_problem_is_refused(finished_run):
    output_dir, _, _ = finished_run
    with pytest.raises(run_dir.RunDirError, match="trained on problem algorithmic_copy"):
        trainer.train_and_evaluate(_config(output_dir, problem="algorithmic_reverse"), _hp())


def _cli(*args, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [sys.executable, "-m", "t2t_lite.trainer", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--problem=no_such_problem"], "unknown problem 'no_such_problem'; known problems:"),
        (["--hparams_set=transformer_huge"], "unknown hparams set 'transformer_huge'"),
        (["--hparams=hiden_size=3"], "unknown hparam 'hiden_size'"),
        (["--output_dir=/proc/t2t_lite_cannot_write"], "cannot be created or written"),
    ],
)
def test_command_line_errors_are_one_clear_line(args, message, tmp_path):
    base = [f"--output_dir={tmp_path / 'out'}"]
    result = _cli(*base, *args)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_sigkill_loses_only_unsaved_steps(tmp_path):
    """Killed mid-run, the folder still resumes from its newest complete checkpoint."""
    output_dir = tmp_path / "killed"
    args = [
        "--problem=algorithmic_copy",
        f"--output_dir={output_dir}",
        f"--hparams={TINY}",
        "--train_steps=100000",
        "--save_every=5",
        "--log_every=5",
        "--eval_every=100000",
        "--keep_checkpoints=3",
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen(
        [sys.executable, "-m", "t2t_lite.trainer", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 240
        # Wait until at least two checkpoints exist, then kill without warning.
        while len(glob.glob(str(output_dir / "ckpt-*.index"))) < 2:
            assert process.poll() is None, "trainer exited early"
            assert time.monotonic() < deadline, "no checkpoints within 240 s"
            time.sleep(0.2)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    latest = tf.train.latest_checkpoint(str(output_dir))
    saved_step = int(latest.rsplit("-", 1)[1])
    assert saved_step % 5 == 0 and saved_step >= 10
    result = _cli(
        *[a.replace("--train_steps=100000", f"--train_steps={saved_step + 5}") for a in args]
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"at step {saved_step}" in result.stdout
    assert tf.train.latest_checkpoint(str(output_dir)).endswith(f"ckpt-{saved_step + 5}")


def test_time_budget_stops_saves_and_evaluates(tmp_path):
    lines = []
    config = _config(tmp_path / "budget", train_steps=100000, train_minutes=1e-6)
    metrics = trainer.train_and_evaluate(config, _hp(), printer=lines.append)
    assert "time budget of 1e-06 minutes reached at step 1" in lines
    assert tf.train.latest_checkpoint(str(tmp_path / "budget")).endswith("ckpt-1")
    assert any(line.startswith("eval step 1:") for line in lines) and "accuracy" in metrics


def test_resuming_from_a_checkpoint_of_another_layout_is_a_clear_error(tmp_path, monkeypatch):
    # A checkpoint whose FFN first-layer kernels are [D, d_ff], as releases before the
    # transposed [d_ff, D] layout wrote them: the same names, other shapes.
    output_dir = tmp_path / "run"
    hp = _hp()
    trainer.train_and_evaluate(_config(output_dir, train_steps=2), hp, printer=lambda _: None)
    with monkeypatch.context() as patch:
        patch.setattr(feed_forward, "TransposedDense", keras.layers.Dense)
        model, optimizer = trainer.build_model_and_optimizer(
            hp, problems.get("algorithmic_copy"), "", tf.distribute.get_strategy()
        )
    kernel = model.encoder_layers[0].feed_forward.filter_dense.kernel
    assert tuple(kernel.shape) == (hp.hidden_size, hp.filter_size)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    tf.train.CheckpointManager(checkpoint, str(output_dir), 5).save(checkpoint_number=3)
    with pytest.raises(run_dir.RunDirError, match=r"cannot resume from .*ckpt-3.*new --output_dir"):
        trainer.train_and_evaluate(_config(output_dir, train_steps=4), hp, printer=lambda _: None)
