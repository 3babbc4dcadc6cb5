"""The installed console scripts as a new user meets them: help, defaults, data, quiet start.

Every command runs as its real console script (the venv's `t2t-trainer` etc.) in a fresh
process, with HOME pointed at a temporary folder so that the default folders
(~/t2t_data, ~/t2t_train) are real and checked, and without TF_CPP_MIN_LOG_LEVEL unless
a test sets it, as a user's shell has it.
"""

import glob
import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

BIN = Path(sys.executable).parent
# What TensorFlow's C++ runtime prints at start-up when nobody silences it (the oneDNN
# notice, "Could not find cuda drivers", the cuInit error): lines from .cc sources. Our
# own warnings come from Python's absl logging, from .py files.
RUNTIME_LOG = re.compile(
    r"WARNING: All log messages before absl::InitializeLog|^[IWE]\d{4} [\d:.]+ +\d+ \S+\.cc:\d+\]",
    re.M,
)
TINY = "hidden_size=32,filter_size=64,num_heads=2,batch_size=256,max_length=48"

# The flags a user types, per command, listed by hand from the docs and tensor2tensor.
FLAGS_BY_SCRIPT = {
    "t2t-trainer": [
        "--problem", "--hparams_set", "--hparams", "--data_dir", "--output_dir",
        "--train_steps", "--generate_data", "--raw_dir", "--registry_help", "--eval_every",
        "--save_every", "--keep_checkpoints", "--strategy", "--train_minutes", "--keep_best",
        "--early_stopping", "--warm_start_from", "--warm_start_vocab",
    ],
    "t2t-datagen": [
        "--problem", "--data_dir", "--raw_dir", "--vocab_size", "--source", "--tfds_data_dir",
        "--registry_help",
    ],
    "t2t-decoder": [
        "--problem", "--data_dir", "--output_dir", "--checkpoint_path", "--decode_from_file",
        "--decode_to_file", "--reference_file", "--decode_interactive", "--beam_size",
        "--alpha", "--return_beams", "--score_file", "--output_format", "--engine",
        "--ct2_model",
    ],
    "t2t-exporter": [
        "--problem", "--data_dir", "--output_dir", "--checkpoint_path", "--export_dir",
        "--model_name", "--beam_size",
    ],
    "t2t-serve": ["--model_dir", "--host", "--port", "--max_batch_size"],
    "t2t-evalb": ["-p", "-d", "-e", "--style", "--ignore_outer_bracket"],
    "t2t-attention": [
        "--problem", "--data_dir", "--output_dir", "--checkpoint_path", "--sentence",
        "--from_file", "--line", "--target", "--image_dir",
    ],
    "t2t-avg-checkpoints": ["--output_dir", "--num_last", "--averaged_dir", "--allow_fewer"],
}  # fmt: skip


def _run(script, *args, home, env=None, cwd=None, timeout=300):
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    environment.update(HOME=str(home), **(env or {}))
    path = BIN / script
    assert path.is_file(), f"{path}: console script not installed; run pip install -e ."
    return subprocess.run(
        [str(path), *args], capture_output=True, text=True, timeout=timeout,
        env=environment, cwd=cwd or home,
    )  # fmt: skip


@pytest.mark.parametrize("script", sorted(FLAGS_BY_SCRIPT))
def test_console_script_help_lists_its_own_flags_and_exits_0(script, tmp_path):
    result = _run(script, "--help", home=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    listed = result.stdout.replace("--[no]", "--")  # absl's boolean flags
    for flag in FLAGS_BY_SCRIPT[script]:
        # A flag's own entry: absl's "  --flag: help", argparse's "  -p PARAM_FILE  help".
        assert re.search(rf"^\s+{re.escape(flag)}[:\s]", listed, re.M), f"{script}: no {flag}"
    assert result.stderr == "", result.stderr[-2000:]


def test_help_under_python_dash_m_exits_0_too(tmp_path):
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-m", "t2t_lite.decoder", "--help"], capture_output=True, text=True,
        timeout=300, env=dict(environment, HOME=str(tmp_path)),
    )  # fmt: skip
    assert result.returncode == 0 and "--decode_from_file" in result.stdout


@pytest.mark.parametrize("script", ["t2t-trainer", "t2t-datagen"])
def test_registry_help_lists_problems_and_hparams_sets_one_line_each(script, tmp_path):
    result = _run(script, "--registry_help", home=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    for name in ("algorithmic_reverse", "multi30k_ende", "wmt14_ende", "wmt14_enfr", "wsj_parsing"):
        [line] = [line for line in lines if line.split()[:1] == [name]]
        assert len(line.split()) > 2, line  # a description follows the name
    steps = {line.split()[0]: line.split()[1] for line in lines if line.startswith("  transf")}
    # Section 5.2 of the paper: base models 100,000 steps, big models 300,000.
    assert steps["transformer_base"] == "[100,000"
    assert steps["transformer_big"] == "[300,000"
    assert steps["transformer_big_enfr"] == "[300,000"
    assert "transformer_tiny" in steps and "transformer_multi30k" in steps
    assert not RUNTIME_LOG.search(result.stderr), result.stderr[-2000:]


@pytest.mark.parametrize(
    "hparams_set, args, budget",
    [
        ("transformer_big", [], "train_steps 300,000 (the hparams set's train_steps)"),
        ("transformer_base", [], "train_steps 100,000 (the hparams set's train_steps)"),
        ("transformer_big", ["--train_steps=7"], "train_steps 7 (--train_steps)"),
    ],
)
def test_missions_command_defaults_and_missing_data_message(hparams_set, args, budget, tmp_path):
    """The mission's command as typed on a machine without the data: the defaults are
    printed, then one line names the absolute data folder and the full datagen command,
    and no folder is left behind."""
    home = tmp_path / "home"
    home.mkdir()
    result = _run(
        "t2t-trainer", "--problem=wmt14_ende", f"--hparams_set={hparams_set}", *args, home=home
    )
    assert result.returncode == 1
    data, run = home / "t2t_data", home / "t2t_train" / f"wmt14_ende-{hparams_set}"
    assert result.stdout.splitlines()[0] == f"data_dir {data} | output_dir {run} | {budget}"
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"t2t_lite.trainer: {data}/wmt14_ende/metadata.json: not found")
    assert f"`python -m t2t_lite.datagen --problem=wmt14_ende --data_dir={data}`" in result.stderr
    assert "--generate_data" in result.stderr
    # Keras's own settings, and matplotlib's cache and settings that Keras's import writes.
    tools_own = {".keras", ".cache", ".config"}
    assert sorted(p.name for p in home.iterdir() if p.name not in tools_own) == []


def test_relative_data_dir_is_named_absolute(tmp_path):
    result = _run(
        "t2t-trainer", "--problem=multi30k_ende", "--data_dir=data", "--output_dir=run",
        home=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1
    assert f"--data_dir={tmp_path / 'data'}`" in result.stderr, result.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "data").exists()


TINY_PROBLEM = """
from t2t_lite.problems.translate import TranslateProblem


class TinyEnDe(TranslateProblem):
    name = "tiny_ende"
    vocab_size = 400
"""


def _tiny_raw_corpus(folder: Path, shared: Path) -> None:
    """train 300, dev 20, test 20 real Multi30k caption pairs."""
    folder.mkdir()
    for language in ("en", "de"):
        with gzip.open(shared / f"train.{language}.gz", "rt", encoding="utf-8") as lines:
            text = [next(lines).rstrip("\n") for _ in range(340)]
        for split, part in (("train", text[:300]), ("dev", text[300:320]), ("test", text[320:])):
            (folder / f"{split}.{language}").write_text("\n".join(part) + "\n", encoding="utf-8")


def _tags(folder: Path) -> set:
    found = set()
    for path in glob.glob(str(folder / "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            found.update(value.tag for value in event.summary.value)
    return found


def test_generate_data_runs_datagen_once_then_trains_quietly(tmp_path, shared_data):
    (tmp_path / "tiny_problem.py").write_text(TINY_PROBLEM)
    _tiny_raw_corpus(tmp_path / "raw", shared_data / "multi30k")
    data, run = tmp_path / "data", tmp_path / "run"
    args = [
        "--problem=tiny_problem:TinyEnDe", f"--data_dir={data}", f"--output_dir={run}",
        f"--raw_dir={tmp_path / 'raw'}", "--generate_data", f"--hparams={TINY}",
        "--eval_steps=1", "--eval_every=2", "--save_every=2", "--log_every=1",
        "--eval_bleu_sentences=2", "--eval_decode_method=greedy",
    ]  # fmt: skip
    env = {"PYTHONPATH": str(tmp_path)}
    first = _run("t2t-trainer", *args, "--train_steps=2", home=tmp_path, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"generating the data of tiny_ende under {data}" in first.stdout
    assert "tiny_ende: generated" in first.stdout
    assert (data / "tiny_ende" / "metadata.json").is_file()
    assert tf.train.latest_checkpoint(str(run)).endswith("ckpt-2")
    # TensorFlow's start-up lines are gone; nothing else was hidden with them.
    assert not RUNTIME_LOG.search(first.stderr), first.stderr[-3000:]
    # TensorBoard: scalars grouped by run phase, BLEU also as a table from the first eval.
    assert {"train/loss", "train/learning_rate", "train/grad_norm"} <= _tags(run / "train")
    assert {"eval/loss", "eval/accuracy", "eval/bleu", "eval/bleu_table", "eval/samples"} <= (
        _tags(run / "eval")
    )
    # The data is there now: the rerun trains on, without datagen.
    second = _run("t2t-trainer", *args, "--train_steps=3", home=tmp_path, env=env)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "generating" not in second.stdout
    assert tf.train.latest_checkpoint(str(run)).endswith("ckpt-3")


def test_users_log_level_wins_over_the_quiet_start(tmp_path):
    quiet = _run("t2t-datagen", "--registry_help", home=tmp_path)
    loud = _run("t2t-datagen", "--registry_help", home=tmp_path, env={"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert quiet.returncode == loud.returncode == 0
    assert quiet.stderr == "", quiet.stderr[-2000:]
    assert RUNTIME_LOG.search(loud.stderr), loud.stderr[-2000:]
    assert quiet.stdout == loud.stdout
