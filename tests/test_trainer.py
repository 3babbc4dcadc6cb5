"""The trainer end to end on a generated problem: files, events, resume, refusals, errors."""

import glob
import json
import math
import os
import re
import signal
import subprocess
import sys
import time

import keras
import pytest
import tensorflow as tf
import warm_python

from t2t_lite import hparams, problems
from t2t_lite.layers import feed_forward
from t2t_lite.runs import run_dir
from t2t_lite.runs.progress import Progress
from t2t_lite.training import cpu_features, resume, trainer
from t2t_lite.training.schedule import TransformerSchedule

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
        save_every=2,
        log_every=2,
        keep_checkpoints=2,
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


def _event_values(folder, tag):
    """{step: value} of the scalar `tag` in the TensorBoard event files in `folder`."""
    values = {}
    for path in glob.glob(os.path.join(folder, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    values[event.step] = float(tf.make_ndarray(value.tensor))
    return values


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


def test_only_the_last_keep_checkpoints_remain(finished_run):
    # Saved at steps 2, 4 and 6 with keep_checkpoints=2: step 2 is gone from disk and index.
    output_dir, _, _ = finished_run
    on_disk = sorted(os.path.basename(p) for p in glob.glob(str(output_dir / "ckpt-*.index")))
    assert on_disk == ["ckpt-4.index", "ckpt-6.index"]
    state = tf.train.get_checkpoint_state(str(output_dir))
    listed = [os.path.basename(p) for p in state.all_model_checkpoint_paths]
    assert listed == ["ckpt-4", "ckpt-6"]


def test_logged_learning_rate_is_the_one_each_update_used(finished_run):
    # transformer_tiny: d_model 32 (TINY), warmup 400, scale 0.5. Keras evaluates the
    # schedule at the number of updates made before, so update n applies eq. 3 at n - 1,
    # and the schedule takes step 0 as step 1.
    output_dir, _, _ = finished_run
    logged = _event_values(output_dir / "train", "train/learning_rate")
    assert sorted(logged) == [2, 4, 6]
    for step, rate in logged.items():
        used = max(step - 1, 1)
        by_hand = 0.5 * 32**-0.5 * min(used**-0.5, used * 400**-1.5)
        assert rate == pytest.approx(by_hand, rel=1e-6), step
        assert rate == pytest.approx(float(TransformerSchedule(32, 400, 0.5)(step - 1)))


def test_the_optimizer_cools_down_over_the_runs_own_steps():
    # cooldown_fraction 0.5 of a 6-update run (--train_steps, not the set's 3,000): the last
    # 3 updates. Update n uses step n - 1, so updates 5 and 6 get 2/3 and 1/3 of eq. 3
    # (d_model 32, warmup 400, scale 0.5).
    hp = _hp("cooldown_fraction=0.5")
    _, optimizer = trainer.build_model_and_optimizer(
        hp,
        problems.get("algorithmic_copy"),
        "",
        tf.distribute.get_strategy(),
        trainer.make_schedule(hp, 6),
    )
    for update, factor in ((1, 1.0), (4, 1.0), (5, 2 / 3), (6, 1 / 3)):
        used = max(update - 1, 1)
        by_hand = 0.5 * 32**-0.5 * min(used**-0.5, used * 400**-1.5) * factor
        optimizer.iterations.assign(update - 1)  # the updates made before this one
        assert float(optimizer.learning_rate) == pytest.approx(by_hand)


def test_accumulation_reaches_the_papers_25000_tokens_per_update():
    # Section 5.1: ~25,000 target tokens per update. batch_size 4,096 tokens per replica:
    # one replica accumulates ceil(25000 / 4096) = 7 batches, eight replicas need one.
    for name in ("transformer_base", "transformer_big", "transformer_big_enfr"):
        hp = hparams.get(name)
        assert (hp.batch_size, hp.effective_batch_tokens) == (4096, 25000), name
        assert trainer.accumulation_steps(hp, 1) == math.ceil(25000 / 4096) == 7
        assert trainer.accumulation_steps(hp, 8) == 1
    assert trainer.accumulation_steps(hparams.get("transformer_base"), 2) == 4  # ceil(3.05)
    assert trainer.accumulation_steps(hparams.get("transformer_tiny"), 1) == 1


def test_start_up_line_shows_replica_global_and_effective_tokens(tmp_path):
    # 600 tokens per update from 256-token batches on one replica: 3 accumulated batches.
    lines = []
    config = _config(tmp_path, train_steps=1, eval_steps=1)
    trainer.train_and_evaluate(config, _hp("effective_batch_tokens=600"), printer=lines.append)
    assert (
        "batching: 256 tokens per replica x 1 replicas = 256 global tokens per batch; "
        "x 3 accumulated = 768 effective tokens per update (effective_batch_tokens 600)"
    ) in lines
    assert json.loads((tmp_path / "manifest.json").read_text())["accumulation_steps"] == 3


def test_mixed_bfloat16_on_a_cpu_without_bfloat16_is_warned_about(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n")
    monkeypatch.setattr(cpu_features, "CPUINFO", str(cpuinfo))
    lines = []
    config = _config(tmp_path / "run", train_steps=1, eval_steps=1)
    trainer.train_and_evaluate(config, _hp("dtype_policy=mixed_bfloat16"), printer=lines.append)
    index = next(i for i, line in enumerate(lines) if line.startswith("model: "))
    assert lines[index].endswith("parameters, mixed_bfloat16")
    assert lines[index + 1] == cpu_features.bfloat16_warning("mixed_bfloat16", True)
    assert str(cpuinfo) in lines[index + 1]


def test_tensorboard_events_have_tags_and_steps(finished_run):
    output_dir, _, _ = finished_run
    train = _events(output_dir / "train")
    for tag in ("loss", "learning_rate", "grad_norm", "tokens_per_sec"):
        assert train[f"train/{tag}"] == [2, 4, 6], tag
    evaluation = _events(output_dir / "eval")
    for tag in ("loss", "accuracy", "perplexity"):
        assert evaluation[f"eval/{tag}"] == [3, 6], tag


def test_progress_lines_show_step_loss_rate_and_eta(finished_run):
    _, lines, _ = finished_run
    assert (
        "batching: 256 tokens per replica x 1 replicas = 256 global tokens per batch; x 1 "
        "accumulated = 256 effective tokens per update (effective_batch_tokens 0: one batch "
        "per update)"
    ) in lines
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
def test_xla_run_compiles_once_per_batch_shape_and_reports_it(tmp_path):
    # max_length 10: buckets [8, 9, 10], batch sizes 25, 28, 25 (256 tokens). A fresh
    # process, so that XLA's own dump of the modules it compiled can be counted. One layer
    # a side: what is counted does not depend on depth, and a smaller graph compiles faster.
    dump, output_dir = tmp_path / "xla_dump", tmp_path / "run"
    hp = f"{TINY},max_length=10,num_encoder_layers=1,num_decoder_layers=1"
    result = _cli(
        "--problem=algorithmic_copy", f"--hparams={hp}", "--train_steps=12",
        "--log_every=3", "--eval_every=12", "--eval_steps=2", "--save_every=12",
        "--jit_compile", f"--output_dir={output_dir}",
        env={"XLA_FLAGS": f"--xla_dump_to={dump}"}, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
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
    compiled = _events(output_dir / "train")["train/xla_compilations"]
    assert compiled == [3, 6, 9, 12]
    # XLA compiled exactly three modules, all of them the gradient function: no retracing,
    # and nothing compiled twice for a shape met again.
    modules = {}
    for name in os.listdir(dump):
        match = re.match(r"module_(\d+)\.([^.]+)\.", name)
        modules[match[1]] = match[2]
    assert len(modules) == 3, sorted(modules.items())
    assert all("_gradients_fn_" in function for function in modules.values()), modules


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
    assert _events(tmp_path / "train")["train/loss_scale"] == [2, 4, 6]


def test_rerun_resumes_at_the_saved_step(finished_run, tmp_path):
    output_dir, _, _ = finished_run
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(output_dir), str(copy)], check=True)
    saved = tf.train.load_checkpoint(str(copy))
    lines = []
    trainer.train_and_evaluate(_config(copy, train_steps=8), _hp(), printer=lines.append)
    resumed_line = next(line for line in lines if line.startswith("resumed from"))
    assert resumed_line.endswith(
        f"at step 6; training data shuffled with seed {trainer.data_seed(1, 6)} "
        "(from seed 1 and step 6)"
    )
    assert [line.split()[1] for line in lines if line.startswith("step ")] == ["8/8"]
    resumed = tf.train.load_checkpoint(str(copy))
    key = next(
        k
        for k in saved.get_variable_to_shape_map()
        if "token_embedding" in k and k.endswith("VARIABLE_VALUE") and "optimizer" not in k
    )
    assert not (saved.get_tensor(key) == resumed.get_tensor(key)).all()


def test_resume_restores_the_step_and_adam_moments_of_the_checkpoint(finished_run):
    output_dir, _, _ = finished_run
    hp = _hp()
    strategy = tf.distribute.get_strategy()
    model, optimizer = trainer.build_model_and_optimizer(
        hp, problems.get("algorithmic_copy"), "", strategy
    )
    checkpoint, _ = resume.checkpoint_manager(model, optimizer, str(output_dir), 2)
    assert resume.restore_latest(checkpoint, str(output_dir)).endswith("ckpt-6")
    # Read back with TensorFlow's checkpoint reader: Keras's Adam tracks its variables as
    # `_variables`: [iteration, then momentum and velocity of each trainable variable].
    reader = tf.train.load_checkpoint(str(output_dir))
    assert reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") == 6
    assert int(optimizer.iterations.numpy()) == 6
    slots = optimizer.variables[1:]
    assert len(slots) == 2 * len(model.trainable_variables)
    for index, slot in enumerate(slots, start=1):
        assert slot.path.endswith(("_momentum", "_velocity")), slot.path
        stored = reader.get_tensor(f"optimizer/_variables/{index}/.ATTRIBUTES/VARIABLE_VALUE")
        assert stored.shape == tuple(slot.shape)
        assert (slot.numpy() == stored).all(), slot.path
    # The moments are those of 6 updates, not the zeros Adam starts from.
    assert all(abs(reader.get_tensor(f"optimizer/_variables/{i}/.ATTRIBUTES/VARIABLE_VALUE")).max()
               > 0 for i in (1, 2))  # fmt: skip


def test_resumed_run_shuffles_afresh_and_reproducibly(tmp_path):
    # The first batch of a run resumed at step 6 is not the first batch of a run from
    # scratch with the same seed; two resumes at step 6 agree; from scratch, the order is
    # the seed's own, as before resuming existed.
    hp, problem = _hp(), problems.get("algorithmic_copy")
    config, strategy = _config(tmp_path), tf.distribute.get_strategy()

    def first_batch(start_step):
        keras.utils.set_random_seed(config.seed)  # as train_and_evaluate does
        data = trainer.train_data(problem, config, hp, strategy, start_step, pad_to_bucket=False)
        return {key: value.numpy() for key, value in next(iter(data)).items()}

    def same(a, b):
        return all(a[k].shape == b[k].shape and (a[k] == b[k]).all() for k in a)

    fresh, resumed, again = first_batch(0), first_batch(6), first_batch(6)
    keras.utils.set_random_seed(config.seed)
    plain = next(iter(problem.dataset("train", "", hp, seed=config.seed)))
    assert same(fresh, {key: value.numpy() for key, value in plain.items()})
    assert not same(fresh, resumed)
    assert same(resumed, again)
    assert trainer.data_seed(1, 0) == 1 and trainer.data_seed(1, 6) != trainer.data_seed(1, 7)


def test_resume_with_other_model_hparams_is_refused(finished_run):
    output_dir, _, _ = finished_run
    with pytest.raises(run_dir.RunDirError, match="hidden_size: 32 -> 64"):
        trainer.train_and_evaluate(_config(output_dir), _hp("hidden_size=64"))


def test_resume_with_another_problem_is_refused(finished_run):
    output_dir, _, _ = finished_run
    with pytest.raises(run_dir.RunDirError, match="trained on problem algorithmic_copy"):
        trainer.train_and_evaluate(_config(output_dir, problem="algorithmic_reverse"), _hp())


def _cli(*args, timeout=300, env=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    return warm_python.run(
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


# TensorFlow's C++ runtime logs to stderr on import, whatever the command line says.
_RUNTIME_LOG = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\)|[IWEF]\d{4} \d\d:\d\d:\d\d"
)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--save_every=0"],
            "--save_every=0: must be >= 1 (Write a checkpoint every this many steps.)",
        ),
        (
            ["--problem=multi30k_ende", "--data_dir={empty}"],
            "{empty}/multi30k_ende/metadata.json: not found",
        ),
    ],
)
def test_user_errors_end_as_one_line_without_traceback(args, message, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [arg.format(empty=empty) for arg in args]
    result = _cli(f"--output_dir={tmp_path / 'out'}", f"--hparams={TINY}", *args)
    assert result.returncode == 1
    ours = [line for line in result.stderr.splitlines() if not _RUNTIME_LOG.match(line)]
    assert len(ours) == 1, result.stderr[-3000:]
    assert ours[0].startswith("t2t_lite.trainer: ") and message.format(empty=empty) in ours[0]


@pytest.mark.parametrize(
    "field, value, allowed",
    [
        ("save_every", 0, ">= 1"),
        ("eval_every", 0, ">= 1"),
        ("log_every", -5, ">= 1"),
        ("keep_checkpoints", 0, ">= 1"),
        ("train_steps", -1, ">= 0"),
        ("train_minutes", -0.5, ">= 0"),
        ("eval_steps", -1, ">= 0"),
        ("cpu_replicas", 0, ">= 1"),
        ("eval_bleu_sentences", -1, ">= 0"),
        ("num_gpus", -1, ">= 0"),
        ("eval_decode_method", "sample", "one of beam, greedy"),
    ],
)
def test_run_config_refuses_values_that_cannot_work(field, value, allowed, tmp_path):
    with pytest.raises(
        run_dir.RunDirError, match=re.escape(f"--{field}={value}: must be {allowed}")
    ):
        _config(tmp_path, **{field: value})
    config = _config(tmp_path)
    setattr(config, field, value)  # changed after construction: refused before any work
    with pytest.raises(run_dir.RunDirError, match=re.escape(f"--{field}={value}")):
        trainer.train_and_evaluate(config, _hp())
    assert not (tmp_path / "hparams.json").exists()


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

    def recorded_step() -> int:
        """The step of the newest checkpoint the run has recorded as complete (0: none)."""
        latest = tf.train.latest_checkpoint(str(output_dir))
        return int(latest.rsplit("-", 1)[1]) if latest else 0

    try:
        deadline = time.monotonic() + 240
        # Wait until the run has recorded its second checkpoint, then kill without warning.
        # (A checkpoint's files appear before the run records it: waiting on files alone
        # could kill it between the two, and then the first checkpoint is the newest.)
        while (recorded := recorded_step()) < 10:
            assert process.poll() is None, "trainer exited early"
            assert time.monotonic() < deadline, "no checkpoints within 240 s"
            time.sleep(0.2)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    saved_step = recorded_step()
    assert saved_step % 5 == 0 and saved_step >= recorded
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
    with pytest.raises(
        run_dir.RunDirError, match=r"cannot resume from .*ckpt-3.*new --output_dir"
    ) as error:
        trainer.train_and_evaluate(_config(output_dir, train_steps=4), hp, printer=lambda _: None)
    # Refused before restoring, naming the kernels: Keras's Dense keeps its kernel as
    # `_kernel` [D, d_ff], the model expects `kernel`; one of each per FFN (2 + 2 layers).
    layers = hp.num_encoder_layers + hp.num_decoder_layers
    message = str(error.value)
    assert f"{2 * layers} variables differ" in message
    d, f = hp.hidden_size, hp.filter_size
    assert f"filter_dense/_kernel: not in the model (found [{d}, {f}])" in message
    assert "filter_dense/kernel: missing in the checkpoint" in message


def test_the_commands_flags_are_run_config_fields_with_their_defaults(tmp_path):
    import dataclasses

    from absl import flags as absl_flags

    from t2t_lite.training import run_config

    values = absl_flags.FlagValues()
    run_config.define_flags(values)
    values(["trainer", f"--output_dir={tmp_path}", "--eval_every=7", "--nojit_compile"])
    config = run_config.from_flags(values)
    assert config == trainer.RunConfig(output_dir=str(tmp_path), eval_every=7, jit_compile=False)
    fields = dataclasses.fields(trainer.RunConfig)
    assert sorted(values) == sorted(field.name for field in fields)
    for field in fields:
        if field.default is not dataclasses.MISSING:
            assert values[field.name].default == field.default, field.name
    # The command itself lists them in its --help.
    shown = _cli("--help").stdout
    for field in fields:
        assert re.search(rf"--(\[no\])?{field.name}:", shown), field.name
